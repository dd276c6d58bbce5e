"""``core.groupoutcome``: what a member records for its shards at a commit, and the
group's one verdict over every shard. Pure: plans and reports built as values."""

from __future__ import annotations

from reconciler.core.groupoutcome import (
    FINAL_WORDS,
    Failed,
    ShardOutcome,
    ShardState,
    aggregate,
    notification,
    pending,
    shard_outcomes,
)
from reconciler.core.notifying import Kind
from reconciler.core.outcomes import ApplyReport, Outcome
from reconciler.core.plans import Verdict
from tests.notify.test_deciding import A, change, gate, plan, proof, sent, silent

#: services -> shards of a four-shard group (shard 3 holds none)
SHARD_OF = {"checkout": 0, "search": 1, "ledger": 1, "notifications": 2}


def proven(shard: int, changes: int = 0) -> ShardOutcome:
    return ShardOutcome(shard, ShardState.PROVEN, 1, changes)


def failed(shard: int, stage: str = "gate") -> ShardOutcome:
    return ShardOutcome(shard, ShardState.FAILED, 1, 1,
                        (Failed("checkout", ("sn3",), "runs sha256:0000", stage),))


def test_a_set_is_complete_only_when_every_shard_reported() -> None:
    verdict = aggregate(A, 4, {0: proven(0), 1: proven(1), 2: proven(2)}, applying=True)
    assert not verdict.complete and verdict.kind is None and verdict.claim() is None
    note = pending(verdict, plan(), environment="prod", group="g")
    assert note.spec.commit_state == "pending"
    assert "3 of 4 shards reported" in note.summary


def test_success_only_when_every_shard_proved() -> None:
    verdict = aggregate(A, 3, {0: proven(0, 2), 1: proven(1), 2: proven(2)}, applying=True)
    assert verdict.kind is Kind.APPLIED and verdict.claim() == "success"
    note = notification(verdict, plan(), environment="prod", group="g")
    assert note is not None and note.spec.commit_state == "success"
    assert "2 change(s)" in note.summary and "all 3 shard(s)" in note.summary
    # nothing applied anywhere: converged, the same once-only claim as applied
    again = aggregate(A, 3, {s: proven(s) for s in range(3)}, applying=True)
    assert again.kind is Kind.CONVERGED and again.claim() == "success"


def test_any_failed_shard_fails_the_commit_naming_shard_service_and_cluster() -> None:
    verdict = aggregate(A, 3, {0: proven(0, 1), 1: failed(1), 2: proven(2)}, applying=True)
    assert verdict.kind is Kind.GATE_FAILED and verdict.claim() == "failure"
    note = notification(verdict, plan(), environment="prod", group="g")
    assert note is not None and note.spec.commit_state == "failure"
    assert "shard 1" in note.summary and "checkout on sn3" in note.summary
    [line] = note.services
    assert line.clusters == ("sn3",) and line.reasons[0].startswith("shard 1: ")
    # a refused write fails it as an apply failure; one claim either way
    worse = aggregate(A, 3, {0: failed(0, "apply"), 1: failed(1), 2: proven(2)},
                      applying=True)
    assert worse.kind is Kind.APPLY_FAILED and worse.claim() == "failure"


def test_a_waiting_shard_has_not_reported_in_a_group_that_applies() -> None:
    waiting = ShardOutcome(2, ShardState.WAITING, 1)
    got = aggregate(A, 3, {0: proven(0), 1: proven(1), 2: waiting}, applying=True)
    assert not got.complete and got.kind is None
    told = aggregate(A, 3, {0: proven(0), 1: proven(1), 2: waiting}, applying=False)
    assert told.kind is Kind.PLANNED and told.claim() == "planned"


def test_every_claim_is_one_of_the_final_words() -> None:
    for recorded in ({0: proven(0)}, {0: failed(0)}, {0: ShardOutcome(0, ShardState.BLOCKED)},
                     {0: ShardOutcome(0, ShardState.WAITING)}):
        claim = aggregate(A, 1, recorded, applying=False).claim()
        assert claim in FINAL_WORDS, claim


def test_shards_outside_the_group_do_not_count() -> None:
    got = aggregate(A, 2, {0: proven(0), 5: proven(5)}, applying=True)
    assert not got.complete and [o.shard for o in got.reported] == [0]


def test_outcomes_round_trip_and_garbage_is_not_an_outcome() -> None:
    for outcome in (proven(0, 3), failed(1), ShardOutcome(2, ShardState.BLOCKED,
                                                          blockers=("x: y",))):
        assert ShardOutcome.from_json(outcome.to_json()) == outcome
    assert ShardOutcome.from_json({"shard": 1, "state": "nonsense"}) is None
    assert ShardOutcome.from_json([1, 2]) is None


def test_a_member_with_no_shards_records_nothing() -> None:
    made = plan(proofs=(proof("checkout"),))
    assert made.verdict is Verdict.NO_CHANGES
    assert shard_outcomes(made, None, shards=(), shard_of=SHARD_OF, applying=True) == ()


def test_a_plan_with_changes_records_only_the_shards_already_proven() -> None:
    made = plan(changes=(change("checkout"),), proofs=(proof("checkout", False),
                                                       proof("search")))
    got = shard_outcomes(made, None, shards=(0, 1, 3), shard_of=SHARD_OF, applying=True)
    assert {o.shard: o.state for o in got} == {1: ShardState.PROVEN, 3: ShardState.PROVEN}
    watching = shard_outcomes(made, None, shards=(0, 1), shard_of=SHARD_OF, applying=False)
    assert {o.shard: o.state for o in watching} == {0: ShardState.WAITING,
                                                    1: ShardState.PROVEN}


def test_an_apply_records_proven_and_failed_shards_from_its_report() -> None:
    c = change("checkout")
    s = change("search")
    made = plan(changes=(c, s), proofs=(proof("checkout", False), proof("search", False)))
    report = ApplyReport(results=(sent(c), sent(s)),
                         gate=gate(proof("checkout", False), proof("search")))
    got = {o.shard: o for o in shard_outcomes(made, report, shards=(0, 1),
                                              shard_of=SHARD_OF, applying=True)}
    assert got[1].state is ShardState.PROVEN and got[1].changes == 1
    assert got[0].state is ShardState.FAILED
    [why] = got[0].failed
    assert (why.service, why.clusters, why.stage) == ("checkout", ("c2",), "gate")
    refused = ApplyReport(results=(sent(c, Outcome.REFUSED), sent(s)), gate=gate(proof("search")))
    got = {o.shard: o for o in shard_outcomes(made, refused, shards=(0, 1),
                                              shard_of=SHARD_OF, applying=True)}
    assert got[0].state is ShardState.FAILED and got[0].failed[0].stage == "apply"


def test_a_no_go_plan_blocks_its_shards_and_a_dirty_one_says_nothing() -> None:
    made = plan(blockers=(silent(),), proofs=(proof("checkout"),))
    got = shard_outcomes(made, None, shards=(0, 1), shard_of=SHARD_OF, applying=True)
    assert [o.state for o in got] == [ShardState.BLOCKED] * 2
    verdict = aggregate(A, 2, {o.shard: o for o in got}, applying=True)
    assert verdict.kind is Kind.NO_GO and verdict.claim() == "no_go"
    dirty = plan(dirty=True, proofs=(proof("checkout"),))
    assert shard_outcomes(dirty, None, shards=(0,), shard_of=SHARD_OF, applying=True) == ()
