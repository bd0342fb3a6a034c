"""data-changed: the training DataLoader's settings differ from the references' — the sample
order (shuffle, sampler), drop_last, workers, pinned memory, the dataset and its length.

The batch size is not judged here: a changed batch is the global batch's question
(global-batch-changed, batch.py), which also knows world size and accumulation. A
DistributedSampler is compared by its order (shuffle or not), so one rank's RandomSampler is
the same pipeline as N ranks' DistributedSampler(shuffle=True). drop_last, workers and pinned
memory are allowed by default (criteria `settings.allow`): a TPU port drops the short last
batch so that it compiles one graph.
"""

from __future__ import annotations

from typing import Any

from portside.core.log.criteria import Criteria

from .alarms import Alarm
from .evidence import DataChanged
from .records.comparison import Comparison
from .settings import agreed, alarm, change, reference_facts, same

COMPARED = ("order", "drop_last", "num_workers", "pin_memory", "dataset", "dataset_len")
_ORDERED = {"RandomSampler": True, "SubsetRandomSampler": True, "SequentialSampler": False,
            "DistributedSampler": None}


def order(d: dict[str, Any]) -> str:
    """The sample order: random or sequential for torch's own samplers, else the class."""
    name = d.get("sampler")
    if name in _ORDERED:
        shuffle = d.get("shuffle") if _ORDERED[name] is None else _ORDERED[name]
        return "shuffled" if shuffle else "sequential"
    return str(name)


def _view(d: dict[str, Any]) -> dict[str, Any]:
    return {"order": order(d), **{k: d.get(k) for k in COMPARED if k != "order"}}


def check_data(c: Comparison, criteria: Criteria) -> list[Alarm]:
    refs, cand = c.refs, c.cand
    ref_data = [_view(d) for d in reference_facts(refs, "data") if isinstance(d, dict)]
    mine = (cand.facts or {}).get("data")
    if not ref_data or not isinstance(mine, dict):
        return []  # no DataLoader on a side (a hand-cut token stream): nothing to compare
    cv, rv = _view(mine), ref_data[0]
    changes = []
    for key in COMPARED:
        if cv[key] is None or rv[key] is None or not agreed([r[key] for r in ref_data]):
            continue
        if not same(cv[key], rv[key]):
            setting = "shuffle" if key == "order" else key
            changes.append(change(setting, cv[key], rv[key]))
    if not changes:
        return []
    return [alarm("data-changed", "data", "training DataLoader", changes, criteria,
                  "data-changed", DataChanged(candidate_data=mine,
                                              reference_data=reference_facts(refs, "data")[0]))]
