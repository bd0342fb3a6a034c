"""Price table and cost accounting: compute, agent tokens and human minutes.

The shipped table is `core/log/prices.toml` (each row: name, unit, usd, source, date). A criteria
file's `[prices]` section overrides rows by `name` (a name with a single row, or every device-like
row of that name) or by `name/unit` (e.g. `claude-sonnet-4-5/mtok-in`).

Costs follow the study's accounting: a session costs *every* attempt (failed ones included) plus
the agent's tokens plus the reviewer's minutes, and the figure that matters is the cost per
*successful* run.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

PRICES_PATH = Path(__file__).with_name("prices.toml")
UNITS = ("chip-hour", "gpu-hour", "cpu-hour", "mtok-in", "mtok-out", "hour")
HUMAN_RATE = "human-hour"


class PriceError(ValueError):
    """A price table or an override is malformed."""


@dataclass(frozen=True)
class PriceRow:
    name: str
    unit: str
    usd: float
    source: str
    date: str


@dataclass(frozen=True)
class PriceTable:
    rows: tuple[PriceRow, ...]

    def find(self, name: str, unit: str | None = None) -> PriceRow | None:
        for row in self.rows:
            if row.name == name and (unit is None or row.unit == unit):
                return row
        return None

    def usd(self, name: str, unit: str | None = None) -> float:
        row = self.find(name, unit)
        if row is None:
            raise KeyError(f"no price for {name}{'/' + unit if unit else ''}")
        return row.usd

    def names(self) -> list[str]:
        return sorted({r.name for r in self.rows})

    def resolve_override(self, key: str) -> list[int]:
        """Row indexes an override key applies to; empty when it names nothing."""
        name, _, unit = key.partition("/")
        idx = [i for i, r in enumerate(self.rows) if r.name == name and (not unit or r.unit == unit)]
        if not unit and len(idx) > 1:
            # "claude-x" alone is ambiguous between mtok-in and mtok-out.
            return []
        return idx

    def with_overrides(self, overrides: Mapping[str, float], source: str = "user override") -> PriceTable:
        rows = list(self.rows)
        for key, usd in overrides.items():
            idx = self.resolve_override(key)
            if not idx:
                raise PriceError(f"{key}: unknown price (known: {', '.join(self.override_keys())})")
            if not isinstance(usd, int | float) or isinstance(usd, bool) or usd < 0 or not math.isfinite(usd):
                raise PriceError(f"{key}: price must be a non-negative number, got {usd!r}")
            for i in idx:
                rows[i] = replace(rows[i], usd=float(usd), source=source, date="")
        return PriceTable(tuple(rows))

    def override_keys(self) -> list[str]:
        keys: list[str] = []
        for name in self.names():
            rows = [r for r in self.rows if r.name == name]
            keys.extend([name] if len(rows) == 1 else [f"{name}/{r.unit}" for r in rows])
        return keys


def parse_price_table(text: str, source: str = "<string>") -> PriceTable:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PriceError(f"{source}: {exc}") from exc
    rows = []
    for i, raw in enumerate(data.get("price", [])):
        where = f"{source}: price[{i}]"
        try:
            row = PriceRow(str(raw["name"]), str(raw["unit"]), float(raw["usd"]),
                           str(raw.get("source", "")), str(raw.get("date", "")))
        except (KeyError, TypeError, ValueError) as exc:
            raise PriceError(f"{where}: needs name, unit, usd ({exc})") from exc
        if row.unit not in UNITS:
            raise PriceError(f"{where}.unit: {row.unit!r} is not one of {', '.join(UNITS)}")
        if row.usd < 0:
            raise PriceError(f"{where}.usd: must be >= 0")
        rows.append(row)
    return PriceTable(tuple(rows))


_DEFAULT_TABLE: PriceTable | None = None


def default_prices() -> PriceTable:
    """The shipped table (parsed once)."""
    global _DEFAULT_TABLE
    if _DEFAULT_TABLE is None:
        _DEFAULT_TABLE = parse_price_table(PRICES_PATH.read_text(), str(PRICES_PATH))
    return _DEFAULT_TABLE


def load_prices(overrides: Mapping[str, float] | None = None) -> PriceTable:
    """The shipped table with a criteria file's `[prices]` overrides applied."""
    table = default_prices()
    return table.with_overrides(overrides) if overrides else table


