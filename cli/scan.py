"""`portside scan`: the static inventory of what will not move to a TPU as it is (core/scan/scan.py)."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import click

from portside.core.safety.terminal_text import markup_free
from portside.core.scan.scan import KINDS, ScanResult, scan


def scan_cmd_body(target: Path, as_json: bool) -> int:
    """0: nothing found, 1: findings (like a linter, so a script can gate on it)."""
    result = scan(target)
    if as_json:
        sys.stdout.write(json.dumps(json_names(result.to_json())) + "\n")
    else:
        _print(result)
    return 1 if result.findings else 0


def _print(result: ScanResult) -> None:
    # Grouped by what to do, so each action is said once above the places it applies to.
    groups: dict[tuple[str, str], list[str]] = {}
    for f in result.findings:
        groups.setdefault((f.kind, f.action), []).append(
            f"{shown(f.path)}:{f.line}  {shown(f.what)}")
    for (kind, action), places in sorted(groups.items(), key=lambda g: KINDS.index(g[0][0])):
        click.echo(f"{kind} ({len(places)}): {action}")
        for place in places:
            click.echo("  " + markup_free(place))
    counts = ", ".join(f"{n} {k}" for k, n in result.counts().items()) or "nothing to port"
    click.echo(f"portside scan: {markup_free(shown(result.root))}: {result.files} files "
               f"({result.parsed} parsed) in {result.seconds:.2f} s: {counts}", err=True)


# What must not reach a terminal as it is: C0 and C1 controls and DEL (a newline or \r in a file
# name fakes lines, ESC and CSI drive the terminal), line and paragraph separators, bidi
# controls, and surrogates (a name's bytes that are not UTF-8, as Python decodes them).
_UNSHOWN = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e"
                      "\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match[str]) -> str:
    c = m.group()
    o = ord(c)
    if c in _NAMED:
        return _NAMED[c]
    if 0xDC80 <= o <= 0xDCFF:  # one byte of the name that is not UTF-8
        return f"\\x{o - 0xDC00:02x}"
    return f"\\x{o:02x}" if o < 0x80 else f"\\u{o:04x}"


def shown(text: str) -> str:
    """``text`` as one terminal line: a byte that is not UTF-8 as ``\\xNN``, a newline, tab,
    carriage return as ``\\n`` ``\\t`` ``\\r``, other controls as ``\\xNN`` (C0, DEL) or
    ``\\uNNNN`` (C1, separators, bidi): a name can neither fake lines nor drive the
    terminal (a backslash is left as it is, for readable names)."""
    return _UNSHOWN.sub(_escape, text)


def _utf8(text: str) -> tuple[str, str | None]:
    """``text`` as valid Unicode (undecodable bytes as U+FFFD) and, when that lost something,
    the original bytes in hex."""
    try:
        text.encode("utf-8")
        return text, None
    except UnicodeEncodeError:
        raw = os.fsencode(text) if not re.search("[\ud800-\udc7f]", text) \
            else text.encode("utf-8", "surrogatepass")
        return raw.decode("utf-8", "replace"), raw.hex()


def json_names(out: dict[str, Any]) -> dict[str, Any]:
    """``--json`` as valid UTF-8: a name whose bytes are not UTF-8 is written with U+FFFD for
    them (``path``, ``root``) and its exact bytes in hex beside (``path_hex``, ``root_hex``);
    json.dumps would otherwise write lone surrogates (\\udcff) strict parsers refuse."""
    out["root"], root_hex = _utf8(out["root"])
    if root_hex is not None:
        out["root_hex"] = root_hex
    for f in out["findings"]:
        for key in ("path", "what"):
            f[key], raw = _utf8(f[key])
            if raw is not None:
                f[f"{key}_hex"] = raw
    return out
