"""Processes: kill -9 and restart lose nothing acknowledged; nothing leaks; the CLI works."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from reconciler.sandbox import launcher
from reconciler.sandbox.launcher import Sandbox
from tests.sandbox.wire import ControlPlaneClient, MeshClient, sandbox_cli, wait_for

pytestmark = pytest.mark.integration



def test_acknowledged_promotion_survives_kill_9(sandbox: Sandbox) -> None:
    cp = ControlPlaneClient(sandbox)
    release = cp.release_by_tag("svc-checkout", "v2.4.0")
    acknowledged = cp.promote("svc-checkout", release["id"], key="durable-1")
    plan = acknowledged["response"]["service"]["data"]["imageDeployment"]
    old_pid = sandbox.pid("control-plane")
    sandbox.kill("control-plane")
    cp.close()
    sandbox.restart("control-plane")
    assert sandbox.pid("control-plane") != old_pid
    cp = ControlPlaneClient(sandbox)
    assert cp.service("svc-checkout")["data"]["imageDeployment"] == plan
    replay = cp.promote("svc-checkout", release["id"], key="durable-1", generation=3)
    assert replay["response"]["service"]["data"]["imageDeployment"] == plan
    statuses = sandbox.wait_settled()
    assert statuses["svc-checkout"]["status"] == "succeeded"
    cp.close()


def test_a_killed_cluster_keeps_its_record_and_catches_up(sandbox: Sandbox) -> None:
    cp, mesh = ControlPlaneClient(sandbox), MeshClient(sandbox)
    sandbox.kill("sn2")
    release = cp.release_by_tag("svc-checkout", "v2.4.0")
    cp.promote("svc-checkout", release["id"])
    time.sleep(0.6)
    assert sandbox.rollout_statuses()["svc-checkout"]["status"] == "deploying"
    sandbox.restart("sn2")
    status = sandbox.wait_settled()["svc-checkout"]
    assert status["status"] == "succeeded"
    runtime = mesh.status("sn2", "checkout").json()["runtime"]
    assert runtime["resolvedDigest"] == release["data"]["registryRootDigest"]
    cp.close()
    mesh.close()


def test_stop_leaves_no_process(sandbox_factory: Callable[..., Sandbox]) -> None:
    sb = sandbox_factory(clusters=2)
    pids = [sb.pid(c) for c in ("control-plane", "sn1", "sn2")]
    sb.stop()
    for pid in pids:
        assert pid is not None and not launcher.alive(pid)


def test_children_die_with_their_parent(tmp_path: Path) -> None:
    script = (
        "import json, sys, time\n"
        "from pathlib import Path\n"
        "from reconciler.sandbox import launcher\n"
        f"sb = launcher.start(Path({str(tmp_path / 'orphan')!r}), clusters=1)\n"
        "print(json.dumps([sb.pid('control-plane'), sb.pid('sn1')]), flush=True)\n"
        "time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                              cwd=Path(__file__).resolve().parents[2])
    assert parent.stdout is not None
    pids = json.loads(parent.stdout.readline())
    parent.kill()
    parent.wait()
    wait_for(lambda: not any(launcher.alive(p) for p in pids), timeout=5)


def test_start_finishes(sandbox_factory: Callable[..., Sandbox]) -> None:
    """A start returns once every process answers, and never hangs. How fast it is
    (about 0.3 s idle) is measured by benchmarks/sandbox_start_bench.py, beside the
    load: a wall-clock bound here failed on a machine loaded by other work. This bound
    only catches a start that waits for something that never comes."""
    started = time.monotonic()
    sb = sandbox_factory()
    assert time.monotonic() - started < 120.0
    assert all(launcher.alive(sb.pid(name)) for name in ("control-plane", *sb.clusters))


def test_cli_up_status_fault_push_down(tmp_path: Path) -> None:
    state = tmp_path / "cli"
    run = sandbox_cli(state, timeout=30)

    up = run("up", "--detach", "--port", "0", "--mesh-port", "0", "--clusters", "2")
    assert up.returncode == 0, up.stderr
    assert "export RECONCILE_RESOLVE=gateway.sandbox.test:" in up.stdout
    assert "export RECONCILE_CA_FILE=" in up.stdout
    token = (state / "token").read_text().strip()
    assert token not in up.stdout
    sb = launcher.attach(state)
    try:
        assert run("push", "checkout", "v9.9.9").stdout.startswith("checkout:v9.9.9 -> sha256:")
        fault = run("fault", "sn1", "dns-missing")
        assert fault.returncode == 0
        assert "127.0.0.2" not in sb.resolve_arg()
        assert run("fault", "sn1", "nope").returncode == 64
        status = run("status")
        assert status.returncode == 0 and "checkout" in status.stdout and "sn2" in status.stdout
        seed = tmp_path / "seed.json"
        seed.write_text(json.dumps({"services": [
            {"id": "svc-one", "name": "one", "releases": [{"tag": "v1", "accepted": True}],
             "current": "v1", "generation": 1}]}))
        assert run("seed", str(seed)).returncode == 0
        cp = ControlPlaneClient(sb)
        assert [s["id"] for s in cp.ok("getServices")["services"]] == ["svc-one"]
        cp.close()
    finally:
        down = run("down")
    assert down.returncode == 0
    assert not any(launcher.alive(p) for p in sb._pids.values())
    assert os.path.exists(state / "control-plane.sqlite3")
