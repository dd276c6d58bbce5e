"""The decision ``watch --promote-from`` takes per service (core.proposals): one branch
per (environment, service, digest), nothing while the rules hold it (said once per
eligible time), propose once, never twice, and a newer digest supersedes the older
proposal. Also: a plan restricted with --only keeps only the holds of its services."""

from __future__ import annotations

import pytest

from reconciler.core import proposals
from reconciler.core.codes import BlockerCode
from reconciler.core.live import ImageRelease, LiveService, ReadFailure
from reconciler.core.plans import Blocker
from reconciler.core.proposals import Candidate, Earlier, Step

D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
OLD = "sha256:" + "0" * 64


def soaking(eligible: int, seconds: int = 3) -> Blocker:
    return Blocker(code=BlockerCode.NOT_SOAKED, service="checkout",
                   message=f"checkout: proven on staging {seconds}s of 20s; eligible …")


def test_the_branch_is_one_per_environment_service_and_digest() -> None:
    first = proposals.branch_name("prod", "checkout", D1)
    assert first == proposals.branch_name("prod", "checkout", D1)
    assert first == "reconcile/promote-prod-checkout-1111111111111111"
    assert len({first, proposals.branch_name("prod", "checkout", D2),
                proposals.branch_name("staging", "checkout", D1),
                proposals.branch_name("prod", "search", D1)}) == 4
    odd = proposals.branch_name("prod", "we ird", "md5:..x y")
    assert odd == "reconcile/promote-prod-we-ird--x-y"  # a name git accepts as a branch


def test_nothing_to_do_when_upstream_has_nothing_or_prod_pins_it() -> None:
    assert proposals.decide("prod", Candidate("checkout", None, None, OLD), ()).step \
        is Step.NOTHING
    assert proposals.decide("prod", Candidate("checkout", D1, "v2", D1), ()).step \
        is Step.PINNED


def test_an_unreadable_upstream_is_waiting_with_its_reason() -> None:
    got = proposals.decide("prod", Candidate("checkout", None, None, OLD,
                                             problem="staging could not be read (timeout)"), ())
    assert got.step is Step.WAITING and "could not be read" in got.reason


def test_held_by_the_rules_waits_and_is_said_once_per_eligible_time() -> None:
    first = proposals.decide("prod", Candidate("checkout", D1, "v2", OLD, (soaking(0, 3),),
                                               eligible_at=20_000), ())
    later = proposals.decide("prod", Candidate("checkout", D1, "v2", OLD, (soaking(0, 9),),
                                               eligible_at=20_000), ())
    assert first.step is Step.WAITING and first.eligible_at == 20_000
    assert first.codes == ("not_soaked",)
    assert first.key == later.key  # the soak's progress is no news
    moved = proposals.decide("prod", Candidate("checkout", D1, "v2", OLD, (soaking(0),),
                                               eligible_at=50_000), ())
    assert moved.key != first.key  # a new rollout upstream moved the eligible time
    assert proposals.wake_at([first], now_ms=10_000) == 20_000
    assert proposals.wake_at([first], now_ms=20_000) is None  # not ahead: no wake


def test_eligible_and_never_proposed_is_proposed_on_its_branch() -> None:
    got = proposals.decide("prod", Candidate("checkout", D1, "v2", OLD), ())
    assert got.step is Step.PROPOSE
    assert got.branch == proposals.branch_name("prod", "checkout", D1)
    assert got.supersedes is None


def test_proposed_already_is_not_proposed_again_even_when_held_now() -> None:
    earlier = [Earlier("checkout", D1, proposals.branch_name("prod", "checkout", D1), 4)]
    again = proposals.decide("prod", Candidate("checkout", D1, "v2", OLD), earlier)
    assert again.step is Step.PROPOSED and again.earlier == earlier[0]
    frozen = Blocker(code=BlockerCode.FROZEN, message="prod is frozen", services=("checkout",))
    held = proposals.decide("prod", Candidate("checkout", D1, "v2", OLD, (frozen,)), earlier)
    assert held.step is Step.PROPOSED


def test_a_newer_digest_supersedes_the_older_proposal() -> None:
    earlier = [Earlier("checkout", D1, proposals.branch_name("prod", "checkout", D1), 4),
               Earlier("search", D1, "b", 5)]
    got = proposals.decide("prod", Candidate("checkout", D2, "v3", OLD), earlier)
    assert got.step is Step.PROPOSE and got.supersedes == earlier[0]
    # Once prod pins the older one (its PR merged), the newer one supersedes nothing.
    merged = proposals.decide("prod", Candidate("checkout", D2, "v3", D1), earlier)
    assert merged.step is Step.PROPOSE and merged.supersedes is None


def test_a_problem_holds_a_proposal_the_rules_allow() -> None:
    got = proposals.decide("prod", Candidate("checkout", D1, None, OLD,
                                             problem="observed under no tag"), ())
    assert got.step is Step.WAITING and got.reason == "observed under no tag"
    assert got.eligible_at is None


@pytest.mark.parametrize("code", sorted(proposals.RULES))
def test_each_rule_of_the_environment_holds_a_proposal(code: BlockerCode) -> None:
    mine = Blocker(code=code, message="m", service="checkout")
    shared = Blocker(code=code, message="m", services=("checkout", "search"))
    other = Blocker(code=code, message="m", service="search")
    assert proposals.rule_blockers([mine, shared, other], "checkout") == (mine, shared)


def test_other_blockers_do_not_hold_a_proposal() -> None:
    silent = Blocker(code=BlockerCode.CLUSTER_UNREACHABLE, message="m",
                     services=("checkout",))
    assert proposals.rule_blockers([silent], "checkout") == ()


def _prod(**first_seen: int) -> LiveService:
    """checkout as prod's control plane holds it: each digest first observed at a time."""
    return LiveService(service_id="svc-checkout", name="checkout", releases=tuple(
        ImageRelease(id=f"rel-{n}", registry_host="registry.test", repository="shop/checkout",
                     digest={"old": OLD, "d1": D1, "d2": D2}[n],
                     media_type="application/vnd.oci.image.index.v1+json",
                     first_observed_at=at) for n, at in first_seen.items()))


def test_a_digest_older_than_what_prod_pins_is_never_proposed() -> None:
    # prod pins D2, a hotfix its control plane observed after D1, which staging proves
    hotfix = _prod(d1=1_000, d2=2_000)
    said = proposals.older_than_pinned("prod", hotfix, D2, D1)
    assert said is not None and said.startswith(f"{D1} is older than {D2}, which prod pins")
    held = proposals.decide("prod", Candidate("checkout", D1, "v2", D2, problem=said), ())
    assert held.step is Step.WAITING and held.reason == said and held.eligible_at is None
    # the usual way: what staging proves came after what prod pins
    assert proposals.older_than_pinned("prod", hotfix, D1, D2) is None
    # unknown is not older: a release prod has not observed, no time, no answer at all
    assert proposals.older_than_pinned("prod", _prod(d2=2_000), D2, D1) is None
    assert proposals.older_than_pinned("prod", _prod(d1=0, d2=2_000), D2, D1) is None
    assert proposals.older_than_pinned("prod", ReadFailure(
        service_id="svc-checkout", reason="down"), D2, D1) is None
    assert proposals.older_than_pinned("prod", None, D2, D1) is None
    assert proposals.older_than_pinned("prod", hotfix, None, D1) is None
    assert proposals.older_than_pinned("prod", hotfix, D1, D1) is None
