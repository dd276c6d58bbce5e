"""The creation kind: ``create``, a declared service the control plane does not have.

Owns the change model (it carries everything apply sends: the preflight request as the
plan sent it, the fence of the report it saw, the new service), the two preflights a
creation needs and their judgement (the repo's own checks first -- when any fails
nothing is sent, fail closed -- then the *probe*, sent without evidence to learn the
control plane's configuration digest, then the request whose release evidence is bound
to that digest; the two must agree on all but the evidence; a GO report's own fields
must not contradict it), the diff, the idempotency key (from the intent alone, so the
same new service is the same change at any commit), its staleness rule (planned against
the service's absence), what a rebound creation differs in (``core.binding``) and its
part of a review's modification.

Must not send anything (``shell.greenfield`` does). Pure: no I/O imports.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar, Literal, cast

from pydantic import JsonValue

from reconciler.core import greenfield
from reconciler.core import preflight as pf
from reconciler.core.codes import BlockerCode, ReasonCode, UpstreamBlockerCode
from reconciler.core.cpcodes import ControlPlaneCode
from reconciler.core.desired import DesiredState, Service
from reconciler.core.findings import Blocker
from reconciler.core.kinds.base import (
    Action,
    ChangeBase,
    Check,
    Diff,
    Freshness,
    Kind,
    Preconditions,
    ReleaseRef,
    idempotency_key,
    short,
)
from reconciler.core.live import LiveService, LiveSnapshot, ReadFailure
from reconciler.core.provenance import Provenance
from reconciler.core.sanitize import safe


class CreateChange(ChangeBase):
    """Create the service through the greenfield preflight; it carries everything apply
    sends (``Creation``). A create is sent only from a GO plan, so only with a fence."""

    action: Literal[Action.CREATE]
    release_after: ReleaseRef
    creation: pf.Creation


@dataclass(frozen=True)
class PreflightAsk:
    """One preflight the engine must send before planning: for ``service``, this request
    data (wire shape, no identity), answered under ``request_id``."""

    service: str
    service_id: str
    request_id: str
    request: dict[str, object]


def preflight_request_id(svc: Service, source_revision: str, source_dirty: bool, *,
                         probe: bool = False) -> str:
    """The preflight's ``requestId`` for creating ``svc`` from this commit: derived from
    the intent, so the same commit and document always ask the same question (the answer
    can be matched to it, and the creation's payload -- hence its idempotency key -- is
    the same on every rerun). ``probe``: the id of the first, evidence-free preflight,
    distinct from the bound request's so the two answers cannot be confused."""
    material = json.dumps([svc.service_id, source_revision, source_dirty,
                           greenfield.intent_digest(svc)], separators=(",", ":"))
    prefix = "rcn-pf0-" if probe else "rcn-pf-"
    return prefix + hashlib.sha256(material.encode()).hexdigest()[:40]


def absent(desired: DesiredState, live: LiveSnapshot) -> list[Service]:
    """Declared services the control plane says it does not have: each is a creation."""
    return [svc for svc in desired.services
            if isinstance(state := live.services.get(svc.service_id), ReadFailure)
            and state.code == ControlPlaneCode.SERVICE_NOT_FOUND]


def app_id_owner(svc: Service, live: LiveSnapshot) -> str | None:
    """The id of another live service that already uses ``svc``'s appId, or None."""
    owner = live.app_ids.get(svc.app_id)
    return owner if owner is not None and owner != svc.service_id else None


def _askable(svc: Service, live: LiveSnapshot, provenance: Provenance) -> bool:
    """Whether a preflight may be sent for creating ``svc``: every local check passes and
    no live service uses its appId (fail closed: a request the repo already knows is
    refused is never sent)."""
    return not greenfield.local_blockers(svc, source_revision=provenance.commit or "",
                                         source_dirty=provenance.dirty,
                                         require_evidence=True) \
        and app_id_owner(svc, live) is None


def _probe(svc: Service, provenance: Provenance) -> PreflightAsk:
    revision = provenance.commit or ""
    request_id = preflight_request_id(svc, revision, provenance.dirty, probe=True)
    request = greenfield.preflight_request(svc, request_id=request_id, source_revision=revision,
                                           source_dirty=provenance.dirty)
    return PreflightAsk(service=svc.name, service_id=svc.service_id, request_id=request_id,
                        request=dict(request))


