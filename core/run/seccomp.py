"""The seccomp filter of sandboxed runs: a classic-BPF program, built here with ``struct``.

bubblewrap loads it (``--seccomp FD``) just before it runs the command, after its own mounts.
It refuses, with EPERM, the system calls a run has no business making and that would let it
out of its mount namespace or into other processes even if it got a capability back: mounts
of every kind, new namespaces (``unshare``, ``setns``, ``clone`` with a CLONE_NEW* flag),
ptrace and cross-process memory, keyrings, bpf and perf, kernel modules and kexec, reboot,
swap, io ports, file handles by number, userfaultfd and io_uring (its operations bypass
seccomp). ``clone3`` gets ENOSYS: its flags sit in memory a filter cannot read, and every
libc falls back to ``clone`` on ENOSYS, whose flags are checked. A call made through another
architecture's table (``int 0x80`` on x86_64, x32 numbers) kills the process: the numbers
checked here would mean other calls there.
"""

from __future__ import annotations

import os
import platform
import struct

__all__ = ["ARCHES", "BLOCKED", "EPERM_NAMES", "NS_FLAGS", "filter_bytes", "filter_path",
           "supported"]

# linux/filter.h, linux/seccomp.h, linux/audit.h
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000
EPERM, ENOSYS = 1, 38
_NR, _ARCH, _ARG0_LO = 0, 4, 16  # offsets in struct seccomp_data (little-endian arches)
_X32_BIT = 0x40000000

#: CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET (CLONE_NEWTIME is
#: 0x80, inside clone()'s exit-signal byte: it only works through clone3 and unshare).
NS_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 \
    | 0x40000000

#: Refused with EPERM wherever the architecture has them.
EPERM_NAMES = (
    "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr", "unshare", "setns", "ptrace", "process_vm_readv",
    "process_vm_writev", "process_madvise", "pidfd_getfd", "kcmp", "keyctl", "add_key",
    "request_key", "bpf", "perf_event_open", "kexec_load", "kexec_file_load", "init_module",
    "finit_module", "delete_module", "reboot", "swapon", "swapoff", "acct", "quotactl",
    "userfaultfd", "iopl", "ioperm", "open_by_handle_at", "name_to_handle_at", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "fanotify_init", "syslog", "settimeofday",
    "clock_settime", "vhangup",
)

#: Each architecture: its AUDIT_ARCH value and the numbers of its calls (asm/unistd*.h).
ARCHES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (0xC000003E, {
        "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "move_mount": 429,
        "open_tree": 428, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "mount_setattr": 442, "unshare": 272, "setns": 308, "ptrace": 101,
        "process_vm_readv": 310, "process_vm_writev": 311, "process_madvise": 440,
        "pidfd_getfd": 438, "kcmp": 312, "keyctl": 250, "add_key": 248, "request_key": 249,
        "bpf": 321, "perf_event_open": 298, "kexec_load": 246, "kexec_file_load": 320,
        "init_module": 175, "finit_module": 313, "delete_module": 176, "reboot": 169,
        "swapon": 167, "swapoff": 168, "acct": 163, "quotactl": 179, "userfaultfd": 323,
        "iopl": 172, "ioperm": 173, "open_by_handle_at": 304, "name_to_handle_at": 303,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "fanotify_init": 300, "syslog": 103, "settimeofday": 164, "clock_settime": 227,
        "vhangup": 153, "clone": 56, "clone3": 435,
    }),
    "aarch64": (0xC00000B7, {
        "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "move_mount": 429,
        "open_tree": 428, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "mount_setattr": 442, "unshare": 97, "setns": 268, "ptrace": 117,
        "process_vm_readv": 270, "process_vm_writev": 271, "process_madvise": 440,
        "pidfd_getfd": 438, "kcmp": 272, "keyctl": 219, "add_key": 217, "request_key": 218,
        "bpf": 280, "perf_event_open": 241, "kexec_load": 104, "kexec_file_load": 294,
        "init_module": 105, "finit_module": 273, "delete_module": 106, "reboot": 142,
        "swapon": 224, "swapoff": 225, "acct": 89, "quotactl": 60, "userfaultfd": 282,
        "open_by_handle_at": 265, "name_to_handle_at": 264, "io_uring_setup": 425,
        "io_uring_enter": 426, "io_uring_register": 427, "fanotify_init": 262, "syslog": 116,
        "settimeofday": 170, "clock_settime": 112, "vhangup": 58, "clone": 220, "clone3": 435,
    }),
}
BLOCKED = EPERM_NAMES  # the public name of what the filter refuses


