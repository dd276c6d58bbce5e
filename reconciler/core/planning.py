"""Planning: ``plan(desired, live) -> Plan``, a pure function.

Owns every decision about what to change: the classification of a release change
(promote vs rollback), egress and grant differences, creations (a declared service the
control plane does not have), blockers (why not to apply), drift (what differs without
being an intended change) and the evidence attached to each service. Apply executes
what this decides and never decides again (STYLE §1).

A creation is judged from what the engine read for it (``core.preflight.Greenfield``):
the repo's own checks first (``core.greenfield.local_blockers``, and an appId a live
service uses; when any fails nothing was sent, fail closed), then two preflight reports
-- the probe's (no evidence: it gives the control plane's configuration digest) and the
report for the request whose evidence is bound to that digest (``bind``; GO/NO-GO with its
codes verbatim; an invalid report is itself a blocker; the two must agree on all but the
evidence; a GO report's own fields must not contradict it), whether the control plane
executes creations at all (``GREENFIELD_EXECUTION_UNAVAILABLE``) and whether its
authorization checks grant ``deployment:create-greenfield``.

Risks (``risks_of``) come from the judge's findings against what the control plane
intends now, for every service apply will gate: a cluster that *states* why it does not
converge (``ClusterProof.stated``) or a rollout the control plane reports failed. They
never change the verdict, and never come from silence (that is a blocker).

Must not: read files, talk to the network, look at the clock (time comes from the
snapshot), or render anything.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import cast

from pydantic import JsonValue

from reconciler.core import evidence, greenfield, routekind
from reconciler.core import preflight as pf
from reconciler.core.codes import (
    BlockerCode,
    DriftCode,
    ReasonCode,
    RiskCode,
    UpstreamBlockerCode,
)
from reconciler.core.desired import DesiredState, ReleaseEvidencePolicy, Service
from reconciler.core.live import (
    FAILED_STATUSES,
    IN_PROGRESS_STATUSES,
    EgressRule,
    ImageRelease,
    LiveService,
    LiveSnapshot,
    Observation,
    ObservationKind,
    ReadFailure,
)
from reconciler.core.plans import (
    ACTION_ORDER,
    Action,
    Blocker,
    Change,
    Drift,
    Plan,
    Preconditions,
    ReleaseRef,
    Risk,
    ServiceEvidence,
)
from reconciler.core.routing import GatewayRoute
from reconciler.core.sanitize import safe


@dataclass(frozen=True)
class Provenance:
    """Where the desired state came from: the commit and whether the tree was clean."""

    commit: str | None = None
    dirty: bool = False
    path: str | None = None  # the repo directory the plan was made from
    root: str | None = None  # the git work tree holding it; None: not a git repository
    untracked: tuple[str, ...] = ()  # YAML under ``path`` in no commit: reported, never read
    #: the git tree id of ``path`` at ``commit`` and its files (path -> blob id): what a
    #: saved plan is bound to (``core.binding``); None/empty outside git or for a preview
    tree: str | None = None
    files: tuple[tuple[str, str], ...] = ()
    #: tracked files under ``path`` whose edits the commit does not hold (never read,
    #: except by a worktree preview)
    uncommitted: tuple[str, ...] = ()
    #: ``plan --worktree``: the working tree as it is, a preview never applied
    worktree: bool = False


def idempotency_key(action: Action, service_id: str, payload: object,
                    preconditions: Preconditions) -> str:
    """A key derived from the change and what it was planned against.

    The same change against the same live state always gets the same key, so a rerun
    after a crash replays the first call instead of making a second rollout; a change
    planned against a moved state gets a new key (and the CAS check decides).
    """
    material = json.dumps(
        {"action": action.value, "service": service_id, "payload": payload,
         "pre": preconditions.model_dump(mode="json")},
        sort_keys=True, separators=(",", ":"),
    )
    return "rcn-" + hashlib.sha256(material.encode()).hexdigest()[:40]


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


@dataclass(frozen=True)
class PreflightAsk:
    """One preflight the engine must send before planning: for ``service``, this request
    data (wire shape, no identity), answered under ``request_id``."""

    service: str
    service_id: str
    request_id: str
    request: dict[str, object]


def absent(desired: DesiredState, live: LiveSnapshot) -> list[Service]:
    """Declared services the control plane says it does not have: each is a creation."""
    return [svc for svc in desired.services
            if isinstance(state := live.services.get(svc.service_id), ReadFailure)
            and state.code == "SERVICE_NOT_FOUND"]


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


def _short(digest: str | None) -> str:
    if not digest:
        return "<none>"
    return digest[:19]  # "sha256:" + 12 hex


def _release_ref(release: ImageRelease | None, digest: str | None) -> ReleaseRef:
    if release is None:
        return ReleaseRef(digest=digest)
    return ReleaseRef(
        release_id=release.id,
        digest=release.digest,
        tags=release.tags,
        reference=f"{release.registry_host}/{release.repository}@{release.digest}",
    )


def _rules(pairs: Iterable[tuple[str, int]]) -> tuple[EgressRule, ...]:
    return tuple(EgressRule(host=h, port=p) for h, p in sorted(pairs))


def target_of(svc: Service, live: LiveService | ReadFailure | None,
              routes: tuple[GatewayRoute, ...] | None = None) -> evidence.Target:
    """What the judge must see for ``svc``: the pinned digest, and the egress the repo
    declares -- or, when the repo leaves egress alone, the control plane's declaration --
    and the gateway routes it declares for the service (``routekind.expected_routes``)."""
    if svc.egress is not None:
        egress: tuple[EgressRule, ...] | None = _rules((d.host, d.port) for d in svc.egress)
    else:
        egress = live.egress if isinstance(live, LiveService) else None
    return evidence.Target(service=svc.name, app_id=svc.app_id, digest=svc.release.digest,
                           egress=egress, routes=routes)


_DRIFT_OF_WHY = {
    evidence.Why.NO_RECORD: DriftCode.CLUSTER_MISSING_RUNTIME,
    evidence.Why.NO_DIGEST: DriftCode.CLUSTER_DIGEST_UNPROVEN,
    evidence.Why.OTHER_DIGEST: DriftCode.CLUSTER_DIVERGED,
    evidence.Why.NOT_RUNNING: DriftCode.CLUSTER_UNHEALTHY,
    evidence.Why.NO_REPLICA_COUNTS: DriftCode.CLUSTER_UNHEALTHY,
    evidence.Why.REPLICAS_SHORT: DriftCode.CLUSTER_UNHEALTHY,
    evidence.Why.EGRESS_DROPPED: DriftCode.EGRESS_DROPPED,
    evidence.Why.EGRESS_DIFFERS: DriftCode.EGRESS_NOT_IN_EFFECT,
    evidence.Why.NO_EGRESS: DriftCode.EGRESS_NOT_IN_EFFECT,
}


def _drift_of(service: str, finding: evidence.ClusterProof, current: str, in_progress: bool,
              rollout_id: str) -> Drift | None:
    """A cluster the judge does not call converged on the *current* rollout, as drift.
    Silence is a blocker, not drift; mid-rollout only the digest lag is shown."""
    code = _DRIFT_OF_WHY.get(finding.why) if finding.why else None
    if code is None:
        return None
    last = f"; lastError: {finding.last_error}" if finding.last_error else ""
    cluster = safe(finding.cluster)
    if in_progress:
        if code not in (DriftCode.CLUSTER_DIVERGED, DriftCode.CLUSTER_DIGEST_UNPROVEN):
            return None
        return Drift(code=DriftCode.CLUSTER_LAGGING, service=service, cluster=finding.cluster,
                     message=f"{service}: cluster {cluster} still runs "
                     f"{finding.running or '<no digest>'} while rollout {safe(rollout_id)} to "
                     f"{current} is in progress{last}")
    if code is DriftCode.CLUSTER_DIVERGED:
        message = f"{service}: cluster {cluster} runs {finding.running} but the current " \
            f"rollout is {current}{last}"
    elif code is DriftCode.CLUSTER_MISSING_RUNTIME:
        message = f"{service}: cluster {cluster} has no runtime record; it should run " \
            f"{_short(current)}"
    else:
        message = f"{service}: cluster {cluster} {finding.detail}{last}"
    return Drift(code=code, service=service, cluster=finding.cluster, message=message)


def risks_of(finding: evidence.ServiceProof) -> tuple[Risk, ...]:
    """What apply is already known to meet on one service, from the judge's word on it
    against what the control plane intends now (``finding``): one risk per cluster that
    states why it does not converge (``ClusterProof.stated``), and -- when none does --
    the rollout the control plane reports failed or mismatched. A silent or merely
    lagging cluster is no risk: silence is unknown (a blocker), lag is not a failure."""
    out: list[Risk] = []
    for found in finding.stated():
        if found.why is evidence.Why.EGRESS_DROPPED:
            code = RiskCode.CLUSTER_DROPPED_EGRESS
        elif found.running is not None and found.running != finding.digest:
            code = RiskCode.CLUSTER_REFUSED_RELEASE
        else:
            code = RiskCode.CLUSTER_FAILING
        out.append(_risk(code, finding, found.cluster, found.running, found.stated or ""))
    if not out and finding.terminal:
        out.append(_risk(RiskCode.ROLLOUT_FAILED, finding, None, None,
                         finding.rollout_detail))
    return tuple(out)


def _risk(code: RiskCode, finding: evidence.ServiceProof, cluster: str | None,
          running: str | None, said: str) -> Risk:
    risk = Risk(code=code, service=safe(finding.service), digest=finding.digest,
                cluster=safe(cluster) if cluster is not None else None,
                running=running, reason=safe(said, 2000), message="")
    return risk.model_copy(update={"message": risk.sentence()})


class _Planner:
    """Accumulates one plan. Private: ``plan()`` is the only entry point."""

    def __init__(self, desired: DesiredState, live: LiveSnapshot, provenance: Provenance,
                 answers: pf.Greenfield | None) -> None:
        self.desired = desired
        self.live = live
        self.provenance = provenance
        self.answers = answers
        self.preflights: list[pf.ServicePreflight] = []
        self.changes: list[Change] = []
        self.blockers: list[Blocker] = []
        self.drift: list[Drift] = []
        self.evidence: list[ServiceEvidence] = []
        self.preconditions: dict[str, object] = {}
        self.proofs: list[evidence.ServiceProof] = []
        #: service -> the judge's word against what the control plane intends now
        self.intended: dict[str, evidence.ServiceProof] = {}
        #: expected clusters no address answered as: cluster -> why (said once, mesh-wide)
        self.unreachable: dict[str, str] = {}
        #: every blocker that stands for the whole cluster (its per-service silence folds in)
        self.mesh_blocked: set[str] = set()

    # -- the mesh as a whole ---------------------------------------------------------
    def mesh(self) -> None:
        mesh = self.live.mesh
        if mesh.resolve_error is not None or not mesh.resolved:
            self.blockers.append(Blocker(
                code=BlockerCode.GATEWAY_UNRESOLVED,
                message=f"the gateway {safe(mesh.gateway)} resolved to no address "
                f"({safe(mesh.resolve_error or 'empty answer')}): no cluster can give evidence"))
        elif mesh.settings_clusters and len(mesh.resolved) < len(mesh.settings_clusters):
            self.blockers.append(Blocker(
                code=BlockerCode.GATEWAY_SHORT_ANSWER,
                message=f"the gateway {safe(mesh.gateway)} resolved to {len(mesh.resolved)} "
                f"address(es) but the settings expect {len(mesh.settings_clusters)} clusters "
                f"({', '.join(mesh.settings_clusters)})"))
        for cluster in mesh.duplicate_claims:
            addresses = [e.address for e in mesh.resolved if e.cluster_id == cluster]
            self.blockers.append(Blocker(
                code=BlockerCode.CLUSTER_CLAIMED_TWICE, cluster=cluster,
                message=f"more than one address answered as cluster {safe(cluster)} "
                f"({', '.join(addresses)}): answers cannot be attributed"))
        claimed = {e.cluster_id for e in mesh.resolved if e.cluster_id is not None}
        unnamed = [e for e in mesh.resolved if e.cluster_id is None]
        missing = [c for c in mesh.expected_clusters if c not in claimed]
        if mesh.resolve_error is None and mesh.resolved:
            for cluster in missing:
                if unnamed:
                    causes = "; ".join(f"{e.address}: {safe(e.error or 'did not name itself')}"
                                       for e in unnamed)
                    why = f"no address answered as it ({causes})"
                else:
                    why = "DNS advertised no address for it"
                self.unreachable[cluster] = why
                self.mesh_blocked.add(cluster)
        if not missing or mesh.resolve_error is not None:
            # An address that answered without naming itself, while every expected cluster
            # is accounted for, is an unknown cluster: it could run anything.
            for address in mesh.unnamed_addresses:
                self.mesh_blocked.add(address)
                self.blockers.append(Blocker(
                    code=BlockerCode.CLUSTER_UNNAMED, cluster=address,
                    message=f"the address {address} did not name its cluster on the health "
                    "route; its answers cannot be attributed"))
        else:
            # The unnamed addresses are the missing clusters' (their cause is said there).
            self.mesh_blocked.update(mesh.unnamed_addresses)
        if mesh.resolve_error is not None or not mesh.resolved:
            self.mesh_blocked.update(mesh.expected_clusters)
            self.mesh_blocked.add(mesh.gateway)

    # -- one service -----------------------------------------------------------------
    def service(self, svc: Service) -> None:
        live = self.live.services.get(svc.service_id)
        observations = self.live.observations.get(svc.app_id, ())
        if isinstance(live, ReadFailure) and live.code == "SERVICE_NOT_FOUND":
            # Declared here, absent there: a creation, through the greenfield preflight.
            self.preconditions[svc.service_id] = {"absent": True}
            self._create(svc)
            self._evidence(svc, None, observations)
            return
        if live is None or isinstance(live, ReadFailure):
            code = BlockerCode.SERVICE_NOT_FOUND if live is not None and \
                live.code == "SERVICE_NOT_FOUND" else BlockerCode.SERVICE_UNREADABLE
            why = safe(live.reason) if live is not None else "the snapshot holds no answer for it"
            self.blockers.append(Blocker(
                code=code, service=svc.name,
                message=f"service {svc.name} ({svc.service_id}): the control plane gave no "
                f"state ({why}); nothing can be planned for it"))
            self._evidence(svc, None, observations)
            return
        self.preconditions[svc.service_id] = {
            "generation": live.rollout_generation,
            "rollout": live.deployment.rollout_id if live.deployment else None,
            "egress_revision": live.egress_revision,
        }
        self._release(svc, live)
        self._egress(svc, live)
        self._rollout_drift(svc, live)
        if svc.immutable and not live.immutable_required:
            self.drift.append(Drift(
                code=DriftCode.IMMUTABLE_NOT_ENFORCED, service=svc.name,
                message=f"{svc.name}: the repo requires immutable deployment but the control "
                "plane's service does not (immutableImageRequired is false); the next "
                "promotion sets it"))
        self._evidence(svc, live, observations)

    # -- a creation ------------------------------------------------------------------
    def _create(self, svc: Service) -> None:
        """A declared service the control plane does not have: one ``create`` change, and
        what its two preflights say (the probe, then the request bound to the probe's
        configuration digest). Every reason it must not be sent is a blocker."""
        name = svc.name
        revision = self.provenance.commit or ""
        dirty = self.provenance.dirty
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
        owner = app_id_owner(svc, self.live)
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
            bound = bind(svc, self.provenance, self.answers)
            request = bound.request or dict(bound.probe.request)
            sent_id = bound.request_id or bound.probe.request_id
            if bound.report is None:
                assert bound.status is not None and bound.code is not None
                status, problem = bound.status, bound.problem
                block(bound.code, problem or "no preflight report")
            else:
                configuration = bound.report.configuration_digest
                status, report, problem = self._bound_report(svc, bound, block)
        unavailable = UpstreamBlockerCode.GREENFIELD_EXECUTION_UNAVAILABLE.value
        execution = self.answers.execution_available if self.answers is not None else None
        if self.answers is not None and self.answers.capabilities_error is not None:
            block(BlockerCode.PREFLIGHT_FAILED, "whether the control plane can execute a "
                  "creation is unknown: its capabilities could not be read "
                  f"({safe(self.answers.capabilities_error)})")
        elif self.answers is not None and not execution and not (
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
        self.blockers.extend(blockers)
        fence = None
        if report is not None:
            fence = pf.Fence(source_service_id=svc.service_id,
                             source_revision=report.source_revision, version=report.version,
                             oci_index_digest=svc.release.digest,
                             configuration_digest=report.configuration_digest,
                             target_namespace=report.namespace)
        self.preflights.append(pf.ServicePreflight(
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
        self.changes.append(Change(
            action=Action.CREATE, service=name, service_id=svc.service_id, app_id=svc.app_id,
            reason=ReasonCode.SERVICE_NOT_ON_CONTROL_PLANE,
            summary=f"create {name} ({svc.service_id}) at "
            f"{svc.release.tag or _short(svc.release.digest)} ({_short(svc.release.digest)})"
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

    def _bound_report(self, svc: Service, bound: Bound, block: Callable[..., None],
                      ) -> tuple[pf.Status, pf.Report | None, str | None]:
        """Judge the answer to the bound request (evidence bound to the probe's
        configuration digest): the status, the report (None when there is no valid one)
        and why not; every reason not to create goes through ``block``."""
        assert bound.report is not None and bound.request is not None
        problem: str | None
        found = self.answers.answers if self.answers is not None else None
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

    def _release(self, svc: Service, live: LiveService) -> None:
        pinned = svc.release.digest
        target = live.release_by_digest(pinned)
        name = svc.name
        if target is None:
            self.blockers.append(Blocker(
                code=BlockerCode.RELEASE_NOT_OBSERVED, service=name,
                message=f"{name}: the pinned digest {pinned} is not a release the control plane "
                f"observed for {svc.release.registry_host}/{svc.release.repository}"))
            return
        if (target.registry_host, target.repository) != (svc.release.registry_host,
                                                         svc.release.repository):
            self.blockers.append(Blocker(
                code=BlockerCode.RELEASE_REPOSITORY_MISMATCH, service=name,
                message=f"{name}: release {_short(pinned)} lives in "
                f"{safe(target.registry_host)}/{safe(target.repository)}, not "
                f"{svc.release.registry_host}/{svc.release.repository}"))
        if svc.release.tag is not None and svc.release.tag not in target.tags:
            holder = next((r for r in live.releases if svc.release.tag in r.tags), None)
            where = f"tag {svc.release.tag} is on {holder.digest}" if holder else \
                f"tag {svc.release.tag} was never observed"
            self.blockers.append(Blocker(
                code=BlockerCode.TAG_DIGEST_MISMATCH, service=name,
                message=f"{name}: pinned tag and digest disagree: {where}, "
                f"but the pin is {pinned}"))
        if svc.release.media_type is not None and svc.release.media_type != target.media_type:
            self.blockers.append(Blocker(
                code=BlockerCode.MEDIA_TYPE_MISMATCH, service=name,
                message=f"{name}: pinned media type {svc.release.media_type} but the release "
                f"was observed as {safe(target.media_type)}"))
        current_digest = live.current_digest
        status = live.rollout_status
        if current_digest == pinned:
            return  # whether it converged is the judge's word (``_evidence``)
        current = live.release_by_digest(current_digest) if current_digest else None
        if current is None and current_digest is not None and target.accepted_at is not None:
            # Unlisted current release: an accepted pin may be older or newer than what
            # runs. Guessing "promote" would hide a rollback from the review.
            self.blockers.append(Blocker(
                code=BlockerCode.CURRENT_RELEASE_UNLISTED, service=name,
                message=f"{name}: the current rollout's digest {current_digest} is not among "
                f"the releases the control plane lists, so pinning {_short(pinned)} (accepted "
                "before) cannot be told apart as promotion or rollback"))
            return
        newer = current is None or target.first_observed_at > current.first_observed_at
        is_rollback = target.accepted_at is not None and not newer and live.deployment is not None
        action = Action.ROLLBACK if is_rollback else Action.PROMOTE
        if status is not None and status.status in IN_PROGRESS_STATUSES:
            self.blockers.append(Blocker(
                code=BlockerCode.ROLLOUT_IN_PROGRESS, service=name,
                message=f"{name}: rollout {safe(status.rollout_id)} (generation "
                f"{status.rollout_generation}) is still {safe(status.status)}; a {action.value} "
                f"must not be stacked on an unfinished rollout"))
        if live.deployment is not None and status is None:
            self.blockers.append(Blocker(
                code=BlockerCode.ROLLOUT_STATUS_UNKNOWN, service=name,
                message=f"{name}: rollout {safe(live.deployment.rollout_id)} has no status; "
                f"whether it finished is unknown"))
        pre = Preconditions(
            rollout_generation=live.rollout_generation,
            rollout_id=live.deployment.rollout_id if live.deployment else None,
        )
        if is_rollback:
            reason = ReasonCode.PREVIOUSLY_ACCEPTED
            summary = (f"roll {name} back to {', '.join(target.tags) or _short(pinned)} "
                       f"({_short(pinned)}), accepted before")
        else:
            reason = ReasonCode.NEVER_ACCEPTED if target.accepted_at is None \
                else ReasonCode.NEWER_THAN_CURRENT
            summary = (f"promote {name} to {', '.join(target.tags) or _short(pinned)} "
                       f"({_short(pinned)})")
        self.changes.append(Change(
            action=action, service=name, service_id=svc.service_id, app_id=svc.app_id,
            reason=reason, summary=summary, preconditions=pre,
            idempotency_key=idempotency_key(action, svc.service_id, target.id, pre),
            release_before=_release_ref(current, current_digest),
            release_after=_release_ref(target, pinned),
        ))
        if action is Action.PROMOTE and self.desired.settings.policy.release_evidence \
                is ReleaseEvidencePolicy.EVERY_PROMOTION:
            self._promotion_evidence(svc)

    def _promotion_evidence(self, svc: Service) -> None:
        """``policy.releaseEvidence: every-promotion``: the promotion's release evidence
        must be complete and bound to the pinned digest. Checked here, never sent: the
        control plane's preflight accepts greenfield requests only (anything else is
        WOULD_REPLACE_EXISTING_STATE)."""
        found = greenfield.evidence_blockers(svc.release, require=True)
        for blocker in found:
            self.blockers.append(Blocker(
                code=BlockerCode.RELEASE_EVIDENCE_REQUIRED, service=svc.name,
                upstream_code=blocker.code,
                message=f"{svc.name}: {blocker.code}: {blocker.message} (policy "
                "releaseEvidence: every-promotion; checked locally)"))
        self.preflights.append(pf.ServicePreflight(
            service=svc.name, service_id=svc.service_id, purpose="promotion",
            status=pf.Status.LOCAL_ONLY, local_blockers=found, blocked=bool(found),
            problem="checked locally against the pinned digest: the control plane's "
            "preflight accepts greenfield requests only"))

    def _egress(self, svc: Service, live: LiveService) -> None:
        if svc.egress is None:  # omitted: leave the live declaration alone
            return
        want = {(d.host, d.port) for d in svc.egress}
        have = evidence.egress_key(live.egress or ())
        if want == have:
            return
        added, removed = want - have, have - want
        pre = Preconditions(egress_revision=live.egress_revision)
        after = _rules(want)
        bits = []
        if added:
            bits.append("opens " + ", ".join(f"{h}:{p}" for h, p in sorted(added)))
        if removed:
            bits.append("revokes " + ", ".join(f"{h}:{p}" for h, p in sorted(removed)))
        self.changes.append(Change(
            action=Action.SET_EGRESS, service=svc.name, service_id=svc.service_id,
            app_id=svc.app_id,
            reason=ReasonCode.EGRESS_REVOKE_ALL if not want else ReasonCode.EGRESS_DIFFERS,
            summary=f"{svc.name}: egress {'; '.join(bits)}",
            preconditions=pre,
            idempotency_key=idempotency_key(
                Action.SET_EGRESS, svc.service_id, [[r.host, r.port] for r in after], pre),
            egress_before=_rules(have), egress_after=after,
            egress_added=_rules(added), egress_removed=_rules(removed),
        ))

    def _rollout_drift(self, svc: Service, live: LiveService) -> None:
        status = live.rollout_status
        if status is not None and status.status in FAILED_STATUSES:
            why = f" ({safe(status.mismatch_reason)})" if status.mismatch_reason else ""
            self.drift.append(Drift(
                code=DriftCode.ROLLOUT_FAILED if status.status == "failed"
                else DriftCode.ROLLOUT_MISMATCHED, service=svc.name,
                message=f"{svc.name}: rollout {safe(status.rollout_id)} to "
                f"{_short(status.expected_digest)} is {safe(status.status)}{why}"))
        if live.deployment is not None and live.deployment.mode == "automatic":
            self.drift.append(Drift(
                code=DriftCode.LIVE_CHANGED_OUTSIDE_REPO, service=svc.name,
                message=f"{svc.name}: the current rollout {safe(live.deployment.rollout_id)} was "
                f"made automatically, not from this repo"))

    def _evidence(self, svc: Service, live: LiveService | None,
                  observations: tuple[Observation, ...]) -> None:
        targets = live.deployment.target_cluster_ids if live and live.deployment else ()
        expected = evidence.expected_clusters(self.live.mesh.expected_clusters, targets)
        by_cluster = {o.cluster_id: o for o in observations}
        rows = [by_cluster.get(cluster) or Observation(
            cluster_id=cluster, kind=ObservationKind.SILENT, reason="never probed")
            for cluster in expected]
        # Addresses that answered without being expected are still shown.
        rows.extend(o for o in observations if o.cluster_id not in expected)
        current = live.current_digest if live else None
        self.evidence.append(ServiceEvidence(
            service=svc.name, service_id=svc.service_id, app_id=svc.app_id,
            expected_clusters=expected, observations=tuple(rows),
            current_digest=current, desired_digest=svc.release.digest))
        # The verdict: the judge, against what the repo pins and the egress to be in effect.
        state = self.live.services.get(svc.service_id)
        target = target_of(svc, live, routekind.expected_routes(self.desired, svc))
        proof = evidence.judge(target, state, expected, rows)
        self.proofs.append(proof)
        for obs in rows:
            if obs.kind is ObservationKind.SILENT and obs.cluster_id not in self.mesh_blocked:
                self.blockers.append(Blocker(
                    code=BlockerCode.CLUSTER_SILENT, service=svc.name, cluster=obs.cluster_id,
                    message=f"{svc.name}: cluster {safe(obs.cluster_id)} gave no evidence "
                    f"({safe(obs.reason)}); what it runs is unknown"))
        if live is None or live.deployment is None or current is None:
            return
        # Drift: the same judge, against what the control plane itself intends now.
        intended = evidence.Target(service=svc.name, app_id=svc.app_id, digest=current,
                                   egress=live.egress)
        same = intended.digest == target.digest and (intended.egress is None) == (
            target.egress is None) and evidence.egress_key(intended.egress or ()) == \
            evidence.egress_key(target.egress or ()) and target.routes is None
        # The same question asked twice has the same answer: judged once when the control
        # plane already intends exactly what the repo pins (the steady state).
        now = proof if same else evidence.judge(intended, live, expected, rows)
        self.intended[svc.name] = now
        status = live.rollout_status
        in_progress = status is not None and status.status in IN_PROGRESS_STATUSES
        for finding in now.pending():
            drift = _drift_of(svc.name, finding, current, in_progress,
                              status.rollout_id if status else "")
            if drift is not None:
                self.drift.append(drift)

    def causes(self) -> None:
        """Root causes said once: a cluster no address answered as, and what it blocks."""
        if not self.unreachable:
            return
        for cluster, why in sorted(self.unreachable.items()):
            blocked = tuple(sorted(e.service for e in self.evidence
                                   if cluster in e.expected_clusters))
            self.blockers.append(Blocker(
                code=BlockerCode.CLUSTER_UNREACHABLE, cluster=cluster, services=blocked,
                message=f"cluster {safe(cluster)} gave no evidence: {why}; what it runs is "
                f"unknown for {len(blocked)} service(s)"
                + (f" ({', '.join(blocked)})" if blocked else "")))

    # -- grants ------------------------------------------------------------------------
    def grants(self) -> None:
        if self.live.grants is None:
            self.blockers.append(Blocker(
                code=BlockerCode.GRANTS_UNREADABLE,
                message="the control plane's deployment grants could not be read "
                f"({safe(self.live.grants_error or 'no answer')}); "
                "grant changes cannot be planned"))
            return
        names = {s.service_id: s.name for s in self.desired.services}
        apps = {s.service_id: s.app_id for s in self.desired.services}
        known = {sid for sid in names if isinstance(self.live.services.get(sid), LiveService)}
        live_map: dict[tuple[str, str], tuple[str, ...]] = {
            (g.user_id, g.service_id): tuple(sorted(c.value for c in g.capabilities))
            for g in self.live.grants
        }
        want_map = {key: tuple(sorted(c.value for c in caps))
                    for key, caps in self.desired.desired_grants().items()}
        self.preconditions["grants"] = sorted(
            [u, s, list(c)] for (u, s), c in live_map.items() if s in names)
        for (user, sid), caps in sorted(live_map.items()):
            if sid in names and (user, sid) not in want_map:
                if self.desired.settings.policy.prune and sid in known:
                    want_map[(user, sid)] = ()
                else:
                    why = "pruning is off" if not self.desired.settings.policy.prune else \
                        "not pruned: the service's live state is unknown"
                    self.drift.append(Drift(
                        code=DriftCode.GRANT_NOT_DECLARED, service=names[sid],
                        message=f"{names[sid]}: user {safe(user)} holds {', '.join(caps) or '[]'} "
                        f"live, which no Grant document declares ({why})"))
        for (user, sid), want in sorted(want_map.items()):
            if sid not in known:
                continue  # the service's live state is unknown: blocked above, never guessed
            have = live_map.get((user, sid), ())
            if want == have:
                continue
            pre = Preconditions(capabilities=have)
            added = tuple(sorted(set(want) - set(have)))
            removed = tuple(sorted(set(have) - set(want)))
            pruned = (user, sid) not in self.desired.desired_grants()
            self.changes.append(Change(
                action=Action.SET_GRANT, service=names[sid], service_id=sid, app_id=apps[sid],
                reason=ReasonCode.GRANT_NOT_DECLARED if pruned else ReasonCode.GRANT_DIFFERS,
                summary=f"{names[sid]}: {user} " + "; ".join(
                    ([f"gains {', '.join(added)}"] if added else [])
                    + ([f"loses {', '.join(removed)}"] if removed else []))
                + (" (not declared; pruned)" if pruned else ""),
                preconditions=pre, user_id=user,
                idempotency_key=idempotency_key(Action.SET_GRANT, sid, [user, list(want)], pre),
                capabilities_before=have, capabilities_after=want,
                capabilities_added=added, capabilities_removed=removed,
            ))

    # -- routes (issue 21: the kind is ``core.routekind``; this turns it into a plan's) --
    def routes(self) -> None:
        if not routekind.relevant(self.desired):
            return
        where = {key.split("/", 1)[1]: f"{ref.path}:{ref.line}"
                 for key, ref in self.desired.sources.items() if key.startswith("Route/")}
        found = routekind.plan_routes(self.desired, self.live.routes, self.live.routes_error,
                                      where)
        self.preconditions["routes"] = found.preconditions
        for code, service, message in found.blockers:
            self.blockers.append(Blocker(code=code, service=service, message=message))
        for drift_code, service, message in found.drift:
            self.drift.append(Drift(code=drift_code, service=service, message=message))
        for planned in found.changes:
            svc = planned.service
            self.changes.append(Change(
                action=Action.DELETE_ROUTE if planned.delete else Action.SYNC_ROUTE,
                service=svc.name, service_id=svc.service_id, app_id=svc.app_id,
                reason=planned.reason, summary=planned.summary, preconditions=Preconditions(),
                idempotency_key=planned.idempotency_key, route_before=planned.before,
                route_after=planned.after))

    def build(self, provenance: Provenance) -> Plan:
        self.mesh()
        for svc in sorted(self.desired.services, key=lambda s: s.name):
            self.service(svc)
        self.grants()
        self.routes()
        self.causes()
        if provenance.dirty and not provenance.worktree:
            # A worktree preview reads the edits; it is never applied (apply refuses it).
            self.blockers.append(Blocker(
                code=BlockerCode.REPO_DIRTY,
                message="the config repo has uncommitted changes: a plan must come from a "
                "commit" + (f" (HEAD is {provenance.commit[:12]})" if provenance.commit else "")))
        changes = sorted(self.changes, key=lambda c: (ACTION_ORDER[c.action], c.service,
                                                      c.user_id or "",
                                                      c.route_after.name if c.route_after
                                                      else c.route_before.name
                                                      if c.route_before else ""))
        # Risks on every service apply will gate (each change's, and each one the judge
        # does not prove converged -- engine.gate_targets), in the plan's service order.
        gated = {c.service for c in changes} | {p.service for p in self.proofs
                                                 if not p.converged}
        risks = tuple(r for name in sorted(gated) if name in self.intended
                      for r in risks_of(self.intended[name]))
        fingerprint = hashlib.sha256(json.dumps(
            self.preconditions, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
        return Plan(
            created_at=self.live.taken_at,
            commit=provenance.commit,
            dirty=provenance.dirty,
            repo_path=provenance.path,
            repo_root=provenance.root,
            untracked=provenance.untracked,
            desired_tree=provenance.tree,
            desired_files=dict(provenance.files),
            uncommitted=provenance.uncommitted,
            worktree=provenance.worktree,
            notes=self.live.mesh.notes,
            control_plane_url=self.live.control_plane_url,
            gateway=self.live.mesh.gateway,
            expected_clusters=self.live.mesh.expected_clusters,
            changes=tuple(changes),
            blockers=tuple(sorted(self.blockers, key=lambda b: (b.service or "", b.code,
                                                                 b.cluster or ""))),
            drift=tuple(sorted(self.drift, key=lambda d: (d.service or "", d.code,
                                                          d.cluster or "", d.message))),
            evidence=tuple(self.evidence),
            fingerprint=fingerprint,
            proofs=tuple(self.proofs),
            risks=risks,
            preflights=tuple(sorted(self.preflights, key=lambda p: (p.service, p.purpose))),
        )


def plan(desired: DesiredState, live: LiveSnapshot,
         provenance: Provenance = Provenance(),
         greenfield_answers: pf.Greenfield | None = None) -> Plan:
    """Compute the plan that makes ``live`` what ``desired`` says. Pure and deterministic.

    ``greenfield_answers``: what the engine read for the creations this plan holds
    (``creation_requests`` says which); None when nothing was asked, so every creation
    is blocked (``preflight_not_asked``) rather than planned unchecked."""
    return _Planner(desired, live, provenance, greenfield_answers).build(provenance)
