"""Issue 12 on the sandbox side: getCapabilities, the preflight per seed 002 (12.0.0, fail
closed) driven by the registry simulation, and the [ext] greenfield creation."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from reconciler.sandbox import launcher, rollouts, store
from reconciler.sandbox.launcher import Sandbox, SandboxError
from reconciler.sandbox.registry import EVIDENCE_KINDS
from tests.sandbox.wire import ControlPlaneClient

pytestmark = pytest.mark.integration
JsonDict = dict[str, Any]

GREENFIELD_METHODS = {"createGreenfieldDeployment", "getGreenfieldDeploymentOperation"}
UNKNOWN = "There is no available method for this call on the server side"


def test_capabilities_list_every_method_answered(cp: ControlPlaneClient,
                                                 sandbox: Sandbox) -> None:
    methods = set(cp.ok("getCapabilities")["methods"])
    assert {"getCapabilities", "getServiceById", "getServices", "getDeploymentPreflight",
            "promoteServiceImageRelease", "setServiceEgress"} <= methods
    # Each listed method is answered (no unknown-method text), each unlisted one is not.
    for method in methods:
        reply = cp.call(method)
        assert reply.get("error", {}).get("text") != UNKNOWN, method
    anonymous = cp.raw("getCapabilities", identity={"jwt": "sbxjwt.unknown"})
    assert anonymous["error"]["data"]["code"] == "UNAUTHORIZED"


# -- the default seed and the registry simulation ---------------------------------------------

LEDGER = rollouts.seeded_digest("ledger", "v1.0.0")


def test_default_seed_publishes_ledger_without_creating_it(cp: ControlPlaneClient,
                                                           sandbox: Sandbox) -> None:
    index = sandbox.registry_index(LEDGER)
    assert index is not None and index["repository"] == "shop/ledger"
    assert [(p["os"], p["architecture"], p["runnable"], p["manifestPresent"], p["digest"])
            for p in index["platforms"]] == [
        ("linux", "amd64", True, True, rollouts.seeded_digest("ledger", "v1.0.0:linux/amd64")),
        ("linux", "arm64", True, True, rollouts.seeded_digest("ledger", "v1.0.0:linux/arm64"))]
    assert [a["kind"] for a in index["attestations"]] == list(EVIDENCE_KINDS)
    assert all(a == {"kind": a["kind"], "subjectDigest": LEDGER, "verifier": "sandbox-verifier",
                     "verifiedAt": 1780000000000,
                     "statementDigest": rollouts.seeded_digest("ledger", f"v1.0.0:{a['kind']}")}
               for a in index["attestations"])
    assert "svc-ledger" not in {s["id"] for s in cp.ok("getServices")["services"]}
    assert cp.error("getServiceById", serviceId="svc-ledger")["data"]["code"] == \
        "SERVICE_NOT_FOUND"
    assert {"userId": "deploy-bot", "serviceId": "svc-ledger",
            "capabilities": ["deployment:create-greenfield", "deployment:preflight"]} in \
        cp.ok("getServiceDeploymentGrants")["grants"]


def test_push_for_a_service_the_control_plane_lacks_needs_its_repository(
        sandbox: Sandbox) -> None:
    with pytest.raises(SandboxError, match="--repository"):
        sandbox.push("billing", "v0.1.0")
    first = sandbox.push("billing", "v0.1.0", repository="shop/billing",
                         platforms=["linux/arm64"], evidence="provenance,sbom")
    assert first == rollouts.seeded_digest("billing", "v0.1.0")
    index = sandbox.registry_index(first)
    assert index is not None
    assert [p["architecture"] for p in index["platforms"]] == ["arm64"]
    assert [a["kind"] for a in index["attestations"]] == ["provenance", "sbom"]
    # The same tag again: a new manifest, so a new digest (the tag moves to it).
    second = sandbox.push("billing", "v0.1.0", repository="shop/billing",
                          missing_manifests=["linux/arm64"], evidence="none")
    assert second != first
    again = sandbox.registry_index(second)
    assert again is not None and again["attestations"] == []
    assert again["platforms"][1] == {**again["platforms"][1], "architecture": "arm64",
                                     "manifestPresent": False, "runnable": False}
    with pytest.raises(SandboxError, match="not one of the platforms"):
        sandbox.push("billing", "v0.2.0", repository="shop/billing",
                     missing_manifests=["windows/amd64"])
    with pytest.raises(SandboxError, match="evidence kind 'slsa'"):
        sandbox.push("billing", "v0.2.0", repository="shop/billing", evidence="slsa")
    with pytest.raises(SandboxError, match="shop/checkout, not shop/other"):
        sandbox.push("checkout", "v3.0.0", repository="shop/other")


def test_cli_push_prints_the_release_block_to_paste(sandbox: Sandbox) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "reconciler", "sandbox", "--state", str(sandbox.state_dir),
         "push", "billing", "v1.2.3", "--repository", "shop/billing",
         "--evidence-subject", LEDGER],
        capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert run.returncode == 0, run.stderr
    digest = rollouts.seeded_digest("billing", "v1.2.3")
    assert run.stdout.startswith(f"billing:v1.2.3 -> {digest}\n")
    block = YAML(typ="safe").load(run.stdout.split("\n", 1)[1])["release"]
    assert block["digest"] == digest and block["repository"] == "shop/billing"
    assert (block["tag"], block["version"]) == ("v1.2.3", "1.2.3")
    assert block["registryHost"] == "registry.sandbox.test"
    assert [e["kind"] for e in block["evidence"]] == list(EVIDENCE_KINDS)
    assert {e["subjectDigest"] for e in block["evidence"]} == {LEDGER}
    bad = subprocess.run(
        [sys.executable, "-m", "reconciler", "sandbox", "--state", str(sandbox.state_dir),
         "push", "billing", "v1.2.4", "--repository", "shop/billing", "--platform", "linux"],
        capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert bad.returncode != 0 and "os/arch" in bad.stderr and not bad.stdout


# -- the preflight (seed 002, 12.0.0: fail closed) ----------------------------------------------

REVISION = "0123456789abcdef0123456789abcdef01234567"
INTENT = "sha256:" + "ab" * 32
OTHER = "sha256:" + "0" * 64


def references(sandbox: Sandbox, digest: str) -> list[JsonDict]:
    """The attestation references a client copies from what the registry published."""
    index = sandbox.registry_index(digest)
    assert index is not None
    return [{k: a[k] for k in ("kind", "statementDigest", "subjectDigest", "verifier",
                               "verifiedAt")} for a in index["attestations"]]


def configuration_of(sandbox: Sandbox, request: JsonDict) -> str:
    """What a client must do to bind evidence (issue 24): ask the preflight without
    evidence and take the configuration digest the control plane computed."""
    probe = {k: v for k, v in request.items() if k != "releaseEvidence"}
    client = ControlPlaneClient(sandbox)
    try:
        report = client.ok("getDeploymentPreflight", **probe)["report"]
    finally:
        client.close()
    assert report["mutationPerformed"] is False
    digest = report["source"]["configurationDigest"]
    assert isinstance(digest, str) and digest.startswith("sha256:")
    return digest


def ledger_request(sandbox: Sandbox, digest: str = LEDGER, **changes: Any) -> JsonDict:
    """A complete greenfield preflight request for ledger (GO on the default seed), its
    evidence bound to the configuration digest a probe of the same request reported."""
    request: JsonDict = {
        "requestId": "req-ledger-1", "serviceId": "svc-ledger", "sourceRevision": REVISION,
        "sourceDirty": False, "version": "1.0.0", "intentDigest": INTENT,
        "proposedNamespace": "ledger", "proposedCorestoreResources": [],
        "ociIndexDigest": digest, "releaseTag": "v1.0.0", "greenfield": True}
    for key, value in changes.items():
        if value is DROP:
            request.pop(key, None)
        elif key != "releaseEvidence":
            request[key] = value
    if "releaseEvidence" in changes:
        if changes["releaseEvidence"] is not DROP:
            request["releaseEvidence"] = changes["releaseEvidence"]
        return request
    request["releaseEvidence"] = {
        "sourceRevision": REVISION, "version": "1.0.0",
        "configurationDigest": configuration_of(sandbox, request), "ociIndexDigest": digest,
        "releaseAuthorized": True, "attestations": references(sandbox, digest)}
    return request


DROP = object()


def state_dump(sandbox: Sandbox) -> list[Any]:
    conn = store.connect(sandbox.state_dir)
    try:
        return [conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
                for table in ("services", "releases", "grants", "idempotency",
                              "registry_indexes", "registry_tags", "greenfield_operations")]
    finally:
        conn.close()


def test_complete_evidence_is_go_and_writes_nothing(bot: ControlPlaneClient,
                                                    sandbox: Sandbox) -> None:
    request = ledger_request(sandbox)
    before = state_dump(sandbox)
    report = bot.ok("getDeploymentPreflight", **request)["report"]
    assert report["compatibilityBlockers"] == []
    assert (report["schemaVersion"], report["decision"], report["mutationPerformed"]) == \
        (2, "GO", False)
    assert report["authorizationChecks"] == [
        {"capability": "deployment:preflight", "granted": True},
        {"capability": "deployment:create-greenfield", "granted": True}]
    configuration = request["releaseEvidence"]["configurationDigest"]
    assert report["source"] == {"revision": REVISION, "dirty": False, "version": "1.0.0",
                                "intentDigest": INTENT, "configurationDigest": configuration}
    # The control plane's own digest, not the client's (issue 24).
    assert configuration != INTENT
    assert report["service"]["serviceId"] == "svc-ledger"
    assert report["service"]["registryRepository"] == "shop/ledger"
    assert report["service"]["registryHost"] == "registry.sandbox.test"
    requested = report["requestedImage"]
    assert (requested["digest"], requested["releaseTag"], requested["tagReserved"]) == \
        (LEDGER, "v1.0.0", True)
    assert requested["mediaType"] == "application/vnd.oci.image.index.v1+json"
    assert [(p["os"], p["architecture"], p["runnable"], p["manifestPresent"])
            for p in requested["platforms"]] == [("linux", "amd64", True, True),
                                                 ("linux", "arm64", True, True)]
    assert report["proposed"] == {
        "namespace": "ledger", "corestoreResources": [], "namespaceReserved": True,
        "inventoryComplete": True, "namespaceBlank": True, "versionReserved": True,
        "wouldReplaceExistingState": False}
    assert report["currentImage"] == {"mutableReference": False, "platforms": []}
    assert state_dump(sandbox) == before
    rows = [r for r in sandbox.audit() if r["method"] == "getDeploymentPreflight"
            and r["caller"] == "deploy-bot"]
    assert [(r["serviceId"], r["caller"], r["result"]) for r in rows] == \
        [("svc-ledger", "deploy-bot", "ok")]


Setup = Callable[[Sandbox, ControlPlaneClient], JsonDict]


def _grant(caps: list[str]) -> Setup:
    def setup(sb: Sandbox, admin: ControlPlaneClient) -> JsonDict:
        admin.ok("configureServiceDeploymentMachineUser", userId="deploy-bot",
                 serviceId="svc-ledger", capabilities=caps)
        return ledger_request(sb)
    return setup


def _change(**changes: Any) -> Setup:
    return lambda sb, _admin: ledger_request(sb, **changes)


def _pushed(evidence: str = "complete", references_from: str | None = None,
            **options: Any) -> Setup:
    """Push ledger v1.1.0 with ``options``; the request pins it with its own references
    (or those of ``references_from``: "ledger" = the seeded v1.0.0)."""
    def setup(sb: Sandbox, _admin: ControlPlaneClient) -> JsonDict:
        digest = sb.push("ledger", "v1.1.0", repository="shop/ledger", evidence=evidence,
                         **options)
        request = ledger_request(sb, digest) if evidence != "none" else ledger_request(
            sb, digest, releaseEvidence={**ledger_request(sb)["releaseEvidence"],
                                         "ociIndexDigest": digest})
        if references_from == "ledger":
            request["releaseEvidence"]["attestations"] = [
                {**r, "subjectDigest": digest} for r in references(sb, LEDGER)]
        elif references_from == "own-subject":
            request["releaseEvidence"]["attestations"] = [
                {**r, "subjectDigest": digest} for r in references(sb, digest)]
        return request
    return setup


AMD64 = rollouts.seeded_digest("ledger", "v1.0.0:linux/amd64")


def _moved_tag(sb: Sandbox, _admin: ControlPlaneClient) -> JsonDict:
    request = ledger_request(sb)  # pinned while v1.0.0 is LEDGER
    assert sb.push("ledger", "v1.0.0", repository="shop/ledger") != LEDGER
    return request


CASES: list[tuple[str, Setup, str, str]] = [
    ("no preflight grant", _grant(["deployment:create-greenfield"]), "AUTHORIZATION_MISSING",
     "deploy-bot lacks deployment:preflight"),
    ("no create grant", _grant(["deployment:preflight"]), "AUTHORIZATION_MISSING",
     "deploy-bot lacks deployment:create-greenfield"),
    ("dirty worktree", _change(sourceDirty=True), "SOURCE_WORKTREE_DIRTY",
     "The source worktree contains uncommitted changes."),
    ("short revision", _change(sourceRevision=REVISION[:12]), "SOURCE_REVISION_INVALID",
     "Source revision must be a full lower-case Git commit SHA."),
    ("no request id", _change(requestId="  "), "INVALID_REQUEST",
     "A bounded request identifier is required."),
    ("dirty state not reported", _change(sourceDirty=DROP), "INVALID_REQUEST",
     "Source worktree state must be reported."),
    ("malformed namespace", _change(proposedNamespace="Ledger_NS"), "NAMESPACE_NOT_RESERVED",
     "The proposed namespace is missing or malformed."),
    ("namespace of checkout", _change(proposedNamespace="checkout"), "NAMESPACE_COLLISION",
     "Namespace checkout is already used by service svc-checkout."),
    ("leftover resources", _change(proposedNamespace="legacy-ledger"),
     "NAMESPACE_NOT_PROVEN_BLANK", "Namespace legacy-ledger still holds resources"),
    ("not semver", _change(version="1.0"), "VERSION_NOT_RESERVED",
     "A canonical semantic release version is required."),
    ("version released", _change(serviceId="svc-checkout", version="2.3.0"),
     "VERSION_COLLISION", "Version 2.3.0 was already released for svc-checkout."),
    ("service exists", _change(serviceId="svc-checkout"), "WOULD_REPLACE_EXISTING_STATE",
     "Service svc-checkout already exists"),
    ("intent digest", _change(intentDigest="sha256:abc"), "INTENT_DIGEST_INVALID",
     "Deployment intent digest must be a canonical sha256 digest."),
    ("no index digest", _change(ociIndexDigest=DROP), "OCI_INDEX_DIGEST_REQUIRED",
     "A greenfield deployment needs the OCI index digest it pins."),
    ("index digest malformed", _change(ociIndexDigest="latest"), "OCI_INDEX_DIGEST_REQUIRED",
     "OCI index digest must be a canonical sha256 digest."),
    ("unknown digest", lambda sb, _a: ledger_request(sb, ociIndexDigest=OTHER),
     "OCI_INDEX_NOT_FOUND", f"No repository of the registry holds the OCI index {OTHER}."),
    ("arm64 only", _pushed(platforms=["linux/arm64"]), "OCI_PLATFORM_MISSING",
     "has no runnable linux/amd64 image"),
    ("amd64 manifest absent", _pushed(missing_manifests=["linux/amd64"]),
     "OCI_PLATFORM_MANIFEST_MISSING", "The linux/amd64 manifest"),
    ("arm64 manifest absent", _pushed(missing_manifests=["linux/arm64"]),
     "OCI_PLATFORM_MANIFEST_MISSING", "The linux/arm64 manifest"),
    ("no evidence sent", _change(releaseEvidence=DROP), "RELEASE_EVIDENCE_MISSING",
     "Missing release-authorization evidence."),
    ("two kinds published", _pushed(evidence="provenance,sbom"), "RELEASE_EVIDENCE_MISSING",
     "Missing signature evidence."),
    ("none published", _pushed(evidence="none", references_from="ledger"),
     "RELEASE_EVIDENCE_MISSING", "No release evidence was published for"),
    ("evidence of another image", _pushed(evidence_subject=OTHER), "RELEASE_EVIDENCE_INVALID",
     "Invalid provenance evidence."),
    ("claimed for this image, published for another",
     _pushed(evidence_subject=OTHER, references_from="own-subject"),
     "RELEASE_EVIDENCE_INVALID", "is bound to another subject digest"),
    ("statements of another release", _pushed(references_from="ledger"),
     "RELEASE_EVIDENCE_INVALID", "does not match what was published"),
    ("evidence for another revision", lambda sb, _a: ledger_request(
        sb, releaseEvidence={**ledger_request(sb)["releaseEvidence"], "sourceRevision": "f" * 40}),
     "RELEASE_EVIDENCE_INVALID",
     "Release evidence is not bound to the requested deployment fence."),
    ("evidence bound to the intent digest", lambda sb, _a: ledger_request(
        sb, releaseEvidence={**ledger_request(sb)["releaseEvidence"],
                             "configurationDigest": INTENT}),
     "RELEASE_EVIDENCE_INVALID",
     "Release evidence is not bound to the requested deployment fence."),
    ("a platform manifest pinned", lambda sb, _a: ledger_request(sb, ociIndexDigest=AMD64),
     "OCI_INDEX_MEDIA_TYPE_REQUIRED", f"{AMD64} is a linux/amd64 manifest"),
    ("a tag moved after it was pinned", _moved_tag, "IMMUTABLE_RELEASE_TAG_NOT_RESERVED",
     "Tag v1.0.0 of shop/ledger points at"),
    ("release not authorized", lambda sb, _a: ledger_request(
        sb, releaseEvidence={**ledger_request(sb)["releaseEvidence"], "releaseAuthorized": False}),
     "RELEASE_NOT_AUTHORIZED", "Release authorization evidence is explicitly false."),
]


@pytest.mark.parametrize(("setup", "code", "message"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_each_blocker_the_sandbox_can_produce(sandbox: Sandbox, cp: ControlPlaneClient,
                                              bot: ControlPlaneClient, setup: Setup, code: str,
                                              message: str) -> None:
    request = setup(sandbox, cp)
    before = state_dump(sandbox)
    report = bot.ok("getDeploymentPreflight", **request)["report"]
    assert report["decision"] == "NO-GO" and report["mutationPerformed"] is False
    assert any(b["code"] == code and message in b["message"]
               for b in report["compatibilityBlockers"]), report["compatibilityBlockers"]
    assert state_dump(sandbox) == before


def test_blockers_say_which_platform_and_evidence(sandbox: Sandbox, cp: ControlPlaneClient,
                                                  bot: ControlPlaneClient) -> None:
    request = _pushed(evidence="provenance,sbom", missing_manifests=["linux/arm64"])(sandbox, cp)
    report = bot.ok("getDeploymentPreflight", **request)["report"]
    assert [(b["code"], b["message"]) for b in report["compatibilityBlockers"]
            if b["code"] == "RELEASE_EVIDENCE_MISSING"] == [
        ("RELEASE_EVIDENCE_MISSING", f"Missing {kind} evidence.")
        for kind in ("signature", "vulnerability-policy", "release-authorization")]
    platforms = {(p["architecture"], p["runnable"], p["manifestPresent"])
                 for p in report["requestedImage"]["platforms"]}
    assert platforms == {("amd64", True, True), ("arm64", False, False)}
    denied = _grant(["deployment:preflight"])(sandbox, cp)
    checks = bot.ok("getDeploymentPreflight", **denied)["report"]["authorizationChecks"]
    assert checks == [{"capability": "deployment:preflight", "granted": True},
                      {"capability": "deployment:create-greenfield", "granted": False}]


def test_namespace_state_in_the_report(sandbox: Sandbox, bot: ControlPlaneClient) -> None:
    taken = bot.ok("getDeploymentPreflight",
                   **ledger_request(sandbox, proposedNamespace="checkout"))["report"]
    assert (taken["proposed"]["namespaceReserved"], taken["proposed"]["namespaceBlank"]) == \
        (False, False)
    replace = bot.ok("getDeploymentPreflight",
                     **ledger_request(sandbox, serviceId="svc-checkout"))["report"]
    assert replace["proposed"]["wouldReplaceExistingState"] is True
    assert replace["service"]["serviceName"] == "checkout"
    assert replace["currentImage"]["digest"] == rollouts.seeded_digest("checkout", "v2.3.0")


# -- [ext] createGreenfieldDeployment / getGreenfieldDeploymentOperation ------------------------

ORDER = ["reserved", "provisioning", "deploying", "verifying", "ready-for-promotion",
         "promoting", "promoted"]


def fence_of(request: JsonDict) -> JsonDict:
    return {"sourceServiceId": request["serviceId"], "sourceRevision": request["sourceRevision"],
            "version": request["version"], "ociIndexDigest": request["ociIndexDigest"],
            "configurationDigest": request["releaseEvidence"]["configurationDigest"],
            "targetNamespace": request["proposedNamespace"]}


def creation(sandbox: Sandbox, key: str = "create-ledger-1", **changes: Any) -> JsonDict:
    request = ledger_request(sandbox, **changes)
    return {"idempotencyKey": key, "preflight": request, "fence": fence_of(request),
            "service": {"name": "ledger", "appId": "ledger",
                        "registryHost": "registry.sandbox.test", "repository": "shop/ledger",
                        "releaseTag": "v1.0.0",
                        "egress": [{"host": "api.stripe.com", "port": 443}]}}


def wait_terminal(client: ControlPlaneClient, operation_id: str,
                  timeout: float = 20.0) -> list[str]:
    """The states seen until the operation ends (bounded wait, not a timing assertion)."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while True:
        state = client.ok("getGreenfieldDeploymentOperation",
                          operationId=operation_id)["operation"]["data"]["state"]
        if not seen or seen[-1] != state:
            seen.append(state)
        if state in ("promoted", "failed", "rolled-back") or time.monotonic() > deadline:
            return seen
        time.sleep(0.05)


