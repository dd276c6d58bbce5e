"""The greenfield preflight report as a plan holds it: parsed, validated, fail closed.

Owns the model of one ``IDeploymentPreflightReport`` (seed 002, schemaVersion 2) as far as
a plan needs it (decision, upstream blockers, authorization checks, source revision and
dirty state, intent and configuration digests, the requested image and its platforms,
the proposed namespace and its state), ``parse_report`` that turns the control plane's
raw reply into it (its shape checked by narrow strict wire models, ``core.wireshape``)
or says why it cannot, ``Answer`` (what the shell read for one request)
and ``ServicePreflight`` (what the plan says about one service's preflight).

Fail closed (seed 002, 12.0.0): a reply whose shape is not the report's, whose
``mutationPerformed`` is not ``false``, that is about another request (service,
revision, dirty state, version, intent digest, namespace), or whose decision its own
blockers contradict (GO with blockers, NO-GO without one) is not a report: the planner
turns that into a blocker. Nothing here trusts a string from the wire: every string
kept is sanitized and bounded.

Two reports per creation (issue 24): a *probe* without release evidence, whose
``source.configurationDigest`` -- the control plane's digest of the configuration it
would create, not our intent digest -- the evidence is then bound to, and the *bound*
request's report, which decides. ``disagreement`` names where the two say different
things about anything but the evidence; ``contradictions`` names where a GO report's own
fields say that apply could not do it (issue 18: fail closed).

Pure: no I/O; the shell hands over the decoded JSON value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from pydantic import JsonValue, ValidationError

from reconciler.core.codes import BlockerCode, UpstreamBlockerCode
from reconciler.core.desired import Service
from reconciler.core.greenfield import PreflightBlocker
from reconciler.core.lean import CoreModel
from reconciler.core.names import is_digest
from reconciler.core.sanitize import safe
from reconciler.core.wireshape import WireModel, decode_value, problem

#: The seed's capability a creation needs on the new service's id.
CREATE_CAPABILITY = "deployment:create-greenfield"
#: The extension method that executes a creation (CONTRACT [ext], issue 12).
CREATE_METHOD = "createGreenfieldDeployment"




class Decision(StrEnum):
    GO = "GO"
    NO_GO = "NO-GO"


Tristate = bool | Literal["unknown"]


class AuthorizationCheck(CoreModel):
    capability: str
    granted: bool


class Platform(CoreModel):
    """One platform of the requested OCI index (``IOciPlatformDescriptorSummary``)."""

    os: str
    architecture: str
    digest: str | None = None
    media_type: str | None = None
    runnable: bool
    manifest_present: bool


class ProposedResource(CoreModel):
    capability: str
    resource_name: str


class Report(CoreModel):
    """The parts of a valid ``IDeploymentPreflightReport`` a plan shows and binds to.

    ``currentImage``, ``runtimeTasks``, ``runtimeAttestation``, ``platformBindings`` and
    ``corestoreResources`` are checked for shape but not kept: for a service that does
    not exist yet they describe nothing."""

    decision: Decision
    generated_at: int
    service_id: str
    service_name: str
    registry_host: str
    registry_repository: str
    source_revision: str
    source_dirty: bool
    version: str
    intent_digest: str
    configuration_digest: str
    requested_digest: str | None = None
    release_tag: str | None = None
    tag_reserved: bool = False
    media_type: str | None = None
    platforms: tuple[Platform, ...] = ()
    namespace: str
    proposed_corestore: tuple[ProposedResource, ...] = ()
    namespace_reserved: bool
    namespace_blank: Tristate
    inventory_complete: bool
    version_reserved: bool
    would_replace_existing_state: Tristate
    authorization_checks: tuple[AuthorizationCheck, ...] = ()
    blockers: tuple[PreflightBlocker, ...] = ()

    def granted(self, capability: str) -> bool:
        """Whether the report's own authorization checks show ``capability`` granted."""
        return any(c.capability == capability and c.granted for c in self.authorization_checks)


class Status(StrEnum):
    """What became of one service's preflight in this plan."""

    GO = "go"  # the control plane's report says GO
    NO_GO = "no_go"  # the control plane's report says NO-GO
    NOT_SENT = "not_sent"  # a local check failed first: nothing was sent (fail closed)
    FAILED = "failed"  # the call gave no report
    INVALID = "invalid"  # the reply is not a valid report
    NOT_ASKED = "not_asked"  # no answer for this exact request (e.g. the commit moved)
    LOCAL_ONLY = "local_only"  # a promotion's evidence, checked locally by policy


