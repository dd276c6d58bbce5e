"""Issue 20: a plan that pins a held digest is NO-GO ``held``, naming the reason and where
the hold is; a hold on another digest, or another service's, changes nothing."""

from __future__ import annotations

import pytest

from reconciler.core import holds
from reconciler.core.codes import BlockerCode
from reconciler.core.desired import Hold, SourceRef
from reconciler.core.planning import plan
from reconciler.core.plans import Verdict
from reconciler.shell import loading, validating
from tests.plan import builders as b


def _hold(service: str, digest: str) -> Hold:
    return Hold.model_validate({"apiVersion": "reconcile/v1", "kind": "Hold",
                                "service": service, "digest": digest,
                                "reason": "sn3 refused it (pulled-digest-mismatch)",
                                "evidence": ["sn3: deployer refused the image"],
                                "since": "2026-12-02T01:00:00Z"})


def test_a_held_pin_is_no_go_held_naming_why_and_where() -> None:
    desired = b.reference_desired()
    checkout = desired.service_by_name("checkout")
    assert checkout is not None
    pinned = checkout.release.digest
    desired = desired.model_copy(update={
        "holds": (_hold("checkout", pinned),),
        "sources": {**desired.sources,
                    f"Hold/checkout/{pinned}": SourceRef(path="holds/checkout.yaml", line=1)}})
    made = plan(desired, b.reference_live())
    assert made.verdict is Verdict.NO_GO
    [held] = [x for x in made.blockers if x.code is BlockerCode.HELD]
    assert held.service == "checkout" and pinned in held.message
    assert "holds/checkout.yaml:1" in held.message and "pulled-digest-mismatch" in held.message
    assert f"reconcile release-hold checkout {pinned}" in held.message


@pytest.mark.parametrize("service,digest", [("checkout", "sha256:" + "0" * 64),
                                            ("search", None)])
def test_a_hold_on_another_release_changes_nothing(service: str, digest: str | None) -> None:
    desired = b.reference_desired()
    base = plan(desired, b.reference_live())
    svc = desired.service_by_name(service)
    assert svc is not None
    other = digest or ("sha256:" + "1" * 64)
    held = desired.model_copy(update={"holds": (_hold(service, other),)})
    assert not holds.blockers(held)
    again = plan(held, b.reference_live())
    assert again.verdict is base.verdict and again.blockers == base.blockers


def test_the_document_revert_writes_loads_as_a_hold() -> None:
    text = holds.document("checkout", "sha256:" + "a" * 64, 'refused: "stale" #1',
                          ["sn3: lastError: x: y", "rollout r-1 is mismatched"],
                          "2026-12-02T01:00:00Z")
    assert loading.load_bytes("h.yaml", text.encode()).documents[0].value["reason"] == \
        'refused: "stale" #1'
    loaded = loading.load_bytes("holds/x.yaml", text.encode())
    assert not loaded.diagnostics
    model, problems = validating.validate_document(loaded.documents[0])
    assert not problems and isinstance(model, Hold)
    assert model.evidence == ("sn3: lastError: x: y", "rollout r-1 is mismatched")


def test_status_marks_a_held_pin_in_text_json_and_markdown() -> None:
    from reconciler.core import status
    from reconciler.render import status as status_view

    desired = b.reference_desired()
    checkout = desired.service_by_name("checkout")
    assert checkout is not None
    pinned = checkout.release.digest
    held = desired.model_copy(update={"holds": (_hold("checkout", pinned),)})
    made = status.assemble(0, ["prod"], {"prod": status.rows(
        "prod", held, b.reference_live(), now_ms=0)})
    rows = {r.service: r for r in made.rows}
    assert rows["checkout"].held is not None and "pulled-digest-mismatch" in rows["checkout"].held
    assert all(r.held is None for name, r in rows.items() if name != "checkout")
    text = status_view.text(made)
    assert "HELD" in text and "reconcile release-hold" in text
    document = status_view.document(made)
    assert [r["service"] for r in document["services"] if r["held"]] == ["checkout"]
    assert "HELD" in status_view.markdown(made)