def creation_requests(desired: DesiredState, live: LiveSnapshot,
                      provenance: Provenance) -> list[PreflightAsk]:
    """The first preflights a plan of ``desired`` against ``live`` at ``provenance``
    needs: one *probe* (no release evidence) per declared service the control plane does
    not have and that may be asked about (``_askable``). Its report carries the control
    plane's configuration digest, which ``bound_requests`` binds the evidence to."""
    return [_probe(svc, provenance)
            for svc in sorted(absent(desired, live), key=lambda s: s.name)
            if _askable(svc, live, provenance)]


@dataclass(frozen=True)
class Bound:
    """What the probe's answer gives the bound request: the probe's valid report and the
    request with evidence bound to its configuration digest -- or why there is none
    (``status``/``problem``/``code``: the blocker the planner raises)."""

    probe: PreflightAsk
    report: pf.Report | None = None
    request: dict[str, object] | None = None
    request_id: str | None = None
    status: pf.Status | None = None
    problem: str | None = None
    code: BlockerCode | None = None


def bind(svc: Service, provenance: Provenance, answers: pf.Greenfield | None) -> Bound:
    """The second preflight for creating ``svc``, from the probe's answer in ``answers``:
    the probe's report must be valid and about the probe request (else no second request:
    the reason is returned), and its ``source.configurationDigest`` -- validated as a
    digest by ``parse_report`` -- is what the release evidence is bound to. The engine
    (to send it) and the planner (to find its answer) call this with the same values, so
    they ask and look up the same request."""
    probe = _probe(svc, provenance)
    found = answers.answers if answers is not None else None
    answer = found.get(probe.request_id) if found is not None else None
    revision = provenance.commit or ""
    if answer is None:
        return Bound(probe, status=pf.Status.NOT_ASKED, code=BlockerCode.PREFLIGHT_NOT_ASKED,
                     problem="no preflight answer for this request (commit "
                     f"{revision[:12] or '<none>'}): nothing may be created unchecked")
    if answer.error is not None:
        return Bound(probe, status=pf.Status.FAILED, code=BlockerCode.PREFLIGHT_FAILED,
                     problem="the preflight call failed: " + safe(answer.error) + (
                         f" ({safe(answer.code, 60)})" if answer.code else ""))
    try:
        report = pf.parse_report(answer.reply)
        elsewhere = pf.about_request(report, probe.request)
        if elsewhere:
            raise pf.InvalidReport("the report is about another request: "
                                   + "; ".join(elsewhere))
    except pf.InvalidReport as exc:
        return Bound(probe, status=pf.Status.INVALID, code=BlockerCode.PREFLIGHT_REPORT_INVALID,
                     problem=f"the preflight reply is not a valid report: {safe(exc)} (the "
                     "probe, sent without evidence to learn the configuration digest)")
    request_id = preflight_request_id(svc, revision, provenance.dirty)
    request = dict(greenfield.preflight_request(
        svc, request_id=request_id, source_revision=revision, source_dirty=provenance.dirty,
        configuration_digest=report.configuration_digest))
    return Bound(probe, report=report, request=request, request_id=request_id)


def bound_requests(desired: DesiredState, live: LiveSnapshot, provenance: Provenance,
                   answers: pf.Greenfield) -> list[PreflightAsk]:
    """The second preflights, one per probe answered with a valid report: the same
    request with release evidence bound to the configuration digest that report gave.
    The answer to this one decides the plan."""
    asks = []
    for svc in sorted(absent(desired, live), key=lambda s: s.name):
        if not _askable(svc, live, provenance):
            continue
        bound = bind(svc, provenance, answers)
        if bound.request is not None and bound.request_id is not None:
            asks.append(PreflightAsk(service=svc.name, service_id=svc.service_id,
                                     request_id=bound.request_id, request=bound.request))
    return asks


def _json(value: dict[str, object]) -> dict[str, JsonValue]:
    """A wire value (built from plain JSON types) as the model's JSON type."""
    return {k: cast(JsonValue, v) for k, v in value.items()}



