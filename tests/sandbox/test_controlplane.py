"""The control plane over real HTTPS: every CONTRACT §1 envelope rule and §1.3 rule."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from reconciler.sandbox import rollouts
from reconciler.sandbox.launcher import Sandbox
from tests.sandbox.wire import ControlPlaneClient, correlation

pytestmark = pytest.mark.integration

UNKNOWN = "There is no available method for this call on the server side"



# -- envelope -------------------------------------------------------------------------


def test_head_is_liveness(cp: ControlPlaneClient) -> None:
    assert cp.http.head("/typedrequest").status_code == 200


def test_reply_echoes_the_envelope_with_phase_response(cp: ControlPlaneClient) -> None:
    envelope = cp.envelope("getServices", {"identity": cp.identity})
    reply = cp.post(envelope).json()
    assert reply["correlation"] == {"id": envelope["correlation"]["id"], "phase": "response"}
    assert reply["method"] == "getServices"
    assert "error" not in reply and "retry" not in reply
    assert len(reply["response"]["services"]) == 4


def test_non_json_is_http_400(cp: ControlPlaneClient) -> None:
    response = cp.http.post("/typedrequest", content=b"{not json",
                            headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert response.json() == {"error": "Invalid request"}


def test_missing_correlation_answers_body_null(cp: ControlPlaneClient) -> None:
    response = cp.post({"method": "getServices", "request": {"identity": cp.identity}})
    assert (response.status_code, response.content) == (200, b"null")
    echoed = {**cp.envelope("getServices", {"identity": cp.identity})}
    echoed["correlation"]["phase"] = "response"
    assert cp.post(echoed).content == b"null"


def test_unknown_method_has_the_upstream_text(cp: ControlPlaneClient) -> None:
    reply = cp.post({"method": "nope", "request": {}, "response": None,
                     "correlation": correlation()}).json()
    assert reply["error"] == {"text": UNKNOWN, "data": {}}
    assert reply["correlation"]["phase"] == "response"


# -- identity and authorization -------------------------------------------------------------


def test_token_exchange_gives_an_identity(cp: ControlPlaneClient) -> None:
    identity = cp.identity
    assert identity["role"] == "admin" and identity["type"] == "machine"
    assert identity["expiresAt"] > time.time() * 1000 and identity["jwt"]
    assert {"name", "userId"} <= identity.keys()


def test_bad_token_and_unknown_jwt_are_unauthorized(cp: ControlPlaneClient) -> None:
    bad = cp.raw("getIdentityByToken", token="sbx_nope")
    assert bad["error"]["data"]["code"] == "UNAUTHORIZED"
    forged = {**cp.identity, "jwt": "sbxjwt.forged"}
    reply = cp.raw("getServices", identity=forged)
    assert reply["error"]["data"]["code"] == "UNAUTHORIZED"
    assert cp.raw("getServices")["error"]["data"]["code"] == "UNAUTHORIZED"


def test_expired_identity_is_unauthorized(sandbox_factory: Callable[..., Sandbox]) -> None:
    sb = sandbox_factory(identity_ttl_ms=300, clusters=1)
    client = ControlPlaneClient(sb)
    assert "error" not in client.call("getServices")
    time.sleep(0.4)
    assert client.error("getServices")["data"]["code"] == "UNAUTHORIZED"
    client.close()


def test_non_admin_needs_the_capability(bot: ControlPlaneClient, cp: ControlPlaneClient) -> None:
    # deploy-bot may promote search but not roll it back, and may not write grants or egress.
    search = cp.service("svc-search")["data"]["imageDeployment"]
    err = bot.error("rollbackServiceImageRelease", serviceId="svc-search",
                    releaseId=search["releaseId"], idempotencyKey="k-rb",
                    expectedCurrentRolloutId=search["rolloutId"],
                    expectedRolloutGeneration=search["rolloutGeneration"])
    assert err["data"]["code"] == "FORBIDDEN"
    err = bot.error("configureServiceDeploymentMachineUser", userId="deploy-bot",
                    serviceId="svc-search", capabilities=[])
    assert err["data"]["code"] == "FORBIDDEN"
    err = bot.error("setServiceEgress", serviceId="svc-search", egress=[],
                    idempotencyKey="k-eg", expectedEgressRevision=1)
    assert err["data"]["code"] == "FORBIDDEN"
    release = bot.release_by_tag("svc-checkout", "v2.4.0")
    assert "error" not in bot.promote("svc-checkout", release["id"])
    grants = bot.ok("getServiceDeploymentGrants")["grants"]
    assert grants and {g["userId"] for g in grants} == {"deploy-bot"}


# -- default seed -----------------------------------------------------------------------------


def test_default_seed_matches_the_team_interfaces(cp: ControlPlaneClient) -> None:
    services = {s["id"]: s for s in cp.ok("getServices")["services"]}
    assert set(services) == {"svc-checkout", "svc-catalog", "svc-search", "svc-notifications"}
    checkout = services["svc-checkout"]["data"]
    assert checkout["imageDeployment"]["rolloutGeneration"] == 3
    assert checkout["imageDeployment"]["requestedDigest"] == rollouts.seeded_digest(
        "checkout", "v2.3.0")
    assert checkout["egress"] == [{"host": "api.stripe.com", "port": 443}]
    assert checkout["egressRevision"] == 1
    assert services["svc-catalog"]["data"]["imageDeployment"]["rolloutGeneration"] == 5
    assert services["svc-catalog"]["data"]["egressRevision"] == 2
    for service in services.values():
        status = service["data"]["imageRolloutStatus"]
        assert status["status"] == "succeeded"
        assert rollouts.validate_image_rollout_status(status) == []
        assert [r["clusterId"] for r in status["reporters"]] == ["sn1", "sn2", "sn3"]
    releases = {r["data"]["observedTags"][0]: r for r in cp.releases("svc-checkout")}
    assert releases["v2.3.0"]["data"]["acceptedAt"]
    assert "acceptedAt" not in releases["v2.4.0"]["data"]
    assert releases["v2.4.0"]["data"]["digestPinnedImageReference"] == (
        "registry.sandbox.test/shop/checkout@" + rollouts.seeded_digest("checkout", "v2.4.0"))
    grants = cp.ok("getServiceDeploymentGrants")["grants"]
    assert {"userId": "deploy-bot", "serviceId": "svc-search",
            "capabilities": ["deployment:preflight", "deployment:promote-route"]} in grants


def test_unknown_service_and_release(cp: ControlPlaneClient) -> None:
    assert cp.error("getServiceById", serviceId="svc-nope")["data"]["code"] == \
        "SERVICE_NOT_FOUND"
    reply = cp.promote("svc-checkout", "rel-nope")
    assert reply["error"]["data"]["code"] == "RELEASE_NOT_FOUND"
    other = cp.release_by_tag("svc-search", "v1.9.2")
    assert cp.promote("svc-checkout", other["id"])["error"]["data"]["code"] == \
        "RELEASE_NOT_FOUND"


def test_invalid_request(cp: ControlPlaneClient) -> None:
    err = cp.error("promoteServiceImageRelease", serviceId="svc-checkout", releaseId="x",
                   idempotencyKey="k", expectedRolloutGeneration=3)
    assert err["data"]["code"] == "INVALID_REQUEST"
    err = cp.error("getServiceById")
    assert err["data"]["code"] == "INVALID_REQUEST"


# -- promotion, CAS, idempotency, rollback --------------------------------------------------------


def test_promotion_creates_a_new_plan_and_accepts_the_release(cp: ControlPlaneClient) -> None:
    before = cp.service("svc-checkout")["data"]["imageDeployment"]
    release = cp.release_by_tag("svc-checkout", "v2.4.0")
    reply = cp.promote("svc-checkout", release["id"], rollout_id=before["rolloutId"])
    plan = reply["response"]["service"]["data"]["imageDeployment"]
    assert plan["rolloutGeneration"] == 4
    assert plan["rolloutId"] != before["rolloutId"]
    assert plan["mode"] == "promotion" and "rollbackOfRolloutId" not in plan
    assert plan["requestedDigest"] == release["data"]["registryRootDigest"]
    assert plan["targetScope"]["targetClusterIds"] == ["sn1", "sn2", "sn3"]
    assert reply["response"]["service"]["data"]["imageRolloutStatus"]["status"] == "pending"
    accepted = cp.release_by_tag("svc-checkout", "v2.4.0")["data"]
    assert accepted["acceptedAt"] == accepted["lastPromotedAt"]
    assert accepted["promotionCount"] == 1
    time.sleep(0.01)
    again = cp.promote("svc-checkout", release["id"])
    assert "error" not in again
    data = cp.release_by_tag("svc-checkout", "v2.4.0")["data"]
    assert data["acceptedAt"] == accepted["acceptedAt"]
    assert data["lastPromotedAt"] > accepted["lastPromotedAt"]
    assert data["promotionCount"] == 2


def test_compare_and_swap_reports_expected_and_actual(cp: ControlPlaneClient) -> None:
    release = cp.release_by_tag("svc-checkout", "v2.4.0")
    err = cp.promote("svc-checkout", release["id"], generation=2)["error"]
    assert err["data"] == {**err["data"], "code": "ROLLOUT_GENERATION_MISMATCH",
                           "expected": 2, "actual": 3}
    err = cp.promote("svc-checkout", release["id"], rollout_id="rollout-other")["error"]
    assert err["data"]["code"] == "ROLLOUT_ID_MISMATCH"
    assert err["data"]["expected"] == "rollout-other"
    assert err["data"]["actual"] == "rollout-checkout-3"
    assert cp.service("svc-checkout")["data"]["imageDeployment"]["rolloutGeneration"] == 3


def test_idempotency_key_replays_and_refuses_another_payload(cp: ControlPlaneClient) -> None:
    release = cp.release_by_tag("svc-checkout", "v2.4.0")
    first = cp.promote("svc-checkout", release["id"], key="key-1", generation=3)
    second = cp.promote("svc-checkout", release["id"], key="key-1", generation=3)
    # The same result, marked as a replay ([ext] idempotentReplay): nothing changed now.
    assert second["response"] == {**first["response"], "idempotentReplay": True}
    assert "idempotentReplay" not in first["response"]
    assert cp.service("svc-checkout")["data"]["imageDeployment"]["rolloutGeneration"] == 4
    assert cp.release_by_tag("svc-checkout", "v2.4.0")["data"]["promotionCount"] == 1
    other = cp.release_by_tag("svc-checkout", "v2.3.0")
    err = cp.promote("svc-checkout", other["id"], key="key-1", generation=4)["error"]
    assert err["data"]["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert cp.service("svc-checkout")["data"]["imageDeployment"]["rolloutGeneration"] == 4


def test_rollback_only_to_an_accepted_release(cp: ControlPlaneClient) -> None:
    catalog = cp.service("svc-catalog")["data"]["imageDeployment"]
    old = cp.release_by_tag("svc-catalog", "v5.0.1")
    reply = cp.ok("rollbackServiceImageRelease", serviceId="svc-catalog", releaseId=old["id"],
                  idempotencyKey="rb-1", expectedCurrentRolloutId=catalog["rolloutId"],
                  expectedRolloutGeneration=catalog["rolloutGeneration"])
    plan = reply["service"]["data"]["imageDeployment"]
    assert plan["mode"] == "rollback"
    assert plan["rollbackOfRolloutId"] == catalog["rolloutId"]
    assert plan["rolloutGeneration"] == 6
    assert plan["requestedDigest"] == old["data"]["registryRootDigest"]
    checkout = cp.service("svc-checkout")["data"]["imageDeployment"]
    never = cp.release_by_tag("svc-checkout", "v2.4.0")
    err = cp.error("rollbackServiceImageRelease", serviceId="svc-checkout",
                   releaseId=never["id"], idempotencyKey="rb-2",
                   expectedCurrentRolloutId=checkout["rolloutId"],
                   expectedRolloutGeneration=checkout["rolloutGeneration"])
    assert err["data"]["code"] == "ROLLBACK_TARGET_NOT_ACCEPTED"


def test_racing_promotions_exactly_one_wins(cp: ControlPlaneClient, sandbox: Sandbox) -> None:
    release = cp.release_by_tag("svc-checkout", "v2.4.0")
    identity = cp.identity
    results: list[dict[str, object]] = []
    barrier = threading.Barrier(8)

    def race(index: int) -> None:
        client = ControlPlaneClient(sandbox)
        client._identity = identity
        barrier.wait()
        results.append(client.promote("svc-checkout", release["id"], key=f"race-{index}",
                                      generation=3))
        client.close()

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [r for r in results if "error" not in r]
    losers = [r["error"]["data"]["code"] for r in results if "error" in r]  # type: ignore[index]
    assert len(winners) == 1
    assert losers == ["ROLLOUT_GENERATION_MISMATCH"] * 7
    assert cp.service("svc-checkout")["data"]["imageDeployment"]["rolloutGeneration"] == 4


# -- grants, egress, preflight -------------------------------------------------------------------


def test_grants_replace_and_empty_removes(cp: ControlPlaneClient) -> None:
    reply = cp.ok("configureServiceDeploymentMachineUser", userId="deploy-bot",
                  serviceId="svc-search", capabilities=["deployment:preflight"])
    assert reply == {"userId": "deploy-bot", "serviceId": "svc-search",
                     "capabilities": ["deployment:preflight"], "tokenRolesNormalized": True}
    grants = cp.ok("getServiceDeploymentGrants")["grants"]
    assert {"userId": "deploy-bot", "serviceId": "svc-search",
            "capabilities": ["deployment:preflight"]} in grants
    cp.ok("configureServiceDeploymentMachineUser", userId="release-train",
          serviceId="svc-notifications", capabilities=[])
    grants = cp.ok("getServiceDeploymentGrants")["grants"]
    assert not [g for g in grants if g["userId"] == "release-train"]
    err = cp.error("configureServiceDeploymentMachineUser", userId="x", serviceId="svc-search",
                   capabilities=["deployment:everything"])
    assert err["data"]["code"] == "INVALID_REQUEST"


def test_egress_replaces_with_revision_cas(cp: ControlPlaneClient) -> None:
    wanted = [{"host": "api.stripe.com", "port": 443}, {"host": "hooks.slack.com", "port": 443}]
    reply = cp.ok("setServiceEgress", serviceId="svc-checkout", egress=wanted,
                  idempotencyKey="eg-1", expectedEgressRevision=1)
    assert reply["service"]["data"]["egress"] == wanted
    assert reply["service"]["data"]["egressRevision"] == 2
    again = cp.ok("setServiceEgress", serviceId="svc-checkout", egress=wanted,
                  idempotencyKey="eg-1", expectedEgressRevision=1)
    assert again == {**reply, "idempotentReplay": True}
    err = cp.error("setServiceEgress", serviceId="svc-checkout", egress=[],
                   idempotencyKey="eg-2", expectedEgressRevision=1)
    assert err["data"]["code"] == "EGRESS_REVISION_MISMATCH"
    assert (err["data"]["expected"], err["data"]["actual"]) == (1, 2)
    cleared = cp.ok("setServiceEgress", serviceId="svc-checkout", egress=[],
                    idempotencyKey="eg-3", expectedEgressRevision=2)
    assert cleared["service"]["data"]["egress"] == []
    assert cleared["service"]["data"]["egressRevision"] == 3


def test_preflight_reports_schema_version_2(cp: ControlPlaneClient,
                                            bot: ControlPlaneClient) -> None:
    request = {"requestId": "r1", "serviceId": "svc-checkout", "sourceRevision": "a" * 40,
               "version": "2.4.0", "configurationDigest": "sha256:" + "0" * 64,
               "proposedNamespace": "checkout", "greenfield": True}
    report = cp.ok("getDeploymentPreflight", **request)["report"]
    # Seed 002 (12.0.0) is greenfield-only and fails closed: a service that exists would
    # be replaced, and this request omits sourceDirty, intentDigest, the Corestore list,
    # the index digest and the evidence (the greenfield GO case is in test_greenfield.py).
    assert report["schemaVersion"] == 2 and report["decision"] == "NO-GO"
    assert report["mutationPerformed"] is False
    codes = {b["code"] for b in report["compatibilityBlockers"]}
    assert {"WOULD_REPLACE_EXISTING_STATE", "INVALID_REQUEST", "INTENT_DIGEST_INVALID",
            "OCI_INDEX_DIGEST_REQUIRED", "RELEASE_EVIDENCE_MISSING"} <= codes
    assert report["proposed"]["wouldReplaceExistingState"] is True
    denied = bot.ok("getDeploymentPreflight", **{**request, "serviceId": "svc-notifications"})
    assert denied["report"]["decision"] == "NO-GO"
    assert denied["report"]["compatibilityBlockers"][0]["code"] == "AUTHORIZATION_MISSING"


def test_every_request_is_audited(cp: ControlPlaneClient, sandbox: Sandbox) -> None:
    release = cp.release_by_tag("svc-checkout", "v2.4.0")
    cp.promote("svc-checkout", release["id"], key="audit-1", generation=9)
    cp.http.post("/typedrequest", content=b"nope")
    rows = sandbox.audit()
    promote = [r for r in rows if r["method"] == "promoteServiceImageRelease"]
    assert promote[-1]["idempotencyKey"] == "audit-1"
    assert promote[-1]["expectedRolloutGeneration"] == 9
    assert promote[-1]["serviceId"] == "svc-checkout"
    assert promote[-1]["releaseId"] == release["id"]
    assert promote[-1]["result"] == "ROLLOUT_GENERATION_MISMATCH"
    assert rows[-1]["result"] == "INVALID_JSON"
    assert all("token" not in r and "jwt" not in str(r) for r in rows)


def test_push_makes_a_new_release_observed(cp: ControlPlaneClient, sandbox: Sandbox) -> None:
    first = sandbox.push("checkout", "v2.5.0")
    second = sandbox.push("checkout", "v2.5.0")
    assert first != second and first.startswith("sha256:")
    digests = {r["data"]["registryRootDigest"]: r for r in cp.releases("svc-checkout")}
    assert digests[second]["data"]["observedTags"] == ["v2.5.0"]
    assert digests[first]["data"]["observedTags"] == []
    assert "acceptedAt" not in digests[second]["data"]
