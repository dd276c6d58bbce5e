"""``plan --only X --env prod``: the selection narrows the environment's rules too. A
freeze (or a closed window) said once for every promotion it holds stays in X's plan only
when it holds X's own promotion (``core.plans.restrict`` over ``promotion_blockers``)."""

from __future__ import annotations

from reconciler.core import promotion
from reconciler.core.codes import BlockerCode
from reconciler.core.pipeline import Environment, Freeze
from reconciler.core.planning import Provenance, plan
from reconciler.core.plans import Blocker, Plan, Verdict, restrict
from tests.plan import builders as b

NOW = 1_800_000_000_000
FREEZE = Freeze.model_validate({"apiVersion": "reconcile/v1", "kind": "Freeze",
                                "reason": "incident 4711", "until": "2099-01-01T00:00:00Z",
                                "environments": ["prod"]})
PROD = Environment(name="prod", path="environments/prod")


def frozen_plan() -> tuple[Plan, Plan]:
    made = plan(b.reference_desired(), b.reference_live(), Provenance())
    holds, _notes = promotion.promotion_blockers(made, PROD, None, ((FREEZE, "freezes/x.yaml"),),
                                                 NOW)
    return made, made.model_copy(update={"blockers": made.blockers + holds})


def test_a_freeze_of_other_services_promotions_is_not_in_the_selection() -> None:
    made, frozen = frozen_plan()
    promoting = {c.service for c in made.changes if c.action in promotion.PROMOTING}
    assert promoting == {"checkout"}  # search only changes its egress and grants
    [hold] = [x for x in frozen.blockers if x.code is BlockerCode.FROZEN]
    assert hold.services == ("checkout",)
    search = restrict(frozen, frozenset({"search"}))
    assert not [x for x in search.blockers if x.code is BlockerCode.FROZEN]
    assert search.verdict is Verdict.GO
    checkout = restrict(frozen, frozenset({"checkout"}))
    [kept] = [x for x in checkout.blockers if x.code is BlockerCode.FROZEN]
    assert kept.services == ("checkout",) and checkout.verdict is Verdict.NO_GO
    both = restrict(frozen, frozenset({"search", "checkout"}))
    assert [x.services for x in both.blockers if x.code is BlockerCode.FROZEN] == \
        [("checkout",)]


def test_a_mesh_wide_blocker_stays_in_every_selection() -> None:
    made, _ = frozen_plan()
    wide = Blocker(code=BlockerCode.GATEWAY_UNRESOLVED, message="the gateway did not resolve")
    with_wide = made.model_copy(update={"blockers": (*made.blockers, wide)})
    assert wide in restrict(with_wide, frozenset({"search"})).blockers
