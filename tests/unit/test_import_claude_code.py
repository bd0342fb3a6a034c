"""`portside import --claude-code`: a Claude Code transcript or stream-json log, in the format
Claude Code writes (tests/cc_transcript.py, from the documented fields), becomes a session with
the original timing; malformed files are refused whole with `file:line: what`."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
from cc_transcript import CLAIM, CLIP, TIGHT, clipping_port, structured_patch
from cli_run import cli_in_process
from tiny_project import tiny_project

from portside.core.agent.imported import TranscriptError
from portside.core.claude_code.transcript import read_claude_code
from portside.core.claude_code.trees import edited_files
from portside.core.log import events as ev
from portside.core.replay.player import Replayer
from portside.core.replay.state import fold
from portside.store import Store
from portside.store.replay_source import StoreSource

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "fixtures" / "trainers" / "train_tiny.py"
START = dt.datetime(2026, 11, 30, 9, 15, 0, 250000, tzinfo=dt.UTC)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return tiny_project(tmp_path / "proj")


def _kinds(events: list[ev.Event]) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in events:
        k = str(e.__struct_config__.tag)
        out[k] = out.get(k, 0) + 1
    return out


def _db_state(db: Path) -> tuple[int, int]:
    with Store(db) as s:
        return (s.conn.execute("SELECT count(*) FROM events").fetchone()[0],
                s.conn.execute("SELECT count(*) FROM sessions").fetchone()[0])


def test_transcript_imports_with_counts_diffs_and_original_times(tmp_path: Path,
                                                                 project: Path) -> None:
    s = clipping_port(project, START)
    path = s.write(tmp_path / f"{s.session_id}.jsonl")
    db = tmp_path / "p.db"
    res = cli_in_process("import", "--claude-code", str(path), "--target", "tpu", db=db)
    assert res.returncode == 0, res.stderr
    sid = f"cc-{s.session_id}"
    assert sid in res.stdout
    with Store(db) as store:
        events = list(store.events(sid))
        led = store.ledger(sid)
        row = next(r for r in store.sessions() if r["session_id"] == sid)
        assert (row["interventions"], row["human_s"] or 0) == (0, 0)  # the SQL view agrees
        assert store.conn.execute("SELECT count(*) FROM interventions").fetchone()[0] == 0
    k = _kinds(events)
    # Counts against the fixture's own: every text, call and result; one usage per API reply
    # (a reply's blocks are several lines with the same message id).
    assert k["agent.text"] == s.counts["text"] == 4
    assert k["agent.tool_call"] == s.counts["tool_use"] == 6
    assert k["agent.tool_result"] == s.counts["tool_result"] == 6
    assert k["agent.usage"] == s.counts["replies"]
    assert led.tokens_in == s.usage["input_tokens"]
    assert led.tokens_out == s.usage["output_tokens"]
    assert led.cache_read_tokens == s.usage["cache_read_input_tokens"]
    assert led.cache_write_tokens == s.usage["cache_creation_input_tokens"]
    assert led.token_usd > 0
    # Edits and commands: proposed, decided by the agent's own run, never a human intervention.
    files = [e for e in events if isinstance(e, ev.EditProposed)]  # commands are not edits
    commands = [e for e in events if isinstance(e, ev.CommandProposed)]
    assert len(files) == s.counts["edits"] == 2 and len(commands) == s.counts["commands"] == 2
    decided = [e for e in events if isinstance(e, ev.EditDecided)]
    assert len(decided) == 4 and {(d.decision, d.by) for d in decided} == {("approved", "policy")}
    assert all(d.reason.startswith("imported") for d in decided)
    assert k["edit.applied"] == 2
    assert "intervention" not in k and led.interventions == 0 and led.human_minutes == 0
    train = TINY.read_text(encoding="utf-8")
    edit = next(e for e in files if e.path == "train.py")
    assert edit.before == train and edit.after == train.replace(CLIP, TIGHT)
    assert "clipping" in {r.kind for r in edit.risks}
    notes = next(e for e in files if e.path == "PORTING.md")
    assert notes.before == "" and notes.after.startswith("# Port notes")
    assert [c.command for c in commands] == ["ls *.py", "python train.py --steps 3"]
    result = next(e for e in events if isinstance(e, ev.AgentToolResult)
                  and e.call_id == "toolu_bash1")
    assert "accuracy=31.20" in result.content
    # Subagent (sidechain) traffic labelled as live.
    sub_text = [e.text for e in events if isinstance(e, ev.AgentText) and "subagent" in e.text]
    assert sub_text == ["[subagent a1b2c3d4] Only train.py."]
    sub_call = next(e for e in events if isinstance(e, ev.AgentToolCall)
                    and e.call_id == "toolu_sub1")
    assert sub_call.input["_subagent_of"] == "a1b2c3d4"
    # Metadata and the claim.
    started = events[0]
    assert isinstance(started, ev.SessionStarted)
    assert started.meta["claude_code_session"] == s.session_id
    assert started.meta["claude_code_version"] == "2.0.76"
    assert started.meta["created_files"] == ["PORTING.md"]
    assert started.mode == "imported" and started.project == str(project)
    assert started.target == "tpu" and started.meta["timing"] == "recorded"
    assert [e.summary for e in events if isinstance(e, ev.AgentClaimed)] == [CLAIM]
    # The original times, line by line: the fixture's clock.
    t0 = START.timestamp()
    call = next(e for e in events if isinstance(e, ev.AgentToolCall) and e.call_id == "toolu_edit1")
    assert call.ts == pytest.approx(t0 + 2.4 + 0.6 + 1.5 + 0.5 + 0.4 + 0.8 + 0.3 + 3.1)
    assert events[-1].ts == pytest.approx(t0 + 2.4 + 0.6 + 1.5 + 0.5 + 0.4 + 0.8 + 0.3 + 3.1
                                          + 0.7 + 2.0 + 4.2 + 1.0 + 0.3 + 1.9)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert all(a.ts <= b.ts for a, b in zip(events, events[1:], strict=False))


def test_imported_session_replays_with_its_timing(tmp_path: Path, project: Path) -> None:
    s = clipping_port(project, START)
    path = s.write(tmp_path / "t.jsonl")
    db = tmp_path / "p.db"
    assert cli_in_process("import", "--claude-code", str(path), db=db).returncode == 0
    sid = f"cc-{s.session_id}"
    with Store(db) as store:
        events = list(store.events(sid))
        # The replay fold over the imported log: what the replay screen shows at the end.
        replayer = Replayer(StoreSource(store, sid), idle_limit=0)
        end = replayer.seek(replayer.index.last_seq)
        assert replayer.duration == pytest.approx(events[-1].ts - events[0].ts)
        mid = next(e for e in events if isinstance(e, ev.EditApplied))
        assert replayer.offset_of(mid.seq) == pytest.approx(mid.ts - events[0].ts)
        at_edit = replayer.seek(mid.seq)
    ref = fold(events)
    assert end.counts == ref.counts and end.claims == ref.claims == 1
    assert {e.path: (e.status, e.applied) for e in end.edits.values()} == {
        "train.py": ("approved", True), "PORTING.md": ("approved", True)}
    assert [(c.cwd, c.status) for c in end.commands.values()] == [(".", "approved")] * 2
    assert at_edit.edits["edit-toolu_edit1"].applied
    assert "PORTING.md" not in {e.path for e in at_edit.edits.values()}
    assert end.interventions == 0 and end.verdict == "undecided"
    # Headless replay prints each event at its original offset.
    res = cli_in_process("replay", sid, "--headless", "--speed", "0", "--idle-limit", "0", db=db)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == len(events)
    for line, e in zip(lines, events, strict=True):
        m = re.match(r"\s*(\d+) \+\s*([\d.]+)s ", line)
        assert m, line
        assert int(m[1]) == e.seq
        assert float(m[2]) == pytest.approx(e.ts - events[0].ts, abs=0.006)
    # Played at 40x, the events come out when their original times say (clock of this test).
    with Store(db) as store:
        player = Replayer(StoreSource(store, sid), speed=40.0, idle_limit=0)
        shown: list[tuple[float, ev.Event]] = []
        t0 = time.monotonic()
        player.play_all(lambda e: shown.append((time.monotonic() - t0, e)))
    assert len(shown) == len(events)
    for at, e in shown:
        assert at == pytest.approx((e.ts - events[0].ts) / 40.0, abs=0.15)


def test_stream_json_log_imports(tmp_path: Path, project: Path) -> None:
    s = clipping_port(project, START)
    path = s.write(tmp_path / "run.log", "stream-json")
    end = 1_800_000_000.0
    os.utime(path, (end, end))
    events = read_claude_code(path, target="tpu")
    started = events[0]
    assert isinstance(started, ev.SessionStarted)
    assert started.meta["import_format"] == "stream-json"
    assert started.meta["claude_code_session"] == s.session_id
    assert started.meta["timing"] == "estimated"
    assert started.agent.startswith("claude-code:claude-sonnet")
    k = _kinds(events)
    assert k["agent.text"] == s.counts["text"]
    assert k["agent.tool_call"] == s.counts["tool_use"]
    assert k["agent.tool_result"] == s.counts["tool_result"]
    # The result's totals: the usage events sum to Claude Code's own figures.
    usage = [e for e in events if isinstance(e, ev.AgentUsage)]
    assert sum(u.input_tokens for u in usage) == s.usage["input_tokens"]
    assert sum(u.output_tokens for u in usage) == s.usage["output_tokens"]
    assert sum(u.cost_usd for u in usage) == pytest.approx(0.0731)
    assert edited_files(events)["train.py"][1] == TINY.read_text().replace(CLIP, TIGHT)
    sub = next(e for e in events if isinstance(e, ev.AgentToolCall) and e.call_id == "toolu_sub1")
    assert sub.input["_subagent_of"] == "toolu_task"  # parent_tool_use_id, as live
    # No clock per line: spread over duration_ms, ending when the log was last written.
    assert events[0].ts == pytest.approx(end - 25.0)
    assert events[-1].ts == pytest.approx(end)


def _mangle(lines: list[str], n: int, fn: Any) -> list[str]:
    out = list(lines)
    out[n - 1] = fn(out[n - 1])
    return out


def _drop(field: str, inner: str = "") -> Any:
    def go(line: str) -> str:
        obj = json.loads(line)
        (obj[inner] if inner else obj).pop(field)
        return json.dumps(obj)
    return go


def _unpatchable(line: str) -> str:
    obj = json.loads(line)
    hunk = obj["toolUseResult"]["structuredPatch"][0]
    hunk["lines"] = ["-no such line" if x.startswith("-") else x for x in hunk["lines"]]
    return json.dumps(obj)


@pytest.mark.parametrize("case", ["bad-json", "no-message", "no-tool-id", "bad-time",
                                  "patch-does-not-apply", "no-type"])
def test_mangled_transcript_names_file_and_line_and_writes_nothing(
        tmp_path: Path, project: Path, case: str) -> None:
    s = clipping_port(project, START)
    good = s.write(tmp_path / "good.jsonl")
    db = tmp_path / "p.db"
    assert cli_in_process("import", "--claude-code", str(good), "--as", "first", db=db).returncode == 0
    before = _db_state(db)
    lines = good.read_text().splitlines()
    no = {json.loads(x).get("message", {}).get("content", [{}])[0].get("id")
          if isinstance(json.loads(x).get("message", {}).get("content"), list) else None: i
          for i, x in enumerate(lines, start=1)}
    edit_line = next(i for i, x in enumerate(lines, start=1)
                     if '"structuredPatch": [{' in x)
    n, fn, what = {
        "bad-json": (7, lambda x: x[:-5], "not JSON"),
        "no-message": (no["toolu_read1"], _drop("message"), "field message: missing"),
        "no-tool-id": (no["toolu_edit1"], lambda x: x.replace('"id": "toolu_edit1", ', ""),
                       "field message.content[0].id: missing"),
        "bad-time": (5, lambda x: x.replace('"timestamp": "2026-11-30T', '"timestamp": "Nov '),
                     "field timestamp"),
        "patch-does-not-apply": (edit_line, _unpatchable, "structuredPatch: does not apply"),
        "no-type": (len(lines) - 1, _drop("type"), "field type: missing"),
    }[case]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(_mangle(lines, n, fn)) + "\n")
    res = cli_in_process("import", "--claude-code", str(bad), db=db)
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"{bad}:{n}: " in res.stderr and what in res.stderr, res.stderr
    assert _db_state(db) == before  # all or nothing
    with pytest.raises(TranscriptError, match=rf"^{bad}:{n}: "):
        read_claude_code(bad)


def test_same_session_twice_is_refused_unchanged(tmp_path: Path, project: Path) -> None:
    s = clipping_port(project, START)
    path = s.write(tmp_path / "t.jsonl")
    db = tmp_path / "p.db"
    assert cli_in_process("import", "--claude-code", str(path), db=db).returncode == 0
    before = _db_state(db)
    res = cli_in_process("import", "--claude-code", str(path), db=db)
    assert res.returncode == 2 and "already in" in res.stderr
    assert _db_state(db) == before


def test_patch_with_line_numbers_applies_exactly() -> None:
    """The structuredPatch is what happened: applied hunk by hunk at its line numbers."""
    from portside.core.claude_code.transcript import _apply_patch

    before = "".join(f"line {i}\n" for i in range(1, 40))
    after = before.replace("line 5\n", "line five\n").replace("line 30\n", "")
    after = after.replace("line 39\n", "line 39\nline 40\n")
    assert _apply_patch(before, structured_patch(before, after)) == after
    assert _apply_patch("", structured_patch("", "a\nb\n")) == "a\nb\n"
    crlf = before.replace("\n", "\r\n")
    assert _apply_patch(crlf, structured_patch(before, after)) == after.replace("\n", "\r\n")
    assert _apply_patch(before, [{"oldStart": 1, "lines": ["-nope"]}]) is None
    # No context (an insertion hunk of zero old lines) lands at its line number.
    assert _apply_patch("a\nb\nc\n", [{"oldStart": 3, "oldLines": 0, "newStart": 3,
                                         "newLines": 1, "lines": ["+x"]}]) == "a\nb\nx\nc\n"


def test_secrets_are_masked_and_a_rejected_edit_is_not_applied(
        tmp_path: Path, project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The API key in this environment and a token set inline in a Bash command never reach the
    events; an Edit that Claude Code refused is proposed and rejected, never applied."""
    from cc_transcript import Session, text, tool

    key = "sk-ant-api03-IMPORT-SECRET-0123456789abcdef"
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    train = TINY.read_text(encoding="utf-8")
    s = Session(project, START)
    s.prompt(f"use the key {key} if needed")
    s.reply(tool("toolu_r", "Read", file_path=f"{project}/train.py"))
    s.read("toolu_r", "train.py", train)
    s.reply(tool("toolu_e", "Edit", file_path=f"{project}/train.py", old_string=CLIP,
                 new_string=TIGHT))
    s.wait(1)
    s.result("toolu_e", "The user doesn't want to proceed with this tool use. The tool use was "
             "rejected (eg. if it was a file edit, the new_string was NOT written to the file).",
             "Error: The user doesn't want to proceed with this tool use.", is_error=True)
    s.reply(tool("toolu_b", "Bash", command="HF_TOKEN=hf_abcdefghijklmnopqrstuvwx python "
                 "train.py", description="train"))
    s.bash("toolu_b", "loaded token hf_abcdefghijklmnopqrstuvwx")
    s.reply(text("I could not finish: the edit was rejected."))
    events = read_claude_code(s.write(tmp_path / "t.jsonl"))
    blob = json.dumps([ev.to_builtins(e) for e in events])
    assert key not in blob and "hf_abcdefghijklmnopqrstuvwx" not in blob
    assert "HF_TOKEN=*** python train.py" in blob
    edit = next(e for e in events if isinstance(e, ev.EditProposed) and e.path == "train.py")
    assert (edit.before, edit.after) == (train, train.replace(CLIP, TIGHT))
    decided = next(e for e in events if isinstance(e, ev.EditDecided)
                   and e.edit_id == edit.edit_id)
    assert decided.decision == "rejected" and "doesn't want to proceed" in decided.reason
    assert not any(isinstance(e, ev.EditApplied) for e in events)
    assert edited_files(events) == {}


