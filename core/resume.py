"""Resume a killed session from its log: the log is the truth, the engine is rebuilt from it.

``engine_from_log`` rebuilds the config from ``session.started`` (its ``meta.resume``), and
``restore`` (called by ``SessionEngine.run``) brings the engine to where the killed one stopped:
runs interrupted by the kill are finished as ``aborted`` (reason ``engine-killed``) and their
leftover processes killed; finished runs are restored into the verifier, except references that
did not finish ``passed`` (an aborted one is run again and never counts: the ledger's rule for
a valid reference); an edit or a claim the kill cut off is kept so the reviewer's answer is
not lost.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import events as ev
from .agent.base import AgentSpecError
from .agent.registry import agent_from_spec
from .criteria import Criteria, CriteriaError, parse_criteria
from .ledger import ENGINE_KILLED
from .review import Policy

if TYPE_CHECKING:
    from .engine import SessionConfig, SessionEngine

RESUME_VERSION = 1
# What core/secrets.redact_command leaves of an inline secret: NAME=*** or a URL's user:***@.
_REDACTED = re.compile(r"=\*\*\*(?=[\s;&|)]|$)|:\*\*\*@")


class ResumeError(RuntimeError):
    """A session that cannot be resumed (ended, recorded without resume data, still running)."""


@dataclass
class Resumed:
    """What the log says the killed engine left half-way."""

    log: list[ev.Event]
    # The edit a kill cut off: (proposed, decided or None, applied); taken once by the host.
    interrupted_edit: tuple[ev.EditProposed, ev.EditDecided | None, bool] | None = None
    pending_claim: ev.AgentClaimed | None = None  # a claim the kill left unanswered
    agent_done: bool = False  # the agent's claim was answered; only the end is missing
    interrupted_runs: list[str] = field(default_factory=list)


def final_end(events: list[ev.Event]) -> ev.SessionEnded | None:
    """The session.ended that closes the session for good; None while it is open, or when
    its last end was a signal's (``interrupted``: a reboot, a closed terminal), which resumes."""
    from .engine import INTERRUPTED

    last = next((e for e in reversed(events) if isinstance(e, ev.SessionEnded)), None)
    return None if last is None or last.outcome == INTERRUPTED else last


def resume_meta(config: SessionConfig, workdir: Path) -> dict[str, Any]:
    """What `portside run --resume` needs and cannot derive from the other events. No
    secrets: environments are scrubbed like a run's, the API key is read again at resume."""
    from .secrets import scrub_env

    c = config
    toml = None
    if c.criteria_path:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            toml = Path(c.criteria_path).read_text(encoding="utf-8")
    return {
        "version": RESUME_VERSION,
        "agent": c.agent.spec() if c.agent is not None else None,
        "policy": c.policy,
        "reference_runs": c.reference_runs,
        "reference_target": c.reference_target,
        "timeout_s": c.timeout_s,
        "stall_s": c.stall_s,
        "isolate": c.isolate,
        "sandbox": c.sandbox,
        "workdir": str(Path(os.path.abspath(workdir))),
        "criteria_path": c.criteria_path,
        "criteria_toml": toml,
        "reference_env": scrub_env(c.reference_env) if c.reference_env is not None else None,
        "candidate_env": scrub_env(c.candidate_env) if c.candidate_env is not None else None,
        "reviewer": c.reviewer,
        "meta": dict(c.meta),
    }


def engine_from_log(events: list[ev.Event], sink: Any, *, policy: Policy | None = None,
                    mode: str | None = None) -> SessionEngine:
    """An engine that continues the session whose log is ``events`` (``run()`` resumes)."""
    from .engine import SessionConfig, SessionEngine

    if not events or not isinstance(events[0], ev.SessionStarted):
        raise ResumeError("the log does not start with session.started")
    started = events[0]
    sid = started.session_id
    if final_end(events) is not None:
        raise ResumeError(f"session {sid} has already ended; there is nothing to resume")
    r = started.meta.get("resume")
    if not isinstance(r, dict) or r.get("version") != RESUME_VERSION:
        raise ResumeError(f"session {sid} was recorded without the data resuming needs "
                          "(an older portside); it cannot be resumed")
    criteria = None
    if r.get("criteria_toml"):
        try:
            criteria = parse_criteria(r["criteria_toml"], r.get("criteria_path") or "<log>")
        except CriteriaError as exc:
            raise ResumeError(f"criteria recorded in the log: {exc}") from None
    elif started.criteria:
        criteria = Criteria.from_dict(started.criteria)
    try:
        agent = agent_from_spec(r.get("agent"))
    except AgentSpecError as exc:
        raise ResumeError(str(exc)) from None
    for command in (started.reference_command, started.candidate_command):
        if _REDACTED.search(command or ""):
            # The log keeps `HF_TOKEN=***`, never the value: running that again would run
            # something else than the session did, silently.
            raise ResumeError(f"session {sid}'s command held an inline secret, which the log "
                              f"does not keep ({command!r}); start a new session instead")
    config = SessionConfig(
        project=Path(started.project),
        target=started.target,
        reference_command=started.reference_command,
        candidate_command=started.candidate_command or None,
        criteria=criteria,
        criteria_path=r.get("criteria_path") or "",
        reference_runs=int(r.get("reference_runs") or 0),
        reference_target=r.get("reference_target") or "cpu",
        timeout_s=r.get("timeout_s"),
        stall_s=r.get("stall_s"),
        agent=agent,
        policy=policy or r.get("policy") or "auto",
        mode=mode or started.mode,
        workdir=Path(r["workdir"]),
        isolate=bool(r.get("isolate")),
        sandbox=bool(r.get("sandbox", True)),
        reviewer=r.get("reviewer") or "",
        title=started.title,
        reference_env=r.get("reference_env"),
        candidate_env=r.get("candidate_env"),
        meta=dict(r.get("meta") or {}),
    )
    return SessionEngine(config, sink, session_id=sid, resumed=_half_way(list(events)))


