"""Stale observations are no evidence: the pure rule (``core.freshness``), the engine's
watcher path through it, and the watcher asking for two resyncs."""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any

from reconciler.core import freshness
from reconciler.core.codes import BlockerCode
from reconciler.core.desired import DesiredState
from reconciler.core.evidence import Proof
from reconciler.core.live import LiveSnapshot, Observation, ObservationKind
from reconciler.core.planning import Provenance, plan
from reconciler.core.plans import Plan, Verdict
from reconciler.engine import WatchSteps
from reconciler.shell.endpoints import Overrides
from reconciler.shell.watching import Log, Watcher
from tests.plan import builders as b
from tests.plan.test_golden import _converged_desired as _unvalidated

T0 = 1_790_000_000_000  # the reference snapshot's taken_at


def _converged_desired() -> DesiredState:
    """The desired state the reference snapshot satisfies, validated as a loader would
    (the golden helper copies capabilities in as plain strings; dumping them warns)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        raw = _unvalidated().model_dump(mode="json", by_alias=True)
    return DesiredState.model_validate(raw)


def stamped(live: LiveSnapshot, at: int) -> LiveSnapshot:
    """Every observation made at ``at`` (ms)."""
    return live.model_copy(update={"observations": {
        app: tuple(o.model_copy(update={"observed_at": at}) for o in rows)
        for app, rows in live.observations.items()}})


def test_an_observation_within_the_max_age_is_kept_as_it_is() -> None:
    live = stamped(b.reference_live(), T0)
    assert freshness.expire(live, now_ms=T0 + 60_000, max_age_ms=60_000) is live


def test_an_older_observation_becomes_silent_saying_how_old_and_against_what() -> None:
    live = stamped(b.reference_live(), T0)
    expired = freshness.expire(live, now_ms=T0 + 75_000, max_age_ms=60_000,
                               horizon="two resyncs")
    row = expired.observations["checkout"][0]
    assert row.kind is ObservationKind.SILENT and row.runtime is None
    assert row.reason == "stale: observed 75 s ago, older than two resyncs (60 s)"
    assert row.cluster_id == "sn1" and row.address == "127.0.0.2"


def test_only_the_old_ones_expire_and_silence_keeps_its_own_reason() -> None:
    live = stamped(b.reference_live(), T0)
    rows = live.observations["checkout"]
    mixed = (rows[0].model_copy(update={"observed_at": T0 + 70_000}), rows[1],
             Observation(cluster_id="sn3", kind=ObservationKind.SILENT, reason="refused"))
    live = live.model_copy(update={"observations": {**live.observations, "checkout": mixed}})
    expired = freshness.expire(live, now_ms=T0 + 75_000, max_age_ms=60_000)
    kinds = [(o.kind, o.reason) for o in expired.observations["checkout"]]
    assert kinds == [
        (ObservationKind.ANSWERED, None),
        (ObservationKind.SILENT, "stale: observed 75 s ago, older than the maximum age (60 s)"),
        (ObservationKind.SILENT, "refused")]


def test_an_answer_without_a_time_cannot_show_it_is_fresh() -> None:
    live = b.reference_live()  # the builders stamp no time
    expired = freshness.expire(live, now_ms=T0, max_age_ms=60_000, horizon="two resyncs")
    assert {o.reason for rows in expired.observations.values() for o in rows} == {
        "stale: observed at an unknown time, so not within two resyncs (60 s)"}


def judged(plan_: Plan) -> set[Proof]:
    return {p.proof for p in plan_.proofs}


def test_a_converged_fleet_seen_too_long_ago_is_unknown_never_converged() -> None:
    desired: DesiredState = _converged_desired()
    live = stamped(b.reference_live(), T0)
    fresh = plan(desired, freshness.expire(live, now_ms=T0 + 1_000, max_age_ms=60_000),
                 Provenance(commit="2" * 40))
    assert fresh.verdict is Verdict.NO_CHANGES and judged(fresh) == {Proof.CONVERGED}
    old = plan(desired, freshness.expire(live, now_ms=T0 + 75_000, max_age_ms=60_000,
                                         horizon="two resyncs"), Provenance(commit="2" * 40))
    assert old.verdict is Verdict.NO_GO
    assert judged(old) == {Proof.UNPROVEN}
    silent = [bl for bl in old.blockers if bl.code is BlockerCode.CLUSTER_SILENT]
    assert len(silent) == 4 * 3
    assert all("stale: observed 75 s ago, older than two resyncs (60 s)" in bl.message
               for bl in silent)


def test_the_watchers_plan_goes_through_the_engine_with_its_clock(tmp_path: Path) -> None:
    now = {"s": (T0 + 1_000) / 1000}
    steps = WatchSteps(tmp_path, overrides=Overrides(), env={}, clock=lambda: now["s"])
    desired = _converged_desired()
    live = stamped(b.reference_live(), T0)
    provenance = Provenance(commit="2" * 40)
    assert steps.plan(desired, live, provenance, max_age=60).verdict is Verdict.NO_CHANGES
    now["s"] = (T0 + 75_000) / 1000
    stale = steps.plan(desired, live, provenance, max_age=60)
    assert stale.verdict is Verdict.NO_GO and judged(stale) == {Proof.UNPROVEN}
    assert any("older than two resyncs (60 s)" in bl.message for bl in stale.blockers)
    # Without a max age (plan, apply) nothing expires: their snapshot is read just now.
    assert steps.plan(desired, live, provenance).verdict is Verdict.NO_CHANGES


class Recording:
    """Steps that record the max age the watcher asks for."""

    def __init__(self) -> None:
        self.max_ages: list[float | None] = []

    def plan(self, desired: DesiredState, snapshot: LiveSnapshot, provenance: Provenance,
             *, max_age: float | None = None) -> Plan:
        self.max_ages.append(max_age)
        return plan(desired, snapshot, provenance)

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the watcher's replan called steps.{name}")


def test_the_watcher_plans_with_two_resync_intervals_as_the_max_age(tmp_path: Path) -> None:
    steps = Recording()
    watcher = Watcher(root=tmp_path, steps=steps, log=Log(stream=io.StringIO()),
                      resync=45.0)
    watcher.desired = _converged_desired()
    watcher.snapshot = stamped(b.reference_live(), T0)
    watcher._replan("files changed")
    assert steps.max_ages == [90.0]
