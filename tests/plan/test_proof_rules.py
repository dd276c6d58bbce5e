"""The one judge's rules as the plan applies them, scenario by scenario (issue "Proof, not
hope"): each of these planned or judged differently before the judge moved to core."""

from __future__ import annotations

from reconciler.core import evidence
from reconciler.core.codes import BlockerCode, DriftCode
from reconciler.core.live import (
    EgressRule,
    LiveSnapshot,
    ReadFailure,
    ReplicaCounts,
)
from reconciler.core.planning import plan, target_of
from reconciler.core.plans import Action, Verdict
from tests.plan.builders import (
    ADDRESSES,
    CLUSTERS,
    digest,
    live_service,
    reference_desired,
    reference_live,
    runtime,
    sn2_down_live,
)


def _observations(live: LiveSnapshot, app: str, cluster: str, **over: object) -> LiveSnapshot:
    rows = tuple(o.model_copy(update={"runtime": o.runtime.model_copy(update=over)})
                 if o.cluster_id == cluster and o.runtime else o
                 for o in live.observations[app])
    return live.model_copy(update={"observations": {**live.observations, app: rows}})


def test_running_with_no_replica_observed_and_two_failed_is_not_no_changes() -> None:
    # The example: "no changes, no drift" to plan and "not converged" to the gate.
    live = _observations(reference_live(), "notifications", "sn2",
                         replica_counts=ReplicaCounts(required=2, observed=0, healthy=0,
                                                      verified=0, failed=2))
    p = plan(reference_desired(), live)
    proof = p.proof_of("notifications")
    assert proof is not None and proof.proof is evidence.Proof.NOT_CONVERGED
    assert [c.cluster for c in proof.pending()] == ["sn2"]
    assert ("cluster_unhealthy", "sn2") in {(d.code, d.cluster) for d in p.drift}
    assert "notifications" in p.unconverged()
    # The gate, asked about the same snapshot, agrees: the same function.
    svc = next(s for s in reference_desired().services if s.name == "notifications")
    state = live.services["svc-notifications"]
    gate = evidence.judge(target_of(svc, state), state, CLUSTERS,
                          live.observations["notifications"])
    assert gate == proof


def test_a_cluster_with_no_resolved_digest_is_never_no_changes() -> None:
    desired = reference_desired()
    live = reference_live()
    # Make everything else match the repo, so only sn3's silence about its digest is left.
    p0 = plan(desired, live)
    assert p0.verdict is Verdict.GO
    only_notifications = desired.model_copy(update={
        "services": tuple(s for s in desired.services if s.name == "notifications"),
        "grants": ()})
    live = live.model_copy(update={"grants": ()})
    assert plan(only_notifications, live).verdict is Verdict.NO_CHANGES
    unproven = _observations(live, "notifications", "sn3", resolved_digest=None)
    p = plan(only_notifications, unproven)
    assert p.verdict is Verdict.GO and p.changes == ()
    proof = p.proof_of("notifications")
    assert proof is not None and proof.proof is evidence.Proof.UNPROVEN


def test_a_dropped_destination_is_not_in_effect() -> None:
    desired = reference_desired()
    live = _observations(reference_live(), "notifications", "sn1",
                         egress_dropped=(EgressRule(host="smtp.mailgun.org", port=587),))
    proof = plan(desired, live).proof_of("notifications")
    assert proof is not None and proof.proof is evidence.Proof.NOT_CONVERGED
    assert proof.pending()[0].why is evidence.Why.EGRESS_DROPPED
    assert DriftCode.EGRESS_DROPPED in {d.code for d in plan(desired, live).drift}


def test_an_accepted_pin_against_an_unlisted_current_release_is_blocked_not_promoted() -> None:
    # Scenario 9: catalog pins v5.0.1 (accepted before); the current rollout's digest is not
    # among the listed releases, so "newer than the current release" was a guess.
    live = reference_live()
    catalog = live_service("catalog", [("v5.0.1", 100, 110)], "v5.9.9", 5,
                           [("cdn.example.org", 443)], 2)
    live = live.model_copy(update={"services": {**live.services, "svc-catalog": catalog}})
    p = plan(reference_desired(), live)
    assert not [c for c in p.changes if c.service == "catalog"
                and c.action in (Action.PROMOTE, Action.ROLLBACK)]
    assert BlockerCode.CURRENT_RELEASE_UNLISTED in {b.code for b in p.blockers}


