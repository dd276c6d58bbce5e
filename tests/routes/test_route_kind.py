"""The route change kind through the planner and the one judge (pure, issue 21).

The reference desired state and snapshot of ``tests.plan.builders``, with Route documents
added and the gateway's answer (ours and another client's routes) in the snapshot.
"""

from __future__ import annotations

from typing import Any

from reconciler.core import evidence, planning, routing
from reconciler.core.codes import BlockerCode, DriftCode
from reconciler.core.desired import DesiredState, Route, Service, Settings
from reconciler.core.evidence import Proof, Why
from reconciler.core.kinds.route import RouteChange
from reconciler.core.live import LiveSnapshot, Observation, ObservationKind
from reconciler.core.plans import Action, Verdict
from reconciler.core.routing import GatewayRoute, RouteOwnership
from tests.plan.builders import (
    CURRENT,
    SETTINGS,
    reference_desired,
    reference_live,
    runtime,
    service_doc,
)

HOST = "shop.sandbox.test"


def route_doc(name: str, priority: int, *, route_ref: str | None = None, path: str = "/",
              ports: list[int] | None = None, port: int = 8080, **extra: Any) -> Route:
    owner: dict[str, Any] = {"service": "checkout", "hostname": HOST}
    if route_ref is not None:
        owner["routeRef"] = route_ref
    return Route.model_validate({
        "apiVersion": "reconcile/v1", "kind": "Route", "name": name, "owner": owner,
        "match": {"ports": ports or [443], "path": path}, "action": {"port": port},
        "priority": priority, **extra})


NORMAL = route_doc("shop-web", 100, ports=[80, 443])
ACME = route_doc("shop-acme", 200, route_ref="acme", ports=[80],
                 path="/.well-known/acme-challenge/", port=8089,
                 managedRouteKind="letsencrypt-http01-forward")
FOREIGN = GatewayRoute(
    ownership=RouteOwnership(app_id="status-page", hostname=HOST, route_ref="status"),
    name="shop-status", domains=(HOST,), ports=(443,), path="/status/", priority=500,
    target_app_id="status-page", target_port=8080, client_id="edge-team")


def desired(*routes: Route, prune: bool = False) -> DesiredState:
    """The reference repo with checkout pinned to what runs (so only routes differ)."""
    base = reference_desired()
    steady = Service.model_validate(service_doc("checkout", "v2.3.0",
                                                [{"host": "api.stripe.com"}]))
    base = base.model_copy(update={"services": tuple(
        steady if s.name == "checkout" else s for s in base.services)})
    settings = base.settings
    if prune:
        settings = Settings.model_validate({**SETTINGS, "policy": {"routes": {"prune": True}}})
    return base.model_copy(update={"routes": routes, "settings": settings})


def applied(*routes: Route) -> tuple[GatewayRoute, ...]:
    return tuple(routing.from_declared(r, "checkout") for r in routes)


def live(ours: tuple[GatewayRoute, ...] = (), *, in_effect: dict[str, tuple[GatewayRoute, ...]]
         | None = None, foreign: bool = True) -> LiveSnapshot:
    """The reference snapshot with our routes listed and each cluster serving
    ``in_effect[cluster]`` (default: ``ours``) for checkout."""
    snapshot = reference_live()
    rows = []
    for obs in snapshot.observations["checkout"]:
        serving = (in_effect or {}).get(obs.cluster_id, ours)
        assert obs.runtime is not None
        rows.append(obs.model_copy(update={"runtime": obs.runtime.model_copy(
            update={"routes": serving})}))
    observations = {**snapshot.observations, "checkout": tuple(rows)}
    return snapshot.model_copy(update={
        "routes": (*ours, *((FOREIGN,) if foreign else ())), "observations": observations})


def test_two_declared_routes_same_priority_overlapping_is_no_go_with_an_example() -> None:
    api = route_doc("shop-api", 100, route_ref="api", path="/api/")
    plan = planning.plan(desired(NORMAL, api), live())
    assert plan.verdict is Verdict.NO_GO
    [blocker] = [b for b in plan.blockers if b.code is BlockerCode.ROUTE_AMBIGUOUS]
    assert "'shop-web'" in blocker.message and "'shop-api'" in blocker.message
    assert "https://shop.sandbox.test/api/ (tcp)" in blocker.message
    raised = route_doc("shop-api", 150, route_ref="api", path="/api/")
    again = planning.plan(desired(NORMAL, raised), live())
    assert not [b for b in again.blockers if b.code.value.startswith("route")]


