"""Properties of planning (hypothesis): deterministic, never GO on a silent cluster, and
planning against the state a plan describes yields no changes."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core.desired import DesiredState
from reconciler.core.live import (
    EgressRule,
    LiveGrant,
    LiveService,
    LiveSnapshot,
    Observation,
    ObservationKind,
    RolloutPlan,
    RolloutStatus,
)
from reconciler.core.names import Capability
from reconciler.core.planning import plan
from reconciler.core.plans import Action, Plan, Verdict
from reconciler.render import jsonplan
from tests.plan import builders as b

APPS = ("checkout", "catalog", "search", "notifications")
silences = st.sets(st.tuples(st.sampled_from(APPS), st.sampled_from(b.CLUSTERS)), max_size=6)
generations = st.integers(min_value=1, max_value=10_000)
hosts = st.sampled_from(["api.stripe.com", "hooks.slack.com", "cdn.example.org", "x.example.net"])
egress_lists = st.none() | st.lists(st.tuples(hosts, st.sampled_from([443, 8443])),
                                    max_size=4, unique=True)


def _perturb(live: LiveSnapshot, silent: set[tuple[str, str]], generation: int,
             egress: list[tuple[str, int]] | None) -> LiveSnapshot:
    observations = {
        app: tuple(
            Observation(cluster_id=o.cluster_id, kind=ObservationKind.SILENT, reason="timeout")
            if (app, o.cluster_id) in silent else o for o in rows)
        for app, rows in live.observations.items()}
    svc = live.services["svc-checkout"]
    assert isinstance(svc, LiveService) and svc.deployment and svc.rollout_status
    # The clusters have the control plane's egress declaration in effect (consistent world).
    rules = () if egress is None else tuple(EgressRule(host=h, port=p) for h, p in egress)
    observations["checkout"] = tuple(
        o.model_copy(update={"runtime": o.runtime.model_copy(update={"egress": rules})})
        if o.runtime else o for o in observations["checkout"])
    svc = svc.model_copy(update={
        "deployment": svc.deployment.model_copy(update={"rollout_generation": generation}),
        "egress": None if egress is None else tuple(EgressRule(host=h, port=p) for h, p in egress),
    })
    return live.model_copy(update={"observations": observations,
                                   "services": {**live.services, "svc-checkout": svc}})


@settings(max_examples=60, deadline=None)
@given(silent=silences, generation=generations, egress=egress_lists)
def test_plan_is_deterministic_byte_for_byte(silent: set[tuple[str, str]], generation: int,
                                             egress: list[tuple[str, int]] | None) -> None:
    live = _perturb(b.reference_live(), silent, generation, egress)
    first = jsonplan.dumps(plan(b.reference_desired(), live))
    again = jsonplan.dumps(plan(b.reference_desired(),
                                LiveSnapshot.model_validate_json(live.model_dump_json())))
    assert first == again


@settings(max_examples=60, deadline=None)
@given(silent=silences.filter(bool), generation=generations, egress=egress_lists)
def test_a_silent_cluster_never_yields_go(silent: set[tuple[str, str]], generation: int,
                                          egress: list[tuple[str, int]] | None) -> None:
    p = plan(b.reference_desired(), _perturb(b.reference_live(), silent, generation, egress))
    assert p.verdict is Verdict.NO_GO
    for app, cluster in silent:
        assert any(x.code == "cluster_silent" and x.cluster == cluster and x.service == app
                   for x in p.blockers)


def realize(live: LiveSnapshot, p: Plan) -> LiveSnapshot:
    """The live state after every change of ``p`` took effect and every cluster converged."""
    services = dict(live.services)
    grants = {(g.user_id, g.service_id): g for g in live.grants or ()}
    observations = dict(live.observations)
    for change in p.changes:
        svc = services[change.service_id]
        assert isinstance(svc, LiveService)
        if change.action in (Action.PROMOTE, Action.ROLLBACK):
            assert change.release_after and change.release_after.digest
            digest = change.release_after.digest
            gen = svc.rollout_generation + 1
            rid = f"ro-{change.service}-{gen}"
            svc = svc.model_copy(update={
                "deployment": RolloutPlan(
                    rollout_id=rid, rollout_generation=gen,
                    release_id=change.release_after.release_id or "", requested_digest=digest,
                    mode=change.action.value if change.action is Action.ROLLBACK
                    else "promotion", target_cluster_ids=b.CLUSTERS),
                "rollout_status": RolloutStatus(rollout_id=rid, rollout_generation=gen,
                                                expected_digest=digest, status="succeeded"),
                "releases": tuple(r.model_copy(update={"accepted_at": r.accepted_at or 1})
                                  if r.digest == digest else r for r in svc.releases)})
            observations[change.app_id] = tuple(
                o.model_copy(update={"runtime": o.runtime.model_copy(update={
                    "resolved_digest": digest, "rollout_id": rid, "rollout_generation": gen})})
                if o.runtime else o for o in observations[change.app_id])
        elif change.action is Action.SET_EGRESS:
            svc = svc.model_copy(update={"egress": change.egress_after,
                                         "egress_revision": svc.egress_revision + 1})
            # The clusters put the new declaration in effect (the judge checks it).
            observations[change.app_id] = tuple(
                o.model_copy(update={"runtime": o.runtime.model_copy(update={
                    "egress": change.egress_after or ()})})
                if o.runtime else o for o in observations[change.app_id])
        else:
            assert change.user_id is not None and change.capabilities_after is not None
            grants[(change.user_id, change.service_id)] = LiveGrant(
                user_id=change.user_id, service_id=change.service_id,
                capabilities=tuple(Capability(c) for c in change.capabilities_after))
        services[change.service_id] = svc
    return live.model_copy(update={
        "services": services, "observations": observations,
        "grants": tuple(g for g in grants.values() if g.capabilities)})


def _desired_variants() -> st.SearchStrategy[DesiredState]:
    def build(egress: list[tuple[str, int]] | None, prune: bool) -> DesiredState:
        desired = b.reference_desired(prune=prune)
        services = tuple(
            s.model_copy(update={"egress": None if egress is None else tuple(
                s.egress[0].model_copy(update={"host": h, "port": p}) for h, p in egress)
                if s.egress else None})
            if s.name == "notifications" and egress is not None and s.egress else s
            for s in desired.services)
        return desired.model_copy(update={"services": services})
    return st.builds(build, egress_lists, st.booleans())


@settings(max_examples=40, deadline=None)
@given(desired=_desired_variants(), generation=generations, egress=egress_lists)
def test_planning_against_the_state_a_plan_describes_yields_no_changes(
        desired: DesiredState, generation: int, egress: list[tuple[str, int]] | None) -> None:
    live = _perturb(b.reference_live(), set(), generation, egress)
    first = plan(desired, live)
    assert first.verdict is Verdict.GO
    second = plan(desired, realize(live, first))
    assert second.changes == (), [c.summary for c in second.changes]
    assert second.verdict is Verdict.NO_CHANGES


def test_json_plan_round_trips_and_rejects_an_unknown_major() -> None:
    p = plan(b.reference_desired(), b.reference_live())
    data = json.loads(jsonplan.dumps(p))
    assert jsonplan.from_wire(data) == p
    assert data["changes"][0]["actions"] == [p.changes[0].action.value]
    import pytest
    with pytest.raises(jsonplan.WireError, match="major 3"):
        jsonplan.from_wire({**data, "format_version": "3.0"})
    with pytest.raises(jsonplan.WireError, match="major 1"):
        jsonplan.from_wire({**data, "format_version": "1.0"})
    def resealed(**update: object) -> dict[str, object]:
        edited = {**data, **update}
        return {**edited, "content_digest": jsonplan.content_digest(edited)}

    with pytest.raises(jsonplan.DigestMismatch):
        jsonplan.from_wire({**data, "verdict": "no_changes"})
    with pytest.raises(jsonplan.WireError, match="verdict"):
        jsonplan.from_wire(resealed(verdict="no_changes"))
    assert jsonplan.from_wire(resealed(format_version="2.7")) == p  # minor is additive


def test_published_plan_schema_matches_the_models() -> None:
    from pathlib import Path
    committed = json.loads((Path(__file__).parents[2] / "schemas/plan.schema.json").read_text())
    assert committed == jsonplan.wire_schema(), "run: python -m reconciler.render.jsonplan " \
        "> schemas/plan.schema.json"