def test_create_converges_on_every_cluster(sandbox: Sandbox, bot: ControlPlaneClient) -> None:
    body = creation(sandbox)
    operation = bot.ok("createGreenfieldDeployment", **body)["operation"]
    data = operation["data"]
    assert operation["id"].startswith("gfop-")
    assert (data["state"], data["idempotencyKey"], data["candidateServiceId"]) == \
        ("reserved", "create-ledger-1", "svc-ledger")
    assert data["fence"] == body["fence"]
    assert data["requestDigest"].startswith("sha256:") and data["createdAt"] > 0
    service = bot.service("svc-ledger")
    plan = service["data"]["imageDeployment"]
    assert (plan["rolloutGeneration"], plan["requestedDigest"], plan["mode"]) == \
        (1, LEDGER, "promotion")
    assert plan["targetScope"]["targetClusterIds"] == sandbox.clusters
    assert service["data"]["name"] == "ledger" and service["data"]["namespace"] == "ledger"
    assert service["data"]["egress"] == [{"host": "api.stripe.com", "port": 443}]
    [release] = bot.releases("svc-ledger")
    assert release["data"]["acceptedAt"] and release["data"]["observedTags"] == ["v1.0.0"]
    assert release["data"]["digestPinnedImageReference"] == \
        f"registry.sandbox.test/shop/ledger@{LEDGER}"
    seen = wait_terminal(bot, operation["id"])
    assert seen[-1] == "promoted", seen
    assert [ORDER.index(s) for s in seen] == sorted(ORDER.index(s) for s in seen)
    final = bot.ok("getGreenfieldDeploymentOperation", idempotencyKey="create-ledger-1")
    assert final["operation"]["id"] == operation["id"]
    assert final["operation"]["data"]["routeGeneration"] == 1
    runtime = sandbox.cluster_status()
    assert {cid: runtime[cid]["ledger"]["resolvedDigest"] for cid in sandbox.clusters} == \
        dict.fromkeys(sandbox.clusters, LEDGER)
    assert bot.service("svc-ledger")["data"]["imageRolloutStatus"]["status"] == "succeeded"
    # Now that it exists, a second greenfield preflight of it would replace it.
    again = bot.ok("getDeploymentPreflight", **ledger_request(sandbox))["report"]
    codes = {b["code"] for b in again["compatibilityBlockers"]}
    assert {"WOULD_REPLACE_EXISTING_STATE", "VERSION_COLLISION"} <= codes


