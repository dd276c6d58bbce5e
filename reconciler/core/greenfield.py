"""Greenfield services: what the repo alone can say about creating one, before anything is sent.

Owns, for a ``Service`` the control plane does not have yet (seed 002,
``deploymentpreflight.ts``):

- ``intent_digest``: the digest of the service's declared intent (canonical form below),
  sent as the preflight's ``intentDigest``. It is *ours*; the control plane computes its
  own ``configurationDigest`` over the configuration record it would create (seed 002,
  12.0.0: "Distinguish the client intent digest from Cloudly's server-computed
  configuration digest"), which this module never computes nor guesses: release evidence
  and the fence are bound to the value a first, evidence-free preflight reported;
- ``local_blockers`` / ``evidence_blockers``: the seed's request and evidence rules the
  repo can check itself, with the seed's blocker codes verbatim, so a request that would
  be refused is never sent;
- ``preflight_request``, ``release_evidence`` and ``greenfield_fence``: the wire values
  ``IDeploymentPreflightRequestData`` (without ``identity``), ``IDeploymentReleaseEvidence``
  and ``IGreenfieldDeploymentFence``;
- ``PreflightBlocker``: one blocker, local or from the control plane, whose ``code`` is a
  string so that a code outside ``UpstreamBlockerCode`` (a newer control plane's) is kept
  verbatim -- sanitized -- and still blocks.

Pure: it neither asks git (the caller passes the revision and the dirty state) nor talks
to the control plane, and it decides no plan: the planner (``core.planning``) turns
blockers into a NO-GO.

The canonical form of a service document (``intent_digest``)
-----------------------------------------------------------

1. The *validated* ``Service`` model, dumped in JSON mode by alias (the YAML keys:
   ``serviceId``, ``registryHost``, ...), leaving out every field whose value equals its
   default (``immutable: true``, ``port: 443``, ``evidence: []``, ``corestore: []``, an
   omitted ``tag``/``version``/``mediaType``/``egress``/``create``). So a default written
   out and a default left out give one document, and a later version of reconcile that
   adds an optional field does not change the digest of documents that do not use it.
   ``egress: []`` is not the default (omitted, ``null``: leave egress alone) and stays in:
   the two mean different things.
2. Lists that are sets in meaning are sorted by the canonical JSON text (step 3) of their
   entries: ``egress``, ``release.evidence`` and ``create.corestore``.
3. Serialized as JSON with object keys sorted, no whitespace (``,`` and ``:`` separators),
   non-ASCII characters written as UTF-8 rather than escaped. For these values (ASCII keys;
   strings, integers, booleans, null; no floats) this is the JSON Canonicalization Scheme
   of RFC 8785.
4. ``intentDigest = "sha256:" + hex(SHA-256(the UTF-8 bytes))``.

So comments, key order, quoting, flow or block style, the order of those lists and
written defaults do not change the digest; any change of a value does. The user-facing
description, with a worked example a test recomputes, is ``docs/new-services.md``.
"""

from __future__ import annotations

import hashlib
import json
import re
from enum import StrEnum
from typing import Any, Final, NotRequired, TypedDict

from pydantic import ConfigDict

from reconciler.core import desired
from reconciler.core.codes import UpstreamBlockerCode
from reconciler.core.desired import EvidenceKind, Release, Service
from reconciler.core.lean import LeanModel
from reconciler.core.sanitize import safe

#: A full lower-case Git commit (seed 002 ``fullGitRevisionRegex``).
_REVISION: Final = re.compile(r"[a-f0-9]{40}")
_DIGEST: Final = re.compile(r"sha256:[a-f0-9]{64}")
_NAMESPACE: Final = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_SEMVER: Final = re.compile(desired.SEMVER)
#: The seed bounds request and service ids (``requestId.length > 200`` is INVALID_REQUEST).
MAX_ID_LENGTH: Final = 200
#: Upstream codes are short identifiers; a longer "code" is cut, not trusted.
MAX_CODE_LENGTH: Final = 100
#: The seed's order of the required kinds: the order of messages and of attestations sent.
KIND_ORDER: Final = tuple(EvidenceKind)


