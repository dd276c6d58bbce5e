"""``core.notifying.decide_way_back`` and the ``held`` NO-GO: what the way back from a
failed release says (reverted, the rollback's proof, or no revert made), once per failure
however often it is decided again; and the sinks' words for it (CDEvents, Slack, GitHub
status). Pure values, but for the sink formats."""

from __future__ import annotations

from typing import Any

from reconciler.core.codes import BlockerCode
from reconciler.core.evidence import ClusterProof, Proof, ServiceProof, Why
from reconciler.core.notifying import (
    CDEVENT_INCIDENT_DETECTED,
    CDEVENT_INCIDENT_RESOLVED,
    CDEVENT_REVERT_PROPOSED,
    CDEVENT_ROLLEDBACK,
    Kind,
    Memory,
    WayBack,
    decide,
    decide_way_back,
)
from reconciler.core.outcomes import ApplyReport
from reconciler.core.plans import Action, Blocker
from reconciler.core.reverts import Item
from reconciler.shell import notifying as sinks
from tests.notify.test_deciding import (
    ENV,
    NEW,
    OLD,
    A,
    B,
    change,
    gate,
    kinds,
    plan,
    proof,
    sent,
    silent,
)

REVERT = "c" * 40  # the revert commit


def item(service: str = "checkout") -> Item:
    return Item(service=service, failed=NEW, failed_tag="v2.4.0", to=OLD, to_tag="v2.3.0",
                evidence=("control plane: rollout r-1 is mismatched (pulled-digest-mismatch)",
                          "c2: runs sha256:0000…, not sha256:1111…"),
                sources=("journal: gate of run r proved it",), path=f"services/{service}.yaml",
                hold_path=f"holds/{service}-111111111111.yaml")


def failed_run() -> tuple[Any, Any]:
    """The plan whose apply's gate failed at commit A, and that gate."""
    c = change("checkout")
    return plan(A, changes=(c,)), gate(proof("checkout", False))


def rollback(proven: bool) -> tuple[Any, ApplyReport]:
    back = change("checkout", Action.ROLLBACK)
    return plan(REVERT, changes=(back,)), ApplyReport(
        results=(sent(back),), gate=gate(proof("checkout", proven)))


def landed(proven: bool = True) -> WayBack:
    return WayBack(key="rvt-1", items=(item(),), commit=REVERT, landed=True,
                   rollback=rollback(proven), failed=(("checkout", NEW),))


def test_a_landed_revert_is_told_once_with_its_proven_rollback_however_often_decided() -> None:
    failed, failed_gate = failed_run()
    first = decide_way_back(Memory(), failed, failed_gate, landed(), environment=ENV)
    assert kinds(first) == ["reverted", "rollback_proven"]
    reverted, proven = first.new
    # reverted: on the failed commit, naming the revert commit, both digests, the evidence.
    assert reverted.commit == A and REVERT[:12] in reverted.summary
    assert "v2.3.0" in reverted.summary
    line = reverted.services[0]
    assert (line.digest, line.previous, line.action) == (OLD, NEW, "rollback")
    assert line.clusters == ("c2",) and "pulled-digest-mismatch" in line.reasons[0]
    assert reverted.revert is not None and reverted.revert.landed
    assert reverted.revert.failed_commit == A and reverted.revert.commit == REVERT
    # the rollback's proof: on the revert commit.
    assert proven.commit == REVERT and "proven on every cluster" in proven.summary
    memory = first.memory
    for _ in range(5):  # a rerun, a second decision, a resync: never said again
        again = decide_way_back(memory, failed, failed_gate, landed(), environment=ENV)
        assert again.new == ()
        memory = again.memory
    # The revert commit converged at the next resync: covered by rollback_proven.
    converged = plan(REVERT, proofs=(proof("checkout"),))
    assert decide(memory, converged, environment=ENV, applying=True).new == ()