#: The blocker codes a probe (a preflight without release evidence) is expected to carry
#: and the bound request is not: they are about the evidence, the one thing that differs.
EVIDENCE_CODES = frozenset({UpstreamBlockerCode.RELEASE_EVIDENCE_MISSING.value,
                            UpstreamBlockerCode.RELEASE_EVIDENCE_INVALID.value,
                            UpstreamBlockerCode.RELEASE_NOT_AUTHORIZED.value})
#: Media types of an image index (seed 003 ``TOciManifestMediaType``): a creation pins one.
INDEX_MEDIA_TYPES = frozenset({"application/vnd.oci.image.index.v1+json",
                               "application/vnd.docker.distribution.manifest.list.v2+json"})


class ServicePreflight(CoreModel):
    """One service's preflight as the plan shows it: what was asked, what came back, and
    what reconcile itself checked. ``blocked`` is whether it stops the plan; the blockers
    themselves are in ``Plan.blockers`` (one list, one verdict)."""

    service: str
    service_id: str
    purpose: Literal["create", "promotion"] = "create"
    status: Status
    request_id: str | None = None
    source_revision: str | None = None
    source_dirty: bool = False
    intent_digest: str | None = None
    #: the control plane's configuration digest the probe reported and the release
    #: evidence was bound to (None: no probe report to take it from)
    configuration_digest: str | None = None
    report: Report | None = None
    problem: str | None = None  # why there is no valid report, one sentence, sanitized
    local_blockers: tuple[PreflightBlocker, ...] = ()
    execution_available: bool | None = None  # createGreenfieldDeployment offered
    blocked: bool = True

    @property
    def decision(self) -> Decision:
        """reconcile's word for this service: GO only when nothing blocks it."""
        return Decision.NO_GO if self.blocked else Decision.GO


@dataclass(frozen=True)
class Answer:
    """What the shell read for one preflight request: the decoded ``report`` value, or
    why there is none (``error``, sanitized; ``code``: the control plane's domain code)."""

    request_id: str
    reply: object = None
    error: str | None = None
    code: str | None = None


@dataclass(frozen=True)
class Greenfield:
    """The live side's answers about creations, read by the engine for one plan:
    whether the control plane executes creations, and each preflight answer by request
    id. ``capabilities_error``: the capability list could not be read (never "none")."""

    execution_available: bool = False
    capabilities_error: str | None = None
    answers: Mapping[str, Answer] | None = None  # None: nothing was asked


class InvalidReport(ValueError):
    """The reply is not a report this version can trust; the message says why."""


# -- parsing ----------------------------------------------------------------------------
#
# The report's wire shape, as narrow strict models (``core.wireshape``): every part a
# plan keeps, and the parts it only checks for shape (``currentImage``, ``runtimeTasks``,
# ``runtimeAttestation``, ``platformBindings``, ``corestoreResources``). Fields are in the
# order they are checked, so the first one at fault is the one named.


class _ServiceWire(WireModel):
    service_id: str
    service_name: str
    registry_host: str
    registry_repository: str


class _SourceWire(WireModel):
    revision: str
    dirty: bool
    version: str
    intent_digest: str
    configuration_digest: str


# Platform's fields again on purpose: this is the wire's shape, Platform what is kept of it
# (each string bounded by safe() in _platforms), so no wire value reaches a plan unchecked.
class _PlatformWire(WireModel):
    os: str
    architecture: str
    digest: str | None = None
    media_type: str | None = None
    runnable: bool
    manifest_present: bool


class _RequestedWire(WireModel):
    digest: str | None = None
    release_tag: str | None = None
    tag_reserved: bool
    media_type: str | None = None
    platforms: tuple[_PlatformWire, ...]


class _ResourceWire(WireModel):
    capability: str
    resource_name: str


class _ProposedWire(WireModel):
    namespace: str
    corestore_resources: tuple[_ResourceWire, ...]
    namespace_reserved: bool
    namespace_blank: bool | Literal["unknown"]
    inventory_complete: bool
    version_reserved: bool
    would_replace_existing_state: bool | Literal["unknown"]


class _CurrentWire(WireModel):
    platforms: tuple[_PlatformWire, ...]
    mutable_reference: bool


class _CheckWire(WireModel):
    capability: str
    granted: bool


class _BlockerWire(WireModel):
    code: str
    message: str


