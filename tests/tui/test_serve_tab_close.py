"""Closing the browser tab of `portside serve run` (issue 27 item 7): the session's end is the
reviewer closing portside, as `q` in a terminal records it, not a cancelled engine counted as a
failed migration; and the server's terminal is not flooded with access-log lines. Real
textual-serve, real app process, real SQLite (read straight from the file)."""

from __future__ import annotations

from test_serve_browser import (
    _db_rows,
    _first_bytes,
    _stop,
    _wait,
    pytestmark,  # noqa: F401  (skipped where chromium is missing, as its neighbours)
    served,  # noqa: F401  (the fixture)
)

from portside.cli.drive import REVIEWER_QUIT


async def test_a_closed_tab_is_the_reviewer_closing_portside(served) -> None:  # noqa: F811
    import aiohttp

    url, db, proc = served
    base, token = url.split("/?")[0], url.split("token=")[1]
    async with aiohttp.ClientSession() as http:
        ws = await _first_bytes(http, base, token, base)
        await _wait(lambda: _db_rows(db, "SELECT session_id FROM sessions"), 120,
                    "the served session to start")
        await ws.close()
        ended = await _wait(lambda: _db_rows(
            db, "SELECT verdict, reason, outcome FROM sessions WHERE ended_at IS NOT NULL"),
            120, "the session to end once its tab closed")
    assert [(v, r) for v, r, _ in ended] == [("fail", REVIEWER_QUIT)], ended
    assert "cancel" not in str(ended)
    _stop(proc)
    assert proc.stdout is not None
    rest = proc.stdout.read()
    assert '"GET /' not in rest and "HTTP/1.1" not in rest, rest  # no access-log flood
