"""Planning: ``plan(desired, live) -> Plan``, a pure function.

Owns the plan as a whole: which kind of change each declared service is up for (absent
on the control plane: a creation; present: its release and its egress), the kinds
planned from the whole desired state (``Kind.diff_all``: grants), the mesh's blockers
(why not to apply), drift (what differs without being an intended change), the evidence
attached to each service and the judge's word on it, the execution order and the
fingerprint. What one kind changes -- its diff, preconditions, idempotency key and
summary -- is that kind's module's (``core.kinds``). Apply executes what this decides and
never decides again (STYLE §1).

A creation is judged from what the engine read for it (``core.preflight.Greenfield``):
``core.kinds.create`` (its preflight requests, ``creation_requests``/``bound_requests``,
are re-exported here for the engine).

Risks (``risks_of``) come from the judge's findings against what the control plane
intends now, for every service apply will gate: a cluster that *states* why it does not
converge (``ClusterProof.stated``) or a rollout the control plane reports failed. A risk
belongs to the plan: it is kept only when the head asks the clusters for what the finding
is about (``head_risks``: the digest this plan pins, the egress it declares); a refusal
of the digest the plan replaces is drift, never "the gate will fail". They never change
the verdict, and never come from silence (that is a blocker). The plan lists them with
the services it changes first.

Must not: read files, talk to the network, look at the clock (time comes from the
snapshot), or render anything.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from reconciler.core import evidence, holds, kinds
from reconciler.core import preflight as pf
from reconciler.core.codes import BlockerCode, DriftCode, ReasonCode, RiskCode
from reconciler.core.cpcodes import ControlPlaneCode
from reconciler.core.desired import DesiredState, Service
from reconciler.core.kinds import ACTION_ORDER, KINDS, ChangeBase, Diff, create, kind_of, release
from reconciler.core.kinds.base import idempotency_key
from reconciler.core.kinds.create import (
    Bound,
    PreflightAsk,
    absent,
    app_id_owner,
    bind,
    bound_requests,
    creation_requests,
    preflight_request_id,
)
from reconciler.core.live import (
    FAILED_STATUSES,
    IN_PROGRESS_STATUSES,
    EgressRule,
    LiveService,
    LiveSnapshot,
    Observation,
    ObservationKind,
    ReadFailure,
)
from reconciler.core.plans import Blocker, Drift, Plan, Risk, ServiceEvidence
from reconciler.core.provenance import Provenance
from reconciler.core.sanitize import safe
from reconciler.core.verification import PlannedCheck, ServiceChecks

__all__ = [
    "Bound", "PreflightAsk", "Provenance", "absent", "app_id_owner", "bind", "bound_requests",
    "creation_requests", "head_risks", "idempotency_key", "plan", "preflight_request_id",
    "risks_of",
    "target_of",
]


def _short(digest: str | None) -> str:
    if not digest:
        return "<none>"
    return digest[:19]  # "sha256:" + 12 hex


def target_of(svc: Service, live: LiveService | ReadFailure | None,
              desired: DesiredState | None = None, *, snapshot: LiveSnapshot | None = None,
              observations: Sequence[Observation] = (),
              changes: Sequence[ChangeBase] = ()) -> evidence.Target:
    """What the judge must see for ``svc``: the pinned digest, and what each kind requires
    of every expected cluster (``Kind.expect``: the egress, the gateway routes in effect
    and those deleted). ``desired`` None: only what the service itself declares."""
    ask = kinds.Expecting(svc=svc, live=live, desired=desired, snapshot=snapshot,
                          observations=observations, changes=changes)
    fields: dict[str, object] = {}
    for kind in KINDS:
        fields.update(kind.expect(ask))
    if desired is not None:
        # Issue 34: the checks every expected cluster must pass (``kind: Verification``).
        checks = tuple(name for name, _ in desired.checks_for(svc.name))
        if checks:
            fields["checks"] = checks
    return evidence.Target.model_validate({
        "service": svc.name, "app_id": svc.app_id, "digest": svc.release.digest, **fields})


def planned_checks(desired: DesiredState) -> tuple[ServiceChecks, ...]:
    """Issue 34: the checks each service is held to, as a plan shows them."""
    out: list[ServiceChecks] = []
    for svc in sorted(desired.services, key=lambda s: s.name):
        checks = desired.checks_for(svc.name)
        if not checks:
            continue
        shown: list[PlannedCheck] = []
        for name, check in checks:
            if check.http is not None:
                http = check.http
                spec = f"GET {http.path} expects HTTP {http.status}"
                if http.body is not None:
                    spec += f", body contains {http.body!r}"
                if http.max_latency_seconds is not None:
                    spec += f", within {http.max_latency_seconds:g}s"
                kind = "http"
            else:
                assert check.prometheus is not None
                spec = f"{check.prometheus.query} → {check.prometheus.success_condition}"
                kind = "prometheus"
            shown.append(PlannedCheck(name=name, kind=kind, spec=safe(spec, 600),
                                      count=check.count,
                                      interval_seconds=check.interval_seconds,
                                      failure_limit=check.failure_limit))
        out.append(ServiceChecks(service=svc.name, checks=tuple(shown)))
    return tuple(out)


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


def head_risks(finding: evidence.ServiceProof, head: evidence.Target,
               egress: tuple[EgressRule, ...] | None) -> tuple[Risk, ...]:
    """``risks_of(finding)`` that are about what the head would make the clusters run:
    ``finding`` is the judge's word against what the control plane intends now (its
    ``digest``, its ``egress``), ``head`` what this plan pins. A cluster refusing, or a
    rollout failed for, a digest the plan replaces says nothing about the pinned one
    (drift context, not a risk); an operator's dropped egress is a risk only while the
    head declares the same egress."""
    same_digest = finding.digest == head.digest
    same_egress = (egress is None) == (head.egress is None) and \
        evidence.egress_key(egress or ()) == evidence.egress_key(head.egress or ())
    return tuple(r for r in risks_of(finding)
                 if (same_egress if r.code is RiskCode.CLUSTER_DROPPED_EGRESS else same_digest))


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
        self.changes: list[ChangeBase] = []
        self.blockers: list[Blocker] = []
        self.drift: list[Drift] = []
        self.evidence: list[ServiceEvidence] = []
        self.preconditions: dict[str, object] = {}
        self.proofs: list[evidence.ServiceProof] = []
        #: service -> the judge's word against what the control plane intends now: its
        #: clusters not converged only (``judge(pending_only=True)``), or the plan's own
        #: proof of the service when the control plane intends what the repo pins
        self.intended: dict[str, evidence.ServiceProof] = {}
        #: service -> what the head pins (its target), the egress in effect, and whether
        #: the control plane already intends exactly that: what ``head_risks`` compares
        self.asks: dict[str, tuple[evidence.Target, tuple[EgressRule, ...] | None, bool]] = {}
        #: expected clusters no address answered as: cluster -> why (said once, mesh-wide)
        self.unreachable: dict[str, str] = {}
        #: every blocker that stands for the whole cluster (its per-service silence folds in)
        self.mesh_blocked: set[str] = set()

    def take(self, found: Diff) -> None:
        """What one kind's diff found, into the plan."""
        self.changes.extend(found.changes)
        self.blockers.extend(found.blockers)
        self.drift.extend(found.drift)
        self.preflights.extend(found.preflights)
        self.preconditions.update(found.preconditions)

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
        if isinstance(live, ReadFailure) and live.code == ControlPlaneCode.SERVICE_NOT_FOUND:
            # Declared here, absent there: a creation, through the greenfield preflight.
            self.preconditions[svc.service_id] = {"absent": True}
            self.take(create.diff(svc, self.live, self.provenance, self.answers,
                                  ReasonCode.SERVICE_NOT_ON_CONTROL_PLANE))
            self._evidence(svc, None, observations)
            return
        if live is None or isinstance(live, ReadFailure):
            code = BlockerCode.SERVICE_NOT_FOUND if live is not None and \
                live.code == ControlPlaneCode.SERVICE_NOT_FOUND else BlockerCode.SERVICE_UNREADABLE
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
        self.take(release.diff(svc, live, self.desired.settings.policy.release_evidence))
        self.take(kinds.egress.diff(svc, live))
        self._rollout_drift(svc, live)
        if svc.immutable and not live.immutable_required:
            self.drift.append(Drift(
                code=DriftCode.IMMUTABLE_NOT_ENFORCED, service=svc.name,
                message=f"{svc.name}: the repo requires immutable deployment but the control "
                "plane's service does not (immutableImageRequired is false); the next "
                "promotion sets it"))
        self._evidence(svc, live, observations)

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
        target = target_of(svc, live, self.desired, snapshot=self.live, observations=rows)
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
        # (Egress compared as sets; every other field of the target -- each kind's --
        # must be what the control plane's intent leaves it at.)
        # (A different digest decides it at once: the copy below compares every field.)
        same = target.digest == current and \
            (intended.egress is None) == (target.egress is None) and \
            evidence.egress_key(intended.egress or ()) == \
            evidence.egress_key(target.egress or ()) and \
            target.model_copy(update={"egress": intended.egress}) == intended
        # The same question asked twice has the same answer: judged once when the control
        # plane already intends exactly what the repo pins (the steady state). Else only
        # what is not converged is kept: all that drift and risks read.
        now = proof if same else evidence.judge(intended, live, expected, rows,
                                                pending_only=True)
        self.intended[svc.name] = now
        # What the head asks for, kept to read risks on the services apply gates only.
        self.asks[svc.name] = (target, None if same else live.egress, same)
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

    def _risks(self, name: str) -> tuple[Risk, ...]:
        target, egress, same = self.asks[name]
        now = self.intended[name]
        return risks_of(now) if same else head_risks(now, target, egress)

    # -- kinds planned from the whole desired state (grants) -------------------------
    def plan_wide(self) -> None:
        for kind in KINDS:
            found = kind.diff_all(self.desired, self.live)
            if found is not None:
                self.take(found)

    def build(self, provenance: Provenance) -> Plan:
        self.mesh()
        for svc in sorted(self.desired.services, key=lambda s: s.name):
            self.service(svc)
        self.plan_wide()
        self.causes()
        self.blockers.extend(holds.blockers(self.desired))  # issue 20: a held pin is NO-GO
        if provenance.dirty and not provenance.worktree:
            # A worktree preview reads the edits; it is never applied (apply refuses it).
            self.blockers.append(Blocker(
                code=BlockerCode.REPO_DIRTY,
                message="the config repo has uncommitted changes: a plan must come from a "
                "commit" + (f" (HEAD is {provenance.commit[:12]})" if provenance.commit else "")))
        changes = sorted(self.changes, key=lambda c: (
            ACTION_ORDER[c.action], c.service, c.user_id or "", kind_of(c).sort_key(c)))
        # Risks on every service apply will gate (each change's, and each one the judge
        # does not prove converged -- engine.gate_targets): the services the plan changes
        # first (what the reader came for), then those it only gates.
        changed = sorted({c.service for c in changes})
        gated = changed + sorted({p.service for p in self.proofs if not p.converged}
                                 - set(changed))
        risks = tuple(r for name in gated if name in self.intended
                      for r in self._risks(name))
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
            verifications=planned_checks(self.desired),
        )


_NOWHERE = Provenance()


def plan(desired: DesiredState, live: LiveSnapshot,
         provenance: Provenance = _NOWHERE,
         greenfield_answers: pf.Greenfield | None = None) -> Plan:
    """Compute the plan that makes ``live`` what ``desired`` says. Pure and deterministic.

    ``greenfield_answers``: what the engine read for the creations this plan holds
    (``creation_requests`` says which); None when nothing was asked, so every creation
    is blocked (``preflight_not_asked``) rather than planned unchecked."""
    return _Planner(desired, live, provenance, greenfield_answers).build(provenance)
