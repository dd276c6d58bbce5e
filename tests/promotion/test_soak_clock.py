"""The soak clock (``core.promotion.soak_clock`` and ``gate``): continuous proof only.

The clock counts from the latest of the control plane's rollout success and every
expected cluster's own ``healthySince``; a time that cannot be true is unknown, and a
cluster that does not say since when it has run the digest healthily leaves the soak
unmeasured: the promotion waits and names that cluster and the field."""

from __future__ import annotations

import pytest

from reconciler.core.codes import BlockerCode
from reconciler.core.live import (
    ClusterRuntime,
    ImageRelease,
    LiveService,
    Observation,
    ObservationKind,
    ReplicaCounts,
    RolloutPlan,
    RolloutStatus,
)
from reconciler.core.pipeline import Environment
from reconciler.core.promotion import Upstream, UpstreamService, gate, soak_clock

DIGEST = "sha256:" + "b1" * 32
CREATED = 1_700_000_000_000  # the rollout's creation (ms)
SUCCEEDED = CREATED + 30_000  # its success, as the control plane says
NOW = CREATED + 600_000
CLUSTERS = ("sn1", "sn2", "sn3")


def live(updated_at: int | None = SUCCEEDED, *, created_at: int = CREATED,
         first_observed: int = CREATED - 60_000,
         last_promoted: int | None = None) -> LiveService:
    return LiveService(
        service_id="svc-checkout", name="checkout",
        deployment=RolloutPlan(rollout_id="r7", rollout_generation=7, release_id="rel",
                               requested_digest=DIGEST, mode="promotion",
                               target_cluster_ids=CLUSTERS, required_replica_count=4,
                               created_at=created_at),
        rollout_status=RolloutStatus(rollout_id="r7", rollout_generation=7,
                                     expected_digest=DIGEST, status="succeeded", required=12,
                                     observed=12, healthy=12, verified=12,
                                     updated_at=updated_at),
        releases=(ImageRelease(id="rel", registry_host="registry.example.net",
                               repository="shop/checkout", digest=DIGEST,
                               media_type="application/vnd.oci.image.index.v1+json",
                               tags=("v2.4.0",), first_observed_at=first_observed,
                               last_promoted_at=last_promoted),))


RUNTIME = ClusterRuntime(state="ACTIVE", runtime_state="RUNNING", replicas=4,
                         resolved_digest=DIGEST, rollout_id="r7", rollout_generation=7,
                         replica_counts=ReplicaCounts(required=4, observed=4, healthy=4,
                                                      verified=4))


def observations(**since: int | None) -> tuple[Observation, ...]:
    """Every cluster proving the digest, healthy since ``since[cluster]`` (default: a
    minute before the rollout succeeded)."""
    return tuple(Observation(cluster_id=c, address="127.0.0.1", kind=ObservationKind.ANSWERED,
                             runtime=RUNTIME, healthy_since=since.get(c, SUCCEEDED - 60_000))
                 for c in CLUSTERS)


def upstream(state: LiveService, seen: tuple[Observation, ...]) -> Upstream:
    return Upstream(name="staging", services={"checkout": UpstreamService(
        app_id="checkout", egress=None, live=state, expected=CLUSTERS, observations=seen)})


PROD = Environment(name="prod", path="prod", soak="5m")


def test_clusters_healthy_since_before_the_success_leave_the_control_plane_s_time() -> None:
    clock = soak_clock(live(), DIGEST, CLUSTERS, observations(), NOW)
    assert clock.since == SUCCEEDED
    assert "control plane's rollout success" in clock.source
    assert "updatedAt" in clock.source


