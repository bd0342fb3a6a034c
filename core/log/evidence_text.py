"""An alarm's evidence for a person: ``key: value`` pairs, numbers to 4 significant digits, long
series shortened to their ends, nested records one level deep. The headless summary and the
report print it (they printed 200+ characters of JSON cut with "…"); the live card lays the
same pairs out one a line (tui/widgets/checks.py).
"""

from __future__ import annotations

import math
from typing import Any

from portside.core.safety.terminal_text import clean_line

SKIP = frozenset({"spark"})  # drawn by the card; as numbers it says nothing a person reads
SERIES_ENDS = 3  # a long list shows its first and last this many


def value_text(v: Any, depth: int = 0) -> str:
    if isinstance(v, bool) or v is None:
        return {True: "yes", False: "no", None: "-"}[v]
    if isinstance(v, float):
        return f"{v:.4g}" if math.isfinite(v) else str(v)
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10_000 else str(v)
    if isinstance(v, list | tuple):
        items = list(v)
        if len(items) > 2 * SERIES_ENDS + 1:
            head = [value_text(x, depth + 1) for x in items[:SERIES_ENDS]]
            tail = [value_text(x, depth + 1) for x in items[-SERIES_ENDS:]]
            return f"[{', '.join(head)}, … {len(items) - 2 * SERIES_ENDS} more, {', '.join(tail)}]"
        return "[" + ", ".join(value_text(x, depth + 1) for x in items) + "]"
    if isinstance(v, dict):
        if depth >= 1:
            return "{…}" if v else "{}"
        return "{" + ", ".join(f"{k}: {value_text(x, depth + 1)}" for k, x in v.items()
                               if k not in SKIP) + "}"
    return clean_line(str(v), 120)


def evidence_pairs(evidence: dict[str, Any]) -> list[tuple[str, str]]:
    return [(clean_line(str(k), 60), value_text(v)) for k, v in evidence.items()
            if k not in SKIP]


def evidence_line(evidence: dict[str, Any], limit: int = 600) -> str:
    """The pairs on one line, ``·`` between them; cut at a pair's end past ``limit``."""
    out: list[str] = []
    used = 0
    pairs = evidence_pairs(evidence)
    for n, (k, v) in enumerate(pairs):
        part = f"{k}: {v}"
        if out and used + len(part) > limit:
            out.append(f"… {len(pairs) - n} more")
            break
        out.append(part)
        used += len(part) + 3
    return " · ".join(out)
