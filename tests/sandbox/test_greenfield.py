"""Issue 12 on the sandbox side: getCapabilities, the preflight per seed 002 (12.0.0, fail
closed) driven by the registry simulation, and the [ext] greenfield creation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from reconciler.sandbox import rollouts
from reconciler.sandbox.launcher import Sandbox, SandboxError
from reconciler.sandbox.registry import EVIDENCE_KINDS
from tests.sandbox.wire import ControlPlaneClient

pytestmark = pytest.mark.integration

GREENFIELD_METHODS = {"createGreenfieldDeployment", "getGreenfieldDeploymentOperation"}


def test_capabilities_list_every_method_answered(cp: ControlPlaneClient,
                                                 sandbox: Sandbox) -> None:
    methods = set(cp.ok("getCapabilities")["methods"])
    assert {"getCapabilities", "getServiceById", "getServices", "getDeploymentPreflight",
            "promoteServiceImageRelease", "setServiceEgress"} <= methods
    # Each listed method is answered (no unknown-method text), each unlisted one is not.
    for method in methods:
        reply = cp.call(method)
        assert reply.get("error", {}).get("text") != \
            "There is no available method for this call on the server side", method
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
