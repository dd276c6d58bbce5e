"""Seed 002 (``@serve.zone/interfaces`` 12.0.0, ``deploymentpreflight.ts``), ported line for
line, and the preflight report the sandbox assembles from what it knows.

Owns ``validate_deployment_preflight_request`` and ``validate_deployment_release_evidence``
(the upstream validators: fail closed, same codes, same messages, same order), seed 003's
``normalizeSha256Digest``, ``configuration_digest`` and ``report``: an
``IDeploymentPreflightReport`` (schemaVersion 2) built from the request and a ``Facts``
value the control plane gathers from its state.

The configuration digest is the control plane's own (12.0.0: "Distinguish the client
intent digest from Cloudly's server-computed configuration digest"): the SHA-256 of the
canonical JSON of the configuration record the sandbox would create -- including what
only it knows, the workspace identity (random per sandbox state) and the registry host and
repository it resolved the digest to -- never the client's intent digest. Release evidence
must be bound to it, exactly as the seed's validator says; a client that does not ask
first cannot know it.
JavaScript semantics are kept where Python differs: ``undefined`` is a key that is absent
(``null`` is a value), string lengths count UTF-16 code units, a regex ``$`` never matches
before a trailing newline (``fullmatch``), and ``Number.isSafeInteger`` accepts ``1.0``.

Pure: values in, values out; no I/O, no clock (``now`` is passed in).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from typing import Any

JsonDict = dict[str, Any]

FULL_GIT_REVISION = re.compile(r"[a-f0-9]{40}")
NAMESPACE = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
SEMANTIC_VERSION = re.compile(
    r"(?:0|[1-9][0-9]*)\.(?:0|[1-9][0-9]*)\.(?:0|[1-9][0-9]*)"
    r"(?:-(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
    r"(?:\.(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*))*)?"
    r"(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?")
SHA256_DIGEST = re.compile(r"sha256:[a-f0-9]{64}")
#: A ``Set`` upstream: iteration (and so the order of "Missing ..." blockers) is this order.
REQUIRED_EVIDENCE_KINDS = ("provenance", "sbom", "signature", "vulnerability-policy",
                           "release-authorization")
PREFLIGHT = "deployment:preflight"
CREATE_GREENFIELD = "deployment:create-greenfield"
#: The platform the sandbox's clusters run: an index without it runnable cannot be deployed.
RUNTIME_OS, RUNTIME_ARCHITECTURE = "linux", "amd64"
_SAFE_INTEGER = 2**53 - 1


class _Undefined:
    """JavaScript's ``undefined``: what reading an absent key gives."""

    def __repr__(self) -> str:
        return "undefined"


UNDEFINED = _Undefined()


def _get(record: JsonDict, key: str) -> object:
    return record.get(key, UNDEFINED)


def _js_length(value: str) -> int:
    """``String.prototype.length``: UTF-16 code units, not code points."""
    return len(value.encode("utf-16-le")) // 2


#: ECMAScript WhiteSpace and LineTerminator: what ``String.prototype.trim`` strips. Python's
#: ``str.strip()`` differs (it strips U+001C..U+001F and U+0085, and not U+FEFF).
_JS_WHITESPACE = ("\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
                  "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff")


def _js_trim(value: str) -> str:
    return value.strip(_JS_WHITESPACE)


def _is_record(value: object) -> bool:
    return isinstance(value, dict)


def _js_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _strict_equal(left: object, right: object) -> bool:
    """``===`` on JSON values: no coercion, numbers compare by value, objects by identity."""
    if _js_number(left) and _js_number(right):
        return bool(left == right)
    if isinstance(left, (dict, list)) or isinstance(right, (dict, list)):
        return left is right
    return type(left) is type(right) and left == right


def _js_string(value: object) -> str:
    """``String(value)`` for a JSON value (used only to build de-duplication keys)."""
    if value is UNDEFINED:
        return "undefined"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    if isinstance(value, list):
        return ",".join("" if v is None else _js_string(v) for v in value)
    if isinstance(value, dict):
        return "[object Object]"
    return str(value)


def _is_safe_integer(value: object) -> bool:
    if not _js_number(value):
        return False
    assert isinstance(value, (int, float))
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        return False
    return abs(value) <= _SAFE_INTEGER