def diff(svc: Service, live: LiveSnapshot, provenance: Provenance,
         answers: pf.Greenfield | None, reason: ReasonCode) -> Diff:
    """A declared service the control plane does not have: one ``create`` change, and
    what its two preflights say (the probe, then the request bound to the probe's
    configuration digest). Every reason it must not be sent is a blocker."""
    name = svc.name
    revision = provenance.commit or ""
    dirty = provenance.dirty
    local = greenfield.local_blockers(svc, source_revision=revision, source_dirty=dirty,
                                      require_evidence=True)
    request_id = preflight_request_id(svc, revision, dirty)
    sent_id: str | None = None  # the request the plan shows: the bound one, or the probe
    request: dict[str, object] = {}
    blockers: list[Blocker] = []

    def block(code: BlockerCode, message: str, upstream: str | None = None) -> None:
        blockers.append(Blocker(code=code, service=name, message=f"{name}: {message}",
                                upstream_code=upstream))

    for found in local:
        block(BlockerCode.PREFLIGHT_NO_GO, f"{found.code}: {found.message} (checked "
              "locally; no preflight was sent)", found.code)
    owner = app_id_owner(svc, live)
    if owner is not None:
        block(BlockerCode.APP_ID_IN_USE, f"appId {svc.app_id} is already used by the live "
              f"service {safe(owner)}: a second service cannot take it (no preflight was "
              "sent)")
    report: pf.Report | None = None
    configuration: str | None = None
    problem: str | None = None
    if local or owner is not None:
        status = pf.Status.NOT_SENT
        codes = ", ".join(dict.fromkeys(
            [b.code for b in local] + ([BlockerCode.APP_ID_IN_USE.value] if owner else [])))
        problem = f"not sent: the repo's own checks failed first ({codes})"
        # NotRequestable: local_blockers names what is missing (version, namespace).
        with contextlib.suppress(greenfield.NotRequestable):
            request = dict(greenfield.preflight_request(
                svc, request_id=request_id, source_revision=revision, source_dirty=dirty))
    else:
        bound = bind(svc, provenance, answers)
        request = bound.request or dict(bound.probe.request)
        sent_id = bound.request_id or bound.probe.request_id
        if bound.report is None:
            assert bound.status is not None and bound.code is not None
            status, problem = bound.status, bound.problem
            block(bound.code, problem or "no preflight report")
        else:
            configuration = bound.report.configuration_digest
            status, report, problem = _bound_report(svc, bound, block, answers)
    unavailable = UpstreamBlockerCode.GREENFIELD_EXECUTION_UNAVAILABLE.value
    execution = answers.execution_available if answers is not None else None
    if answers is not None and answers.capabilities_error is not None:
        block(BlockerCode.PREFLIGHT_FAILED, "whether the control plane can execute a "
              "creation is unknown: its capabilities could not be read "
              f"({safe(answers.capabilities_error)})")
    elif answers is not None and not execution and not (
            report and any(b.code == unavailable for b in report.blockers)):
        # Honest, never a silent skip: without the request that starts a creation,
        # a GO preflight would only promise what apply cannot do.
        block(BlockerCode.PREFLIGHT_NO_GO, f"{unavailable}: the control plane does not "
              f"offer {pf.CREATE_METHOD} (not among its capabilities), so the service "
              "cannot be created through it", unavailable)
    missing = UpstreamBlockerCode.AUTHORIZATION_MISSING.value
    if report is not None and not report.granted(pf.CREATE_CAPABILITY) and not any(
            b.code == missing and pf.CREATE_CAPABILITY in b.message
            for b in report.blockers):
        block(BlockerCode.PREFLIGHT_NO_GO, f"{missing}: the preflight's authorization "
              f"checks do not show {pf.CREATE_CAPABILITY} granted on {svc.service_id} to "
              "this identity", missing)
    out = Diff(blockers=list(blockers))
    fence = None
    if report is not None:
        fence = pf.Fence(source_service_id=svc.service_id,
                         source_revision=report.source_revision, version=report.version,
                         oci_index_digest=svc.release.digest,
                         configuration_digest=report.configuration_digest,
                         target_namespace=report.namespace)
    out.preflights.append(pf.ServicePreflight(
        service=name, service_id=svc.service_id, purpose="create", status=status,
        request_id=sent_id, source_revision=revision or None,
        source_dirty=dirty, intent_digest=greenfield.intent_digest(svc),
        configuration_digest=configuration, report=report,
        problem=problem, local_blockers=local, execution_available=execution,
        blocked=bool(blockers)))
    new = pf.NewService(
        name=name, app_id=svc.app_id, registry_host=svc.release.registry_host,
        repository=svc.release.repository, release_tag=svc.release.tag,
        egress=tuple(pf.Destination(host=d.host, port=d.port)
                     for d in sorted(svc.egress or (), key=lambda d: (d.host, d.port))))
    creation = pf.Creation(preflight=_json(request), fence=fence, service=new,
                           digest=svc.release.digest)
    pre = Preconditions()
    where = f" in namespace {svc.create.namespace}" if svc.create else ""
    out.changes.append(CreateChange(
        action=Action.CREATE, service=name, service_id=svc.service_id, app_id=svc.app_id,
        reason=reason,
        summary=f"create {name} ({svc.service_id}) at "
        f"{svc.release.tag or short(svc.release.digest)} ({short(svc.release.digest)})"
        f"{where}",
        preconditions=pre,
        # From the intent alone (the canonical service document), not the commit: the
        # same new service is the same change at any commit, so a PR review calls a
        # creation pending on the base "already pending", and a rerun at a later
        # commit replays the key. The fence (and so the commit) is in the payload,
        # which binding compares; the control plane keeps keys of creations made.
        idempotency_key=idempotency_key(
            Action.CREATE, svc.service_id, {"intent": greenfield.intent_digest(svc)}, pre),
        release_after=ReleaseRef(digest=svc.release.digest,
                                 tags=(svc.release.tag,) if svc.release.tag else (),
                                 reference=svc.release.reference),
        creation=creation,
    ))
    return out


