"""A host folder the sandbox tests attack: outside /tmp (private in the sandbox anyway), the
home and any git repository, as a `--db /srv/x/...` or a data set under /srv is."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def host_folder() -> Iterator[Path]:
    where = Path("/var/cache/portside-tests") / uuid.uuid4().hex[:10]
    where.mkdir(parents=True)
    try:
        yield where
    finally:
        subprocess.run(["rm", "-rf", str(where)], check=False)
