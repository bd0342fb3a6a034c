"""An alarm's evidence for a person (issue 39 item 2, after issue 41 item 11): one describe()
for the Checks card, the headless summary and the report, one number formatter; every kind
described, the same from the check's Struct as from the JSON the log kept, an older session's
evidence (fields missing, fields this version never wrote) described all the same."""

from __future__ import annotations

import io

import pytest
from check_runs import every_alarm, every_kind
from rich.console import Console

from portside.cli.headless import print_summary
from portside.core.checks import KINDS
from portside.core.checks.describe import describe, number, one_line, percent, value
from portside.core.checks.evidence import read
from portside.core.log import events as ev
from portside.tui.model import AlarmView
from portside.tui.widgets.checks import evidence_text

# numeric-drift's evidence as an older portside wrote it: a 40-value series, a nested envelope,
# keys this version's Struct has no field for
OLD_DRIFT = {"metric": "loss", "first_step": 37, "z": 6.213456789,
             "candidate": [0.41234567 + i / 1000 for i in range(40)],
             "envelope": {"low": 0.398765, "high": 0.4123456, "refs": 2},
             "spark": [1, 2, 3], "tolerance": 0.05}


def test_one_number_formatter() -> None:
    assert [number(x) for x in (0.123456, 6.213456789, 1.0, 12000, 123, float("nan"),
                                float("inf"), -float("inf"), True)] == [
        "0.1235", "6.213", "1", "12,000", "123", "nan", "inf", "-inf", "yes"]
    assert [percent(x) for x in (0.034, 1.0, None, "x", float("nan"))] == [
        "3%", "100%", "?", "?", "?"]
    assert value(None) == "-" and value([1.0, 2.5]) == "[1, 2.5]"
    assert value(list(range(10))) == "[0, 1, 2, … 4 more, 7, 8, 9]"
    assert value({"a": 1, "b": {"c": 2}}) == "{a: 1, b: {…}}" and value("x" * 130).endswith(
        "… [10 more chars]")


def test_every_kind_is_described() -> None:
    raised = every_kind()
    assert set(raised) == set(KINDS)
    for kind, alarm in raised.items():
        lines = describe(kind, alarm.evidence)
        assert lines and all(line.text.strip() for line in lines), kind
        assert "spark" not in one_line(lines), kind


@pytest.mark.parametrize("alarm", every_alarm(), ids=lambda a: a.key)
def test_the_check_and_the_log_describe_the_same(alarm) -> None:  # type: ignore[no-untyped-def]
    event = ev.decode(ev.encode(alarm.raised("s", "cand-1")))
    assert isinstance(event, ev.AlarmRaised)
    want = describe(alarm.kind, alarm.evidence)  # as the check wrote it
    assert describe(event.check, event.evidence) == want  # as the log keeps it
    assert describe(event.check, read(event.check, event.evidence)) == want


def test_the_layouts_of_their_own() -> None:
    got = every_kind()
    clip = [line.text for line in describe("clipping-changed", got["clipping-changed"].evidence)]
    assert clip == ["ref#1 max_norm [1], clips 10% of 200 steps",
                    "ref#2 max_norm [1], clips 10% of 200 steps",
                    "ref#3 max_norm [1], clips 10% of 200 steps",
                    "cand  max_norm [0.05], clips 100% of 200 steps", "reason max_norm"]
    opt = describe("optimizer-changed", got["optimizer-changed"].evidence)
    assert [(line.text, line.depth) for line in opt] == [("SGD momentum", 0),
                                                         ("cand 0.5  ref 0.9", 1)]
    drift = [line.text for line in describe("numeric-drift", got["numeric-drift"].evidence)]
    assert drift[:3] == ["series loss", "first_step 104", "alarm_step 104"]
    assert "likely_causes [clipping-changed]" in drift


def test_old_evidence_still_describes() -> None:
    # fields missing, fields unknown to the Struct: what is known in its order, then the rest
    lines = [line.text for line in describe("numeric-drift", OLD_DRIFT)]
    assert lines[0] == "first_step 37"
    assert lines[1:3] == ["metric loss", "z 6.213"]
    assert lines[3].startswith("candidate [0.4123, ") and "… 34 more" in lines[3]
    assert lines[4:] == ["envelope {low: 0.3988, high: 0.4123, refs: 2}", "tolerance 0.05"]
    # an older clipping alarm without the runs: its keys as they are
    old_clip = {"ref_max_norm": 1.0, "cand_max_norm": 0.05, "clipped_share": [0.03, 1.0]}
    assert one_line(describe("clipping-changed", old_clip)) == (
        "ref_max_norm 1 · cand_max_norm 0.05 · clipped_share [0.03, 1]")
    # values of another type, a kind from a later portside, no dict at all
    assert one_line(describe("slow", {"ratio": "fast", "limit": 2})) == "limit 2 · ratio fast"
    assert one_line(describe("a-later-kind", {"x": 1})) == "x 1"
    assert describe("slow", []) == [] and describe("slow", {}) == []


def test_the_card_the_summary_and_the_report_say_the_same() -> None:
    alarm = every_kind()["clipping-changed"]
    lines = describe(alarm.kind, alarm.evidence)
    view = AlarmView(ev.AlarmRaised(session_id="s", alarm_id="al-1", check=alarm.kind,
                                    severity=alarm.severity, title=alarm.title,
                                    evidence=alarm.wire))
    card = evidence_text(view).plain.splitlines()[2:]  # under the kind and the title
    assert [row.strip() for row in card] == [line.text.strip() for line in lines]
    out = io.StringIO()
    print_summary(Console(file=out, width=400, highlight=False), {
        "session": "s", "verdict": "fail", "outcome": "failed-silent", "reason": "clipping",
        "alarms": [{"severity": "error", "kind": alarm.kind, "title": alarm.title,
                    "evidence": alarm.wire}]})
    assert one_line(lines) in out.getvalue()


def test_the_summary_prints_the_lines_whole() -> None:
    out = io.StringIO()
    print_summary(Console(file=out, width=160, highlight=False), {
        "session": "s", "verdict": "fail", "outcome": "failed-silent", "reason": "drift",
        "alarms": [{"severity": "error", "kind": "numeric-drift", "title": "loss drifts",
                    "evidence": OLD_DRIFT}]})
    text = out.getvalue()
    assert "tolerance 0.05" in text  # the last line is there: nothing cut mid-way
    assert '"candidate"' not in text and "evidence {" not in text, text
