"""Freshness: an observation too old to count is no evidence.

Owns ``expire``: every cluster observation in a snapshot last said longer than
``max_age_ms`` before ``now_ms`` becomes *silent* with a reason that says how old it was
and what it was held against ("stale: observed 75 s ago, older than two resyncs
(60 s)"). The one
judge (``core.evidence.judge``) then shows that cluster as unknown -- never converged --
and the planner blocks on it like on any silent cluster. An answer that carries no time
cannot show it is fresh, and is treated the same. "Last said" is the observation's own
time, or later when its cluster confirmed it unchanged (a ``304``) in the same snapshot
(``MeshView.confirmed``, read by ``observed_at``).

Callers: the engine, for the watcher (max age = two resync intervals: a watcher whose
resyncs stopped, or a plan made from a snapshot kept across file events, must not keep
calling an old answer current). Pure: the clock is the caller's (``now_ms``).
"""

from __future__ import annotations

from reconciler.core.live import LiveSnapshot, Observation, ObservationKind


def _seconds(ms: int | float) -> str:
    return f"{ms / 1000:.0f} s" if ms >= 10_000 else f"{ms / 1000:.1f} s"


def confirmations(snapshot: LiveSnapshot) -> dict[tuple[str, str], int]:
    """(cluster, address) -> when that cluster confirmed its reused answers in
    ``snapshot`` (``MeshView.confirmed``; the latest when it said so more than once)."""
    out: dict[tuple[str, str], int] = {}
    for c in snapshot.mesh.confirmed:
        key = (c.cluster_id, c.address)
        out[key] = max(c.at, out.get(key, c.at))
    return out


def observed_at(observation: Observation, confirmed: dict[tuple[str, str], int]) -> int | None:
    """When ``observation`` was last said: its own time, or later when its cluster
    confirmed it (``confirmations``). None: at an unknown time (never confirmed)."""
    at = observation.observed_at
    if at is None or observation.address is None:
        return at
    again = confirmed.get((observation.cluster_id, observation.address))
    return at if again is None or again < at else again


def stale_reason(observation: Observation, *, now_ms: int, max_age_ms: int,
                 horizon: str, said_at: int | None = None) -> str | None:
    """Why ``observation`` no longer counts, or None while it does. ``said_at``: when it
    was last said, if later than its own time (``observed_at``)."""
    if observation.kind is ObservationKind.SILENT:
        return None  # already no evidence; its own reason says why
    at = observation.observed_at
    if at is None:
        return f"stale: observed at an unknown time, so not within {horizon} " \
            f"({_seconds(max_age_ms)})"
    if said_at is not None and said_at > at:
        at = said_at
    age = now_ms - at
    if age <= max_age_ms:
        return None
    return f"stale: observed {_seconds(age)} ago, older than {horizon} ({_seconds(max_age_ms)})"


def expire(snapshot: LiveSnapshot, *, now_ms: int, max_age_ms: int,
           horizon: str = "the maximum age") -> LiveSnapshot:
    """``snapshot`` with every observation older than ``max_age_ms`` made silent.

    ``horizon`` names what the age is held against in the reason ("two resyncs"). The
    snapshot is returned unchanged (the same object) when nothing is stale."""
    confirmed = confirmations(snapshot)
    changed = False
    rows: dict[str, tuple[Observation, ...]] = {}
    for app, observations in snapshot.observations.items():
        out = []
        stale = False
        for observation in observations:
            why = stale_reason(observation, now_ms=now_ms, max_age_ms=max_age_ms,
                               horizon=horizon, said_at=observed_at(observation, confirmed))
            if why is None:
                out.append(observation)
                continue
            stale = True
            out.append(observation.model_copy(update={
                "kind": ObservationKind.SILENT, "runtime": None, "reason": why}))
        rows[app] = tuple(out) if stale else observations
        changed = changed or stale
    return snapshot.model_copy(update={"observations": rows}) if changed else snapshot
