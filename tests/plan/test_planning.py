"""Planning is a pure function: each change kind, each blocker, each drift kind."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.core.live import (
    Endpoint,
    LiveSnapshot,
    MeshView,
    Observation,
    ObservationKind,
    ReadFailure,
    RolloutStatus,
)
from reconciler.core.names import Capability as C
from reconciler.core.planning import Provenance, plan
from reconciler.core.plans import Action, Plan, Verdict
from tests.plan.builders import (
    ADDRESSES,
    CLUSTERS,
    digest,
    live_service,
    reference_desired,
    reference_live,
    runtime,
)


def _codes(p: Plan) -> set[str]:
    return {b.code for b in p.blockers}


def _drift(p: Plan) -> set[str]:
    return {d.code for d in p.drift}


def _with_observation(live: LiveSnapshot, app: str, cluster: str, obs: Observation) -> LiveSnapshot:
    rows = tuple(obs if o.cluster_id == cluster else o for o in live.observations[app])
    return live.model_copy(update={"observations": {**live.observations, app: rows}})


def _with_service(live: LiveSnapshot, sid: str, svc: Any) -> LiveSnapshot:
    return live.model_copy(update={"services": {**live.services, sid: svc}})


def test_reference_plan_has_every_change_kind_and_is_go() -> None:
    p = plan(reference_desired(), reference_live())
    assert p.verdict is Verdict.GO
    kinds = {(c.action, c.service) for c in p.changes}
    assert kinds == {
        (Action.PROMOTE, "checkout"), (Action.ROLLBACK, "catalog"),
        (Action.SET_EGRESS, "checkout"), (Action.SET_EGRESS, "search"),
        (Action.SET_GRANT, "search"),
    }
    assert not p.blockers and not p.drift


def test_changes_come_in_safe_order_grants_then_egress_then_releases() -> None:
    actions = [c.action for c in plan(reference_desired(), reference_live()).changes]
    ranks = [{Action.SET_GRANT: 0, Action.SET_EGRESS: 1}.get(a, 2) for a in actions]
    assert ranks == sorted(ranks)


def test_promote_carries_before_after_and_preconditions() -> None:
    p = plan(reference_desired(), reference_live())
    promote = next(c for c in p.changes if c.action is Action.PROMOTE)
    assert promote.release_before is not None and promote.release_after is not None
    assert promote.release_before.digest == digest("checkout", "v2.3.0")
    assert promote.release_after.digest == digest("checkout", "v2.4.0")
    assert promote.release_after.release_id == "rel-checkout-v2.4.0"
    assert promote.preconditions.rollout_generation == 3
    assert promote.preconditions.rollout_id == "ro-checkout-3"
    assert promote.reason == "pinned_release_never_accepted"


def test_rollback_targets_a_previously_accepted_older_release() -> None:
    p = plan(reference_desired(), reference_live())
    rollback = next(c for c in p.changes if c.action is Action.ROLLBACK)
    assert rollback.service == "catalog"
    assert rollback.release_after is not None
    assert rollback.release_after.digest == digest("catalog", "v5.0.1")
    assert rollback.preconditions.rollout_id == "ro-catalog-5"


def test_pinning_an_accepted_but_newer_release_is_a_promotion() -> None:
    live = reference_live()
    # catalog was rolled back to v5.0.1; pinning v5.1.0 again rolls forward.
    svc = live_service("catalog", [("v5.0.1", 100, 110), ("v5.1.0", 200, 210)], "v5.0.1", 6,
                       [("cdn.example.org", 443)], 2, mode="rollback")
    desired = reference_desired()
    cat = desired.service_by_name("catalog")
    assert cat is not None
    new_release = cat.release.model_copy(update={"digest": digest("catalog", "v5.1.0"),
                                                 "tag": "v5.1.0"})
    services = tuple(s.model_copy(update={"release": new_release}) if s.name == "catalog" else s
                     for s in desired.services)
    p = plan(desired.model_copy(update={"services": services}),
             _with_service(live, "svc-catalog", svc))
    change = next(c for c in p.changes if c.service == "catalog")
    assert change.action is Action.PROMOTE
    assert change.reason == "pinned_release_newer_than_current"


def test_egress_add_and_revoke_all_list_the_destinations() -> None:
    p = plan(reference_desired(), reference_live())
    checkout = next(c for c in p.changes if c.service == "checkout"
                    and c.action is Action.SET_EGRESS)
    assert [(r.host, r.port) for r in checkout.egress_added] == [("hooks.slack.com", 443)]
    assert checkout.egress_removed == ()
    assert checkout.preconditions.egress_revision == 1
    search = next(c for c in p.changes if c.service == "search" and c.action is Action.SET_EGRESS)
    assert search.egress_after == ()
    assert {(r.host, r.port) for r in search.egress_removed} == {
        ("api.openai.com", 443), ("es.example.net", 9200)}
    assert search.reason == "egress_revoke_all"


def test_omitted_egress_leaves_the_live_declaration_alone() -> None:
    p = plan(reference_desired(), reference_live())
    assert not [c for c in p.changes if c.service == "catalog" and c.action is Action.SET_EGRESS]


def test_grant_change_lists_capabilities_added_and_removed() -> None:
    p = plan(reference_desired(), reference_live())
    grant = next(c for c in p.changes if c.action is Action.SET_GRANT)
    assert grant.user_id == "deploy-bot" and grant.service == "search"
    assert grant.capabilities_removed == ("deployment:promote-route",)
    assert grant.capabilities_after == ("deployment:preflight",)


def test_undeclared_live_grant_is_drift_without_prune_and_a_change_with_it() -> None:
    live = reference_live()
    from reconciler.core.live import LiveGrant
    extra = LiveGrant(user_id="intruder", service_id="svc-checkout", capabilities=(C.PREFLIGHT,))
    live = live.model_copy(update={"grants": (*(live.grants or ()), extra)})
    p = plan(reference_desired(), live)
    assert "grant_not_declared" in _drift(p)
    assert not [c for c in p.changes if c.user_id == "intruder"]
    pruned = plan(reference_desired(prune=True), live)
    change = next(c for c in pruned.changes if c.user_id == "intruder")
    assert change.capabilities_after == () and change.reason == "grant_not_declared"


def test_idempotency_keys_are_deterministic_and_depend_on_preconditions() -> None:
    a = plan(reference_desired(), reference_live())
    b = plan(reference_desired(), reference_live())
    assert [c.idempotency_key for c in a.changes] == [c.idempotency_key for c in b.changes]
    assert len({c.idempotency_key for c in a.changes}) == len(a.changes)
    live = reference_live()
    moved = live_service("checkout", [("v2.3.0", 100, 110), ("v2.4.0", 200, None)], "v2.3.0", 4,
                         [("api.stripe.com", 443)], 1)
    c = plan(reference_desired(), _with_service(live, "svc-checkout", moved))
    key = lambda p: next(x.idempotency_key for x in p.changes  # noqa: E731
                         if x.action is Action.PROMOTE)
    assert key(a) != key(c)


# -- blockers ---------------------------------------------------------------------------

def test_release_not_observed_blocks() -> None:
    live = reference_live()
    svc = live.services["svc-checkout"]
    assert not isinstance(svc, ReadFailure)
    only_old = svc.model_copy(update={"releases": svc.releases[:1]})
    p = plan(reference_desired(), _with_service(live, "svc-checkout", only_old))
    assert "release_not_observed" in _codes(p)
    assert p.verdict is Verdict.NO_GO
    assert not [c for c in p.changes if c.action is Action.PROMOTE]


def test_tag_and_digest_disagreeing_blocks_and_names_both() -> None:
    desired = reference_desired()
    services = tuple(
        s.model_copy(update={"release": s.release.model_copy(update={"tag": "v2.3.0"})})
        if s.name == "checkout" else s for s in desired.services)
    p = plan(desired.model_copy(update={"services": services}), reference_live())
    blocker = next(b for b in p.blockers if b.code == "tag_digest_mismatch")
    assert digest("checkout", "v2.3.0") in blocker.message
    assert digest("checkout", "v2.4.0") in blocker.message


def test_media_type_disagreeing_blocks() -> None:
    desired = reference_desired()
    media = "application/vnd.oci.image.manifest.v1+json"
    services = tuple(
        s.model_copy(update={"release": s.release.model_copy(update={"media_type": media})})
        if s.name == "checkout" else s for s in desired.services)
    p = plan(desired.model_copy(update={"services": services}), reference_live())
    assert "media_type_mismatch" in _codes(p)


def test_rollout_in_progress_blocks_a_new_promotion() -> None:
    live = reference_live()
    svc = live_service("checkout", [("v2.3.0", 100, 110), ("v2.4.0", 200, None)], "v2.3.0", 3,
                       [("api.stripe.com", 443)], 1, status="deploying")
    p = plan(reference_desired(), _with_service(live, "svc-checkout", svc))
    blocker = next(b for b in p.blockers if b.code == "rollout_in_progress")
    assert blocker.service == "checkout" and "deploying" in blocker.message


def test_silent_cluster_blocks_and_names_cluster_and_reason() -> None:
    live = _with_observation(reference_live(), "checkout", "sn2", Observation(
        cluster_id="sn2", address="127.0.0.3", kind=ObservationKind.SILENT,
        reason="timed out after 5.0s"))
    p = plan(reference_desired(), live)
    blocker = next(b for b in p.blockers if b.code == "cluster_silent")
    assert blocker.cluster == "sn2" and blocker.service == "checkout"
    assert "timed out" in blocker.message
    assert p.verdict is Verdict.NO_GO


def test_missing_observation_row_is_never_probed_not_absent() -> None:
    live = reference_live()
    rows = tuple(o for o in live.observations["notifications"] if o.cluster_id != "sn3")
    live = live.model_copy(update={"observations": {**live.observations, "notifications": rows}})
    p = plan(reference_desired(), live)
    assert any(b.code == "cluster_silent" and b.cluster == "sn3" for b in p.blockers)


def test_gateway_resolving_to_nothing_or_too_few_blocks() -> None:
    empty = reference_live().model_copy(update={"mesh": MeshView(
        gateway="gateway.sandbox.test", resolved=(), resolve_error="no A records",
        settings_clusters=CLUSTERS, expected_clusters=CLUSTERS)})
    assert "gateway_unresolved" in _codes(plan(reference_desired(), empty))
    short = reference_live().model_copy(update={"mesh": MeshView(
        gateway="gateway.sandbox.test",
        resolved=(Endpoint(address="127.0.0.2", cluster_id="sn1"),),
        settings_clusters=CLUSTERS, expected_clusters=CLUSTERS)})
    assert "gateway_short_answer" in _codes(plan(reference_desired(), short))


def test_cluster_claimed_by_two_addresses_blocks() -> None:
    mesh = MeshView(gateway="gateway.sandbox.test", resolved=(
        Endpoint(address="127.0.0.2", cluster_id="sn1"),
        Endpoint(address="127.0.0.3", cluster_id="sn1"),
        Endpoint(address="127.0.0.4", cluster_id="sn3")),
        settings_clusters=CLUSTERS, expected_clusters=CLUSTERS, duplicate_claims=("sn1",))
    p = plan(reference_desired(), reference_live().model_copy(update={"mesh": mesh}))
    assert "cluster_claimed_twice" in _codes(p)


def test_dirty_repo_blocks_and_the_commit_is_recorded() -> None:
    p = plan(reference_desired(), reference_live(), Provenance(commit="a" * 40, dirty=True))
    assert "repo_dirty" in _codes(p) and p.commit == "a" * 40


def test_unknown_service_state_blocks_and_plans_nothing_for_it() -> None:
    live = _with_service(reference_live(), "svc-checkout", ReadFailure(
        service_id="svc-checkout", reason="timed out"))
    p = plan(reference_desired(), live)
    assert "service_unreadable" in _codes(p)
    assert not [c for c in p.changes if c.service == "checkout"]


def test_an_absent_service_is_a_create_blocked_by_the_evidence_it_lacks() -> None:
    # Issue 12: declared here, absent there, is a creation -- never sent unchecked. The
    # reference checkout declares no version, namespace or evidence: each is named.
    live = _with_service(reference_live(), "svc-checkout", ReadFailure(
        service_id="svc-checkout", reason="service svc-checkout not found",
        code="SERVICE_NOT_FOUND"))
    p = plan(reference_desired(), live)
    assert [c.action.value for c in p.changes if c.service == "checkout"] == ["create"]
    upstream = {b.upstream_code for b in p.blockers if b.service == "checkout"}
    assert {"VERSION_NOT_RESERVED", "NAMESPACE_NOT_RESERVED", "RELEASE_EVIDENCE_MISSING",
            "SOURCE_REVISION_INVALID"} <= upstream
    assert p.verdict.value == "no_go"
    pre = p.preflight_of("checkout")
    assert pre is not None and pre.status.value == "not_sent" and pre.report is None


def test_unreadable_grants_block_grant_planning() -> None:
    live = reference_live().model_copy(update={"grants": None, "grants_error": "timed out"})
    p = plan(reference_desired(), live)
    assert "grants_unreadable" in _codes(p)
    assert not [c for c in p.changes if c.action is Action.SET_GRANT]


# -- drift ------------------------------------------------------------------------------

def test_the_sn1_story_a_cluster_on_the_previous_digest_is_drift_naming_both() -> None:
    live = _with_observation(reference_live(), "notifications", "sn1", Observation(
        cluster_id="sn1", address=ADDRESSES["sn1"], kind=ObservationKind.ANSWERED,
        runtime=runtime("notifications", "v0.7.9", 0, last_error="build-attestation digest "
                        "MISMATCH")))
    p = plan(reference_desired(), live)
    drift = next(d for d in p.drift if d.code == "cluster_diverged")
    assert drift.cluster == "sn1"
    assert digest("notifications", "v0.7.9") in drift.message
    assert digest("notifications", "v0.8.0") in drift.message
    assert "attestation" in drift.message


def test_failed_rollout_is_drift() -> None:
    live = reference_live()
    svc = live.services["svc-notifications"]
    assert not isinstance(svc, ReadFailure)
    assert svc.rollout_status is not None
    failed = svc.model_copy(update={"rollout_status": svc.rollout_status.model_copy(
        update={"status": "mismatched", "mismatch_reason": "pulled-digest-mismatch"})})
    p = plan(reference_desired(), _with_service(live, "svc-notifications", failed))
    assert "rollout_mismatched" in _drift(p)


def test_egress_dropped_by_an_operator_is_drift() -> None:
    from reconciler.core.live import EgressRule
    live = _with_observation(reference_live(), "notifications", "sn3", Observation(
        cluster_id="sn3", address=ADDRESSES["sn3"], kind=ObservationKind.ANSWERED,
        runtime=runtime("notifications", "v0.8.0", 1, egress=(),
                        egress_dropped=(EgressRule(host="smtp.mailgun.org", port=587),))))
    p = plan(reference_desired(), live)
    drift = next(d for d in p.drift if d.code == "egress_dropped")
    assert drift.cluster == "sn3" and "smtp.mailgun.org:587" in drift.message


def test_no_runtime_record_and_no_digest_are_drift() -> None:
    live = _with_observation(reference_live(), "notifications", "sn2", Observation(
        cluster_id="sn2", address=ADDRESSES["sn2"], kind=ObservationKind.NO_RECORD))
    live = _with_observation(live, "notifications", "sn3", Observation(
        cluster_id="sn3", address=ADDRESSES["sn3"], kind=ObservationKind.ANSWERED,
        runtime=runtime("notifications", "v0.8.0", 1, resolved_digest=None)))
    assert {"cluster_missing_runtime", "cluster_digest_unproven"} <= _drift(
        plan(reference_desired(), live))


def test_automatic_rollout_is_live_changed_outside_the_repo() -> None:
    live = reference_live()
    svc = live_service("notifications", [("v0.8.0", 100, 110)], "v0.8.0", 1,
                       [("smtp.mailgun.org", 587)], 1, mode="automatic")
    p = plan(reference_desired(), _with_service(live, "svc-notifications", svc))
    assert "live_changed_outside_repo" in _drift(p)


def test_pinned_rollout_still_in_flight_is_converging_not_no_changes() -> None:
    desired = reference_desired()
    live = reference_live()
    svc = live.services["svc-notifications"]
    assert not isinstance(svc, ReadFailure) and svc.rollout_status is not None
    moving = svc.model_copy(update={"rollout_status": RolloutStatus(
        **{**svc.rollout_status.model_dump(), "status": "deploying"})})
    p = plan(desired, _with_service(live, "svc-notifications", moving))
    assert "notifications" in p.converging


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_renderers_mention_every_blocker_code(fmt: str) -> None:
    from reconciler.render import markdown, text
    live = _with_observation(reference_live(), "checkout", "sn2", Observation(
        cluster_id="sn2", kind=ObservationKind.SILENT, reason="connection refused"))
    p = plan(reference_desired(), live, Provenance(commit="b" * 40, dirty=True))
    out = text.render(p) if fmt == "text" else markdown.render(p)
    for blocker in p.blockers:
        assert blocker.code in out.replace("\\_", "_")
    assert "NO-GO" in out
