"""`portside attach [DIR]`: review the Claude Code session the user runs in DIR themselves."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from .options import open_store, run_with_hosts, session_config


def attach(ctx: click.Context, tree: Path, *, reference: str, candidate: str | None,
           target: str, criteria_file: Path | None, reference_runs: int,
           reference_target: str, policy: str, headless: bool, as_json: bool,
           timeout_s: float | None, stall_s: float | None, no_sandbox: bool,
           db: Path | None, fresh_references: bool = False) -> None:
    from portside.core.claude_code.attach_hooks import AttachError, install, uninstall
    from portside.core.claude_code.attach_wait import wait_text
    from portside.core.claude_code.attached import AttachedClaudeCode
    from portside.core.run.sandbox import auto_refusal

    tree = tree.resolve()
    if refusal := auto_refusal(policy, True, no_sandbox):
        raise click.UsageError(refusal)
    # Refuse before any session is recorded when the settings cannot be changed and restored;
    # what a killed attach left is put back here, and said (it would be silent otherwise).
    try:
        inst = install(tree, "/nonexistent/portside-attach-check")
        for said in (inst.recovered, uninstall(inst)):
            if said:
                click.echo(f"portside attach: {said}", err=True)
    except (AttachError, OSError) as exc:
        click.echo(f"portside attach: {exc}", err=True)
        sys.exit(2)
    agent = AttachedClaudeCode(tree)
    if headless:  # on the screen the Agent column says it (stderr would tear the screen)
        click.echo(f"portside attach: {wait_text(reference_runs)}", err=True)
        agent.on_ready = lambda url: click.echo(
            f"portside attach: hooks in {tree}/.claude/settings.local.json; run `claude` in "
            f"{tree} (it works in your own tree). Ends with that session, or Ctrl-C.", err=True)
    config = session_config(
        "attach", project=tree, target=target, reference=reference, candidate=candidate,
        criteria_file=criteria_file, reference_runs=reference_runs,
        reference_target=reference_target, timeout_s=timeout_s, stall_s=stall_s,
        policy=policy, mode="headless" if headless else "live", agent=agent)
    config.sandbox = not no_sandbox
    config.meta.update({"attached_tree": str(tree)})
    if fresh_references:  # references stored in the database are reused otherwise (as in run)
        config.meta["fresh_references"] = True
    sys.exit(run_with_hosts(config, open_store(ctx, db), {}, None, False,
                            headless=headless, as_json=as_json))


def attach_options(f: Any) -> Any:
    from portside.core.checks.runtime import TARGETS

    from .options import POLICY, TARGET_HELP, command_text, recorded_path, seconds
    from .stored_references import fresh_option

    for opt in reversed([
        click.argument("tree", required=False, default=".", callback=recorded_path,
                       type=click.Path(file_okay=False, exists=True, path_type=Path)),
        click.option("--reference", "reference", callback=command_text, required=True,
                     help="Reference command, run in a copy of DIR as it is now."),
        click.option("--candidate", "candidate", callback=command_text, default=None,
                     help="Candidate command (default: the reference's)."),
        click.option("--target", type=click.Choice(TARGETS), default="cpu", show_default=True,
                     help=TARGET_HELP),
        click.option("--criteria", "criteria_file", callback=recorded_path,
                     type=click.Path(dir_okay=False, path_type=Path)),
        click.option("--reference-runs", type=click.IntRange(1, 20), default=2,
                     show_default=True),
        click.option("--reference-target", type=click.Choice(TARGETS), default="cpu",
                     show_default=True),
        click.option("--policy", type=POLICY, default=None,
                     help="Who decides: the reviewer (ask), or policy. Default ask, auto "
                          "when headless."),
        click.option("--headless", is_flag=True, help="No screen: a log, then the summary."),
        click.option("--json", "as_json", is_flag=True,
                     help="With --headless: one JSON object on stdout."),
        click.option("--timeout", "timeout_s", type=seconds(), default=None),
        click.option("--stall", "stall_s", type=seconds(), default=None),
        click.option("--no-sandbox", "no_sandbox", is_flag=True,
                     help="Run the candidate without the bubblewrap sandbox."),
        fresh_option,
    ]):
        f = opt(f)
    return f
