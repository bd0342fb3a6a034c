"""A reference run is a fact about what it ran: reused when nothing that decides it changed.

Its key is a digest of the project tree (core/workspace/tree_hash.py), the command, the seed
offset, the target, the probe's own code, the output patterns and limits it was judged under,
the interpreter the command runs and its packages' versions, the accelerators and host, the
variables the run sees (core/run/environment_facts.py; on an SSH host, what portside sends and
what the host's own login sets), and whether it ran in a sandbox, in a copy or in place. A fresh reference carries its key on ``run.started``; a later reference with
the same key is not run again: the stored run that computed it (its records, output and end,
from any session in the same database) is copied into this session's log as a run of its own
whose ``run.started`` says ``reused_from`` {session, run_id, finished_at, host}. Replay, export
and resume read it like any run; the ledger counts its compute in the session that made it.

Only a run that vouches is reused: it finished ``passed`` with steps, and none of its records
failed the seal (core/run/seal.py: the runner turns such a record into a ``tamper`` record).
A key that cannot be made (a project that cannot be listed, an interpreter that will not say
its packages, a host that does not answer) means a fresh run, never a guess.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from portside.core.log import events as ev
from portside.core.log.bus import EventBus

__all__ = ["KeyParts", "ReferenceReuse", "ReferenceSource", "StoredReference", "unusable"]

KEY_VERSION = "portside reference key v1"


@dataclass
class StoredReference:
    """A finished reference run as its session's log holds it."""

    session_id: str
    started: ev.RunStarted
    finished: ev.RunFinished
    output: list[ev.RunOutput] = field(default_factory=list)
    records: list[ev.RunRecord] = field(default_factory=list)

    def origin(self) -> dict[str, Any]:
        """reused_from for a copy of it: the run that computed it (a copy's own origin)."""
        if self.started.reused_from:
            return dict(self.started.reused_from)
        return {"session": self.session_id, "run_id": self.started.run_id,
                "finished_at": self.finished.ts, "host": ""}


class ReferenceSource(Protocol):
    """Where stored references are found (store/reference_runs.py)."""

    def find(self, key: str, *, command: str, seed_offset: int, target: str
             ) -> list[StoredReference]:
        """The references stored with this key, newest first."""
        ...


def unusable(stored: StoredReference) -> str:
    """Why this stored run may not stand in for a fresh one; "" when it may."""
    fin = stored.finished
    if fin.outcome != "passed":
        return f"it ended {fin.outcome}"
    if fin.steps <= 0:
        return "it recorded no step"
    tampered = sum(1 for batch in stored.records for r in batch.records
                   if r.get("type") == "tamper")
    if tampered:
        return f"{tampered} of its records failed the seal"
    return ""


def _probe_digest() -> str:
    """The probe's code: records of another probe are another fact."""
    from portside.core.probe import probe_dir, shipped_files

    h = hashlib.sha256()
    base = probe_dir().parent
    for rel in shipped_files():
        with contextlib.suppress(OSError):
            h.update(rel.encode() + b"\0" + (base / rel).read_bytes() + b"\0")
    return h.hexdigest()


@dataclass
class KeyParts:
    """What the references of one start share (the tree, the environment): made once, in a
    thread; each reference's key adds its seed offset."""

    facts: dict[str, Any]

    def key(self, seed_offset: int) -> str:
        body = json.dumps({"v": KEY_VERSION, "seed_offset": seed_offset, **self.facts},
                          sort_keys=True, default=str)
        return hashlib.sha256(body.encode()).hexdigest()


