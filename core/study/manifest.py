"""A study manifest: many projects, each verified (or ported by an agent) as one task.

TOML, checked like criteria (core/log/criteria.py): every error reads
``file:line: project[N].key: what is wrong``. Shape::

    [study]
    name = "example"                 # the study's id in the database
    [defaults]                       # any project key; a project's own value wins
    reference = "python train.py"
    target = "cpu"
    [[project]]
    name = "mlp"
    path = "projects/mlp"            # a folder (relative to the manifest), or
    # git = "https://…", commit = "<sha>"
    candidate = "python train_tpu.py"   # or agent = "scripted:FILE" (+ task = "…")
    # policy = "ask"                 # an agent's edits wait for a reviewer (default "auto")

A project with ``repetitions = N`` is N tasks (``name#1`` … ``name#N``). Placement: each phase
asks the launcher for resources; the defaults follow the targets (references where a ``CPU`` or
``GPU`` is, candidates where the target's resource is, ``TPU: <devices>`` for a TPU slice) and
``reference_resources`` / ``candidate_resources`` override them.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from portside.core.checks.runtime import TARGETS
from portside.core.log.criteria import CriteriaError, load_criteria

PROJECT_KEYS = ("name", "path", "git", "commit", "reference", "candidate", "agent", "task",
                "target", "reference_target", "criteria", "reference_runs", "repetitions",
                "timeout", "stall", "reference_resources", "candidate_resources", "policy")
DEFAULT_KEYS = tuple(k for k in PROJECT_KEYS if k not in ("name", "git", "commit"))
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_SHA = re.compile(r"^[0-9a-f]{7,40}$")
STUDY_POLICIES = ("auto", "ask")  # runs-only has no meaning without a reviewer at the side
_RESOURCE = re.compile(r"^[A-Za-z][A-Za-z0-9_:-]{0,63}$")


class ManifestError(ValueError):
    """A bad manifest; the message is ``file[:line]: where: what is wrong``."""


@dataclass(frozen=True)
class Task:
    """One project's verification (or agent session), once: what a worker is given."""

    task_id: str  # name, or name#k with repetitions
    project: str  # the project's name
    repetition: int
    folder: str  # absolute; empty for a git project (the worker checks it out)
    git: str
    commit: str
    reference: str
    candidate: str | None
    agent: str | None
    agent_task: str
    target: str
    reference_target: str
    criteria: str  # absolute path, or "" for the defaults
    reference_runs: int
    timeout_s: float | None
    stall_s: float | None
    reference_resources: dict[str, float] = field(default_factory=dict)
    candidate_resources: dict[str, float] = field(default_factory=dict)
    # An agent's cards: decided by policy ("auto"), or waiting for a reviewer who opens the
    # running session (`portside study review`, or enter on the sessions screen): "ask".
    policy: str = "auto"

    @property
    def phases(self) -> tuple[str, ...]:
        """Verification: the references, then the candidate, each placed by its resources.
        An agent session interleaves candidate runs with its edits: one phase, on the target."""
        return ("all",) if self.agent else ("reference", "candidate")

    def resources(self, phase: str) -> dict[str, float]:
        return dict(self.reference_resources if phase == "reference"
                    else self.candidate_resources)

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Task:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass(frozen=True)
class Manifest:
    name: str
    path: str
    tasks: tuple[Task, ...]

    def task(self, task_id: str) -> Task:
        return next(t for t in self.tasks if t.task_id == task_id)


def default_resources(target: str, devices: int) -> dict[str, float]:
    """Where a run on ``target`` can go: a CPU, a GPU, or a TPU slice of ``devices`` chips."""
    if target.startswith("tpu"):
        return {"TPU": float(max(1, devices))}
    if target == "cuda":
        return {"GPU": float(max(1, devices))}
    return {"CPU": 1.0}


class _Lines:
    """Line numbers of the manifest's tables and keys (tomllib gives none)."""

    def __init__(self, text: str) -> None:
        self.tables: dict[tuple[str, int], int] = {}
        self.keys: dict[tuple[str, int, str], int] = {}
        table, index = "", 0
        counts: dict[str, int] = {}
        for n, line in enumerate(text.splitlines(), 1):
            if m := re.match(r"^\s*\[\[\s*([A-Za-z_.-]+)\s*\]\]", line):
                table = m.group(1)
                index = counts[table] = counts.get(table, 0) + 1
                self.tables[(table, index)] = n
            elif m := re.match(r"^\s*\[\s*([A-Za-z_.-]+)\s*\]", line):
                table, index = m.group(1), 0
                self.tables.setdefault((table, 0), n)
            elif m := re.match(r"""^\s*["']?([A-Za-z0-9_-]+)["']?\s*=""", line):
                self.keys.setdefault((table, index, m.group(1)), n)

    def of(self, table: str, index: int, key: str | None) -> int | None:
        if key is not None and (table, index, key) in self.keys:
            return self.keys[(table, index, key)]
        return self.tables.get((table, index))


