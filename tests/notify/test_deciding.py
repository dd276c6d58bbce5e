"""``core.notifying.decide``: which notifications an outcome earns, and whether each is
new -- once per environment, commit and outcome, never once per resync. Pure: plans and
reports built as values."""

from __future__ import annotations

import json
from typing import Any

import pytest

from reconciler.core.codes import BlockerCode, ReasonCode
from reconciler.core.evidence import ClusterProof, Proof, ServiceProof, Why
from reconciler.core.kinds.release import PromoteChange, RollbackChange
from reconciler.core.notifying import (
    CDEVENT_INCIDENT_DETECTED,
    CDEVENT_ROLLEDBACK,
    CDEVENT_UPGRADED,
    KINDS,
    MAX_KEYS,
    Kind,
    Memory,
    decide,
)
from reconciler.core.outcomes import ApplyReport, ChangeResult, GateReport, Outcome
from reconciler.core.plans import Action, Blocker, Change, Plan, Preconditions, ReleaseRef

A = "a" * 40
B = "b" * 40
NEW = "sha256:" + "1" * 64
OLD = "sha256:" + "0" * 64
ENV = "prod"


def change(service: str, action: Action = Action.PROMOTE) -> Change:
    model = PromoteChange if action is Action.PROMOTE else RollbackChange
    return model(action=action, service=service, service_id=f"svc-{service}",
                  app_id=f"app-{service}", reason=ReasonCode.NEWER_THAN_CURRENT,
                  summary=f"{action.value} {service}",
                  preconditions=Preconditions(rollout_generation=1),
                  idempotency_key=f"key-{service}-{action.value}",
                  release_before=ReleaseRef(digest=OLD), release_after=ReleaseRef(digest=NEW))


def proof(service: str, converged: bool = True) -> ServiceProof:
    clusters = (ClusterProof(cluster="c1", proof=Proof.CONVERGED),
                ClusterProof(cluster="c2", proof=Proof.CONVERGED if converged
                             else Proof.NOT_CONVERGED, why=None if converged
                             else Why.OTHER_DIGEST, detail="" if converged
                             else f"runs {OLD[:19]}"))
    return ServiceProof(service=service, app_id=f"app-{service}", digest=NEW,
                        proof=Proof.CONVERGED if converged else Proof.NOT_CONVERGED,
                        clusters=clusters)


def plan(commit: str | None = A, *, changes: tuple[Change, ...] = (),
         proofs: tuple[ServiceProof, ...] = (), blockers: tuple[Blocker, ...] = (),
         **over: Any) -> Plan:
    return Plan(created_at=1_700_000_000_000, commit=commit, control_plane_url="https://cp",
                gateway="mesh.example", expected_clusters=("c1", "c2"), changes=changes,
                blockers=blockers, drift=(), evidence=(), fingerprint="f", proofs=proofs,
                **over)


def silent(cluster: str = "c2") -> Blocker:
    return Blocker(code=BlockerCode.CLUSTER_SILENT, message=f"{cluster} said nothing",
                   cluster=cluster)


def gate(*proofs: ServiceProof, **over: Any) -> GateReport:
    return GateReport(attempts=4, waited_seconds=1.0, proofs=proofs, **over)


def sent(c: Change, outcome: Outcome = Outcome.APPLIED) -> ChangeResult:
    return ChangeResult(change=c, outcome=outcome)


def kinds(decision: Any) -> list[str]:
    return [n.kind.value for n in decision.new]


def test_a_gate_failure_is_said_once_however_many_resyncs_and_retries_follow() -> None:
    c = change("checkout")
    waiting = plan(changes=(c,), proofs=(proof("checkout", False),))
    failed = ApplyReport(results=(sent(c),), gate=gate(proof("checkout", False)))
    memory = Memory()
    first = decide(memory, waiting, environment=ENV, report=failed, applying=True)
    assert kinds(first) == ["gate_failed"]
    note = first.new[0]
    assert note.commit == A and note.services[0].service == "checkout"
    assert note.services[0].clusters == ("c2",)  # the cluster not proven, not every one
    memory = first.memory
    for _ in range(5):  # the watcher's resyncs (a GO plan, applying) and its retries
        again = decide(memory, waiting, environment=ENV, applying=True)
        assert again.new == ()
        memory = again.memory
        retried = decide(memory, waiting, environment=ENV, report=failed, applying=True)
        assert retried.new == ()
        memory = retried.memory


def test_a_new_commit_is_a_new_outcome() -> None:
    c = change("checkout")
    failed = ApplyReport(results=(sent(c),), gate=gate(proof("checkout", False)))
    first = decide(Memory(), plan(A, changes=(c,)), environment=ENV, report=failed)
    second = decide(first.memory, plan(B, changes=(c,)), environment=ENV, report=failed)
    assert kinds(second) == ["gate_failed"] and second.new[0].commit == B


def test_the_same_commit_in_another_environment_is_told_apart() -> None:
    c = change("checkout")
    failed = ApplyReport(results=(sent(c),), gate=gate(proof("checkout", False)))
    first = decide(Memory(), plan(changes=(c,)), environment="staging", report=failed)
    assert kinds(decide(first.memory, plan(changes=(c,)), environment=ENV,
                        report=failed)) == ["gate_failed"]


