"""A real OpenSSH server on a loopback port for the remote-run tests and the ssh lag bench.

Throwaway host and user keys in a temp folder; the "remote home" is a folder of its own (sshd's
SetEnv HOME), so a test can list it before and after. Runs as root (PermitRootLogin
prohibit-password, StrictModes no, UsePAM no); the client config (ssh -F) names the alias.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
ALIAS = "portside-test"


def why_not() -> str:
    """'' when a loopback sshd can run here, else the reason a test skips."""
    if not os.path.exists(SSHD):
        return "openssh-server is not installed (apt-get install -y openssh-server)"
    if not shutil.which("ssh") or not shutil.which("ssh-keygen"):
        return "the OpenSSH client is not installed"
    if os.geteuid() != 0:
        return "the loopback sshd needs root (it logs in as the running user via PermitRootLogin)"
    return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LoopbackSSHD:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "remote-home"
        self.home.mkdir(parents=True)
        (self.home / "notes.txt").write_text("the host user's own file\n")
        self.port = _free_port()
        for name in ("hostkey", "userkey", "otherkey"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                            str(root / name)], check=True)
        (root / "authorized_keys").write_text((root / "userkey.pub").read_text())
        self.sshd_config = root / "sshd_config"
        self.sshd_config.write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {root / 'hostkey'}\n"
            f"PidFile {root / 'sshd.pid'}\nAuthorizedKeysFile {root / 'authorized_keys'}\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "PubkeyAuthentication yes\nPermitRootLogin prohibit-password\nUsePAM no\n"
            f"StrictModes no\nSetEnv HOME={self.home}\nLogLevel ERROR\n")
        self.config = self.client_config("userkey")
        self.bad_config = self.client_config("otherkey", name="ssh_config_badkey")
        self.proc: subprocess.Popen[bytes] | None = None

    def client_config(self, key: str, name: str = "ssh_config", port: int | None = None,
                      alias: str = f"{ALIAS} 127.0.0.1") -> Path:
        path = self.root / name
        path.write_text(
            f"Host {alias}\n  HostName 127.0.0.1\n  Port {port or self.port}\n  User root\n"
            f"  IdentityFile {self.root / key}\n  IdentitiesOnly yes\n"
            "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n")
        return path

    def start(self) -> LoopbackSSHD:
        os.makedirs("/run/sshd", exist_ok=True)
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.sshd_config)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {self.proc.stderr.read().decode()[-500:]}")
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", self.port), timeout=0.2):
                return self
            time.sleep(0.05)
        raise RuntimeError("sshd did not listen within 10 s")

    def kill(self) -> None:
        """SIGKILL the listener and every per-connection sshd: live sessions drop at once."""
        if self.proc is None:
            return
        import psutil

        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    if child.name().startswith("sshd"):
                        child.send_signal(signal.SIGKILL)
        self.proc.kill()
        self.proc.wait()
        self.proc = None

    def drop_links(self, sig: int = signal.SIGKILL) -> int:
        """Signal every per-connection sshd, not the listener: SIGKILL drops each live
        connection (the host stays reachable), SIGSTOP freezes them (TCP stays open and
        nothing answers, as on a cut link). Returns how many were signalled."""
        import psutil

        assert self.proc is not None
        hit = 0
        for child in psutil.Process(self.proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if child.name().startswith("sshd"):
                    child.send_signal(sig)
                    hit += 1
        return hit

    def listing(self) -> dict[str, str]:
        """The remote home: every path and its content hash."""
        import hashlib

        out = {}
        # os.walk, not rglob: a folder the keeper is removing right now must not end the walk
        # (rglob raises when a directory goes away under it; os.walk skips what is gone).
        for root, dirs, files in os.walk(self.home):
            base = Path(root)
            for d in dirs:
                out[str((base / d).relative_to(self.home))] = "dir"
            for f in files:
                p = base / f
                try:
                    out[str(p.relative_to(self.home))] = hashlib.sha256(p.read_bytes()).hexdigest()
                except (FileNotFoundError, NotADirectoryError):
                    continue
        return dict(sorted(out.items()))

    def processes_under_home(self) -> list[str]:
        """Processes whose working folder is inside the remote home (runs left behind)."""
        import psutil

        left = []
        for proc in psutil.process_iter(["pid", "cwd", "cmdline"]):
            cwd = proc.info.get("cwd") or ""
            if cwd.startswith(str(self.home)):
                left.append(f"{proc.info['pid']} {' '.join(proc.info.get('cmdline') or [])}")
        return left
