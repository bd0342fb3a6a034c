"""What the run, verify and demo commands share: the store, criteria, agents and one builder of
the session's config from the options."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Any

import click

from portside.core.checks.runtime import TARGETS
from portside.core.session.review import POLICIES

POLICY = click.Choice(POLICIES)
TARGET_HELP = ", ".join(TARGETS)


class FiniteFloatRange(click.FloatRange):
    """A FloatRange that refuses nan and ±inf: ``nan < 0`` is false, so nan passed every
    bound check (a --timeout of nan never fires, --stall inf never ends a hung run)."""

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


def seconds() -> FiniteFloatRange:
    """A positive, finite number of seconds."""
    return FiniteFloatRange(min=0, min_open=True)


def non_negative() -> FiniteFloatRange:
    """Zero or a positive, finite number."""
    return FiniteFloatRange(min=0)


def is_utf8(value: str | Path) -> bool:
    """Whether ``value`` (argv decoded with surrogateescape) is text: a recording is UTF-8,
    so bytes that are not cannot be stored, nor name anything stored."""
    try:
        str(value).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown(value: str | Path) -> str:
    """``value`` as the user typed it, undecodable bytes as \\xNN (printable on any terminal)."""
    return str(value).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def command_text(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A shell command option: absent is fine; empty or blank is a usage error (an empty
    --reference was run, and failed as a crash, instead of being refused), and so are bytes
    that are not UTF-8 (the command is recorded as text: the engine died encoding it)."""
    if value is not None and not value.strip():
        raise click.BadParameter("is empty: give the command to run, e.g. \"python train.py\"",
                                 ctx, param)
    if value is not None and not is_utf8(value):
        raise click.BadParameter(f"'{shown(value)}' is not UTF-8 text (the session records its "
                                 "commands as text)", ctx, param)
    return value


def recorded_path(ctx: click.Context, param: click.Parameter, value: Path | None
                  ) -> Path | None:
    """A path the session records (its project, folder, criteria file): UTF-8 or refused."""
    if value is not None and not is_utf8(value):
        raise click.BadParameter(f"'{shown(value)}' is not a UTF-8 path (the session records "
                                 "it as text)", ctx, param)
    return value


def resolve_session(store: Any, ref: str, prefix: str = "") -> str:
    """The session ``ref`` names (id, unique prefix or 'last'), or a usage error (exit 2)."""
    from portside.store import StoreError

    from .exit_codes import UsageFailure

    if not is_utf8(ref):  # no stored id holds such bytes (and SQLite cannot take them)
        raise UsageFailure(f"{prefix}{shown(store.path)}: no session matches '{shown(ref)}'")
    try:
        return str(store.resolve_session(ref))
    except StoreError as exc:
        raise UsageFailure(f"{prefix}{exc}") from None


def db_option(f: Any) -> Any:
    return click.option(
        "--db",
        "db",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="SQLite file (default: $PORTSIDE_DB, else the user data dir's portside.db).",
    )(f)


def db_path(ctx: click.Context, db: Path | None) -> Path:
    from portside.store import resolve_db_path

    return resolve_db_path(db or (ctx.obj or {}).get("db"))


def open_store(ctx: click.Context, db: Path | None) -> Any:
    from portside.store import Store, StoreError

    from .exit_codes import UsageFailure

    path = db_path(ctx, db)
    try:
        return Store(path)
    except StoreError as exc:
        raise UsageFailure(str(exc)) from None
    except Exception as exc:  # sqlite3.DatabaseError on a file that is not a database
        raise UsageFailure(f"{shown(path)}: cannot open as a portside database: {exc}") from None


def headless_policy(policy: str | None, headless: bool) -> str:
    """Default ask on the screen, auto headless; headless has nobody to ask."""
    policy = policy or ("auto" if headless else "ask")
    if headless and policy == "ask":
        raise click.UsageError("--headless has no reviewer to ask: use --policy auto or runs-only")
    return policy


def agent_from_option(spec: str, model: str | None) -> Any:
    """`claude[:MODEL]`, `claude-code[:MODEL]` or `scripted:FILE` → an Agent; bad specs are usage
    errors. Whether it can start is `require_startable`'s question (it may run a CLI)."""
    return _agent(spec, model)


