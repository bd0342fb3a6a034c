"""The runner's batching policy (core/run/batching.py) on a simulated clock: no item held past its
limit, the first after quiet not held at all, slow trickles kept in page-local rows."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from tiers import examples

from portside.core.run.batching import Batcher

TICK = 0.1


def _simulate(gaps: list[float], size: int, hold: float) -> list[tuple[float, list[float]]]:
    """Items arrive after ``gaps``; the owner ticks every TICK (as core/run/runner.py does)."""
    b: Batcher[float] = Batcher(hold_s=hold, tick_s=TICK)
    arrivals, t = [], 0.0
    for g in gaps:
        t += g
        arrivals.append(t)
    out: list[tuple[float, list[float]]] = []
    i, now = 0, 0.0
    while i < len(arrivals) or b:
        now += TICK
        while i < len(arrivals) and arrivals[i] < now:
            first = b.add([arrivals[i]], arrivals[i], size)
            if first:
                out.append((arrivals[i], first))
            i += 1
        if b.due(now):
            out.append((now, b.take()))
        if now > arrivals[-1] + 10 * hold:
            raise AssertionError("an item was never sent")
    return out


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.001, 0.03, 0.1, 0.4, 0.9, 1.5, 3.0]), min_size=1,
                max_size=200), st.sampled_from([30, 60, 300]), st.sampled_from([0.5, 1.0]))
def test_no_item_waits_past_the_hold_and_none_is_lost(gaps: list[float], size: int,
                                                      hold: float) -> None:
    out = _simulate(gaps, size, hold)
    sent = [x for _, batch in out for x in batch]
    assert sent == sorted(sent) and len(sent) == len(gaps)
    for at, batch in out:
        assert at - batch[0] <= hold + 1e-9
    # The first item after a quiet spell of `hold` (or the very first) goes at the next tick.
    quiet = {x for x, before in zip(sent, [float("-inf"), *sent], strict=False)
             if x - before >= hold}
    for at, batch in out:
        if batch[0] in quiet:
            assert at - batch[0] <= TICK + 1e-9


def test_a_trickle_becomes_page_local_rows_and_a_burst_one_big_row() -> None:
    trickle = _simulate([0.1] * 100, 60, 1.0)  # 10 lines/s of 60 bytes
    assert all(len(b) * 60 <= 700 for _, b in trickle)
    assert len(trickle) <= 13  # an event per 0.1 s tick would be 100
    burst = _simulate([0.0005] * 1000, 60, 1.0)  # 2000 lines/s: ~16 KB rows, not 700-byte ones
    assert max(len(b) for _, b in burst[1:]) * 60 >= 16384