def test_the_clusters_named_are_those_that_refused_not_those_still_rolling_out() -> None:
    failed, _gate = failed_run()
    refusing = ClusterProof(cluster="c2", proof=Proof.NOT_CONVERGED, why=Why.OTHER_DIGEST,
                            detail="runs another digest", last_error="pulled-digest-mismatch")
    rolling = ClusterProof(cluster="c1", proof=Proof.NOT_CONVERGED, why=Why.OTHER_DIGEST,
                           detail="runs another digest")
    stopped = gate(ServiceProof(service="checkout", app_id="app-checkout", digest=NEW,
                                proof=Proof.NOT_CONVERGED, clusters=(rolling, refusing)))
    [reverted, _proven] = decide_way_back(Memory(), failed, stopped, landed(),
                                          environment=ENV).new
    assert reverted.services[0].clusters == ("c2",)


def test_a_rollback_not_proven_is_its_own_kind_naming_what_the_judge_misses() -> None:
    failed, failed_gate = failed_run()
    decision = decide_way_back(Memory(), failed, failed_gate, landed(proven=False),
                               environment=ENV)
    assert kinds(decision) == ["reverted", "rollback_not_proven"]
    missing = decision.new[1]
    assert missing.commit == REVERT and "NOT proven" in missing.summary
    assert "checkout:" in missing.summary  # the judge's reasons, per service
    assert missing.spec.commit_state == "failure"
    # Healed later: converged at the revert commit is news then.
    healed = decide(decision.memory, plan(REVERT, proofs=(proof("checkout"),)),
                    environment=ENV, applying=True)
    assert kinds(healed) == ["converged"]


def test_a_revert_by_hand_is_worded_as_one_and_told_once() -> None:
    failed, _gate = failed_run()
    by_hand = WayBack(key="rvt-1", items=(item(),), commit=REVERT, landed=True, by_hand=True)
    decided = decide_way_back(Memory(), failed, None, by_hand, environment=ENV)
    [reverted] = decided.new  # no rollback of its own: the next apply tells it
    assert reverted.kind is Kind.REVERTED and reverted.commit == A
    assert f"release of commit {A[:12]} not proven, reverted by hand; reverted to " \
        in reverted.summary
    assert "failed" not in reverted.summary
    assert decide_way_back(decided.memory, failed, None, by_hand, environment=ENV).new == ()


def test_a_revert_proposed_as_a_pull_request_names_it_and_claims_no_rollback() -> None:
    failed, failed_gate = failed_run()
    proposed = WayBack(key="rvt-1", items=(item(),), commit=REVERT, landed=False,
                       pull_url="https://github.example/acme/fleet/pull/8", pull_number=8,
                       why_pr="main is protected on GitHub", failed=(("checkout", NEW),))
    decision = decide_way_back(Memory(), failed, failed_gate, proposed, environment=ENV)
    assert kinds(decision) == ["reverted"]  # nothing rolled back: no proof to tell
    note = decision.new[0]
    assert "pull request #8" in note.summary and "protected" in note.summary
    assert [t for t, _ in note.cdevent_types()] == [CDEVENT_REVERT_PROPOSED]


def test_no_revert_made_is_rollback_not_proven_once_per_failure() -> None:
    failed, failed_gate = failed_run()
    refused = WayBack(error="checkout: the journal holds no proof of a digest other than "
                      "sha256:1111: refusing to guess", failed=(("checkout", NEW),))
    first = decide_way_back(Memory(), failed, failed_gate, refused, environment=ENV)
    assert kinds(first) == ["rollback_not_proven"]
    assert first.new[0].commit == A and "NOT reverted" in first.new[0].summary
    assert "refusing to guess" in first.new[0].summary
    assert decide_way_back(first.memory, failed, failed_gate, refused,
                           environment=ENV).new == ()
    # Nothing asked, nothing told.
    assert decide_way_back(Memory(), failed, failed_gate, WayBack(), environment=ENV).new == ()


def test_a_new_failure_at_another_commit_is_told_again() -> None:
    failed, failed_gate = failed_run()
    first = decide_way_back(Memory(), failed, failed_gate, landed(), environment=ENV)
    other = plan(B, changes=(change("checkout"),))
    second = decide_way_back(first.memory, other, failed_gate,
                             WayBack(key="rvt-2", items=(item(),), commit="d" * 40,
                                     landed=True, rollback=rollback(True)),
                             environment=ENV)
    assert kinds(second) == ["reverted", "rollback_proven"]


