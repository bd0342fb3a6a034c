"""The session's keeper on a host (its source is sent as the first line of its stdin; stdlib).

One per host and session, on a connection of its own, for the whole session: it creates the
session's folder, says which transport the host can take (``rsync DIR`` or ``tar DIR``, DIR
absolute), then reads portside's pings. When that connection ends — portside's normal close,
portside killed (even SIGKILL: the kernel closes its end of the pipe), the connection dropped,
or no ping for HEARTBEAT_S — it removes the session's folder, unless told to keep it. The
folder is removed only while its ``.owner`` still holds this keeper's token, so a resumed
session that took the folder over is not swept away by the killed one's keeper. First, every
run agent still alive in the folder (``records/*.pid``; one whose own connection went silent
only finds out at its heartbeat) is told to end its run, kept or not. The folders above DIR
that the keeper had to create (``ssh://host/remote/dir`` naming one that did not exist) go
too when nothing else is left in them; their topmost is written in ``.made``.
Arguments: DIR TOKEN KEEP(0|1) HEARTBEAT_S.
"""

import os
import select
import shutil
import signal
import sys
import time
from stat import S_ISREG

AGENT_END_S = 5.0  # how long an agent told to stop gets to kill its run and exit


def _topmost_missing(folder: str) -> str:
    """The highest of folder's parents that does not exist yet ('' when the parent exists)."""
    top, parent = "", os.path.dirname(os.path.abspath(folder))
    while parent and not os.path.isdir(parent):
        top, parent = parent, os.path.dirname(parent)
    return top


def stop_agents(folder: str) -> None:
    """SIGTERM each run agent of this session that is still alive (its cwd is the folder: a
    pid reused by another process is left alone), then wait a little for them to go."""
    records, waiting = os.path.join(folder, "records"), []
    try:
        names = [n for n in os.listdir(records) if n.endswith(".pid")]
    except OSError:
        return
    for name in names:
        try:
            # The run writes records/: no link followed, no FIFO waited on (open() held the
            # keeper for ever, the folder never removed), a regular file's first bytes only.
            fd = os.open(os.path.join(records, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            try:
                pid = int(os.read(fd, 32).strip()) if S_ISREG(os.fstat(fd).st_mode) else 0
            finally:
                os.close(fd)
            if pid <= 0:
                continue
            if os.readlink(f"/proc/{pid}/cwd") != folder:
                continue
            os.kill(pid, signal.SIGTERM)
            waiting.append(pid)
        except (OSError, ValueError):
            continue
    deadline = time.monotonic() + AGENT_END_S
    while waiting and time.monotonic() < deadline:
        waiting = [p for p in waiting if os.path.exists(f"/proc/{p}")
                   and _state(p) != "Z"]
        time.sleep(0.05)


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
        return stat[stat.rindex(b")") + 2:][:1].decode()
    except (OSError, ValueError):
        return "Z"


def remove_made(folder: str, top: str) -> None:
    """rmdir folder's parents up to top (the first it had to create), while they are empty."""
    if not top:
        return
    here = os.path.dirname(folder)
    while here.startswith(top):
        try:
            os.rmdir(here)
        except OSError:
            return  # not empty: another session's, or the user's own files
        if here == top:
            return
        here = os.path.dirname(here)


def main() -> None:
    folder, token, keep, beat = sys.argv[1], sys.argv[2], sys.argv[3] == "1", float(sys.argv[4])
    top = _topmost_missing(folder)
    os.makedirs(os.path.join(folder, "tree"), exist_ok=True)  # rsync makes only the last level
    os.chdir(folder)
    folder = os.getcwd()
    top = os.path.realpath(top) if top else ""
    with open(".owner", "w") as fh:
        fh.write(token)
    if top or not os.path.exists(".made"):  # a resumed session keeps what the first one made
        with open(".made", "w") as fh:
            fh.write(top)
    os.chdir("/")  # holds nothing there: the runs' processes are the only ones in the folder
    print("rsync" if shutil.which("rsync") else "tar", folder, flush=True)
    while select.select([0], [], [], beat)[0] and os.read(0, 4096):
        pass
    try:
        with open(os.path.join(folder, ".owner")) as fh:
            ours = fh.read() == token
    except OSError:
        ours = False
    if not ours:
        return
    stop_agents(folder)
    if keep:
        return
    try:
        with open(os.path.join(folder, ".made")) as fh:
            top = fh.read().strip()
    except OSError:
        top = ""
    gone = f"{folder}.gone-{token}"  # one atomic step out of the way, then the slow part
    os.rename(folder, gone)
    shutil.rmtree(gone, ignore_errors=True)
    remove_made(folder, top)


if __name__ == "__main__":
    main()