class _Errors:
    def __init__(self, text: str, source: str) -> None:
        self.lines, self.source = _Lines(text), source

    def __call__(self, table: str, index: int, key: str | None, what: str) -> ManifestError:
        line = self.lines.of(table, index, key)
        where = f"{self.source}:{line}" if line else self.source
        name = f"{table}[{index}]" if index else table
        return ManifestError(f"{where}: {name}{'.' + key if key else ''}: {what}")


def _check_value(key: str, value: Any) -> str | None:
    """What is wrong with ``value`` for ``key`` (None: fine)."""
    if key in ("reference", "candidate", "agent", "task", "criteria", "path", "git", "name",
               "commit"):
        if not isinstance(value, str) or not value.strip():
            return "expected a non-empty string"
        if key == "name" and not _NAME.match(value):
            return (f"{value!r}: letters, digits, '.', '_' and '-' only (at most 64), "
                    "starting with a letter or digit")
        if key == "commit" and not _SHA.match(value):
            return f"{value!r}: expected a commit sha (7 to 40 lowercase hex digits)"
        return None
    if key == "policy":
        if value not in STUDY_POLICIES:
            return f"{value!r}: expected one of {', '.join(STUDY_POLICIES)}"
        return None
    if key in ("target", "reference_target"):
        if value not in TARGETS:
            return f"{value!r}: expected one of {', '.join(TARGETS)}"
        return None
    if key in ("reference_runs", "repetitions"):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 20:
            return "expected an integer from 1 to 20"
        return None
    if key in ("timeout", "stall"):
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value) or value <= 0:
            return "expected a positive number of seconds"
        return None
    if key in ("reference_resources", "candidate_resources"):
        if not isinstance(value, dict) or not value:
            return "expected a table of resource = amount, e.g. { TPU = 4 }"
        for name, amount in value.items():
            if not _RESOURCE.match(name):
                return f"resource name {name!r}: letters, digits, '_', ':' and '-' only"
            if isinstance(amount, bool) or not isinstance(amount, int | float) \
                    or not math.isfinite(amount) or amount <= 0:
                return f"resource {name}: expected a positive amount, got {amount!r}"
        return None
    return None


