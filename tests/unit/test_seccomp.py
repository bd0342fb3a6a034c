"""The seccomp program's tables against the kernel's own headers, and its shape."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from portside.core.run import seccomp

HEADERS = {"x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
           "aarch64": Path("/usr/include/asm-generic/unistd.h")}


@pytest.mark.parametrize("arch", sorted(seccomp.ARCHES))
def test_syscall_numbers_are_the_kernels(arch: str) -> None:
    header = HEADERS[arch]
    if not header.exists():
        pytest.skip(f"no {header} here (apt-get install linux-libc-dev)")
    text = header.read_text()
    for name, nr in seccomp.ARCHES[arch][1].items():
        m = re.search(rf"#define __NR(?:3264)?_{name}\s+(\d+)", text)
        assert m and int(m.group(1)) == nr, (arch, name, nr, m and m.group(1))


@pytest.mark.parametrize("arch", sorted(seccomp.ARCHES))
def test_program_is_well_formed(arch: str) -> None:
    prog = seccomp.filter_bytes(arch)
    assert len(prog) % 8 == 0
    ins = [struct.unpack("=HBBI", prog[i:i + 8]) for i in range(0, len(prog), 8)]
    for i, (code, jt, jf, _k) in enumerate(ins):
        if code & 0x07 == 0x05:  # a jump: both targets inside the program
            assert i + 1 + max(jt, jf) < len(ins)
    assert ins[-1][0] == 0x06  # it ends in a return
    # Every refused call of the arch appears as a compared constant.
    ks = {k for code, _, _, k in ins if code == 0x15}
    nrs = seccomp.ARCHES[arch][1]
    assert {nrs[n] for n in seccomp.EPERM_NAMES if n in nrs} <= ks