def normalize_sha256_digest(digest: str) -> str | None:
    """Seed 003 ``normalizeSha256Digest``: trimmed, lower-cased, or None when malformed."""
    normalized = _js_trim(digest).lower()
    return normalized if SHA256_DIGEST.fullmatch(normalized) else None


def _blocker(code: str, message: str) -> JsonDict:
    return {"code": code, "message": message}


def validate_deployment_preflight_request(request: object) -> list[JsonDict]:
    """Seed 002 ``validateDeploymentPreflightRequest``, line for line."""
    blockers: list[JsonDict] = []
    if not isinstance(request, dict):
        return [_blocker("INVALID_REQUEST", "Deployment preflight request must be an object.")]
    request_id = _get(request, "requestId")
    if (not isinstance(request_id, str) or not _js_trim(request_id)
            or _js_length(request_id) > 200):
        blockers.append(_blocker("INVALID_REQUEST", "A bounded request identifier is required."))
    service_id = _get(request, "serviceId")
    if (not isinstance(service_id, str) or not _js_trim(service_id)
            or _js_length(service_id) > 200):
        blockers.append(_blocker("INVALID_REQUEST", "A bounded service identifier is required."))
    revision = _get(request, "sourceRevision")
    if not isinstance(revision, str) or not FULL_GIT_REVISION.fullmatch(revision):
        blockers.append(_blocker("SOURCE_REVISION_INVALID",
                                 "Source revision must be a full lower-case Git commit SHA."))
    dirty = _get(request, "sourceDirty")
    if not isinstance(dirty, bool):
        blockers.append(_blocker("INVALID_REQUEST", "Source worktree state must be reported."))
    elif dirty:
        blockers.append(_blocker("SOURCE_WORKTREE_DIRTY",
                                 "The source worktree contains uncommitted changes."))
    version = _get(request, "version")
    if (not isinstance(version, str) or _js_length(version) > 100
            or not SEMANTIC_VERSION.fullmatch(version)):
        blockers.append(_blocker("VERSION_NOT_RESERVED",
                                 "A canonical semantic release version is required."))
    namespace = _get(request, "proposedNamespace")
    if not isinstance(namespace, str) or not NAMESPACE.fullmatch(namespace):
        blockers.append(_blocker("NAMESPACE_NOT_RESERVED",
                                 "The proposed namespace is missing or malformed."))
    intent = _get(request, "intentDigest")
    if not isinstance(intent, str) or not normalize_sha256_digest(intent):
        blockers.append(_blocker("INTENT_DIGEST_INVALID",
                                 "Deployment intent digest must be a canonical sha256 digest."))
    raw_resources = _get(request, "proposedCorestoreResources")
    resources: list[object] = raw_resources if isinstance(raw_resources, list) else []
    if (not isinstance(raw_resources, list) or len(resources) > 8
            or any(not isinstance(r, dict)
                   or (not _strict_equal(_get(r, "capability"), "database")
                       and not _strict_equal(_get(r, "capability"), "objectstorage"))
                   or not isinstance(_get(r, "resourceName"), str)
                   or not NAMESPACE.fullmatch(str(_get(r, "resourceName")))
                   for r in resources)):
        blockers.append(_blocker("INVALID_REQUEST", "Proposed Corestore resources are malformed."))
    keys = [f"{_js_string(_get(r, 'capability'))}:{_js_string(_get(r, 'resourceName'))}"
            for r in resources if isinstance(r, dict)]
    if len(set(keys)) != len(keys):
        blockers.append(_blocker("INVALID_REQUEST",
                                 "Proposed Corestore resources must be unique."))
    digest = _get(request, "ociIndexDigest")
    if digest is not UNDEFINED and (not isinstance(digest, str)
                                    or not normalize_sha256_digest(digest)):
        blockers.append(_blocker("OCI_INDEX_DIGEST_REQUIRED",
                                 "OCI index digest must be a canonical sha256 digest."))
    if _get(request, "greenfield") is not True:
        blockers.append(_blocker("WOULD_REPLACE_EXISTING_STATE",
                                 "Only greenfield deployment preflight is supported."))
    return blockers