def test_a_cluster_healthy_since_after_the_success_moves_the_clock_and_is_named() -> None:
    back = NOW - 100_000  # sn2 was down, and came back then
    clock = soak_clock(live(), DIGEST, CLUSTERS, observations(sn2=back), NOW)
    assert clock.since == back
    assert clock.source == "by every cluster's healthySince (sn2 the latest)"
    found = gate("checkout", DIGEST, PROD, upstream(live(), observations(sn2=back)), (), NOW)
    [blocker] = found.blockers
    assert blocker.code is BlockerCode.NOT_SOAKED
    assert found.eligible_at == back + 300_000  # not SUCCEEDED + 300_000, which has passed
    assert "sn2 the latest" in blocker.message and "1m 40s of 5m" in blocker.message
    assert "eligible" in blocker.message


def test_soaked_when_every_cluster_has_been_healthy_for_the_soak() -> None:
    found = gate("checkout", DIGEST, PROD, upstream(live(), observations()), (), NOW)
    assert found.ready and found.since == SUCCEEDED
    assert found.source is not None and "control plane" in found.source


@pytest.mark.parametrize(("updated_at", "said"), [
    (-1, "updatedAt is -1, not a time"),
    (0, "updatedAt is 0, not a time"),
    (NOW + 1, "is in the future"),
    (CREATED - 1, "is before the rollout was created"),
])
def test_an_impossible_control_plane_time_is_unknown_never_soaked(updated_at: int,
                                                                   said: str) -> None:
    clock = soak_clock(live(updated_at), DIGEST, CLUSTERS, observations(sn1=1), NOW)
    assert clock.since is None and said in clock.source
    found = gate("checkout", DIGEST, PROD, upstream(live(updated_at), observations(sn1=1)),
                 (), NOW)
    [blocker] = found.blockers
    assert blocker.code is BlockerCode.NOT_SOAKED and said in blocker.message
    assert found.eligible_at is None and found.since is None


def test_without_a_rollout_creation_time_the_release_s_creation_bounds_it() -> None:
    early = CREATED - 120_000  # before the release was first observed
    state = live(early, created_at=0)
    clock = soak_clock(state, DIGEST, CLUSTERS, observations(), NOW)
    assert clock.since is None and "before the rollout was created" in clock.source


def test_last_promoted_at_counts_only_when_it_could_be_true() -> None:
    assert soak_clock(live(None, last_promoted=SUCCEEDED), DIGEST, CLUSTERS, observations(),
                      NOW).since == SUCCEEDED
    clock = soak_clock(live(None, last_promoted=-5), DIGEST, CLUSTERS, observations(), NOW)
    assert clock.since is None and "lastPromotedAt is -5" in clock.source


def test_a_cluster_that_does_not_state_healthy_since_makes_the_promotion_wait() -> None:
    seen = observations(sn3=None)
    found = gate("checkout", DIGEST, PROD, upstream(live(), seen), (), NOW)
    [blocker] = found.blockers
    assert blocker.code is BlockerCode.NOT_SOAKED
    assert "cluster sn3 does not state runtime.healthySince" in blocker.message
    assert found.eligible_at is None and found.since is None


@pytest.mark.parametrize("said", [-1, 0, NOW + 5_000])
def test_an_impossible_healthy_since_is_unknown(said: int) -> None:
    found = gate("checkout", DIGEST, PROD, upstream(live(), observations(sn1=said)), (), NOW)
    [blocker] = found.blockers
    assert "cluster sn1 states runtime.healthySince" in blocker.message
    assert found.eligible_at is None


def test_without_a_soak_nothing_waits_but_no_time_is_claimed() -> None:
    found = gate("checkout", DIGEST, Environment(name="prod", path="prod"),
                 upstream(live(-1), observations()), (), NOW)
    assert found.ready and found.since is None


def test_the_eligible_time_shown_is_rounded_up_to_the_second() -> None:
    # healthy again at .400 of a second: eligible at .400 five minutes on; said as the next
    # whole second, so a plan run at the time shown finds it eligible
    back = NOW - 100_000 + 400
    found = gate("checkout", DIGEST, PROD, upstream(live(), observations(sn2=back)), (), NOW)
    [blocker] = found.blockers
    assert found.eligible_at == back + 300_000
    assert "eligible 2023-11-14 22:26:41Z" in blocker.message, blocker.message