class _ReportWire(WireModel):
    """``IDeploymentPreflightReport`` (schemaVersion 2) as far as a plan reads it."""

    service: _ServiceWire
    source: _SourceWire
    requested_image: _RequestedWire
    proposed: _ProposedWire
    current_image: _CurrentWire
    runtime_tasks: tuple[JsonValue, ...]
    runtime_attestation: dict[str, JsonValue]
    platform_bindings: tuple[JsonValue, ...]
    corestore_resources: tuple[JsonValue, ...]
    authorization_checks: tuple[_CheckWire, ...]
    compatibility_blockers: tuple[_BlockerWire, ...]
    generated_at: int


def _digest(value: str, where: str) -> str:
    text = safe(value, 80)
    if not is_digest(text):
        raise InvalidReport(f"{where} is not a canonical sha256 digest ({text})")
    return text


def _opt_digest(value: str | None, where: str) -> str | None:
    return None if value is None else _digest(value, where)


def _opt(value: str | None, limit: int) -> str | None:
    return None if value is None else safe(value, limit)


def _platforms(wire: tuple[_PlatformWire, ...], where: str) -> tuple[Platform, ...]:
    return tuple(Platform(os=safe(p.os, 60), architecture=safe(p.architecture, 60),
                          digest=_opt_digest(p.digest, f"{where}[{index}].digest"),
                          media_type=_opt(p.media_type, 120), runnable=p.runnable,
                          manifest_present=p.manifest_present)
                 for index, p in enumerate(wire))


def parse_report(raw: object) -> Report:
    """The control plane's ``report`` value as a ``Report``; ``InvalidReport`` naming the
    first field at fault when it is not a schemaVersion-2 report with
    ``mutationPerformed: false`` and a decision its blockers agree with."""
    if not isinstance(raw, dict):
        raise InvalidReport("report is not an object")
    report = raw
    if report.get("schemaVersion") != 2:
        raise InvalidReport(f"report.schemaVersion is {safe(report.get('schemaVersion'), 40)},"
                            " not 2")
    if report.get("mutationPerformed") is not False:
        # A read-only check that says it changed something (or will not say) is not one.
        raise InvalidReport("report.mutationPerformed is "
                            f"{safe(json_repr(report.get('mutationPerformed')), 40)}, not false:"
                            " a preflight must not change anything")
    decision = report.get("decision")
    if decision not in ("GO", "NO-GO"):
        raise InvalidReport(f"report.decision is {safe(json_repr(decision), 40)}, not GO or "
                            "NO-GO")
    try:
        wire = decode_value(_ReportWire, report)
    except ValidationError as exc:
        raise InvalidReport(problem(exc, "report", limit=300, model=_ReportWire)) from exc
    _platforms(wire.current_image.platforms, "report.currentImage.platforms")
    checks = tuple(AuthorizationCheck(capability=safe(c.capability, 60), granted=c.granted)
                   for c in wire.authorization_checks)
    blockers = []
    for index, item in enumerate(wire.compatibility_blockers):
        code = safe(item.code, 60)
        if not code:
            raise InvalidReport(f"report.compatibilityBlockers[{index}].code is empty")
        blockers.append(PreflightBlocker.from_upstream(code, safe(item.message, 300)))
    if decision == "GO" and blockers:
        raise InvalidReport(f"report.decision is GO but it lists {len(blockers)} blocker(s) "
                            f"({', '.join(b.code for b in blockers)})")
    if decision == "NO-GO" and not blockers:
        raise InvalidReport("report.decision is NO-GO but it names no blocker: the reason is "
                            "unknown")
    service, source, requested, proposed = (wire.service, wire.source, wire.requested_image,
                                            wire.proposed)
    return Report(
        decision=Decision(decision),
        generated_at=wire.generated_at,
        service_id=safe(service.service_id, 200),
        service_name=safe(service.service_name, 200),
        registry_host=safe(service.registry_host, 255),
        registry_repository=safe(service.registry_repository, 255),
        source_revision=safe(source.revision, 80),
        source_dirty=source.dirty,
        version=safe(source.version, 120),
        intent_digest=_digest(source.intent_digest, "report.source.intentDigest"),
        configuration_digest=_digest(source.configuration_digest,
                                     "report.source.configurationDigest"),
        requested_digest=_opt_digest(requested.digest, "report.requestedImage.digest"),
        release_tag=_opt(requested.release_tag, 128),
        tag_reserved=requested.tag_reserved,
        media_type=_opt(requested.media_type, 120),
        platforms=_platforms(requested.platforms, "report.requestedImage.platforms"),
        namespace=safe(proposed.namespace, 80),
        proposed_corestore=tuple(ProposedResource(capability=safe(r.capability, 40),
                                                  resource_name=safe(r.resource_name, 80))
                                 for r in proposed.corestore_resources),
        namespace_reserved=proposed.namespace_reserved,
        namespace_blank=proposed.namespace_blank,
        inventory_complete=proposed.inventory_complete,
        version_reserved=proposed.version_reserved,
        would_replace_existing_state=proposed.would_replace_existing_state,
        authorization_checks=checks,
        blockers=tuple(blockers),
    )


