"""A run's integrity records, folded: portside's own records of whether the run's records are
its own (the seal's ``tamper`` records, what was ``observed`` from outside the run, metrics the
run printed). One fold, used by the rebuild (records.py) and the live fold (records_fold.py);
the check that judges it is checks/integrity.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

PRINTED = ("loss", "grad_norm", "lr")  # probe series a printed metric can be held against
KEEP_FAILURES = 20
KEEP_PRINTED = 2000  # (step, value) pairs per printed series


@dataclass
class Integrity:
    """portside's own records of whether a run's records are its own, folded."""

    failures: list[dict[str, Any]] = field(default_factory=list)
    failed: int = 0
    observed: dict[str, Any] | None = None  # the newest (cumulative) observed record
    printed: dict[str, list[tuple[int, float]]] = field(default_factory=dict)

    def add(self, rec: Mapping[str, Any]) -> None:
        """Fold one record (only tamper, observed and stepped metric records matter)."""
        typ = rec.get("type")
        if typ == "tamper":
            self.failed += int(rec.get("count") or 1)
            if len(self.failures) < KEEP_FAILURES:
                self.failures.append({k: rec.get(k) for k in ("why", "file", "line")})
        elif typ == "observed":
            self.observed = dict(rec)
        elif typ == "metric" and rec.get("name") in PRINTED and isinstance(rec.get("step"), int):
            pairs = self.printed.setdefault(str(rec["name"]), [])
            v = rec.get("value")
            if len(pairs) < KEEP_PRINTED and isinstance(v, int | float):
                pairs.append((int(rec["step"]), float(v)))

    def copy(self) -> Integrity:
        return Integrity(list(self.failures), self.failed,
                        dict(self.observed) if self.observed else None,
                        {k: list(v) for k, v in self.printed.items()})
