"""When the candidate may start beside the references (`[hosts] overlap`, issue 30): on
another machine than theirs always, on theirs when `parallel` (bounded by the cores) leaves a
slot; `overlap = false` never. A bad value is refused naming the file, line and key."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from portside.core.log.bus import EventBus
from portside.core.log.criteria import CriteriaError, parse_criteria
from portside.core.run.ssh import SSHExecutor
from portside.core.session.verify import Verifier


def _verifier(tmp: Path, hosts: str, **executors: str) -> Verifier:
    v = Verifier(EventBus(None), "s", parse_criteria(f"[hosts]\n{hosts}", "c.toml"), "cpu",
                 tmp / "probe")
    for role, host in executors.items():
        v.executors[role] = SSHExecutor(host, "s")  # nothing is reached until a run
    return v


def test_here_only_when_parallel_leaves_a_slot(tmp_path: Path) -> None:
    assert not _verifier(tmp_path, "parallel = 1\n").candidate_overlaps()  # the default
    two = _verifier(tmp_path, "parallel = 2\n")
    assert two.candidate_overlaps() == ((os.cpu_count() or 1) >= 2)  # one a core at most
    assert not _verifier(tmp_path, "parallel = 2\noverlap = false\n").candidate_overlaps()


def test_on_another_machine_always(tmp_path: Path) -> None:
    assert _verifier(tmp_path, "parallel = 1\n", candidate="tpu-vm").candidate_overlaps()
    assert _verifier(tmp_path, "parallel = 1\n", reference="gpu-box").candidate_overlaps()
    # both on one host: its slots, as the criteria say
    same = {"reference": "gpu-box", "candidate": "gpu-box"}
    assert not _verifier(tmp_path, "parallel = 1\n", **same).candidate_overlaps()
    assert _verifier(tmp_path, "parallel = 2\n", **same).candidate_overlaps()
    assert not _verifier(tmp_path, "overlap = false\n", candidate="tpu-vm").candidate_overlaps()


def test_a_bad_value_names_where() -> None:
    with pytest.raises(CriteriaError) as err:
        parse_criteria('[hosts]\nparallel = 2\noverlap = "yes"\n', "c.toml")
    assert "c.toml:3" in str(err.value) and "overlap" in str(err.value)
    assert "true or false" in str(err.value)
