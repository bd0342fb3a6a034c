"""The run-log store: an index in memory, the bytes spilled to a file; every line and every
search answer as a plain list of the same lines would give."""

from __future__ import annotations

import random

import pytest

from portside.tui import linestore
from portside.tui.linestore import LineStore


def _naive_find(lines: list[str], needle: str, start: int, backwards: bool) -> int | None:
    low = needle == needle.lower()
    hits = [i for i, x in enumerate(lines) if needle in (x.lower() if low else x)]
    if not hits:
        return None
    if backwards:
        before = [i for i in hits if i < start]
        return before[-1] if before else hits[-1]
    after = [i for i in hits if i >= start]
    return after[0] if after else hits[0]


@pytest.mark.parametrize("seg_bits", [32, 9])  # 9: segments of 512 bytes, to cross many
def test_spilled_store_reads_and_searches_like_a_list(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path, seg_bits: int) -> None:
    monkeypatch.setattr(linestore, "SPILL_BYTES", 700)
    monkeypatch.setattr(linestore, "WINDOW", 97)  # windows cut through lines and matches
    monkeypatch.setattr(linestore, "_SEG_BITS", seg_bits)
    rng = random.Random(5)
    words = ["loss", "Loss", "step", "NaN", "épochs", "grad_norm", "x" * 40, ""]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 6))) for _ in range(3000)]
    store = LineStore(spill_dir=str(tmp_path))
    for lo in range(0, len(lines), 37):
        store.extend(lines[lo:lo + 37])
    assert len(store) == len(lines)
    assert store.resident_bytes < store.total_bytes / 3  # most of the bytes are on disk
    assert [store[i] for i in range(len(lines))] == lines
    assert store[-1] == lines[-1]
    for needle in ("loss", "Loss", "NaN", "nan", "épochs", "x" * 40, "absent"):
        for start in (0, 1, 1500, 2999):
            for back in (False, True):
                assert store.find(needle, start, backwards=back) == \
                    _naive_find(lines, needle, start, back), (needle, start, back)
    store.close()
    assert list(tmp_path.iterdir()) == []  # the spill file is unlinked from the start


def test_ten_thousand_long_lines_keep_only_the_index_in_memory(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(linestore, "SPILL_BYTES", 1 << 16)
    store = LineStore(spill_dir=str(tmp_path))
    store.extend([f"{i:06d} " + "y" * 1000 for i in range(10_000)])
    assert store.resident_bytes < (1 << 16) + 4 * 10_000 + 2000
    assert store[7777].startswith("007777 ") and store.find("009999") == 9999
