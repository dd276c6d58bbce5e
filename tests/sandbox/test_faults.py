"""Every fault, switched at run time (no restart), observed on the wire."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import httpx
import pytest

from reconciler.sandbox.launcher import Sandbox
from tests.sandbox.wire import ControlPlaneClient, MeshClient, wait_for

pytestmark = pytest.mark.integration





def timed(call: Callable[[], object]) -> float:
    start = time.monotonic()
    call()
    return time.monotonic() - start


# -- cluster: transport ------------------------------------------------------------------------


def test_latency_and_slow_delay_every_reply(sandbox: Sandbox, mesh: MeshClient) -> None:
    pids = {c: sandbox.pid(c) for c in sandbox.clusters}
    sandbox.fault("sn1", "latency", ms=300)
    assert timed(lambda: mesh.health("sn1")) >= 0.3
    assert timed(lambda: mesh.health("sn2")) < 0.3
    sandbox.fault("sn1", "latency", on=False)
    sandbox.fault("sn1", "slow", ms=400)
    assert timed(lambda: mesh.health("sn1")) >= 0.4
    sandbox.fault("sn1", "slow", on=False)
    assert timed(lambda: mesh.health("sn1")) < 0.3
    assert pids == {c: sandbox.pid(c) for c in sandbox.clusters}


def test_down_refuses_connections_then_comes_back(sandbox: Sandbox, mesh: MeshClient) -> None:
    sandbox.fault("sn2", "down")
    time.sleep(0.3)
    fresh = MeshClient(sandbox)
    with pytest.raises(httpx.ConnectError):
        fresh.health("sn2")
    assert fresh.health("sn1").status_code == 200
    sandbox.fault("sn2", "down", on=False)
    wait_for(lambda: _answers(fresh, "sn2"))
    fresh.close()


def _answers(mesh: MeshClient, cluster_id: str) -> bool:
    try:
        return mesh.health(cluster_id).status_code == 200
    except httpx.HTTPError:
        return False


def test_blackhole_accepts_and_never_answers(sandbox: Sandbox) -> None:
    sandbox.fault("sn3", "blackhole")
    mesh = MeshClient(sandbox, timeout=0.5)
    with pytest.raises(httpx.TimeoutException):
        mesh.health("sn3")
    sandbox.fault("sn3", "blackhole", on=False)
    wait_for(lambda: _answers(mesh, "sn3"))
    mesh.close()


def test_trickle_sends_one_byte_at_a_time(sandbox: Sandbox, mesh: MeshClient) -> None:
    size = len(mesh.health("sn1").content)
    sandbox.fault("sn1", "trickle", ms=10)
    chunks: list[bytes] = []
    with mesh.http.stream("GET", mesh.url("sn1", "/api/v3/cluster/health"),
                          headers={"Host": sandbox.gateway},
                          extensions={"sni_hostname": sandbox.gateway}) as response:
        chunks.extend(response.iter_raw())
    assert len(b"".join(chunks)) >= size - 5
    assert len(chunks) > size // 4  # arrived in many small reads, not one


# -- cluster: content ---------------------------------------------------------------------------


def test_garbage_and_truncated_json(sandbox: Sandbox, mesh: MeshClient) -> None:
    sandbox.fault("sn1", "garbage")
    response = mesh.status("sn1", "checkout")
    assert response.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        json.loads(response.content)
    sandbox.fault("sn1", "garbage", on=False)
    sandbox.fault("sn1", "truncated")
    response = mesh.status("sn1", "checkout")
    assert response.content.startswith(b'{"appId"')
    with pytest.raises(json.JSONDecodeError):
        json.loads(response.content)


def test_ansi_last_error(sandbox: Sandbox, mesh: MeshClient) -> None:
    sandbox.fault("sn2", "ansi")
    last_error = mesh.status("sn2", "checkout").json()["runtime"]["lastError"]
    assert "\x1b[" in last_error and "\x07" in last_error and "\x00" in last_error


def test_failed_runtime_fails_the_rollout(sandbox: Sandbox, mesh: MeshClient,
                                          cp: ControlPlaneClient) -> None:
    sandbox.fault("sn3", "failed")
    runtime = mesh.status("sn3", "search").json()["runtime"]
    assert runtime["runtimeState"] == "FAILED" and "exited" in runtime["lastError"]
    assert runtime["replicaCounts"]["failed"] == 2
    wait_for(lambda: cp.service("svc-search")["data"]["imageRolloutStatus"]["status"]
             == "failed")


def test_stuck_cluster_keeps_the_previous_digest(sandbox: Sandbox, mesh: MeshClient,
                                                 cp: ControlPlaneClient) -> None:
    old = mesh.status("sn1", "checkout").json()["runtime"]["resolvedDigest"]
    sandbox.fault("sn1", "stuck")
    release = cp.release_by_tag("svc-checkout", "v2.4.0")
    new = release["data"]["registryRootDigest"]
    cp.promote("svc-checkout", release["id"])
    wait_for(lambda: cp.service("svc-checkout")["data"]["imageRolloutStatus"]["status"]
             == "mismatched")
    runtime = mesh.status("sn1", "checkout").json()["runtime"]
    assert runtime["resolvedDigest"] == old and runtime["runtimeState"] == "RUNNING"
    assert "attestation" in runtime["lastError"] and new in runtime["lastError"]
    for cluster_id in ("sn2", "sn3"):
        assert mesh.status(cluster_id, "checkout").json()["runtime"]["resolvedDigest"] == new
    sandbox.fault("sn1", "stuck", on=False)
    wait_for(lambda: cp.service("svc-checkout")["data"]["imageRolloutStatus"]["status"]
             == "succeeded")
    assert mesh.status("sn1", "checkout").json()["runtime"]["resolvedDigest"] == new


def test_reauth_rejects_reused_tokens(sandbox: Sandbox, mesh: MeshClient) -> None:
    sandbox.fault("sn1", "reauth")
    token = mesh.login("sn1")
    assert mesh.status("sn1", "checkout", token).status_code == 200
    assert mesh.status("sn1", "checkout", token).status_code == 401
    assert mesh.status("sn1", "checkout", mesh.login("sn1")).status_code == 200


def test_dns_missing_drops_the_address(sandbox: Sandbox) -> None:
    sandbox.fault("sn2", "dns-missing")
    assert sandbox.resolve_arg().endswith(":127.0.0.2,127.0.0.4")
    assert sandbox.env()["RECONCILE_RESOLVE"] == sandbox.resolve_arg()
    assert "127.0.0.3" not in sandbox.settings_yaml()
    sandbox.fault("sn2", "dns-missing", on=False)
    assert "127.0.0.3" in sandbox.resolve_arg()


def test_cluster_faults_are_audited(sandbox: Sandbox, mesh: MeshClient) -> None:
    mesh.health("sn1")
    sandbox.fault("sn1", "garbage")
    mesh.status("sn1", "checkout")
    # The row is written as the reply goes out, so it may land just after the client
    # has read the reply; wait for it rather than race it.
    wait_for(lambda: any(r["path"].endswith("/checkout/status") and r["result"] == "fault"
                         for r in sandbox.audit("sn1")), timeout=5)
    rows = sandbox.audit("sn1")
    assert any(r["path"] == "/api/v3/cluster/health" and r["status"] == 200 for r in rows)


# -- control plane ---------------------------------------------------------------------------------


def test_control_plane_5xx_counted(sandbox: Sandbox, cp: ControlPlaneClient) -> None:
    identity = cp.identity
    sandbox.fault("control-plane", "5xx", times=2)
    body = cp.envelope("getServices", {"identity": identity})
    assert [cp.post(body).status_code for _ in range(3)] == [503, 503, 200]
    sandbox.fault("control-plane", "5xx", every=2)
    assert [cp.post(body).status_code for _ in range(4)] == [200, 503, 200, 503]
    sandbox.fault("control-plane", "5xx", on=False)
    assert sandbox.audit()[-1]["result"] == "FAULT_5XX"


def test_control_plane_retry_then_answer(sandbox: Sandbox, cp: ControlPlaneClient) -> None:
    identity = cp.identity
    sandbox.fault("control-plane", "retry", times=1, waitForMs=120)
    body = cp.envelope("getServices", {"identity": identity})
    first = cp.post(body).json()
    assert first["retry"]["waitForMs"] == 120 and "error" not in first
    assert first["correlation"] == {**body["correlation"], "phase": "response"}
    second = cp.post(body).json()
    assert "retry" not in second and second["response"]["services"]


def test_control_plane_null_response_does_nothing(sandbox: Sandbox,
                                                  cp: ControlPlaneClient) -> None:
    release = cp.release_by_tag("svc-checkout", "v2.4.0")
    identity = cp.identity
    sandbox.fault("control-plane", "null-response", times=1)
    reply = cp.raw("promoteServiceImageRelease", identity=identity, serviceId="svc-checkout",
                   releaseId=release["id"], idempotencyKey="null-1",
                   expectedRolloutGeneration=3, enableImmutableImage=True)
    assert reply["response"] is None and "error" not in reply
    assert cp.service("svc-checkout")["data"]["imageDeployment"]["rolloutGeneration"] == 3


def test_control_plane_latency_and_slow(sandbox: Sandbox, cp: ControlPlaneClient) -> None:
    identity = cp.identity
    sandbox.fault("control-plane", "latency", ms=250)
    assert timed(lambda: cp.http.head("/typedrequest")) >= 0.25
    sandbox.fault("control-plane", "latency", on=False)
    sandbox.fault("control-plane", "slow", ms=300)
    assert timed(lambda: cp.raw("getServices", identity=identity)) >= 0.3
    sandbox.fault("control-plane", "slow", on=False)
    assert timed(lambda: cp.raw("getServices", identity=identity)) < 0.25


def test_unknown_fault_is_refused(sandbox: Sandbox) -> None:
    from reconciler.sandbox.launcher import SandboxError

    with pytest.raises(SandboxError):
        sandbox.fault("sn1", "5xx")
    with pytest.raises(SandboxError):
        sandbox.fault("sn9", "down")


def test_healthy_since_restarts_after_an_outage_and_while_unhealthy_is_not_said(
        sandbox: Sandbox, mesh: MeshClient) -> None:
    """[ext] runtime.healthySince (docs/extensions.md §6): an outage is a gap nobody
    observed, so after ``down`` lifts the cluster is healthy since it came back; while
    ``failed`` lasts it says no time, and after it, the time it recovered."""
    before = mesh.status("sn2", "checkout").json()["runtime"]["healthySince"]
    other = mesh.status("sn1", "checkout").json()["runtime"]["healthySince"]
    assert isinstance(before, int) and 0 < before <= time.time() * 1000
    sandbox.fault("sn2", "down")
    time.sleep(0.3)
    lifted = int(time.time() * 1000)  # whole milliseconds, as the cluster says them
    sandbox.fault("sn2", "down", on=False)
    fresh = MeshClient(sandbox)
    wait_for(lambda: _answers(fresh, "sn2"))
    back = fresh.status("sn2", "checkout").json()["runtime"]["healthySince"]
    assert back >= lifted > before
    assert fresh.status("sn1", "checkout").json()["runtime"]["healthySince"] == other
    sandbox.fault("sn2", "failed")
    assert "healthySince" not in fresh.status("sn2", "checkout").json()["runtime"]
    healed = time.time() * 1000
    sandbox.fault("sn2", "failed", on=False)
    assert fresh.status("sn2", "checkout").json()["runtime"]["healthySince"] >= healed
    fresh.close()


def test_wait_settled_returns_once_every_cluster_has_acted_on_its_faults(
        sandbox_factory: Callable[..., Sandbox]) -> None:
    # A cluster applies an allow-list (or lifts a stuck route table) a convergence delay
    # after the fault is set: waiting for the rollouts alone returns before it has.
    sandbox = sandbox_factory(converge_delay_ms=1500)
    sandbox.wait_settled()
    sandbox.fault("sn2", "egress-allow", hosts="api.stripe.com")
    sandbox.wait_settled()
    status = sandbox.cluster_status()
    assert any(rec.get("egressDropped") for rec in status["sn2"].values()), status["sn2"]
    assert not any(rec.get("egressDropped") for rec in status["sn1"].values())
    sandbox.fault("sn2", "egress-allow", on=False)
    sandbox.wait_settled()
    assert not any(rec.get("egressDropped") for rec in sandbox.cluster_status()["sn2"].values())
