"""Risks: a GO plan says first what apply is already known to meet (issue 18, item 3).

A risk is derived from the one judge's findings (``core.evidence``: a cluster that *states*
why it does not converge, a rollout the control plane reports failed) on a service
apply will gate; it never changes the verdict, and silence is never one. Pure: snapshots
built in memory, no network.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from reconciler.core import evidence
from reconciler.core.codes import RiskCode
from reconciler.core.events import Finished
from reconciler.core.live import LiveSnapshot, Observation, ObservationKind
from reconciler.core.outcomes import ApplyReport, GateReport
from reconciler.core.planning import Provenance, plan, risks_of
from reconciler.core.plans import Plan, Verdict, restrict
from reconciler.core.review import Review
from reconciler.render import applyview, jsonplan, markdown, text
from tests.plan import builders as b

SCHEMA = json.loads((Path(__file__).parents[2] / "schemas" / "plan.schema.json").read_text())
OLD = b.digest("checkout", "v2.3.0")
CURRENT = b.digest("checkout", "v2.4.0")  # the control plane's current rollout: what the repo pins
REFUSED = (f"build-attestation digest MISMATCH: attestation pins {OLD} but rollout "
           f"ro-checkout-4 requests {CURRENT}; deployer refused the image (stale attestation)")
#: the sandbox's reference live state: checkout's current rollout is v2.3.0 (the repo pins v2.4.0)
REPLACED = b.digest("checkout", "v2.3.0")


def _with(live: LiveSnapshot, app: str, cluster: str, **runtime: Any) -> LiveSnapshot:
    svc = live.services[f"svc-{app}"]
    tag, gen = runtime.pop("tag", b.CURRENT[app][0]), b.CURRENT[app][1]
    rows = tuple(o if o.cluster_id != cluster else Observation(
        cluster_id=cluster, address=b.ADDRESSES[cluster], kind=ObservationKind.ANSWERED,
        runtime=b.runtime(app, tag, gen, egress=svc.egress or (), **runtime))
        for o in live.observations[app])
    return live.model_copy(update={"observations": {**live.observations, app: rows}})


def _status(live: LiveSnapshot, app: str, status: str, reason: str | None) -> LiveSnapshot:
    svc = live.services[f"svc-{app}"]
    assert svc.rollout_status is not None
    svc = svc.model_copy(update={"rollout_status": svc.rollout_status.model_copy(
        update={"status": status, "mismatch_reason": reason})})
    return live.model_copy(update={"services": {**live.services, f"svc-{app}": svc}})


def _silent(live: LiveSnapshot, app: str, cluster: str) -> LiveSnapshot:
    rows = tuple(o if o.cluster_id != cluster else Observation(
        cluster_id=cluster, kind=ObservationKind.SILENT, reason="timed out after 2s")
        for o in live.observations[app])
    return live.model_copy(update={"observations": {**live.observations, app: rows}})


def _pinned_checkout(live: LiveSnapshot) -> LiveSnapshot:
    """checkout already rolled out to v2.4.0, the digest the reference repo pins."""
    svc = b.live_service("checkout", [("v2.3.0", 100, 110), ("v2.4.0", 200, 210)], "v2.4.0", 4,
                         [("api.stripe.com", 443), ("hooks.slack.com", 443)], 2)
    rows = tuple(Observation(cluster_id=c, address=b.ADDRESSES[c], kind=ObservationKind.ANSWERED,
                             runtime=b.runtime("checkout", "v2.4.0", 4, egress=svc.egress or ()))
                 for c in b.CLUSTERS)
    return live.model_copy(update={"services": {**live.services, "svc-checkout": svc},
                                   "observations": {**live.observations, "checkout": rows}})


def _refusing_sn3(error: str = REFUSED) -> LiveSnapshot:
    """sn3 kept v2.3.0 and says why; the control plane's rollout to v2.4.0 -- the digest
    the repo pins -- mismatched: what apply of this plan will meet."""
    live = _with(_pinned_checkout(b.reference_live()), "checkout", "sn3", tag="v2.3.0",
                 last_error=error)
    return _status(live, "checkout", "mismatched", "pulled-digest-mismatch")


def _refusing_the_replaced_digest() -> LiveSnapshot:
    """sn3 refused v2.3.0 (the control plane's current rollout); the repo pins v2.4.0."""
    error = (f"build-attestation digest MISMATCH: attestation pins {b.digest('checkout', 'v2.2.0')}"
             f" but rollout ro-checkout-3 requests {REPLACED}; deployer refused the image")
    live = _with(b.reference_live(), "checkout", "sn3", tag="v2.2.0", last_error=error)
    return _status(live, "checkout", "mismatched", "pulled-digest-mismatch")


def _plan(live: LiveSnapshot) -> Plan:
    return plan(b.reference_desired(), live, Provenance(commit="9" * 40))


def test_a_promotion_over_a_cluster_that_refused_the_last_digest_is_go_with_that_risk() -> None:
    p = _plan(_refusing_sn3())
    assert p.verdict is Verdict.GO and not p.blockers
    assert "checkout" in p.converging  # nothing to send: apply gates it
    (risk,) = p.risks
    assert (risk.code, risk.service, risk.cluster, risk.digest, risk.running) == (
        RiskCode.CLUSTER_REFUSED_RELEASE, "checkout", "sn3", CURRENT, OLD)
    assert risk.reason == REFUSED
    assert risk.message == risk.sentence()
    assert risk.message.startswith(f"sn3 refused the last digest for checkout ({CURRENT[:19]}: ")
    assert "deployer refused the image" in risk.message
    assert risk.message.endswith("apply will not prove it until sn3 recovers")
    # the sentence names the digest once, shortened; the cluster's own copies are shortened
    assert OLD not in risk.message and CURRENT not in risk.message


def test_the_risk_is_the_first_line_of_text_and_markdown_and_in_the_json() -> None:
    p = _plan(_refusing_sn3())
    first = text.render(p).splitlines()[0]
    assert first == f"GO — {p.risks[0].message}"
    head = markdown.render(p).splitlines()[0]
    # the headline stays short: who, what, which digest; what sn3 said is in the Risks list
    assert head.startswith("## reconcile plan: **GO** — ⚠️ `sn3` refused the last digest for "
                           f"`checkout` (`{CURRENT[:19]}`); apply will not prove it until "
                           "`sn3` recovers · "), head
    assert "deployer refused the image" in markdown.render(p).split("### ⚠️ Risks")[1]
    data = json.loads(jsonplan.dumps(p))
    jsonschema.validate(data, SCHEMA)
    assert data["format_version"] == jsonplan.FORMAT_VERSION
    assert [r["cluster"] for r in data["risks"]] == ["sn3"]
    assert jsonplan.from_wire(data) == p  # a saved plan keeps its risks


def test_several_risks_say_the_first_and_count_the_rest() -> None:
    live = _with(_refusing_sn3(), "checkout", "sn1", tag="v2.2.0", last_error="disk full")
    live = _with(live, "notifications", "sn2", runtime_state="FAILED",
                 last_error="OOMKilled", replica_counts=None)
    p = _plan(live)
    assert [(r.service, r.cluster) for r in p.risks] == [
        ("checkout", "sn1"), ("checkout", "sn3"), ("notifications", "sn2")]
    assert text.render(p).splitlines()[0].endswith("until sn1 recovers (+2 more risks)")
    assert "(+2 more risks) · " in markdown.render(p).splitlines()[0]
    assert p.risks[2].code is RiskCode.CLUSTER_FAILING  # it runs the digest and fails


def test_a_silent_cluster_is_a_blocker_never_a_risk() -> None:
    p = _plan(_silent(_status(_pinned_checkout(b.reference_live()), "checkout", "mismatched",
                              None), "checkout", "sn3"))
    assert p.verdict is Verdict.NO_GO
    assert [r.code for r in p.risks] == [RiskCode.ROLLOUT_FAILED]  # the control plane said it
    quiet = _plan(_silent(b.reference_live(), "checkout", "sn3"))
    assert quiet.risks == () and quiet.verdict is Verdict.NO_GO


def test_a_cluster_catching_up_or_one_that_converged_with_an_old_error_is_no_risk() -> None:
    lagging = _status(_with(_pinned_checkout(b.reference_live()), "checkout", "sn3",
                            tag="v2.3.0"), "checkout", "deploying", None)
    assert _plan(lagging).risks == ()
    healed = _with(_pinned_checkout(b.reference_live()), "checkout", "sn3", tag="v2.4.0",
                   last_error="restarted once")
    assert _plan(healed).risks == ()


def test_a_risk_is_only_on_a_service_apply_gates() -> None:
    # notifications has no change, but the judge does not prove it converged: apply
    # gates it, so sn1's refusal is a risk; --only without it leaves the risk out.
    live = _with(b.reference_live(), "notifications", "sn1", tag="v0.7.9",
                 last_error="deployer refused the image")
    p = _plan(live)
    assert "notifications" in p.converging
    assert [(r.service, r.cluster) for r in p.risks] == [("notifications", "sn1")]
    assert restrict(p, frozenset({"checkout"})).risks == ()


def test_a_rollout_reported_failed_with_no_cluster_saying_why_is_one_risk() -> None:
    live = _with(_status(_pinned_checkout(b.reference_live()), "checkout", "failed",
                         "replica-failed"), "checkout", "sn2", tag="v2.3.0")
    (risk,) = _plan(live).risks
    assert (risk.code, risk.cluster) == (RiskCode.ROLLOUT_FAILED, None)
    assert "replica-failed" in risk.message and "ro-checkout-4" in risk.message


def test_what_a_cluster_says_is_sanitized_in_every_view() -> None:
    p = _plan(_refusing_sn3("\x1b]8;;https://evil.example\x07click\x1b]8;;\x07 refused"))
    for view in (text.render(p).splitlines()[0], markdown.render(p).splitlines()[0],
                 jsonplan.dumps(p)):
        assert "\x1b" not in view and "\x07" not in view


def test_the_judge_owns_both_facts_a_risk_and_the_gate_read() -> None:
    target = evidence.Target(service="checkout", app_id="checkout", digest=CURRENT)
    live = _refusing_sn3()
    proof = evidence.judge(target, live.services["svc-checkout"], b.CLUSTERS,
                           live.observations["checkout"])
    assert proof.terminal and [c.cluster for c in proof.stated()] == ["sn3"]
    assert [r.cluster for r in risks_of(proof)] == ["sn3"]
    deploying = _status(live, "checkout", "deploying", None)
    proof = evidence.judge(target, deploying.services["svc-checkout"], b.CLUSTERS,
                           deploying.observations["checkout"])
    assert not proof.terminal


@pytest.mark.parametrize("attempts", [1, 2])
def test_a_stopped_gate_names_the_cluster_each_digest_once_and_the_reason(attempts: int) -> None:
    target = evidence.Target(service="checkout", app_id="checkout", digest=CURRENT)
    live = _refusing_sn3()
    proof = evidence.judge(target, live.services["svc-checkout"], b.CLUSTERS,
                           live.observations["checkout"])
    gate = GateReport(attempts=attempts, waited_seconds=0.4 * attempts, proofs=(proof,))
    assert gate.stopped() == (proof,)
    _, err = applyview.summary(ApplyReport(results=(), gate=gate))
    joined = "\n".join(err)
    assert joined.startswith(f"error: convergence gate stopped after {attempts} poll(s)")
    assert "mismatched (pulled-digest-mismatch)" in err[0]
    (line,) = [x for x in err if "checkout on sn3" in x]
    assert "DIVERGED" in line and "deployer refused the image" in line
    assert joined.count(CURRENT) == 1 and joined.count(OLD) == 1
    finished = json.loads(applyview.json_line(Finished(report=ApplyReport(results=(),
                                                                           gate=gate))))
    assert finished["stopped"] == ["checkout"] and finished["converged"] is False


def test_a_stopped_gate_names_the_quiet_clusters_once_without_their_digests() -> None:
    target = evidence.Target(service="checkout", app_id="checkout", digest=CURRENT)
    live = _with(_refusing_sn3(), "checkout", "sn1", tag="v2.2.0")  # lagging, says nothing
    proof = evidence.judge(target, live.services["svc-checkout"], b.CLUSTERS,
                           live.observations["checkout"])
    _, err = applyview.summary(ApplyReport(results=(), gate=GateReport(
        attempts=1, waited_seconds=0.1, proofs=(proof,))))
    assert [x for x in err if "checkout on" in x] == [x for x in err if "on sn3" in x]
    assert err[-1].endswith("(said nothing, not polled again): sn1")
    assert "\n".join(err).count(CURRENT) == 1


def test_a_refusal_of_the_digest_the_plan_replaces_is_drift_never_a_risk() -> None:
    # sn3 refused v2.3.0, the control plane's current rollout; the repo moves checkout on
    # to v2.4.0. Nothing is known about v2.4.0: no risk, no "the gate will fail".
    p = _plan(_refusing_the_replaced_digest())
    assert any(c.service == "checkout" and c.action.value == "promote" for c in p.changes)
    assert p.risks == () and p.risk_groups() == ()
    assert ("cluster_diverged", "sn3") in [(d.code.value, d.cluster) for d in p.drift
                                           if d.service == "checkout"]
    assert "deployer refused the image" in next(d.message for d in p.drift if d.cluster == "sn3")
    md = markdown.render(p)
    assert "Risks" not in md and "exit 15" not in md and "will not prove" not in md
    assert md.splitlines()[0].startswith("## reconcile plan: **GO** — promotes `checkout`"), md
    out = text.render(p)
    assert "Risks" not in out and "will not prove" not in out
    assert json.loads(jsonplan.dumps(p))["risks"] == []


def test_a_rollout_failed_for_the_digest_the_plan_replaces_is_no_risk() -> None:
    p = _plan(_status(b.reference_live(), "checkout", "failed", "replica-failed"))
    assert p.risks == ()


def test_one_cluster_failing_many_services_is_one_risk_said_once() -> None:
    oom = "container exited with code 137 (OOMKilled); 0/2 replicas healthy, restarting in 30s"
    live = _pinned_checkout(b.reference_live())
    for app in ("checkout", "notifications", "search"):
        live = _with(live, app, "sn2", tag=b.CURRENT[app][0] if app != "checkout" else "v2.4.0",
                     runtime_state="FAILED", last_error=oom)
    p = _plan(live)
    assert len(p.risks) == 3  # one per service in the saved plan
    (group,) = p.risk_groups()
    assert group.first.cluster == "sn2" and group.first.code is RiskCode.CLUSTER_FAILING
    # the service the plan changes (search: egress and grant) comes first
    assert group.services == ("search", "checkout", "notifications")
    head = text.render(p).splitlines()[0]
    assert head.startswith("GO — sn2 fails to run search (sha256:"), head
    assert "checkout (sha256:" in head and "notifications (sha256:" in head
    assert "apply will not prove them until sn2 recovers" in head and "more risk" not in head
    risks = markdown.render(p).split("### ⚠️ Risks")[1].split("###")[0]
    assert risks.count("\n- ⚠️") == 1 and risks.count("OOMKilled") == 1, risks
    listed = text.render(p).split("Risks (")[1].split("\n\n")[0]
    assert listed.count("OOMKilled") == 1, listed


def test_the_headline_names_the_risk_of_what_the_pull_request_touches_first() -> None:
    live = _with(_refusing_sn3(), "notifications", "sn1", tag="v0.7.9",
                 last_error="deployer refused the image")
    p = _plan(live)
    assert [r.service for r in p.risks] == ["checkout", "notifications"]
    reviewed = p.model_copy(update={"review": Review(
        base_ref="main", base_verdict="go", origins={}, touched=("notifications",))})
    assert reviewed.risk_line() is not None
    assert reviewed.risk_line().startswith("sn1 refused the last digest for notifications")
    assert markdown.render(reviewed).splitlines()[0].startswith(
        "## reconcile plan: **GO** — ⚠️ `sn1` refused the last digest for `notifications`")
