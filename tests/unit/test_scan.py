"""`portside scan` (core/scan/scan.py): on real pytorch/examples folders against a list written by
hand (tests/fixtures/scan/EXPECTED), and on small projects written here, one per kind."""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from portside.cli.main import main
from portside.core.scan.scan import KINDS, scan, task_text

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "scan"


def _lines(root: Path) -> list[str]:
    return [f"{f.path}:{f.line} {f.kind} {f.what}" for f in scan(root).findings]


def test_pytorch_examples_give_exactly_the_hand_checked_findings() -> None:
    expected = [line for line in (FIXTURES / "EXPECTED").read_text().splitlines()
                if line and not line.startswith("#")]
    assert sorted(_lines(FIXTURES)) == sorted(expected)


def _project(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        p = tmp_path / "proj" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return tmp_path / "proj"


def test_each_kind_at_its_line(tmp_path: Path) -> None:
    root = _project(tmp_path, {
        "setup.py": """\
            from setuptools import setup
            from torch.utils.cpp_extension import CUDAExtension
            setup(ext_modules=[CUDAExtension("k", ["k.cu"])])
            """,
        "k.cu": "__global__ void k() {}\n",
        "ops.py": """\
            import torch
            import triton
            from torch.utils import cpp_extension as ce
            lib = torch.library.Library("mylib", "DEF")
            y = torch.ops.mylib.fused(x)
            z = torch.ops.aten.add(x, x)
            m = ce.load_inline("m", cpp_sources="")
            """,
        "libs.py": """\
            import flash_attn
            from apex import amp
            import bitsandbytes as bnb
            from xformers.ops import memory_efficient_attention
            import cupy as cp
            from nvidia.dali import pipeline_def
            from deepspeed.ops.adam import FusedAdam
            import nvidia_smi_free_name
            import numpy
            """,
        "train.py": """\
            import torch
            from torch.cuda.amp import GradScaler
            import torch.backends.cudnn as cudnn
            cudnn.benchmark = True
            dev = torch.device("cuda:1")
            scaler = GradScaler()
            w = torch.zeros(3, dtype=torch.float64)
            v = torch.ones(3, dtype="float64")
            model = torch.nn.DataParallel(net)
            torch.distributed.init_process_group(backend="nccl")
            for x, y in loader:
                loss = model(x).sum()
                if loss.item() > 10:
                    continue
                idx = torch.nonzero(x)
                fixed = torch.nonzero(x, size=4)
                loss.backward()
                opt.step()
                print(loss.item())
            for epoch in range(3):
                sched.step()
                print(loss.item())
            """,
        "bad.py": "import torch\nx.cuda(\n",
        "plain_bad.py": "def f(:\n",  # no trigger word: nothing there to find, never parsed
        ".venv/lib/torch_copy.py": "import torch\ntorch.cuda.synchronize()\n",
        "env2/pyvenv.cfg": "home = /usr\n",
        "env2/lib/x.py": "import torch\ntorch.cuda.synchronize()\n",
    })
    assert _lines(root) == [
        "bad.py:2 unparsed syntax error",
        "k.cu:1 cuda-extension CUDA source (.cu)",
        "libs.py:1 gpu-library import flash_attn",
        "libs.py:2 gpu-library import apex",
        "libs.py:3 gpu-library import bitsandbytes",
        "libs.py:4 gpu-library import xformers.ops",
        "libs.py:5 gpu-library import cupy",
        "libs.py:6 gpu-library import nvidia.dali",
        "libs.py:7 gpu-library import deepspeed.ops.adam",
        "ops.py:2 custom-op import triton",
        "ops.py:4 custom-op torch.library.Library",
        "ops.py:5 custom-op torch.ops.mylib.fused",
        "ops.py:7 cuda-extension torch.utils.cpp_extension.load_inline",
        "setup.py:3 cuda-extension torch.utils.cpp_extension.CUDAExtension",
        "train.py:4 cudnn-flag torch.backends.cudnn.benchmark",
        "train.py:5 cuda-call 'cuda:1'",
        "train.py:6 mixed-precision torch.cuda.amp.GradScaler",
        "train.py:7 float64 torch.float64",
        "train.py:8 float64 dtype='float64'",
        "train.py:9 collective torch.nn.DataParallel",
        "train.py:10 collective 'nccl'",
        "train.py:13 recompile branch on loss.item() > 10",
        "train.py:15 recompile torch.nonzero()",
        "train.py:19 recompile .item()",
    ]


def test_the_scan_never_runs_the_project(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    root = _project(tmp_path, {
        "train.py": f"open({str(marker)!r}, 'w').write('x')\nimport torch\nx.cuda()\n",
        "__init__.py": f"open({str(marker)!r}, 'w').write('x')\n",
    })
    assert _lines(root) == ["train.py:3 cuda-call .cuda()"]
    assert not marker.exists()


def test_cli_json_and_exit_status(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(main, ["scan", str(FIXTURES / "mnist"), "--json"])
    assert res.exit_code == 1, res.output
    out = json.loads(res.stdout)
    assert out["counts"] == {"recompile": 1}
    assert out["findings"] == [{"path": "main.py", "line": 48, "kind": "recompile",
                                "what": ".item()", "action": out["findings"][0]["action"]}]
    assert set(out["counts"]) <= set(KINDS)
    clean = _project(tmp_path, {"ok.py": "import torch\nx = torch.ones(2).to('xla')\n"})
    res = runner.invoke(main, ["scan", str(clean), "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["findings"] == []
    res = runner.invoke(main, ["scan", str(tmp_path / "missing")])
    assert res.exit_code == 2 and "does not exist" in res.output


def test_text_output_keeps_escapes_off_the_terminal(tmp_path: Path) -> None:
    root = _project(tmp_path, {"a\x1b[2Jb.py": "import torch\ntorch.cuda.synchronize()\n"})
    res = CliRunner().invoke(main, ["scan", str(root)])
    assert res.exit_code == 1
    assert "\x1b" not in res.output and "torch.cuda.synchronize" in res.output


def test_task_text_names_each_place() -> None:
    text = task_text(scan(FIXTURES / "imagenet"))
    assert "main.py:93 cudnn-flag: torch.backends.cudnn.benchmark;" in text
    assert text.count("\n- ") == 19


def test_the_word_filter_loses_nothing(tmp_path: Path) -> None:
    """Files without a trigger word are not parsed: parsing every file anyway finds the same."""
    from portside.core.scan.scan import scan_python, walk

    tests = Path(__file__).resolve().parents[1]
    for root in (FIXTURES, tests / "corpus", tests / "fixtures" / "trainers", tests.parent / "sessions"):
        every = sorted(f"{f.path}:{f.line} {f.kind} {f.what}"
                       for p in walk(root) if p.suffix == ".py"
                       for f in scan_python(p.relative_to(root).as_posix(), p.read_bytes()))
        assert every == sorted(line for line in _lines(root) if not line.split(":")[0].endswith(
            (".cpp", ".cu")))


def test_the_agent_is_handed_the_inventory_with_its_task() -> None:
    from types import SimpleNamespace

    from portside.core.log.criteria import Criteria
    from portside.core.session.agent_host import task_brief

    config = SimpleNamespace(target="tpu", reference_target="cpu", candidate="python main.py",
                             reference_command="python main.py", project=str(FIXTURES / "imagenet"))
    brief = task_brief(SimpleNamespace(config=config, criteria=Criteria(),  # type: ignore[arg-type]
                                       scan_result=None))
    assert "portside scan found 19 place(s)" in brief
    assert "- main.py:191 collective: torch.nn.DataParallel; DataParallel is single-process" in brief


@pytest.mark.timeout(60)
def test_a_hostile_project_gives_unparsed_findings_not_a_hang(tmp_path: Path) -> None:
    # Issue 38.9: a FIFO named *.py hung the scan in open(); a .py linked to /dev/zero was
    # read without end; deep nesting raised out of ast.parse and ended the session.
    import os

    (tmp_path / "train.py").write_text("import torch\nx = torch.zeros(1).cuda()\n")
    os.mkfifo(tmp_path / "pipe.py")
    (tmp_path / "zero.py").symlink_to("/dev/zero")
    cuda = "import torch\ny = torch.zeros(1).cuda()\n"  # parsed only with a trigger word
    (tmp_path / "deep.py").write_text(cuda + "x = " + "-" * 200_000 + "1\n")  # MemoryError
    (tmp_path / "nested.py").write_text(cuda + "x = " + "+".join(["1"] * 100_000) + "\n")
    got = {f.path: f for f in scan(tmp_path).findings}
    assert got["pipe.py"].kind == "unparsed" and "regular" in got["pipe.py"].what
    assert got["zero.py"].kind == "unparsed" and "link" in got["zero.py"].what
    for name in ("deep.py", "nested.py"):
        assert got[name].kind == "unparsed", got.get(name)
    assert any(f.path == "train.py" and f.kind == "cuda-call" for f in got.values())

DEPTH = 1500  # folders nested deeper than Python's recursion limit


@pytest.fixture
def nest() -> Iterator[Callable[[Path], None]]:
    """Makes folders DEPTH deep under a path; removes them bottom-up (rmtree recurses too)."""
    made: list[Path] = []

    def make(top: Path) -> None:
        fd = os.open(top, os.O_RDONLY)
        for _ in range(DEPTH):
            os.mkdir("a", dir_fd=fd)
            fd, old = os.open("a", os.O_RDONLY, dir_fd=fd), fd
            os.close(old)
        os.close(fd)
        made.append(top)

    yield make
    for top in made:
        for depth in range(DEPTH, 0, -1):
            os.rmdir(top.joinpath(*["a"] * depth))


@pytest.mark.timeout(60)
def test_deep_folders_and_links_out_are_findings_not_errors(
        tmp_path: Path, nest: Callable[[Path], None]) -> None:
    # Issue 38.9: 3.11's os.walk recursed, so 1,500 nested folders raised RecursionError out
    # of the scan (a session on the project ended "engine failed"); a link out of the project
    # had the scan, run as root, read a host file into findings the agent is handed.
    host = tmp_path / "host"
    host.mkdir()
    (host / "secret.py").write_text("import torch\nSENTINEL_HOST = torch.zeros(1).cuda()\n")
    (host / "secret.py").chmod(0o600)
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "train.py").write_text("import torch\nx = torch.zeros(1).cuda()\n")
    (proj / "same.py").symlink_to("train.py")  # inside: scanned once, where it lies
    (proj / "out.py").symlink_to(host / "secret.py")
    nest(proj)  # 3.11's os.walk recursed: RecursionError
    got = scan(proj)
    assert [(f.path, f.kind) for f in got.findings] == [("out.py", "unparsed"),
                                                        ("train.py", "cuda-call")]
    assert "SENTINEL" not in json.dumps(got.to_json())