def test_subagent_files_beside_the_transcript_are_merged_in(tmp_path: Path,
                                                            project: Path) -> None:
    """Newer Claude Code keeps a subagent's conversation in <session>/subagents/agent-*.jsonl:
    the import is the same as with its lines inline; a bad line there is named by that file."""
    s = clipping_port(project, START)
    inline = read_claude_code(s.write(tmp_path / "inline.jsonl"), session_id="x")
    lines = s.lines()
    main = [x for x in lines if not x.get("isSidechain")]
    side = [x for x in lines if x.get("isSidechain")]
    assert len(side) == 3
    for x in side:  # as the separate files have them: the agent's id in the file's name
        x.pop("agentId")
    path = tmp_path / f"{s.session_id}.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in main))
    sub = tmp_path / s.session_id / "subagents" / "agent-a1b2c3d4.jsonl"
    sub.parent.mkdir(parents=True)
    sub.write_text("".join(json.dumps(x) + "\n" for x in side))
    split = read_claude_code(path, session_id="x")
    def plain(events: list[ev.Event]) -> list[dict[str, Any]]:
        return [{k: v for k, v in ev.to_builtins(e).items() if k != "meta"} for e in events[:-1]]

    assert plain(split) == plain(inline)  # all but session.ended, which names the file
    assert split[0].meta["subagent_files"] == ["agent-a1b2c3d4.jsonl"]  # type: ignore[attr-defined]
    sub.write_text(sub.read_text().replace('"message"', '"massage"', 1))
    with pytest.raises(TranscriptError, match=rf"^{sub}:1: field message: missing"):
        read_claude_code(path)


