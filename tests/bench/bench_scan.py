"""`portside scan` on a 10k-file tree, against parsing every file (no trigger-word filter), in
the same run.
    python -m tests.bench.bench_scan [N]
The tree: N Python files, real code: the standard library's modules under 12 kB cycled (most
hold no GPU construct) with the pytorch/examples fixtures (tests/fixtures/scan) as every 20th file, plus a
virtual environment the scan must not walk. Prints CPU seconds for each (best of three for the
scan, once for parsing everything): the machine this runs on is shared, and its wall clock
measures the neighbours; the files are in the page cache after the tree is written, so CPU is
what the scan costs. Wall seconds are printed beside them."""

from __future__ import annotations

import ast
import contextlib
import shutil
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from portside.core.scan.scan import ScanResult, scan, walk

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
TARGET_S = 10.0  # a 10k-file project inventoried before a port, while the user waits
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "scan"


def make_tree(root: Path) -> int:
    # modules of a project's size (most are a few kB), not the stdlib's largest
    stdlib = sorted(p for p in Path(sysconfig.get_paths()["stdlib"]).rglob("*.py")
                    if "site-packages" not in p.parts and 500 < p.stat().st_size < 12_000)
    ours = sorted(FIXTURES.rglob("*.py"))
    for i in range(N):
        src = ours[i // 20 % len(ours)] if i % 20 == 0 else stdlib[i % len(stdlib)]
        dst = root / f"pkg{i // 100}" / f"m{i}.py"
        dst.parent.mkdir(exist_ok=True)
        shutil.copyfile(src, dst)
    venv = root / ".venv" / "lib"
    venv.mkdir(parents=True)
    (root / ".venv" / "pyvenv.cfg").write_text("home = /usr\n")
    for i in range(200):
        (venv / f"v{i}.py").write_text("import torch\ntorch.cuda.synchronize()\n")
    return sum(p.stat().st_size for p in root.rglob("*.py"))


def parse_all(root: Path) -> float:
    t0 = time.process_time()
    for p in walk(root):
        if p.suffix == ".py":
            with contextlib.suppress(SyntaxError):
                ast.parse(p.read_bytes())
    return time.process_time() - t0


def timed_scan(root: Path) -> tuple[float, ScanResult]:
    t0 = time.process_time()
    result = scan(root)
    return time.process_time() - t0, result


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        size = make_tree(root)
        cpu, best = min((timed_scan(root) for _ in range(3)), key=lambda r: r[0])
        full = parse_all(root)  # once: it is the slow side
    venv_hits = [f for f in best.findings if f.path.startswith(".venv")]
    print(f"{best.files} files ({size / 1e6:.0f} MB): scan {cpu:.2f} s CPU ({best.seconds:.2f} s "
          f"wall; {best.parsed} parsed, {len(best.findings)} findings); parsing every file "
          f"{full:.2f} s CPU; the word filter saves {full / cpu:.1f}x")
    ok = cpu < TARGET_S and best.files >= N and not venv_hits
    print(f"TARGET scan of {N} files < {TARGET_S:.0f} s CPU, venv not walked: {cpu:.2f} s, "
          f"{len(venv_hits)} venv findings: {'met' if ok else 'MISSED'}")
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
