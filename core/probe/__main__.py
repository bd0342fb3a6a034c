"""python -m portside.core.probe [--out FILE] [--seed-offset K] -- script.py [args...]

Runs a Python script with the probe active. The script replaces this process (exec), so its
exit status and signals are the script's own. Without --out, PORTSIDE_PROBE_OUT must be set.
The output file (and its per-rank / per-process siblings) is started anew for each run.
"""

from __future__ import annotations

import argparse
import os
import sys

from . import inject_env
from .outputs import clear_run_files


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, cmd = argv[:i], argv[i + 1 :]
    parser = argparse.ArgumentParser(prog="python -m portside.core.probe")
    parser.add_argument("--out", help="JSONL record file (default: $PORTSIDE_PROBE_OUT)")
    parser.add_argument("--seed-offset", type=int, default=None, help="shift seeds by K")
    parser.add_argument("rest", nargs="*", help="script and its arguments (after --)")
    args = parser.parse_args(argv)
    cmd = [*args.rest, *cmd]
    out = args.out or os.environ.get("PORTSIDE_PROBE_OUT")
    if not cmd or not out:
        parser.error("need a script (after --) and --out FILE or PORTSIDE_PROBE_OUT")
    offset = args.seed_offset
    if offset is None:
        offset = int(os.environ.get("PORTSIDE_SEED_OFFSET") or 0)
    clear_run_files(out)  # a run of its own: not appended to what an earlier one left there
    env = inject_env(os.environ, out, offset)
    if cmd[0] == "-m" or cmd[0].endswith(".py") or os.path.isfile(cmd[0]):
        cmd = [sys.executable, *cmd]  # a script or -m module: this interpreter runs it
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(cmd[0], cmd, env)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main())
