"""How much each tier runs: `make test-fast` (PORTSIDE_TEST_TIER=fast) tries a tenth of the
property tests' examples, `make test` all of them. The properties asserted are the same."""

from __future__ import annotations

import os

FAST = os.environ.get("PORTSIDE_TEST_TIER") == "fast"


def examples(n: int) -> int:
    """``max_examples`` for a property test that tries ``n`` in the full tier."""
    return max(5, n // 10) if FAST else n
