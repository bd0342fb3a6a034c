"""No escape sequence from a run or a recording reaches the terminal, and ids or paths with
rich markup (`[/`) never crash `show` / `sessions` (issue 13 item 6)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from cli_run import cli_in_process

from portside.core.log import events as ev

EVIL = "\x1b]52;c;cHduZWQ=\x07\x1b]0;title\x07\x1b[2J\x9b31m[/b][bold]"
BAD = ("\x1b", "\x07", "\x9b")


def _recording(path: Path, sid: str = "evil-1") -> Path:
    events: list[ev.Event] = [
        ev.SessionStarted(session_id=sid, project=f"/tmp/x[/]{EVIL}", target="cpu",
                          agent=f"scripted:[/x]{EVIL}", title=EVIL, reviewer=EVIL),
        ev.RunStarted(session_id=sid, run_id=f"r[/b]{EVIL}", role="candidate", attempt=1,
                      command=f"echo {EVIL}", target=f"cpu{EVIL}"),
        ev.RunOutput(session_id=sid, run_id=f"r[/b]{EVIL}", lines=[EVIL, f"loss {EVIL}"]),
        ev.RunFinished(session_id=sid, run_id=f"r[/b]{EVIL}", exit_code=1,
                       outcome="failed-error", error_type=EVIL, error_message=EVIL),
        ev.AlarmRaised(session_id=sid, alarm_id=f"a{EVIL}", check=f"crashed{EVIL}",
                       severity="error", title=EVIL, evidence={"tail": [EVIL]}),
        ev.Intervention(session_id=sid, intervention_id=f"i{EVIL}", action="note",
                        steering=False, attention_started_at=1.0, decided_at=2.0,
                        reviewer=EVIL, note=EVIL),
        ev.SessionEnded(session_id=sid, verdict="fail", outcome="failed-error", reason=EVIL),
    ]
    lines = [json.dumps({"format": "portside-recording", "schema": ev.SCHEMA_VERSION,
                         "session_id": sid, "events": len(events)}).encode()]
    for seq, e in enumerate(events, start=1):
        e.seq, e.ts = seq, 1_790_000_000.0 + seq
        lines.append(ev.encode(e))
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _clean(out: str) -> None:
    for ch in BAD:
        assert ch not in out, f"{ch!r} reached the terminal: {out[:300]!r}"
    assert "MarkupError" not in out and "Traceback" not in out


def test_recording_fields_never_reach_the_terminal_raw(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    rec = _recording(tmp_path / "evil.jsonl")
    done = cli_in_process("import", str(rec), db=db)
    assert done.returncode == 0, done.stderr
    for args in (["show", "evil-1"], ["sessions", "--plain"], ["replay", "evil-1", "--headless",
                 "--speed", "0"], ["replay", str(rec), "--headless", "--speed", "0"],
                 ["stats"], ["stats", "--format", "csv"], ["stats", "--format", "json"]):
        out = cli_in_process(*args, db=db)
        assert out.returncode == 0, (args, out.stderr)
        _clean(out.stdout + out.stderr)
    for what in ("runs", "alarms", "interventions", "report"):
        for fmt in (("md",) if what == "report" else ("csv", "md", "json", "jsonl")):
            out = cli_in_process("export", "evil-1", "--what", what, "--format", fmt, db=db)
            assert out.returncode == 0, (what, fmt, out.stderr)
            _clean(out.stdout + out.stderr)
            if fmt.startswith("json"):  # lossless: the same values, escaped
                first = out.stdout.splitlines()[0] if fmt == "jsonl" else out.stdout
                assert json.loads(first)


@pytest.mark.parametrize("sid", ["x\x1b]0;pwn\x07", "[/b]", "a b", "../../etc", ""])
def test_imported_ids_are_validated(tmp_path: Path, sid: str) -> None:
    rec = _recording(tmp_path / "evil.jsonl", sid="ok-1")
    # the header's id and --as: both refused with file:line when they are not plain ids
    out = cli_in_process("import", str(rec), "--as", sid, db=tmp_path / "p.db") if sid else None
    if out is not None:
        assert out.returncode == 2 and f"{rec}:1:" in out.stderr
        _clean(out.stderr)
    raw = rec.read_bytes().replace(b'"ok-1"', json.dumps(sid).encode())
    rec.write_bytes(raw)
    out = cli_in_process("import", str(rec), db=tmp_path / "p.db")
    assert out.returncode == 2 and f"{rec}:1: header field session_id" in out.stderr
    _clean(out.stderr)


def test_headless_log_and_summary_are_clean(tmp_path: Path) -> None:
    """`verify -v`: a run printing OSC 52 / ESC[2J and crashing with them in its message."""
    script = tmp_path / "t.py"
    script.write_text(
        "import sys\n"
        f"print({EVIL!r}, flush=True)\n"
        f"sys.exit({EVIL!r})\n"
    )
    out = cli_in_process("verify", "--reference", f"{sys.executable} t.py", "--candidate", f"{sys.executable} t.py", "--target", "cpu", "--reference-runs", "1", "--timeout", "60", "-v", cwd=tmp_path, db=tmp_path / "p.db")
    assert out.returncode == 1, out.stderr
    _clean(out.stdout + out.stderr)
    assert "[/b][bold]" in out.stderr  # shown as text, not parsed as markup


# C1 CSI and OSC, a DEL, and the bidi controls a Trojan Source line is made of.
C1 = "\x9b2J\x9d0;t\x9c\x7f\x85"
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
SHOWN_RAW = [chr(c) for c in range(0x7f, 0xa0)] + list(BIDI)


def test_jsonl_export_escapes_c1_and_bidi_and_stays_byte_identical(tmp_path: Path) -> None:
    """`export` to a file or a pipe wrote U+009B/U+009D raw (only a terminal got them
    escaped): `cat`ing the file drove the terminal. Now \\u escapes, the same JSON, and
    export -> import -> export is still byte for byte the same."""
    from portside.store import Store

    sid = "c1-1"
    with Store(tmp_path / "a.db") as store:
        rec = store.recorder
        rec.append(ev.SessionStarted(session_id=sid, project=f"/p{BIDI}", target="cpu"))
        rec.append(ev.RunOutput(session_id=sid, run_id="r", lines=[f"loss{C1}", BIDI]))
        rec.append(ev.AgentText(session_id=sid, text=f"ok {BIDI}{C1} {{\"k\": 1}} \\u009b"))
        rec.flush()
    first = tmp_path / "first.jsonl"
    assert cli_in_process("export", sid, "-o", str(first), db=tmp_path / "a.db").returncode == 0
    piped = cli_in_process("export", sid, db=tmp_path / "a.db")
    assert piped.returncode == 0, piped.stderr
    data = first.read_bytes()
    assert piped.stdout.encode() == data
    text = data.decode()
    for ch in SHOWN_RAW:
        assert ch not in text, f"{ch!r} raw in the export"
    lines = [json.loads(line) for line in text.splitlines()[1:]]
    assert lines[1]["lines"] == [f"loss{C1}", BIDI]  # the same data, only escaped
    assert lines[2]["text"] == f"ok {BIDI}{C1} {{\"k\": 1}} \\u009b"
    assert cli_in_process("import", str(first), db=tmp_path / "b.db").returncode == 0
    second = tmp_path / "second.jsonl"
    assert cli_in_process("export", sid, "-o", str(second), db=tmp_path / "b.db").returncode == 0
    assert second.read_bytes() == data


def test_bidi_controls_are_shown_by_name_on_the_terminal(tmp_path: Path) -> None:
    """`verify -v` (a run's lines, its crash message) and `show`: bidi overrides reached the
    terminal raw (a line that reads as one thing and is another); now ``<U+202E>``."""
    script = tmp_path / "t.py"
    trojan = "access = 'user\u202e \u2066// admin\u2069 \u2066'"
    script.write_text(f"import sys\nprint({trojan!r}, flush=True)\nsys.exit({trojan!r})\n")
    db = tmp_path / "p.db"
    out = cli_in_process("verify", "--reference", f"{sys.executable} t.py", "--candidate", f"{sys.executable} t.py", "--target", "cpu", "--reference-runs", "1", "--timeout", "60", "-v", cwd=tmp_path, db=db)
    assert out.returncode == 1, out.stderr
    shown = cli_in_process("show", "last", db=db)
    assert shown.returncode == 0, shown.stderr
    for text in (out.stdout + out.stderr, shown.stdout):
        for ch in SHOWN_RAW:
            assert ch not in text, f"{ch!r} reached the terminal"
        assert "user<U+202E> <U+2066>// admin<U+2069>" in text