# --- order and repeats: Claude Code appends its conversation in time order, each line once ---


def _conversation(lines: list[str]) -> list[int]:
    """Line numbers (1-based) of the user and assistant lines: the ones that become events."""
    return [i for i, x in enumerate(lines, start=1)
            if json.loads(x).get("type") in ("user", "assistant")]


def _stamp(line: str) -> str:
    return str(json.loads(line)["timestamp"])


def _restamp(line: str, stamp: str) -> str:
    obj = json.loads(line)
    obj["timestamp"] = stamp
    return json.dumps(obj)


@pytest.mark.parametrize("case", ["edited", "spliced"])
def test_reversed_timestamp_is_refused_naming_both_lines(tmp_path: Path, project: Path,
                                                         case: str) -> None:
    """A conversation line dated before an earlier one: the replay's "original timing" would be
    made up, so the file is refused whole, as a malformed line is."""
    s = clipping_port(project, START)
    lines = s.write(tmp_path / "good.jsonl").read_text().splitlines()
    conv = _conversation(lines)
    db = tmp_path / "p.db"
    assert cli_in_process("import", "--claude-code", str(tmp_path / "good.jsonl"), "--as", "first",
                db=db).returncode == 0
    before = _db_state(db)
    if case == "edited":  # one line's time moved back before the line ahead of it
        earlier, n = conv[5], conv[6]
        stamp = (START + dt.timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%S.250Z")
        lines = _mangle(lines, n, lambda x: _restamp(x, stamp))
    else:  # a later stretch of the file pasted in front of an earlier one
        a, b = conv[4] - 1, conv[8]  # 0-based start of the moved-back block, end of the pasted
        lines = lines[:a] + lines[conv[6] - 1:b] + lines[a:conv[6] - 1] + lines[b:]
        earlier, n = a + (b - conv[6] + 1), a + (b - conv[6] + 1) + 1  # last pasted, first moved
        assert _stamp(lines[earlier - 1]) > _stamp(lines[n - 1])
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    res = cli_in_process("import", "--claude-code", str(bad), db=db)
    assert res.returncode == 2, res.stdout + res.stderr
    want = (f"{bad}:{n}: timestamp {_stamp(lines[n - 1])} is earlier than line {earlier} "
            f"({_stamp(lines[earlier - 1])})")
    assert want in res.stderr, res.stderr
    assert _db_state(db) == before  # nothing written


def test_claude_codes_own_millisecond_reorders_are_accepted(tmp_path: Path,
                                                            project: Path) -> None:
    """Claude Code 2.1 writes an ``attachment`` line after the prompt it belongs to, dated 1-2 ms
    before it (seen in its real transcripts): not a conversation line, no event, not refused."""
    s = clipping_port(project, START)
    lines = s.write(tmp_path / "t.jsonl").read_text().splitlines()
    prompt = json.loads(lines[1])
    assert prompt["type"] == "user"
    attachment = {"parentUuid": prompt["uuid"], "isSidechain": False, "type": "attachment",
                  "attachment": {"type": "todo_reminder", "content": []},
                  "uuid": "9687488f-eef2-44e2-ae1d-cf7234f140cd", "sessionId": s.session_id,
                  "timestamp": (START - dt.timedelta(milliseconds=2)).strftime(
                      "%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z", "cwd": str(project)}
    path = tmp_path / "real-order.jsonl"
    path.write_text("\n".join([*lines[:2], json.dumps(attachment), *lines[2:]]) + "\n")
    res = cli_in_process("import", "--claude-code", str(path), db=tmp_path / "p.db")
    assert res.returncode == 0, res.stderr
    assert "note:" not in res.stderr


def _ledger_and_kinds(db: Path, sid: str) -> tuple[dict[str, int], tuple[int, int, float],
                                                   dict[str, Any]]:
    with Store(db) as store:
        events = list(store.events(sid))
        led = store.ledger(sid)
    started = events[0]
    assert isinstance(started, ev.SessionStarted)
    return _kinds(events), (led.tokens_in, led.tokens_out, round(led.token_usd, 9)), started.meta


def test_file_concatenated_with_itself_imports_once_and_says_so(tmp_path: Path,
                                                                project: Path) -> None:
    s = clipping_port(project, START)
    once = s.write(tmp_path / "once.jsonl")
    lines = once.read_text().splitlines()
    doubled = tmp_path / "doubled.jsonl"
    doubled.write_text("\n".join(lines + lines) + "\n")
    db = tmp_path / "p.db"
    assert cli_in_process("import", "--claude-code", str(once), "--as", "once", db=db).returncode == 0
    res = cli_in_process("import", "--claude-code", str(doubled), "--as", "twice", db=db)
    assert res.returncode == 0, res.stderr
    k1, led1, _ = _ledger_and_kinds(db, "once")
    k2, led2, meta = _ledger_and_kinds(db, "twice")
    assert k2 == k1 and led2 == led1  # no event, token or dollar doubled
    with_uuid = [i for i, x in enumerate(lines, start=1) if json.loads(x).get("uuid")]
    assert meta["duplicate_lines"] == len(with_uuid)
    first = with_uuid[0]
    uid = json.loads(lines[first - 1])["uuid"]
    said = f"{doubled}:{len(lines) + first}: duplicate of line {first} (uuid {uid})"
    assert f"portside: note: {len(with_uuid)} duplicate lines skipped" in res.stderr
    assert said in res.stderr and said in meta["import_notes"]


def test_history_written_again_is_not_doubled_and_a_changed_copy_is_named(
        tmp_path: Path, project: Path) -> None:
    """Claude Code may write earlier entries into the same file again (after a compaction, or
    with ``--input-format stream-json``), same uuid and same timestamp, ambient fields changed:
    imported once, not refused for their earlier times; a copy whose message differs says so."""
    s = clipping_port(project, START)
    lines = s.write(tmp_path / "t.jsonl").read_text().splitlines()
    conv = _conversation(lines)
    copies = []
    for n in conv[:4]:
        obj = json.loads(lines[n - 1])
        obj["gitBranch"] = "compacted"
        copies.append(obj)
    copies[2]["message"] = {**copies[2]["message"], "content": "rewritten"}
    at = conv[8]  # the copies go after this line
    again = tmp_path / "again.jsonl"
    again.write_text("\n".join([*lines[:at], *map(json.dumps, copies), *lines[at:]]) + "\n")
    db = tmp_path / "p.db"
    assert cli_in_process("import", "--claude-code", str(tmp_path / "t.jsonl"), "--as", "orig",
                db=db).returncode == 0
    res = cli_in_process("import", "--claude-code", str(again), "--as", "again", db=db)
    assert res.returncode == 0, res.stderr
    k1, led1, _ = _ledger_and_kinds(db, "orig")
    k2, led2, meta = _ledger_and_kinds(db, "again")
    assert (k2, led2) == (k1, led1)
    assert meta["duplicate_lines"] == 4
    changed = f"{again}:{at + 3}: duplicate of line {conv[2]} (uuid {copies[2]['uuid']}); " \
              f"its message differs, line {conv[2]}'s is kept"
    plain = f"{again}:{at + 1}: duplicate of line {conv[0]} (uuid {copies[0]['uuid']})"
    assert changed in res.stderr and f"{plain}\n" in res.stderr, res.stderr


def test_stream_json_log_twice_over_is_read_once(tmp_path: Path, project: Path) -> None:
    s = clipping_port(project, START)
    log = s.write(tmp_path / "run.log", "stream-json")
    twice = tmp_path / "twice.log"
    twice.write_text(log.read_text() * 2)
    once_events = read_claude_code(log, session_id="x")
    twice_events = read_claude_code(twice, session_id="x")
    assert _kinds(twice_events) == _kinds(once_events)
    usage = [e.cost_usd for e in twice_events if isinstance(e, ev.AgentUsage)]
    assert sum(usage) == pytest.approx(0.0731)  # the result's total, counted once
    assert twice_events[0].meta["duplicate_lines"] == len(log.read_text().splitlines())  # type: ignore[attr-defined]
