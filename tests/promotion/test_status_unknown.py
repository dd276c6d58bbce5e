"""``reconcile status``'s next-promotion column when the previous environment cannot be
read: unknown, said with the environment it could not read -- never ``-``, which means
"nothing to promote"."""

from __future__ import annotations

from reconciler.core import promotion
from reconciler.core import status as service_status
from reconciler.core.desired import DesiredState
from reconciler.core.evidence import Proof
from reconciler.core.pipeline import Environment
from reconciler.render import status as status_view


def row(nxt: service_status.NextPromotion | None) -> service_status.ServiceRow:
    return service_status.ServiceRow(
        environment="prod", service="checkout", pinned="sha256:" + "a" * 64, tag="v1",
        proof=Proof.CONVERGED, proven=3, expected=3, since=None, reasons=(), clusters=(),
        next=nxt)


def test_an_unreadable_upstream_makes_the_next_promotion_unknown_not_nothing() -> None:
    unreadable = promotion.Upstream(name="staging", error="control plane: connection refused")
    nxt = service_status._next("checkout", "sha256:" + "a" * 64,
                               Environment(name="prod", path="environments/prod"),
                               unreadable, (), 0, DesiredState.model_construct(holds=()))
    assert nxt is not None and not nxt.ready
    assert nxt.unknown == "staging unreadable" and nxt.digest is None
    text = status_view.text(service_status.assemble(0, ["prod"], {"prod": (row(nxt),)}))
    assert "unknown: staging unreadable" in text
    [doc] = status_view.document(service_status.assemble(0, ["prod"],
                                                         {"prod": (row(nxt),)}))["services"]
    assert doc["next"]["unknown"] == "staging unreadable" and not doc["next"]["ready"]


def test_nothing_to_promote_is_still_a_dash() -> None:
    text = status_view.text(service_status.assemble(0, ["prod"], {"prod": (row(None),)}))
    assert "unknown" not in text
