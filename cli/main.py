"""The `portside` command. Textual is imported only by the commands that open the UI."""

from __future__ import annotations

import datetime as dt
import importlib.util
import sys
from pathlib import Path
from typing import Any

import click

from portside.core import __version__
from portside.core.checks.runtime import TARGETS as TARGETS_CHOICE

from .attach import attach_options as _attach_options
from .drive import run_config, warm
from .exit_codes import UsageFailure
from .options import (
    POLICY,
    TARGET_HELP,
    agent_from_option,
    claude_code_task,
    command_text,
    config_hosts,
    headless_policy,
    host_options,
    non_negative,
    open_store,
    recorded_path,
    remote_hosts,
    require_startable,
    resolve_session,
    run_with_hosts,
    seconds,
    session_config,
)
from .options import db_option as _db_option
from .options import open_store as _open_store
from .stored_references import fresh_option as _fresh_option


def _when(ts: float | None) -> str:
    if not ts:
        return "-"
    try:
        return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, ValueError, OSError):  # a time no calendar holds: say so, go on
        return "?"


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@_db_option
@click.version_option(__version__, prog_name="portside")
@click.pass_context
def main(ctx: click.Context, db: Path | None) -> None:
    """portside: review a coding agent while it ports a PyTorch project from GPUs to TPUs."""
    ctx.ensure_object(dict)
    ctx.obj["db"] = db
    if ctx.invoked_subcommand is None:
        ctx.invoke(sessions_cmd)


@main.command("sessions")
@_db_option
@click.option("--plain", is_flag=True, help="Print a table instead of opening the screen.")
@click.pass_context
def sessions_cmd(ctx: click.Context, db: Path | None = None, plain: bool = False) -> None:
    """The sessions in the database: a screen on a terminal (enter replays), else a table."""
    if not plain and sys.stdin.isatty() and sys.stdout.isatty():
        _sessions_screen(ctx, db)
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from portside.core.safety.terminal_text import markup_free

    store = _open_store(ctx, db)
    rows = store.sessions()
    # Piped output keeps whole ids (rich would wrap to 80 columns).
    console = Console(width=None if sys.stdout.isatty() else 200)
    if not rows:
        console.print(Text(f"No sessions in {markup_free(store.path)} yet."))
        return
    # Ids and paths may come from imported recordings: cleaned, and Text, never rich markup.
    table = Table(title=Text(f"sessions in {markup_free(store.path)}"))
    for col in (
        "session",
        "project",
        "target",
        "agent",
        "started (UTC)",
        "attempts",
        "failures",
        "silent",
        "interventions",
        "human min",
        "verdict",
    ):
        table.add_column(col)
    for r in rows:
        cells = (
            r["session_id"],
            Path(r["project"] or "").name or "-",
            r["target"] or "-",
            r["agent"] or "-",
            _when(r["started_at"]),
            str(r["attempts"]),
            str(r["failures"]),
            str(r["silent_failures"]),
            str(r["interventions"]),
            f"{(r['human_s'] or 0) / 60:.1f}",
            r["verdict"] or "open",
        )
        table.add_row(*(Text(markup_free(c)) for c in cells))
    console.print(table)


def _sessions_screen(ctx: click.Context, db: Path | None) -> None:
    from portside.store.exports import session_costs
    from portside.tui.sessions_app import SessionsApp

    store = _open_store(ctx, db)
    try:
        # q in a replay opened from here comes back to the list; q on the list leaves.
        while chosen := SessionsApp(_listed(store, session_costs), str(store.path)).run():
            from portside.core.replay.opening import PendingOpening
            from portside.core.replay.player import DEFAULT_IDLE_LIMIT, Replayer
            from portside.store.replay_frames import FrameCache, point_key
            from portside.store.replay_source import StoreSource
            from portside.tui.replay_app import run_replay

            from .study_review import review_relay, review_session

            # A study's running session that waits for a reviewer opens live, to decide.
            relay = review_relay(store, chosen)
            if relay is not None:
                review_session(store, chosen, relay)
                continue
            source = StoreSource(store, chosen)
            # Opened in a thread, its first frame cached; the screen's mount waits for it.
            cache = FrameCache(store, chosen, point_key(None, DEFAULT_IDLE_LIMIT))
            run_replay(store, chosen,
                       PendingOpening(source, lambda s=source: Replayer(s), cache), close=False)
    finally:
        store.close()


