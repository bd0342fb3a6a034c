"""optimizer-changed: the optimizer's class or a hyper-parameter of a param group differs from
the references' (the lr is left to the schedule check).

Several optimizers (a GAN's generator and discriminator) are matched by what they train — the
shapes of their parameters (`signature`) — then by the script's name for them, then by the
order they first stepped, so swapping the order of two `optimizer.step()` calls is no change.
One alarm per optimizer, named by the modules it trains ("netG Adam betas (0.9, 0.999) vs
reference (0.5, 0.999)").

A setting changed during the run (the probe re-reads them every few steps: `changes` on the
optimizer's facts) is compared at each step where either side changed one: "SGD momentum from
step 59: 0.5 vs reference 0.9", the step the probe saw it at (made after `since`).
"""

from __future__ import annotations

from typing import Any

import msgspec

from portside.core.log.criteria import Criteria

from .alarms import Alarm
from .evidence import Change, OptimizerChanged
from .records.comparison import Comparison
from .settings import agreed, alarm, change, reference_facts, same


def check_optimizer(c: Comparison, criteria: Criteria) -> list[Alarm]:
    """One alarm per changed optimizer; their number only at the end (`final`): a live run's
    second optimizer is in its facts only from its own first step."""
    refs, cand, final = c.refs, c.cand, c.final
    ref_lists = reference_facts(refs, "optimizers")
    c_opts = (cand.facts or {}).get("optimizers")
    if not ref_lists or not isinstance(c_opts, list) or not c_opts or not ref_lists[0]:
        return []  # no optimizer on a side (a hand-written update): nothing to compare
    r_opts = ref_lists[0]
    alarms: list[Alarm] = []
    if final and len(c_opts) != len(r_opts) and all(len(x) == len(r_opts) for x in ref_lists):
        alarms.append(alarm(
            "optimizer-changed", "optimizer", "",
            [change("optimizers", [_named(o) for o in c_opts], [_named(o) for o in r_opts])],
            criteria, "optimizer-changed:count", OptimizerChanged()))
    for r_opt, c_opt in _match(r_opts, c_opts):
        peers = [_same_opt(lst, r_opt) for lst in ref_lists]
        found = [p for p in peers if p is not None]
        changes = _changes(r_opt, c_opt, found) or _mid_run(r_opt, c_opt, found)
        if changes:
            label = _label(c_opt)
            alarms.append(alarm(
                "optimizer-changed", "optimizer", label, changes, criteria,
                f"optimizer-changed:{r_opt.get('signature') or r_opt.get('index')}",
                OptimizerChanged(optimizer=label, class_=c_opt.get("class"),
                                 reference_class=r_opt.get("class"))))
    return alarms


def _label(o: dict[str, Any]) -> str:
    """How the script calls it: the modules it trains, else its variable, else its number."""
    mods = o.get("modules") or []
    if mods:
        return "+".join(mods)
    return str(o.get("name") or f"optimizer #{o.get('index', 0)}")


def _named(o: dict[str, Any]) -> str:
    """Label and class, and the step it first stepped at when not the first (a swap)."""
    first = o.get("first_step")
    at = f" from step {first}" if isinstance(first, int) and first > 0 else ""
    return f"{_label(o)} {o.get('class')}{at}"


def _same_opt(lst: list[dict[str, Any]], r_opt: dict[str, Any]) -> dict[str, Any] | None:
    return next((o for o in lst if o.get("signature") == r_opt.get("signature")), None)


