"""core.greenfield: the intent digest, the local preflight blockers and the wire values.

The intent digest is stable across everything that is not meaning (key order, comments,
flow or block style, quoting, the order of set-like lists, defaults written out) and
changes with any value. The local blockers are checked against a line-by-line port of the
seed's own validators (``validateDeploymentPreflightRequest`` and
``validateDeploymentReleaseEvidence``, seed 002) applied to the request
``preflight_request`` builds: the repo refuses locally exactly what the control plane
would refuse of the same request, with the same codes.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core import greenfield
from reconciler.core.codes import UpstreamBlockerCode as B
from reconciler.core.desired import Attestation, EvidenceKind, Service
from reconciler.core.greenfield import Origin, PreflightBlocker
from reconciler.shell import loading, validating

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "ledger.yaml"
LEDGER = FIXTURE.read_text(encoding="utf-8")
REV = "0123456789abcdef0123456789abcdef01234567"
OTHER = "sha256:" + "b" * 64


def load(text: str) -> Service:
    documents, problems = loading.parse_bytes(text.encode(), "services/x.yaml")
    assert not problems, problems
    model, diagnostics = validating.validate_document(documents[0])
    assert isinstance(model, Service), diagnostics
    return model


BASE = load(LEDGER)


def digest(text: str) -> str:
    return greenfield.intent_digest(load(text))


# --------------------------------------------------------------------------- intent digest

MINIMAL = """\
apiVersion: reconcile/v1
kind: Service
name: ledger
serviceId: svc-ledger
appId: ledger
release:
  registryHost: registry.sandbox.test
  repository: shop/ledger
  digest: sha256:9a5afa418cac614e5f9b4f6bbfb949a3612fd4e22e68671b0eea81590838116f
  version: 1.0.0
  evidence:
    - {kind: sbom, statementDigest: "sha256:%s", subjectDigest: "sha256:9a5afa418cac614e5f9b4f6bbfb949a3612fd4e22e68671b0eea81590838116f", verifier: v, verifiedAt: 1}
create:
  namespace: ledger
  corestore: [{capability: database, resourceName: ledger-db}]
egress:
  - host: api.example.com