def test_replay_returns_the_same_operation_and_creates_once(sandbox: Sandbox,
                                                            bot: ControlPlaneClient) -> None:
    first = bot.ok("createGreenfieldDeployment", **creation(sandbox))
    second = bot.ok("createGreenfieldDeployment", **creation(sandbox))
    assert second["idempotentReplay"] is True
    assert second["operation"]["id"] == first["operation"]["id"]
    assert second["operation"]["data"]["fence"] == first["operation"]["data"]["fence"]
    services = [s["id"] for s in bot.ok("getServices")["services"]]
    assert services.count("svc-ledger") == 1
    assert len(bot.releases("svc-ledger")) == 1
    reused = bot.error("createGreenfieldDeployment",
                       **creation(sandbox, proposedNamespace="ledger-two"))
    assert reused["data"]["code"] == "IDEMPOTENCY_KEY_REUSED"
    exists = bot.error("createGreenfieldDeployment", **creation(sandbox, key="create-ledger-2"))
    assert exists["data"]["code"] == "WOULD_REPLACE_EXISTING_STATE"


def test_fence_mismatch_creates_nothing(sandbox: Sandbox, bot: ControlPlaneClient) -> None:
    before = state_dump(sandbox)
    body = creation(sandbox)
    body["fence"] = {**body["fence"], "configurationDigest": OTHER}
    err = bot.error("createGreenfieldDeployment", **body)
    assert err["data"]["code"] == "FENCE_MISMATCH"
    assert err["data"]["expected"]["configurationDigest"] == \
        body["preflight"]["releaseEvidence"]["configurationDigest"] != INTENT
    assert err["data"]["actual"]["configurationDigest"] == OTHER
    assert "configurationDigest" in err["text"]
    assert state_dump(sandbox) == before


