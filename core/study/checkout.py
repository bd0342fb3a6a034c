"""A study project's folder on the machine a worker runs on: the manifest's folder as it is
(a shared filesystem), or a git URL checked out at its commit into the work root."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path
from typing import Any

GIT_TIMEOUT_S = 600.0


class CheckoutError(RuntimeError):
    pass


def project_folder(task: Any, checkouts: Path) -> Path:
    if task.folder:
        if not os.path.isdir(task.folder):
            raise CheckoutError(f"{task.project}: {task.folder} is not a folder on this machine "
                                "(a study's folders must be at the same path on every node)")
        return Path(task.folder)
    key = hashlib.sha256(f"{task.git}\0{task.commit}".encode()).hexdigest()[:16]
    dest = checkouts / f"{task.project}-{key}"
    done = dest / ".portside-checkout"
    if done.exists():
        return dest
    tmp = checkouts / f".{dest.name}.{os.getpid()}"
    checkouts.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    for argv in (["git", "clone", "--quiet", "--no-checkout", "--", task.git, str(tmp)],
                 ["git", "-C", str(tmp), "checkout", "--quiet", "--detach", task.commit]):
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, env=env,
                                  timeout=GIT_TIMEOUT_S, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise CheckoutError(f"{task.project}: {' '.join(argv[:2])}: {exc}") from None
        if proc.returncode != 0:
            raise CheckoutError(f"{task.project}: {' '.join(argv[:3])} failed: "
                                f"{proc.stderr.strip()[-300:]}")
    (tmp / ".portside-checkout").write_text(task.commit + "\n")
    try:
        tmp.rename(dest)  # another worker on this machine may have won the race: theirs stands
    except OSError:
        subprocess.run(["rm", "-rf", "--", str(tmp)], check=False)
    return dest