""" % ("c" * 64)  # noqa: E501


def test_the_canonical_form_is_exactly_the_documented_one() -> None:
    service = load(MINIMAL)
    expected = (
        '{"apiVersion":"reconcile/v1","appId":"ledger",'
        '"create":{"corestore":[{"capability":"database","resourceName":"ledger-db"}],'
        '"namespace":"ledger"},"egress":[{"host":"api.example.com"}],"kind":"Service",'
        '"name":"ledger","release":{"digest":"sha256:9a5afa418cac614e5f9b4f6bbfb949a3612fd4e2'
        '2e68671b0eea81590838116f","evidence":[{"kind":"sbom","statementDigest":"sha256:'
        + "c" * 64 + '","subjectDigest":"sha256:9a5afa418cac614e5f9b4f6bbfb949a3612fd4e22e6'
        '8671b0eea81590838116f","verifiedAt":1,"verifier":"v"}],"registryHost":'
        '"registry.sandbox.test","repository":"shop/ledger","version":"1.0.0"},'
        '"serviceId":"svc-ledger"}'
    )
    assert greenfield.canonical_json(service) == expected
    assert greenfield.intent_digest(service) == \
        "sha256:" + hashlib.sha256(expected.encode()).hexdigest()


def test_the_fixture_digest_is_pinned() -> None:
    # A change of the canonical form changes every greenfield fence: it must be deliberate.
    assert greenfield.intent_digest(BASE) == \
        "sha256:3d5e4c06408388d0e539e691265adbc660b1999bb9f3229de9b5f3b4d88c7930"


SAME_MEANING = {
    "key-order": MINIMAL.replace("name: ledger\nserviceId: svc-ledger\n",
                                 "serviceId: svc-ledger\nname: ledger\n")
                        .replace("apiVersion: reconcile/v1\nkind: Service\n",
                                 "kind: Service\napiVersion: reconcile/v1\n"),
    "nested-key-order": MINIMAL.replace(
        "  registryHost: registry.sandbox.test\n  repository: shop/ledger\n",
        "  repository: shop/ledger\n  registryHost: registry.sandbox.test\n"),
    "comments": "# a comment\n" + MINIMAL.replace("appId: ledger\n",
                                                   "appId: ledger  # trailing\n# own line\n"),
    "flow-to-block": MINIMAL.replace(
        "  corestore: [{capability: database, resourceName: ledger-db}]\n",
        "  corestore:\n    - capability: database\n      resourceName: ledger-db\n"),
    "block-to-flow": MINIMAL.split("release:\n", 1)[0] + (
        "release: {registryHost: registry.sandbox.test, repository: shop/ledger,\n"
        "  digest: sha256:9a5afa418cac614e5f9b4f6bbfb949a3612fd4e22e68671b0eea81590838116f,\n"
        "  version: 1.0.0, evidence: [{kind: sbom, statementDigest: \"sha256:" + "c" * 64
        + "\",\n  subjectDigest: \"sha256:9a5afa418cac614e5f9b4f6bbfb949a3612fd4e22e68671b0"
        "eea81590838116f\", verifier: v, verifiedAt: 1}]}\n"
        "create: {namespace: ledger, corestore: [{capability: database, resourceName: "
        "ledger-db}]}\negress: [{host: api.example.com}]\n"),
    "quoting": MINIMAL.replace("name: ledger\n", "name: 'ledger'\n")
                      .replace("version: 1.0.0", 'version: "1.0.0"'),
    "explicit-defaults": MINIMAL.replace("appId: ledger\n", "appId: ledger\nimmutable: true\n")
                                .replace("  - host: api.example.com\n",
                                         "  - host: api.example.com\n    port: 443\n"),
    "explicit-empty-corestore": MINIMAL.replace(
        "  corestore: [{capability: database, resourceName: ledger-db}]\n", "  corestore: []\n"),
    "document-marker": "---\n" + MINIMAL + "...\n",
}


@pytest.mark.parametrize("name", sorted(SAME_MEANING))
def test_what_is_not_meaning_does_not_change_the_digest(name: str) -> None:
    text = SAME_MEANING[name]
    assert text != MINIMAL
    reference = MINIMAL
    if name == "explicit-empty-corestore":
        reference = MINIMAL.replace(
            "  corestore: [{capability: database, resourceName: ledger-db}]\n", "")
    assert digest(text) == digest(reference)


def test_the_order_of_set_like_lists_does_not_change_the_digest() -> None:
    evidence = list(BASE.release.evidence)
    reordered = BASE.model_copy(update={
        "release": BASE.release.model_copy(update={"evidence": tuple(reversed(evidence))})})
    assert greenfield.intent_digest(reordered) == greenfield.intent_digest(BASE)
    two = MINIMAL.replace("egress:\n  - host: api.example.com\n",
                          "egress:\n  - host: api.example.com\n  - host: b.example.com\n")
    swapped = MINIMAL.replace("egress:\n  - host: api.example.com\n",
                              "egress:\n  - host: b.example.com\n  - host: api.example.com\n")
    assert digest(two) == digest(swapped)
    resources = ("  corestore: [{capability: database, resourceName: a},"
                 " {capability: objectstorage, resourceName: b}]\n")
    flipped = ("  corestore: [{capability: objectstorage, resourceName: b},"
               " {capability: database, resourceName: a}]\n")
    line = "  corestore: [{capability: database, resourceName: ledger-db}]\n"
    assert digest(MINIMAL.replace(line, resources)) == digest(MINIMAL.replace(line, flipped))


CHANGED_MEANING = {
    "name": ("name: ledger\n", "name: ledger2\n"),
    "service-id": ("serviceId: svc-ledger", "serviceId: svc-ledger2"),
    "app-id": ("appId: ledger", "appId: ledger2"),
    "version": ("version: 1.0.0", "version: 1.0.1"),
    "tag-added": ("  version: 1.0.0\n", "  version: 1.0.0\n  tag: v1.0.0\n"),
    "repository": ("repository: shop/ledger", "repository: shop/ledger2"),
    "namespace": ("namespace: ledger", "namespace: ledger2"),
    "resource-name": ("resourceName: ledger-db", "resourceName: ledger-db2"),
    "capability": ("capability: database", "capability: objectstorage"),
    "verifier": ("verifier: v,", "verifier: w,"),
    "verified-at": ("verifiedAt: 1}", "verifiedAt: 2}"),
    "statement": ("c" * 64, "d" * 64),
    "port": ("  - host: api.example.com\n", "  - host: api.example.com\n    port: 8443\n"),
    "egress-omitted": ("egress:\n  - host: api.example.com\n", ""),
    "egress-revoke-all": ("egress:\n  - host: api.example.com\n", "egress: []\n"),
    "no-create": ("create:\n  namespace: ledger\n  corestore: [{capability: database, "
                  "resourceName: ledger-db}]\n", ""),
    "media-type": ("  version: 1.0.0\n", "  version: 1.0.0\n  mediaType: "
                   "application/vnd.oci.image.index.v1+json\n"),
}


@pytest.mark.parametrize("name", sorted(CHANGED_MEANING))
def test_any_change_of_a_value_changes_the_digest(name: str) -> None:
    old, new = CHANGED_MEANING[name]
    assert old in MINIMAL
    assert digest(MINIMAL.replace(old, new)) != digest(MINIMAL)


def test_egress_omitted_and_revoke_all_differ() -> None:
    omitted = MINIMAL.replace("egress:\n  - host: api.example.com\n", "")
    revoke = MINIMAL.replace("egress:\n  - host: api.example.com\n", "egress: []\n")
    assert digest(omitted) != digest(revoke)


_KEYS = st.permutations(["apiVersion", "kind", "name", "serviceId", "appId", "release",
                         "create", "egress"])


def _yaml_scalar(value: object, quote: bool) -> str:
    if isinstance(value, str):
        return json.dumps(value) if quote else value
    return json.dumps(value)


def _emit(value: Any, order: list[str] | None, flow: bool, quote: bool, indent: int) -> str:
    """A YAML rendering of a JSON-like value: keys in ``order`` where given, flow or block,
    strings quoted or plain, comments sprinkled in block style."""
    pad = " " * indent
    if isinstance(value, dict):
        keys = [k for k in (order or []) if k in value] + sorted(set(value) - set(order or []))
        if flow:
            return "{" + ", ".join(f"{k}: {_emit(value[k], None, True, quote, 0)}"
                                   for k in keys) + "}"
        lines = []
        for k in keys:
            v = value[k]
            if isinstance(v, dict | list) and v:
                lines.append(f"{pad}{k}:  # {k}\n{_emit(v, None, False, quote, indent + 2)}")
            else:
                lines.append(f"{pad}{k}: {_emit(v, None, True, quote, 0)}")
        return "\n".join(lines)
    if isinstance(value, list):
        if flow or not value:
            return "[" + ", ".join(_emit(v, None, True, quote, 0) for v in value) + "]"
        return "\n".join(f"{pad}- {_emit(v, None, True, quote, 0)}" for v in value)
    return _yaml_scalar(value, quote)


@settings(max_examples=60, deadline=None)
@given(order=_KEYS, flow=st.booleans(), quote=st.booleans(), defaults=st.booleans(),
       shuffle=st.randoms(use_true_random=False))
def test_renderings_of_one_document_have_one_digest(
        order: list[str], flow: bool, quote: bool, defaults: bool, shuffle: Any) -> None:
    value = json.loads(json.dumps(BASE.model_dump(mode="json", by_alias=True,
                                                  exclude_none=True)))
    if not defaults:
        value.pop("immutable", None)
        for destination in value["egress"]:
            destination.pop("port", None)
    shuffle.shuffle(value["release"]["evidence"])
    text = _emit(value, order, flow, quote, 0) + "\n"
    assert digest(text) == greenfield.intent_digest(BASE)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_changing_any_one_string_value_changes_the_digest(data: st.DataObject) -> None:
    value = json.loads(json.dumps(BASE.model_dump(mode="json", by_alias=True,
                                                  exclude_none=True)))
    paths: list[tuple[Any, Any]] = []

    def walk(node: Any) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in items:
            if isinstance(child, dict | list):
                walk(child)
            elif isinstance(child, str) and key not in ("apiVersion", "kind"):
                paths.append((node, key))

    walk(value)
    node, key = data.draw(st.sampled_from(paths))
    old = node[key]
    if old.startswith("sha256:"):
        new = "sha256:" + data.draw(st.text("0123456789abcdef", min_size=64, max_size=64))
    elif key == "version":
        new = data.draw(st.sampled_from(["1.0.1", "2.0.0", "1.0.0-rc.1", "1.0.0+b1"]))
    else:
        new = old + data.draw(st.sampled_from(["x", "1", "-b"]))
    if new == old:
        return
    node[key] = new
    try:
        changed = Service.model_validate_json(json.dumps(value))
    except ValueError:
        return  # e.g. a subject digest no longer bound: no document to digest
    assert greenfield.intent_digest(changed) != greenfield.intent_digest(BASE)


# --------------------------------------------------------------------------- the seed's validators

_FULL_REVISION = re.compile(r"^[a-f0-9]{40}$")
_NAMESPACE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
_SEMVER = re.compile(
    r"^(?:0|[1-9][0-9]*)\.(?:0|[1-9][0-9]*)\.(?:0|[1-9][0-9]*)(?:-(?:0|[1-9][0-9]*|[0-9]*"
    r"[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*))*)?(?:\+"
    r"[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$")
_KINDS = ["provenance", "sbom", "signature", "vulnerability-policy", "release-authorization"]


def _normal(digest: object) -> bool:
    return isinstance(digest, str) and \
        re.fullmatch(r"sha256:[a-f0-9]{64}", digest.strip().lower()) is not None


def seed_request_blockers(request: dict[str, Any]) -> list[str]:
    """``validateDeploymentPreflightRequest`` (seed 002), code by code."""
    codes = []
    for key in ("requestId", "serviceId"):
        v = request.get(key)
        if not isinstance(v, str) or not v.strip() or len(v) > 200:
            codes.append("INVALID_REQUEST")
    rev = request.get("sourceRevision")
    if not isinstance(rev, str) or not _FULL_REVISION.search(rev):
        codes.append("SOURCE_REVISION_INVALID")
    if not isinstance(request.get("sourceDirty"), bool):
        codes.append("INVALID_REQUEST")
    elif request["sourceDirty"]:
        codes.append("SOURCE_WORKTREE_DIRTY")
    version = request.get("version")
    if not isinstance(version, str) or len(version) > 100 or not _SEMVER.search(version):
        codes.append("VERSION_NOT_RESERVED")
    namespace = request.get("proposedNamespace")
    if not isinstance(namespace, str) or not _NAMESPACE.search(namespace):
        codes.append("NAMESPACE_NOT_RESERVED")
    if not _normal(request.get("intentDigest")):
        codes.append("INTENT_DIGEST_INVALID")
    resources = request.get("proposedCorestoreResources")
    listed = resources if isinstance(resources, list) else []
    if not isinstance(resources, list) or len(listed) > 8 or any(
            not isinstance(r, dict) or r.get("capability") not in ("database", "objectstorage")
            or not isinstance(r.get("resourceName"), str)
            or not _NAMESPACE.search(r["resourceName"]) for r in listed):
        codes.append("INVALID_REQUEST")
    keys = [f"{r.get('capability')}:{r.get('resourceName')}" for r in listed
            if isinstance(r, dict)]
    if len(set(keys)) != len(keys):
        codes.append("INVALID_REQUEST")
    if "ociIndexDigest" in request and not _normal(request["ociIndexDigest"]):
        codes.append("OCI_INDEX_DIGEST_REQUIRED")
    if request.get("greenfield") is not True:
        codes.append("WOULD_REPLACE_EXISTING_STATE")
    return codes


def seed_evidence_blockers(evidence: Any, *, source_revision: str, version: str,
                           configuration_digest: str, oci_index_digest: str) -> list[str]:
    """``validateDeploymentReleaseEvidence`` (seed 002), code by code."""
    if not isinstance(evidence, dict):
        return ["RELEASE_EVIDENCE_INVALID"]
    codes = []
    if evidence.get("releaseAuthorized") is not True:
        codes.append("RELEASE_NOT_AUTHORIZED")
    if (evidence.get("sourceRevision"), evidence.get("version"),
            evidence.get("configurationDigest"), evidence.get("ociIndexDigest")) != (
            source_revision, version, configuration_digest, oci_index_digest):
        codes.append("RELEASE_EVIDENCE_INVALID")
    seen = set()
    attestations = evidence.get("attestations")
    if not isinstance(attestations, list):
        codes.append("RELEASE_EVIDENCE_INVALID")
        attestations = []
    for a in attestations:
        if not isinstance(a, dict):
            codes.append("RELEASE_EVIDENCE_INVALID")
            continue
        if a.get("kind") not in _KINDS:
            codes.append("RELEASE_EVIDENCE_INVALID")
            continue
        seen.add(a["kind"])
        at = a.get("verifiedAt")
        if (a.get("subjectDigest") != oci_index_digest or not _normal(a.get("statementDigest"))
                or not isinstance(a.get("verifier"), str) or not a["verifier"].strip()
                or not isinstance(at, int) or isinstance(at, bool)
                or not 1 <= at <= 2**53 - 1):
            codes.append("RELEASE_EVIDENCE_INVALID")
    codes += ["RELEASE_EVIDENCE_MISSING" for kind in _KINDS if kind not in seen]
    return codes


#: What a control plane reports as its configuration digest (its own, not the intent's).
CONFIGURATION = "sha256:" + "c0" * 32


def seed_codes(service: Service, revision: str, dirty: bool) -> set[str]:
    request = dict(greenfield.preflight_request(service, request_id="req-1",
                                                source_revision=revision, source_dirty=dirty,
                                                configuration_digest=CONFIGURATION))
    codes = seed_request_blockers(request)
    codes += seed_evidence_blockers(
        request["releaseEvidence"], source_revision=revision, version=request["version"],
        configuration_digest=CONFIGURATION, oci_index_digest=request["ociIndexDigest"])
    return set(codes)


def local_codes(service: Service, revision: str, dirty: bool) -> set[str]:
    return {b.code for b in greenfield.local_blockers(
        service, source_revision=revision, source_dirty=dirty, require_evidence=True)}


def with_evidence(service: Service, evidence: tuple[Attestation, ...]) -> Service:
    # model_copy does not validate: how a Service the model would refuse reaches the
    # blockers, which must fail closed on their own.
    return service.model_copy(update={
        "release": service.release.model_copy(update={"evidence": evidence})})


_ATTESTATIONS = st.lists(
    st.tuples(st.sampled_from(list(EvidenceKind)), st.booleans(), st.booleans()),
    max_size=7)


@settings(max_examples=150, deadline=None)
@given(picks=_ATTESTATIONS, revision=st.sampled_from([REV, REV.upper(), REV[:39], "", "x" * 40]),
       dirty=st.booleans())
def test_local_blockers_are_what_the_seed_would_say_of_the_request(
        picks: list[tuple[EvidenceKind, bool, bool]], revision: str, dirty: bool) -> None:
    by_kind = {a.kind: a for a in BASE.release.evidence}
    evidence = []
    for kind, bound, valid in picks:
        attestation = by_kind[kind]
        update: dict[str, Any] = {}
        if not bound:
            update["subject_digest"] = OTHER
        if not valid:
            update["verified_at"] = 0
        evidence.append(attestation.model_copy(update=update))
    service = with_evidence(BASE, tuple(evidence))
    local, seed = local_codes(service, revision, dirty), seed_codes(service, revision, dirty)
    # One stricter rule: the seed counts kinds into a set, the repo allows one per kind.
    twice = len({kind for kind, _, _ in picks}) < len(picks)
    assert local == seed | ({"RELEASE_EVIDENCE_INVALID"} if twice else set())


def test_the_complete_fixture_has_no_local_blocker_and_the_seed_agrees() -> None:
    assert greenfield.local_blockers(BASE, source_revision=REV, source_dirty=False,
                                     require_evidence=True) == ()
    assert seed_codes(BASE, REV, False) == set()


def blockers(service: Service, *, revision: str = REV, dirty: bool = False,
             require: bool = True) -> list[tuple[str, str]]:
    found = greenfield.local_blockers(service, source_revision=revision, source_dirty=dirty,
                                      require_evidence=require)
    assert all(b.origin is Origin.LOCAL and b.known is not None for b in found)
    return [(b.code, b.message) for b in found]


def test_each_missing_kind_is_named() -> None:
    only = with_evidence(BASE, BASE.release.evidence[:2])
    found = blockers(only)
    assert found == [
        ("RELEASE_EVIDENCE_MISSING", "Missing signature evidence."),
        ("RELEASE_EVIDENCE_MISSING", "Missing vulnerability-policy evidence."),
        ("RELEASE_EVIDENCE_MISSING", "Missing release-authorization evidence."),
        ("RELEASE_NOT_AUTHORIZED", "Release authorization evidence is missing, so the release "
         "is not authorized (releaseAuthorized would be false)."),
    ]
    # Not required (an existing service's promotion without the policy): nothing missing.
    assert blockers(only, require=False) == []
    none = with_evidence(BASE, ())
    assert [m for c, m in blockers(none) if c == "RELEASE_EVIDENCE_MISSING"] == [
        f"Missing {kind.value} evidence." for kind in EvidenceKind]


def test_evidence_of_another_image_is_invalid_naming_both_digests() -> None:
    evidence = list(BASE.release.evidence)
    evidence[1] = evidence[1].model_copy(update={"subject_digest": OTHER})
    found = blockers(with_evidence(BASE, tuple(evidence)), require=False)
    assert found == [("RELEASE_EVIDENCE_INVALID",
                      f"Invalid sbom evidence: bound to '{OTHER}' but the release pins "
                      f"'{BASE.release.digest}' (release.evidence[1].subjectDigest).")]


@pytest.mark.parametrize(("update", "says"), [
    ({"statement_digest": "sha256:abc"}, "statementDigest is not a canonical sha256 digest"),
    ({"verifier": "  "}, "verifier is blank"),
    ({"verified_at": 0}, "verifiedAt is not a safe integer of at least 1"),
    ({"verified_at": 2**53}, "verifiedAt is not a safe integer of at least 1"),
])
def test_malformed_attestations_fail_closed(update: dict[str, Any], says: str) -> None:
    evidence = list(BASE.release.evidence)
    evidence[0] = evidence[0].model_copy(update=update)
    assert blockers(with_evidence(BASE, tuple(evidence))) == [
        ("RELEASE_EVIDENCE_INVALID", f"Invalid provenance evidence: {says} "
                                     "(release.evidence[0]).")]


def test_a_kind_twice_is_invalid() -> None:
    evidence = (*BASE.release.evidence, BASE.release.evidence[0])
    assert blockers(with_evidence(BASE, evidence)) == [
        ("RELEASE_EVIDENCE_INVALID", "Invalid provenance evidence: listed twice "
                                     "(release.evidence[5]).")]


def test_source_revision_and_dirty_worktree() -> None:
    assert [c for c, _ in blockers(BASE, revision="abc1234")] == ["SOURCE_REVISION_INVALID"]
    assert [c for c, _ in blockers(BASE, revision=REV.upper())] == ["SOURCE_REVISION_INVALID"]
    assert [c for c, _ in blockers(BASE, revision=REV + "\n")] == ["SOURCE_REVISION_INVALID"]
    assert [c for c, _ in blockers(BASE, dirty=True)] == ["SOURCE_WORKTREE_DIRTY"]


def test_version_and_namespace_must_be_declared() -> None:
    no_version = BASE.model_copy(update={
        "release": BASE.release.model_copy(update={"version": None})})
    assert blockers(no_version) == [
        ("VERSION_NOT_RESERVED", "A canonical semantic release version is required: declare "
                                 "release.version (like 1.0.0).")]
    bad_version = BASE.model_copy(update={
        "release": BASE.release.model_copy(update={"version": "v1"})})
    assert [c for c, _ in blockers(bad_version)] == ["VERSION_NOT_RESERVED"]
    no_create = BASE.model_copy(update={"create": None})
    assert blockers(no_create) == [
        ("NAMESPACE_NOT_RESERVED", "The proposed namespace is missing: declare "
                                   "create.namespace.")]
    assert BASE.create is not None
    bad_namespace = BASE.model_copy(update={
        "create": BASE.create.model_copy(update={"namespace": "Led_ger"})})
    assert [c for c, _ in blockers(bad_namespace)] == ["NAMESPACE_NOT_RESERVED"]


def test_oci_index_digest_must_be_canonical() -> None:
    bad = BASE.model_copy(update={"release": BASE.release.model_copy(
        update={"digest": BASE.release.digest.upper()})})
    codes = [c for c, _ in blockers(bad, require=False)]
    assert "OCI_INDEX_DIGEST_REQUIRED" in codes
    # ... and every attestation is now about another image.
    assert codes.count("RELEASE_EVIDENCE_INVALID") == 5


def test_corestore_rules_fail_closed() -> None:
    assert BASE.create is not None
    resource = load(MINIMAL).create
    assert resource is not None
    twice = BASE.create.model_copy(update={"corestore": resource.corestore * 2})
    assert blockers(BASE.model_copy(update={"create": twice})) == [
        ("INVALID_REQUEST", "Proposed Corestore resources must be unique.")]
    nine = BASE.create.model_copy(update={"corestore": tuple(
        resource.corestore[0].model_copy(update={"resource_name": f"db{i}"}) for i in range(9))})
    assert [c for c, _ in blockers(BASE.model_copy(update={"create": nine}))] == [
        "INVALID_REQUEST"]


# --------------------------------------------------------------------------- wire values


def test_the_probe_request_carries_no_evidence() -> None:
    """The first preflight of a creation: no ``releaseEvidence`` (the control plane names
    every kind missing and reports the configuration digest it computes)."""
    probe = greenfield.preflight_request(BASE, request_id="plan-0", source_revision=REV,
                                         source_dirty=False)
    bound = greenfield.preflight_request(BASE, request_id="plan-0", source_revision=REV,
                                         source_dirty=False, configuration_digest=CONFIGURATION)
    assert "releaseEvidence" not in probe
    assert {k: v for k, v in bound.items() if k != "releaseEvidence"} == probe


def test_the_preflight_request_is_the_seed_shape() -> None:
    request = greenfield.preflight_request(BASE, request_id="plan-1", source_revision=REV,
                                           source_dirty=False, configuration_digest=CONFIGURATION)
    intent = greenfield.intent_digest(BASE)
    assert request == {
        "requestId": "plan-1",
        "serviceId": "svc-ledger",
        "sourceRevision": REV,
        "sourceDirty": False,
        "version": "1.0.0",
        "intentDigest": intent,
        "proposedNamespace": "ledger",
        "proposedCorestoreResources": [],
        "ociIndexDigest": BASE.release.digest,
        "releaseTag": "v1.0.0",
        "releaseEvidence": {
            "sourceRevision": REV,
            "version": "1.0.0",
            # The control plane's digest, never the intent digest (a test of issue 24).
            "configurationDigest": CONFIGURATION,
            "ociIndexDigest": BASE.release.digest,
            "releaseAuthorized": True,
            "attestations": [
                {"kind": a.kind.value, "statementDigest": a.statement_digest,
                 "subjectDigest": BASE.release.digest, "verifier": "sandbox-verifier",
                 "verifiedAt": 1780000000000} for a in BASE.release.evidence],
        },
        "greenfield": True,
    }
    json.dumps(request, allow_nan=False)  # JSON-ready as it stands


def test_the_request_does_not_depend_on_the_order_in_the_file() -> None:
    evidence = tuple(reversed(BASE.release.evidence))
    resources = load(MINIMAL.replace(
        "  corestore: [{capability: database, resourceName: ledger-db}]\n",
        "  corestore: [{capability: objectstorage, resourceName: b},"
        " {capability: database, resourceName: a}]\n"))
    flipped = load(MINIMAL.replace(
        "  corestore: [{capability: database, resourceName: ledger-db}]\n",
        "  corestore: [{capability: database, resourceName: a},"
        " {capability: objectstorage, resourceName: b}]\n"))

    def request(service: Service) -> greenfield.PreflightRequestData:
        return greenfield.preflight_request(service, request_id="r", source_revision=REV,
                                            source_dirty=False,
                                            configuration_digest=CONFIGURATION)

    assert request(with_evidence(BASE, evidence)) == request(BASE)
    assert request(resources) == request(flipped)
    assert request(resources)["proposedCorestoreResources"] == [
        {"capability": "database", "resourceName": "a"},
        {"capability": "objectstorage", "resourceName": "b"}]


def test_release_authorized_follows_the_release_authorization_attestation() -> None:
    without = with_evidence(BASE, BASE.release.evidence[:4])
    evidence = greenfield.release_evidence(without, source_revision=REV,
                                           configuration_digest=CONFIGURATION)
    assert evidence["releaseAuthorized"] is False
    assert [a["kind"] for a in evidence["attestations"]] == [
        "provenance", "sbom", "signature", "vulnerability-policy"]
    other = greenfield.release_evidence(BASE, source_revision=REV,
                                        configuration_digest=OTHER)
    assert other["configurationDigest"] == OTHER and other["releaseAuthorized"] is True


def test_no_tag_no_release_tag() -> None:
    untagged = BASE.model_copy(update={"release": BASE.release.model_copy(update={"tag": None})})
    request = greenfield.preflight_request(untagged, request_id="r", source_revision=REV,
                                           source_dirty=True)
    assert "releaseTag" not in request and request["sourceDirty"] is True


def test_a_request_needs_version_and_create() -> None:
    with pytest.raises(greenfield.NotRequestable, match="declares no create"):
        greenfield.preflight_request(BASE.model_copy(update={"create": None}), request_id="r",
                                     source_revision=REV, source_dirty=False)
    no_version = BASE.model_copy(update={
        "release": BASE.release.model_copy(update={"version": None})})
    with pytest.raises(greenfield.NotRequestable, match=r"release\.version"):
        greenfield.greenfield_fence(no_version, source_revision=REV,
                                    configuration_digest=CONFIGURATION)
    with pytest.raises(greenfield.NotRequestable, match=r"release\.version"):
        greenfield.release_evidence(no_version, source_revision=REV,
                                    configuration_digest=CONFIGURATION)
    with pytest.raises(ValueError, match="request id"):
        greenfield.preflight_request(BASE, request_id=" ", source_revision=REV,
                                     source_dirty=False)
    with pytest.raises(ValueError, match="request id"):
        greenfield.preflight_request(BASE, request_id="r" * 201, source_revision=REV,
                                     source_dirty=False)


def test_the_fence_is_what_the_preflight_of_the_request_yields() -> None:
    request = greenfield.preflight_request(BASE, request_id="r", source_revision=REV,
                                           source_dirty=False, configuration_digest=CONFIGURATION)
    fence = greenfield.greenfield_fence(BASE, source_revision=REV,
                                        configuration_digest=CONFIGURATION)
    assert fence == {
        "sourceServiceId": request["serviceId"],
        "sourceRevision": request["sourceRevision"],
        "version": request["version"],
        "ociIndexDigest": BASE.release.digest,
        # The control plane's configuration digest, as its report gave it.
        "configurationDigest": CONFIGURATION,
        "targetNamespace": request["proposedNamespace"],
    }


# --------------------------------------------------------------------------- upstream blockers


def test_an_upstream_code_outside_the_list_is_kept_verbatim_and_sanitized() -> None:
    known = PreflightBlocker.from_upstream("NAMESPACE_COLLISION", "Namespace ledger is taken.")
    assert known.known is B.NAMESPACE_COLLISION and known.origin is Origin.CONTROL_PLANE
    assert known.message == "Namespace ledger is taken."
    new = PreflightBlocker.from_upstream("QUOTA_EXHAUSTED", "No room.")
    assert new.code == "QUOTA_EXHAUSTED" and new.known is None
    hostile = PreflightBlocker.from_upstream("X\x1b[2J" + "Y" * 500, "evil\x1b]0;title\x07")
    assert "\x1b" not in hostile.code + hostile.message
    assert hostile.code.startswith("X\\x1b[2JYYY") and len(hostile.code) < 130
    assert hostile.message == "evil\\x1b]0;title\\x07"


#: ``TDeploymentPreflightBlockerCode`` as seed 002 spells it, in its order.
SEED_CODES = [
    "INVALID_REQUEST", "AUTHORIZATION_MISSING", "SOURCE_REVISION_INVALID",
    "SOURCE_WORKTREE_DIRTY", "VERSION_NOT_RESERVED", "VERSION_COLLISION",
    "NAMESPACE_NOT_RESERVED", "NAMESPACE_COLLISION", "NAMESPACE_NOT_PROVEN_BLANK",
    "CONFIGURATION_DIGEST_INVALID", "INTENT_DIGEST_INVALID", "CURRENT_REFERENCE_MUTABLE",
    "CURRENT_RUNTIME_DIGEST_MISSING", "OCI_INDEX_DIGEST_REQUIRED", "OCI_INDEX_NOT_FOUND",
    "OCI_INDEX_MEDIA_TYPE_REQUIRED", "OCI_PLATFORM_MISSING", "OCI_PLATFORM_MANIFEST_MISSING",
    "IMMUTABLE_RELEASE_TAG_REQUIRED", "IMMUTABLE_RELEASE_TAG_NOT_RESERVED",
    "RELEASE_EVIDENCE_MISSING", "RELEASE_EVIDENCE_INVALID", "RELEASE_NOT_AUTHORIZED",
    "GREENFIELD_EXECUTION_UNAVAILABLE", "ROUTE_PROMOTION_FENCE_UNAVAILABLE",
    "POST_DEPLOYMENT_VERIFICATION_UNAVAILABLE", "WOULD_REPLACE_EXISTING_STATE",
    "CORESTORE_INVENTORY_UNAVAILABLE", "RUNTIME_ATTESTATION_MISMATCH",
]


def test_the_enum_is_the_seeds_closed_list_verbatim() -> None:
    assert [c.value for c in B] == SEED_CODES
    assert all(c.name == c.value for c in B)


# --------------------------------------------------------------------------- the docs page

DOC = Path(__file__).resolve().parents[2] / "docs" / "new-services.md"


def test_the_docs_worked_example_is_what_the_code_computes() -> None:
    text = DOC.read_text(encoding="utf-8")
    blocks = re.findall(r"```(yaml|json)\n(.*?)```", text, flags=re.DOTALL)
    example = next(body for lang, body in blocks if lang == "yaml" and "kind: Service" in body)
    canonical = next(body for lang, body in blocks if lang == "json").strip()
    service = load(example)
    assert greenfield.canonical_json(service) == canonical
    stated = re.search(r"and the intent digest\n`(sha256:[0-9a-f]{64})`", text)
    assert stated is not None
    assert greenfield.intent_digest(service) == stated.group(1) == \
        "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
    # The page lists every upstream code the repo raises locally.
    for code in ("SOURCE_REVISION_INVALID", "SOURCE_WORKTREE_DIRTY", "VERSION_NOT_RESERVED",
                 "NAMESPACE_NOT_RESERVED", "RELEASE_EVIDENCE_MISSING", "RELEASE_NOT_AUTHORIZED",
                 "RELEASE_EVIDENCE_INVALID", "OCI_INDEX_DIGEST_REQUIRED"):
        assert f"| `{code}` |" in text