def test_no_go_preflight_refuses_with_the_upstream_blockers(sandbox: Sandbox,
                                                            bot: ControlPlaneClient) -> None:
    before = state_dump(sandbox)
    err = bot.error("createGreenfieldDeployment", **creation(sandbox, sourceDirty=True))
    assert err["data"]["code"] == "PREFLIGHT_NO_GO"
    assert [b["code"] for b in err["data"]["blockers"]] == ["SOURCE_WORKTREE_DIRTY"]
    assert "SOURCE_WORKTREE_DIRTY" in err["text"]
    assert state_dump(sandbox) == before
    audit = [r for r in sandbox.audit() if r["method"] == "createGreenfieldDeployment"]
    assert [(r["serviceId"], r["result"]) for r in audit] == [("svc-ledger", "PREFLIGHT_NO_GO")]


def test_create_needs_the_capability(sandbox: Sandbox, cp: ControlPlaneClient,
                                     bot: ControlPlaneClient) -> None:
    cp.ok("configureServiceDeploymentMachineUser", userId="deploy-bot", serviceId="svc-ledger",
          capabilities=["deployment:preflight"])
    err = bot.error("createGreenfieldDeployment", **creation(sandbox))
    assert err["data"]["code"] == "FORBIDDEN"
    assert err["data"]["capability"] == "deployment:create-greenfield"
    assert "svc-ledger" not in {s["id"] for s in cp.ok("getServices")["services"]}
    unknown = bot.error("getGreenfieldDeploymentOperation", operationId="gfop-nope")
    assert unknown["data"]["code"] == "OPERATION_NOT_FOUND"
    assert bot.error("getGreenfieldDeploymentOperation")["data"]["code"] == "INVALID_REQUEST"


