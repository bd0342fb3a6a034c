"""Helpers for the probe tests: run a script in a child process with the probe injected."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from portside.core.probe import _packed, inject_env

SCRIPTS = Path(__file__).parent / "scripts"


def read_records(path: Path) -> list[dict]:
    """The records of a probe file as the runner reads them: packed steps expanded."""
    if not path.exists():
        return []
    out: list[dict] = []
    for line in path.read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            out.extend(_packed.expand(rec))
    return out


def steps_of(records: list[dict]) -> list[dict]:
    return [r for r in records if r["type"] == "step"]


def ground_truth(stdout: str, tag: str = "GT") -> list[list[str]]:
    return [line.split()[1:] for line in stdout.splitlines() if line.startswith(tag + " ")]


class ProbeRun:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path

    def env(self, out: Path, seed_offset: int = 0, **extra: str) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("PORTSIDE_")}
        for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
            base.pop(var, None)
        env = inject_env(base, str(out), seed_offset)
        env.update(extra)
        return env

    def __call__(
        self, script: str, *args: str, out: Path | None = None, seed_offset: int = 0, **extra: str
    ) -> tuple[subprocess.CompletedProcess[str], Path]:
        out = out or self.tmp_path / "probe.jsonl"
        proc = subprocess.run(
            [sys.executable, str(SCRIPTS / script), *args],
            env=self.env(out, seed_offset, **extra),
            capture_output=True,
            text=True,
            timeout=120,
            cwd=self.tmp_path,
        )
        assert proc.returncode == 0, proc.stderr
        return proc, out