def held(service: str = "checkout") -> Blocker:
    return Blocker(code=BlockerCode.HELD, service=service,
                   message=f"{service}: the pinned release {NEW} is held since 2026-12-02 "
                   f"(holds/{service}-111111111111.yaml:1): release {NEW} failed; release "
                   f"the hold by a commit (reconcile release-hold {service} {NEW})")


def test_a_plan_pinning_a_held_digest_is_held_not_a_bare_no_go_and_clears_like_one() -> None:
    pinned_again = plan(B, blockers=(silent(), held()), proofs=(proof("checkout", False),))
    first = decide(Memory(), pinned_again, environment=ENV, applying=True)
    assert kinds(first) == ["held"]
    note = first.new[0]
    assert note.blockers[0].startswith("held: checkout")  # the hold first, then the rest
    assert "reconcile release-hold checkout" in note.summary
    assert note.services[0].service == "checkout" and note.services[0].digest == NEW
    assert first.memory.open_no_go[ENV] == note.key
    for _ in range(3):  # resyncs
        assert decide(first.memory, pinned_again, environment=ENV, applying=True).new == ()
    cleared = decide(first.memory, plan("e" * 40, proofs=(proof("checkout"),)),
                     environment=ENV, applying=True)
    assert kinds(cleared) == ["no_go_cleared", "converged"]
    # A NO-GO with no held blocker stays no_go.
    assert kinds(decide(Memory(), plan(blockers=(silent(),)), environment=ENV)) == ["no_go"]


def test_the_sinks_words_for_the_way_back() -> None:
    failed, failed_gate = failed_run()
    reverted, proven = decide_way_back(Memory(), failed, failed_gate, landed(),
                                       environment=ENV).new
    # CDEvents: one service.rolledback per reverted service, the artifact rolled back to,
    # and the revert in customData; the proof resolves the gate_failed incident.
    [(kind, subject)] = reverted.cdevent_types()
    assert kind == CDEVENT_ROLLEDBACK and subject is not None
    event = sinks.cdevent(reverted, kind, subject, "reconcile/prod")
    assert event["subject"]["content"]["artifactId"].endswith(OLD.replace(":", "%3A"))
    assert event["customData"]["revert"]["commit"] == REVERT
    assert event["customData"]["revert"]["failedCommit"] == A
    [(kind, subject)] = proven.cdevent_types()
    assert kind == CDEVENT_INCIDENT_RESOLVED
    resolved = sinks.cdevent(proven, kind, subject, "reconcile/prod")
    assert resolved["subject"]["id"] == f"{ENV}/{A}/gate_failed"
    c = change("checkout")
    gate_failed = decide(Memory(), plan(A, changes=(c,)), environment=ENV, report=ApplyReport(
        results=(sent(c),), gate=gate(proof("checkout", False)))).new[0]
    [(kind, subject)] = gate_failed.cdevent_types()
    assert kind == CDEVENT_INCIDENT_DETECTED
    assert sinks.cdevent(gate_failed, kind, subject, "s")["subject"]["id"] == \
        resolved["subject"]["id"]
    # GitHub: the failed commit stays a failure, its description naming the revert.
    assert reverted.spec.commit_state == "failure"
    assert REVERT[:12] in sinks.status_description(reverted)
    assert proven.spec.commit_state == "success"
    # Slack: the revert commit is a field.
    text = str(sinks.slack_message(reverted))
    assert "*Revert*" in text and REVERT[:12] in text


def test_every_new_kind_is_a_settings_value() -> None:
    from typing import get_args

    from reconciler.core.desired import NotificationKind

    assert {k.value for k in Kind} == set(get_args(NotificationKind))


def test_a_sink_subscribed_to_no_go_also_receives_held_its_refinement() -> None:
    from reconciler.core.notifying import subscribed

    assert subscribed(["no_go"]) == {Kind.NO_GO, Kind.HELD}
    assert subscribed(["gate_failed"]) == {Kind.GATE_FAILED}
    assert Kind.HELD in sinks._kinds(None, ["no_go", "reverted"])
