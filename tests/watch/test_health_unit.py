"""The watcher's log lines, readiness and HTTP endpoints, in process (no sandbox)."""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry

from reconciler.core.planning import Provenance, plan
from reconciler.core.plans import Plan
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError
from reconciler.shell.controlplane import ControlPlaneError
from reconciler.shell.endpoints import ConfigError
from reconciler.shell.health import Readiness, serve
from reconciler.shell.watching import Log, Metrics, error_kind, rfc3339
from tests.plan import builders as b


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_rfc3339_is_utc_with_milliseconds() -> None:
    assert rfc3339(1796071266.1234) == "2026-11-30T20:41:06.123Z"
    assert rfc3339(0) == "1970-01-01T00:00:00.000Z"


def test_json_lines_have_ts_level_and_fields() -> None:
    out = io.StringIO()
    log = Log("json", out, clock=lambda: 1796071266.5)
    log.event("plan", "resync: go", verdict="go")
    log.event("live-unreadable", "503")
    first, second = (json.loads(x) for x in out.getvalue().splitlines())
    assert first == {"ts": "2026-11-30T20:41:06.500Z", "level": "info", "event": "plan",
                     "message": "resync: go", "verdict": "go"}
    assert second["level"] == "error"


def test_a_field_cannot_overwrite_ts_or_level() -> None:
    out = io.StringIO()
    Log("json", out, clock=lambda: 0.0).event("plan", "m", ts=5, level_hint="x")
    assert json.loads(out.getvalue())["ts"] == "1970-01-01T00:00:00.000Z"


@pytest.mark.parametrize(("level", "shown"), [
    ("debug", ["apply-progress", "plan", "invalid", "apply-failed"]),
    ("info", ["plan", "invalid", "apply-failed"]),
    ("warning", ["invalid", "apply-failed"]),
    ("error", ["apply-failed"]),
])
def test_log_level_filters(level: str, shown: list[str]) -> None:
    out = io.StringIO()
    log = Log("json", out, level=level)
    log.event("apply-progress", "gate 1/3", level="debug")
    log.event("plan", "go")
    log.event("invalid", "1 problem")
    log.event("apply-failed", "not converged")
    assert [json.loads(x)["event"] for x in out.getvalue().splitlines()] == shown


def test_text_lines_carry_timestamp_and_level() -> None:
    out = io.StringIO()
    Log("text", out, clock=lambda: 0.0).event("invalid", "2 problem(s)", lines=["a", "b"])
    assert out.getvalue() == ("1970-01-01T00:00:00.000Z warning invalid: 2 problem(s)\n"
                              "    a\n    b\n")


def test_an_unknown_level_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown log level"):
        Log(level="verbose")


def test_readiness_needs_one_success_in_the_last_window() -> None:
    ready = Readiness(window=2)
    assert ready.state() == (False, "no observation of the live side yet")
    ready.succeeded()
    assert ready.state() == (True, "ready")
    ready.failed("control_plane: HTTP 503")
    assert ready.state()[0] is True  # one of the last two succeeded
    ready.failed("control_plane: HTTP 503")
    ok, reason = ready.state()
    assert not ok and reason.startswith("2 observation(s) of the live side failed in a row")
    assert reason.endswith("control_plane: HTTP 503")
    ready.succeeded()
    assert ready.state() == (True, "ready")


def test_error_kinds_come_from_the_code_and_the_cause() -> None:
    def caused(cause: Exception, code: Exit = Exit.ERROR) -> EngineError:
        try:
            raise EngineError("x", code) from cause
        except EngineError as exc:
            return exc
    assert error_kind(caused(ControlPlaneError("503"))) == "control_plane"
    assert error_kind(caused(ConfigError("bad"))) == "config"
    assert error_kind(EngineError("refusing", Exit.REFUSED_EVIDENCE)) == "apply_refused"
    assert error_kind(EngineError("?")) == "other"


def test_endpoints_serve_health_readiness_and_metrics() -> None:
    readiness = Readiness()
    endpoint = serve("127.0.0.1", 0, CollectorRegistry(), readiness)
    port = endpoint.server.server_address[1]
    try:
        assert endpoint.address == f"127.0.0.1:{port}"
        assert get(port, "/healthz") == (200, "ok\n")
        assert get(port, "/readyz") == (503, "no observation of the live side yet\n")
        readiness.succeeded()
        assert get(port, "/readyz") == (200, "ready\n")
        assert get(port, "/metrics")[0] == 200
        assert get(port, "/other")[0] == 404
    finally:
        endpoint.close()


def test_metrics_verdict_goes_unknown_when_the_live_side_is_unreadable() -> None:
    metrics = Metrics(0)
    try:
        port = metrics.endpoint.server.server_address[1]
        body = get(port, "/metrics")[1]
        assert 'reconcile_plan_verdict{verdict="unknown"} 1.0' in body
        assert "reconcile_last_successful_observation_age_seconds +Inf" in body
        assert 'reconcile_errors_total{kind="control_plane"} 0.0' in body
        assert 'reconcile_applies_total{outcome="refused"} 0.0' in body
        assert 'reconcile_gate_results_total{result="unproven"} 0.0' in body
        metrics.unreadable("control_plane")
        body = get(port, "/metrics")[1]
        assert 'reconcile_errors_total{kind="control_plane"} 1.0' in body
        assert "reconcile_ready 0.0" in body
    finally:
        metrics.close()


def test_unknown_is_not_zero_the_plan_gauges_are_nan_while_the_live_side_is_unread() -> None:
    metrics = Metrics(0)
    try:
        port = metrics.endpoint.server.server_address[1]
        body = get(port, "/metrics")[1]
        # Before the first read: unknown, not 0.
        assert "reconcile_services_not_proven_converged NaN" in body
        assert "reconcile_live_read_ok 0.0" in body
        plan = go_plan_with_unproven()
        metrics.observed()
        metrics.observe_plan(plan, fresh=True)
        body = get(port, "/metrics")[1]
        assert f"reconcile_services_not_proven_converged {float(len(plan.unconverged()))}" \
            in body
        assert "reconcile_live_read_ok 1.0" in body
        assert "reconcile_plan_changes{" in body
        metrics.unreadable("control_plane")
        body = get(port, "/metrics")[1]
        assert "reconcile_services_not_proven_converged NaN" in body
        for name in ("reconcile_plan_drift", "reconcile_plan_blockers",
                     "reconcile_silent_clusters"):
            assert f"{name} NaN" in body
        assert "reconcile_plan_changes{" not in body  # no stale sample at all
        assert "reconcile_live_read_ok 0.0" in body
        metrics.observed()
        metrics.observe_plan(plan, fresh=True)
        body = get(port, "/metrics")[1]
        assert "reconcile_services_not_proven_converged NaN" not in body
        assert "reconcile_live_read_ok 1.0" in body
    finally:
        metrics.close()


def go_plan_with_unproven() -> Plan:
    made = plan(b.reference_desired(), b.reference_live(), Provenance(commit="a" * 40))
    assert made.unconverged()  # the reference plan changes services not yet proven
    return made