def validate_deployment_release_evidence(*, evidence: object, source_revision: object,
                                         version: object, configuration_digest: object,
                                         oci_index_digest: object) -> list[JsonDict]:
    """Seed 002 ``validateDeploymentReleaseEvidence``, line for line. The arguments are
    typed loosely because the sandbox passes the request's own (possibly malformed) fields:
    an absent one is ``UNDEFINED``, as upstream."""
    blockers: list[JsonDict] = []
    if not isinstance(evidence, dict):
        return [_blocker("RELEASE_EVIDENCE_INVALID", "Release evidence must be an object.")]
    if _get(evidence, "releaseAuthorized") is not True:
        blockers.append(_blocker("RELEASE_NOT_AUTHORIZED",
                                 "Release authorization evidence is explicitly false."))
    if (not _strict_equal(_get(evidence, "sourceRevision"), source_revision)
            or not _strict_equal(_get(evidence, "version"), version)
            or not _strict_equal(_get(evidence, "configurationDigest"), configuration_digest)
            or not _strict_equal(_get(evidence, "ociIndexDigest"), oci_index_digest)):
        blockers.append(_blocker("RELEASE_EVIDENCE_INVALID",
                                 "Release evidence is not bound to the requested deployment "
                                 "fence."))
    seen: set[str] = set()
    raw = _get(evidence, "attestations")
    attestations: list[object] = raw if isinstance(raw, list) else []
    if not isinstance(raw, list):
        blockers.append(_blocker("RELEASE_EVIDENCE_INVALID",
                                 "Release attestations must be an array."))
    for attestation in attestations:
        if not isinstance(attestation, dict):
            blockers.append(_blocker("RELEASE_EVIDENCE_INVALID",
                                     "Release attestation must be an object."))
            continue
        kind = _get(attestation, "kind")
        if not isinstance(kind, str) or kind not in REQUIRED_EVIDENCE_KINDS:
            blockers.append(_blocker("RELEASE_EVIDENCE_INVALID",
                                     "Release attestation kind is invalid."))
            continue
        seen.add(kind)
        statement = _get(attestation, "statementDigest")
        verifier = _get(attestation, "verifier")
        verified_at = _get(attestation, "verifiedAt")
        if (not _strict_equal(_get(attestation, "subjectDigest"), oci_index_digest)
                or not isinstance(statement, str) or not normalize_sha256_digest(statement)
                or not isinstance(verifier, str) or not _js_trim(verifier)
                or not _js_number(verified_at) or not _is_safe_integer(verified_at)
                or not (isinstance(verified_at, (int, float)) and verified_at >= 1)):
            blockers.append(_blocker("RELEASE_EVIDENCE_INVALID", f"Invalid {kind} evidence."))
    for required in REQUIRED_EVIDENCE_KINDS:
        if required not in seen:
            blockers.append(_blocker("RELEASE_EVIDENCE_MISSING", f"Missing {required} evidence."))
    return blockers


# -- the report --------------------------------------------------------------------------


@dataclass(frozen=True)
class Facts:
    """What the control plane knows that a preflight reads (gathered in one transaction).

    ``service``: the existing ``IService`` with that id, or None (greenfield).
    ``namespace_owner``: the id of another service already using the proposed namespace.
    ``index``: the registry's OCI index with the requested digest (any repository), or None.
    ``released_versions``: versions already released for that service id.
    """

    preflight_granted: bool
    create_granted: bool
    caller: str
    service: JsonDict | None = None
    rollout_status: JsonDict | None = None
    namespace_owner: str | None = None
    namespace_dirty: bool = False
    released_versions: frozenset[str] = frozenset()
    index: JsonDict | None = None
    tag_digest: str | None = None
    greenfield_execution: bool = True
    #: the control plane's workspace (part of every configuration it creates)
    workspace: str = "ws-sandbox"
    #: a platform manifest (not an index) with the requested digest, when no index has it:
    #: ``{registryHost, repository, digest, mediaType, platform}``
    manifest: JsonDict | None = None
    #: a server-side configuration fact outside the request (a fault sets it), folded into
    #: the configuration digest
    configuration_salt: str | None = None


def _str_or(value: object, default: str = "") -> str:
    return value if isinstance(value, str) else default


