"""What every check reads, and nothing that judges: the floor of `core/checks/`.

One run's probe records as arrays (`records.py`; folded as they arrive: `records_fold.py`),
what the checks derive from one run alone (`facts.py`, kept in its memo: `memo.py`; carried
from one live pass to the next: `carry.py`; portside's own records of whether a
run's records are its own: `integrity.py`), series and step helpers (`series.py`, `steps.py`), and
how the runs of a pass line up
(`alignment.py`) in the one `Comparison` every check is given (`comparison.py`).

Nothing here imports a check or raises an alarm: the import contract "inside checks" in
pyproject.toml keeps the checks above this floor.
"""
