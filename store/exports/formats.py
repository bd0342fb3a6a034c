"""Export formats: CSV through the stdlib ``csv`` module, JSON as an array of rows (the
interventions' shape: ``store/schemas/interventions.schema.json``), JSONL one row a line,
Markdown tables; each streamed row by row (``iter_*``) so an export's memory stays flat."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from portside.core.safety.terminal_text import clean_text_stream, json_safe

# --- formats --------------------------------------------------------------------------------


def to_csv(rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> str:
    return "".join(iter_csv(rows, columns))


def iter_csv(rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> Iterator[str]:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _cell(row.get(k)) for k in columns})
        yield buf.getvalue()
        buf.seek(0)
        buf.truncate()
    yield buf.getvalue()


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return value


def to_json(rows: Iterable[dict[str, Any]]) -> str:
    return "".join(iter_json(rows))


def iter_json(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    """``json.dumps(list(rows), indent=2)`` a row at a time: each row dumped on its own, its
    lines indented one level (strings never hold a raw newline in JSON)."""
    first = True
    for row in rows:
        text = json.dumps(row, indent=2, sort_keys=False, ensure_ascii=False)
        yield json_safe(("[\n" if first else ",\n") + "  " + text.replace("\n", "\n  "))
        first = False
    yield "[]\n" if first else "\n]\n"


def to_jsonl(rows: Iterable[dict[str, Any]]) -> str:
    return "".join(iter_jsonl(rows))


def iter_jsonl(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    for r in rows:
        yield json_safe(json.dumps(r, ensure_ascii=False)) + "\n"


def md_cell(value: Any) -> str:
    text = "" if value is None else str(_cell(value))
    return text.replace("|", "\\|").replace("\n", " ")


def iter_md(rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> Iterator[str]:
    yield "| " + " | ".join(columns) + " |\n" + "|" + "---|" * len(columns) + "\n"
    for row in rows:
        yield "| " + " | ".join(md_cell(row.get(c)) for c in columns) + " |\n"


def render(rows: Iterable[dict[str, Any]], columns: Sequence[str], fmt: str) -> str:
    return "".join(render_iter(rows, columns, fmt))


def render_iter(rows: Iterable[dict[str, Any]], columns: Sequence[str], fmt: str
                ) -> Iterator[str]:
    """The export as it is made, row by row (constant memory whatever the row count)."""
    # Exports go to terminals and pull requests: no escape sequence from a run or a recording
    # survives into CSV or Markdown (JSON escapes its controls, losslessly).
    if fmt == "csv":
        return clean_text_stream(iter_csv(rows, columns))
    if fmt == "json":
        return iter_json(rows)
    if fmt == "jsonl":
        return iter_jsonl(rows)
    if fmt == "md":
        return clean_text_stream(iter_md(rows, columns))
    raise ValueError(f"unknown format {fmt!r}")

def usd(value: float | None) -> str:
    return "n/a" if value is None else f"${value:,.2f}"