def _platform_summary(platform: JsonDict) -> JsonDict:
    summary = {"os": platform["os"], "architecture": platform["architecture"],
               "digest": platform.get("digest"), "mediaType": platform.get("mediaType"),
               "runnable": bool(platform.get("runnable")),
               "manifestPresent": bool(platform.get("manifestPresent"))}
    return {k: v for k, v in summary.items() if v is not None}


def _platform_name(platform: JsonDict) -> str:
    return f"{platform['os']}/{platform['architecture']}" + (
        f"/{platform['variant']}" if platform.get("variant") else "")


#: Media types of an image index (seed 003 ``TOciManifestMediaType``).
INDEX_MEDIA_TYPES = ("application/vnd.oci.image.index.v1+json",
                     "application/vnd.docker.distribution.manifest.list.v2+json")


def _oci_blockers(digest: str | None, facts: Facts) -> list[JsonDict]:
    """The OCI checks in the order of the seed's blocker codes: the digest, the index,
    its media type, then its platforms."""
    if digest is None:
        return [_blocker("OCI_INDEX_DIGEST_REQUIRED",
                         "A greenfield deployment needs the OCI index digest it pins.")]
    index = facts.index
    if index is None and facts.manifest is not None:
        manifest = facts.manifest
        return [_blocker(
            "OCI_INDEX_MEDIA_TYPE_REQUIRED",
            f"{digest} is a {manifest.get('platform', 'platform')} manifest "
            f"({manifest.get('mediaType')}) in {manifest.get('repository')}, not an OCI index: "
            "pin the index digest.")]
    if index is None:
        return [_blocker("OCI_INDEX_NOT_FOUND",
                         f"No repository of the registry holds the OCI index {digest}.")]
    if index.get("mediaType") not in INDEX_MEDIA_TYPES:
        return [_blocker("OCI_INDEX_MEDIA_TYPE_REQUIRED",
                         f"{digest} has the media type {index.get('mediaType')}, not an OCI "
                         "index.")]
    blockers: list[JsonDict] = []
    platforms: list[JsonDict] = index.get("platforms", [])
    if not any(p["os"] == RUNTIME_OS and p["architecture"] == RUNTIME_ARCHITECTURE
               and p.get("runnable") for p in platforms):
        blockers.append(_blocker(
            "OCI_PLATFORM_MISSING",
            f"The OCI index {digest} has no runnable {RUNTIME_OS}/{RUNTIME_ARCHITECTURE} "
            "image, the platform the clusters run."))
    for platform in platforms:
        if not platform.get("manifestPresent"):
            blockers.append(_blocker(
                "OCI_PLATFORM_MANIFEST_MISSING",
                f"The {_platform_name(platform)} manifest {platform.get('digest', '')} of "
                f"{digest} is absent from {index['repository']}."))
    return blockers


def _published_evidence_blockers(request: JsonDict, digest: str | None,
                                 facts: Facts) -> list[JsonDict]:
    """Each attestation the request references must be one the registry published for the
    requested digest (kind, statement digest, subject digest and verifier alike)."""
    evidence = request.get("releaseEvidence")
    if not isinstance(evidence, dict) or digest is None or facts.index is None:
        return []
    references = evidence.get("attestations")
    if not isinstance(references, list):
        return []
    published: list[JsonDict] = facts.index.get("attestations", [])
    blockers: list[JsonDict] = []
    for reference in references:
        if not isinstance(reference, dict) or reference.get("kind") not in \
                REQUIRED_EVIDENCE_KINDS:
            continue  # the seed validator already named it
        kind = str(reference["kind"])
        of_kind = [p for p in published if p["kind"] == kind]
        if not of_kind:
            blockers.append(_blocker("RELEASE_EVIDENCE_MISSING",
                                     f"No {kind} evidence was published for {digest}."))
        elif all(p["subjectDigest"] != digest for p in of_kind):
            blockers.append(_blocker(
                "RELEASE_EVIDENCE_INVALID",
                f"The {kind} evidence published with {digest} is bound to another subject "
                f"digest ({of_kind[0]['subjectDigest']})."))
        elif not any(p["subjectDigest"] == digest
                     and p["statementDigest"] == reference.get("statementDigest")
                     and p["subjectDigest"] == reference.get("subjectDigest")
                     and p["verifier"] == reference.get("verifier") for p in of_kind):
            blockers.append(_blocker(
                "RELEASE_EVIDENCE_INVALID",
                f"The {kind} evidence referenced does not match what was published for "
                f"{digest} (statement digest, subject digest or verifier differ)."))
    return blockers