def _bound_report(svc: Service, bound: Bound, block: Callable[..., None],
                  answers: pf.Greenfield | None) -> tuple[pf.Status, pf.Report | None, str | None]:
    """Judge the answer to the bound request (evidence bound to the probe's
    configuration digest): the status, the report (None when there is no valid one)
    and why not; every reason not to create goes through ``block``."""
    assert bound.report is not None and bound.request is not None
    problem: str | None
    found = answers.answers if answers is not None else None
    answer = found.get(bound.request_id or "") if found is not None else None
    if answer is None:
        problem = ("no answer to the preflight bound to configuration digest "
                   f"{bound.report.configuration_digest}: nothing may be created unchecked")
        block(BlockerCode.PREFLIGHT_NOT_ASKED, problem)
        return pf.Status.NOT_ASKED, None, problem
    if answer.error is not None:
        problem = f"the preflight call failed: {safe(answer.error)}" + (
            f" ({safe(answer.code, 60)})" if answer.code else "")
        block(BlockerCode.PREFLIGHT_FAILED, problem)
        return pf.Status.FAILED, None, problem
    try:
        report = pf.parse_report(answer.reply)
    except pf.InvalidReport as exc:
        problem = f"the preflight reply is not a valid report: {safe(exc)}"
        block(BlockerCode.PREFLIGHT_REPORT_INVALID, problem)
        return pf.Status.INVALID, None, problem
    # Compared first: another intent or configuration digest than the probe's is the
    # control plane changing its answer within one plan, said with both values.
    differ = pf.disagreement(bound.report, report)
    disagree = ("the two preflights of this creation disagree (the probe without "
                "evidence, then the request bound to its configuration digest): "
                + "; ".join(differ)) if differ else None
    if disagree is not None:
        block(BlockerCode.PREFLIGHT_REPORTS_DISAGREE, disagree)
    elsewhere = pf.about_request(report, bound.request)
    if elsewhere:
        problem = ("the preflight reply is not a valid report: the report is about "
                   "another request: " + "; ".join(elsewhere))
        block(BlockerCode.PREFLIGHT_REPORT_INVALID, problem)
        return pf.Status.INVALID, None, disagree or problem
    status = pf.Status.GO if report.decision is pf.Decision.GO else pf.Status.NO_GO
    problem = disagree
    if disagree is not None:
        status = pf.Status.NO_GO
    for upstream in report.blockers:
        block(BlockerCode.PREFLIGHT_NO_GO,
              f"{upstream.code}: {upstream.message} (the control plane's preflight)",
              upstream.code)
    if report.decision is pf.Decision.GO:
        for code, upstream_code, message in pf.contradictions(report, svc):
            block(code, f"{message} (the report's own fields; its decision says GO, "
                  "which does not outweigh them)", upstream_code)
            status = pf.Status.NO_GO
    return status, report, problem


def differences(then: CreateChange, now: CreateChange) -> list[str]:
    """What differs between two creations of one service, field by field."""
    a, b = then.creation, now.creation
    out = []
    fence_a = a.fence.model_dump() if a.fence else {}
    fence_b = b.fence.model_dump() if b.fence else {}
    for field in sorted(set(fence_a) | set(fence_b)):
        if fence_a.get(field) != fence_b.get(field):
            out.append(f"fence.{field} {fence_a.get(field) or '<none>'} → "
                       f"{fence_b.get(field) or '<none>'}")
    for field in sorted(set(a.preflight) | set(b.preflight)):
        if field not in ("requestId", "sourceRevision", "version", "intentDigest",
                         "ociIndexDigest", "proposedNamespace") \
                and a.preflight.get(field) != b.preflight.get(field):
            out.append(f"preflight.{field} differs")
    if a.service != b.service:
        out.append("service (name, appId, registry, repository, tag or egress) differs")
    return out or ["the request differs"]


