"""The change kinds behind one dispatch, the typed outcomes and codes, one silent list."""

from __future__ import annotations

import json
from typing import Any

import pytest

from reconciler.core import kinds
from reconciler.core.codes import SILENT_CLUSTER_CODES, BlockerCode
from reconciler.core.cpcodes import CONFLICTS, ControlPlaneCode, is_conflict
from reconciler.core.findings import Blocker
from reconciler.core.kinds import Action, EgressChange, GrantChange, PromoteChange, kind_of
from reconciler.core.outcomes import Outcome, RunOutcome, ended
from reconciler.core.planning import plan
from reconciler.render import jsonplan
from tests.plan import builders as b


def test_every_action_belongs_to_exactly_one_kind() -> None:
    owners = [a for k in kinds.KINDS for a in k.actions]
    assert sorted(owners) == sorted(Action) and len(owners) == len(set(owners))
    # The execution order and the verbs come from the kinds: grants, egress, then the rest.
    assert kinds.ACTION_ORDER == {Action.SET_GRANT: 0, Action.SET_EGRESS: 1,
                                  Action.PROMOTE: 2, Action.ROLLBACK: 2, Action.CREATE: 2,
                                  Action.SYNC_ROUTE: 3, Action.DELETE_ROUTE: 3}
    assert kinds.VERBS[Action.SET_EGRESS] == "set egress"


def test_each_change_is_the_model_of_its_kind() -> None:
    p = plan(b.reference_desired(prune=True), b.reference_live())
    by_action = {c.action: c for c in p.changes}
    assert isinstance(by_action[Action.PROMOTE], PromoteChange)
    assert isinstance(by_action[Action.SET_EGRESS], EgressChange)
    assert isinstance(by_action[Action.SET_GRANT], GrantChange)
    for change in p.changes:
        assert type(change) in kind_of(change).models
        # A promote has no grant fields at all: kind-specific fields live on their kind.
        assert ("capabilities_after" in type(change).model_fields) is (
            change.action is Action.SET_GRANT)


def _saved() -> dict[str, Any]:
    return json.loads(jsonplan.dumps(plan(b.reference_desired(prune=True), b.reference_live())))


def test_the_wire_keeps_one_flat_object_per_change() -> None:
    data = _saved()
    keys = {frozenset(c) for c in data["changes"]}
    assert len(keys) == 1  # every change has every kind's fields
    promote = next(c for c in data["changes"] if c["actions"] == ["promote"])
    assert promote["capabilities_after"] is None and promote["egress_added"] == []


def test_a_saved_change_carrying_another_kinds_field_is_refused() -> None:
    data = _saved()
    promote = next(c for c in data["changes"] if c["actions"] == ["promote"])
    promote["capabilities_after"] = ["deployment:promote"]
    data["content_digest"] = jsonplan.content_digest(data)
    with pytest.raises(jsonplan.WireError, match="capabilities_after"):
        jsonplan.from_wire(data)


def _with(blockers: list[Blocker]) -> Any:
    p = plan(b.reference_desired(), b.reference_live())
    return p.model_copy(update={"blockers": tuple(blockers)})


def test_silent_clusters_are_counted_from_the_one_list() -> None:
    twice = Blocker(code=BlockerCode.CLUSTER_CLAIMED_TWICE, cluster="sn1", message="x")
    silent = Blocker(code=BlockerCode.CLUSTER_SILENT, cluster="sn2", service="checkout",
                     message="x")
    other = Blocker(code=BlockerCode.REPO_DIRTY, message="x")
    assert BlockerCode.CLUSTER_CLAIMED_TWICE in SILENT_CLUSTER_CODES
    assert _with([twice, silent, other]).silent_clusters() == {"sn1", "sn2"}
    unresolved = _with([Blocker(code=BlockerCode.GATEWAY_UNRESOLVED, message="x")])
    assert unresolved.silent_clusters() == set(unresolved.expected_clusters) != set()
    assert _with([other]).silent_clusters() == set()


def test_conflicts_are_codes_not_suffixes() -> None:
    for code in (ControlPlaneCode.ROLLOUT_GENERATION_MISMATCH, "EGRESS_REVISION_MISMATCH",
                 "FENCE_MISMATCH"):
        assert is_conflict(code)
    # A preflight blocker's code that happens to end the same way is no conflict.
    assert not is_conflict("RUNTIME_ATTESTATION_MISMATCH")
    assert not is_conflict(None) and not is_conflict("FORBIDDEN")
    assert ControlPlaneCode.FORBIDDEN not in CONFLICTS


def test_a_run_that_only_lost_answers_is_in_doubt_not_failed() -> None:
    assert ended(writes_ok=False, outcomes=[Outcome.APPLIED, Outcome.IN_DOUBT],
                 gate=None) is RunOutcome.IN_DOUBT
    assert ended(writes_ok=False, outcomes=[Outcome.IN_DOUBT, Outcome.REFUSED],
                 gate=None) is RunOutcome.FAILED
    assert ended(writes_ok=True, outcomes=["applied"], gate=None) is RunOutcome.UNPROVEN
    assert ended(writes_ok=True, outcomes=[], gate=None) is RunOutcome.NOTHING_TO_DO
    assert ended(writes_ok=True, outcomes=["applied"], gate=False) is RunOutcome.NOT_CONVERGED
