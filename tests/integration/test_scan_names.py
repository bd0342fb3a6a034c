"""`portside scan` on a project whose file names are hostile (issue 38.14d): a newline and an
escape sequence in one name, bytes that are not UTF-8 in another. The real CLI in a process of
its own, its stdout read as bytes: no control character reaches the terminal (each finding is
one line, escaped), and `--json` is valid UTF-8 that a strict parser reads, the exact bytes of a
name kept in hex beside it. Before, the names were printed raw and the JSON held lone
surrogates (\\udce9)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from cli_run import cli

SOURCE = b"import torch\nx.cuda()\n"
FAKE = b"evil\n  cuda-call (1): \x1b[32mall clear\x1b[0m\r.py"
LATIN = b"caf\xe9.py"


def _project(tmp: Path) -> Path:
    root = tmp / "proj"
    root.mkdir()
    for name in (FAKE, LATIN, b"plain.py"):
        with open(os.path.join(os.fsencode(root), name), "wb") as f:
            f.write(SOURCE)
    return root


def _scan(*args: str) -> subprocess.CompletedProcess[bytes]:
    # The C locale: Python writes undecodable names back as their raw bytes (surrogateescape).
    env = {**os.environ, "LC_ALL": "C"}
    env.pop("PYTHONIOENCODING", None)
    return cli("scan", *args, env=env, timeout=120, text=False)


def test_names_are_escaped_on_the_terminal(tmp_path: Path) -> None:
    res = _scan(str(_project(tmp_path)))
    assert res.returncode == 1, res.stderr[-2000:]
    out = res.stdout
    assert not any(b in out for b in (b"\x1b", b"\r", b"\xe9")), out
    lines = out.decode("utf-8").splitlines()
    places = [x for x in lines if x.startswith("  ")]
    assert len(places) == 3, lines  # one line per finding: the name's newline did not split it
    assert any(x.startswith("  caf\\xe9.py:2") for x in places), places
    assert any(x.startswith("  evil\\n  cuda-call (1): \\x1b[32mall clear\\x1b[0m\\r.py:2")
               for x in places), places


def test_json_is_valid_utf8_with_the_exact_bytes(tmp_path: Path) -> None:
    root = _project(tmp_path)
    res = _scan(str(root), "--json")
    assert res.returncode == 1, res.stderr[-2000:]
    text = res.stdout.decode("utf-8")  # strict: raises on anything not UTF-8
    data = json.loads(text)

    def strings(v: object) -> list[str]:
        if isinstance(v, str):
            return [v]
        if isinstance(v, dict):
            return [s for x in v.values() for s in strings(x)]
        if isinstance(v, list):
            return [s for x in v for s in strings(x)]
        return []

    for s in strings(data):
        s.encode("utf-8")  # a lone surrogate raises here
    by_name = {bytes.fromhex(f["path_hex"]) if "path_hex" in f else f["path"].encode(): f
               for f in data["findings"]}
    assert set(by_name) == {FAKE, LATIN, b"plain.py"}, by_name
    assert by_name[LATIN]["path"] == "caf\ufffd.py"
    assert by_name[FAKE]["path"] == FAKE.decode()  # valid UTF-8: kept, JSON escapes controls
    assert "path_hex" not in by_name[b"plain.py"]
