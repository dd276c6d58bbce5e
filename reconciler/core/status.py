"""``reconcile status``: service × environment, and service × cluster, from one snapshot
per environment.

Owns the rows the on-call view shows: per service and environment, the pinned digest and
tag, how many expected clusters the judge proves it on (and whether it is converged),
since when without a gap and on whose word (``core.promotion.soak_clock``, the clock a
promotion from it is soaked by: the latest of the rollout's success and every cluster's
``healthySince``), and what the
next promotion into that environment waits for -- the digest the previous environment's
current rollout is to, gated by ``core.promotion.gate`` (proof there, soak, windows,
freezes) with the time it becomes eligible; per cluster: pinned, running, proven, why
not, the cluster's last error.

Cheap by construction: it reads only a snapshot per environment (the batch reads a plan
reads) and asks the one judge per service; it makes no plan, asks no preflight, renders
nothing.

Pure: no I/O; ``now_ms`` is given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from reconciler.core import evidence, holds, promotion
from reconciler.core.desired import DesiredState
from reconciler.core.evidence import Proof, ServiceProof
from reconciler.core.live import LiveService, LiveSnapshot, Observation
from reconciler.core.pipeline import Environment, Freeze
from reconciler.core.planning import target_of
from reconciler.core.plans import Blocker
from reconciler.core.verification import CheckResult


@dataclass(frozen=True, slots=True)
class ClusterRow:
    service: str
    cluster: str
    pinned: str
    running: str | None
    proven: bool
    why: str | None  # the judge's code when not proven
    detail: str
    last_error: str | None
    healthy_since: int | None = None  # [ext] the cluster's own statement (ms)
    #: what the cluster says it runs beside the digest (the web view's service page):
    #: "healthy/required" replicas, the egress in effect, the routes it owns; None: the
    #: cluster did not say (silent, no record, or the field left out)
    replicas: str | None = None
    egress: tuple[str, ...] | None = None
    routes: tuple[str, ...] | None = None
    #: Issue 34: the results of the checks the service is held to, taken on this cluster
    #: (passing, failing with the value, unknown with why); empty when none is declared
    checks: tuple[CheckResult, ...] = ()


@dataclass(frozen=True, slots=True)
class NextPromotion:
    """What promoting the previous environment's current digest here waits for."""

    digest: str | None  # None: unknown (the previous environment could not be read)
    tag: str | None
    blockers: tuple[str, ...]  # "code: message"
    eligible_at: int | None  # ms; None: not known (not proven upstream)
    #: why the next promotion cannot be known ("staging unreadable"); never "nothing"
    unknown: str | None = None

    @property
    def ready(self) -> bool:
        return not self.blockers and self.unknown is None


@dataclass(frozen=True, slots=True)
class ServiceRow:
    environment: str
    service: str
    pinned: str
    tag: str | None
    proof: Proof
    proven: int  # expected clusters that prove the pinned digest
    expected: int
    since: int | None  # ms: since when it has proven the pinned digest without a gap
    reasons: tuple[str, ...]
    clusters: tuple[ClusterRow, ...]
    next: NextPromotion | None = None  # None: first environment, or nothing to promote
    #: the pinned digest is held (a ``kind: Hold``): since when and why
    held: str | None = None
    #: what refuses applying the pinned digest here although it is pinned (a policy of
    #: the environment denying its promotion: "code: message"), as the plan says it
    refused: tuple[str, ...] = ()
    #: whose word ``since`` is, or why it is not known (``SoakClock.source``)
    since_source: str | None = None


@dataclass(frozen=True, slots=True)
class Status:
    taken_at: int
    environments: tuple[str, ...]
    rows: tuple[ServiceRow, ...]
    errors: tuple[tuple[str, str], ...] = ()  # (environment, what could not be read)


def upstream_facts(name: str, desired: DesiredState,
                   snapshot: LiveSnapshot) -> promotion.Upstream:
    """An environment's snapshot as the ``Upstream`` of the next one (no second read)."""
    facts: dict[str, promotion.UpstreamService] = {}
    for svc in desired.services:
        live = snapshot.services.get(svc.service_id)
        facts[svc.name] = promotion.UpstreamService(
            app_id=svc.app_id, egress=target_of(svc, live).egress, live=live,
            expected=_expected(snapshot, live), observations=snapshot.observations.get(
                svc.app_id, ()), pinned=svc.release.digest, tag=svc.release.tag,
            version=svc.release.version,
            checks=tuple(name for name, _ in desired.checks_for(svc.name)))
    return promotion.Upstream(name=name, services=facts)


def _expected(snapshot: LiveSnapshot, live: object) -> tuple[str, ...]:
    targets = live.deployment.target_cluster_ids \
        if isinstance(live, LiveService) and live.deployment else ()
    return evidence.expected_clusters(snapshot.mesh.expected_clusters, targets)


