"""A session's configuration, and its trip through the log.

``to_log`` writes into session.started's meta what resuming needs and no other event keeps;
``from_log`` reads it back: both halves of the trip in one place, so they cannot drift apart.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from portside.core.agent.base import Agent
from portside.core.log import events as ev
from portside.core.log.criteria import Criteria
from portside.core.session.review import Policy

RESUME_VERSION = 1
# session.ended's outcome when a signal ended portside (a reboot's SIGTERM, a closed terminal's
# SIGHUP) before anyone decided: the session is failed for now, and `run --resume` continues it.
INTERRUPTED = "interrupted"


class SessionLocked(RuntimeError):
    """The session is being run by another portside process (its engine lock is held)."""


@dataclass
class SessionConfig:
    project: Path
    target: str
    reference_command: str
    candidate_command: str | None = None  # defaults to the reference command
    criteria: Criteria | None = None
    criteria_path: str = ""
    reference_runs: int = 2
    reference_target: str = "cpu"
    timeout_s: float | None = None
    stall_s: float | None = None
    agent: Agent | None = None
    policy: Policy = "auto"
    mode: str = "verify"  # verify | live | headless | demo
    workdir: Path | None = None  # probe files, workspace, pristine copy
    # Where per-session workdirs go (workdir = work_root/<session id>) when workdir is unset:
    # the CLI passes <db dir>/work, so a killed session's workspace outlives reboots.
    work_root: Path | None = None
    isolate: bool = False  # runs in copies of the project (agent sessions), not in it
    sandbox: bool = True  # isolated runs inside bubblewrap where available (False: --no-sandbox)
    reviewer: str = ""
    title: str = ""
    reference_env: dict[str, str] | None = None
    candidate_env: dict[str, str] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    localize: bool = False  # after a drift/goal/clipping alarm: where it diverged (trace mode)
    # Verification of an imported session: the candidate runs in this tree (the references in
    # ``project``), and the imported agent's claim is checked against the candidate's alarms.
    candidate_cwd: Path | None = None
    claim: str = ""

    @property
    def candidate(self) -> str:
        return self.candidate_command or self.reference_command

    def to_log(self, workdir: Path) -> dict[str, Any]:
        """What `portside run --resume` needs and cannot derive from the other events (the
        ``resume`` part of session.started's meta). No secrets: environments are scrubbed
        like a run's, the API key is read again at resume."""
        from portside.core.safety.secrets import scrub_env

        toml = None
        if self.criteria_path:
            with contextlib.suppress(OSError, UnicodeDecodeError):
                toml = Path(self.criteria_path).read_text(encoding="utf-8")
        return {
            "version": RESUME_VERSION,
            "agent": self.agent.spec() if self.agent is not None else None,
            "policy": self.policy,
            "reference_runs": self.reference_runs,
            "reference_target": self.reference_target,
            "timeout_s": self.timeout_s,
            "stall_s": self.stall_s,
            "isolate": self.isolate,
            "sandbox": self.sandbox,
            "workdir": str(Path(os.path.abspath(workdir))),
            "criteria_path": self.criteria_path,
            "criteria_toml": toml,
            "reference_env": scrub_env(self.reference_env) if self.reference_env is not None else None,
            "candidate_env": scrub_env(self.candidate_env) if self.candidate_env is not None else None,
            "reviewer": self.reviewer,
            "meta": dict(self.meta),
        }

    @classmethod
    def from_log(cls, started: ev.SessionStarted, r: dict[str, Any], *,
                 criteria: Criteria | None, agent: Agent | None, policy: Policy | None = None,
                 mode: str | None = None) -> SessionConfig:
        """The config ``to_log`` wrote into ``started``'s meta (``r``), with what the caller
        rebuilt from it (criteria, agent) and what it overrides (policy, mode)."""
        return cls(
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
