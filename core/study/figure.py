"""The study's figure: outcomes per project, and cost per successful task. An SVG for the
Markdown report (written by hand: no plotting dependency); cli/study.py draws the same bars
on a terminal with TERMINAL's colours."""

from __future__ import annotations

from html import escape
from typing import Any

# One colour per outcome, as the screen's checks colour them.
COLOURS = {"passed": "#2e7d32", "failed-silent": "#f9a825", "failed-error": "#c62828",
           "failed-timeout": "#6a1b9a", "interrupted": "#546e7a", "running": "#1565c0",
           "waiting": "#90a4ae", "pending": "#cfd8dc"}
TERMINAL = {"passed": "green", "failed-silent": "yellow", "failed-error": "red",
            "failed-timeout": "magenta", "interrupted": "grey50", "running": "blue",
            "waiting": "grey62", "pending": "grey70"}


def outcome_of(row: dict[str, Any]) -> str:
    return str(row["outcome"] or row["state"])


def svg(report: dict[str, Any]) -> str:
    """Left: a cell per task (its outcome) in a line per project; right: the task's total cost
    (every attempt) as a bar, on one scale, labelled with its cost per successful run."""
    rows = report["tasks"]
    projects: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        projects.setdefault(r["project"], []).append(r)
    line_h, cell, label_w, bar_w = 22, 16, 150, 220
    cells_w = max(len(v) for v in projects.values()) * (cell + 3) + 10
    width = label_w + cells_w + bar_w + 140
    height = 50 + line_h * len(projects) + 40
    top = max((r["total_usd"] for r in rows), default=0.0) or 1.0
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="8" y="18" font-size="14" font-weight="bold">study {escape(report["study"])}'
           f': outcome per task, cost per task</text>']
    y = 40
    for name, tasks in projects.items():
        out.append(f'<text x="8" y="{y + 12}">{escape(name)}</text>')
        for k, r in enumerate(tasks):
            x = label_w + k * (cell + 3)
            out.append(f'<rect x="{x}" y="{y}" width="{cell}" height="{cell}" '
                       f'fill="{COLOURS.get(outcome_of(r), "#999")}"><title>{escape(r["task"])}: '
                       f'{escape(outcome_of(r))}</title></rect>')
        usd = sum(r["total_usd"] for r in tasks)
        ok = sum(r["successful_runs"] for r in tasks)
        bx = label_w + cells_w
        out.append(f'<rect x="{bx}" y="{y + 2}" width="{max(1.0, bar_w * usd / top):.1f}" '
                   f'height="{cell - 4}" fill="#455a64"/>')
        per = f"${usd / ok:.4f} per success" if ok else "no success"
        out.append(f'<text x="{bx + bar_w + 6}" y="{y + 12}">${usd:.4f} · {per}</text>')
        y += line_h
    x = 8
    for outcome in ("passed", "failed-silent", "failed-error", "failed-timeout", "running",
                    "pending"):
        out.append(f'<rect x="{x}" y="{y + 10}" width="12" height="12" '
                   f'fill="{COLOURS[outcome]}"/><text x="{x + 16}" y="{y + 20}">{outcome}</text>')
        x += 16 + 8 * len(outcome) + 14
    out.append("</svg>")
    return "\n".join(out) + "\n"
