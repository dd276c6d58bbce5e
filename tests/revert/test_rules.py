"""The pure rules of issue 20: which gate failures are reverted (never a silent cluster),
which digest is the last proven one (journal proof ∧ control-plane acceptance, never a
guess), the revert's key, and the PR comment of a plan that pins a held digest."""

from __future__ import annotations

from reconciler.core import lastproven, reverts
from reconciler.core.codes import BlockerCode
from reconciler.core.desired import Hold
from reconciler.core.evidence import ClusterProof, Proof, ServiceProof, Why
from reconciler.core.live import ImageRelease, LiveService, ReadFailure
from reconciler.core.outcomes import GateReport
from reconciler.core.planning import plan
from reconciler.render import markdown
from tests.plan import builders as b

A = "sha256:" + "a" * 64
B = "sha256:" + "b" * 64
C = "sha256:" + "c" * 64


def proof(digest: str, *clusters: ClusterProof, rollout: Why | None = None) -> ServiceProof:
    proofs = {c.proof for c in clusters}
    verdict = Proof.NOT_CONVERGED if Proof.NOT_CONVERGED in proofs or rollout is \
        Why.ROLLOUT_FAILED else Proof.UNPROVEN if proofs - {Proof.CONVERGED} else Proof.CONVERGED
    return ServiceProof(service="checkout", app_id="checkout", digest=digest, proof=verdict,
                        rollout_why=rollout, rollout_detail="rollout r-1 is mismatched"
                        if rollout else "", clusters=clusters)


def gate(*proofs: ServiceProof) -> GateReport:
    return GateReport(attempts=2, waited_seconds=0.5, proofs=proofs)


OK = ClusterProof(cluster="sn1", proof=Proof.CONVERGED, running=B)
SILENT = ClusterProof(cluster="sn3", proof=Proof.UNPROVEN, why=Why.SILENT, detail="timed out")
REFUSED = ClusterProof(cluster="sn3", proof=Proof.NOT_CONVERGED, why=Why.OTHER_DIGEST,
                       detail=f"runs {A}, not {B}", running=A,
                       last_error="deployer refused the image")
LAGGING = ClusterProof(cluster="sn3", proof=Proof.NOT_CONVERGED, why=Why.OTHER_DIGEST,
                       detail=f"runs {A}, not {B}", running=A)


def test_only_a_stated_failure_is_reverted_never_silence_or_lag() -> None:
    assert reverts.failed(None) == {}
    assert reverts.failed(gate(proof(B, OK, SILENT))) == {}  # unknown is not failure
    assert reverts.failed(gate(proof(B, OK, LAGGING))) == {}  # still catching up
    assert reverts.failed(gate(proof(B, OK))) == {}  # converged
    assert set(reverts.failed(gate(proof(B, OK, REFUSED)))) == {"checkout"}
    terminal = proof(B, OK, SILENT, rollout=Why.ROLLOUT_FAILED)
    assert set(reverts.failed(gate(terminal))) == {"checkout"}
    lines = reverts.evidence_lines(proof(B, OK, REFUSED, rollout=Why.ROLLOUT_FAILED))
    assert lines[0] == "control plane: rollout r-1 is mismatched"
    assert lines[1].startswith("sn3: runs") and "deployer refused the image" in lines[1]


def release(digest: str, tag: str, accepted: int | None) -> ImageRelease:
    return ImageRelease(id=f"rel-{tag}", registry_host="r", repository="shop/checkout",
                        digest=digest, media_type="x", tags=(tag,), first_observed_at=1,
                        accepted_at=accepted)


def live(*releases: ImageRelease) -> LiveService:
    return LiveService(service_id="svc-checkout", name="checkout", releases=releases)


def fact(digest: str, at: int, run: str = "run-1") -> lastproven.ProvenFact:
    return lastproven.ProvenFact(service="checkout", digest=digest, at_ms=at,
                                 clusters=("sn1", "sn2", "sn3"), run=run, stage="gate")


def test_the_last_proven_release_needs_a_journal_proof_and_the_control_planes_acceptance(
        ) -> None:
    service = live(release(A, "v1", 10), release(B, "v2", 20), release(C, "v3", None))
    found = lastproven.last_proven("checkout", B, [fact(A, 100), fact(B, 200)], service)
    assert isinstance(found, lastproven.LastProven) and found.digest == A
    assert found.sources[0].startswith("journal: gate of run run-1") and "sn1, sn2, sn3" in \
        found.sources[0]
    assert found.sources[1].startswith("control plane: release rel-v1 (v1) accepted at")
    # The newest proof wins, unless held or never accepted.
    facts = [fact(A, 100), fact(C, 300)]
    assert isinstance(lastproven.last_proven("checkout", B, facts, service),
                      lastproven.LastProven)
    assert lastproven.last_proven("checkout", B, facts, service).digest == A  # type: ignore
    held = lastproven.last_proven("checkout", B, [fact(A, 100)], service, held={A})
    assert isinstance(held, lastproven.NotProven) and "is held" in held.reason


def test_no_proof_or_no_control_plane_is_said_never_guessed() -> None:
    service = live(release(A, "v1", 10), release(B, "v2", 20))
    none = lastproven.last_proven("checkout", B, [fact(B, 5)], service)
    assert isinstance(none, lastproven.NotProven) and "refusing to guess" in none.reason
    unread = lastproven.last_proven("checkout", B, [fact(A, 5)],
                                    ReadFailure(service_id="svc-checkout", reason="503"))
    assert isinstance(unread, lastproven.NotProven) and "503" in unread.reason
    unlisted = lastproven.last_proven("checkout", B, [fact(C, 5)], service)
    assert isinstance(unlisted, lastproven.NotProven) and "not a release" in unlisted.reason


def item(service: str, failed: str, to: str) -> reverts.Item:
    return reverts.Item(service=service, failed=failed, failed_tag="v2", to=to, to_tag="v1",
                        evidence=("sn3: refused",), sources=("journal: x", "control plane: y"),
                        path=f"services/{service}.yaml", hold_path=f"holds/{service}.yaml")


def test_the_key_is_the_revert_not_who_made_it_or_when() -> None:
    one = reverts.key([item("checkout", B, A), item("search", C, A)])
    assert one == reverts.key([item("search", C, A), item("checkout", B, A)])
    assert one != reverts.key([item("checkout", B, C)])
    text = reverts.message([item("checkout", B, A)], one,
                           newer={"checkout": "services/checkout.yaml now pins X"})
    assert text.endswith(f"{reverts.TRAILER}: {one}\n")
    assert B in text and A in text and "sn3: refused" in text and "now pins X" in text


def test_the_pr_comment_of_a_plan_pinning_a_held_digest_says_why_it_is_no_go() -> None:
    desired = b.reference_desired()
    checkout = desired.service_by_name("checkout")
    assert checkout is not None
    hold = Hold.model_validate({
        "apiVersion": "reconcile/v1", "kind": "Hold", "service": "checkout",
        "digest": checkout.release.digest, "reason": "sn3 refused it: pulled-digest-mismatch",
        "since": "2026-12-02T01:00:00Z"})
    made = plan(desired.model_copy(update={"holds": (hold,)}), b.reference_live())
    assert any(x.code is BlockerCode.HELD for x in made.blockers)
    comment = markdown.render(made)
    assert "NO-GO" in comment and "held" in comment
    assert "pulled-digest-mismatch" in comment and "release-hold checkout" in comment
