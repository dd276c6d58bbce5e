"""A fleet-scale snapshot stays lean without changing what it says: equal status bodies
parsed once per pass (``parsing.Shared``), one fields set per shape of model
(``core.live``), and a ``304`` recorded once per cluster (``MeshView.confirmed``) that
``core.freshness`` reads as the time the reused answers were said again."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.core import freshness
from reconciler.core.live import (
    ClusterRuntime,
    Confirmation,
    LiveSnapshot,
    MeshView,
    Observation,
    ObservationKind,
    ReadFailure,
)
from reconciler.shell.probing.parsing import Malformed, Shared, parse_status

T0 = 1_780_000_000_000


def body(app: str = "checkout", **runtime: Any) -> dict[str, Any]:
    return {"appId": app, "state": "ACTIVE", "runtime": {
        "image": "registry.sandbox.test/shop/checkout@sha256:aa", "runtimeState": "RUNNING",
        "replicas": 2, "resolvedDigest": "sha256:aa", "rolloutId": "r-1",
        "rolloutGeneration": 1,
        "replicaCounts": {"required": 2, "observed": 2, "healthy": 2, "verified": 2,
                          "failed": 0},
        "egress": [{"host": "api.example.net", "port": 443}], "egressDropped": [],
        **runtime}}


def test_equal_bodies_in_one_pass_are_one_value_and_equal_to_a_parse_without_sharing() -> None:
    shared = Shared()
    first = parse_status("checkout", body(), shared)
    again = parse_status("checkout", body(), shared)
    assert again is first
    assert first == parse_status("checkout", body())
    # Another app with the same counts and egress shares those parts, not the runtime.
    other = parse_status("cart", body("cart", resolvedDigest="sha256:bb"), shared)
    assert other is not first and other.resolved_digest == "sha256:bb"
    assert other.replica_counts is first.replica_counts
    assert other.egress is not None and first.egress is not None
    assert other.egress[0] is first.egress[0]


def test_sharing_never_conflates_values_a_parser_tells_apart() -> None:
    shared = Shared()
    good = parse_status("checkout", body(), shared)
    # ``True == 1`` in Python; as a replica count it is malformed, never the cached 2.
    with pytest.raises(Malformed):
        parse_status("checkout", body(replicas=True), shared)
    with pytest.raises(Malformed):
        parse_status("checkout", body(replicaCounts={"required": 2.0}), shared)
    # Another app's body is refused whatever was cached for an equal runtime.
    with pytest.raises(Malformed, match="another app"):
        parse_status("cart", body(), shared)
    # A control character is sanitized the same way on a cache hit.
    dirty = parse_status("checkout", body(lastError="boom\x1b[31m"), shared)
    assert dirty is parse_status("checkout", body(lastError="boom\x1b[31m"), shared)
    assert dirty.last_error is not None and "\x1b" not in dirty.last_error
    assert good.last_error is None


def test_models_share_their_fields_set_and_a_copy_does_not_leak_into_others() -> None:
    # (Observations are lean values, ``core.values``: they keep no fields set at all.)
    one = ReadFailure(service_id="svc-1", reason="timed out")
    two = ReadFailure(service_id="svc-2", reason="timed out")
    assert one.model_fields_set is two.model_fields_set
    copied = one.model_copy(update={"code": "SERVICE_NOT_FOUND"})
    assert "code" in copied.model_fields_set
    assert "code" not in one.model_fields_set and "code" not in two.model_fields_set
    assert one.model_dump() == two.model_dump() | {"service_id": "svc-1"}


def snapshot(observed_at: int, confirmed: tuple[Confirmation, ...]) -> LiveSnapshot:
    rows = tuple(Observation(cluster_id=c, address=a, kind=ObservationKind.ANSWERED,
                             runtime=ClusterRuntime(state="ACTIVE"), observed_at=observed_at)
                 for c, a in (("sn1", "127.0.0.2"), ("sn2", "127.0.0.3")))
    return LiveSnapshot(taken_at=T0, control_plane_url="https://cp", services={},
                        mesh=MeshView(gateway="gw", confirmed=confirmed),
                        observations={"checkout": rows})


def test_a_confirmation_makes_the_reused_answers_of_its_cluster_fresh_and_no_others() -> None:
    # Both answers were first said at T0; sn1 confirmed them (304) 70 s later.
    live = snapshot(T0, (Confirmation(cluster_id="sn1", address="127.0.0.2", at=T0 + 70_000),))
    expired = freshness.expire(live, now_ms=T0 + 75_000, max_age_ms=60_000,
                               horizon="two resyncs")
    kinds = [(o.cluster_id, o.kind) for o in expired.observations["checkout"]]
    assert kinds == [("sn1", ObservationKind.ANSWERED), ("sn2", ObservationKind.SILENT)]
    assert expired.observations["checkout"][1].reason == \
        "stale: observed 75 s ago, older than two resyncs (60 s)"


def test_a_confirmation_at_another_address_or_older_than_the_answer_counts_for_nothing(
        ) -> None:
    elsewhere = snapshot(T0, (Confirmation(cluster_id="sn1", address="127.0.0.9",
                                           at=T0 + 70_000),))
    expired = freshness.expire(elsewhere, now_ms=T0 + 75_000, max_age_ms=60_000)
    assert {o.kind for o in expired.observations["checkout"]} == {ObservationKind.SILENT}
    older = snapshot(T0 + 70_000, (Confirmation(cluster_id="sn1", address="127.0.0.2",
                                                at=T0),))
    confirmed = freshness.confirmations(older)
    assert [freshness.observed_at(o, confirmed) for o in older.observations["checkout"]] \
        == [T0 + 70_000, T0 + 70_000]
    assert freshness.expire(older, now_ms=T0 + 75_000, max_age_ms=60_000) is older


def test_confirmations_are_not_part_of_any_wire_format() -> None:
    live = snapshot(T0, (Confirmation(cluster_id="sn1", address="127.0.0.2", at=T0),))
    assert "confirmed" not in live.mesh.model_dump()
    assert "observed_at" not in live.observations["checkout"][0].model_dump()
