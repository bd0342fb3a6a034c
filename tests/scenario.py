"""A fixed session for the TUI tests and snapshots: deterministic timestamps, ids and text."""

from __future__ import annotations

from portside.core.log import events as ev

SID = "20260101-120000-test"
T0 = 1_767_268_800.0  # 2026-01-01 12:00:00 UTC

INFO = {"project": "/work/demo/mnist", "target": "tpu:v5e", "agent": "scripted:demo.jsonl",
        "mode": "live", "title": "mnist → tpu", "criteria": {"budget": {"max_attempts": 10}}}

TRAIN_BEFORE = """import torch
from torch.nn.utils import clip_grad_norm_


def train(model, loader, opt, device):
    model.train()
    for data, target in loader:
        data, target = data.to(device), target.to(device)
        opt.zero_grad()
        loss = model(data, target)
        loss.backward()
        clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return loss.item()
"""

TRAIN_AFTER = """import torch
import torch_xla.core.xla_model as xm
from torch.nn.utils import clip_grad_norm_


def train(model, loader, opt, device):
    model.train()
    for data, target in loader:
        data, target = data.to(device), target.to(device)
        opt.zero_grad()
        loss = model(data, target)
        loss.backward()
        clip_grad_norm_(model.parameters(), 0.05)
        xm.optimizer_step(opt)
    return loss.item()
"""


def at(dt: float) -> float:
    return T0 + dt


def session_start() -> ev.SessionStarted:
    return ev.SessionStarted(session_id=SID, ts=at(0), project=INFO["project"],
                             target=INFO["target"], agent=INFO["agent"], mode="live",
                             criteria=INFO["criteria"])


def agent_turn() -> list[ev.Event]:
    return [
        ev.AgentText(session_id=SID, ts=at(1), text="I'll read the training loop first."),
        ev.AgentToolCall(session_id=SID, ts=at(2), call_id="c1", name="read_file",
                         input={"path": "train.py"}),
        ev.AgentToolResult(session_id=SID, ts=at(3), call_id="c1", content=TRAIN_BEFORE),
        ev.AgentText(session_id=SID, ts=at(4),
                     text="Switching the optimizer step to xm.optimizer_step for TPU."),
        ev.AgentUsage(session_id=SID, ts=at(4), model="claude-sonnet-4-5", input_tokens=12000,
                      output_tokens=800, cost_usd=0.048),
    ]


def edit(edit_id: str = "e1", path: str = "train.py", before: str = TRAIN_BEFORE,
         after: str = TRAIN_AFTER, dt: float = 5) -> ev.EditProposed:
    return ev.EditProposed(session_id=SID, ts=at(dt), edit_id=edit_id, path=path,
                           before=before, after=after, rationale="use the XLA optimizer step")


def run_started(run_id: str, role: str, attempt: int, dt: float) -> ev.RunStarted:
    return ev.RunStarted(session_id=SID, ts=at(dt), run_id=run_id, role=role,  # type: ignore[arg-type]
                         attempt=attempt, command="python train.py --epochs 1", target="cpu")


def steps(run_id: str, n: int, *, start: int = 0, max_norm: float = 1.0, loss0: float = 2.3,
          dt: float = 10) -> ev.RunRecord:
    recs = []
    for i in range(start, start + n):
        recs.append({"type": "step", "t": at(dt) + i * 0.02, "step": i,
                     "loss": round(loss0 * (0.97 ** i), 5), "grad_norm": 1.5, "max_norm": max_norm,
                     "step_s": 0.025, "compiles": 2})
    return ev.RunRecord(session_id=SID, ts=at(dt), run_id=run_id, records=recs)


def facts(run_id: str, dt: float) -> ev.RunRecord:
    return ev.RunRecord(session_id=SID, ts=at(dt), run_id=run_id, records=[
        {"type": "facts", "backend": "cpu", "device_kind": "CPU", "device_name": "CPU:0",
         "device_count": 1}])


def output(run_id: str, lines: list[str], dt: float) -> ev.RunOutput:
    return ev.RunOutput(session_id=SID, ts=at(dt), run_id=run_id, lines=lines)


def run_finished(run_id: str, dt: float, n: int = 5, wall_s: float = 3.0) -> ev.RunFinished:
    """A run that ended well after ``n`` steps."""
    return ev.RunFinished(session_id=SID, ts=at(dt), run_id=run_id, exit_code=0,
                          outcome="passed", wall_s=wall_s, steps=n)


