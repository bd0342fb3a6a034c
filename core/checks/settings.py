"""What the settings checks share: the references' settings facts, the criteria's allow list,
one change as the reviewer reads it, one alarm per thing changed.

The probe records the settings a run trained with in its `facts` (FORMAT.md: optimizers,
data, precision). A setting is compared only where every reference agrees on it (a reference
pair that differs says the setting is not fixed by the script) and where both sides report
it (another torch version adds or drops param-group keys: not a change of the port).
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from portside.core.log.criteria import Criteria

from .alarms import Alarm
from .evidence import Change, SettingsChanged
from .records.records import RunRecords

REL_TOL = 1e-9  # float settings written in another way (1e-3 vs 0.001) are equal


def reference_facts(refs: list[RunRecords], key: str) -> list[Any]:
    """`facts[key]` of every reference that recorded it."""
    return [r.facts[key] for r in refs if r.facts and r.facts.get(key) is not None]


def same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or a == b and type(a) is type(b)
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=0.0) or a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def agreed(values: list[Any]) -> bool:
    return all(same(values[0], v) for v in values[1:])


def show(v: Any) -> str:
    """A setting as written in a script: tuples in parentheses, None as none."""
    if v is None:
        return "none"
    if isinstance(v, list):
        return "(" + ", ".join(show(x) for x in v) + ")"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def allowed(criteria: Criteria, group: str, setting: str) -> bool:
    allow = criteria.settings.allow
    return group in allow or f"{group}.{setting}" in allow


def change(setting: str, cand: Any, ref: Any, where: str = "") -> Change:
    return Change(setting=setting, candidate=cand, reference=ref, where=where)


def alarm(kind: str, group: str, subject: str, changes: list[Change],
          criteria: Criteria, key: str, evidence: SettingsChanged) -> Alarm:
    """One alarm for a set of changes of one subject (an optimizer, the data pipeline, the
    precision): error unless every change is allowed by the criteria (then info). `evidence`:
    the kind's own (OptimizerChanged…), with what it says beside the changes."""
    ok = all(c.allowed is True or allowed(criteria, group, str(c.setting)) for c in changes)
    shown = "; ".join(
        f"{f'{c.where} ' if c.where else ''}{c.setting} {show(c.candidate)} "
        f"vs reference {show(c.reference)}" for c in changes[:3])
    more = f" (+{len(changes) - 3} more)" if len(changes) > 3 else ""
    title = f"{subject}{': ' if subject else ''}{shown}{more}"
    if ok:
        title += " (allowed by settings.allow)"
    return Alarm(kind, "info" if ok else "error", title,
                 msgspec.structs.replace(evidence, changes=changes, allowed=ok), key=key)


def settings_summary(facts: dict[str, Any] | None) -> dict[str, Any]:
    """The settings facts of a run, for `verify --json`: optimizers (class, name, modules,
    each group's settings), data pipeline, precision; {} when the probe recorded none."""
    if not facts:
        return {}
    out: dict[str, Any] = {}
    if isinstance(facts.get("optimizers"), list):
        out["optimizers"] = [
            {"class": o.get("class"), "name": o.get("name"), "modules": o.get("modules"),
             "groups": [g.get("settings") for g in o.get("groups") or []]}
            for o in facts["optimizers"] if isinstance(o, dict)]
    for key in ("data", "precision"):
        if key in facts:
            out[key] = facts[key]
    return out
