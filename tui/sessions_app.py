"""The sessions screen (`portside`, `portside sessions`): every session with the study's counts,
filterable and sortable; enter opens its replay (a study's running session waiting for a
reviewer, verdict "review": opens it live, to decide its cards)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Input, Static

from portside.core.safety.terminal_text import clean_line

# (key in session_summary, column title). The study's counts and the verdict come before the
# long descriptive cells (agent, start time), so 120 columns show all of them: the table was
# cut after "in…" there (interventions, human minutes, cost and verdict off screen).
COLUMNS: list[tuple[str, str]] = [
    ("session_id", "session"),
    ("project", "project"),
    ("target", "target"),
    ("verdict", "verdict"),
    ("attempts", "tries"),
    ("failures", "failed"),
    ("silent_failures", "silent"),
    ("interventions", "interv."),
    ("human_s", "human min"),
    ("cost", "total $"),  # show's total: compute + tokens + human time
    ("duration", "min"),
    ("started_at", "started UTC"),
    ("agent", "agent"),
    ("study", "study · task"),
]
WIDE = {"project": 14, "agent": 24}  # cells cut to this many characters (…)


def _short_agent(spec: str) -> str:
    """`scripted:/long/path/agent.jsonl` → `scripted:agent.jsonl` (the file's name says it)."""
    kind, sep, rest = spec.partition(":")
    return f"{kind}:{Path(rest).name}" if sep and "/" in rest else spec or "none"


def _row_values(r: dict[str, Any]) -> dict[str, Any]:
    started, ended = r.get("started_at"), r.get("ended_at")
    return {
        **r,
        "project": Path(r.get("project") or "").name or "-",
        "agent": _short_agent(str(r.get("agent") or "")),
        "duration": (ended - started) if started and ended else None,
        # `show`'s total (the ledger's: human $ included); compute + tokens where not priced.
        "cost": (float(r["total_usd"]) if r.get("total_usd") is not None
                 else float(r.get("token_usd") or 0.0) + float(r.get("compute_usd") or 0.0)),
        "verdict": r.get("verdict") or "open",
    }


def _cell(key: str, v: Any) -> Text:
    if v is None:
        return Text("-", style="dim")
    if key == "started_at":
        return Text(dt.datetime.fromtimestamp(v, dt.UTC).strftime("%m-%d %H:%M"))
    if key == "duration":
        return Text(f"{v / 60:.1f}")
    if key == "human_s":
        return Text(f"{v / 60:.1f}")
    if key == "cost":
        return Text(f"{v:.2f}")
    if key == "verdict":
        style = {"pass": "green", "fail": "red", "review": "bold yellow"}.get(str(v), "yellow")
        return Text(str(v), style=style)
    text = clean_line(str(v))
    cut = WIDE.get(key)
    if cut and len(text) > cut:
        text = text[: cut - 1] + "…"
    return Text(text)


class SessionsApp(App[str | None]):
    """Returns the chosen session id (enter) or None (q)."""

    TITLE = "portside · sessions"
    CSS = """
    #filter { dock: top; height: 3; }
    #summary { dock: top; height: 1; padding: 0 1; color: $text-muted; }
    DataTable { height: 1fr; }
    """
    BINDINGS = [
        Binding("enter", "open", "Replay", id="sessions.open",
                tooltip="Replay the session (verdict 'review': open it live, to decide)"),
        Binding("slash", "filter", "Filter", id="sessions.filter",
                tooltip="Filter by any text in the row"),
        Binding("s", "sort", "Sort", id="sessions.sort",
                tooltip="Sort by the column under the cursor (again: reverse)"),
        Binding("q", "quit", "Quit", id="sessions.quit", tooltip="Leave portside"),
    ]

    def __init__(self, rows: list[dict[str, Any]], db: str) -> None:
        super().__init__()
        self.all_rows = [_row_values(r) for r in rows]
        self.db = db
        self.sort_key = "started_at"
        self.reverse = True
        self.text = ""
        # The study column only where some session belongs to a study: at 120 columns an
        # empty one would push the counts and the verdict off screen.
        self.columns = [c for c in COLUMNS
                        if c[0] != "study" or any(r.get("study") for r in self.all_rows)]

    def compose(self) -> ComposeResult:
        yield Input(placeholder="filter: project, target, agent, verdict…", id="filter")
        yield Static(id="summary")
        yield DataTable(id="table", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for key, title in self.columns:
            table.add_column(title, key=key)
        self.refill()
        table.focus()

    # Not `visible`: that is Textual's DOMNode property (a bool every widget's inherited
    # visibility reads up the tree to the app), which a method here would replace.
    def shown_rows(self) -> list[dict[str, Any]]:
        """The rows the filter keeps, in the chosen order."""
        needle = self.text.lower()
        rows = [r for r in self.all_rows
                if not needle or needle in " ".join(str(r.get(k) or "") for k, _ in self.columns).lower()]

        def key(r: dict[str, Any]) -> tuple[int, Any]:
            v = r.get(self.sort_key)
            return (v is None, v if v is not None else 0)

        rows = sorted(rows, key=key, reverse=self.reverse)
        # Grouped by study (a study's sessions together, each group in the chosen order);
        # sessions of no study last.
        return sorted(rows, key=lambda r: (r.get("study") is None, r.get("study_name") or ""))

    def refill(self) -> None:
        table = self.query_one(DataTable)
        table.clear()
        rows = self.shown_rows()
        for r in rows:
            table.add_row(*(_cell(k, r.get(k)) for k, _ in self.columns), key=r["session_id"])
        title = dict(COLUMNS)[self.sort_key]
        self.query_one("#summary", Static).update(
            f"{len(rows)} of {len(self.all_rows)} sessions in {self.db} · sorted by {title}"
            f" {'↓' if self.reverse else '↑'} · enter replays"
            + (" (review: live, to decide)" if any(r.get("verdict") == "review" for r in rows)
               else ""))

    @on(Input.Changed, "#filter")
    def _filter(self, event: Input.Changed) -> None:
        self.text = event.value
        self.refill()

    @on(Input.Submitted, "#filter")
    def _filter_done(self) -> None:
        self.query_one(DataTable).focus()

    def action_filter(self) -> None:
        self.query_one("#filter", Input).focus()

    def action_sort(self) -> None:
        table = self.query_one(DataTable)
        cols = self.columns
        key = cols[table.cursor_column][0] if table.cursor_column < len(cols) else "started_at"
        self.reverse = not self.reverse if key == self.sort_key else True
        self.sort_key = key
        self.refill()

    @on(DataTable.HeaderSelected)
    def _header(self, event: DataTable.HeaderSelected) -> None:
        key = str(event.column_key.value)
        self.reverse = not self.reverse if key == self.sort_key else True
        self.sort_key = key
        self.refill()

    @on(DataTable.RowSelected)
    def _selected(self, event: DataTable.RowSelected) -> None:
        self.exit(str(event.row_key.value))

    def action_open(self) -> None:
        table = self.query_one(DataTable)
        if table.row_count:
            row_key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
            self.exit(str(row_key.value))