def test_wrong_repository_or_taken_name_is_refused(sandbox: Sandbox,
                                                   bot: ControlPlaneClient) -> None:
    body = creation(sandbox)
    body["service"] = {**body["service"], "repository": "shop/other"}
    assert bot.error("createGreenfieldDeployment", **body)["data"]["code"] == "INVALID_REQUEST"
    body = creation(sandbox, key="k2")
    body["service"] = {**body["service"], "appId": "checkout"}
    assert bot.error("createGreenfieldDeployment", **body)["data"]["code"] == "INVALID_REQUEST"


def test_switched_off_like_upstream(sandbox_factory: Callable[..., Sandbox]) -> None:
    sb = sandbox_factory(greenfield=False)
    client = ControlPlaneClient(sb)
    try:
        methods = set(client.ok("getCapabilities")["methods"])
        assert "getDeploymentPreflight" in methods and not GREENFIELD_METHODS & methods
        for method in sorted(GREENFIELD_METHODS):
            reply = client.call(method, **creation(sb))
            assert reply["error"] == {"text": UNKNOWN, "data": {}}
        report = client.ok("getDeploymentPreflight", **ledger_request(sb))["report"]
        assert report["decision"] == "NO-GO"
        assert [b["code"] for b in report["compatibilityBlockers"]] == \
            ["GREENFIELD_EXECUTION_UNAVAILABLE"]
        assert launcher.attach(sb.state_dir).greenfield is False
    finally:
        client.close()