def require_startable(agent: Any) -> None:
    """An agent that cannot start (no key, no CLI, logged out) is a usage error, said before
    any run, with what to do (cli/preflight.py)."""
    from .exit_codes import UsageFailure
    from .preflight import preflight

    if agent is not None and (problem := preflight(agent)):
        raise UsageFailure(problem)


def _agent(spec: str, model: str | None) -> Any:
    if spec == "none":
        return None
    if spec.startswith("scripted:"):
        from portside.core.agent.scripted import ScriptedAgent

        return ScriptedAgent(Path(spec.removeprefix("scripted:")))
    if spec == "claude-code" or spec.startswith("claude-code:"):
        from portside.core.claude_code.live import ClaudeCodeAgent

        return ClaudeCodeAgent(spec.partition(":")[2] or model or None)
    if spec == "codex" or spec.startswith("codex:"):
        from portside.core.codex.live import CodexAgent

        return CodexAgent(spec.partition(":")[2] or model or None)
    if spec == "claude" or spec.startswith("claude:"):
        from portside.core.agent.claude import ClaudeAgent

        name = spec.partition(":")[2] or model or "claude-sonnet-4-5"
        return ClaudeAgent(model=name)
    raise click.BadParameter(f"{spec!r}: use claude, claude:MODEL, claude-code, "
                             "claude-code:MODEL, codex, codex:MODEL or scripted:FILE",
                             param_hint="--agent")


def claude_code_task(agent: Any, target: str, task: str | None,
                     task_file: Path | None) -> dict[str, Any]:
    """--task / --task-file for a Claude Code agent; its session id for the session's meta."""
    from portside.core.agent.task import default_task
    from portside.core.claude_code.live import ClaudeCodeAgent
    from portside.core.codex.live import CodexAgent

    if isinstance(agent, CodexAgent):
        agent.task = task or (task_file.read_text(encoding="utf-8") if task_file else None) \
            or default_task(target)
        return {}
    if not isinstance(agent, ClaudeCodeAgent):
        if task or task_file:
            raise click.UsageError("--task and --task-file go with --agent claude-code")
        return {}
    if task and task_file:
        raise click.UsageError("give --task or --task-file, not both")
    if task_file:
        try:
            task = task_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise click.BadParameter(f"{task_file}: {exc}", param_hint="--task-file") from None
    agent.task = task or default_task(target)
    return {"claude_code_session": agent.session_id}


def load_criteria(command: str, criteria_file: Path | None, target: str,
                  reference_target: str) -> Any:
    """The criteria of a run or verify session, its targets checked; a usage error exits 2."""
    from portside.core.checks import validate_target
    from portside.core.log.criteria import CriteriaError, load_criteria

    try:
        criteria = load_criteria(criteria_file)
        validate_target(target)
        validate_target(reference_target)
    except (CriteriaError, ValueError, OSError) as exc:
        click.echo(f"portside {command}: {exc}", err=True)
        sys.exit(2)
    return criteria


def session_config(command: str, *, project: Path, target: str, reference: str,
                   candidate: str | None, criteria_file: Path | None, reference_runs: int,
                   reference_target: str, timeout_s: float | None, stall_s: float | None,
                   policy: str, mode: str, agent: Any = None) -> Any:
    """The one builder of a SessionConfig from command-line options."""
    from portside.core.session.config import SessionConfig

    criteria = load_criteria(command, criteria_file, target, reference_target)
    return SessionConfig(
        project=project, target=target, reference_command=reference,
        candidate_command=candidate, criteria=criteria,
        criteria_path=str(criteria_file or ""), reference_runs=reference_runs,
        reference_target=reference_target, timeout_s=timeout_s, stall_s=stall_s, agent=agent,
        policy=policy, mode=mode, isolate=agent is not None,  # type: ignore[arg-type]
    )


def host_options(f: Any) -> Any:
    """--reference-host / --candidate-host / --ssh-config / --keep-remote."""
    for opt in reversed([
        click.option("--reference-host", default=None, metavar="HOST",
                     help="Run the references there: ssh://[user@]host[:port][/dir] or a Host "
                          "alias of the ssh config."),
        click.option("--candidate-host", default=None, metavar="HOST",
                     help="Run the candidate there (same forms as --reference-host)."),
        click.option("--ssh-config", type=click.Path(dir_okay=False, exists=True,
                     path_type=Path), default=None, help="An ssh config file of its own (ssh -F)."),
        click.option("--keep-remote", is_flag=True,
                     help="Leave the session's folder on the hosts (default: removed at the end)."),
    ]):
        f = opt(f)
    return f


