"""The lean values (``core.values``: observations, runtimes, cluster proofs) in a saved plan:
written and read back exactly as the models were (strict, unknown fields refused,
``observed_at`` never on the wire, ``routes`` left out when None), and a saved plan
edited to hold something else in them is refused with an error naming where."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from reconciler.core.evidence import ClusterProof, Proof, Why
from reconciler.core.live import ClusterRuntime, Observation, ObservationKind
from reconciler.core.planning import plan
from reconciler.core.plans import Plan
from reconciler.core.routing import GatewayRoute, RouteOwnership
from reconciler.render import jsonplan
from tests.plan import builders as b

T0 = 1_790_000_000_000


def mixed_plan() -> Plan:
    """The reference plan with every shape of observation: answered (with and without
    routes, with ``observed_at``), no record, silent, and an unexpected address."""
    live = b.reference_live()
    rows = list(live.observations["checkout"])
    first = rows[0]
    assert first.runtime is not None
    route = GatewayRoute(ownership=RouteOwnership(app_id="checkout",
                                                  hostname="shop.example.test"),
                         name="shop", priority=10)
    rows[0] = first.model_copy(update={
        "observed_at": T0, "runtime": first.runtime.model_copy(update={"routes": (route,),
                                                                      "last_error": "boom"})})
    rows[1] = Observation(cluster_id=rows[1].cluster_id, address=rows[1].address,
                          kind=ObservationKind.NO_RECORD, observed_at=T0)
    rows[2] = Observation(cluster_id=rows[2].cluster_id, kind=ObservationKind.SILENT,
                          reason="timed out")
    rows.append(Observation(cluster_id="127.0.0.9", address="127.0.0.9",
                            kind=ObservationKind.ANSWERED, runtime=first.runtime))
    observations = {**live.observations, "checkout": tuple(rows)}
    return plan(b.reference_desired(), live.model_copy(update={"observations": observations}))


def test_a_saved_plan_reads_back_its_observations_and_proofs_as_written() -> None:
    p = mixed_plan()
    text = jsonplan.dumps(p)
    back = jsonplan.from_wire(json.loads(text))
    assert jsonplan.dumps(back) == text
    # The values come back equal, but for the time of each answer, never saved.
    assert back.proofs == p.proofs
    stripped = tuple(e.model_copy(update={"observations": tuple(
        o.model_copy(update={"observed_at": None}) for o in e.observations)})
        for e in p.evidence)
    assert back.evidence == stripped and back != p
    checkout = next(e for e in back.evidence if e.service == "checkout")
    assert [o.kind for o in checkout.observations][:3] == [
        ObservationKind.ANSWERED, ObservationKind.NO_RECORD, ObservationKind.SILENT]
    assert all(type(o) is Observation for o in checkout.observations)
    assert all(type(c) is ClusterProof for proof in back.proofs for c in proof.clusters)
    # On the wire: no observed_at anywhere, routes only where a cluster said them.
    data = json.loads(text)
    wire_rows = next(e for e in data["evidence"] if e["service"] == "checkout")["observations"]
    assert all("observed_at" not in row for row in wire_rows)
    assert [("routes" in (row["runtime"] or {})) for row in wire_rows] == \
        [True, False, False, False]
    assert wire_rows[0]["runtime"]["routes"][0]["name"] == "shop"


def resealed(data: dict[str, Any]) -> dict[str, Any]:
    """An edited saved plan with its digest made to match: only the models can refuse it."""
    return {**data, "content_digest": jsonplan.content_digest(data)}


def edited(edit: Any) -> dict[str, Any]:
    data = json.loads(jsonplan.dumps(mixed_plan()))
    changed = copy.deepcopy(data)
    edit(changed)
    return resealed(changed)


def first_row(data: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = data["evidence"][0]["observations"][0]
    return row


def first_cluster(data: dict[str, Any]) -> dict[str, Any]:
    cluster: dict[str, Any] = data["proofs"][0]["clusters"][0]
    return cluster


@pytest.mark.parametrize(("edit", "where", "what"), [
    (lambda d: first_row(d).update(colour="red"), "evidence.0.observations.0.colour",
     "Unexpected keyword argument"),
    (lambda d: first_row(d).update(cluster_id=7), "evidence.0.observations.0.cluster_id",
     "valid string"),
    (lambda d: first_row(d).update(kind="maybe"), "evidence.0.observations.0.kind",
     "'answered', 'no_record' or 'silent'"),
    (lambda d: first_row(d)["runtime"].update(replicas="2"),
     "evidence.0.observations.0.runtime.replicas", "valid integer"),
    (lambda d: first_row(d)["runtime"].update(egress_dropped=[{"host": "x"}]),
     "evidence.0.observations.0.runtime.egress_dropped.0.port", "Field required"),
    (lambda d: first_row(d).pop("kind"), "evidence.0.observations.0.kind", "required"),
    (lambda d: first_cluster(d).update(verdict="fine"), "proofs.0.clusters.0.verdict",
     "Unexpected keyword argument"),
    (lambda d: first_cluster(d).update(proof="probably"), "proofs.0.clusters.0.proof",
     "'converged', 'not_converged' or 'unproven'"),
    (lambda d: first_cluster(d).update(running=["sha256:aa"]), "proofs.0.clusters.0.running",
     "valid string"),
])
def test_a_hostile_saved_plan_is_refused_naming_the_field(edit: Any, where: str,
                                                          what: str) -> None:
    with pytest.raises(jsonplan.WireError) as refused:
        jsonplan.from_wire(edited(edit))
    message = str(refused.value)
    assert message.startswith(f"{where}: "), message
    assert what in message, message


def test_lean_values_hold_no_dict_and_copy_without_touching_the_original() -> None:
    runtime = ClusterRuntime(state="ACTIVE", resolved_digest="sha256:aa")
    one = Observation(cluster_id="sn1", kind=ObservationKind.ANSWERED, runtime=runtime,
                      observed_at=T0)
    proof = ClusterProof(cluster="sn1", proof=Proof.NOT_CONVERGED, why=Why.SILENT)
    for value, field in ((runtime, "state"), (one, "cluster_id"), (proof, "cluster")):
        assert not hasattr(value, "__dict__")
        with pytest.raises(AttributeError):  # frozen
            setattr(value, field, "sn9")
    copied = one.model_copy(update={"reason": "r"})
    assert (copied.reason, one.reason) == ("r", None) and copied.runtime is runtime
    assert one.model_dump() == {"cluster_id": "sn1", "address": None, "kind": "answered",
                                "runtime": runtime.model_dump(), "reason": None}
    assert "routes" not in runtime.model_dump()
    assert proof.model_dump(mode="json")["why"] == "silent"
    assert Observation.model_validate(one) == one