class Origin(StrEnum):
    """Who raised a blocker: the repo's own checks (nothing was sent) or the control plane."""

    LOCAL = "local"
    CONTROL_PLANE = "control_plane"


class PreflightBlocker(LeanModel):
    """One preflight blocker, with the control plane's code verbatim.

    ``code`` is a ``str``, not ``UpstreamBlockerCode``: the upstream list is closed *per
    version*, and a newer control plane's code must reach the plan as it was said (made
    safe to print) and block it, never be dropped or mapped to something else. ``known``
    says whether it is one of this version's codes. Build the control plane's with
    ``from_upstream`` (which sanitizes); the local ones come from ``local_blockers``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: str
    message: str
    origin: Origin

    @property
    def known(self) -> UpstreamBlockerCode | None:
        try:
            return UpstreamBlockerCode(self.code)
        except ValueError:
            return None

    @classmethod
    def from_upstream(cls, code: str, message: str) -> PreflightBlocker:
        """A blocker the control plane reported: both strings are untrusted, so controls
        are escaped and lengths bounded (``core.sanitize.safe``); otherwise verbatim."""
        return cls(code=safe(code, limit=MAX_CODE_LENGTH), message=safe(message),
                   origin=Origin.CONTROL_PLANE)


def _local(code: UpstreamBlockerCode, message: str) -> PreflightBlocker:
    return PreflightBlocker(code=code.value, message=message, origin=Origin.LOCAL)


# --------------------------------------------------------------------------- intent digest


def canonical_json(service: Service) -> str:
    """The canonical JSON text of ``service`` (module docstring, steps 1-3)."""
    document: dict[str, Any] = service.model_dump(mode="json", by_alias=True,
                                                  exclude_defaults=True)
    if isinstance(document.get("egress"), list):
        document["egress"] = _sorted(document["egress"])
    release = document["release"]
    if "evidence" in release:
        release["evidence"] = _sorted(release["evidence"])
    create = document.get("create")
    if isinstance(create, dict) and "corestore" in create:
        create["corestore"] = _sorted(create["corestore"])
    return _dumps(document)


def intent_digest(service: Service) -> str:
    """``sha256:<hex>`` of ``canonical_json(service)`` (module docstring, step 4)."""
    return "sha256:" + hashlib.sha256(canonical_json(service).encode("utf-8")).hexdigest()


def _dumps(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def _sorted(entries: list[Any]) -> list[Any]:
    return sorted(entries, key=_dumps)


# --------------------------------------------------------------------------- blockers


def local_blockers(service: Service, *, source_revision: str, source_dirty: bool,
                   require_evidence: bool) -> tuple[PreflightBlocker, ...]:
    """What the control plane's preflight would refuse about creating ``service`` that the
    repo can tell by itself, with the seed's codes (``validateDeploymentPreflightRequest``
    and ``validateDeploymentReleaseEvidence`` applied to the request ``preflight_request``
    would send). Empty means: nothing known locally stands in the way; the control plane
    has the last word (authorization, registry, collisions).

    ``source_revision``: the config repo's commit (a full 40-hex SHA, else
    SOURCE_REVISION_INVALID); ``source_dirty``: whether its worktree has uncommitted changes.
    ``require_evidence``: every kind of release evidence must be declared (True for a
    creation -- the seeds fail closed -- and for a promotion when the policy asks for
    evidence); when False, declared evidence must still be valid and bound to the digest.

    The model already refuses most of these at validation time; they are checked again
    here so that a ``Service`` built any other way fails closed too.
    """
    B = UpstreamBlockerCode
    found: list[PreflightBlocker] = []
    if not isinstance(source_revision, str) or not _REVISION.fullmatch(source_revision):
        found.append(_local(B.SOURCE_REVISION_INVALID,
                            "Source revision must be a full lower-case Git commit SHA "
                            f"(got {_show(source_revision)})."))
    if source_dirty:
        found.append(_local(B.SOURCE_WORKTREE_DIRTY,
                            "The source worktree contains uncommitted changes: commit them "
                            "so the preflight is bound to a revision."))
    version = service.release.version
    if version is None:
        found.append(_local(B.VERSION_NOT_RESERVED,
                            "A canonical semantic release version is required: declare "
                            "release.version (like 1.0.0)."))
    elif len(version) > desired.MAX_VERSION_LENGTH or not _SEMVER.fullmatch(version):
        found.append(_local(B.VERSION_NOT_RESERVED,
                            "A canonical semantic release version is required (release.version "
                            f"is {_show(version)})."))
    if service.create is None:
        found.append(_local(B.NAMESPACE_NOT_RESERVED,
                            "The proposed namespace is missing: declare create.namespace."))
    else:
        if not _NAMESPACE.fullmatch(service.create.namespace):
            found.append(_local(B.NAMESPACE_NOT_RESERVED,
                                "The proposed namespace is malformed (create.namespace is "
                                f"{_show(service.create.namespace)})."))
        found.extend(_corestore_blockers(service.create))
    if not _DIGEST.fullmatch(service.release.digest):
        found.append(_local(B.OCI_INDEX_DIGEST_REQUIRED,
                            "OCI index digest must be a canonical sha256 digest (release.digest "
                            f"is {_show(service.release.digest)})."))
    found.extend(evidence_blockers(service.release, require=require_evidence))
    return tuple(found)


def _corestore_blockers(create: desired.Creation) -> list[PreflightBlocker]:
    resources = create.corestore
    malformed = len(resources) > desired.MAX_CORESTORE_RESOURCES or any(
        r.capability not in tuple(desired.CorestoreCapability)
        or not _NAMESPACE.fullmatch(r.resource_name) for r in resources)
    found = []
    if malformed:
        found.append(_local(UpstreamBlockerCode.INVALID_REQUEST,
                            "Proposed Corestore resources are malformed (create.corestore: at "
                            f"most {desired.MAX_CORESTORE_RESOURCES}, capability database or "
                            "objectstorage, resourceName a DNS label)."))
    keys = [(str(r.capability), r.resource_name) for r in resources]
    if len(set(keys)) != len(keys):
        found.append(_local(UpstreamBlockerCode.INVALID_REQUEST,
                            "Proposed Corestore resources must be unique."))
    return found


def evidence_blockers(release: Release, *, require: bool) -> tuple[PreflightBlocker, ...]:
    """The seed's evidence rules on ``release.evidence``, bound to ``release.digest``:
    each declared attestation must be well formed and about this image
    (RELEASE_EVIDENCE_INVALID, naming both digests when bound to another); with
    ``require``, each missing kind is named (RELEASE_EVIDENCE_MISSING, "Missing sbom
    evidence.") and a missing release-authorization means the release is not authorized
    (RELEASE_NOT_AUTHORIZED), as the control plane would say of the same request."""
    B = UpstreamBlockerCode
    found: list[PreflightBlocker] = []
    seen: set[EvidenceKind] = set()
    for index, attestation in enumerate(release.evidence):
        where = f"release.evidence[{index}]"
        try:
            kind = EvidenceKind(attestation.kind)
        except ValueError:
            found.append(_local(B.RELEASE_EVIDENCE_INVALID,
                                f"Release attestation kind is invalid ({where}.kind is "
                                f"{_show(attestation.kind)})."))
            continue
        if kind in seen:
            found.append(_local(B.RELEASE_EVIDENCE_INVALID,
                                f"Invalid {kind.value} evidence: listed twice ({where})."))
        seen.add(kind)
        if attestation.subject_digest != release.digest:
            found.append(_local(B.RELEASE_EVIDENCE_INVALID,
                                f"Invalid {kind.value} evidence: bound to "
                                f"{_show(attestation.subject_digest)} but the release pins "
                                f"{_show(release.digest)} ({where}.subjectDigest)."))
        problem = _attestation_problem(attestation)
        if problem is not None:
            found.append(_local(B.RELEASE_EVIDENCE_INVALID,
                                f"Invalid {kind.value} evidence: {problem} ({where})."))
    if require:
        for kind in KIND_ORDER:
            if kind not in seen:
                found.append(_local(B.RELEASE_EVIDENCE_MISSING, f"Missing {kind.value} evidence."))
        if EvidenceKind.RELEASE_AUTHORIZATION not in seen:
            found.append(_local(B.RELEASE_NOT_AUTHORIZED,
                                "Release authorization evidence is missing, so the release is "
                                "not authorized (releaseAuthorized would be false)."))
    return tuple(found)


def _attestation_problem(attestation: desired.Attestation) -> str | None:
    if not isinstance(attestation.statement_digest, str) \
            or not _DIGEST.fullmatch(attestation.statement_digest):
        return "statementDigest is not a canonical sha256 digest"
    if not isinstance(attestation.verifier, str) or not attestation.verifier.strip():
        return "verifier is blank"
    at = attestation.verified_at
    if isinstance(at, bool) or not isinstance(at, int) or not 1 <= at <= desired.MAX_SAFE_INTEGER:
        return "verifiedAt is not a safe integer of at least 1"
    return None


def _show(value: object) -> str:
    return safe(repr(value), limit=80)


# --------------------------------------------------------------------------- wire values


class ReleaseEvidenceReference(TypedDict):
    """``IDeploymentReleaseEvidenceReference``."""

    kind: str
    statementDigest: str
    subjectDigest: str
    verifier: str
    verifiedAt: int


class ReleaseEvidence(TypedDict):
    """``IDeploymentReleaseEvidence``."""

    sourceRevision: str
    version: str
    configurationDigest: str
    ociIndexDigest: str
    releaseAuthorized: bool
    attestations: list[ReleaseEvidenceReference]


class ProposedCorestoreResource(TypedDict):
    """``IDeploymentPreflightProposedCorestoreResource``."""

    capability: str
    resourceName: str


class PreflightRequestData(TypedDict):
    """``IDeploymentPreflightRequestData`` (the request is this plus ``identity``)."""

    requestId: str
    serviceId: str
    sourceRevision: str
    sourceDirty: bool
    version: str
    intentDigest: str
    proposedNamespace: str
    proposedCorestoreResources: list[ProposedCorestoreResource]
    ociIndexDigest: NotRequired[str]
    releaseTag: NotRequired[str]
    releaseEvidence: NotRequired[ReleaseEvidence]
    greenfield: bool


class GreenfieldFence(TypedDict):
    """``IGreenfieldDeploymentFence``."""

    sourceServiceId: str
    sourceRevision: str
    version: str
    ociIndexDigest: str
    configurationDigest: str
    targetNamespace: str


class NotRequestable(ValueError):
    """The service lacks what a preflight request must carry (``release.version`` or
    ``create``); ``local_blockers`` says so as VERSION_NOT_RESERVED / NAMESPACE_NOT_RESERVED,
    and nothing should be sent."""


def _required(service: Service) -> tuple[str, desired.Creation]:
    version, create = service.release.version, service.create
    missing = [name for name, value in (("release.version", version), ("create", create))
               if value is None]
    if version is None or create is None:
        raise NotRequestable(f"service {service.name!r} declares no {' and no '.join(missing)}: "
                             "no preflight request can be made")
    return version, create


def release_evidence(service: Service, *, source_revision: str,
                     configuration_digest: str) -> ReleaseEvidence:
    """``IDeploymentReleaseEvidence`` for ``service``: bound to ``source_revision``, the
    version, the configuration digest and the pinned OCI index digest.
    ``configuration_digest`` is the control plane's (``report.source.configurationDigest``
    of a preflight of this same request without evidence), never the intent digest: the
    seed's ``validateDeploymentReleaseEvidence`` refuses evidence whose
    ``configurationDigest`` is not the one the control plane computed. ``releaseAuthorized`` is
    whether a release-authorization attestation is declared. Attestations in the seed's
    kind order, so reordering the file does not change the request. Needs
    ``release.version`` (else ``NotRequestable``), not ``create``."""
    release = service.release
    version = release.version
    if version is None:
        raise NotRequestable(f"service {service.name!r} declares no release.version: no "
                             "release evidence can be bound to a version")
    order = {kind: index for index, kind in enumerate(KIND_ORDER)}
    attestations = sorted(release.evidence, key=lambda a: order.get(a.kind, len(order)))
    return {
        "sourceRevision": source_revision,
        "version": version,
        "configurationDigest": configuration_digest,
        "ociIndexDigest": release.digest,
        "releaseAuthorized": any(a.kind == EvidenceKind.RELEASE_AUTHORIZATION
                                 for a in release.evidence),
        "attestations": [
            {"kind": str(a.kind), "statementDigest": a.statement_digest,
             "subjectDigest": a.subject_digest, "verifier": a.verifier,
             "verifiedAt": a.verified_at}
            for a in attestations
        ],
    }


def preflight_request(service: Service, *, request_id: str, source_revision: str,
                      source_dirty: bool,
                      configuration_digest: str | None = None) -> PreflightRequestData:
    """``IDeploymentPreflightRequestData`` for creating ``service`` (add ``identity`` to
    send it as ``getDeploymentPreflight``): ``greenfield: true``, the proposed namespace
    and Corestore resources, ``ociIndexDigest`` = the pinned digest, ``releaseTag`` when
    declared.

    Without ``configuration_digest`` it is the *probe*: no ``releaseEvidence`` (the
    control plane then names every kind missing, and reports the configuration digest it
    computed). With it, ``releaseEvidence`` is bound to that digest: the request whose
    report decides the plan and which the creation carries.

    Deterministic: the same service, revision and request id give the same value
    (Corestore resources sorted like the canonical form). Raises ``NotRequestable``
    when ``release.version`` or ``create`` is missing; a bad ``request_id`` (blank or
    over 200 characters) is a caller's bug and raises ``ValueError``.
    """
    if not request_id.strip() or len(request_id) > MAX_ID_LENGTH:
        raise ValueError(f"request id must be 1 to {MAX_ID_LENGTH} characters, not blank")
    version, create = _required(service)
    resources = sorted((str(r.capability), r.resource_name) for r in create.corestore)
    request: PreflightRequestData = {
        "requestId": request_id,
        "serviceId": service.service_id,
        "sourceRevision": source_revision,
        "sourceDirty": source_dirty,
        "version": version,
        "intentDigest": intent_digest(service),
        "proposedNamespace": create.namespace,
        "proposedCorestoreResources": [{"capability": capability, "resourceName": name}
                                       for capability, name in resources],
        "ociIndexDigest": service.release.digest,
        "greenfield": True,
    }
    if configuration_digest is not None:
        request["releaseEvidence"] = release_evidence(
            service, source_revision=source_revision, configuration_digest=configuration_digest)
    if service.release.tag is not None:
        request["releaseTag"] = service.release.tag
    return request


def greenfield_fence(service: Service, *, source_revision: str,
                     configuration_digest: str) -> GreenfieldFence:
    """``IGreenfieldDeploymentFence`` for creating ``service`` from ``source_revision``:
    what the creation is bound to, equal to what the preflight of ``preflight_request``
    yields (sourceServiceId = serviceId, ``configuration_digest`` = the control plane's,
    from its report). Raises ``NotRequestable`` like ``preflight_request``."""
    version, create = _required(service)
    return {
        "sourceServiceId": service.service_id,
        "sourceRevision": source_revision,
        "version": version,
        "ociIndexDigest": service.release.digest,
        "configurationDigest": configuration_digest,
        "targetNamespace": create.namespace,
    }
