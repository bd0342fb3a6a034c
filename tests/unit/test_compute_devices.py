"""Issue 37 item 2: `[hardware] devices = N` is judged against the devices the step computed
on (the facts' `compute_devices`), not the host's device count. The sharding strings below are
what torch_xla 2.9 printed on XLA:CPU with 4 devices (`_get_xla_sharding_spec`, and the HLO of
a loss's graph); the figures are worked out by hand from XLA's sharding format."""

from __future__ import annotations

import pytest

from portside.core.checks import RunEnd, RunRecords, run_checks
from portside.core.checks.evidence import UNSET
from portside.core.log.criteria import parse_criteria
from portside.core.probe import _facts

OK = RunEnd(exit_code=0, wall_s=1.0)
DEVICES_4 = parse_criteria("[hardware]\ndevices = 4\n")
XLA_CPU = {"type": "facts", "backend": "torch_xla", "device_kind": "CPU", "device_name": "CPU:0",
           "device_count": 4, "real_devices": [f"CPU:{i}" for i in range(4)],
           "pjrt_device": "CPU", "world_size": 1, "param_devices": ["xla:0"]}
CPU = {"type": "facts", "backend": "cpu", "device_kind": "CPU", "device_name": "cpu",
       "device_count": 1, "param_devices": ["cpu"]}
CUDA = {"type": "facts", "backend": "cuda", "device_kind": "CUDA", "device_name": "NVIDIA H100",
        "device_count": 8}

# Seen: a data-parallel step (batch split over a 4-device "data" axis, parameters replicated)
DP = ["{devices=[4,1]0,1,2,3}", "{devices=[4]0,1,2,3}", "{replicated}"]
# Seen: a (2, 2) mesh ("data", "model"): the batch over "data", a weight over "model", an
# activation over both
X_2X2 = "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"
W_2X2 = "{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}"
H_2X2 = "{devices=[2,2]0,1,2,3}"
HLO = """ENTRY %IrToHlo.15 (p0.1: s64[128], p1.2: f32[10]) -> (f32[]) {
  %p0.1 = s64[128]{0} parameter(0), sharding={devices=[4]0,1,2,3}
  %p5.8 = f32[128,20]{1,0} parameter(5), sharding={devices=[4,1]0,1,2,3}
  %p4.6 = f32[64,20]{1,0} parameter(4), sharding={replicated}
  %t = (f32[], f32[8]) tuple(%a, %b), sharding={{replicated}, {devices=[2,2]<=[4] last_tile_dim_replicate}}
  %custom-call.14 = f32[128,64]{1,0} custom-call(f32[128,64]{1,0} %add.13), custom_call_target="Sharding", sharding={devices=[2,2]0,1,2,3}, metadata={op_type="xla__custom_sharding"}
}"""


def run(*facts: dict, n: int = 5) -> RunRecords:
    recs: list[dict] = []
    for rank, f in enumerate(facts):
        recs.append({**f, "rank": rank, "world_size": len(facts)})
        recs += [{"type": "step", "rank": rank, "step": k, "loss": 1.0, "grad_norm": 0.5,
                  "max_norm": None, "lr": [0.1]} for k in range(n)]
    return RunRecords.from_records(recs, OK)


def hardware(r: RunRecords, target: str = "xla:cpu", crit=DEVICES_4) -> list:  # type: ignore[no-untyped-def]
    return [a for a in run_checks([], r, crit, target, True) if "hardware" in a.kind]


# --- which devices hold distinct pieces (the probe's rule, _facts.py) ------------------------


def test_pieces_of_each_sharding_form():
    assert _facts.sharding_pieces("{replicated}") == {}
    assert _facts.sharding_pieces("{maximal device=1}") == {}
    assert _facts.sharding_pieces(DP[0]) == {0: (0, 0), 1: (1, 0), 2: (2, 0), 3: (3, 0)}
    # the trailing replicated dimension does not split: devices 0, 1 hold rows 0..63
    assert _facts.sharding_pieces(X_2X2) == {0: (0, 0), 1: (0, 0), 2: (1, 0), 3: (1, 0)}
    assert _facts.sharding_pieces(W_2X2) == {0: (0, 0), 2: (0, 0), 1: (1, 0), 3: (1, 0)}
    # iota tile assignments: <=[4] is 0..3, <=[2,2]T(1,0) is 0,2,1,3
    assert _facts.sharding_pieces("{devices=[4,1]<=[4]}") == _facts.sharding_pieces(DP[0])
    assert (_facts.sharding_pieces("{devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}")
            == _facts.sharding_pieces(W_2X2))
    # subgroups: replicated ones collapse, manual ones are pieces of their own
    assert set(_facts.sharding_pieces(
        "{devices=[2,2]0,1,2,3 last_tile_dims={replicated}}").values()) == {(0,), (1,)}
    assert len(set(_facts.sharding_pieces(
        "{devices=[2,2]0,1,2,3 last_tile_dims={manual}}").values())) == 4


