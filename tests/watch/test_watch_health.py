"""`reconcile watch` as a daemon an operator can trust: /healthz, /readyz and the metrics
follow the live side; log lines carry RFC 3339 timestamps and levels; `--only` limits it.

The real watcher process on a temporary git repo against the real sandbox, with the
control plane switched to HTTP 503 (the sandbox's `5xx` fault) and back.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from reconciler.sandbox.launcher import CONTROL_PLANE, Sandbox
from tests.e2e_repo import PROJECT, Repo
from tests.watch.test_health_unit import get  # the endpoints read as the unit tests read them
from tests.watch.test_watch_e2e import is_plan, watching
from tests.watch.test_watch_proof import free_port

pytestmark = pytest.mark.integration

RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def metrics(port: int) -> dict[str, float]:
    _, body = get(port, "/metrics")
    values = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


class Prober:
    """Polls /healthz every 50 ms in the background; every status it saw."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.statuses: list[int] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            self.statuses.append(get(self.port, "/healthz")[0])
            time.sleep(0.05)

    def close(self) -> list[int]:
        self.stop.set()
        self.thread.join(timeout=5)
        return self.statuses


def wait_until(check: Any, timeout: float, what: str) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if check():
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(f"not {what} within {timeout}s")


def test_readyz_turns_unready_within_two_resyncs_and_back_with_the_metrics(
        repo: Repo, sandbox: Sandbox) -> None:
    port = free_port()
    with watching(repo, "--resync", "1", "--metrics-port", str(port)) as w:
        start = w.wait_for(lambda e: e["event"] == "start")
        assert start["metrics"] == f"127.0.0.1:{port}"
        w.wait_for(is_plan)
        probe = Prober(port)
        try:
            assert get(port, "/readyz") == (200, "ready\n")
            m = metrics(port)
            assert m['reconcile_plan_verdict{verdict="go"}'] == 1
            assert m['reconcile_plan_verdict{verdict="unknown"}'] == 0
            assert m["reconcile_ready"] == 1
            assert m["reconcile_last_successful_observation_age_seconds"] < 5
            assert m['reconcile_errors_total{kind="control_plane"}'] == 0
            answered = sum(v for k, v in m.items() if k.startswith("reconcile_observations_total")
                           and 'outcome="answered"' in k)
            assert answered >= 3 * 4  # three clusters, four services, at least one resync
            unproven = m["reconcile_services_not_proven_converged"]
            assert unproven >= 1 and m["reconcile_live_read_ok"] == 1  # changes pending

            sandbox.fault(CONTROL_PLANE, "5xx", times=1_000_000)
            failures = 0
            # The first failed observation leaves it ready (one of the last two succeeded)...
            first = w.wait_for(lambda e: e["event"] == "live-unreadable", timeout=20)
            assert first["level"] == "error" and first["kind"] == "control_plane"
            failures += 1
            # ... the second makes it unready: within two resyncs of the failure.
            unready = w.wait_for(lambda e: e["event"] in ("unready", "live-unreadable"),
                                 timeout=20)
            if unready["event"] == "live-unreadable":
                failures += 1
                unready = w.wait_for(lambda e: e["event"] == "unready", timeout=5)
            assert failures == 2, "unready before the second failed resync, or after it"
            assert unready["level"] == "warning"
            status, reason = get(port, "/readyz")
            assert status == 503
            assert "2 observation(s) of the live side failed" in reason
            assert "control_plane" in reason and "503" in reason
            m = metrics(port)
            assert m['reconcile_plan_verdict{verdict="unknown"}'] == 1
            assert m['reconcile_plan_verdict{verdict="go"}'] == 0
            assert m["reconcile_ready"] == 0
            assert m['reconcile_errors_total{kind="control_plane"}'] >= 2
            assert m["reconcile_last_successful_observation_age_seconds"] >= 1
            # Unknown is not the last number: an alert on it alone would go quiet now.
            assert math.isnan(m["reconcile_services_not_proven_converged"])
            assert math.isnan(m["reconcile_plan_drift"])
            assert not [k for k in m if k.startswith("reconcile_plan_changes")]
            assert m["reconcile_live_read_ok"] == 0

            sandbox.fault(CONTROL_PLANE, "5xx", on=False)
            ready = w.wait_for(lambda e: e["event"] == "ready", timeout=20)
            assert ready["level"] == "info"
            assert get(port, "/readyz") == (200, "ready\n")
            wait_until(lambda: metrics(port)['reconcile_plan_verdict{verdict="go"}'] == 1,
                       10, "go again")
            m = metrics(port)
            assert m['reconcile_plan_verdict{verdict="unknown"}'] == 0
            assert m["reconcile_ready"] == 1
            assert m["reconcile_last_successful_observation_age_seconds"] < 5
            assert m["reconcile_live_read_ok"] == 1
            assert m["reconcile_services_not_proven_converged"] == unproven
        finally:
            statuses = probe.close()
    assert statuses and set(statuses) == {200}, "/healthz must answer 200 throughout"
    for event in w.seen:
        assert RFC3339_UTC.match(event["ts"]), event
        assert event["level"] in ("debug", "info", "warning", "error"), event


def test_readyz_is_unready_until_the_first_observation(repo: Repo, sandbox: Sandbox) -> None:
    sandbox.fault(CONTROL_PLANE, "5xx", times=1_000_000)
    port = free_port()
    with watching(repo, "--resync", "1", "--metrics-port", str(port)) as w:
        w.wait_for(lambda e: e["event"] == "start")
        status, reason = get(port, "/readyz")
        assert status == 503 and reason
        assert get(port, "/healthz") == (200, "ok\n")
        w.wait_for(lambda e: e["event"] == "live-unreadable")
        assert get(port, "/readyz")[0] == 503
        assert metrics(port)['reconcile_plan_verdict{verdict="unknown"}'] == 1
        assert get(port, "/nope")[0] == 404


def test_log_level_warning_hides_info(repo: Repo, sandbox: Sandbox) -> None:
    sandbox.fault(CONTROL_PLANE, "5xx", times=1_000_000)
    with watching(repo, "--resync", "1", "--log-level", "warning") as w:
        w.wait_for(lambda e: e["event"] == "live-unreadable", timeout=20)
        w.wait_for(lambda e: e["event"] == "unready", timeout=20)
        w.drain(1.0)
    assert w.seen
    assert {e["level"] for e in w.seen} <= {"warning", "error"}, w.seen
    assert not [e for e in w.seen if e["event"] in ("start", "plan", "waiting")]


def test_text_log_lines_carry_the_timestamp_and_level(repo: Repo) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "reconciler", "watch", str(repo.path), "--resync", "600",
         "--log-level", "debug"], cwd=PROJECT, env=repo.env(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z info start: watching ", first), \
        first


def test_only_limits_the_plans_to_the_named_services(repo: Repo) -> None:
    with watching(repo, "--resync", "600", "--only", "checkout") as w:
        start = w.wait_for(lambda e: e["event"] == "start")
        assert "only checkout" in start["message"]
        plan = w.wait_for(is_plan)
        changes = [x for x in plan["lines"] if not x.startswith(("+ blocker", "+ drift"))]
        assert changes and all("checkout" in x for x in changes), plan["lines"]


def test_only_naming_no_service_is_a_usage_error(repo: Repo) -> None:
    result = repo.run("watch", str(repo.path), "--only", "checkout,nosuch", timeout=60)
    assert result.code == 64, result.out + result.err
    assert "nosuch" in result.err and "checkout" in result.err
    empty = repo.run("watch", str(repo.path), "--only", "checkout,,search", timeout=60)
    assert empty.code == 64, empty.out + empty.err