def json_repr(value: object) -> str:
    """A wire value as JSON would spell it (``false``, ``null``), for messages."""
    if value is None:
        return "missing"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def about_request(report: Report, request: Mapping[str, Any]) -> list[str]:
    """Where a report is not about ``request`` (the preflight request data as sent):
    one phrase per field; empty when it is. A report about another request proves
    nothing about this one."""
    pairs = [
        ("service", report.service_id, request.get("serviceId")),
        ("source revision", report.source_revision, request.get("sourceRevision")),
        ("source dirty", report.source_dirty, request.get("sourceDirty")),
        ("version", report.version, request.get("version")),
        ("intent digest", report.intent_digest, request.get("intentDigest")),
        ("namespace", report.namespace, request.get("proposedNamespace")),
    ]
    if request.get("ociIndexDigest") is not None:
        pairs.append(("requested digest", report.requested_digest,
                      request.get("ociIndexDigest")))
    return [f"{label} {safe(json_repr(got), 80)} (asked {safe(json_repr(want), 80)})"
            for label, got, want in pairs if got != want]


def disagreement(probe: Report, bound: Report) -> list[str]:
    """Where the bound request's report says something else than the probe's, about
    anything but the evidence (the only difference between the two requests): one phrase
    per field, naming both values; empty when they agree. A control plane whose answer
    moved between two reads of one plan cannot be held to either."""
    skip = {"decision", "generated_at", "blockers"}
    first, second = probe.model_dump(), bound.model_dump()

    def shown(value: object) -> str:
        return safe(value if isinstance(value, str) else json_repr(value), 100)

    out = [f"{name.replace('_', ' ')} {shown(first[name])} (probe) vs "
           f"{shown(second[name])} (bound)"
           for name in first if name not in skip and first[name] != second[name]]

    def others(report: Report) -> list[tuple[str, str]]:
        return sorted((b.code, b.message) for b in report.blockers
                      if b.code not in EVIDENCE_CODES)

    if others(probe) != others(bound):
        gone = sorted({c for c, _ in others(probe)} - {c for c, _ in others(bound)})
        new = sorted({c for c, _ in others(bound)} - {c for c, _ in others(probe)})
        out.append("blockers other than the evidence's: "
                   + ("; ".join(filter(None, [
                       f"only the probe names {', '.join(gone)}" if gone else "",
                       f"only the bound report names {', '.join(new)}" if new else ""]))
                      or "the same codes with other messages"))
    return out