def _listed(store: Any, session_costs: Any) -> list[dict[str, Any]]:
    rows = store.sessions()
    from portside.store.study_log import session_studies

    from .study_review import waits_for_reviewer

    studies = session_studies(store)
    for r in rows:
        if r["session_id"] in studies:
            r["study_name"], task = studies[r["session_id"]]
            r["study"] = f"{r['study_name']} · {task}"
            # (Open, whatever an interrupted end before its resume left in the row.)
            if r.get("verdict") != "pass" and waits_for_reviewer(store, r["session_id"]):
                r["verdict"] = "review"  # enter opens it live, to decide its cards
        try:
            cost = session_costs(store, r["session_id"])
            r["compute_usd"], r["total_usd"] = cost["compute_usd"], cost["total_usd"]
        except Exception:  # a cost is a nicety here, never a reason not to list
            r["compute_usd"] = r["total_usd"] = None
    return rows


@main.command("show")
@click.argument("session")
@_db_option
@click.option("--limit", type=int, default=0, help="Show at most this many events (0 = all).")
@click.pass_context
def show_cmd(ctx: click.Context, session: str, db: Path | None, limit: int) -> None:
    """Print a session's summary and its events as text."""
    from rich.console import Console
    from rich.text import Text

    from portside.store import StoreError

    store = _open_store(ctx, db)
    sid = resolve_session(store, session)
    try:
        info = store.session(sid)
    except StoreError as exc:
        raise UsageFailure(str(exc)) from None
    from portside.core.safety.terminal_text import markup_free

    led = store.ledger(sid)
    cost = led.cost()
    console = Console(highlight=False)
    # Text, never markup: ids and paths may hold brackets.
    console.print(Text.assemble(
        (markup_free(sid), "bold"), markup_free(f"  project {info['project']}  target "
        f"{info['target']}  agent {info['agent']}  verdict {info['verdict'] or 'open'}")))
    reason = led.ended.reason if led.ended is not None else ""
    if reason:
        # Why it ended: an engine failure's message is read here, not only on the screen.
        failed = reason.startswith("engine failed")
        console.print(Text(f"reason: {markup_free(reason)}", style="bold red" if failed else ""))
    console.print(Text(
        f"attempts {led.attempts}  failures {led.failures} (silent {led.silent_failures})  "
        f"interventions {led.interventions} (steering {led.steering})  "
        f"human {led.human_minutes:.1f} min  alarms {len(led.alarms)}"
        + (f"  review notes {led.review_notes}" if led.review_notes else "")))
    console.print(Text(
        f"cost: compute ${cost['compute_usd']:.4f}  tokens ${cost['tokens_usd']:.4f}  "
        f"human ${cost['human_usd']:.4f}  total ${cost['total_usd']:.4f}"))
    _print_events(store, sid, limit)


def _print_events(store: Any, sid: str, limit: int) -> None:
    """One line per event, written as plain text: each line is cleaned by event_line, and
    rich's print (a measure, a wrap and a flush per line) took 0.6 ms a line, nine tenths of
    `show` on a long session."""
    from portside.core.log.render import event_line

    out = sys.stdout
    start = None
    try:
        for n, event in enumerate(store.events(sid)):
            if limit and n >= limit:
                out.write(f"… {store.event_count(sid) - limit} more\n")
                break
            start = start or event.ts
            out.write(event_line(event, start) + "\n")
        out.flush()
    except BrokenPipeError:  # `| head`: stop quietly
        sys.stderr.close()