def train_lines(n: int, epoch: int = 1) -> list[str]:
    return [f"Train Epoch: {epoch} [{i * 64}/4000 ({i * 64 * 100 // 4000}%)]\tLoss: "
            f"{2.3 * 0.97 ** i:.6f}" for i in range(n)]


def clipping_alarm(dt: float = 30) -> ev.AlarmRaised:
    return ev.AlarmRaised(
        session_id=SID, ts=at(dt), alarm_id="a-clip", check="clipping-changed", severity="error",
        title="max_norm changed: 0.05 vs reference 1.0", run_id="cand-1",
        evidence={"candidate": {"steps": 40, "clip_steps": 40, "max_norm": [0.05],
                                "uses_share": 1.0, "clipped_share": 1.0, "judged": 40},
                  "references": [{"steps": 40, "clip_steps": 40, "max_norm": [1.0],
                                  "uses_share": 1.0, "clipped_share": 0.03, "judged": 40}],
                  "reason": "max_norm"})


def drift_alarm(dt: float = 31) -> ev.AlarmRaised:
    n = 40
    cand = [2.3 * 0.97 ** i + (0.4 if i > 20 else 0.0) for i in range(n)]
    lo = [2.3 * 0.97 ** i - 0.05 for i in range(n)]
    hi = [2.3 * 0.97 ** i + 0.05 for i in range(n)]
    return ev.AlarmRaised(
        session_id=SID, ts=at(dt), alarm_id="a-drift", check="numeric-drift", severity="error",
        title="loss leaves the reference envelope from step 21 (above, 19 steps out)",
        run_id="cand-1",
        evidence={"series": "loss", "first_step": 21, "steps_out": 19,
                  "spark": {"steps": list(range(n)), "candidate": cand, "lo": lo, "hi": hi}})


def slow_alarm(dt: float = 32) -> ev.AlarmRaised:
    return ev.AlarmRaised(session_id=SID, ts=at(dt), alarm_id="a-slow", check="slow",
                          severity="warning", title="steady step 41 ms vs reference 25 ms",
                          evidence={"ratio": 1.64})


def full_session() -> list[ev.Event]:
    """Everything the main snapshot shows: a diff card, two runs with logs, three alarms."""
    out: list[ev.Event] = [session_start(), *agent_turn(), edit()]
    out += [run_started("ref-1", "reference", 1, 6), facts("ref-1", 7), steps("ref-1", 40, dt=8),
            output("ref-1", train_lines(40), 9),
            ev.RunFinished(session_id=SID, ts=at(12), run_id="ref-1", exit_code=0,
                           outcome="passed", wall_s=6.0, compile_s=1.2, steady_step_s=0.025,
                           steps=40)]
    out += [run_started("cand-1", "candidate", 1, 13), facts("cand-1", 14),
            steps("cand-1", 40, max_norm=0.05, dt=15), output("cand-1", train_lines(40), 16)]
    out += [clipping_alarm(), drift_alarm(), slow_alarm()]
    return out


LONG_BEFORE = """def fit(model, loader, optimizer, scheduler, epochs):
    for epoch in range(epochs):
        for step, (data, target) in enumerate(loader):
            loss = train_step(model, data, target, optimizer, scheduler, accumulate=1, clip_max_norm=1.0)
            log_metrics(epoch=epoch, step=step, loss=loss)
"""

LONG_AFTER = LONG_BEFORE.replace("clip_max_norm=1.0)", "clip_max_norm=0.05)")


def long_edit_session() -> list[ev.Event]:
    """An edit awaiting a decision whose only change lies past column 90 of its line."""
    from portside.core.workspace.risk import scan

    e = edit("e-long", path="fit.py", before=LONG_BEFORE, after=LONG_AFTER, dt=5)
    e.rationale = "same clip as the TPU recipe"
    e.risks = scan(LONG_BEFORE, LONG_AFTER)
    out: list[ev.Event] = [session_start(), *agent_turn(), e]
    out += [run_started("ref-1", "reference", 1, 6), facts("ref-1", 7), steps("ref-1", 40, dt=8),
            output("ref-1", train_lines(40), 9)]
    out += [clipping_alarm(), slow_alarm()]
    return out