def contradictions(report: Report, svc: Service) -> list[tuple[BlockerCode, str | None, str]]:
    """Where a GO ``report`` about creating ``svc`` says, in its own fields, that apply
    could not do it (or cannot be proven to): ``(blocker code, upstream code or None,
    message)`` each, the seed's code where one exists. Fail closed: ``unknown`` is not
    ``true``. A NO-GO report needs none of this: its blockers already stop the plan."""
    B, U = BlockerCode, UpstreamBlockerCode
    release = svc.release
    out: list[tuple[BlockerCode, str | None, str]] = []

    def no_go(code: UpstreamBlockerCode, message: str) -> None:
        out.append((B.PREFLIGHT_NO_GO, code.value, f"{code.value}: {message}"))

    declared = f"{release.registry_host}/{release.repository}"
    found = f"{report.registry_host}/{report.registry_repository}"
    if (report.registry_host, report.registry_repository) != (release.registry_host,
                                                              release.repository):
        out.append((B.RELEASE_REPOSITORY_MISMATCH, None,
                    f"the preflight found {release.digest} in {safe(found, 200)}, but the "
                    f"release declares {declared}: the creation would be refused"))
    if report.media_type not in INDEX_MEDIA_TYPES:
        no_go(U.OCI_INDEX_MEDIA_TYPE_REQUIRED,
              f"the preflight reports the pinned image's media type as "
              f"{safe(json_repr(report.media_type), 120)}, not an OCI index")
    elif release.media_type is not None and release.media_type != report.media_type:
        out.append((B.MEDIA_TYPE_MISMATCH, None,
                    f"the release declares mediaType {release.media_type}; the preflight "
                    f"reports {safe(report.media_type, 120)}"))
    if not any(p.runnable and p.manifest_present for p in report.platforms):
        no_go(U.OCI_PLATFORM_MISSING, "the preflight reports no runnable platform with its "
              "manifest present in the pinned index")
    absent = [f"{p.os}/{p.architecture}" for p in report.platforms if not p.manifest_present]
    if absent:
        no_go(U.OCI_PLATFORM_MANIFEST_MISSING, "the preflight reports the manifest of "
              f"{', '.join(absent)} absent from the registry")
    if release.tag is not None and (report.release_tag != release.tag
                                    or not report.tag_reserved):
        no_go(U.IMMUTABLE_RELEASE_TAG_NOT_RESERVED,
              f"the preflight reports tag {safe(json_repr(report.release_tag), 130)} "
              f"{'reserved' if report.tag_reserved else 'not reserved'} for "
              f"{release.digest}; the release pins tag {release.tag} (moved since it was "
              "pinned?)")
    if not report.version_reserved:
        no_go(U.VERSION_NOT_RESERVED, f"the preflight reports version {safe(report.version)}"
              " not reserved")
    if report.namespace_reserved is not True:
        no_go(U.NAMESPACE_NOT_RESERVED, f"the preflight reports namespace "
              f"{safe(report.namespace)} not reserved")
    if report.namespace_blank is not True:
        no_go(U.NAMESPACE_NOT_PROVEN_BLANK, f"the preflight reports namespace "
              f"{safe(report.namespace)} blank: {json_repr(report.namespace_blank)}")
    if report.inventory_complete is not True:
        no_go(U.CORESTORE_INVENTORY_UNAVAILABLE, "the preflight reports the Corestore "
              "inventory incomplete, so the proposed resources are not proven free")
    if report.would_replace_existing_state is not False:
        no_go(U.WOULD_REPLACE_EXISTING_STATE, "the preflight reports wouldReplaceExistingState "
              f"{json_repr(report.would_replace_existing_state)}")
    return out


# -- what a create change carries -------------------------------------------------------

class Fence(CoreModel):
    """``IGreenfieldDeploymentFence``: what the creation is bound to. Taken from the
    preflight report the plan saw (``configurationDigest`` is the report's
    ``source.configurationDigest``: the control plane's, not our intent digest), so a
    saved plan binds to that report and the control plane refuses (``FENCE_MISMATCH``)
    a creation whose preflight now yields anything else."""

    source_service_id: str
    source_revision: str
    version: str
    oci_index_digest: str
    configuration_digest: str
    target_namespace: str

    def wire(self) -> dict[str, Any]:
        return {"sourceServiceId": self.source_service_id,
                "sourceRevision": self.source_revision, "version": self.version,
                "ociIndexDigest": self.oci_index_digest,
                "configurationDigest": self.configuration_digest,
                "targetNamespace": self.target_namespace}


class Destination(CoreModel):
    host: str
    port: int


class NewService(CoreModel):
    """The ``service`` part of ``createGreenfieldDeployment`` [ext]."""

    name: str
    app_id: str
    registry_host: str
    repository: str
    release_tag: str | None = None
    egress: tuple[Destination, ...] = ()

    def wire(self) -> dict[str, Any]:
        body: dict[str, Any] = {"name": self.name, "appId": self.app_id,
                                "registryHost": self.registry_host,
                                "repository": self.repository,
                                "egress": [{"host": d.host, "port": d.port}
                                           for d in self.egress]}
        if self.release_tag is not None:
            body["releaseTag"] = self.release_tag
        return body


class Creation(CoreModel):
    """Everything apply sends to create one service: the preflight request data exactly
    as the plan sent it (wire shape, no identity), the fence from the report the plan
    saw (None while there is no GO report: the plan is NO-GO then), and the service."""

    preflight: dict[str, JsonValue]
    fence: Fence | None = None
    service: NewService
    digest: str  # the pinned OCI index digest the new service must run

    def wire(self, idempotency_key: str) -> dict[str, Any]:
        if self.fence is None:
            raise ValueError("a creation without a fence cannot be sent")
        return {"idempotencyKey": idempotency_key, "preflight": dict(self.preflight),
                "fence": self.fence.wire(), "service": self.service.wire()}
