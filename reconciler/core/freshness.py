"""Freshness: an observation too old to count is no evidence.

Owns ``expire``: every cluster observation in a snapshot made longer than ``max_age_ms``
before ``now_ms`` becomes *silent* with a reason that says how old it was and what it
was held against ("stale: observed 75 s ago, older than two resyncs (60 s)"). The one
judge (``core.evidence.judge``) then shows that cluster as unknown -- never converged --
and the planner blocks on it like on any silent cluster. An answer that carries no time
cannot show it is fresh, and is treated the same.

Callers: the engine, for the watcher (max age = two resync intervals: a watcher whose
resyncs stopped, or a plan made from a snapshot kept across file events, must not keep
calling an old answer current). Pure: the clock is the caller's (``now_ms``).
"""

from __future__ import annotations

from reconciler.core.live import LiveSnapshot, Observation, ObservationKind


def _seconds(ms: int | float) -> str:
    return f"{ms / 1000:.0f} s" if ms >= 10_000 else f"{ms / 1000:.1f} s"


def stale_reason(observation: Observation, *, now_ms: int, max_age_ms: int,
                 horizon: str) -> str | None:
    """Why ``observation`` no longer counts, or None while it does."""
    if observation.kind is ObservationKind.SILENT:
        return None  # already no evidence; its own reason says why
    if observation.observed_at is None:
        return f"stale: observed at an unknown time, so not within {horizon} " \
            f"({_seconds(max_age_ms)})"
    age = now_ms - observation.observed_at
    if age <= max_age_ms:
        return None
    return f"stale: observed {_seconds(age)} ago, older than {horizon} ({_seconds(max_age_ms)})"


def expire(snapshot: LiveSnapshot, *, now_ms: int, max_age_ms: int,
           horizon: str = "the maximum age") -> LiveSnapshot:
    """``snapshot`` with every observation older than ``max_age_ms`` made silent.

    ``horizon`` names what the age is held against in the reason ("two resyncs"). The
    snapshot is returned unchanged (the same object) when nothing is stale."""
    changed = False
    rows: dict[str, tuple[Observation, ...]] = {}
    for app, observations in snapshot.observations.items():
        out = []
        for observation in observations:
            why = stale_reason(observation, now_ms=now_ms, max_age_ms=max_age_ms,
                               horizon=horizon)
            if why is None:
                out.append(observation)
                continue
            changed = True
            out.append(observation.model_copy(update={
                "kind": ObservationKind.SILENT, "runtime": None, "reason": why}))
        rows[app] = tuple(out)
    return snapshot.model_copy(update={"observations": rows}) if changed else snapshot