def parse_manifest(text: str, source: str = "<string>", base: Path | None = None) -> Manifest:
    """Parse and check a manifest; relative paths are relative to ``base`` (the manifest's
    folder). Every project's folder and criteria file must exist (an error now, not a failed
    task an hour into the study)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{source}: not valid TOML: {exc}") from exc
    err = _Errors(text, source)
    base = (base or Path.cwd()).resolve()
    for key in data:
        if key not in ("study", "defaults", "project"):
            raise err(key, 0, None, "unknown table (expected [study], [defaults], [[project]])")
    study = data.get("study", {})
    if not isinstance(study, dict):
        raise err("study", 0, None, "expected a table")
    for key in study:
        if key != "name":
            raise err("study", 0, key, "unknown key (expected name)")
    name = study.get("name")
    if name is None:
        raise err("study", 0, "name", "missing: give the study a name (its id in the database)")
    if (why := _check_value("name", name)) is not None:
        raise err("study", 0, "name", why)
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise err("defaults", 0, None, "expected a table")
    for key, value in defaults.items():
        if key not in DEFAULT_KEYS:
            raise err("defaults", 0, key, f"unknown key (expected one of {', '.join(DEFAULT_KEYS)})")
        if (why := _check_value(key, value)) is not None:
            raise err("defaults", 0, key, why)
    projects = data.get("project")
    if not isinstance(projects, list) or not projects:
        raise err("study", 0, None, "no [[project]]: a study needs at least one project")
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for i, body in enumerate(projects, 1):
        tasks += _project(body, i, defaults, base, err, seen)
    return Manifest(str(name), source, tuple(tasks))


def _project(body: Any, i: int, defaults: dict[str, Any], base: Path, err: _Errors,
             seen: dict[str, int]) -> list[Task]:
    t = "project"
    if not isinstance(body, dict):
        raise err(t, i, None, "expected a table")
    for key, value in body.items():
        if key not in PROJECT_KEYS:
            raise err(t, i, key, f"unknown key (expected one of {', '.join(PROJECT_KEYS)})")
        if (why := _check_value(key, value)) is not None:
            raise err(t, i, key, why)
    merged = {**defaults, **body}

    def where(key: str) -> tuple[str, int]:
        """The table a merged key came from: the project's own, else [defaults]."""
        return (t, i) if key in body else ("defaults", 0)

    name = body.get("name")
    if name is None:
        raise err(t, i, None, "missing name")
    if name in seen:
        raise err(t, i, "name", f"{name!r} is also project {seen[name]}'s name")
    seen[name] = i
    if "path" in body and "git" in body:
        raise err(t, i, None, "give path (a folder) or git (a URL, with commit), not both")
    if "git" in body:
        merged.pop("path", None)  # a default folder is for the projects that give none
    elif "path" not in merged:
        raise err(t, i, None, "missing path (a folder, here or in [defaults]) or git")
    if "git" in body and "commit" not in body:
        raise err(t, i, "git", "a git project needs commit (the sha to check out)")
    if "commit" in body and "git" not in body:
        raise err(t, i, "commit", "commit goes with git")
    folder = ""
    if "path" in merged:
        p = Path(merged["path"])
        p = p if p.is_absolute() else base / p
        if not p.is_dir():
            raise err(*where("path"), "path", f"{p} is not a folder")
        folder = str(p.resolve())
    if "reference" not in merged:
        raise err(t, i, None, "missing reference (here or in [defaults])")
    if ("candidate" in merged) == ("agent" in merged):
        raise err(t, i, None, "give candidate (a command) or agent (with task), one of them")
    if "task" in merged and "agent" not in merged:
        raise err(*where("task"), "task", "task goes with agent")
    if "policy" in body and "agent" not in merged:
        raise err(*where("policy"), "policy", "policy goes with agent: a verification has no "
                  "cards to decide")
    if "agent" in merged and not str(merged["agent"]).startswith("scripted:") \
            and str(merged["agent"]).split(":")[0] not in ("claude", "claude-code"):
        raise err(*where("agent"), "agent", f"{merged['agent']!r}: expected claude[:MODEL], "
                  "claude-code[:MODEL] or scripted:FILE")
    agent = merged.get("agent")
    if agent and agent.startswith("scripted:"):
        f = Path(agent.removeprefix("scripted:"))
        f = f if f.is_absolute() else base / f
        if not f.is_file():
            raise err(*where("agent"), "agent", f"{f}: no such file")
        agent = f"scripted:{f.resolve()}"
    target = merged.get("target")
    if target is None:
        raise err(t, i, None, "missing target (here or in [defaults])")
    criteria_path = ""
    devices = 0
    if "criteria" in merged:
        c = Path(merged["criteria"])
        c = c if c.is_absolute() else base / c
        try:
            devices = load_criteria(c).hardware.devices
        except CriteriaError as exc:
            raise err(*where("criteria"), "criteria", str(exc)) from None
        criteria_path = str(c.resolve())
    reference_target = merged.get("reference_target", "cpu")
    reps = int(merged.get("repetitions", 1))
    common = dict(
        project=name, folder=folder, git=body.get("git", ""), commit=body.get("commit", ""),
        reference=merged["reference"], candidate=merged.get("candidate"), agent=agent,
        agent_task=merged.get("task", ""), policy=merged.get("policy", "auto") if agent else "auto",
        target=target, reference_target=reference_target,
        criteria=criteria_path, reference_runs=int(merged.get("reference_runs", 2)),
        timeout_s=float(merged["timeout"]) if "timeout" in merged else None,
        stall_s=float(merged["stall"]) if "stall" in merged else None,
        reference_resources={k: float(v) for k, v in merged.get(
            "reference_resources", default_resources(reference_target, 0)).items()},
        # An agent session's one phase holds its references too: placed on the target.
        candidate_resources={k: float(v) for k, v in merged.get(
            "candidate_resources", default_resources(target, devices)).items()},
    )
    return [Task(task_id=name if reps == 1 else f"{name}#{k}", repetition=k, **common)  # type: ignore[arg-type]
            for k in range(1, reps + 1)]


def load_manifest(path: str | Path) -> Manifest:
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ManifestError(f"{p}: cannot read: {exc.strerror or exc}") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ManifestError(f"{p}:{line}: not UTF-8; TOML files are UTF-8") from exc
    return parse_manifest(text, str(p), p.resolve().parent)