def test_a_narrow_route_under_a_broader_higher_one_is_shadowed() -> None:
    narrow = route_doc("shop-api", 50, route_ref="api", path="/api/")
    plan = planning.plan(desired(NORMAL, narrow), live())
    [blocker] = [b for b in plan.blockers if b.code is BlockerCode.ROUTE_SHADOWED]
    assert "'shop-api'" in blocker.message and "can never match" in blocker.message
    assert "'shop-web'" in blocker.message
    assert plan.verdict is Verdict.NO_GO


def test_http01_and_normal_route_sync_independently_and_a_replay_sends_nothing() -> None:
    plan = planning.plan(desired(NORMAL, ACME), live())
    routes = [c for c in plan.changes if isinstance(c, RouteChange)
              and c.action is Action.SYNC_ROUTE]
    assert {c.route_after.key for c in routes if c.route_after} == {
        ("checkout", HOST, None), ("checkout", HOST, "acme")}
    assert plan.verdict is Verdict.GO
    assert plan.counts()["sync_route"] == 2
    # After the sync, every cluster serving both: no change, and the judge proves it.
    done = planning.plan(desired(NORMAL, ACME), live(applied(NORMAL, ACME)))
    assert [c for c in done.changes if c.action in (Action.SYNC_ROUTE,
                                                    Action.DELETE_ROUTE)] == []
    checkout = done.proof_of("checkout")
    assert checkout is not None and checkout.proof is Proof.CONVERGED


def test_another_clients_route_is_analysed_but_never_written_or_pruned() -> None:
    under = route_doc("shop-status-mine", 100, route_ref="mine", path="/status/x")
    plan = planning.plan(desired(NORMAL, under), live())
    shadowed = [b for b in plan.blockers if b.code is BlockerCode.ROUTE_SHADOWED]
    assert shadowed and "owned by client edge-team" in shadowed[0].message
    pruning = planning.plan(desired(NORMAL, prune=True), live(applied(NORMAL)))
    assert not [c for c in pruning.changes if c.action is Action.DELETE_ROUTE]
    assert not [c for c in pruning.changes if isinstance(c, RouteChange)
                and c.route_after and c.route_after.client_id is not None]


def test_a_route_of_ours_no_longer_declared_is_pruned_only_with_prune_true() -> None:
    stale = applied(NORMAL, ACME)
    kept = planning.plan(desired(NORMAL), live(stale))
    assert not [c for c in kept.changes if c.action is Action.DELETE_ROUTE]
    assert [d.code for d in kept.drift if d.code is DriftCode.ROUTE_NOT_DECLARED]
    pruned = planning.plan(desired(NORMAL, prune=True), live(stale))
    [delete] = [c for c in pruned.changes if isinstance(c, RouteChange)
                and c.action is Action.DELETE_ROUTE]
    assert delete.route_before is not None and delete.route_before.name == "shop-acme"


def test_one_cluster_keeping_the_old_route_is_named_by_the_judge() -> None:
    old = applied(route_doc("shop-web", 90, ports=[80, 443], port=7070))
    new = applied(NORMAL)
    snapshot = live(new, in_effect={"sn1": old, "sn2": new, "sn3": new})
    plan = planning.plan(desired(NORMAL), snapshot)
    assert not [c for c in plan.changes if c.action is Action.SYNC_ROUTE]
    proof = plan.proof_of("checkout")
    assert proof is not None and proof.proof is Proof.NOT_CONVERGED
    [pending] = proof.pending()
    assert pending.cluster == "sn1" and pending.why is Why.ROUTE_NOT_IN_EFFECT
    assert "priority 90" in pending.detail and "checkout:7070" in pending.detail
    assert plan.verdict is Verdict.GO  # never "no changes" while sn1 serves the old route


