"""How an event's body is kept in ``events.body``, and the one way back to the event.

The bulky kinds (run output, probe records: nearly every row of a long run) are stored without
the envelope keys that are columns of the same row already (kind, session_id, seq, ts): at a
line per event the envelope was most of the row. ``json_extract(body, '$.lines')`` and every
other field of the kind still read as before. :func:`full_body` puts the envelope back
byte for byte, so readers get the canonical encoding (core/events.py) whatever the row holds;
a body stored whole (schema v4 and before) is returned as it is.
"""

from __future__ import annotations

from functools import lru_cache

import msgspec

from portside.core import events as ev

SLIM_KINDS = frozenset({"run.output", "run.record"})
_WHOLE = '{"kind":'
_encode = msgspec.json.encode


@lru_cache(maxsize=64)
def _prefix(kind: str) -> str:
    return f'{_WHOLE}"{kind}",'


@lru_cache(maxsize=256)
def _sid_part(session_id: str) -> str:
    return ',"session_id":' + _encode(session_id).decode() + ',"seq":'


def _suffix(session_id: str, seq: int, ts: float) -> str:
    # The envelope as the canonical encoder writes it: after the kind's own fields.
    return f'{_sid_part(session_id)}{seq},"ts":{_encode(ts).decode()}}}'


def stored_body(kind: str, session_id: str, seq: int, ts: float, body: str) -> str:
    """What ``events.body`` holds for a canonical ``body`` of this row."""
    if kind not in SLIM_KINDS:
        return body
    prefix = _prefix(kind)
    suffix = _suffix(session_id, seq, ts)
    if not (body.startswith(prefix) and body.endswith(suffix)) or len(body) <= len(prefix) + len(suffix):
        return body  # not the canonical layout: kept whole (full_body returns it as it is)
    return "{" + body[len(prefix):-len(suffix)] + "}"


def full_body(session_id: str, seq: int, ts: float, kind: str, body: str) -> str:
    """The event's canonical JSON from an ``events`` row, stored slim or whole."""
    if kind not in SLIM_KINDS or body.startswith(_WHOLE):
        return body
    return _prefix(kind) + body[1:-1] + _suffix(session_id, seq, ts)


def decode_row(session_id: str, seq: int, ts: float, kind: str, body: str) -> ev.Event:
    """The event an ``events`` row holds (raises EventError as :func:`ev.decode` does)."""
    return ev.decode(full_body(session_id, seq, ts, kind, body))


# The columns every reader of bodies selects, in decode_row's order.
ROW_COLUMNS = "session_id, seq, ts, kind, body"
