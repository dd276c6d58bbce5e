"""A control-plane token never crosses the network in clear text unless the user says so:
``plan`` against ``http://`` to a host that is not loopback stops before any byte is
sent (exit 1, a message naming the URL, the flag and the variable), and
``--allow-insecure-http`` / ``RECONCILE_ALLOW_INSECURE_HTTP=1`` lets it through. Run as
the CLI, against a real listener on this machine's non-loopback address."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from reconciler.exitcodes import Exit
from tests.e2e_repo import EXAMPLES, PROJECT
from tests.repo_copy import committed_copy

TOKEN = "canary-cleartext-token-4be1"


def outward_address() -> str | None:
    """This machine's address on its default route (no packet is sent), or None."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))
        address = str(probe.getsockname()[0])
    except OSError:
        return None
    finally:
        probe.close()
    return None if address.startswith("127.") else address


@dataclass
class Listener:
    """Accepts connections and keeps every byte received."""

    host: str
    sock: socket.socket
    received: list[bytes] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.sock.getsockname()[1]}"

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    data = conn.recv(65536)
                    head, _, body = data.partition(b"\r\n\r\n")
                    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                                   if line.lower().startswith(b"content-length:")), 0)
                    while len(body) < length:
                        more = conn.recv(65536)
                        if not more:
                            break
                        body += more
                    self.received.append(head + b"\r\n\r\n" + body)
                    conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n"
                                 b"connection: close\r\n\r\n")
                except OSError:
                    pass


@pytest.fixture
def listener() -> Iterator[Listener]:
    host = outward_address()
    if host is None:  # pragma: no cover - every CI machine here has a network interface
        pytest.skip("this machine has no non-loopback IPv4 address to listen on")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((host, 0))
    sock.listen(8)
    found = Listener(host, sock)
    thread = threading.Thread(target=found.serve, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        sock.close()
        thread.join(timeout=5)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return committed_copy(EXAMPLES, tmp_path / "config", "desired state")


def run(repo: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    key = repo.parent / "signer.key"
    key.write_text("11" * 32 + "\n")
    full = {k: v for k, v in os.environ.items() if not k.startswith("RECONCILE_")}
    full.update({"RECONCILE_TOKEN": TOKEN, "RECONCILE_SIGNER_KEY": str(key),
                 "RECONCILE_CA_FILE": "system", "NO_COLOR": "1", **env})
    return subprocess.run([sys.executable, "-m", "reconciler", *args, str(repo)],
                          cwd=PROJECT, env=full, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


@pytest.mark.integration  # starts a process of its own
@pytest.mark.parametrize("via", ["flag", "env"])
def test_plan_refuses_clear_text_beyond_loopback_and_sends_nothing(
        repo: Path, listener: Listener, via: str) -> None:
    if via == "flag":
        done = run(repo, "plan", "--control-plane", listener.url)
    else:
        done = run(repo, "plan", RECONCILE_CONTROL_PLANE_URL=listener.url)
    assert done.returncode == Exit.ERROR, done.stderr
    assert "clear text" in done.stderr and listener.url in done.stderr
    assert "--allow-insecure-http" in done.stderr
    assert "RECONCILE_ALLOW_INSECURE_HTTP=1" in done.stderr
    assert "Traceback" not in done.stderr and TOKEN not in done.stdout + done.stderr
    assert listener.received == []  # not one connection


@pytest.mark.integration  # starts a process of its own
@pytest.mark.parametrize("allow", [("--allow-insecure-http",), ()])
def test_an_explicit_allow_lets_it_through(repo: Path, listener: Listener,
                                           allow: tuple[str, ...]) -> None:
    extra = {} if allow else {"RECONCILE_ALLOW_INSECURE_HTTP": "1"}
    done = run(repo, "plan", "--control-plane", listener.url, *allow, **extra)
    assert done.returncode != Exit.OK  # the listener is no control plane
    assert "clear text" not in done.stderr
    assert any(TOKEN.encode() in chunk for chunk in listener.received), listener.received


@pytest.mark.integration  # starts a process of its own
def test_config_names_the_refusal_and_the_allow(repo: Path, listener: Listener) -> None:
    done = run(repo, "config", RECONCILE_CONTROL_PLANE_URL=listener.url)
    assert done.returncode == Exit.ERROR
    assert "plain http" in done.stdout and "loopback only" in done.stdout
    assert "clear text" in done.stdout.split("problems", 1)[1]
    done = run(repo, "config", RECONCILE_CONTROL_PLANE_URL=listener.url,
               RECONCILE_ALLOW_INSECURE_HTTP="yes")
    assert "allowed beyond loopback" in done.stdout
    assert "env RECONCILE_ALLOW_INSECURE_HTTP" in done.stdout
    assert listener.received == []
