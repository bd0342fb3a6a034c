"""The corpus of correct ports and planted failures, through the real verification path.

    .venv/bin/python -m tests.bench.corpus [--case NAME ...] [--parallel 2] [--no-xla]

The XLA:CPU cases run when the torch_xla venv exists (PORTSIDE_XLA_PYTHON, else
~/.cache/portside/xla-venv); without it they are left out, and the output says so.

Prints one row per candidate: case, candidate, expected ("pass" or the alarm kind naming the
planted cause), got (the error alarm kinds, or "pass"), ok, and the other (info/warning) alarms.
Exits 1 when a row is not as expected.
"""

from __future__ import annotations

import argparse
import sys

from tests.corpus.cases import XLA_PYTHON
from tests.corpus.harness import run, table


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", action="append", help="only these cases (repeatable)")
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--no-xla", action="store_true", help="leave out the XLA:CPU cases")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every alarm's title")
    args = ap.parse_args()
    xla = None if XLA_PYTHON.exists() and not args.no_xla else False
    if xla is False:
        print(f"XLA:CPU cases left out ({'--no-xla' if args.no_xla else f'no {XLA_PYTHON}'})")
    rows, wall = run(args.case, args.parallel, xla)
    print(table(rows))
    if args.verbose:
        for r in rows:
            print(f"\n{r.case} / {r.candidate}: {r.steps} steps (references {r.reference_steps})")
            for t in r.titles:
                print("  " + t)
    bad = [r for r in rows if not r.ok]
    print(f"\n{len(rows) - len(bad)}/{len(rows)} as expected in {wall:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