def test_a_live_service_that_does_not_require_immutability_is_drift() -> None:
    # Scenario 11: `immutable` is read. (`false` is refused at validation.)
    live = reference_live()
    search = live.services["svc-search"].model_copy(update={"immutable_required": False})
    live = live.model_copy(update={"services": {**live.services, "svc-search": search}})
    p = plan(reference_desired(), live)
    assert ("immutable_not_enforced", "search") in {(d.code, d.service) for d in p.drift}
    assert "immutable_not_enforced" not in {d.code for d in plan(reference_desired(),
                                                                  reference_live()).drift}


def test_a_down_cluster_is_one_root_cause_naming_its_address_and_what_it_blocks() -> None:
    # Scenario 14: sn2 at 127.0.0.3 refuses connections; its address names no cluster.
    live = sn2_down_live()
    p = plan(reference_desired(), live)
    assert p.verdict is Verdict.NO_GO
    about_sn2 = [b for b in p.blockers if b.cluster in ("sn2", ADDRESSES["sn2"])]
    assert [b.code for b in about_sn2] == [BlockerCode.CLUSTER_UNREACHABLE]
    cause = about_sn2[0]
    assert ADDRESSES["sn2"] in cause.message and "connection refused" in cause.message
    assert cause.services == ("catalog", "checkout", "notifications", "search")
    assert not [b for b in p.blockers if b.code == BlockerCode.CLUSTER_SILENT]


def test_with_pruning_on_an_unreadable_service_says_why_it_is_not_pruned() -> None:
    # Scenario 15: it said "(pruning is off)" with pruning on.
    live = reference_live()
    live = live.model_copy(update={"services": {
        **live.services, "svc-search": ReadFailure(service_id="svc-search", reason="boom")}})
    desired = reference_desired(prune=True)
    grants = tuple(g.model_copy(update={"services": tuple(
        s for s in g.services if s.service != "search")}) for g in desired.grants)
    p = plan(desired.model_copy(update={"grants": grants}), live)
    messages = [d.message for d in p.drift if d.code == DriftCode.GRANT_NOT_DECLARED]
    assert messages and all("pruning is off" not in m for m in messages)
    assert any("live state is unknown" in m for m in messages)


def test_the_judge_never_calls_an_unfinished_or_statusless_rollout_converged() -> None:
    live = reference_live()
    base = live.services["svc-notifications"]
    assert not isinstance(base, ReadFailure)
    svc = next(s for s in reference_desired().services if s.name == "notifications")
    rows = live.observations["notifications"]
    for status in ("pending", "deploying", "verifying", "failed", "mismatched"):
        moved = base.model_copy(update={"rollout_status": base.rollout_status.model_copy(
            update={"status": status})} if base.rollout_status else {})
        assert not evidence.judge(target_of(svc, moved), moved, CLUSTERS, rows).converged
    statusless = base.model_copy(update={"rollout_status": None})
    proof = evidence.judge(target_of(svc, statusless), statusless, CLUSTERS, rows)
    assert proof.proof is evidence.Proof.UNPROVEN
    assert evidence.judge(target_of(svc, base), base, CLUSTERS, rows).converged
    assert digest("notifications", "v0.8.0") == proof.digest
    assert runtime("notifications", "v0.8.0", 1).resolved_digest == proof.digest


def test_a_promotion_that_ended_rolled_back_is_not_converged() -> None:
    # `rolled-back` is how a rollback succeeds, not a promotion: one the control plane
    # reverted is not converged, whatever the clusters still report.
    live = reference_live()
    base = live.services["svc-notifications"]
    assert not isinstance(base, ReadFailure) and base.rollout_status is not None
    svc = next(s for s in reference_desired().services if s.name == "notifications")
    rows = live.observations["notifications"]
    reverted = base.model_copy(update={"rollout_status": base.rollout_status.model_copy(
        update={"status": "rolled-back"})})
    assert not evidence.judge(target_of(svc, reverted), reverted, CLUSTERS, rows).converged
    assert reverted.deployment is not None
    rollback = reverted.model_copy(update={"deployment": reverted.deployment.model_copy(
        update={"mode": "rollback"})})
    assert evidence.judge(target_of(svc, rollback), rollback, CLUSTERS, rows).converged
    other = base.model_copy(update={"rollout_status": base.rollout_status.model_copy(
        update={"expected_digest": digest("notifications", "v9")})})
    proof = evidence.judge(target_of(svc, other), other, CLUSTERS, rows)
    assert proof.proof is evidence.Proof.UNPROVEN and "status is about" in proof.rollout_detail