def _ins(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def _program(arch: str) -> list[bytes]:
    """The filter as instructions. Layout: arch check, number load, x32 check, one jump per
    refused call (to a shared EPERM), clone3 (ENOSYS), clone (to the flags check), allow."""
    audit, nrs = ARCHES[arch]
    refused = sorted({nrs[n] for n in EPERM_NAMES if n in nrs})
    head = [_ins(_LD_W_ABS, _ARCH), _ins(_JEQ_K, audit, 1, 0), _ins(_RET_K, RET_KILL_PROCESS),
            _ins(_LD_W_ABS, _NR)]
    if arch == "x86_64":  # x32 calls share the arch value, numbers with bit 30 set
        head += [_ins(_JGE_K, _X32_BIT, 0, 1), _ins(_RET_K, RET_KILL_PROCESS)]
    # After the jumps: [clone3?][clone?][ALLOW][EPERM][ENOSYS][clone flags: ld, jset, ALLOW]
    n = len(refused)
    body: list[bytes] = []
    for i, nr in enumerate(refused):
        to_eperm = (n - i - 1) + 2 + 1  # the rest of the jumps, clone3 + clone, ALLOW
        body.append(_ins(_JEQ_K, nr, to_eperm, 0))
    body.append(_ins(_JEQ_K, nrs["clone3"], 3, 0))  # -> ENOSYS
    body.append(_ins(_JEQ_K, nrs["clone"], 3, 0))  # -> flags check
    body += [_ins(_RET_K, RET_ALLOW), _ins(_RET_K, RET_ERRNO | EPERM),
             _ins(_RET_K, RET_ERRNO | ENOSYS)]
    body += [_ins(_LD_W_ABS, _ARG0_LO), _ins(_JSET_K, NS_FLAGS, 0, 1),
             _ins(_RET_K, RET_ERRNO | EPERM), _ins(_RET_K, RET_ALLOW)]
    return head + body


def machine() -> str:
    m = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(m, m)


def supported(arch: str | None = None) -> bool:
    return (arch or machine()) in ARCHES


def filter_bytes(arch: str | None = None) -> bytes:
    """The compiled program (struct sock_filter[]) for ``arch`` (default: this machine's)."""
    arch = arch or machine()
    if arch not in ARCHES:
        raise ValueError(f"no seccomp filter for {arch} (known: {', '.join(ARCHES)})")
    prog = _program(arch)
    # Jumps are 8-bit: the layout above keeps them short, this says so if a list grows.
    assert len(prog) < 256, "seccomp program too long for 8-bit jumps"
    return b"".join(prog)


_MADE: dict[int, str] = {}  # pid -> the filter file it made


def filter_path() -> str:
    """A file holding the filter, made once per process in a new 0700 directory of ours (a
    path a run cannot write: /tmp is private inside the sandbox, and no other user can);
    made again if a /tmp cleaner took it during a long session."""
    path = _MADE.get(os.getpid())
    if path is not None and os.path.exists(path):
        return path
    import atexit
    import shutil
    import tempfile

    where = tempfile.mkdtemp(prefix="portside-seccomp-")
    path = os.path.join(where, "filter.bpf")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    with os.fdopen(fd, "wb") as fh:
        fh.write(filter_bytes())
    pid = os.getpid()
    _MADE[pid] = path

    def _remove() -> None:
        if os.getpid() == pid:  # not in a forked child: the parent still uses it
            shutil.rmtree(where, ignore_errors=True)
    atexit.register(_remove)
    return path
