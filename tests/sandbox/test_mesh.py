"""The clusters over real TLS: naming, per-cluster auth, status, async convergence."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest

from reconciler.sandbox import rollouts
from reconciler.sandbox.launcher import Sandbox
from tests.sandbox.wire import ControlPlaneClient, MeshClient, wait_for

pytestmark = pytest.mark.integration




def test_each_address_names_its_cluster(mesh: MeshClient, sandbox: Sandbox) -> None:
    assert sandbox.resolve_arg() == (
        f"gateway.sandbox.test:{sandbox.mesh_port}:127.0.0.2,127.0.0.3,127.0.0.4")
    for cluster_id in sandbox.clusters:
        body = mesh.health(cluster_id).json()
        assert body["clusterId"] == cluster_id
        assert {"gateway", "validator", "host", "lastChecked"} <= body.keys()


def test_the_certificate_is_for_the_gateway_name_only(sandbox: Sandbox) -> None:
    import ssl

    ctx = ssl.create_default_context(cafile=str(sandbox.ca_file))
    with httpx.Client(verify=ctx) as client, pytest.raises(httpx.ConnectError):
        client.get(f"https://127.0.0.2:{sandbox.mesh_port}/api/v3/cluster/health")


def test_tokens_are_per_cluster_and_challenges_single_use(mesh: MeshClient) -> None:
    token = mesh.login("sn1")
    assert mesh.status("sn1", "checkout", token).status_code == 200
    assert mesh.status("sn2", "checkout", token).status_code == 401
    challenge = mesh.challenge("sn2")
    assert mesh.verify("sn2", challenge).status_code == 200
    assert mesh.verify("sn2", challenge).status_code == 401
    bad = mesh.challenge("sn2")
    assert mesh.verify("sn2", bad, signature="00" * 64).status_code == 401
    other = mesh.challenge("sn3")
    assert mesh.verify("sn2", other).status_code == 401


def test_tokens_expire(sandbox_factory: Callable[..., Sandbox]) -> None:
    sb = sandbox_factory(token_ttl_ms=300, clusters=1)
    mesh = MeshClient(sb)
    token = mesh.login("sn1")
    assert mesh.status("sn1", "checkout", token).status_code == 200
    time.sleep(0.4)
    assert mesh.status("sn1", "checkout", token).status_code == 401
    mesh.close()


def test_status_needs_a_bearer_and_a_record(mesh: MeshClient) -> None:
    response = mesh.request("GET", "sn1", "/host/api/v3/baas/deployment/apps/checkout/status")
    assert response.status_code == 401
    assert mesh.status("sn1", "nope").status_code == 404
    body = mesh.status("sn1", "checkout").json()
    runtime = body["runtime"]
    assert body["appId"] == "checkout" and body["state"] == "ACTIVE"
    digest = rollouts.seeded_digest("checkout", "v2.3.0")
    assert runtime["image"] == f"registry.sandbox.test/shop/checkout@{digest}"
    assert runtime["resolvedDigest"] == digest
    assert runtime["runtimeState"] == "RUNNING" and runtime["lastError"] is None
    assert runtime["rolloutId"] == "rollout-checkout-3" and runtime["rolloutGeneration"] == 3
    assert runtime["replicaCounts"] == {"required": 2, "observed": 2, "healthy": 2,
                                        "verified": 2, "failed": 0}
    assert runtime["egress"] == [{"host": "api.stripe.com", "port": 443}]
    assert runtime["egressDropped"] == []


def test_wrong_host_header_is_refused(mesh: MeshClient, sandbox: Sandbox) -> None:
    response = mesh.http.get(mesh.url("sn1", "/api/v3/cluster/health"),
                             headers={"Host": "other.example"},
                             extensions={"sni_hostname": sandbox.gateway})
    assert response.status_code == 421


def test_promotion_converges_asynchronously_per_cluster(
        sandbox_factory: Callable[..., Sandbox]) -> None:
    sb = sandbox_factory(converge_delay_ms={"sn1": 100, "sn2": 100, "sn3": 1200})
    cp, mesh = ControlPlaneClient(sb), MeshClient(sb)
    release = cp.release_by_tag("svc-checkout", "v2.4.0")
    new = release["data"]["registryRootDigest"]
    reply = cp.promote("svc-checkout", release["id"])
    assert reply["response"]["service"]["data"]["imageRolloutStatus"]["status"] == "pending"
    tokens = {c: mesh.login(c) for c in sb.clusters}

    def digest(cluster_id: str) -> str:
        return str(mesh.status(cluster_id, "checkout", tokens[cluster_id])
                   .json()["runtime"]["resolvedDigest"])

    wait_for(lambda: digest("sn1") == new and digest("sn2") == new)
    assert digest("sn3") != new
    status = cp.service("svc-checkout")["data"]["imageRolloutStatus"]
    assert status["status"] == "deploying"
    wait_for(lambda: digest("sn3") == new)
    wait_for(lambda: cp.service("svc-checkout")["data"]["imageRolloutStatus"]["status"]
             == "succeeded")
    status = cp.service("svc-checkout")["data"]["imageRolloutStatus"]
    assert rollouts.validate_image_rollout_status(status) == []
    assert status["expectedDigest"] == new and status["verifiedReplicaCount"] == 6
    runtime = mesh.status("sn3", "checkout", tokens["sn3"]).json()["runtime"]
    assert runtime["rolloutGeneration"] == 4
    cp.close()
    mesh.close()


def test_rollback_converges_to_rolled_back(sandbox: Sandbox, mesh: MeshClient) -> None:
    cp = ControlPlaneClient(sandbox)
    plan = cp.service("svc-catalog")["data"]["imageDeployment"]
    old = cp.release_by_tag("svc-catalog", "v5.0.1")
    cp.ok("rollbackServiceImageRelease", serviceId="svc-catalog", releaseId=old["id"],
          idempotencyKey="rb", expectedCurrentRolloutId=plan["rolloutId"],
          expectedRolloutGeneration=plan["rolloutGeneration"])
    statuses = sandbox.wait_settled()
    assert statuses["svc-catalog"]["status"] == "rolled-back"
    for cluster_id in sandbox.clusters:
        runtime = mesh.status(cluster_id, "catalog").json()["runtime"]
        assert runtime["resolvedDigest"] == old["data"]["registryRootDigest"]
    cp.close()


def test_egress_filtered_by_the_operator_allow_list(sandbox: Sandbox, mesh: MeshClient) -> None:
    cp = ControlPlaneClient(sandbox)
    sandbox.set_egress_allowlist("sn2", ["api.stripe.com:443"])
    wanted = [{"host": "api.stripe.com", "port": 443}, {"host": "hooks.slack.com", "port": 443}]
    cp.ok("setServiceEgress", serviceId="svc-checkout", egress=wanted, idempotencyKey="e",
          expectedEgressRevision=1)

    def egress(cluster_id: str) -> tuple[list[object], list[object]]:
        runtime = mesh.status(cluster_id, "checkout").json()["runtime"]
        return runtime["egress"], runtime["egressDropped"]

    wait_for(lambda: egress("sn1")[0] == wanted and len(egress("sn2")[1]) == 1)
    assert egress("sn2") == ([wanted[0]], [wanted[1]])
    sandbox.set_egress_allowlist("sn2", None)
    wait_for(lambda: egress("sn2") == (wanted, []))
    cp.close()