def test_a_cluster_without_a_route_view_proves_nothing() -> None:
    snapshot = live(applied(NORMAL))
    rows = tuple(o.model_copy(update={"runtime": o.runtime.model_copy(update={"routes": None})})
                 if o.cluster_id == "sn3" and o.runtime is not None else o
                 for o in snapshot.observations["checkout"])
    plan = planning.plan(desired(NORMAL), snapshot.model_copy(
        update={"observations": {**snapshot.observations, "checkout": rows}}))
    proof = plan.proof_of("checkout")
    assert proof is not None and proof.proof is Proof.UNPROVEN
    assert [c.cluster for c in proof.pending()] == ["sn3"]


def test_unreadable_routes_block_and_a_repo_without_routes_is_judged_as_before() -> None:
    plan = planning.plan(desired(NORMAL), reference_live(routes=None, routes_error="boom"))
    assert [b.code for b in plan.blockers] == [BlockerCode.ROUTES_UNREADABLE]
    plain = planning.plan(reference_desired(), reference_live())
    read = planning.plan(reference_desired(), live())  # routes read change nothing
    assert (plain.verdict, plain.changes, plain.blockers, plain.drift, plain.proofs) == (
        read.verdict, read.changes, read.blockers, read.drift, read.proofs)


def test_observation_routes_are_left_out_of_the_wire_when_absent() -> None:
    tag, gen = CURRENT["checkout"]
    row = Observation(cluster_id="sn1", kind=ObservationKind.ANSWERED,
                      runtime=runtime("checkout", tag, gen))
    assert "routes" not in row.model_dump(mode="json")["runtime"]


def test_a_pruned_route_a_cluster_still_serves_is_named_and_never_converged() -> None:
    """With pruning on, the control plane no longer lists the deleted route (no change is
    left), yet sn2 serves it: the judge names sn2 and the route; with pruning off the same
    live route is left alone and not judged."""
    stuck = applied(NORMAL, ACME)
    snapshot = live(applied(NORMAL), in_effect={"sn1": applied(NORMAL), "sn2": stuck,
                                                "sn3": applied(NORMAL)})
    plan = planning.plan(desired(NORMAL, prune=True), snapshot)
    assert not [c for c in plan.changes if isinstance(c, RouteChange)]
    proof = plan.proof_of("checkout")
    assert proof is not None and proof.proof is Proof.NOT_CONVERGED
    [pending] = proof.pending()
    assert pending.cluster == "sn2" and pending.why is Why.ROUTE_NOT_IN_EFFECT
    assert "deleted route 'shop-acme'" in pending.detail and "routeRef acme" in pending.detail
    assert plan.verdict is Verdict.GO  # never "no changes" while sn2 serves it
    unpruned = planning.plan(desired(NORMAL), snapshot)
    kept = unpruned.proof_of("checkout")
    assert kept is not None and kept.proof is Proof.CONVERGED
    gone = planning.plan(desired(NORMAL, prune=True), live(applied(NORMAL)))
    done = gone.proof_of("checkout")
    assert done is not None and done.proof is Proof.CONVERGED


def test_a_route_another_client_owns_for_the_app_is_never_required_gone() -> None:
    theirs = GatewayRoute(
        ownership=RouteOwnership(app_id="checkout", hostname=HOST, route_ref="edge"),
        name="edge-checkout", domains=(HOST,), ports=(443,), path="/edge/", priority=300,
        target_app_id="checkout", target_port=8080, client_id="edge-team")
    serving = (*applied(NORMAL), theirs.model_copy(update={"client_id": None}))
    snapshot = live(applied(NORMAL), in_effect=dict.fromkeys(("sn1", "sn2", "sn3"), serving))
    snapshot = snapshot.model_copy(update={"routes": (*(snapshot.routes or ()), theirs)})
    plan = planning.plan(desired(NORMAL, prune=True), snapshot)
    proof = plan.proof_of("checkout")
    assert proof is not None and proof.proof is Proof.CONVERGED, proof


