"""Exports and the study's table, read from the store (no Textual; used by the CLI and tests):
rows (``rows.py``), formats (``formats.py``), the report (``report.py``), the study's table and
effort and cost (``stats.py``).

Every number (costs, counts, human time, goal met) comes from the session's ledger
(``core/log/ledger.py``), folded from the log; rows come from the derived tables, written in the same
transaction as their events, or (interventions) from the log itself. Secrets never reach the store (the runner
scrubs them), so nothing here needs to filter them.

Formats: CSV through the stdlib ``csv`` module; JSON as an array of rows (the interventions'
shape is documented by ``store/schemas/interventions.schema.json``); JSONL one row a line;
Markdown tables.
"""

from portside.store.exports.formats import (
    iter_csv,
    iter_json,
    iter_jsonl,
    iter_md,
    render,
    render_iter,
    to_csv,
    to_json,
    to_jsonl,
)
from portside.store.exports.report import report_md
from portside.store.exports.rows import (
    ALARM_COLUMNS,
    INTERVENTION_COLUMNS,
    RUN_COLUMNS,
    SCHEMA_DIR,
    alarm_rows,
    intervention_rows,
    iso,
    iter_alarm_rows,
    iter_intervention_rows,
    iter_run_rows,
    run_rows,
)
from portside.store.exports.stats import (
    STATS_COLUMNS,
    session_costs,
    stats,
    stats_csv,
    stats_json,
    stats_md,
)

__all__ = [
    "ALARM_COLUMNS", "INTERVENTION_COLUMNS", "RUN_COLUMNS", "SCHEMA_DIR", "STATS_COLUMNS",
    "alarm_rows", "intervention_rows", "iso", "iter_alarm_rows", "iter_csv", "iter_intervention_rows",
    "iter_json", "iter_jsonl", "iter_md", "iter_run_rows", "render", "render_iter", "report_md",
    "run_rows", "session_costs", "stats", "stats_csv", "stats_json", "stats_md", "to_csv",
    "to_json", "to_jsonl",
]
