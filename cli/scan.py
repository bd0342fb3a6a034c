"""`portside scan`: the static inventory of what will not move to a TPU as it is (core/workspace/scan.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from portside.core.safety.terminal_text import markup_free
from portside.core.workspace.scan import KINDS, ScanResult, scan


def scan_cmd_body(target: Path, as_json: bool) -> int:
    """0: nothing found, 1: findings (like a linter, so a script can gate on it)."""
    result = scan(target)
    if as_json:
        sys.stdout.write(json.dumps(result.to_json()) + "\n")
    else:
        _print(result)
    return 1 if result.findings else 0


def _print(result: ScanResult) -> None:
    # Grouped by what to do, so each action is said once above the places it applies to.
    groups: dict[tuple[str, str], list[str]] = {}
    for f in result.findings:
        groups.setdefault((f.kind, f.action), []).append(
            f"{f.path}:{f.line}  {f.what}")
    for (kind, action), places in sorted(groups.items(), key=lambda g: KINDS.index(g[0][0])):
        click.echo(f"{kind} ({len(places)}): {action}")
        for place in places:
            click.echo("  " + markup_free(place))
    counts = ", ".join(f"{n} {k}" for k, n in result.counts().items()) or "nothing to port"
    click.echo(f"portside scan: {markup_free(result.root)}: {result.files} files "
               f"({result.parsed} parsed) in {result.seconds:.2f} s: {counts}", err=True)
