"""`sandbox down` signals only the processes the sandbox started (their start time is
recorded and checked: a pid reused by another process is left alone), and `sandbox
stop|start COMPONENT` takes one component down and back up, for outage rehearsals --
the real CLI on a detached sandbox, and the real control plane answering again after."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from reconciler.sandbox import launcher

PROJECT = Path(__file__).resolve().parents[2]


def run(state: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reconciler", "sandbox", "--state",
                           str(state), *argv], capture_output=True, text=True, timeout=60,
                          cwd=PROJECT)


def serves(sb: launcher.Sandbox) -> bool:
    try:
        httpx.get(sb.control_plane_url + "/", timeout=2,
                  verify=ssl.create_default_context(cafile=str(sb.ca_file)))
    except httpx.HTTPError:
        return False
    return True


@pytest.mark.integration  # starts a process of its own
def test_a_pid_reused_by_another_process_is_never_signalled(tmp_path: Path) -> None:
    state = tmp_path / "sb"
    up = run(state, "up", "--detach", "--port", "0", "--mesh-port", "0", "--clusters", "1")
    assert up.returncode == 0, up.stderr
    sb = launcher.attach(state)
    assert all(sb._identities.get(c) for c in sb._pids), "start times recorded"
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    real_sn1, real_identity = sb._pids["sn1"], sb._identities["sn1"]
    try:
        # The descriptor now says sn1's pid is the stranger's (as after a pid reuse).
        descriptor = json.loads((state / launcher.DESCRIPTOR).read_text())
        descriptor["pids"]["sn1"] = stranger.pid
        (state / launcher.DESCRIPTOR).write_text(json.dumps(descriptor))
        assert not launcher.attach(state).owns("sn1")[0]
        down = run(state, "down")
        assert down.returncode == 0, down.stderr
        assert f"not signalled: sn1: pid {stranger.pid} is another process now" in down.stderr
        time.sleep(0.3)
        assert stranger.poll() is None  # alive: never signalled
        assert launcher.process_identity(sb._pids["control-plane"]) is None
    finally:
        stranger.kill()
        stranger.wait()
        if launcher.process_identity(real_sn1) == real_identity:  # the one the test hid
            os.kill(real_sn1, signal.SIGTERM)


@pytest.mark.integration  # starts a process of its own
def test_stop_and_start_one_component_for_an_outage_rehearsal(tmp_path: Path) -> None:
    state = tmp_path / "sb"
    up = run(state, "up", "--detach", "--port", "0", "--mesh-port", "0", "--clusters", "1")
    assert up.returncode == 0, up.stderr
    try:
        sb = launcher.attach(state)
        before = sb.pid("control-plane")
        assert serves(sb)
        stop = run(state, "stop", "control-plane")
        assert stop.returncode == 0, stop.stderr
        assert "stopped control-plane" in stop.stdout
        assert before is not None and launcher.process_identity(before) is None
        assert not serves(sb)
        again = run(state, "stop", "control-plane")
        assert again.returncode == 1 and "not running" in again.stderr
        status = run(state, "status")
        assert status.returncode in (0, 1)  # the clusters still answer for themselves
        start = run(state, "start", "control-plane")
        assert start.returncode == 0, start.stderr
        sb = launcher.attach(state)
        after = sb.pid("control-plane")
        assert after is not None and after != before and sb.owns("control-plane")[0]
        assert serves(sb)  # same port, same CA: clients need no change
        twice = run(state, "start", "control-plane")
        assert twice.returncode == 1 and "already running" in twice.stderr
        unknown = run(state, "stop", "sn9")
        assert unknown.returncode == 1 and "unknown component 'sn9'" in unknown.stderr
    finally:
        down = run(state, "down")
    assert down.returncode == 0
    assert all(launcher.process_identity(p) is None
               for p in launcher.attach(state)._pids.values())


def test_stop_and_start_take_a_named_sandbox_as_documented(tmp_path: Path) -> None:
    """`sandbox stop --name staging sn1` (the name after ACTION, as every other action
    takes it) stops staging's component, not one of a sandbox in STATE itself."""
    state = tmp_path / "sb"
    up = run(state, "up", "--name", "staging", "--detach", "--port", "0", "--mesh-port", "0",
             "--clusters", "1")
    assert up.returncode == 0, up.stderr
    sb = launcher.attach(state / "staging")
    try:
        stopped = run(state, "stop", "--name", "staging", "control-plane")
        assert stopped.returncode == 0, stopped.stderr
        assert not serves(sb)
        started = run(state, "start", "--name", "staging", "control-plane")
        assert started.returncode == 0, started.stderr
        assert serves(launcher.attach(state / "staging"))
        bad = run(state, "stop", "--name", "Staging!", "sn1")
        assert bad.returncode == 64 and "--name" in bad.stderr
    finally:
        assert run(state, "down", "--name", "staging").returncode == 0