@pytest.mark.parametrize(("specs", "want"), [
    (DP, (4, 4)),  # data parallel: 4 batch shards
    (["{replicated}"], (1, 0)),  # the unsharded port: every device computes the whole step
    ([], (1, 0)),
    ([X_2X2], (2, 4)),  # a 4-device mesh, the batch split 2 ways, nothing else split
    ([X_2X2, W_2X2], (4, 4)),  # 2 data x 2 model: every device holds its own pair
    ([X_2X2, W_2X2, H_2X2], (4, 4)),
    (["{devices=[4,1]3,2,1,0}"], (4, 4)),  # a permuted mesh
])
def test_distinct_work(specs: list[str], want: tuple[int, int]):
    assert _facts.distinct_work(specs) == want


def test_shardings_read_from_a_graphs_hlo():
    assert _facts.hlo_shardings(HLO) == {
        "{devices=[4]0,1,2,3}", "{devices=[4,1]0,1,2,3}", "{replicated}", "{devices=[2,2]0,1,2,3}",
        "{{replicated}, {devices=[2,2]<=[4] last_tile_dim_replicate}}"}
    assert _facts.distinct_work(sorted(_facts.hlo_shardings(HLO))) == (4, 4)
    assert _facts.hlo_shardings("ENTRY %e () -> f32[] {\n  ROOT %c = f32[] constant(1)\n}") == set()


# --- the judgement (core/checks/runtime.py) ----------------------------------------------------


def spmd(n: int, how: str) -> dict:
    return {**XLA_CPU, "compute_devices": n, "compute_scope": "mesh", "compute_devices_how": how}


def test_spmd_port_that_shards_nothing_is_wrong_hardware_with_both_figures():
    how = ("spmd: none of the step's inputs and parameters sharded over the 4-device mesh, "
           "so each device computes the whole step")
    (a,) = hardware(run(spmd(1, how)))
    assert (a.kind, a.severity) == ("wrong-hardware", "error")
    assert "computed on 1 device(s), 4 expected" in a.title and "4 on the host" in a.title
    assert how in a.title
    assert a.evidence.compute_devices == 1 and a.evidence.device_count == 4
    assert a.evidence.compute_devices_how == how


def test_spmd_port_that_splits_its_step_four_ways_passes():
    assert hardware(run(spmd(4, "spmd: the step's inputs and parameters split 4 ways"))) == []
    # the host's count is not the claim: 4-way work on an 8-device host is 4 devices
    assert hardware(run({**spmd(4, "4 ways"), "device_count": 8})) == []


def test_one_mesh_over_several_processes_is_counted_once():
    # multi-host SPMD: every process reports the mesh's figure
    assert hardware(run(spmd(4, "4 ways"), spmd(4, "4 ways"))) == []
    (a,) = hardware(run(spmd(4, "4 ways"), spmd(4, "4 ways")),
                    crit=parse_criteria("[hardware]\ndevices = 8\n"))
    assert "computed on 4 device(s), 8 expected" in a.title


def test_ranks_add_up():
    rank = {**CPU, "compute_devices": 1, "compute_scope": "process",
            "compute_devices_how": "one process on cpu"}
    assert hardware(run(*[rank] * 4), target="cpu") == []
    (a,) = hardware(run(*[rank] * 2), target="cpu")
    assert "computed on 2 device(s), 4 expected" in a.title and "2 ranks" in a.title
    assert a.evidence.rank_compute_devices == {"0": 1, "1": 1}


def test_cuda_ranks_on_one_gpu_count_once():
    def on(uuid: str) -> dict:
        return {**CUDA, "compute_devices": 1, "compute_scope": "process",
                "compute_devices_how": "one process on cuda:0", "compute_device_ids": [uuid]}
    assert hardware(run(on("GPU-a"), on("GPU-b"), on("GPU-c"), on("GPU-d")), target="cuda") == []
    (a,) = hardware(run(*[on("GPU-a")] * 4), target="cuda")  # set_device forgotten
    assert "computed on 1 device(s), 4 expected" in a.title and "counted once" in a.title


def test_logs_without_the_fact_keep_the_host_count():
    # before compute_devices: the unsharded port passed on the host's 4 devices
    assert hardware(run(XLA_CPU)) == []
    (a,) = hardware(run({**XLA_CPU, "device_count": 1}))
    assert "1 device(s) seen, 4 expected" in a.title and a.evidence.compute_devices is UNSET


def test_a_wrong_kind_is_not_also_a_wrong_count():
    (a,) = hardware(run(spmd(1, "replicated")), target="tpu")
    assert "ran on CPU" in a.title
