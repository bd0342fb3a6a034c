"""Make untrusted text (run logs, agent output) safe to put on a terminal.

A training script can print escape sequences that move the cursor, retitle the window or fake
portside's own UI; none of that may reach the screen. Colour is dropped too: a log line is data.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

# CSI (ESC [ ... final), OSC (ESC ] ... BEL/ST), other two-byte ESC sequences, and C1 CSI/OSC.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"
    r"|\x1b[@-Z\\-_]"
    r"|\x9b[0-?]*[ -/]*[@-~]"
    r"|\x9d[^\x07\x9c]*[\x07\x9c]?"
)
_INTRODUCER = re.compile(r"[\x1b\x9b\x9d]")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Bidirectional controls (embeddings, overrides, isolates, marks) reorder what a terminal
# shows ("Trojan Source": a line that reads as one thing and is another); shown by name.
_BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
MAX_LINE = 4096


def _named(m: re.Match[str]) -> str:
    return f"<U+{ord(m.group()):04X}>"


def clean_line(text: str, max_len: int = MAX_LINE) -> str:
    """One display-safe line: escapes removed, `\\r` progress collapsed, controls shown as �,
    bidi controls by name (``<U+202E>``)."""
    if "\r" in text:
        # A progress bar redraws with \r: what a terminal would finally show is the last part.
        parts = [p for p in text.split("\r") if p]
        text = parts[-1] if parts else ""
    text = _ESCAPES.sub("", text)
    text = text.replace("\t", "    ")
    text = _BIDI.sub(_named, _CONTROLS.sub("\ufffd", text))
    if len(text) > max_len:
        text = text[:max_len] + f" … [{len(text) - max_len} more chars]"
    return text


def decode_line(raw: bytes) -> str:
    """Bytes from a process: invalid UTF-8 becomes U+FFFD instead of an exception."""
    return raw.decode("utf-8", errors="replace").rstrip("\n")


_CONTROLS_KEEP_NL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# What JSON may hold raw but a terminal (or a bidi-aware viewer) would act on.
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def clean_text(text: str) -> str:
    """Multi-line text (a CSV or Markdown export) safe for a terminal: escape sequences
    removed, control characters other than newline and tab shown as �, bidi controls by name."""
    return _BIDI.sub(_named, _CONTROLS_KEEP_NL.sub("\ufffd", _ESCAPES.sub("", text)))


def clean_text_stream(chunks: Iterable[str]) -> Iterator[str]:
    """``clean_text`` of the chunks joined, yielded as it goes (an export in constant memory).

    Pending text is cleaned and let go at a chunk ending in a newline once no escape sequence
    in it can still grow with what follows: every pattern starts at ESC, CSI or OSC, and the
    only ones that can run on (OSC, DCS: up to their terminator) are then the last match,
    ending exactly at the end of the pending text. A sequence left open holds the text back,
    so the result always equals cleaning the whole text at once."""
    pending = ""
    for chunk in chunks:
        pending += chunk
        if not pending.endswith("\n"):
            continue
        if _INTRODUCER.search(pending):
            last = None
            for last in _ESCAPES.finditer(pending):  # noqa: B007 (the last one is wanted)
                pass
            if last is not None and last.end() == len(pending):
                continue
        yield clean_text(pending)
        pending = ""
    if pending:
        yield clean_text(pending)


def json_safe(text: str) -> str:
    """JSON text with DEL, C1 controls (which JSON leaves raw, and some terminals obey: U+009B
    is CSI, U+009D OSC) and bidi controls written as \\u escapes: the same JSON value, inert
    on a terminal. JSON holds such characters only inside strings, where \\u is valid."""
    if not _JSON_UNSAFE.search(text):
        return text
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def markup_free(value: object) -> str:
    """One cleaned line for rich, to be wrapped in Text (never parsed as markup)."""
    return clean_line("" if value is None else str(value))