@main.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@_db_option
@click.option("--as", "rename_to", default=None, help="Import under this session id instead.")
@click.option("--claude-code", "claude_code", is_flag=True, help="FILE is a Claude Code transcript "
              "(~/.claude/projects/<dir>/<session>.jsonl) or a `claude -p --output-format "
              "stream-json --verbose` log.")
@click.option("--codex", "codex", is_flag=True, help="FILE is a Codex rollout "
              "($CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl).")
@click.option("--target", default=None, help="With --claude-code / --codex: the target it "
              "ported to.")
@click.pass_context
def import_cmd(ctx: click.Context, file: Path, db: Path | None, rename_to: str | None,
               claude_code: bool = False, target: str | None = None,
               codex: bool = False) -> None:
    """Import a JSONL recording, or a finished Claude Code or Codex session (refused whole if
    malformed)."""
    from portside.store import StoreError
    from portside.store.jsonl import RecordingError, import_file

    store = _open_store(ctx, db)
    try:
        if claude_code and codex:
            raise UsageFailure("give --claude-code or --codex, not both")
        if codex:
            from .import_codex import import_codex

            sid = import_codex(store, file, rename_to, target)
        elif claude_code:
            from .import_cc import import_claude_code

            sid = import_claude_code(store, file, rename_to, target)
        else:
            sid = import_file(store, file, rename_to)
    except (RecordingError, StoreError) as exc:
        from portside.core.safety.terminal_text import clean_line

        raise UsageFailure(clean_line(str(exc))) from None
    warm(store, sid)
    click.echo(f"imported {sid} ({store.event_count(sid)} events) into {store.path}")


