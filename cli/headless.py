"""Headless output: a concise live log of a session and the final summary (rich, no Textual)."""

from __future__ import annotations

import asyncio
import json
import math
import signal
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from portside.core.log import events as ev
from portside.core.log.render import event_text
from portside.core.safety.terminal_text import markup_free as _safe

_STYLE = {"critical": "bold white on red", "error": "bold red", "warning": "yellow", "info": "dim"}


class ConsoleLog:
    """Prints the events a reviewer would care about, one line each, as they happen."""

    def __init__(self, console: Console, show_output: bool = False) -> None:
        self.console = console
        self.show_output = show_output
        self.t0 = time.time()

    def __call__(self, event: ev.Event) -> None:
        if isinstance(event, ev.RunOutput | ev.RunRecord) and not self.show_output:
            return
        if isinstance(event, ev.RunRecord | ev.AgentUsage):
            return
        stamp = f"{event.ts - self.t0:7.1f}s "
        style = ""
        if isinstance(event, ev.AlarmRaised):
            style = _STYLE.get(event.severity, "")
        elif isinstance(event, ev.RunFinished):
            style = "green" if event.outcome == "passed" else "red"
        elif isinstance(event, ev.SessionEnded):
            style = "bold green" if event.verdict == "pass" else "bold red"
        if isinstance(event, ev.RunOutput):
            for line in event.lines:
                self.console.print(Text(f"{stamp}  │ {_safe(line)}", style="dim"), soft_wrap=True)
            return
        # Text, never markup: event text comes from runs and agents.
        self.console.print(Text(stamp + event_text(event), style=style), soft_wrap=True)


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.{digits}f}"
    return str(v)


def emit_result(data: dict[str, Any], as_json: bool) -> int:
    """The end of a headless session: exactly one JSON object, or the rich summary; returns
    the exit status (0 pass, 1 fail)."""
    import sys

    if as_json:
        sys.stdout.write(json.dumps(data, sort_keys=True, default=str) + "\n")
    else:
        print_summary(Console(highlight=False, width=None if sys.stdout.isatty() else 160), data)
    return 0 if data.get("verdict") == "pass" else 1


def print_summary(console: Console, result: dict[str, Any]) -> None:
    from portside.core.checks.describe import describe, one_line

    # Every value may come from a run or a recording: cleaned, and Text (never markup).
    runs = Table(title=Text(f"session {_safe(result['session'])}"), title_justify="left")
    for col in ("run", "role", "outcome", "exit", "wall s", "compile s", "steady step s",
                "steps", "metrics", "device"):
        runs.add_column(col, overflow="fold")
    rows = [*result.get("reference", []), *result.get("attempts", []),
            *result.get("larger", [])]
    for r in rows:
        metrics = ", ".join(f"{k}={_fmt(v, 4)}" for k, v in sorted((r.get("metrics") or {}).items()))
        device = r.get("device") or {}
        dev = " ".join(str(device.get(k)) for k in ("backend", "device_kind", "device_name")
                       if device.get(k))
        cells = (r["run"], r["role"], r["outcome"], _fmt(r["exit_code"]), _fmt(r["wall_s"], 1),
                 _fmt(r.get("compile_s"), 2), _fmt(r.get("steady_step_s"), 4),
                 _fmt(r.get("steps")), metrics, dev)
        runs.add_row(*(Text(_safe(c)) for c in cells))
    console.print(runs)
    alarms = [*(result.get("alarms") or []),
              *(a for r in result.get("larger", []) for a in r.get("alarms", []))]
    if alarms:
        console.print(Text("alarms", style="bold"))
    for a in alarms:
        console.print(Text(_safe(f"  {a['severity']:8} {a['kind']}: {a['title']}"),
                           style=_STYLE.get(a["severity"], "")))
        evidence = one_line(describe(a["kind"], a.get("evidence") or {}))
        if evidence:
            console.print(Text(f"           {_safe(evidence)}", style="dim"))
    loc = result.get("localize")
    if loc:
        console.print(Text(f"localize ({loc.get('alarm', '-')}): "
                           f"{loc.get('summary') or loc.get('error') or loc.get('skipped')}"))
    cost = result.get("cost") or {}
    if "total_usd" in cost:
        per = cost.get("cost_per_successful_run_usd")
        console.print(
            f"cost: compute ${cost['compute_usd']:.4f}  tokens ${cost['tokens_usd']:.4f}  "
            f"human ${cost['human_usd']:.2f}  total ${cost['total_usd']:.4f}  "
            f"per successful run {'-' if per is None else f'${per:.4f}'}"
        )
        for big in cost.get("larger") or []:
            console.print(Text(f"larger inputs: {_safe(big['line'])}"))
        perf = cost.get("performance") or {}
        if perf.get("line"):
            console.print(Text(f"performance: {_safe(perf['line'])}"), soft_wrap=True)
    if cost.get("human_usd_per_hour") is not None:
        console.print(Text(f"human time {cost.get('human_minutes', 0):.1f} min (busy time, "
                           f"overlaps counted once) at ${cost['human_usd_per_hour']:.0f}/h "
                           "(price row human-hour; set it in the criteria's [prices])",
                           style="dim"))
    if "goal_metric" in result and not result["goal_metric"]:
        console.print(Text("goal: none checked (the criteria name no [goal] metric; set "
                           "metric and pattern to check one)", style="yellow"))
    if cost.get("stopped_runs"):  # [stop]: what the candidates stopped early did not spend
        console.print(Text(f"stopped: {cost['stopped_runs']} candidate run(s) at a decisive "
                           f"alarm; compute saved {cost.get('compute_saved_s', 0.0):.1f} s "
                           f"(${cost.get('compute_saved_usd', 0.0):.4f})"))
    if (result.get("decided") or {}).get("line"):
        console.print(Text(_safe(str(result["decided"]["line"])), style="dim"))
    verdict = result["verdict"]
    console.print(Text(_safe(f"verdict: {verdict.upper()} ({result['outcome']}; "
                             f"{result.get('reason', '')})"),
                       style="bold green" if verdict == "pass" else "bold red"))


#: After SIGTERM/SIGHUP, how long the session has to end by itself (runs aborted, recorded)
#: before it is cancelled as Ctrl-C would.
STOP_GRACE_S = 5.0


def install_signal_handlers(on_signal: Callable[[str], object] | None = None) -> list[int]:
    """SIGTERM (CI cancelling, `timeout`, Kubernetes) and SIGHUP (terminal closed, ssh dropped)
    end portside the way Ctrl-C does. The first one calls ``on_signal(name)`` (the engine's
    stop: runs aborted and recorded, the session ended with the signal as its reason) and,
    inside an event loop, leaves it STOP_GRACE_S to finish before doing what SIGINT does
    (asyncio cancels the session); a second one, or one outside a loop, does that at once.
    Returns the list the signals received are appended to (for the exit status 128+N)."""
    got: list[int] = []

    def interrupt(frame: Any = None) -> None:
        current = signal.getsignal(signal.SIGINT)
        if callable(current):
            current(signal.SIGINT, frame)
        else:  # SIGINT ignored (started in the background): interrupt all the same
            raise KeyboardInterrupt

    def handler(signum: int, frame: Any) -> None:
        got.append(signum)
        if on_signal is not None and len(got) == 1:
            on_signal(signal.Signals(signum).name)
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
            if loop is not None:
                loop.call_later(STOP_GRACE_S, interrupt)
                return
        interrupt(frame)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)
    return got
