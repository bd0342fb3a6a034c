"""What a run used at its peak (the probe's exit record), and the criteria limit on it.

On an accelerator the figure is its memory (torch_xla's memory info, CUDA's allocator peak)
against the device's size; on a CPU, and on XLA:CPU where the runtime says nothing, it is the
training process's host RSS high-water mark against the host's RAM.
"""

from __future__ import annotations

from typing import Any

from portside.core.log.criteria import Criteria

from .alarms import Alarm
from .evidence import MemoryPeak
from .records.comparison import Comparison


def peak_memory(exit_record: dict[str, Any] | None) -> dict[str, Any] | None:
    """{"where": "device"|"host", "peak_bytes", "limit_bytes", "fraction", "host_rss_bytes"},
    or None when the run wrote no exit record with a figure."""
    ex = exit_record or {}

    def num(key: str) -> float | None:
        v = ex.get(key)
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and v > 0 \
            else None

    rss = num("peak_rss_bytes")
    if num("device_peak_bytes") is not None:
        where, peak, limit = "device", num("device_peak_bytes"), num("device_memory_bytes")
    elif rss is not None:
        where, peak, limit = "host", rss, num("host_memory_bytes")
    else:
        return None
    return {"where": where, "peak_bytes": peak, "limit_bytes": limit,
            "fraction": peak / limit if peak and limit else None, "host_rss_bytes": rss}


def check_memory(c: Comparison, criteria: Criteria) -> list[Alarm]:
    """An end-of-run verdict: nothing while the candidate is live (its peak is not yet known)."""
    limit = criteria.performance.max_memory_fraction
    if not c.final:
        return []
    mem = peak_memory(c.cand.exit)
    if not limit or mem is None or mem["fraction"] is None or mem["fraction"] <= limit:
        return []
    return [Alarm("memory-peak", "warning",
                  f"peak {mem['where']} memory {mem['peak_bytes'] / 2**30:.2f} GiB, "
                  f"{mem['fraction']:.0%} of {mem['limit_bytes'] / 2**30:.1f} GiB "
                  f"(limit {limit:.0%})",
                  MemoryPeak(where=mem["where"], peak_bytes=mem["peak_bytes"],
                             limit_bytes=mem["limit_bytes"], fraction=mem["fraction"],
                             host_rss_bytes=mem["host_rss_bytes"], limit=limit),
                  key="memory-peak")]
