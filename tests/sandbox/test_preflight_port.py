"""The sandbox's port of seed 002's validators, checked case by case against the TypeScript
(``validateDeploymentPreflightRequest``, ``validateDeploymentReleaseEvidence``): same codes,
same messages, same order, and JavaScript's semantics where Python's differ."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.sandbox.preflight import (
    normalize_sha256_digest,
    validate_deployment_preflight_request,
    validate_deployment_release_evidence,
)

REV = "a" * 40
DIGEST = "sha256:" + "1" * 64
INTENT = "sha256:" + "2" * 64
GOOD: dict[str, Any] = {
    "requestId": "r", "serviceId": "svc", "sourceRevision": REV, "sourceDirty": False,
    "version": "1.2.3-rc.1+build.5", "intentDigest": INTENT, "proposedNamespace": "ns",
    "proposedCorestoreResources": [{"capability": "database", "resourceName": "db"}],
    "ociIndexDigest": DIGEST, "greenfield": True}
KINDS = ["provenance", "sbom", "signature", "vulnerability-policy", "release-authorization"]


def codes(request: object) -> list[tuple[str, str]]:
    return [(b["code"], b["message"]) for b in validate_deployment_preflight_request(request)]


def test_a_complete_request_has_no_blocker() -> None:
    assert codes(GOOD) == []
    # ociIndexDigest may be undefined (absent); the digest is trimmed and lower-cased.
    assert codes({k: v for k, v in GOOD.items() if k != "ociIndexDigest"}) == []
    assert codes({**GOOD, "ociIndexDigest": " SHA256:" + "A" * 64 + "\n"}) == []


def test_not_an_object() -> None:
    for value in (None, [], "x", 3):
        assert codes(value) == [("INVALID_REQUEST",
                                 "Deployment preflight request must be an object.")]


def test_every_rule_in_upstream_order() -> None:
    assert codes({"proposedCorestoreResources": "no", "ociIndexDigest": None}) == [
        ("INVALID_REQUEST", "A bounded request identifier is required."),
        ("INVALID_REQUEST", "A bounded service identifier is required."),
        ("SOURCE_REVISION_INVALID", "Source revision must be a full lower-case Git commit SHA."),
        ("INVALID_REQUEST", "Source worktree state must be reported."),
        ("VERSION_NOT_RESERVED", "A canonical semantic release version is required."),
        ("NAMESPACE_NOT_RESERVED", "The proposed namespace is missing or malformed."),
        ("INTENT_DIGEST_INVALID", "Deployment intent digest must be a canonical sha256 digest."),
        ("INVALID_REQUEST", "Proposed Corestore resources are malformed."),
        # null is not undefined: a present ociIndexDigest must be a digest.
        ("OCI_INDEX_DIGEST_REQUIRED", "OCI index digest must be a canonical sha256 digest."),
        ("WOULD_REPLACE_EXISTING_STATE", "Only greenfield deployment preflight is supported."),
    ]


@pytest.mark.parametrize(("change", "code"), [
    # JS `$` does not match before a trailing newline; Python's does, hence fullmatch.
    ({"sourceRevision": REV + "\n"}, "SOURCE_REVISION_INVALID"),
    ({"sourceRevision": "A" * 40}, "SOURCE_REVISION_INVALID"),
    ({"proposedNamespace": "ns\n"}, "NAMESPACE_NOT_RESERVED"),
    ({"proposedNamespace": "-ns"}, "NAMESPACE_NOT_RESERVED"),
    ({"proposedNamespace": "a" * 64}, "NAMESPACE_NOT_RESERVED"),
    ({"version": "1.2.3\n"}, "VERSION_NOT_RESERVED"),
    ({"version": "01.2.3"}, "VERSION_NOT_RESERVED"),
    ({"version": "1.2.3-01"}, "VERSION_NOT_RESERVED"),
    ({"version": "1.2.3-" + "a" * 95}, "VERSION_NOT_RESERVED"),  # 101 > 100 characters
    ({"sourceDirty": "false"}, "INVALID_REQUEST"),
    ({"sourceDirty": True}, "SOURCE_WORKTREE_DIRTY"),
    ({"requestId": " \t"}, "INVALID_REQUEST"),
    # 101 code points but 201 UTF-16 code units: over the bound upstream.
    ({"requestId": "\U0001f600" * 100 + "x"}, "INVALID_REQUEST"),
    ({"serviceId": 7}, "INVALID_REQUEST"),
    ({"intentDigest": "sha256:" + "g" * 64}, "INTENT_DIGEST_INVALID"),
    ({"ociIndexDigest": 5}, "OCI_INDEX_DIGEST_REQUIRED"),
    ({"greenfield": "true"}, "WOULD_REPLACE_EXISTING_STATE"),
    ({"proposedCorestoreResources": [{"capability": "cache", "resourceName": "db"}]},
     "INVALID_REQUEST"),
    ({"proposedCorestoreResources": [{"capability": "database", "resourceName": "Db"}]},
     "INVALID_REQUEST"),
    ({"proposedCorestoreResources": [{"capability": "database", "resourceName": f"d{i}"}
                                     for i in range(9)]}, "INVALID_REQUEST"),
])
def test_single_rule(change: dict[str, Any], code: str) -> None:
    assert [c for c, _ in codes({**GOOD, **change})] == [code]


def test_surrogate_pairs_count_as_two_units() -> None:
    assert codes({**GOOD, "requestId": "\U0001f600" * 100}) == []
    assert codes({**GOOD, "version": "1.2.3-" + "a" * 94}) == []


def test_trim_is_javascripts() -> None:
    # U+0085 and U+001F are not JavaScript whitespace: trim() keeps them, so the
    # identifier is not blank; U+FEFF and U+3000 are, so it is.
    assert codes({**GOOD, "requestId": "\x85\x1f"}) == []
    assert [c for c, _ in codes({**GOOD, "requestId": "\ufeff\u3000"})] == ["INVALID_REQUEST"]
    assert normalize_sha256_digest("\ufeff" + DIGEST) == DIGEST
    assert normalize_sha256_digest("\x85" + DIGEST) is None


def test_duplicate_resources_reported_once_besides_malformed() -> None:
    same = {"capability": "database", "resourceName": "db"}
    assert codes({**GOOD, "proposedCorestoreResources": [same, dict(same)]}) == [
        ("INVALID_REQUEST", "Proposed Corestore resources must be unique.")]
    # Keys use String(): two malformed entries without fields are "undefined:undefined" twice.
    assert codes({**GOOD, "proposedCorestoreResources": [{}, {}]}) == [
        ("INVALID_REQUEST", "Proposed Corestore resources are malformed."),
        ("INVALID_REQUEST", "Proposed Corestore resources must be unique.")]


def evidence(**change: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "sourceRevision": REV, "version": "1.0.0", "configurationDigest": INTENT,
        "ociIndexDigest": DIGEST, "releaseAuthorized": True,
        "attestations": [{"kind": k, "statementDigest": "sha256:" + "3" * 64,
                          "subjectDigest": DIGEST, "verifier": "v", "verifiedAt": 1}
                         for k in KINDS]}
    base.update(change)
    return base


def ev(value: object) -> list[tuple[str, str]]:
    return [(b["code"], b["message"]) for b in validate_deployment_release_evidence(
        evidence=value, source_revision=REV, version="1.0.0", configuration_digest=INTENT,
        oci_index_digest=DIGEST)]


def test_complete_evidence() -> None:
    assert ev(evidence()) == []
    # Number.isSafeInteger(1.0) is true in JavaScript.
    atts = [{**a, "verifiedAt": 1780000000000.0} for a in evidence()["attestations"]]
    assert ev(evidence(attestations=atts)) == []


def test_evidence_rules_in_upstream_order() -> None:
    assert ev(None) == [("RELEASE_EVIDENCE_INVALID", "Release evidence must be an object.")]
    assert ev({}) == [
        ("RELEASE_NOT_AUTHORIZED", "Release authorization evidence is explicitly false."),
        ("RELEASE_EVIDENCE_INVALID",
         "Release evidence is not bound to the requested deployment fence."),
        ("RELEASE_EVIDENCE_INVALID", "Release attestations must be an array."),
        *[("RELEASE_EVIDENCE_MISSING", f"Missing {k} evidence.") for k in KINDS]]


@pytest.mark.parametrize("bad", [
    {"subjectDigest": "sha256:" + "9" * 64}, {"statementDigest": "sha256:short"},
    {"verifier": "  "}, {"verifiedAt": 0}, {"verifiedAt": 1.5}, {"verifiedAt": 2**53},
    {"verifiedAt": True}, {"verifiedAt": "1"}, {"subjectDigest": DIGEST.upper()},
])
def test_an_invalid_attestation_names_its_kind(bad: dict[str, Any]) -> None:
    atts = evidence()["attestations"]
    atts[1] = {**atts[1], **bad}
    assert ev(evidence(attestations=atts)) == [("RELEASE_EVIDENCE_INVALID",
                                                "Invalid sbom evidence.")]


def test_unknown_or_missing_kinds() -> None:
    atts = evidence()["attestations"]
    assert ev(evidence(attestations=[*atts[:3], {"kind": "slsa"}, "x"])) == [
        ("RELEASE_EVIDENCE_INVALID", "Release attestation kind is invalid."),
        ("RELEASE_EVIDENCE_INVALID", "Release attestation must be an object."),
        ("RELEASE_EVIDENCE_MISSING", "Missing vulnerability-policy evidence."),
        ("RELEASE_EVIDENCE_MISSING", "Missing release-authorization evidence.")]


@pytest.mark.parametrize("field", ["sourceRevision", "version", "configurationDigest",
                                   "ociIndexDigest"])
def test_evidence_bound_to_another_fence(field: str) -> None:
    assert ev(evidence(**{field: "other"})) == [
        ("RELEASE_EVIDENCE_INVALID",
         "Release evidence is not bound to the requested deployment fence.")]


def test_release_authorized_must_be_true_itself() -> None:
    assert ev(evidence(releaseAuthorized=1)) == [
        ("RELEASE_NOT_AUTHORIZED", "Release authorization evidence is explicitly false.")]


def test_normalize_sha256_digest() -> None:
    assert normalize_sha256_digest("  SHA256:" + "AB" * 32 + " ") == "sha256:" + "ab" * 32
    assert normalize_sha256_digest("sha256:" + "a" * 63) is None
    assert normalize_sha256_digest("sha512:" + "a" * 64) is None
