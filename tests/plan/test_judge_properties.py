"""Properties of the one judge (hypothesis): the plan's verdict and the gate agree.

Snapshots are generated cluster by cluster (answered / no record / silent, which digest it
resolved, its runtime state, the five replica counts, the egress in effect and dropped) and
with the control plane's rollout (to the pinned digest or not, its status). The gate is
computed here the way ``Reconciler.gate`` computes it, by asking ``evidence.judge`` about
every managed service on the same snapshot, so "no changes" can only be said when the gate
would pass at its first poll.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hypothesis import event, given, settings
from hypothesis import strategies as st

from reconciler.core import evidence
from reconciler.core.desired import DesiredState, Service, Settings
from reconciler.core.live import (
    ClusterRuntime,
    EgressRule,
    LiveService,
    LiveSnapshot,
    Observation,
    ObservationKind,
    ReplicaCounts,
    RolloutPlan,
    RolloutStatus,
)
from reconciler.core.planning import plan, target_of
from reconciler.core.plans import Plan, Verdict
from tests.plan import builders as b

EXAMPLES = 200
EXTRA_CLUSTER = "sn4"  # a rollout target no DNS answer names: expected, never observed
SUCCEEDED = ("succeeded", "rolled-back")
STATUSES = ("succeeded", "rolled-back", "pending", "deploying", "failed", "mismatched", None)
DECLARED = (("api.stripe.com", 443), ("hooks.slack.com", 443))  # checkout's, in the repo
CATALOG_LIVE = (("cdn.example.org", 443),)  # catalog omits egress: the live one is judged
STRAY = ("x.example.net", 443)  # a destination nobody declared

# checkout declares its egress; catalog leaves the live declaration alone.
SERVICES = {"checkout": DECLARED, "catalog": None}


def _rules(pairs: tuple[tuple[str, int], ...]) -> tuple[EgressRule, ...]:
    return tuple(EgressRule(host=h, port=p) for h, p in pairs)


def desired_state() -> DesiredState:
    docs = [
        b.service_doc("checkout", "v2", [{"host": h, "port": p} for h, p in DECLARED]),
        b.service_doc("catalog", "v2"),
    ]
    return DesiredState(settings=Settings.model_validate(b.SETTINGS),
                        services=tuple(Service.model_validate(d) for d in docs), grants=())


DESIRED = desired_state()


@dataclass(frozen=True)
class ClusterWorld:
    kind: ObservationKind
    resolved: str  # "pinned" | "other" | "none"
    running: bool
    counts: tuple[int, int, int, int, int]  # required, observed, healthy, verified, failed
    egress: tuple[tuple[str, int], ...] | None  # in effect; None: not reported
    dropped: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class ServiceWorld:
    name: str
    current: str  # "pinned" | "other"
    status: str | None
    live_egress: tuple[tuple[str, int], ...]  # the control plane's declaration
    extra_target: bool  # the rollout also targets EXTRA_CLUSTER
    clusters: dict[str, ClusterWorld]

    @property
    def judged_egress(self) -> tuple[tuple[str, int], ...]:
        declared = SERVICES[self.name]
        return declared if declared is not None else self.live_egress


def _subset(pool: tuple[tuple[str, int], ...]) -> st.SearchStrategy[tuple[tuple[str, int], ...]]:
    return st.lists(st.sampled_from(pool), unique=True, max_size=len(pool)).map(
        lambda xs: tuple(sorted(xs)))


def settled_cluster(n: int, judged: tuple[tuple[str, int], ...]) -> ClusterWorld:
    return ClusterWorld(kind=ObservationKind.ANSWERED, resolved="pinned", running=True,
                        counts=(n, n, n, n, 0), egress=tuple(sorted(judged)), dropped=())


@st.composite
def cluster_worlds(draw: st.DrawFn, judged: tuple[tuple[str, int], ...]) -> ClusterWorld:
    if draw(st.booleans()):  # half the clusters prove it
        return settled_cluster(draw(st.integers(1, 3)), judged)
    pool = (*judged, STRAY)
    return ClusterWorld(
        kind=draw(st.sampled_from(list(ObservationKind))),
        resolved=draw(st.sampled_from(("pinned", "pinned", "other", "none"))),
        running=draw(st.booleans()),
        counts=draw(st.tuples(*[st.integers(0, 3)] * 4, st.integers(0, 1))),
        egress=draw(st.none() | _subset(pool) | st.just(tuple(sorted(judged)))),
        dropped=draw(st.just(()) | _subset(judged)),
    )


@st.composite
def service_worlds(draw: st.DrawFn, name: str) -> ServiceWorld:
    """A third settled (everything proves it), a third one flaw away, a third anything."""
    declared = SERVICES[name]
    mode = draw(st.sampled_from(("settled", "one_flaw", "random")))
    if mode == "random":
        live_egress = draw(st.just(declared) | _subset((*DECLARED, STRAY))) if declared \
            else CATALOG_LIVE
        judged = declared if declared is not None else live_egress
        return ServiceWorld(
            name=name,
            current=draw(st.sampled_from(("pinned", "pinned", "other"))),
            status=draw(st.sampled_from(SUCCEEDED) | st.sampled_from(STATUSES)),
            live_egress=tuple(sorted(live_egress)),
            extra_target=draw(st.sampled_from((False, False, False, True))),
            clusters={c: draw(cluster_worlds(judged)) for c in b.CLUSTERS},
        )
    live_egress = declared if declared is not None else CATALOG_LIVE
    world = ServiceWorld(
        name=name, current="pinned", status=draw(st.sampled_from(SUCCEEDED)),
        live_egress=tuple(sorted(live_egress)), extra_target=False,
        clusters={c: settled_cluster(draw(st.integers(1, 3)), live_egress)
                  for c in b.CLUSTERS})
    if mode == "settled":
        return world
    flaw = draw(st.sampled_from(("current", "status", "extra_target", "live_egress", "cluster")))
    if flaw == "current":
        return replace(world, current="other")
    if flaw == "status":
        return replace(world, status=draw(st.sampled_from(
            [x for x in STATUSES if x not in SUCCEEDED])))
    if flaw == "extra_target":
        return replace(world, extra_target=True)
    if flaw == "live_egress":
        return replace(world, live_egress=draw(_subset((*DECLARED, STRAY))))
    cluster = draw(st.sampled_from(b.CLUSTERS))
    return replace(world, clusters={**world.clusters,
                                    cluster: draw(cluster_worlds(live_egress))})


worlds = st.tuples(*(service_worlds(name) for name in SERVICES))


def _digest(name: str, which: str) -> str | None:
    return {"pinned": b.digest(name, "v2"), "other": b.digest(name, "v1")}.get(which)


def _runtime(name: str, c: ClusterWorld) -> ClusterRuntime:
    required, observed, healthy, verified, failed = c.counts
    return ClusterRuntime(
        state="ACTIVE", runtime_state="RUNNING" if c.running else "STOPPED",
        resolved_digest=_digest(name, c.resolved), rollout_id=f"ro-{name}-7",
        rollout_generation=7,
        replica_counts=ReplicaCounts(required=required, observed=observed, healthy=healthy,
                                     verified=verified, failed=failed),
        egress=None if c.egress is None else _rules(c.egress), egress_dropped=_rules(c.dropped))


def _live_service(w: ServiceWorld) -> LiveService:
    current = _digest(w.name, w.current)
    assert current is not None
    rollout_id = f"ro-{w.name}-7"
    targets = (*b.CLUSTERS, EXTRA_CLUSTER) if w.extra_target else b.CLUSTERS
    return LiveService(
        service_id=f"svc-{w.name}", name=w.name, immutable_required=True,
        deployment=RolloutPlan(rollout_id=rollout_id, rollout_generation=7,
                               release_id=f"rel-{w.name}-{w.current}", requested_digest=current,
                               mode="promotion", target_cluster_ids=targets),
        rollout_status=None if w.status is None else RolloutStatus(
            rollout_id=rollout_id, rollout_generation=7, expected_digest=current,
            status=w.status, mismatch_reason="wrong digest" if w.status == "mismatched" else None),
        egress=_rules(w.live_egress), egress_revision=3,
        releases=(b.release(w.name, "v1", 100, 110), b.release(w.name, "v2", 200, 210)),
    )


def snapshot(ws: tuple[ServiceWorld, ...]) -> LiveSnapshot:
    observations: dict[str, tuple[Observation, ...]] = {}
    for w in ws:
        rows = []
        for cluster, c in w.clusters.items():
            if c.kind is ObservationKind.ANSWERED:
                rows.append(Observation(cluster_id=cluster, address=b.ADDRESSES[cluster],
                                        kind=c.kind, runtime=_runtime(w.name, c)))
            elif c.kind is ObservationKind.NO_RECORD:
                rows.append(Observation(cluster_id=cluster, address=b.ADDRESSES[cluster],
                                        kind=c.kind))
            else:
                rows.append(Observation(cluster_id=cluster, kind=c.kind, reason="timed out"))
        observations[w.name] = tuple(rows)
    return b.reference_live(services={f"svc-{w.name}": _live_service(w) for w in ws},
                            observations=observations, grants=())


def gate_proofs(live: LiveSnapshot) -> list[evidence.ServiceProof]:
    """What ``Reconciler.gate`` judges at its first poll, on the same snapshot."""
    proofs = []
    for svc in sorted(DESIRED.services, key=lambda s: s.name):
        state = live.services.get(svc.service_id)
        targets = state.deployment.target_cluster_ids \
            if isinstance(state, LiveService) and state.deployment else ()
        expected = evidence.expected_clusters(targets, live.mesh.expected_clusters)
        proofs.append(evidence.judge(target_of(svc, state), state, expected,
                                     live.observations.get(svc.app_id, ())))
    return proofs


def _cluster_is_bad(c: ClusterWorld) -> bool:
    required, observed, _healthy, _verified, failed = c.counts
    return (c.kind is not ObservationKind.ANSWERED or c.resolved != "pinned" or not c.running
            or failed > 0 or observed < required or required < 1)


def _describe(p: Plan) -> str:
    return (f"verdict={p.verdict} changes={[c.summary for c in p.changes]} "
            f"blockers={[x.message for x in p.blockers]} "
            f"proofs={[(x.service, x.proof.value, x.reasons()) for x in p.proofs]}")


@settings(max_examples=EXAMPLES, deadline=None)
@given(ws=worlds)
def test_no_changes_exactly_when_nothing_changes_and_the_gate_passes(
        ws: tuple[ServiceWorld, ...]) -> None:
    live = snapshot(ws)
    p = plan(DESIRED, live)
    gate = gate_proofs(live)
    gate_passes = all(x.converged for x in gate)
    event(f"verdict {p.verdict.value}")
    assert (p.verdict is Verdict.NO_CHANGES) == (not p.changes and gate_passes), _describe(p)
    # The plan's own proofs are the gate's, word for word.
    assert list(p.proofs) == gate
    assert p.unconverged() == sorted(x.service for x in gate if not x.converged)


@settings(max_examples=EXAMPLES, deadline=None)
@given(ws=worlds)
def test_missing_or_contrary_evidence_is_never_no_changes(
        ws: tuple[ServiceWorld, ...]) -> None:
    p = plan(DESIRED, snapshot(ws))
    for w in ws:
        flawed = (w.extra_target  # an expected cluster that never answered
                  or any(_cluster_is_bad(c) for c in w.clusters.values())
                  or w.status not in SUCCEEDED)
        if flawed:
            assert p.verdict is not Verdict.NO_CHANGES, _describe(p)
            proof = p.proof_of(w.name)
            assert proof is not None and not proof.converged, _describe(p)


@st.composite
def judge_cases(draw: st.DrawFn) -> tuple[evidence.Target, LiveService, tuple[str, ...],
                                          list[Observation], list[Observation]]:
    ws = draw(worlds)
    w = ws[draw(st.integers(0, len(ws) - 1))]
    live = snapshot(ws)
    svc = DESIRED.service_by_name(w.name)
    assert svc is not None
    state = live.services[svc.service_id]
    assert isinstance(state, LiveService)
    rows = list(live.observations[w.name])
    # An address that answered without being expected is shown, never judged.
    rows.append(Observation(cluster_id="127.0.0.9", address="127.0.0.9",
                            kind=ObservationKind.ANSWERED,
                            runtime=_runtime(w.name, w.clusters["sn1"])))
    expected = tuple(draw(st.permutations(
        [*b.CLUSTERS, *([EXTRA_CLUSTER] if w.extra_target else [])])))
    return target_of(svc, state), state, expected, rows, draw(st.permutations(rows))


@settings(max_examples=EXAMPLES, deadline=None)
@given(case=judge_cases())
def test_the_judge_is_deterministic_and_ignores_observation_order(
        case: tuple[evidence.Target, LiveService, tuple[str, ...], list[Observation],
                    list[Observation]]) -> None:
    target, live, expected, rows, shuffled = case
    first = evidence.judge(target, live, expected, rows)
    assert evidence.judge(target, live, expected, rows) == first
    assert evidence.judge(target, live, tuple(reversed(expected)), shuffled) == first
    assert evidence.judge(target, live, iter(expected), iter(shuffled)) == first


@settings(max_examples=EXAMPLES, deadline=None)
@given(case=judge_cases())
def test_a_converged_service_proof_has_every_expected_cluster_converged(
        case: tuple[evidence.Target, LiveService, tuple[str, ...], list[Observation],
                    list[Observation]]) -> None:
    target, live, expected, rows, _ = case
    proof = evidence.judge(target, live, expected, rows)
    assert tuple(c.cluster for c in proof.clusters) == tuple(sorted(set(expected)))
    if proof.converged:
        assert proof.rollout_why is None and proof.rollout_detail == ""
        assert all(c.proof is evidence.Proof.CONVERGED and c.why is None
                   for c in proof.clusters)
        assert proof.pending() == () and proof.reasons() == []
    else:
        assert proof.reasons(), "a proof that is not converged says why"


@settings(max_examples=EXAMPLES, deadline=None)
@given(case=judge_cases(), share=st.booleans())
def test_a_judgement_kept_pending_only_is_the_same_judgement_without_converged_clusters(
        case: tuple[evidence.Target, LiveService, tuple[str, ...], list[Observation],
                    list[Observation]], share: bool) -> None:
    target, live, expected, rows, _ = case
    if share:  # one runtime object for every answer, as a snapshot's shared status
        first = next((o.runtime for o in rows if o.runtime is not None), None)
        rows = [o.model_copy(update={"runtime": first}) if o.runtime is not None else o
                for o in rows]
    full = evidence.judge(target, live, expected, rows)
    kept = evidence.judge(target, live, expected, rows, pending_only=True)
    assert kept == full.model_copy(update={"clusters": full.pending()})
    assert kept.proof is full.proof and kept.pending() == full.pending()
    assert kept.stated() == full.stated() and kept.reasons() == full.reasons()
    assert all(c.proof is not evidence.Proof.CONVERGED for c in kept.clusters)
