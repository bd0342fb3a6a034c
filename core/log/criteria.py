"""Acceptance and stopping criteria, read from a TOML file.

Every section and key is optional; `core/log/criteria_default.toml` lists them all with their
defaults and what they mean. Unknown sections or keys and bad values are refused with a
`CriteriaError` whose message reads `file:line: section.key: what is wrong` (the line is found by
searching the text, since tomllib does not report positions; it is left out when not found).

The defaults are chosen so that a correct migration whose only difference is another RNG stream
raises no error-level alarm: drift is judged on smoothed series against the reference envelope
widened by 5% and by the references' own step noise; the goal tolerance is at least 1% of the
reference mean and more than the reference spread; the device count and speed are not judged.
"""

from __future__ import annotations

import math
import re
import shlex
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import re2

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # the error is ours to report, not RE2's stderr

DEFAULT_TOML_PATH = Path(__file__).with_name("criteria_default.toml")


class PatternError(ValueError):
    """A regex RE2 cannot compile (bad syntax, or a backreference / lookaround)."""


def compile_pattern(pattern: str) -> Any:
    """Compile with RE2: matching time is linear in the line, whatever the pattern, so a
    catastrophic pattern (``(a+)+$``) cannot freeze the event loop or change an outcome.
    RE2 has no backreferences or lookaround; such patterns are refused here, at load."""
    try:
        return re2.compile(pattern, options=_RE2_OPTIONS)
    except re2.error as exc:
        msg = exc.args[0] if exc.args else exc
        if isinstance(msg, bytes):
            msg = msg.decode("utf-8", "replace")
        raise PatternError(f"{msg} (patterns run on RE2, in linear time: no backreferences "
                           "or lookaround)") from None
    except (TypeError, ValueError) as exc:  # a str RE2 cannot take (a lone surrogate)
        raise PatternError(str(exc)) from None
DRIFT_SERIES = ("loss", "grad_norm", "lr")


class CriteriaError(ValueError):
    """Bad criteria; the message is `file[:line]: section.key: what is wrong`."""


@dataclass(frozen=True)
class GoalCriteria:
    metric: str = ""  # empty: no goal check
    pattern: str = ""  # regex with a `value` group over output lines; empty: a metric record
    direction: str = "max"  # "max", "min", or "both" (a change either way fails: two-sided)
    tolerance: float = 0.0  # absolute, in the metric's units
    rtol: float = 0.01  # relative to |reference mean|; the larger of the two applies


@dataclass(frozen=True)
class DriftCriteria:
    series: tuple[str, ...] = ("loss", "grad_norm")
    rtol: float = 0.05
    atol: float = 1e-6
    window: int = 20  # > smooth: one spike moves a rolling mean for `smooth` steps only
    smooth: int = 10
    noise_z: float = 3.0


@dataclass(frozen=True)
class CompileCriteria:
    warmup_steps: int = 3
    max_recompiles: int = 0
    allowed_fallback_ops: tuple[str, ...] = ("aten::_local_scalar_dense", "aten::nonzero")


@dataclass(frozen=True)
class PerformanceCriteria:
    max_step_time_ratio: float = 0.0  # 0: don't judge speed
    max_memory_fraction: float = 0.0  # candidate peak / device (host RAM on a CPU); 0: don't judge


@dataclass(frozen=True)
class LargerCriteria:
    """A few steps of the candidate at a larger batch or sequence size: what a tiny test
    misses (memory pressure, a compile per new shape, step time that grows past the size).
    `command` is a template: `{name}` takes `vars[name]` (shell-quoted); empty = off."""

    command: str = ""
    steps: int = 5  # the probe ends the run after these optimizer steps
    max_step_time_ratio: float = 0.0  # its steady step / the candidate's; 0 = don't judge
    vars: tuple[tuple[str, str | int | float], ...] = ()  # the template's values, in file order

    def render(self) -> str:
        """The command with its variables put in (every `{name}` is defined: checked at load)."""
        values = dict(self.vars)
        return _PLACEHOLDER.sub(lambda m: shlex.quote(str(values[m.group(1)])), self.command)


