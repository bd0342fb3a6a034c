"""What core/run/ssh.py ships to a remote host is a probe that loads there: _probe.py and every
collaborator it loads by path beside it (issue 25 item 6)."""

from __future__ import annotations

import importlib.util
import re
import sys
import tarfile
from pathlib import Path

from portside.core.probe import probe_dir
from portside.core.run import ssh


def test_the_shipped_probe_loads_its_collaborators_from_the_shipped_copy(tmp_path: Path) -> None:
    source = (probe_dir().parent / "_probe.py").read_text()
    wanted = set(re.findall(r'_sibling\("(\w+)"\)', source))  # what it loads beside itself
    assert {"_writer", "_values", "_facts", "_xla", "_settings"} <= wanted
    fh = ssh._tar("run", None, True)
    with tarfile.open(fileobj=fh) as tar:
        names = set(tar.getnames())
        tar.extractall(tmp_path, filter="data")
    fh.close()
    assert {f"probe/{m}.py" for m in wanted} | {"probe/_probe.py",
                                                 "probe/inject/sitecustomize.py"} <= names
    name = "_shipped_probe_under_test"
    spec = importlib.util.spec_from_file_location(name, tmp_path / "probe" / "_probe.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
        mod._sibling("_settings")
        loaded = {m: Path(sys.modules[name + m].__file__ or "") for m in wanted}
    finally:
        for key in [k for k in sys.modules if k.startswith(name)]:
            del sys.modules[key]
    assert loaded == {m: tmp_path / "probe" / f"{m}.py" for m in wanted}