@main.command("export")
@click.argument("session", required=False)
@_db_option
@click.option(
    "--what",
    type=click.Choice(["events", "interventions", "alarms", "runs", "report"]),
    default="events",
    show_default=True,
)
@click.option("--format", "fmt", type=click.Choice(["jsonl", "json", "csv", "md"]), default=None,
              help="Default: jsonl for events, md for report, csv otherwise.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None)
@click.option("--all", "all_sessions", is_flag=True, help="Every session (not with events/report).")
@click.pass_context
def export_cmd(
    ctx: click.Context,
    session: str | None,
    db: Path | None,
    what: str,
    fmt: str | None,
    output: Path | None,
    all_sessions: bool,
) -> None:
    """Export a session: its events as a JSONL recording, its interventions, alarms or runs
    (csv, json, jsonl, md), or a Markdown report for a pull request."""
    from .exports import export

    export(_open_store(ctx, db), session, what, fmt, output, all_sessions)

REFERENCE_RUNS_HELP = (
    "Independent reference runs. Run #n shifts the seeds the script sets (torch.manual_seed, "
    "random.seed, numpy) by n-1, so #2 on is another seed of the same code: their spread is "
    "the envelope drift is judged against. The candidate runs with #1's seeds.")


@main.command("demo")
@click.option("--headless", is_flag=True, help="No screen: run to the end and print the summary.")
@click.option("--policy", type=POLICY, default=None,
              help="Default: ask on the screen, auto when headless.")
@click.option("--speed", type=non_negative(), default=None,
              help="Pace of the recorded agent (default 1 on screen, 0 headless = no waits).")
@click.option("--json", "as_json", is_flag=True, help="With --headless: one JSON object on stdout.")
@_db_option
@click.pass_context
def demo_cmd(ctx: click.Context, headless: bool, policy: str | None, speed: float | None,
             as_json: bool, db: Path | None) -> None:
    """Run the embedded demo: a GPU project ported to torch_xla by a recorded agent."""
    from .demo import check_in_background, demo_config, find_xla_python
    from .xla_check import quick_xla_python

    policy = headless_policy(policy, headless)
    if importlib.util.find_spec("torch") is None:  # the runs need it: say so before any run
        raise UsageFailure(
            f"torch is not installed in {sys.executable} (the demo's training runs use it): "
            "`pip install torch` (a CPU build is enough: `pip install torch --index-url "
            "https://download.pytorch.org/whl/cpu`)")
    store = open_store(ctx, db)
    # On the screen, torch_xla found on disk is enough to start: its import (~20 s) is checked
    # behind the first frame. Headless, it is checked first, and the wait is said.
    xla, verified = quick_xla_python()
    how: dict[str, object] = {}
    if xla and not verified:
        if headless:
            click.echo(f"portside demo · checking that torch_xla imports in {xla} "
                       "(once; cached after)…", err=True)
            xla = find_xla_python()
        else:
            how["on_app"] = check_in_background(xla)
    try:
        config, banner = demo_config(
            policy=policy, speed=speed if speed is not None else (0.0 if headless else 1.0),
            xla_python=xla, headless=headless,
            workdir=None,
        )
    except (FileNotFoundError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"portside demo · {banner}", err=True)
    sys.exit(run_config(config, store, headless=headless, as_json=as_json, **how))


@main.command("run")
@click.argument("project", required=False, callback=recorded_path,
                type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--target", type=click.Choice(TARGETS_CHOICE), default=None, help=TARGET_HELP)
@click.option("--reference", "reference", callback=command_text, default=None, help="Reference command (default: python train.py).")
@click.option("--candidate", "candidate", callback=command_text, default=None, help="Candidate command (default: the reference's).")
@click.option("--criteria", "criteria_file", callback=recorded_path,
              type=click.Path(dir_okay=False, path_type=Path))
@click.option("--reference-runs", type=click.IntRange(1, 20), default=2, show_default=True,
              help=REFERENCE_RUNS_HELP)
@click.option("--reference-target", type=click.Choice(TARGETS_CHOICE), default="cpu",
              show_default=True)
@click.option("--agent", "agent_spec", default="none", show_default=True,
              help="claude, claude:MODEL, claude-code[:MODEL] (a real Claude Code session), "
              "codex[:MODEL] (the Codex CLI's app-server), scripted:FILE, or none "
              "(verification only).")
@click.option("--task", "task", default=None, help="The task for --agent claude-code "
              "(default: a numerics-preserving port to --target).")
@click.option("--task-file", "task_file", type=click.Path(dir_okay=False, exists=True,
              path_type=Path), default=None, help="Read the task from this file.")
@click.option("--model", default=None, help="Claude model for --agent claude.")
@click.option("--policy", type=POLICY, default=None,
              help="Who decides edits: the reviewer (ask), or policy. Default ask, auto when headless.")
@click.option("--headless", is_flag=True, help="No screen: a log, then the summary.")
@click.option("--timeout", "timeout_s", type=seconds(), default=None)
@click.option("--stall", "stall_s", type=seconds(), default=None)
@click.option("--json", "as_json", is_flag=True, help="With --headless: one JSON object on stdout.")
@click.option("--resume", "resume", default=None, help="Continue a killed session from its log.")
@click.option("--no-sandbox", "no_sandbox", is_flag=True,
              help="Agent sessions: run without the bubblewrap sandbox (needed for --policy auto "
                   "where none is available).")
@click.option("--trust", is_flag=True, help="With --resume: allow resuming an imported recording "
              "(it runs the recording's commands).")
@host_options
@_fresh_option
@_db_option
@click.pass_context
def run_cmd(ctx: click.Context, project: Path | None, target: str | None, reference: str | None,
            candidate: str | None, criteria_file: Path | None, reference_runs: int,
            reference_target: str, agent_spec: str, model: str | None, policy: str | None,
            headless: bool, timeout_s: float | None, stall_s: float | None, as_json: bool,
            resume: str | None, no_sandbox: bool, db: Path | None, task: str | None = None,
            task_file: Path | None = None, trust: bool = False,
            reference_host: str | None = None, candidate_host: str | None = None,
            ssh_config: Path | None = None, keep_remote: bool = False,
            fresh_references: bool = False) -> None:
    """Review a live migration session (with an agent, or verification runs only)."""
    if resume:
        sys.exit(_resume(ctx, resume, db, headless=headless, as_json=as_json, trust=trust))
    if target is None:
        raise click.UsageError("--target is required (e.g. --target tpu)")
    policy = headless_policy(policy, headless)
    agent = agent_from_option(agent_spec, model)
    require_startable(agent)
    meta = claude_code_task(agent, target, task, task_file)
    if agent is not None and project is None:
        raise click.UsageError("an agent session needs PROJECT (the folder to port)")
    from portside.core.run.sandbox import auto_refusal

    if refusal := auto_refusal(policy, agent is not None, no_sandbox):
        raise click.UsageError(refusal)
    config = session_config(
        "run", project=(project or Path.cwd()).resolve(), target=target,
        reference=reference or "python train.py", candidate=candidate,
        criteria_file=criteria_file, reference_runs=reference_runs,
        reference_target=reference_target, timeout_s=timeout_s, stall_s=stall_s,
        policy=policy, mode="headless" if headless else "live", agent=agent)
    config.sandbox = not no_sandbox
    config.meta.update(meta)
    if fresh_references:
        config.meta["fresh_references"] = True
    hosts = remote_hosts("run", *config_hosts(config, reference_host, candidate_host), ssh_config)
    sys.exit(run_with_hosts(config, open_store(ctx, db), hosts, ssh_config, keep_remote,
                            headless=headless, as_json=as_json))


def _resume(ctx: click.Context, ref: str, db: Path | None, **how: Any) -> int:
    """`run --resume`: its refusals (no such session, already ended, imported without --trust,
    still running) are usage errors, exit 2 as in every command."""
    from .resume import resume_session

    store = _open_store(ctx, db)
    try:
        resolve_session(store, ref, "cannot resume: ")  # bytes: refused, not a crash
    finally:
        store.close()
    try:
        return int(resume_session(ctx, ref, db, **how))
    except click.ClickException as exc:
        if exc.exit_code != 1:
            raise
        raise UsageFailure(exc.message) from None


# `verify` runs unattended (CI): a run that neither steps nor prints for this long is hung.
# 30 min leaves room for the first XLA compile of a large model, which prints nothing.
VERIFY_STALL_S = 1800.0


@main.command("verify")
@click.option("--reference", "reference", callback=command_text, required=True, help="Reference command (shell string).")
@click.option("--candidate", "candidate", callback=command_text, default=None,
              help="Candidate command (shell string; with --session default the reference's).")
@click.option("--target", type=click.Choice(TARGETS_CHOICE), required=True, help=TARGET_HELP)
@click.option("--reference-runs", type=click.IntRange(1, 20), default=2, show_default=True,
              help=REFERENCE_RUNS_HELP)
@click.option("--reference-target", type=click.Choice(TARGETS_CHOICE), default="cpu",
              show_default=True)
@click.option("--criteria", "criteria_file", callback=recorded_path,
              type=click.Path(dir_okay=False, path_type=Path))
@click.option("--cwd", type=click.Path(file_okay=False, exists=True, path_type=Path), default=".",
              callback=recorded_path)
@click.option("--timeout", "timeout_s", type=seconds(), default=None,
              help="Wall limit per run, seconds.")
@click.option("--stall", "stall_s", type=seconds(), default=None,
              help="Kill a run with no new step record and no output for this long "
                   f"(default {VERIFY_STALL_S:g} s: a first XLA compile fits, a hang ends).")
@click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON object on stdout.")
@click.option("-v", "--verbose", is_flag=True, help="Show the runs' output lines too.")
@host_options
@click.option("--localize", "localize_", is_flag=True,
              help="After a drift, clipping or goal alarm: find where the candidate first "
              "diverges (portside localize) and add it as `divergence`.")
@click.option("--session", "session", default=None, metavar="ID",
              help="Verify an imported or attached Claude Code session: the references on the "
              "project as it was before it, the candidate on the tree it left (copies: rebuilt "
              "from an import's edits, or from the tree before that attach kept; see --tree / "
              "--before).")
@click.option("--tree", type=click.Path(file_okay=False, exists=True, path_type=Path),
              default=None, callback=recorded_path, help="With --session: the project as the session left it (default: "
              "the folder it ran in).")
@click.option("--before", type=click.Path(file_okay=False, exists=True, path_type=Path),
              default=None, callback=recorded_path, help="With --session: the project as it was before the session.")
@_fresh_option
@_db_option
@click.pass_context
def verify_cmd(ctx: click.Context, reference: str, candidate: str | None, target: str,
               reference_runs: int, reference_target: str, criteria_file: Path | None, cwd: Path,
               timeout_s: float | None, stall_s: float | None, as_json: bool, verbose: bool,
               reference_host: str | None, candidate_host: str | None, ssh_config: Path | None,
               keep_remote: bool, localize_: bool, db: Path | None, session: str | None = None,
               tree: Path | None = None, before: Path | None = None,
               fresh_references: bool = False) -> None:
    """Verify a candidate run against reference runs, headless (exit 0 pass, 1 fail, 2 usage)."""
    stall_s = VERIFY_STALL_S if stall_s is None else stall_s
    if session is None and (tree or before):
        raise click.UsageError("--tree and --before go with --session")
    if session is None and candidate is None:
        raise click.UsageError("--candidate is required (or --session ID: an imported or "
                               "attached session)")
    trees = None
    if session is not None:
        from .import_cc import imported_trees

        trees = imported_trees(open_store(ctx, db), session, tree, before)
    try:
        config = session_config(
            "verify", project=trees.reference if trees else cwd.resolve(), target=target,
            reference=reference, candidate=candidate, criteria_file=criteria_file,
            reference_runs=reference_runs, reference_target=reference_target,
            timeout_s=timeout_s, stall_s=stall_s, policy="auto", mode="verify")
        config.localize = localize_
        if fresh_references:
            config.meta["fresh_references"] = True
        if trees:
            trees.apply(config)
        hosts = remote_hosts("verify", *config_hosts(config, reference_host, candidate_host),
                             ssh_config)
        code = run_with_hosts(config, open_store(ctx, db), hosts, ssh_config, keep_remote,
                              headless=True, as_json=as_json, show_output=verbose,
                              interrupted="portside verify: interrupted; runs killed, session "
                              "recorded as failed")
    finally:
        if trees:
            trees.close()
    sys.exit(code)


@main.command("localize")
@click.option("--reference", "reference", callback=command_text, required=True, help="Reference command (shell string).")
@click.option("--candidate", "candidate", callback=command_text, required=True, help="Candidate command (shell string).")
@click.option("--steps", type=click.IntRange(1, 100), default=2, show_default=True,
              help="Optimizer steps to trace and compare.")
@click.option("--cwd", type=click.Path(file_okay=False, exists=True, path_type=Path), default=".",
              callback=recorded_path)
@click.option("--timeout", "timeout_s", type=seconds(),
              default=900.0, show_default=True, help="Wall limit per run, seconds.")
@click.option("--rtol", type=non_negative(), default=None,
              help="Relative tolerance for every dtype (default: by dtype, e.g. 1e-4 for fp32).")
@click.option("--keep", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write the traces into this folder (default: a fresh temporary one).")
@click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON object on stdout.")
def localize_cmd(reference: str, candidate: str, steps: int, cwd: Path, timeout_s: float,
                 rtol: float | None, keep: Path | None, as_json: bool) -> None:
    """Where the candidate first diverges from the reference: input, a module, the loss, a
    gradient, clipping or an update (exit 0 none, 1 found, 2 could not trace)."""
    from .localize import localize_cmd_body

    sys.exit(localize_cmd_body(reference, candidate, steps, cwd, as_json, timeout_s, keep, rtol))


@main.command("replay")
@click.argument("session")
@_db_option
@click.option("--speed", type=non_negative(), default=1.0, show_default=True,
              help="Playback speed; 0 plays as fast as possible.")
@click.option("--from", "from_", default=None, metavar="WHERE",
              help="Start at alarm:N, intervention:N, seq:N (N from 1, or 'last') or time:SECONDS.")
@click.option("--headless", is_flag=True, help="Print the events as text instead of the screen.")
@click.option("--idle-limit", type=non_negative(), default=2.0, show_default=True,
              help="Play idle gaps longer than this many seconds as this long (0: keep them).")
@click.pass_context
def replay_cmd(ctx: click.Context, session: str, db: Path | None, speed: float,
               from_: str | None, headless: bool, idle_limit: float) -> None:
    """Replay a session (id, prefix, 'last', or a FILE.jsonl recording) with its original timing."""
    from .exports import replay

    replay(lambda: _open_store(ctx, db), session, speed, from_, headless, idle_limit)


@main.command("serve", context_settings={"ignore_unknown_options": True,
                                         "allow_interspersed_args": False})
@click.option("--port", type=click.IntRange(0, 65535), default=0,
              help="Port on 127.0.0.1 (default: a free one, printed).")
@_db_option
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def serve_cmd(ctx: click.Context, port: int, db: Path | None, args: tuple[str, ...]) -> None:
    """The same app in a browser tab: `portside serve run ./project --target tpu`,
    `portside serve replay SESSION`. Listens on 127.0.0.1 only; prints the URL (with its token)."""
    from .serve import serve

    # --db before the served command is serve's (after it, the served command's own).
    db = db or (ctx.obj or {}).get("db")
    serve(list(args), str(db) if db else None, port)


@main.command("scan")
@click.argument("target", type=click.Path(exists=True, path_type=Path), default=".")
@click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON object on stdout.")
def scan_cmd(target: Path, as_json: bool) -> None:
    """Before a port: what in DIR (or one file) will not move to a TPU as it is, each with its
    file:line and what to do. Static: reads and parses, never imports or runs the code (exit 0
    nothing found, 1 findings)."""
    from .scan import scan_cmd_body

    sys.exit(scan_cmd_body(target, as_json))


@main.command("stats")
@_db_option
@click.option("--project", default=None, help="Only sessions of this project (path or its name).")
@click.option("--since", default=None, metavar="DATE", help="Only sessions started on or after "
              "this date (YYYY-MM-DD or ISO 8601, UTC).")
@click.option("--format", "fmt", type=click.Choice(["md", "csv", "json"]), default="md",
              show_default=True)
@click.pass_context
def stats_cmd(ctx: click.Context, db: Path | None, project: str | None, since: str | None,
              fmt: str) -> None:
    """The study's table: attempts, failures, silent failures, interventions, human minutes and
    cost per session and in total."""
    from .exports import stats

    stats(_open_store(ctx, db), project, since, fmt)


@main.command("attach")
@_attach_options
@_db_option
@click.pass_context
def attach_cmd(ctx: click.Context, tree: Path, reference: str, candidate: str | None,
               target: str, criteria_file: Path | None, reference_runs: int,
               reference_target: str, policy: str | None, headless: bool, as_json: bool,
               timeout_s: float | None, stall_s: float | None, no_sandbox: bool,
               db: Path | None, fresh_references: bool = False) -> None:
    """Review the Claude Code session you run yourself in TREE (default .): hooks in
    TREE/.claude/settings.local.json for its duration, answered by portside over a Unix
    socket only you can reach."""
    from .attach import attach

    attach(ctx, tree, reference=reference, candidate=candidate, target=target,
           criteria_file=criteria_file, reference_runs=reference_runs,
           reference_target=reference_target, policy=headless_policy(policy, headless),
           headless=headless, as_json=as_json, timeout_s=timeout_s, stall_s=stall_s,
           no_sandbox=no_sandbox, db=db, fresh_references=fresh_references)
from .study import study_group  # noqa: E402 (registered after the commands above)

main.add_command(study_group)

if __name__ == "__main__":
    main()
