"""`make demo` on a shared host: DEMO_PORT / DEMO_MESH_PORT choose the ports (0: free
ones), and with none given a taken default port moves the demo's sandbox to free ports
instead of failing -- a real sandbox, started as the demo starts it."""

from __future__ import annotations

import errno
import socket
from pathlib import Path

import pytest

from reconciler import demo
from reconciler.sandbox import launcher


def test_a_taken_default_port_moves_the_demo_to_free_ports(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo, "STATE", tmp_path / "sandbox")
    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", launcher.DEFAULT_PORT))
    except OSError as exc:  # someone's sandbox or demo holds it already: same situation
        assert exc.errno == errno.EADDRINUSE
        holder.close()
        holder = None  # type: ignore[assignment]
    else:
        holder.listen(1)
    try:
        sandbox = demo._start(None, None)
        try:
            assert sandbox.control_plane_port != launcher.DEFAULT_PORT
        finally:
            sandbox.stop()
    finally:
        if holder is not None:
            holder.close()


def test_demo_port_is_used_as_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo, "STATE", tmp_path / "sandbox")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = int(probe.getsockname()[1])
    monkeypatch.setenv("DEMO_PORT", str(free))
    monkeypatch.setenv("DEMO_MESH_PORT", "0")
    sandbox = demo._start(demo._port("DEMO_PORT"), demo._port("DEMO_MESH_PORT"))
    try:
        assert sandbox.control_plane_port == free
        assert sandbox.control_plane_url == f"https://127.0.0.1:{free}"
    finally:
        sandbox.stop()
    monkeypatch.setenv("DEMO_PORT", "eighteen")
    with pytest.raises(SystemExit, match="DEMO_PORT='eighteen' is not a port"):
        demo._port("DEMO_PORT")