def test_cli_up_no_greenfield_is_kept_for_attach(tmp_path: Path) -> None:
    state = tmp_path / "cli"

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "reconciler", "sandbox", "--state", str(state), *argv],
            capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[2])

    up = run("up", "--detach", "--port", "0", "--mesh-port", "0", "--clusters", "1",
             "--no-greenfield")
    assert up.returncode == 0, up.stderr
    assert "greenfield      off" in up.stdout
    try:
        sb = launcher.attach(state)
        assert sb.greenfield is False
        client = ControlPlaneClient(sb)
        try:
            assert not GREENFIELD_METHODS & set(client.ok("getCapabilities")["methods"])
        finally:
            client.close()
    finally:
        assert run("down").returncode == 0


def test_a_failing_cluster_fails_the_operation(sandbox: Sandbox,
                                               bot: ControlPlaneClient) -> None:
    sandbox.fault("sn2", "failed")
    operation = bot.ok("createGreenfieldDeployment", **creation(sandbox))["operation"]
    seen = wait_terminal(bot, operation["id"])
    assert seen[-1] == "failed", seen
    final = bot.ok("getGreenfieldDeploymentOperation", operationId=operation["id"])
    assert final["operation"]["data"]["failureCode"] == "replica-failed"
    # Final for the operation: the cluster recovering later does not rewrite it.
    sandbox.clear_faults()
    sandbox.wait_settled()
    again = bot.ok("getGreenfieldDeploymentOperation", operationId=operation["id"])
    assert again["operation"]["data"]["state"] == "failed"