def _clusters(proof: ServiceProof, pinned: str, observations: Sequence[Observation],
              said_by: dict[int, tuple[str | None, tuple[str, ...] | None,
                                       tuple[str, ...] | None]] | None = None,
              ) -> tuple[ClusterRow, ...]:
    """``said_by``: what each runtime says (replicas, egress, routes) by the runtime's
    identity, shared across the rows of one call -- a snapshot keeps one runtime per
    distinct status body, so 10,000 × 10 rows share a few hundred tuples."""
    said = {o.cluster_id: o for o in observations}
    memo = {} if said_by is None else said_by
    out: list[ClusterRow] = []
    for c in proof.clusters:
        obs = said.get(c.cluster)
        runtime = obs.runtime if obs is not None else None
        facts = memo.get(id(runtime)) if runtime is not None else None
        if runtime is not None and facts is None:
            counts = runtime.replica_counts
            facts = memo[id(runtime)] = (
                f"{counts.healthy}/{counts.required} healthy" if counts is not None
                else None if runtime.replicas is None else f"{runtime.replicas}",
                None if runtime.egress is None else tuple(
                    f"{e.host}:{e.port}" for e in runtime.egress),
                None if runtime.routes is None else tuple(
                    f"{r.name} {','.join(r.domains) or '*'}{r.path}" for r in runtime.routes))
        replicas, egress, routes = facts if facts is not None else (None, None, None)
        out.append(ClusterRow(
            service=proof.service, cluster=c.cluster, pinned=pinned, running=c.running,
            proven=c.proof is Proof.CONVERGED, why=c.why.value if c.why else None,
            detail=c.detail, last_error=c.last_error,
            healthy_since=obs.healthy_since if obs is not None else None,
            replicas=replicas, egress=egress, routes=routes,
            checks=obs.checks if obs is not None else ()))
    return tuple(out)


def rows(name: str, desired: DesiredState, snapshot: LiveSnapshot, *,
         environment: Environment | None = None, upstream: promotion.Upstream | None = None,
         freezes: Sequence[tuple[Freeze, str]] = (), now_ms: int,
         refused: Sequence[Blocker] = ()) -> tuple[ServiceRow, ...]:
    """One row per service of ``desired`` in environment ``name``; ``refused``: the
    blockers the environment's plan holds against promoting what it pins (its
    policies)."""
    out: list[ServiceRow] = []
    said_by: dict[int, tuple[str | None, tuple[str, ...] | None, tuple[str, ...] | None]] = {}
    for svc in desired.services:
        live = snapshot.services.get(svc.service_id)
        observations: tuple[Observation, ...] = snapshot.observations.get(svc.app_id, ())
        target = target_of(svc, live, desired, snapshot=snapshot, observations=observations)
        proof = evidence.judge(target, live, _expected(snapshot, live), observations)
        converged = proof.proof is Proof.CONVERGED
        clock = promotion.soak_clock(live, svc.release.digest, _expected(snapshot, live),
                                     observations, now_ms) if converged else None
        hold = holds.held(desired, svc.name, svc.release.digest)
        out.append(ServiceRow(
            environment=name, service=svc.name, pinned=svc.release.digest,
            tag=svc.release.tag, proof=proof.proof,
            proven=sum(1 for c in proof.clusters if c.proof is Proof.CONVERGED),
            expected=len(proof.clusters), since=clock.since if clock else None,
            since_source=clock.source if clock else None, reasons=tuple(proof.reasons()),
            clusters=_clusters(proof, svc.release.digest, observations, said_by),
            next=_next(svc.name, svc.release.digest, environment, upstream, freezes, now_ms,
                       desired),
            held=None if hold is None else f"since {hold.since}: {hold.reason}",
            refused=tuple(f"{b.code.value}: {b.message}" for b in refused
                          if b.service == svc.name or svc.name in b.services)))
    return tuple(out)


def _next(service: str, pinned: str, environment: Environment | None,
          upstream: promotion.Upstream | None, freezes: Sequence[tuple[Freeze, str]],
          now_ms: int, desired: DesiredState) -> NextPromotion | None:
    if environment is None or upstream is None:
        return None
    if upstream.error is not None:
        # Unknown is not "nothing to promote": the column says what could not be read.
        return NextPromotion(digest=None, tag=None, blockers=(), eligible_at=None,
                             unknown=f"{upstream.name} unreadable")
    facts = upstream.services.get(service)
    live = facts.live if facts else None
    candidate = live.current_digest if isinstance(live, LiveService) else None
    if facts is None or candidate is None or candidate == pinned:
        return None
    gate = promotion.gate(service, candidate, environment, upstream, freezes, now_ms)
    tag = facts.tag if facts.pinned == candidate else None
    # A digest held here (it failed in this environment) is never the next promotion.
    hold = holds.held(desired, service, candidate)
    held = () if hold is None else (
        f"held: {candidate} is held since {hold.since}: {hold.reason}",)
    return NextPromotion(digest=candidate, tag=tag,
                         blockers=held + tuple(f"{b.code.value}: {b.message}"
                                               for b in gate.blockers),
                         eligible_at=None if hold is not None else gate.eligible_at)


def assemble(taken_at: int, environments: Sequence[str],
             per_environment: Mapping[str, tuple[ServiceRow, ...]],
             errors: Sequence[tuple[str, str]] = ()) -> Status:
    ordered = tuple(row for env in environments for row in per_environment.get(env, ()))
    return Status(taken_at=taken_at, environments=tuple(environments), rows=ordered,
                  errors=tuple(errors))
