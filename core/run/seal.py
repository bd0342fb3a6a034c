"""The seal on a run's probe records: each line numbered and tagged with a key of its run.

portside gives every run a fresh random key (``PORTSIDE_PROBE_SEAL``); the probe numbers the
records of each process (``seq`` 0, 1, 2, ... per file and pid) and ends each line with
``"mac"``, a keyed BLAKE2b tag (128 bits) of the line before it under that key. The runner checks every line
as it reads it: a record copied from another run (another key), edited, replayed, reordered,
dropped from the middle, or written by anything that does not hold the key, fails, and so
does a file that shrinks under the reader. What fails becomes a ``tamper`` record of portside's
own (never a record of the run) and the ``evidence-tampered`` alarm.

What it cannot do: code running inside the run can read the key from its environment, as the
probe does, and seal what it likes. That is why the hardware is also read from outside the
run's processes (core/run/observe.py) and printed metrics are held against the probe's.

The probe (core/probe/_probe.py, stdlib only, loaded by path) writes the same format with its
own few lines; ``seal_line`` here is the reference a test holds it to.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

__all__ = ["ENV", "MAC_BYTES", "check_line", "new_key", "seal_line"]

ENV = "PORTSIDE_PROBE_SEAL"
MAC_BYTES = 16  # 128 bits of the tag, as 32 hex digits
_MARK = b', "mac": "'
_TAIL = len(_MARK) + 2 * MAC_BYTES + 2  # the mark, the hex digits, '"}'


def new_key() -> str:
    return secrets.token_hex(32)


def _mac(key: bytes, body: bytes) -> bytes:
    # BLAKE2b in its keyed mode is a MAC of its own (RFC 7693): no HMAC construction around
    # it, and about a third of HMAC-SHA256's cost per line here, on both sides (the probe
    # seals every step; the runner checks every line). Keys are up to 64 bytes (new_key: 64).
    return hashlib.blake2b(body, key=key, digest_size=MAC_BYTES).hexdigest().encode()


def seal_line(key: str, body: str) -> str:
    """``body`` (one JSON object, ``seq`` included) with its tag appended, no newline."""
    tag = _mac(key.encode(), body.encode()).decode()
    return f'{body[:-1]}, "mac": "{tag}"}}'


def check_line(key: bytes, raw: bytes) -> tuple[bytes, str]:
    """The line as the probe wrote it before sealing, and "" when its tag holds; else
    (b"", why). ``raw``: one line, without its newline (trailing whitespace ignored)."""
    raw = raw.rstrip()
    cut = len(raw) - _TAIL
    if cut <= 0 or raw[cut: cut + len(_MARK)] != _MARK or not raw.endswith(b'"}'):
        return b"", "unsealed record"
    body = raw[:cut] + b"}"
    if not hmac.compare_digest(_mac(key, body), raw[cut + len(_MARK): -2]):
        return b"", "seal does not match (written without this run's key, or edited)"
    return body, ""
