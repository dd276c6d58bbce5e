"""The one judge with checks (issue 34): a service held to checks is proven on a cluster
only when the cluster proves the digest AND passes every check there, for that digest and
rollout generation. Unknown never passes (property-tested); failing is a stated failure
naming the check and the value."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core import evidence
from reconciler.core.evidence import Proof, Target, Why
from reconciler.core.live import LiveService, Observation, ObservationKind, ReadFailure
from reconciler.core.verification import (
    CheckResult,
    Measurement,
    Outcome,
    combine,
    judge_checks,
    parse_condition,
    render_query,
    series_done,
    template_problems,
)
from tests.plan import builders as b

CHECKS = ("works/health", "works/errors")
DIGEST = b.digest("checkout", "v2.3.0")
OTHER = b.digest("checkout", "v2.4.0")
GEN = 3


def result(check: str, cluster: str, outcome: Outcome, *, digest: str = DIGEST,
           generation: int | None = GEN, value: str = "0") -> CheckResult:
    return CheckResult(check=check, cluster=cluster, service="checkout", digest=digest,
                       generation=generation, outcome=outcome, value=value,
                       why="" if outcome is Outcome.PASS else "because")


def world(per_cluster: dict[str, tuple[CheckResult, ...]]) -> tuple[
        Target, LiveService | ReadFailure, tuple[Observation, ...]]:
    live = b.reference_live()
    service = live.services["svc-checkout"]
    rows = tuple(replace(o, checks=per_cluster.get(o.cluster_id, ()))
                 for o in live.observations["checkout"])
    target = Target(service="checkout", app_id="checkout", digest=DIGEST,
                    egress=service.egress if isinstance(service, LiveService) else None,
                    checks=CHECKS)
    return target, service, rows


def passing(cluster: str) -> tuple[CheckResult, ...]:
    return tuple(result(c, cluster, Outcome.PASS) for c in CHECKS)


def test_every_check_passing_on_every_cluster_converges() -> None:
    target, live, rows = world({c: passing(c) for c in b.CLUSTERS})
    proof = evidence.judge(target, live, b.CLUSTERS, rows)
    assert proof.proof is Proof.CONVERGED, proof.reasons()


def test_without_declared_checks_results_are_not_asked() -> None:
    target, live, rows = world({})
    proof = evidence.judge(target.model_copy(update={"checks": ()}), live, b.CLUSTERS,
                           rows)
    assert proof.proof is Proof.CONVERGED


def test_a_failing_check_is_a_stated_failure_naming_check_and_value() -> None:
    results = {c: passing(c) for c in b.CLUSTERS}
    results["sn2"] = (result("works/health", "sn2", Outcome.PASS),
                      result("works/errors", "sn2", Outcome.FAIL, value="0.52"))
    target, live, rows = world(results)
    proof = evidence.judge(target, live, b.CLUSTERS, rows)
    assert proof.proof is Proof.NOT_CONVERGED
    (stated,) = proof.stated()
    assert stated.cluster == "sn2" and stated.why is Why.CHECK_FAILED
    assert stated.stated is not None
    assert "works/errors" in stated.stated and "0.52" in stated.stated


def test_missing_results_leave_the_cluster_unproven_like_a_silent_one() -> None:
    results = {c: passing(c) for c in b.CLUSTERS if c != "sn3"}
    target, live, rows = world(results)
    proof = evidence.judge(target, live, b.CLUSTERS, rows)
    assert proof.proof is Proof.UNPROVEN
    (pending,) = proof.pending()
    assert pending.cluster == "sn3" and pending.why is Why.CHECK_UNKNOWN
    assert pending.stated is None  # an evidence gap, never a reason to revert


@pytest.mark.parametrize("bad", [
    result("works/errors", "sn1", Outcome.PASS, digest=OTHER),
    result("works/errors", "sn1", Outcome.PASS, generation=GEN - 1),
    result("works/errors", "sn1", Outcome.UNKNOWN),
])
def test_a_result_for_another_digest_or_generation_or_unknown_is_no_evidence(
        bad: CheckResult) -> None:
    results = {c: passing(c) for c in b.CLUSTERS}
    results["sn1"] = (result("works/health", "sn1", Outcome.PASS), bad)
    target, live, rows = world(results)
    proof = evidence.judge(target, live, b.CLUSTERS, rows)
    assert proof.proof is Proof.UNPROVEN
    assert [c.why for c in proof.pending()] == [Why.CHECK_UNKNOWN]


def test_a_digest_not_proven_is_named_before_the_checks() -> None:
    results = {c: passing(c) for c in b.CLUSTERS}
    target, live, rows = world(results)
    proof = evidence.judge(target.model_copy(update={"digest": OTHER}), live, b.CLUSTERS,
                           rows)
    assert Why.CHECK_FAILED not in {c.why for c in proof.clusters}


OUTCOMES = st.sampled_from(list(Outcome))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(b.CLUSTERS), st.lists(st.tuples(
    st.sampled_from(CHECKS), OUTCOMES, st.booleans(), st.booleans()), max_size=4)))
def test_unknown_never_passes(draw: dict[str, list[tuple[str, Outcome, bool, bool]]]) -> None:
    """Whatever the results: the service is converged only when every cluster holds, for
    every declared check, a passing result bound to the digest and generation -- and a
    cluster holding any failing such result is never converged."""
    per_cluster = {cluster: tuple(
        result(check, cluster, outcome, digest=DIGEST if same_digest else OTHER,
               generation=GEN if same_gen else GEN + 1)
        for check, outcome, same_digest, same_gen in entries)
        for cluster, entries in draw.items()}
    target, live, rows = world(per_cluster)
    proof = evidence.judge(target, live, b.CLUSTERS, rows)

    def proven(cluster: str) -> bool:
        first: dict[str, CheckResult] = {}
        for r in per_cluster.get(cluster, ()):
            first.setdefault(r.check, r)
        return all(c in first and first[c].outcome is Outcome.PASS
                   and first[c].digest == DIGEST and first[c].generation == GEN
                   for c in CHECKS)

    assert proof.converged == all(proven(c) for c in b.CLUSTERS)
    for cluster in proof.clusters:
        if cluster.proof is Proof.CONVERGED:
            assert proven(cluster.cluster)
        if cluster.why is Why.CHECK_UNKNOWN:
            assert cluster.proof is Proof.UNPROVEN and cluster.stated is None


def test_judge_cluster_applies_the_same_rule() -> None:
    obs = Observation(cluster_id="sn1", kind=ObservationKind.ANSWERED,
                      runtime=b.runtime("checkout", "v2.3.0", GEN))
    target = Target(service="checkout", app_id="checkout", digest=DIGEST, checks=CHECKS)
    assert evidence.judge_cluster(obs, target).why is Why.CHECK_UNKNOWN
    ok = replace(obs, checks=passing("sn1"))
    assert evidence.judge_cluster(ok, target).proof is Proof.CONVERGED


# --------------------------------------------------------------------------- the values

@pytest.mark.parametrize(("text", "value", "holds"), [
    ("result < 0.01", 0.001, True), ("result < 0.01", 0.01, False),
    ("result >= 1 and result <= 5", 3, True), ("result >= 1 && result <= 5", 6, False),
    ("result == 200", 200, True), ("result != 0", 0, False),
    ("result < 1", float("nan"), False),
])
def test_conditions(text: str, value: float, holds: bool) -> None:
    assert parse_condition(text).holds(value) is holds


@pytest.mark.parametrize("text", ["result <", "errors < 1", "result < 1 or result > 2",
                                  "result < inf", "__import__('os')", ""])
def test_bad_conditions_are_refused_with_a_sentence(text: str) -> None:
    with pytest.raises(ValueError, match=r"result OP NUMBER|finite"):
        parse_condition(text)


def test_templates() -> None:
    query = 'x{cluster="{{cluster}}",app="{{ app }}",d="{{digest}}",s="{{service}}"}'
    assert template_problems(query) == []
    assert render_query(query, cluster="sn1", service="checkout", app="co", digest="sha256:a") \
        == 'x{cluster="sn1",app="co",d="sha256:a",s="checkout"}'
    assert template_problems("x{{nope}}") and template_problems("x{{cluster")


P, F, U = (Measurement(Outcome.PASS, "1"), Measurement(Outcome.FAIL, "9", "too high"),
           Measurement(Outcome.UNKNOWN, "", "no samples"))


@pytest.mark.parametrize(("series", "count", "limit", "outcome"), [
    ([P, P, P], 3, 0, Outcome.PASS),
    ([P, F, P], 3, 1, Outcome.PASS),
    ([P, F], 3, 0, Outcome.FAIL),
    ([F, F], 3, 1, Outcome.FAIL),
    ([P, U, P], 3, 1, Outcome.UNKNOWN),
    ([P, P], 3, 0, Outcome.UNKNOWN),
    ([], 1, 0, Outcome.UNKNOWN),
])
def test_count_and_failure_limit(series: list[Measurement], count: int, limit: int,
                                 outcome: Outcome) -> None:
    assert combine(series, count=count, failure_limit=limit).outcome is outcome


def test_a_series_stops_once_failed() -> None:
    assert series_done([F], count=3, failure_limit=0)
    assert not series_done([P, F], count=3, failure_limit=1)


def test_judge_checks_failure_wins_over_unknown() -> None:
    verdict = judge_checks(CHECKS, [result("works/health", "sn1", Outcome.UNKNOWN),
                                    result("works/errors", "sn1", Outcome.FAIL, value="7")],
                           digest=DIGEST, generation=GEN)
    assert verdict.outcome is Outcome.FAIL and "works/errors failed: 7" in verdict.detail