# -- issue 24: the control plane's own configuration digest ---------------------------------


def test_the_configuration_digest_is_the_control_planes_own(sandbox: Sandbox,
                                                            bot: ControlPlaneClient) -> None:
    """Not the intent digest, not something a client can compute: it covers the
    workspace and the registry the control plane resolved; the same request gives the
    same digest, another configuration another one."""
    request = ledger_request(sandbox)
    first = configuration_of(sandbox, request)
    assert first != INTENT and first == configuration_of(sandbox, request)
    assert configuration_of(sandbox, {**request, "proposedNamespace": "ledger-two"}) != first
    assert configuration_of(sandbox, {**request, "intentDigest": OTHER}) != first
    # The evidence is not part of it (it is bound to it), nor the revision (fenced apart).
    assert configuration_of(sandbox, {**request, "sourceRevision": "f" * 40}) == first
    report = bot.ok("getDeploymentPreflight", **request)["report"]
    assert report["service"]["workspaceIdentity"].startswith("ws-")
    assert report["service"]["workspaceIdentity"] not in ("svc-ledger", "")


def test_faults_move_the_configuration_digest(sandbox: Sandbox) -> None:
    request = ledger_request(sandbox)
    before = configuration_of(sandbox, request)
    sandbox.fault("control-plane", "config-salt", salt="v2")
    salted = configuration_of(sandbox, request)
    assert salted != before and configuration_of(sandbox, request) == salted
    sandbox.fault("control-plane", "config-drift")
    assert configuration_of(sandbox, request) != configuration_of(sandbox, request)
    sandbox.clear_faults()
    assert configuration_of(sandbox, request) == before


def test_a_platform_manifest_is_refused_before_the_platform_checks(
        sandbox: Sandbox, bot: ControlPlaneClient) -> None:
    report = bot.ok("getDeploymentPreflight",
                    **ledger_request(sandbox, ociIndexDigest=AMD64))["report"]
    codes = [b["code"] for b in report["compatibilityBlockers"]]
    assert "OCI_INDEX_MEDIA_TYPE_REQUIRED" in codes
    assert not {"OCI_INDEX_NOT_FOUND", "OCI_PLATFORM_MISSING"} & set(codes)
    assert report["requestedImage"]["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