# --- which price applies -------------------------------------------------------------------

_TPU_GENERATIONS = (
    ("tpu-v5e", ("v5e", "v5 lite", "v5lite")),
    ("tpu-v6e", ("v6e", "v6 lite", "v6lite", "trillium")),
    ("tpu-v5p", ("v5p", "v5")),  # after v5e: a bare "v5" is the p generation
)


def tpu_generation(device_name: str) -> str | None:
    """'tpu-v5e' | 'tpu-v5p' | 'tpu-v6e' from a device name like 'TPU v5e', or None."""
    low = device_name.lower()
    for gen, needles in _TPU_GENERATIONS:
        if any(n in low for n in needles):
            return gen
    return None


def device_price_name(facts: Mapping[str, Any] | None) -> str | None:
    """The price row for a run's device facts (probe `facts` record), or None when unknown."""
    if not facts:
        return None
    kind = str(facts.get("device_kind") or "").upper()
    name = str(facts.get("device_name") or "")
    if kind == "TPU":
        return tpu_generation(name)
    if kind == "CUDA":
        low = name.lower()
        if "h200" in low:
            return "h200"
        if "h100" in low:
            return "h100"
        if "a100" in low:
            return "a100-80gb"
        return None
    if kind == "CPU":
        return "cpu"
    return None


def model_price_name(model: str, table: PriceTable) -> str | None:
    """Longest price-row name that prefixes a model id ('claude-sonnet-4-5-20250929' →
    'claude-sonnet-4-5')."""
    best = None
    for name in table.names():
        if model.startswith(name) and (best is None or len(name) > len(best)):
            best = name
    return best


# --- costs ---------------------------------------------------------------------------------


def run_cost(wall_s: float, usd_per_device_hour: float, devices: int = 1) -> float:
    """Device-hours × price × devices."""
    return max(wall_s, 0.0) / 3600.0 * usd_per_device_hour * max(devices, 1)


def run_cost_from_facts(wall_s: float, facts: Mapping[str, Any] | None, table: PriceTable,
                        devices: int | None = None) -> float | None:
    """Cost of a run priced from its device facts; None when the device has no price row.
    `devices` defaults to the facts' device_count (for CPU runs: vCPUs, pass it explicitly)."""
    name = device_price_name(facts)
    if name is None:
        return None
    row = table.find(name)
    if row is None:
        return None
    count = (facts or {}).get("device_count")
    # Facts come from the run (or an imported recording): a count that is not a sane int is 1.
    if isinstance(count, float) and count.is_integer():
        count = int(count)
    if devices is not None:
        n = devices
    elif isinstance(count, int) and not isinstance(count, bool) and 0 < count <= 1 << 20:
        n = count
    else:
        n = 1
    return run_cost(wall_s, row.usd, n)


# Prompt caching: writes bill at 1.25x the input price, reads at 0.1x (Anthropic's terms).
CACHE_WRITE_FACTOR = 1.25
CACHE_READ_FACTOR = 0.1


def token_cost(model: str, tokens_in: int, tokens_out: int, table: PriceTable,
               cache_read: int = 0, cache_write: int = 0) -> float | None:
    """USD for an agent's tokens; None when the model has no price rows."""
    name = model_price_name(model, table)
    if name is None:
        return None
    pin, pout = table.find(name, "mtok-in"), table.find(name, "mtok-out")
    if pin is None or pout is None:
        return None
    billed_in = tokens_in + CACHE_WRITE_FACTOR * cache_write + CACHE_READ_FACTOR * cache_read
    return (billed_in * pin.usd + tokens_out * pout.usd) / 1e6


def cost_per_successful_run(total_usd: float, successes: int) -> float | None:
    """Total cost divided by successful runs; None (not infinity: JSON) when nothing passed."""
    return total_usd / successes if successes > 0 else None
