"""The apply view never words success beyond what the judge proved."""

from __future__ import annotations

from reconciler.core.events import NothingToDo
from reconciler.core.evidence import ClusterProof, Proof, ServiceProof
from reconciler.core.outcomes import ApplyReport, ChangeResult, GateReport, Outcome
from reconciler.core.planning import plan
from reconciler.render import applyview
from tests.plan.builders import reference_desired, reference_live


def _report(refused: bool) -> ApplyReport:
    change = plan(reference_desired(), reference_live()).changes[0]
    proof = ServiceProof(service="search", app_id="search", digest="sha256:" + "1" * 64,
                         proof=Proof.CONVERGED,
                         clusters=(ClusterProof(cluster="sn1", proof=Proof.CONVERGED),))
    result = ChangeResult(change=change, outcome=Outcome.REFUSED if refused
                          else Outcome.APPLIED, detail="someone else changed it")
    return ApplyReport(results=(result,), gate=GateReport(attempts=1, waited_seconds=0.1,
                                                          proofs=(proof,)))


def test_converged_is_not_said_when_a_service_was_left_out_of_the_gate() -> None:
    out, err = applyview.summary(_report(refused=True))
    assert not any(line.startswith("Converged") for line in out), out
    assert any("not gated" in line for line in out), out
    assert any("refused" in line for line in err), err
    out, _ = applyview.summary(_report(refused=False))
    assert any(line.startswith("Converged") for line in out), out


def test_no_changes_under_only_names_its_scope() -> None:
    [line] = applyview.text(NothingToDo(services=("checkout",), selected=True))
    assert "selected service(s) (checkout)" in line and "outside --only" in line
    [line] = applyview.text(NothingToDo(services=("a", "b"), selected=False))
    assert "every service" in line