def _evidence_blockers(request: JsonDict, digest: str | None, configuration: object,
                       facts: Facts) -> list[JsonDict]:
    if "releaseEvidence" not in request or request["releaseEvidence"] is None:
        # 12.0.0 fails closed: no evidence is every kind missing, each one named.
        return [_blocker("RELEASE_EVIDENCE_MISSING", f"Missing {kind} evidence.")
                for kind in REQUIRED_EVIDENCE_KINDS]
    blockers = validate_deployment_release_evidence(
        evidence=request["releaseEvidence"], source_revision=_get(request, "sourceRevision"),
        version=_get(request, "version"), configuration_digest=configuration,
        oci_index_digest=_get(request, "ociIndexDigest"))
    if facts.index is not None and digest is not None and not facts.index.get("attestations"):
        return [*blockers, _blocker("RELEASE_EVIDENCE_MISSING",
                                    f"No release evidence was published for {digest}.")]
    return blockers + _published_evidence_blockers(request, digest, facts)


def configuration_digest(request: JsonDict, facts: Facts) -> str:
    """``sha256:`` + the SHA-256 of the canonical JSON (sorted keys, no whitespace) of the
    configuration record a creation from ``request`` would make: the workspace, the
    service id, the version, the namespace and Corestore resources, the image as the
    registry resolved it (host, repository, digest, media type, tag) and the intent the
    client declared. The release evidence and the source revision are not in it: the
    evidence is bound to this digest, and the revision is fenced on its own."""
    index = facts.index or facts.manifest or {}
    resources = request.get("proposedCorestoreResources")
    record: JsonDict = {
        "workspaceIdentity": facts.workspace,
        "serviceId": request.get("serviceId"),
        "version": request.get("version"),
        "namespace": request.get("proposedNamespace"),
        "corestoreResources": sorted(
            (json.dumps(r, sort_keys=True) for r in resources), key=str)
        if isinstance(resources, list) else [],
        "image": {"registryHost": index.get("registryHost"),
                  "repository": index.get("repository"),
                  "digest": request.get("ociIndexDigest"),
                  "mediaType": index.get("mediaType"),
                  "releaseTag": request.get("releaseTag")},
        "intentDigest": request.get("intentDigest"),
    }
    if facts.configuration_salt is not None:
        record["salt"] = facts.configuration_salt
    text = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=str)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def report(request: JsonDict, facts: Facts, *, now: int) -> JsonDict:
    """The ``IDeploymentPreflightReport`` for ``request``: read-only, ``mutationPerformed``
    false, GO only when no blocker stands."""
    blockers: list[JsonDict] = []
    if not facts.preflight_granted:
        blockers.append(_blocker("AUTHORIZATION_MISSING",
                                 f"{facts.caller} lacks {PREFLIGHT} on this service."))
    if not facts.create_granted:
        blockers.append(_blocker("AUTHORIZATION_MISSING",
                                 f"{facts.caller} lacks {CREATE_GREENFIELD} on this service."))
    blockers += validate_deployment_preflight_request(request)
    service = facts.service
    service_id = _str_or(request.get("serviceId"))
    if service is not None:
        blockers.append(_blocker(
            "WOULD_REPLACE_EXISTING_STATE",
            f"Service {service_id} already exists; a greenfield deployment would replace it."))
    namespace = _str_or(request.get("proposedNamespace"))
    well_formed = bool(NAMESPACE.fullmatch(namespace))
    if well_formed and facts.namespace_owner is not None:
        blockers.append(_blocker(
            "NAMESPACE_COLLISION",
            f"Namespace {namespace} is already used by service {facts.namespace_owner}."))
    if well_formed and facts.namespace_dirty:
        blockers.append(_blocker(
            "NAMESPACE_NOT_PROVEN_BLANK",
            f"Namespace {namespace} still holds resources; it is not proven blank."))
    version = _str_or(request.get("version"))
    semver = bool(SEMANTIC_VERSION.fullmatch(version)) and _js_length(version) <= 100
    if semver and version in facts.released_versions:
        blockers.append(_blocker("VERSION_COLLISION",
                                 f"Version {version} was already released for {service_id}."))
    raw_digest = request.get("ociIndexDigest")
    digest = normalize_sha256_digest(raw_digest) if isinstance(raw_digest, str) else None
    if "ociIndexDigest" not in request:
        blockers += _oci_blockers(None, facts)
    elif digest is not None:
        blockers += _oci_blockers(digest, facts)
    if (digest is not None and facts.index is not None and isinstance(
            request.get("releaseTag"), str) and facts.tag_digest != digest):
        blockers.append(_blocker(
            "IMMUTABLE_RELEASE_TAG_NOT_RESERVED",
            f"Tag {request['releaseTag']} of {facts.index['repository']} points at "
            f"{facts.tag_digest or 'nothing'}, not {digest}: it is not reserved for it."))
    # The control plane's own digest of what it would create, never the client's intent.
    configuration = configuration_digest(request, facts)
    blockers += _evidence_blockers(request, digest, configuration, facts)
    if not facts.greenfield_execution:
        blockers.append(_blocker(
            "GREENFIELD_EXECUTION_UNAVAILABLE",
            "This control plane cannot execute a greenfield deployment "
            "(createGreenfieldDeployment is not offered)."))
    data = service["data"] if service is not None else {}
    plan: JsonDict = data.get("imageDeployment") or {}
    status = facts.rollout_status or {}
    index = facts.index or facts.manifest or {}
    resources = request.get("proposedCorestoreResources")
    requested: JsonDict = {
        "digest": digest, "releaseTag": request.get("releaseTag")
        if isinstance(request.get("releaseTag"), str) else None,
        "tagReserved": bool(digest and facts.tag_digest == digest),
        "mediaType": index.get("mediaType"),
        "platforms": [_platform_summary(p) for p in index.get("platforms", [])]}
    current: JsonDict = {
        "tag": data.get("imageVersion") or None, "digest": plan.get("requestedDigest"),
        "imageReference": plan.get("digestPinnedImageReference"), "mutableReference": False,
        "mediaType": plan.get("manifestMediaType"), "platforms": []}
    taken = facts.namespace_owner is not None or facts.namespace_dirty
    return {
        "schemaVersion": 2,
        "decision": "NO-GO" if blockers else "GO",
        "mutationPerformed": False,
        "generatedAt": now,
        "service": {"serviceId": service_id,
                    "serviceName": str(data.get("name", "")),
                    "workspaceIdentity": facts.workspace,
                    "registryHost": str(index.get("registryHost") or plan.get("registryHost", "")),
                    "registryRepository": str(index.get("repository")
                                              or plan.get("repository", "")),
                    "deployOnPush": False},
        "source": {"revision": _str_or(request.get("sourceRevision")),
                   "dirty": request.get("sourceDirty") is not False,
                   "version": version,
                   "intentDigest": _str_or(request.get("intentDigest")),
                   "configurationDigest": configuration},
        "currentImage": {k: v for k, v in current.items() if v is not None},
        "requestedImage": {k: v for k, v in requested.items() if v is not None},
        "runtimeTasks": [],
        "runtimeAttestation": {
            "requiredReplicaCount": int(status.get("requiredReplicaCount", 0)),
            "observedReplicaCount": int(status.get("observedReplicaCount", 0)),
            "healthyReplicaCount": int(status.get("healthyReplicaCount", 0)),
            "verifiedReplicaCount": int(status.get("verifiedReplicaCount", 0)),
            "consistentDigest": status.get("status") in ("succeeded", "rolled-back")},
        "platformBindings": [],
        "corestoreResources": [],
        "proposed": {
            "namespace": namespace,
            "corestoreResources": resources if isinstance(resources, list) else [],
            "namespaceReserved": well_formed and not taken,
            "inventoryComplete": True,
            "namespaceBlank": well_formed and not taken,
            "versionReserved": semver and version not in facts.released_versions,
            "wouldReplaceExistingState": service is not None},
        "authorizationChecks": [{"capability": PREFLIGHT, "granted": facts.preflight_granted},
                                {"capability": CREATE_GREENFIELD,
                                 "granted": facts.create_granted}],
        "compatibilityBlockers": blockers,
    }