def config_hosts(config: Any, reference_host: str | None, candidate_host: str | None
                 ) -> tuple[str | None, str | None]:
    """The hosts of each role: the command-line flag, else the criteria file's [hosts]."""
    hosts = config.criteria.hosts
    return reference_host or hosts.reference or None, candidate_host or hosts.candidate or None


def remote_hosts(command: str, reference_host: str | None, candidate_host: str | None,
                 ssh_config: Path | None) -> dict[str, Any]:
    """role → its hosts (one, or a comma-separated slice), each reached once before the
    session starts: a host that cannot be used is a clear error and exit 2, not a session of
    failed runs."""
    from portside.core.log.ssh_hosts import parse_hosts
    from portside.core.run.ssh import TRANSPORTS, RemoteError, check_host

    hosts: dict[str, Any] = {}
    checked: set[Any] = set()
    transport = os.environ.get("PORTSIDE_SSH_TRANSPORT")
    if (reference_host or candidate_host) and transport and transport not in TRANSPORTS:
        click.echo(f"portside {command}: PORTSIDE_SSH_TRANSPORT={transport!r}: expected one of "
                   f"{', '.join(TRANSPORTS)}", err=True)
        sys.exit(2)
    for role, spec, flag in (("reference", reference_host, "--reference-host ([hosts] reference)"),
                             ("candidate", candidate_host, "--candidate-host ([hosts] candidate)")):
        if not spec:
            continue
        try:
            slice_ = parse_hosts(spec)
            for host in slice_:
                if host not in checked:
                    check_host(host, ssh_config)
                    checked.add(host)
        except (ValueError, RemoteError) as exc:
            click.echo(f"portside {command}: {flag} {exc}", err=True)
            sys.exit(2)
        hosts[role] = slice_
    return hosts


def run_with_hosts(config: Any, store: Any, hosts: dict[str, Any], ssh_config: Path | None,
                   keep_remote: bool, **how: Any) -> int:
    """run_config, with the roles in ``hosts`` executed over SSH; their folders on the hosts
    are removed at the end (unless keep_remote), whatever the end. The hosts are recorded in
    the session's log (``session.started`` meta ``hosts``) for `portside run --resume`."""
    from .drive import drive, new_engine

    if hosts:
        config.meta["hosts"] = {
            **{role: ",".join(h.spec for h in slice_) for role, slice_ in hosts.items()},
            "ssh_config": str(ssh_config.resolve()) if ssh_config else None,
            "keep_remote": keep_remote}
    executors: list[Any] = []
    try:
        engine = new_engine(config, store)
        executors = attach_hosts(engine, hosts, ssh_config, keep_remote)
        return drive(engine, store, **how)
    finally:
        for executor in executors:
            executor.close()
        store.close()


def attach_hosts(engine: Any, hosts: dict[str, Any], ssh_config: Path | None,
                 keep_remote: bool) -> list[Any]:
    """Give each role in ``hosts`` its executor (a role sharing the other's hosts shares its
    executor, so one keeper and one folder per host); returns them, for closing."""
    from portside.core.run.ssh import SliceExecutor, SSHExecutor

    executors: list[Any] = []
    by_hosts: dict[Any, Any] = {}
    for role, slice_ in hosts.items():
        if slice_ not in by_hosts:
            each = [SSHExecutor(h, engine.session_id, ssh_config=ssh_config,
                                keep=keep_remote) for h in slice_]
            by_hosts[slice_] = each[0] if len(each) == 1 else SliceExecutor(each)
            executors.append(by_hosts[slice_])
        engine.verifier.executors[role] = by_hosts[slice_]
    return executors


def recorded_hosts(meta: dict[str, Any]) -> tuple[dict[str, Any], Path | None, bool]:
    """The hosts a session was recorded with (see run_with_hosts), each reached again before
    the resumed session goes on: hosts, ssh config, keep_remote."""
    rec = meta.get("hosts")
    if not isinstance(rec, dict):
        return {}, None, False
    config = Path(rec["ssh_config"]) if rec.get("ssh_config") else None
    if config is not None and not config.is_file():
        click.echo(f"portside run --resume: the session's ssh config {config} is gone", err=True)
        sys.exit(2)
    hosts = remote_hosts("run --resume", rec.get("reference"), rec.get("candidate"), config)
    return hosts, config, bool(rec.get("keep_remote"))