def _match(r_opts: list[dict[str, Any]],
           c_opts: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Pairs (reference, candidate): by parameter signature, then by name, then by order."""
    left = list(c_opts)
    pairs: list[tuple[dict[str, Any], dict[str, Any]]] = []
    unmatched = []
    for r in r_opts:
        hit = next((c for c in left if c.get("signature") == r.get("signature")), None)
        if hit is None:
            unmatched.append(r)
            continue
        left.remove(hit)
        pairs.append((r, hit))
    for r in list(unmatched):
        hit = next((c for c in left if r.get("name") and c.get("name") == r.get("name")), None)
        if hit is not None:
            left.remove(hit)
            unmatched.remove(r)
            pairs.append((r, hit))
    for r, c in zip(unmatched, left, strict=False):  # what is left, in the order it stepped
        pairs.append((r, c))
    return pairs


def _changes(r_opt: dict[str, Any], c_opt: dict[str, Any],
             peers: list[dict[str, Any]]) -> list[Change]:
    if c_opt.get("class") != r_opt.get("class"):
        return [change("class", c_opt.get("class"), r_opt.get("class"))]
    r_groups, c_groups = r_opt.get("groups") or [], c_opt.get("groups") or []
    if len(r_groups) != len(c_groups):
        return [change("param groups", len(c_groups), len(r_groups))]
    out = []
    cls = c_opt.get("class") or ""
    for i, (rg, cg) in enumerate(zip(r_groups, c_groups, strict=True)):
        rs, cs = rg.get("settings") or {}, cg.get("settings") or {}
        where = cls if len(r_groups) == 1 else f"{cls} group {i}"
        for key in sorted(rs.keys() & cs.keys()):
            ref_vals = [((p.get("groups") or [{}] * (i + 1))[i].get("settings") or {}).get(key)
                        for p in peers if len(p.get("groups") or []) > i]
            if ref_vals and not agreed(ref_vals):
                continue  # the references differ among themselves: not fixed by the script
            if not same(cs[key], rs[key]):
                out.append(change(key, cs[key], rs[key], where))
    return out


SCHEDULED = 3  # changes of one setting on a side that make it a schedule, not a hand edit


def _times(opt: dict[str, Any], group: int, key: str) -> int:
    return sum(1 for c in opt.get("changes") or []
               if c.get("group") == group and c.get("setting") == key)


def _value_at(opt: dict[str, Any], group: int, key: str, step: int) -> Any:
    """A setting's value at `step`: the first read, then the changes seen up to that step."""
    groups = opt.get("groups") or []
    v = (groups[group].get("settings") or {}).get(key) if group < len(groups) else None
    for c in opt.get("changes") or []:
        if c.get("group") == group and c.get("setting") == key and c.get("step", 0) <= step:
            v = c.get("to")
    return v


def _mid_run(r_opt: dict[str, Any], c_opt: dict[str, Any],
             peers: list[dict[str, Any]]) -> list[Change]:
    """Settings the same at the first step that differ after a change made during the run
    (on either side), one per setting: the first step they differ at."""
    seen = [(c["group"], c["setting"], c.get("step", 0))
            for o in (c_opt, r_opt) for c in o.get("changes") or []
            if isinstance(c, dict) and isinstance(c.get("group"), int)]
    # A setting changed again and again follows a schedule (OneCycleLR cycles the momentum
    # with the lr): its steps move with the steps per epoch, and the lr check judges it.
    scheduled = {(g, k) for g, k, _ in seen
                 if max(_times(c_opt, g, k), _times(r_opt, g, k)) >= SCHEDULED}
    cls = c_opt.get("class") or ""
    many = len(r_opt.get("groups") or []) > 1
    out: dict[tuple[int, str], Change] = {}
    for group, key, step in sorted(seen, key=lambda x: x[2]):
        if (group, key) in out or (group, key) in scheduled:
            continue
        ref_vals = [_value_at(p, group, key, step) for p in peers]
        if ref_vals and not agreed(ref_vals):
            continue  # the references differ among themselves: not fixed by the script
        cv, rv = _value_at(c_opt, group, key, step), _value_at(r_opt, group, key, step)
        if not same(cv, rv):
            made: dict[str, Any] = next((c for c in c_opt.get("changes") or []
                         if c.get("group") == group and c.get("setting") == key
                         and c.get("step", 0) <= step), {})
            out[(group, key)] = msgspec.structs.replace(
                change(f"{key} from step {step}", cv, rv, f"{cls} group {group}" if many else cls),
                step=step, since=made.get("since"),
                from_=made.get("from", _value_at(c_opt, group, key, -1)))
    return list(out.values())
