"""The host side of an SSH run reads the run's record files as portside's own reader does
(issue 38.7 on a remote host): a FIFO named like a record file blocked its loop in open(), so
the run's end was never seen; a link shipped whatever it named (a host file, /dev/zero without
end) as the run's records. The shipped script is loaded from its file, as the host runs it."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest

SHIPPED = Path(__file__).resolve().parents[2] / "core" / "run" / "shipped" / "ssh_runner.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ssh_runner_under_test", SHIPPED)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.timeout(20)  # before: open() on the FIFO waited for a writer for ever
def test_the_remote_tail_ships_regular_record_files_only(tmp_path: Path) -> None:
    mod = _load()
    sent: list[bytes] = []
    mod._write = sent.append
    secret = tmp_path / "host-secret"
    secret.write_text('{"type": "step", "SENTINEL": 1}\n')
    secret.chmod(0o600)
    rec = tmp_path / "records"
    rec.mkdir()
    os.mkfifo(rec / "cand-a-fifo.jsonl")  # sorted before the real file: reached first
    (rec / "cand-b-link.jsonl").symlink_to(secret)
    (rec / "cand-c-zero.jsonl").symlink_to("/dev/zero")
    (rec / "cand.jsonl").write_bytes(b'{"type": "step", "step": 0}\n{"type": "st')
    tail = mod._Tail(str(rec), "cand", b"MARK")
    assert tail.poll() is False
    assert sent == [b'MARK R cand.jsonl {"type": "step", "step": 0}\n']
    with open(rec / "cand.jsonl", "ab") as fh:  # the rest of a line, then one past a read
        fh.write(b'ep", "step": 1}\n' + b"x" * mod.TAIL_READ_BYTES + b'\n{"step": 2}\n')
    assert tail.poll() is True  # one bounded read: the long line is dropped, not held
    assert max(map(len, tail.partial.values()), default=0) <= mod.TAIL_LINE_BYTES
    assert tail.poll() is False
    assert sent[1:] == [b'MARK R cand.jsonl {"type": "step", "step": 1}\n',
                        b'MARK R cand.jsonl {"step": 2}\n']
    assert b"SENTINEL" not in b"".join(sent)


@pytest.mark.timeout(20)  # before: the keeper waited in open() on the FIFO for ever
def test_the_keeper_reads_only_regular_pid_files(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("ssh_keeper_under_test",
                                                  SHIPPED.with_name("ssh_keeper.py"))
    assert spec is not None and spec.loader is not None
    keeper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(keeper)
    rec = tmp_path / "records"
    rec.mkdir()
    os.mkfifo(rec / "a.pid")
    (rec / "b.pid").symlink_to("/dev/zero")
    (rec / "c.pid").write_text("999999999\n")  # no such process: nothing to stop
    keeper.stop_agents(str(tmp_path))