def _fields(change: CreateChange) -> dict[str, str]:
    """The fields of a creation a reviewer compares (not the commit it is bound to, nor
    the request id or the evidence's revision: those differ at every commit)."""
    creation = change.creation
    request = creation.preflight
    service = creation.service
    resources = request.get("proposedCorestoreResources")
    return {
        "digest": creation.digest,
        "tag": service.release_tag or "",
        "version": str(request.get("version", "")),
        "namespace": str(request.get("proposedNamespace", "")),
        "corestore": ", ".join(f"{r.get('capability')}:{r.get('resourceName')}"
                               for r in (resources if isinstance(resources, list) else [])
                               if isinstance(r, dict)),
        "app_id": service.app_id,
        "repository": f"{service.registry_host}/{service.repository}",
        "egress": ", ".join(f"{d.host}:{d.port}" for d in service.egress),
    }


class _Create(Kind[CreateChange]):
    target = "create"
    models: ClassVar[tuple[type[ChangeBase], ...]] = (CreateChange,)
    order = 2
    verbs: ClassVar[dict[Action, str]] = {Action.CREATE: "create"}
    codes: ClassVar[Mapping[StrEnum, str]] = {
        BlockerCode.PREFLIGHT_NO_GO:
            "A new service's greenfield preflight says NO-GO: the control plane's report, or "
            "one of its rules checked locally before anything was sent (the message says "
            "which). The upstream code is kept verbatim (`upstream_code`).",
        BlockerCode.PREFLIGHT_FAILED:
            "The control plane's deployment preflight for a new service gave no report (the "
            "call failed or was refused); nothing can be created without it.",
        BlockerCode.PREFLIGHT_REPORT_INVALID:
            "The preflight's reply is not a valid report: its shape, a `mutationPerformed` "
            "that is not `false`, a report about another request, or a decision its blockers "
            "contradict.",
        BlockerCode.PREFLIGHT_NOT_ASKED:
            "No preflight answer exists for this exact request (e.g. the commit moved since "
            "the live side was read); plan again.",
        BlockerCode.PREFLIGHT_REPORTS_DISAGREE:
            "A creation's two preflights (the probe without release evidence, and the "
            "request bound to the configuration digest the probe reported) disagree about "
            "something other than the evidence, e.g. another configuration digest; the "
            "message names both values.",
        BlockerCode.APP_ID_IN_USE:
            "A new service declares an `appId` a live service already uses (the clusters "
            "know a workload by it); found before any preflight is sent.",
        ReasonCode.SERVICE_NOT_ON_CONTROL_PLANE:
            "Create: the repo declares a service the control plane does not have (a "
            "greenfield deployment, checked by its preflight).",
    }
    rebinds = True

    def shows(self, change: CreateChange, svc: LiveService) -> bool:
        return svc.current_digest == change.release_after.digest

    def check(self, change: CreateChange, live: LiveSnapshot, *,
              journaled: bool) -> Check[CreateChange]:
        """Planned against the service's absence: fresh (or ours) while the control plane
        still has no such service, already live once it exists rolled out to the pinned
        digest (a rerun after a crash), stale when it exists otherwise."""
        svc: LiveService | ReadFailure | None = live.services.get(change.service_id)
        if isinstance(svc, ReadFailure) and svc.code == ControlPlaneCode.SERVICE_NOT_FOUND:
            return Check(change, Freshness.OURS if journaled else Freshness.FRESH)
        if isinstance(svc, LiveService):
            if self.shows(change, svc):
                return Check(change, Freshness.ALREADY_LIVE, f"{change.service} exists now, "
                             f"rolled out to {svc.current_digest}")
            return Check(change, Freshness.STALE, f"{change.service}: planned as a creation, "
                         f"but the control plane has it now (its rollout is to "
                         f"{svc.current_digest or 'no release'})")
        return Check(change, Freshness.STALE, f"{change.service}: the control plane gave no "
                     "state for it now, so its absence is not proven")

    def modification(self, base: CreateChange, head: CreateChange) -> dict[str, object]:
        was, now = _fields(base), _fields(head)
        return {"fields": tuple({"field": f, "base": was.get(f, ""), "head": now[f]}
                                for f in now if was.get(f, "") != now[f])}


KIND = _Create()