def test_an_apply_that_proves_its_changes_covers_converged_at_that_commit() -> None:
    c = change("checkout")
    done = decide(Memory(), plan(changes=(c,)), environment=ENV,
                  report=ApplyReport(results=(sent(c),), gate=gate(proof("checkout"))))
    assert kinds(done) == ["applied"]
    converged_plan = plan(proofs=(proof("checkout"),))
    assert converged_plan.verdict.value == "no_changes"
    assert decide(done.memory, converged_plan, environment=ENV).new == ()


def test_converged_after_a_gate_failure_is_said_when_the_judge_proves_it() -> None:
    c = change("checkout")
    failed = decide(Memory(), plan(changes=(c,)), environment=ENV,
                    report=ApplyReport(results=(sent(c),), gate=gate(proof("checkout", False))))
    healed = decide(failed.memory, plan(proofs=(proof("checkout"),)), environment=ENV)
    assert kinds(healed) == ["converged"]


def test_changes_waiting_are_planned_unless_the_watcher_applies_them() -> None:
    waiting = plan(changes=(change("checkout"),))
    assert kinds(decide(Memory(), waiting, environment=ENV)) == ["planned"]
    assert decide(Memory(), waiting, environment=ENV, applying=True).new == ()


def test_write_failures_are_apply_failed_not_gate_failed() -> None:
    c = change("checkout")
    report = ApplyReport(results=(sent(c, Outcome.REFUSED),))
    decision = decide(Memory(), plan(changes=(c,)), environment=ENV, report=report)
    assert kinds(decision) == ["apply_failed"]
    assert decision.new[0].services[0].reasons[0].startswith("refused")


def test_nothing_to_do_is_converged() -> None:
    done = plan(proofs=(proof("checkout"),))
    assert kinds(decide(Memory(), done, environment=ENV,
                        report=ApplyReport(results=()))) == ["converged"]


def test_no_go_appears_once_and_clears_once_per_commit() -> None:
    no_go = plan(blockers=(silent(),))
    first = decide(Memory(), no_go, environment=ENV)
    assert kinds(first) == ["no_go"]
    assert first.new[0].blockers == ("cluster_silent: c2 said nothing",)
    assert first.memory.open_no_go[ENV] == first.new[0].key
    # The same blockers again, with other words: the same NO-GO, not said again.
    reworded = plan(blockers=(silent().model_copy(update={"message": "c2: timeout 5s"}),))
    again = decide(first.memory, reworded, environment=ENV)
    assert again.new == ()
    cleared = decide(again.memory, plan(changes=(change("checkout"),)), environment=ENV,
                     applying=True)
    assert kinds(cleared) == ["no_go_cleared"]
    assert ENV not in cleared.memory.open_no_go
    # With nothing open, a GO plan clears nothing; flapping back is not news at this commit.
    assert decide(cleared.memory, plan(changes=(change("checkout"),)), environment=ENV,
                  applying=True).new == ()
    flap = decide(cleared.memory, no_go, environment=ENV)
    assert flap.new == () and flap.memory.open_no_go[ENV]
    assert decide(flap.memory, plan(proofs=(proof("checkout"),)),
                  environment=ENV).new[0].kind is Kind.CONVERGED


def test_another_blocker_at_the_same_commit_is_another_no_go() -> None:
    first = decide(Memory(), plan(blockers=(silent("c2"),)), environment=ENV)
    second = decide(first.memory, plan(blockers=(silent("c1"),)), environment=ENV)
    assert kinds(second) == ["no_go"]


@pytest.mark.parametrize("over", [{"commit": None}, {"dirty": True}, {"worktree": True}])
def test_a_plan_with_no_commit_to_report_on_earns_nothing(over: dict[str, Any]) -> None:
    commit = over.pop("commit", A)
    assert decide(Memory(), plan(commit, blockers=(silent(),), **over),
                  environment=ENV).new == ()


def test_the_memory_survives_its_json_form_and_stays_bounded() -> None:
    memory = Memory()
    for i in range(MAX_KEYS + 50):
        memory = memory.remember(f"k{i}")
    memory = decide(memory, plan(blockers=(silent(),)), environment=ENV).memory
    again = Memory.from_json(json.loads(json.dumps(memory.to_json())))
    assert again == memory and len(again.sent) == MAX_KEYS
    assert "k0" not in again.sent
    assert Memory.from_json({"version": 99}) == Memory()
    assert Memory.from_json("garbage") == Memory()


def test_cdevent_types_follow_the_change_and_the_kind() -> None:
    promote, rollback = change("checkout"), change("search", Action.ROLLBACK)
    done = decide(Memory(), plan(changes=(promote, rollback)), environment=ENV,
                  report=ApplyReport(results=(sent(promote), sent(rollback)),
                                     gate=gate(proof("checkout"), proof("search"))))
    assert [(t, s.service if s else None) for t, s in done.new[0].cdevent_types()] == [
        (CDEVENT_UPGRADED, "checkout"), (CDEVENT_ROLLEDBACK, "search")]
    failed = decide(Memory(), plan(changes=(promote,)), environment=ENV,
                    report=ApplyReport(results=(sent(promote),),
                                       gate=gate(proof("checkout", False))))
    assert [t for t, _ in failed.new[0].cdevent_types()] == [CDEVENT_INCIDENT_DETECTED]


def test_every_kind_has_its_words_in_the_one_table() -> None:
    assert set(KINDS) == set(Kind)
    for spec in KINDS.values():
        assert spec.commit_state in ("pending", "success", "failure", "error")
        assert spec.deployment_state in (None, "queued", "in_progress", "success", "failure",
                                         "error", "inactive")
