"""An alarm's evidence for a person (issue 41 item 11): key: value pairs with numbers
formatted and long series shortened, in the headless summary and the report, not 200+
characters of JSON cut with "…"."""

from __future__ import annotations

import io

from rich.console import Console

from portside.cli.headless import print_summary
from portside.core.log.evidence_text import evidence_line

# numeric-drift's evidence as the check writes it: steps, a 40-value series, a nested envelope
DRIFT = {"metric": "loss", "first_step": 37, "z": 6.213456789,
         "candidate": [0.41234567 + i / 1000 for i in range(40)],
         "envelope": {"low": 0.398765, "high": 0.4123456, "refs": 2},
         "spark": [1, 2, 3], "tolerance": 0.05}


def test_evidence_line_is_pairs_with_numbers_formatted() -> None:
    line = evidence_line(DRIFT)
    assert line.startswith("metric: loss · first_step: 37 · z: 6.213 · candidate: [0.4123, ")
    assert "… 34 more" in line and "envelope: {low: 0.3988, high: 0.4123, refs: 2}" in line
    assert "spark" not in line and "{" not in line.split("envelope")[0] and '"' not in line


def test_the_summary_prints_the_pairs_whole() -> None:
    out = io.StringIO()
    print_summary(Console(file=out, width=160, highlight=False), {
        "session": "s", "verdict": "fail", "outcome": "failed-silent", "reason": "drift",
        "alarms": [{"severity": "error", "kind": "numeric-drift", "title": "loss drifts",
                    "evidence": DRIFT}]})
    text = out.getvalue()
    assert "tolerance: 0.05" in text  # the last pair is there: nothing cut mid-way
    assert '"candidate"' not in text and "evidence {" not in text, text