class ReferenceReuse:
    """The verifier's hook for references: their keys, and a stored run for a key."""

    def __init__(self, project: Path, source: ReferenceSource | None, *,
                 cache_file: Path | None = None, fresh: bool = False) -> None:
        self.project = Path(project)
        self.source = source
        self.cache_file = cache_file
        self.fresh = fresh  # --fresh-references: keyed (later sessions may reuse), never reused
        self._parts: dict[str, asyncio.Future[KeyParts | None]] = {}
        self.why_not = ""  # why the last key could not be made (diagnostics)

    async def parts(self, command: str, cwd: Path, *, target: str, env: Mapping[str, str] | None,
                    threads: int, patterns: Sequence[Any], timeout_s: float | None,
                    stall_s: float | None, executor: Any) -> KeyParts | None:
        """The shared part of the keys; None when it cannot be made (then runs are fresh)."""
        label = str(getattr(executor, "label", ""))
        sandbox = getattr(executor, "sandbox", None)
        spec = {
            "command": command, "target": target, "threads": threads,
            "patterns": [[p.name, str(getattr(p.regex, "pattern", p.regex))] for p in patterns],
            # The stall limit is not in it: a run that passed had no gap longer than its own,
            # and `verify` (1800 s by default) and `run` (none) must find each other's runs.
            "timeout_s": timeout_s,
            "where": "in place" if os.path.realpath(cwd) == os.path.realpath(self.project)
            else "copy",
            "sandbox": None if sandbox is None else {"network": bool(sandbox.network)},
            "host": label,
        }
        memo = json.dumps(spec, sort_keys=True, default=str) + json.dumps(
            sorted((env if env is not None else os.environ).items()))
        fut = self._parts.get(memo)
        if fut is None:
            fut = self._parts[memo] = asyncio.ensure_future(
                self._make(spec, command, env, executor if label else None))
        return await asyncio.shield(fut)

    async def _make(self, spec: dict[str, Any], command: str, env: Mapping[str, str] | None,
                    remote: Any) -> KeyParts | None:
        from portside.core.run import environment_facts as facts
        from portside.core.safety.secrets import scrub_env
        from portside.core.workspace.tree_hash import tree_digest

        source = dict(env if env is not None else os.environ)

        def local() -> dict[str, Any]:
            out: dict[str, Any] = {"tree": tree_digest(self.project), "probe": _probe_digest()}
            if remote is None:
                interp = facts.command_interpreter(command, source)
                got = facts.interpreter_facts(interp, self.cache_file) if interp else {}
                out["interpreter"] = {k: v for k, v in got.items() if k != "site_packages"}
                out["machine"] = facts.accelerator_facts()
            return out

        try:
            made = await asyncio.to_thread(local)
            if remote is not None:
                made["remote"] = await facts.remote_facts(remote, command)
        except Exception as exc:  # noqa: BLE001 -- any failure means a fresh run, said why
            self.why_not = f"{type(exc).__name__}: {exc}"[:300]
            return None
        if remote is None:
            made["variables"] = facts.run_variables(scrub_env(source))
        else:  # what goes to the host (the host's own are in made["remote"]), not all of ours
            from portside.core.run.ssh import remote_env

            made["variables"] = facts.run_variables(remote_env(source))
        return KeyParts({**spec, **made})

    async def find(self, key: str, *, command: str, seed_offset: int, target: str
                   ) -> StoredReference | None:
        """The newest stored run of this key that may stand in for a fresh one."""
        if self.fresh or self.source is None:
            return None
        source = self.source
        try:
            found = await asyncio.to_thread(source.find, key, command=command,
                                            seed_offset=seed_offset, target=target)
        except Exception as exc:  # noqa: BLE001 -- an unreadable store: run it fresh
            self.why_not = f"{type(exc).__name__}: {exc}"[:300]
            return None
        return next((s for s in found if not unusable(s)), None)


def copy_into(bus: EventBus, session_id: str, run_id: str, attempt: int, cwd: Path,
              key: str, stored: StoredReference, host: str
              ) -> tuple[ev.RunStarted, ev.RunFinished, list[dict[str, Any]], list[str]]:
    """Publish the stored run into this session's log as run ``run_id`` (reference
    ``attempt``): its start saying where it came from, its output and records as they were
    logged, its end. Returns what Verifier.restore_run takes."""
    origin = stored.origin()
    origin["host"] = origin.get("host") or host or platform.node()
    st = stored.started
    started = bus.publish(ev.RunStarted(
        session_id=session_id, run_id=run_id, role="reference", attempt=attempt,
        command=st.command, target=st.target, cwd=str(cwd), seed_offset=st.seed_offset,
        threads=st.threads, reuse_key=key, reused_from=origin))
    tail: list[str] = []
    for out in stored.output:
        bus.publish(ev.RunOutput(session_id=session_id, run_id=run_id, lines=out.lines,
                                 stream=out.stream))
        tail.extend(out.lines)
        del tail[:-200]
    records: list[dict[str, Any]] = []
    for batch in stored.records:
        bus.publish(ev.RunRecord(session_id=session_id, run_id=run_id, records=batch.records))
        records.extend(batch.records)
    fin = stored.finished
    finished = bus.publish(ev.RunFinished(
        session_id=session_id, run_id=run_id, exit_code=fin.exit_code, outcome=fin.outcome,
        signal=fin.signal, wall_s=fin.wall_s, compile_s=fin.compile_s,
        steady_step_s=fin.steady_step_s, steps=fin.steps, reason=fin.reason,
        error_type=fin.error_type, error_message=fin.error_message, metrics=fin.metrics,
        device=fin.device))
    assert isinstance(started, ev.RunStarted) and isinstance(finished, ev.RunFinished)
    return started, finished, records, tail