def test_the_gate_requires_each_deleted_route_gone_from_every_cluster() -> None:
    """The gate's target carries the keys the applied changes delete (``changes``), so a
    cluster still serving one is named even where the plan's rule does not apply."""
    pruned = planning.plan(desired(NORMAL, prune=True), live(applied(NORMAL, ACME)))
    [delete] = [c for c in pruned.changes if c.action is Action.DELETE_ROUTE]
    svc = next(s for s in desired(NORMAL).services if s.name == "checkout")
    snapshot = live(applied(NORMAL), in_effect={"sn1": applied(NORMAL, ACME)})
    state = snapshot.services[svc.service_id]
    target = planning.target_of(svc, state, desired(NORMAL), changes=pruned.changes)
    assert target.routes_gone == (delete.route_key,)
    proof = evidence.judge(target, state, ("sn1", "sn2", "sn3"),
                           snapshot.observations["checkout"])
    assert [(c.cluster, c.why) for c in proof.pending()] == [
        ("sn1", Why.ROUTE_NOT_IN_EFFECT)]
    without = planning.target_of(svc, state, desired(NORMAL))
    assert without.routes_gone == ()
    assert evidence.judge(without, state, ("sn1", "sn2", "sn3"),
                          snapshot.observations["checkout"]).converged


def test_many_ambiguous_pairs_are_bounded_in_the_comment_and_the_text_never_in_json() -> None:
    from reconciler.render import common, jsonplan, markdown, text
    # 12 routes of one priority on one host and path: 66 pairs, each a blocker.
    routes = [route_doc(f"r{i:02d}", 100, route_ref=f"r{i:02d}") for i in range(12)]
    plan = planning.plan(desired(*routes), live())
    pairs = [b for b in plan.blockers if b.code is BlockerCode.ROUTE_AMBIGUOUS]
    assert len(pairs) == 66
    shown = common.SAME_CODE_MAX
    md = markdown.render(plan)
    assert md.count("- ❌ `route_ambiguous`") == shown, md
    assert f"… and {66 - shown} more `route_ambiguous` blockers" in md
    # The summary of services blocked on their own names each code once, with its count.
    assert "`route_ambiguous` ×66" in md and "`route_ambiguous`, `route_ambiguous`" not in md
    lines = text.render(plan).splitlines()
    assert sum("✗ route_ambiguous" in line for line in lines) == shown
    assert any(f"… and {66 - shown} more route_ambiguous blockers" in line for line in lines)
    assert jsonplan.dumps(plan).count('"route_ambiguous"') >= 66
    # Under the bound, every pair is listed (in "Why NO-GO" and in the service's section)
    # and nothing is counted.
    few = planning.plan(desired(*routes[:4]), live())
    assert markdown.render(few).count("- ❌ `route_ambiguous`") == 2 * 6
    assert "more `route_ambiguous`" not in markdown.render(few)


def test_apply_words_a_route_change_by_what_was_proven_and_says_one_digest_once() -> None:
    from reconciler.core.evidence import ClusterProof, ServiceProof
    from reconciler.core.outcomes import ApplyReport, ChangeResult, GateReport, Outcome
    from reconciler.render import applyview
    raised = route_doc("shop-web", 120, ports=[80, 443])
    plan = planning.plan(desired(raised), live(applied(NORMAL)))
    [change] = [c for c in plan.changes if isinstance(c, RouteChange)]
    pinned = "sha256:" + "2" * 64
    converged = ServiceProof(service="checkout", app_id="checkout", digest=pinned,
                             proof=Proof.CONVERGED,
                             clusters=(ClusterProof(cluster="sn1", proof=Proof.CONVERGED),))
    done = ApplyReport(results=(ChangeResult(change=change, outcome=Outcome.APPLIED),),
                       gate=GateReport(attempts=1, waited_seconds=0.1, proofs=(converged,)))
    out, _ = applyview.summary(done)
    [line] = [line for line in out if line.startswith("Converged")]
    assert "digests, egress and gateway routes" in line, line
    stuck = ClusterProof(cluster="sn2", proof=Proof.NOT_CONVERGED,
                         why=Why.ROUTE_NOT_IN_EFFECT, running=pinned,
                         detail="still serves the old route 'shop-web'")
    diverged = converged.model_copy(update={"proof": Proof.NOT_CONVERGED,
                                            "clusters": (stuck,)})
    failed = done.model_copy(update={"gate": GateReport(attempts=3, waited_seconds=1.0,
                                                         proofs=(diverged,))})
    _, err = applyview.summary(failed)
    [line] = [line for line in err if "sn2" in line]
    assert line.count(pinned) == 1, line
    assert f"runs the pinned {pinned}, but still serves the old route 'shop-web'" in line