# `{name}` but not a shell's `${name}`.
_PLACEHOLDER = re.compile(r"(?<!\$)\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class HardwareCriteria:
    devices: int = 0  # 0: don't judge the count


#: What `settings.allow` accepts besides "group.setting" entries (core/checks/settings.py).
SETTING_GROUPS = ("optimizer", "data", "precision")
DEFAULT_ALLOWED_SETTINGS = ("data.drop_last", "data.num_workers", "data.pin_memory",
                            "precision.float16->bfloat16")


@dataclass(frozen=True)
class SettingsCriteria:
    # Changes of the run's settings reported as info, not errors: a group ("data"), one
    # setting ("optimizer.weight_decay"), or the fp16 -> bf16 autocast of a TPU port.
    allow: tuple[str, ...] = DEFAULT_ALLOWED_SETTINGS


@dataclass(frozen=True)
class AcceptanceCriteria:
    alpha: float = 0.05  # the false-alarm rate a correct port is failed at by the goal test
    # numeric-drift's, over the whole run and all drift series (core/checks/drift_rate.py);
    # 0: the fixed envelope of [drift] (rtol, atol, noise_z, window), no rate stated
    drift_alpha: float = 0.05


#: What later steps cannot undo: a setting the run trains with (clipping, optimizer, precision,
#: data), the hardware it runs on, a non-finite value. Drift and the goal can still come back
#: (or go) before the end: they are judged then unless listed.
DEFAULT_STOP_ALARMS = ("clipping-changed", "optimizer-changed", "precision-changed",
                       "data-changed", "wrong-hardware", "non-finite")


@dataclass(frozen=True)
class StopCriteria:
    # Alarm kinds that end a candidate run at once when raised error-level or worse; empty:
    # every candidate trains to its end (core/log/decided.py).
    alarms: tuple[str, ...] = DEFAULT_STOP_ALARMS


@dataclass(frozen=True)
class BudgetCriteria:
    max_attempts: int = 10  # 0: no limit
    max_cost_usd: float = 0.0
    max_human_minutes: float = 0.0


@dataclass(frozen=True)
class SandboxCriteria:
    network: bool = False  # sandboxed runs (agent sessions) reach the network
    secrets: bool = False  # copy secret-looking project files (.env, *.pem, ...) for agent and runs
    max_processes: int = 16384  # tasks (processes and threads) of one run; 0: no limit
    max_memory_fraction: float = 0.9  # of this machine's RAM, per run; 0: no limit
    tmp_size_fraction: float = 0.25  # of RAM, each private tmpfs of a run; 0: the kernel's half
    readable: tuple[str, ...] = ()  # host folders a sandboxed run may read (data sets)


@dataclass(frozen=True)
class HostsCriteria:
    """Where each role runs: ``ssh://[user@]host[:port][/dir]``, a Host alias, or a comma list
    (every host of a slice); empty = here. `--reference-host` / `--candidate-host` override."""

    reference: str = ""
    candidate: str = ""
    # References run at once (1: one after another); on this machine at most one a core.
    parallel: int = 1
    # The candidate may start while references still run: on another machine than theirs, or
    # here when `parallel` leaves it a core (false: it waits for every reference).
    overlap: bool = True


@dataclass(frozen=True)
class OutputPattern:
    name: str
    pattern: str

    def compiled(self) -> Any:
        return compile_pattern(self.pattern)


@dataclass(frozen=True)
class Criteria:
    goal: GoalCriteria = field(default_factory=GoalCriteria)
    drift: DriftCriteria = field(default_factory=DriftCriteria)
    compile: CompileCriteria = field(default_factory=CompileCriteria)
    performance: PerformanceCriteria = field(default_factory=PerformanceCriteria)
    hardware: HardwareCriteria = field(default_factory=HardwareCriteria)
    larger: LargerCriteria = field(default_factory=LargerCriteria)
    budget: BudgetCriteria = field(default_factory=BudgetCriteria)
    sandbox: SandboxCriteria = field(default_factory=SandboxCriteria)
    hosts: HostsCriteria = field(default_factory=HostsCriteria)
    settings: SettingsCriteria = field(default_factory=SettingsCriteria)
    acceptance: AcceptanceCriteria = field(default_factory=AcceptanceCriteria)
    stop: StopCriteria = field(default_factory=StopCriteria)
    prices: tuple[tuple[str, float], ...] = ()  # overrides of core/log/prices.toml
    output: tuple[OutputPattern, ...] = ()
    source: str = "<defaults>"

    @property
    def price_overrides(self) -> dict[str, float]:
        return dict(self.prices)

    def output_patterns(self) -> list[tuple[str, Any]]:
        """(metric name, compiled RE2 regex) for the runner: the goal pattern first, then
        [output]."""
        pats = []
        if self.goal.metric and self.goal.pattern:
            pats.append((self.goal.metric, compile_pattern(self.goal.pattern)))
        pats.extend((p.name, p.compiled()) for p in self.output)
        return pats

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (for session.started events)."""
        d = asdict(self)
        d["prices"] = dict(self.prices)
        d["larger"]["vars"] = dict(self.larger.vars)
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Criteria:
        """``to_dict()`` back to Criteria (a session started without a criteria file)."""

        def build(section: type, values: dict[str, Any]) -> Any:
            known = {f.name for f in fields(section)}
            return section(**{k: tuple(v) if isinstance(v, list) else v
                              for k, v in values.items() if k in known})

        return cls(
            goal=build(GoalCriteria, data.get("goal", {})),
            drift=build(DriftCriteria, data.get("drift", {})),
            compile=build(CompileCriteria, data.get("compile", {})),
            performance=build(PerformanceCriteria, data.get("performance", {})),
            hardware=build(HardwareCriteria, data.get("hardware", {})),
            larger=_larger_from(data.get("larger") or {}),
            budget=build(BudgetCriteria, data.get("budget", {})),
            sandbox=build(SandboxCriteria, data.get("sandbox", {})),
            hosts=build(HostsCriteria, data.get("hosts", {})),
            settings=build(SettingsCriteria, data.get("settings", {})),
            acceptance=build(AcceptanceCriteria, data.get("acceptance", {})),
            stop=build(StopCriteria, data.get("stop", {})),
            prices=tuple(sorted((data.get("prices") or {}).items())),
            output=tuple(OutputPattern(o["name"], o["pattern"]) for o in data.get("output", [])),
            source=data.get("source", "<log>"),
        )


def _larger_from(values: dict[str, Any]) -> LargerCriteria:
    known = {f.name for f in fields(LargerCriteria)} - {"vars"}
    kept = {k: v for k, v in values.items() if k in known}
    return LargerCriteria(**kept, vars=tuple((values.get("vars") or {}).items()))


DEFAULT_CRITERIA = Criteria()


# --- validation ------------------------------------------------------------------------------

Check = Callable[[Any], str | None]  # returns what is wrong, or None


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _num(minimum: float = 0.0, strict: bool = False) -> Check:
    def check(v: Any) -> str | None:
        if not _is_num(v):
            return f"must be a number, got {v!r}"
        if v < minimum or (strict and v == minimum):
            return f"must be {'>' if strict else '>='} {minimum:g}, got {v!r}"
        return None
    return check


def _int(minimum: int = 0) -> Check:
    def check(v: Any) -> str | None:
        if not isinstance(v, int) or isinstance(v, bool):
            return f"must be an integer, got {v!r}"
        if v < minimum:
            return f"must be >= {minimum}, got {v!r}"
        return None
    return check


def _fraction(v: Any) -> str | None:
    if not _is_num(v) or not 0 <= v <= 1:
        return f"must be a number from 0 to 1 (a fraction of this machine's RAM), got {v!r}"
    return None


def _bool(v: Any) -> str | None:
    return None if isinstance(v, bool) else f"must be true or false, got {v!r}"


def _str(v: Any) -> str | None:
    return None if isinstance(v, str) else f"must be a string, got {v!r}"


def _hosts(v: Any) -> str | None:
    if not isinstance(v, str):
        return f"must be a string, got {v!r}"
    if not v:
        return None
    from portside.core.log.ssh_hosts import parse_hosts

    try:
        parse_hosts(v)
    except ValueError as exc:
        return str(exc)
    return None


def _abs_paths(v: Any) -> str | None:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        return f"must be a list of paths, got {v!r}"
    rel = [x for x in v if not x.startswith("/")]
    return f"must be absolute paths (the runs' cwd is a copy), got {rel[0]!r}" if rel else None


def _one_of(*choices: str) -> Check:
    def check(v: Any) -> str | None:
        return None if v in choices else f"must be one of {', '.join(choices)}, got {v!r}"
    return check


def _str_list(choices: tuple[str, ...] | None = None) -> Check:
    def check(v: Any) -> str | None:
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            return f"must be a list of strings, got {v!r}"
        if choices is not None:
            bad = [x for x in v if x not in choices]
            if bad:
                return f"unknown series {', '.join(bad)} (known: {', '.join(choices)})"
        return None
    return check


def _setting_list(v: Any) -> str | None:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        return f"must be a list of strings, got {v!r}"
    for x in v:
        group = x.split(".", 1)[0]
        if group not in SETTING_GROUPS:
            return (f"{x!r}: must name a group ({', '.join(SETTING_GROUPS)}) or a setting "
                    "of one, e.g. \"optimizer.weight_decay\"")
    return None


def _alarm_kinds(v: Any) -> str | None:
    from portside.core.log.events import ALARM_KINDS

    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        return f"must be a list of alarm kinds, got {v!r}"
    bad = [x for x in v if x not in ALARM_KINDS]
    if bad:
        return f"unknown alarm kind {', '.join(map(repr, bad))} (known: {', '.join(ALARM_KINDS)})"
    return None


def _alpha(v: Any, zero: bool = False) -> str | None:
    if zero and _is_num(v) and v == 0:
        return None
    if not _is_num(v) or not 0 < v < 0.5:
        return f"must be a number between 0 and 0.5 (a false-alarm rate), got {v!r}"
    return None


def _regex(v: Any) -> str | None:
    if not isinstance(v, str):
        return f"must be a string, got {v!r}"
    if v == "":
        return None
    try:
        rx = compile_pattern(v)
    except PatternError as exc:
        return f"bad regex: {exc}"
    if "value" not in rx.groupindex:
        return "regex needs a named group `value`, e.g. (?P<value>[0-9.]+)"
    return None


SCHEMA: dict[str, dict[str, Check]] = {
    "goal": {"metric": _str, "pattern": _regex, "direction": _one_of("max", "min", "both"),
             "tolerance": _num(), "rtol": _num()},
    "drift": {"series": _str_list(DRIFT_SERIES), "rtol": _num(), "atol": _num(),
              "window": _int(1), "smooth": _int(1), "noise_z": _num()},
    "compile": {"warmup_steps": _int(0), "max_recompiles": _int(0),
                "allowed_fallback_ops": _str_list()},
    "performance": {"max_step_time_ratio": _num(), "max_memory_fraction": _num()},
    "hardware": {"devices": _int(0)},
    "budget": {"max_attempts": _int(0), "max_cost_usd": _num(), "max_human_minutes": _num()},
    "sandbox": {"network": _bool, "secrets": _bool, "max_processes": _int(0),
                "max_memory_fraction": _fraction, "tmp_size_fraction": _fraction,
                "readable": _abs_paths},
    "hosts": {"reference": _hosts, "candidate": _hosts, "parallel": _int(1),
              "overlap": _bool},
    "settings": {"allow": _setting_list},
    "acceptance": {"alpha": _alpha, "drift_alpha": lambda v: _alpha(v, zero=True)},
    "stop": {"alarms": _alarm_kinds},
}
LARGER_KEYS: dict[str, Check] = {"command": _str, "steps": _int(1),
                                 "max_step_time_ratio": _num()}
SECTIONS = (*SCHEMA, "larger", "prices", "output")


def _line_of(text: str, section: str, key: str | None) -> int | None:
    """Best-effort line number of `key` inside `[section]` (or of the header)."""
    lines = text.splitlines()
    header = re.compile(r"^\s*\[\s*" + re.escape(section) + r"\s*\]")
    start = next((i for i, ln in enumerate(lines) if header.match(ln)), None)
    if start is None:
        return None
    if key is None:
        return start + 1
    keyrx = re.compile(r"""^\s*["']?""" + re.escape(key) + r"""["']?\s*=""")
    for i in range(start + 1, len(lines)):
        if re.match(r"^\s*\[", lines[i]):
            break
        if keyrx.match(lines[i]):
            return i + 1
    return start + 1


class _Errors:
    def __init__(self, text: str, source: str) -> None:
        self.text, self.source = text, source

    def __call__(self, section: str, key: str | None, what: str) -> CriteriaError:
        line = _line_of(self.text, section, key.split("[")[0] if key else None)
        where = f"{self.source}:{line}" if line else self.source
        name = f"{section}.{key}" if key else section
        return CriteriaError(f"{where}: {name}: {what}")


def parse_criteria(text: str, source: str = "<string>") -> Criteria:
    """Parse and validate criteria TOML; missing keys take their defaults."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CriteriaError(f"{source}: not valid TOML: {exc}") from exc
    err = _Errors(text, source)
    for section, body in data.items():
        if section not in SECTIONS:
            raise err(section, None, f"unknown section (known: {', '.join(SECTIONS)})")
        if not isinstance(body, dict):
            raise err(section, None, "must be a table, e.g. [" + section + "]")

    parts: dict[str, Any] = {}
    classes = {"goal": GoalCriteria, "drift": DriftCriteria, "compile": CompileCriteria,
               "performance": PerformanceCriteria, "hardware": HardwareCriteria,
               "budget": BudgetCriteria, "sandbox": SandboxCriteria, "hosts": HostsCriteria,
               "settings": SettingsCriteria, "acceptance": AcceptanceCriteria,
               "stop": StopCriteria}
    for section, schema in SCHEMA.items():
        body = data.get(section, {})
        types = {f.name: f.type for f in fields(classes[section])}
        kwargs: dict[str, Any] = {}
        for key, value in body.items():
            if key not in schema:
                raise err(section, key, f"unknown key (known: {', '.join(schema)})")
            what = schema[key](value)
            if what:
                raise err(section, key, what)
            if isinstance(value, list):
                value = tuple(value)
            elif types[key] == "float":
                value = float(value)  # TOML `1` where a float is meant
            kwargs[key] = value
        parts[section] = classes[section](**kwargs)

    goal: GoalCriteria = parts["goal"]
    if goal.pattern and not goal.metric:
        raise err("goal", "pattern", "set without goal.metric (name the metric it reads)")

    parts["larger"] = _parse_larger(data.get("larger", {}), err)
    parts["prices"] = _parse_prices(data.get("prices", {}), err)
    parts["output"] = _parse_output(data.get("output", {}), err)
    names = [p.name for p in parts["output"]]
    if goal.metric and goal.pattern and goal.metric in names:
        raise err("output", "patterns", f"{goal.metric!r} is already read by goal.pattern")
    return Criteria(**parts, source=source)


def _parse_larger(body: Mapping[str, Any], err: _Errors) -> LargerCriteria:
    """[larger]: its own keys, and every other key a variable of the command template."""
    kwargs: dict[str, Any] = {}
    variables: list[tuple[str, str | int | float]] = []
    for key, value in body.items():
        if key in LARGER_KEYS:
            what = LARGER_KEYS[key](value)
            if what:
                raise err("larger", key, what)
            kwargs[key] = float(value) if key == "max_step_time_ratio" else value
        elif isinstance(value, str | int | float) and not isinstance(value, bool):
            variables.append((key, value))
        else:
            raise err("larger", key, f"a variable of the command must be a string or a number, "
                      f"got {value!r} (keys: {', '.join(LARGER_KEYS)}, else variables)")
    larger = LargerCriteria(**kwargs, vars=tuple(variables))
    names = dict(variables)
    for m in _PLACEHOLDER.finditer(larger.command):
        if m.group(1) not in names:
            raise err("larger", "command", f"{{{m.group(1)}}} has no value: set "
                      f"`{m.group(1)} = ...` in [larger]")
    if variables and not larger.command:
        raise err("larger", variables[0][0], "a variable without larger.command (the "
                  "template it goes into, e.g. \"python train.py --batch {batch}\")")
    return larger


def _parse_prices(body: Mapping[str, Any], err: _Errors) -> tuple[tuple[str, float], ...]:
    from portside.core.log.costs import (
        default_prices,  # local: costs is only needed to validate names
    )

    table = default_prices()
    out = []
    for key, value in body.items():
        if not table.resolve_override(key):
            raise err("prices", key, f"unknown price (known: {', '.join(table.override_keys())})")
        what = _num()(value)
        if what:
            raise err("prices", key, what)
        out.append((key, float(value)))
    return tuple(out)


def _parse_output(body: Mapping[str, Any], err: _Errors) -> tuple[OutputPattern, ...]:
    for key in body:
        if key != "patterns":
            raise err("output", key, "unknown key (known: patterns)")
    raw = body.get("patterns", [])
    if not isinstance(raw, list):
        raise err("output", "patterns", "must be a list of {name, pattern} tables")
    out: list[OutputPattern] = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or set(item) != {"name", "pattern"}:
            raise err("output", "patterns", f"item {i} must be {{name = ..., pattern = ...}}, got {item!r}")
        name, pattern = item["name"], item["pattern"]
        if not isinstance(name, str) or not name:
            raise err("output", "patterns", f"item {i}: name must be a non-empty string")
        what = _regex(pattern) or (None if pattern else "pattern is empty")
        if what:
            raise err("output", "patterns", f"item {i} ({name}): {what}")
        if name in (p.name for p in out):
            raise err("output", "patterns", f"item {i}: duplicate name {name!r}")
        out.append(OutputPattern(name, pattern))
    return tuple(out)


def load_criteria(path: str | Path | None) -> Criteria:
    """Read a criteria file; None gives the defaults."""
    if path is None:
        return DEFAULT_CRITERIA
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise CriteriaError(f"{p}: cannot read: {exc.strerror or exc}") from exc
    return parse_criteria(_decode(data, p), str(p))


def _decode(data: bytes, path: Path) -> str:
    """The file's text (TOML is UTF-8); where it is not, the file, line and column say so."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        bad = data[exc.start:exc.end].hex(" ")
        raise CriteriaError(f"{path}:{line}:{col}: not UTF-8 (byte(s) {bad}); TOML files "
                            "are UTF-8") from exc
