"""The study's review relay over a real loopback socket: a decision with the token reaches the
head's decide, checked; without it, or malformed, it is refused, saying why; the file that
says where the relay is can be read by its owner alone and is gone once the relay closes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from portside.core.study.review_relay import RelayError, ReviewRelay, relay_file, send_decision


def test_relay_passes_checked_decisions_and_refuses_the_rest(tmp_path: Path) -> None:
    got: list[dict[str, Any]] = []

    def decide(req: dict[str, Any]) -> None:
        if req["target"] == "gone":
            raise RelayError("'gone' is not waiting for a decision")
        got.append(req)

    path = relay_file(tmp_path / "work", "s")
    relay = ReviewRelay(path, decide)
    try:
        assert path.stat().st_mode & 0o777 == 0o600
        send_decision(path, {"session": "S", "action": "reject", "target": "e-1",
                             "note": "keep the clipping", "reviewer": "rita"})
        assert got == [{"session": "S", "action": "reject", "target": "e-1",
                        "note": "keep the clipping", "reviewer": "rita"}]  # no token in it
        with pytest.raises(RelayError, match="'gone' is not waiting"):
            send_decision(path, {"session": "S", "action": "approve", "target": "gone"})
        with pytest.raises(RelayError, match="action 'merge': expected one of approve, "
                                             "reject, edit, verdict, message, pause, resume"):
            send_decision(path, {"session": "S", "action": "merge"})
        with pytest.raises(RelayError, match="an edit needs its text"):
            send_decision(path, {"session": "S", "action": "edit", "target": "e-1"})
        with pytest.raises(RelayError, match="an empty message is not sent"):
            send_decision(path, {"session": "S", "action": "message", "note": "  "})
        with pytest.raises(RelayError, match="verdict 'maybe': expected pass or fail"):
            send_decision(path, {"session": "S", "action": "verdict", "verdict": "maybe"})
        forged = tmp_path / "forged.json"
        forged.write_text(json.dumps({**json.loads(path.read_text()), "token": "guess"}))
        with pytest.raises(RelayError, match="wrong token"):
            send_decision(forged, {"session": "S", "action": "approve", "target": "e-1"})
        assert len(got) == 1
    finally:
        relay.close()
    assert not path.exists()
    with pytest.raises(RelayError, match="no `study run` takes decisions for this study now"):
        send_decision(path, {"session": "S", "action": "approve", "target": "e-1"})