def restore(engine: SessionEngine, resumed: Resumed) -> None:
    """Bring ``engine`` to where the killed one stopped, from the log alone."""
    from .checks import Alarm

    log = resumed.log
    # Everyone who learns from the bus (the ledger, the gate, the screen) sees the past once,
    # without appending it again; a signal's end is not the end any more (the log keeps it).
    for event in log:
        if not isinstance(event, ev.SessionEnded):
            engine.bus.deliver_only(event)
    last_end = next((e for e in reversed(log) if isinstance(e, ev.SessionEnded)), None)
    signalled = last_end.reason if last_end is not None and not any(
        isinstance(e, ev.SessionState) and e.state == "resumed" and e.seq > last_end.seq
        for e in log) else ""
    started: dict[str, ev.RunStarted] = {}
    finished: dict[str, ev.RunFinished] = {}
    records: dict[str, list[dict[str, Any]]] = {}
    tails: dict[str, list[str]] = {}
    alarms: dict[str, list[Alarm]] = {}
    for e in log:
        if isinstance(e, ev.RunStarted):
            started[e.run_id] = e
        elif isinstance(e, ev.RunFinished):
            finished[e.run_id] = e
        elif isinstance(e, ev.RunRecord):
            records.setdefault(e.run_id, []).extend(e.records)
        elif isinstance(e, ev.RunOutput):
            tail = tails.setdefault(e.run_id, [])
            tail.extend(e.lines)
            del tail[:-200]
        elif isinstance(e, ev.AlarmRaised) and e.run_id:
            with contextlib.suppress(ValueError):
                alarms.setdefault(e.run_id, []).append(Alarm.from_event(e))
    for run_id, st in started.items():
        fin = finished.get(run_id)
        if fin is None:
            resumed.interrupted_runs.append(run_id)
            killed = kill_run_processes(engine.workdir / "probe" / run_id)
            recs = records.get(run_id, [])
            fin = engine.bus.publish(ev.RunFinished(  # type: ignore[assignment]
                session_id=engine.session_id, run_id=run_id, exit_code=None,
                outcome="aborted", reason=ENGINE_KILLED,
                wall_s=max(0.0, log[-1].ts - st.ts),
                steps=sum(1 for r in recs if r.get("type") == "step" and r.get("rank", 0) == 0),
                error_message="portside was killed while this run was live"
                + (f"; {killed} leftover process(es) killed on resume" if killed else ""),
            ))
        assert fin is not None
        if st.role == "reference" and fin.outcome == "aborted":
            continue  # an aborted reference never counts: it is run again
        engine.verifier.restore_run(st, fin, records.get(run_id, []), tails.get(run_id, []),
                                    alarms.get(run_id, []))
    if engine.config.policy == "ask":
        # A pause the reviewer left on stays on; headless nobody could lift it.
        for e in log:
            if isinstance(e, ev.Intervention) and e.action in ("pause", "resume"):
                engine.gate.paused = e.action == "pause"
    refs = len(engine.verifier.references)
    refs_left = max(0, engine.config.reference_runs - refs)
    n_int = len(resumed.interrupted_runs)
    engine.bus.publish(ev.SessionState(
        session_id=engine.session_id, state="resumed",
        detail=f"resumed from the log after the engine stopped at seq {log[-1].seq}"
        + (f" ({signalled})" if signalled else "") + ": "
        f"{refs} reference and {len(engine.verifier.candidates)} candidate runs restored"
        + (f", {n_int} interrupted run(s) marked aborted" if n_int else "")
        + (f", {refs_left} reference run(s) still to do" if refs_left else ""),
    ))


def _half_way(log: list[ev.Event]) -> Resumed:
    """An edit or a claim the kill left half-way, so the reviewer's answer is not lost."""
    resumed = Resumed(log)
    results = {e.call_id for e in log if isinstance(e, ev.AgentToolResult)}
    last_call = next((e for e in reversed(log) if isinstance(e, ev.AgentToolCall)), None)
    if last_call is None or last_call.call_id in results:
        if any(isinstance(e, ev.AgentClaimed) for e in log) and last_call is not None \
                and last_call.name == "finish":
            resumed.agent_done = True
        return resumed
    after = [e for e in log if e.seq > last_call.seq]
    if last_call.name == "finish":
        resumed.pending_claim = next((e for e in after if isinstance(e, ev.AgentClaimed)), None)
    elif last_call.name in ("propose_edit", "write_file"):
        proposed = next((e for e in after if isinstance(e, ev.EditProposed)), None)
        if proposed is not None:
            decided = next((e for e in after if isinstance(e, ev.EditDecided)
                            and e.edit_id == proposed.edit_id), None)
            applied = any(isinstance(e, ev.EditApplied) and e.edit_id == proposed.edit_id
                          for e in after)
            resumed.interrupted_edit = (proposed, decided, applied)
    return resumed


def kill_run_processes(probe_out: Path) -> int:
    """SIGKILL what a killed engine's run left behind: every process whose environment carries
    this run's probe file (its shell, the trainer, children that left the process group)."""
    import psutil

    prefix = str(Path(os.path.abspath(probe_out)))
    killed = 0
    for proc in psutil.process_iter():
        try:
            out = proc.environ().get("PORTSIDE_PROBE_OUT", "")
        except (psutil.Error, OSError):
            continue
        if out.startswith(prefix):
            with contextlib.suppress(psutil.Error, OSError):
                proc.send_signal(signal.SIGKILL)
                killed += 1
    return killed
