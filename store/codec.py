"""How an event's body is kept in ``events.body``, and the one way back to the event.

The bulky kinds (run output, probe records: nearly every row of a long run) are stored without
the envelope keys that are columns of the same row already (kind, session_id, seq, ts): at a
line per event the envelope was most of the row. ``json_extract(body, '$.lines')`` and every
other field of the kind still read as before. :func:`full_body` puts the envelope back
byte for byte, so readers get the canonical encoding (core/log/events.py) whatever the row holds;
a body stored whole (schema v4 and before) is returned as it is.
"""

from __future__ import annotations

from functools import lru_cache

import msgspec

from portside.core.log import events as ev

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


ENVELOPE = b',"session_id":'
# Where the kind's own fields start in the canonical bytes of each slim event type.
SLIM_START: dict[type, int] = {cls: len(_prefix(kind)) for kind, cls in ev.EVENT_TYPES.items()
                               if kind in SLIM_KINDS}


def stored_body(event: ev.Event, body: bytes) -> bytes:
    """What ``events.body`` holds for an event's canonical ``body``. The envelope is the
    encoding's last keys, and its ``,"session_id":`` the last one in the text (inside a JSON
    string a quote is escaped); the encoding starts with the kind (msgspec's tag). On the
    append path of every event (store/projections.py's event_row)."""
    start = SLIM_START.get(type(event))
    if start is None:
        return body
    cut = body.rfind(ENVELOPE)
    return b"{" + body[start:cut] + b"}" if cut > start else body


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
