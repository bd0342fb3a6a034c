"""The session's keeper on a host (its source is sent as the first line of its stdin; stdlib).

One per host and session, on a connection of its own, for the whole session: it creates the
session's folder, says which transport the host can take (``rsync DIR`` or ``tar DIR``, DIR
absolute), then reads portside's pings. When that connection ends — portside's normal close,
portside killed (even SIGKILL: the kernel closes its end of the pipe), the connection dropped,
or no ping for HEARTBEAT_S — it removes the session's folder, unless told to keep it. The
folder is removed only while its ``.owner`` still holds this keeper's token, so a resumed
session that took the folder over is not swept away by the killed one's keeper.
Arguments: DIR TOKEN KEEP(0|1) HEARTBEAT_S.
"""

import os
import select
import shutil
import sys


def main() -> None:
    folder, token, keep, beat = sys.argv[1], sys.argv[2], sys.argv[3] == "1", float(sys.argv[4])
    os.makedirs(os.path.join(folder, "tree"), exist_ok=True)  # rsync makes only the last level
    os.chdir(folder)
    folder = os.getcwd()
    with open(".owner", "w") as fh:
        fh.write(token)
    os.chdir("/")  # holds nothing there: the runs' processes are the only ones in the folder
    print("rsync" if shutil.which("rsync") else "tar", folder, flush=True)
    while select.select([0], [], [], beat)[0] and os.read(0, 4096):
        pass
    if keep:
        return
    try:
        with open(os.path.join(folder, ".owner")) as fh:
            ours = fh.read() == token
    except OSError:
        ours = False
    if ours:
        gone = f"{folder}.gone-{token}"  # one atomic step out of the way, then the slow part
        os.rename(folder, gone)
        shutil.rmtree(gone, ignore_errors=True)


if __name__ == "__main__":
    main()
