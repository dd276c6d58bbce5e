"""The soak counts verified time (issue 34): on the previous environment, the digest is
proven -- and the soak clock runs -- only while every expected cluster also passes the
checks the service is held to there; a failing check stops the promotion naming the
cluster, the check and the value; an unreadable one stops it too, never counted."""

from __future__ import annotations

from dataclasses import replace

from reconciler.core.codes import BlockerCode
from reconciler.core.promotion import Upstream, UpstreamService, gate
from reconciler.core.verification import CheckResult, Outcome
from tests.promotion.test_soak_clock import CLUSTERS, DIGEST, NOW, PROD, live, observations

CHECK = "checkout-works/error-ratio"


def checked(outcomes: dict[str, Outcome]) -> Upstream:
    seen = tuple(replace(o, checks=(CheckResult(
        check=CHECK, cluster=o.cluster_id, service="checkout", digest=DIGEST, generation=7,
        outcome=outcomes.get(o.cluster_id, Outcome.PASS),
        value="0.5" if outcomes.get(o.cluster_id) is Outcome.FAIL else "0",
        why="no sample" if outcomes.get(o.cluster_id) is Outcome.UNKNOWN else ""),))
        for o in observations())
    return Upstream(name="staging", services={"checkout": UpstreamService(
        app_id="checkout", egress=None, live=live(), expected=CLUSTERS, observations=seen,
        checks=(CHECK,))})


def test_every_cluster_passing_its_checks_lets_the_soak_count() -> None:
    found = gate("checkout", DIGEST, PROD, checked({}), (), NOW)
    assert found.ready, found.blockers
    assert found.since is not None


def test_one_cluster_failing_its_check_stops_the_soak_naming_it() -> None:
    found = gate("checkout", DIGEST, PROD, checked({"sn2": Outcome.FAIL}), (), NOW)
    [blocker] = found.blockers
    assert blocker.code is BlockerCode.NOT_PROVEN_UPSTREAM
    assert blocker.cluster == "sn2"
    assert CHECK in blocker.message and "0.5" in blocker.message
    assert found.since is None and found.eligible_at is None


def test_an_unreadable_check_stops_the_soak_too() -> None:
    found = gate("checkout", DIGEST, PROD, checked({"sn3": Outcome.UNKNOWN}), (), NOW)
    [blocker] = found.blockers
    assert blocker.code is BlockerCode.NOT_PROVEN_UPSTREAM and blocker.cluster == "sn3"
    assert found.eligible_at is None


def test_results_missing_upstream_stop_the_soak() -> None:
    bare = Upstream(name="staging", services={"checkout": UpstreamService(
        app_id="checkout", egress=None, live=live(), expected=CLUSTERS,
        observations=observations(), checks=(CHECK,))})
    found = gate("checkout", DIGEST, PROD, bare, (), NOW)
    assert [b.code for b in found.blockers] == [BlockerCode.NOT_PROVEN_UPSTREAM]
