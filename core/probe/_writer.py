"""The probe's record writer: one JSONL file per rank (or per unranked process), every line
numbered and, under a run's seal key, tagged with its keyed BLAKE2b (core/run/seal.py's format).

Loaded by path by ``_probe.py`` (stdlib only), never imports portside. Format: FORMAT.md.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

# Made at the first write (json imported then): one encoder for every writer, not one per record.
_encode: Callable[[Any], str] | None = None


def encoder() -> Callable[[Any], str]:
    """JSON of one record, as json.dumps(default=str, allow_nan=False) writes it. The C
    encoder is made once: JSONEncoder.encode builds a new one (and a closure) per call."""
    import json
    from json import encoder as enc

    make = getattr(enc, "c_make_encoder", None)
    if make is None:
        return json.JSONEncoder(default=str, allow_nan=False).encode
    try:
        c = make(None, str, enc.encode_basestring_ascii, None, ": ", ", ", False, False, False)
        if "".join(c({"a": [1.5, None, "x"]}, 0)) != '{"a": [1.5, null, "x"]}':
            raise ValueError("unexpected output")
    except (TypeError, ValueError):  # another Python's signature: the public encoder
        return json.JSONEncoder(default=str, allow_nan=False).encode

    def encode(rec: Any) -> str:
        return "".join(c(rec, 0))

    return encode


def suffixed(path: str, tag: str) -> str:
    root, ext = os.path.splitext(path)
    return f"{root}{tag}{ext}"


def file_for(out: str, rank: int | None, pid: int) -> str:
    """Rank 0 (or the only process) writes `out`; rank R `<stem>.rankR<ext>`; a process of
    unknown rank `<stem>.pid<PID><ext>` (core/probe/outputs.py finds them by these names)."""
    if rank is None:
        return suffixed(out, f".pid{pid}")
    return out if rank == 0 else suffixed(out, f".rank{rank}")


class RecordWriter:
    """Appends records to this process's file; opened at the first write, when the rank is
    known (sequential processes of one run share the rank-0 file: append, see outputs.py)."""

    def __init__(self, out: str, seal: bytes | None, rank: Callable[[], int | None],
                 fix: Callable[[dict[str, Any]], None] | None = None,
                 runs: Callable[[list[dict[str, Any]]],
                                list[tuple[dict[str, Any], list[dict[str, Any]]]]] | None = None,
                 ) -> None:
        self.out = out
        self.seal = seal
        # Packs consecutive step records into one line (_packed.py runs); None: one a line.
        self.runs = runs
        # Makes a record JSON can hold (non-finite floats into strings, FORMAT.md) when the
        # encoder refuses it: records of plain numbers are written as they are, unchecked.
        self.fix = fix
        self._rank = rank  # asked at the first write: by then the program set up its ranks
        self.reset(os.getpid())

    def reset(self, pid: int) -> None:
        """A new process (also a forked child): a file and numbering of its own."""
        self.pid = pid
        self.fd: int | None = None
        self.path: str | None = None
        self.seq = 0  # the next record's number in this process's file
        self.mac: Any = None  # BLAKE2b keyed with the seal, copied per line

    def _open(self) -> int:
        path = file_for(self.out, self._rank(), self.pid)
        d = os.path.dirname(path)
        if d:
            os.makedirs(d, exist_ok=True)
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.path = path
        return self.fd

    def _texts(self, recs: list[dict[str, Any]], encode: Callable[[Any], str]) -> list[str]:
        """The JSON of each line to write: packed runs of steps, the other records alone."""
        items = [(r, [r]) for r in recs]
        if self.runs is not None and len(recs) > 1:
            # Never lose records to the packing: on any error, one a line as before.
            with contextlib.suppress(Exception):
                items = self.runs(recs)
        out = []
        for rec, rows in items:
            try:
                out.append(encode(rec))
                continue
            except ValueError:  # a NaN or an infinity (allow_nan=False)
                if self.fix is None:
                    raise
            for r in rows:  # one a line, each made JSON-safe
                self.fix(r)
                out.append(encode(r))
        return out

    def write(self, recs: list[dict[str, Any]]) -> None:
        """Encode, number and seal `recs`, then write them in one go (callers serialise)."""
        global _encode
        if _encode is None:  # once: json is imported only by a process that writes
            _encode = encoder()
        encode = _encode
        fd = self.fd if self.fd is not None else self._open()
        if self.seal is not None and self.mac is None:
            import hashlib

            # Keyed once: a copy per line skips hashing the key block again (the same tag).
            self.mac = hashlib.blake2b(key=self.seal, digest_size=16)
        lines = []
        mac, seq = self.mac if self.seal is not None else None, self.seq
        for text in self._texts(recs, encode):
            body = f'{text[:-1]}, "seq": {seq}}}'
            seq += 1
            if mac is not None:  # the format of core/run/seal.py: seal_line
                h = mac.copy()
                h.update(body.encode())
                body = f'{body[:-1]}, "mac": "{h.hexdigest()}"}}\n'
            else:
                body += "\n"
            lines.append(body)
        self.seq = seq
        data = "".join(lines).encode()
        while data:
            n = os.write(fd, data)
            data = data[n:]
