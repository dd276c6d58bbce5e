"""Allow/deny windows: whether a promotion may go at a given instant, and when it may.

Owns the evaluation of ``core.pipeline.Window``s (Argo CD's grammar: cron schedule +
duration + IANA time zone). Deny beats allow: a deny window that is open blocks whatever
allow windows say; with at least one allow window, a promotion goes only while one is
open; with none, only deny windows can block.

How a window's times are computed, and why:

- The cron schedule is iterated by croniter over the zone's **naive wall-clock time**,
  then each start is placed in the zone with ``zoneinfo`` (fold 0). croniter's own
  handling of aware datetimes has moved across releases around DST gaps and folds; naive
  iteration is plain calendar arithmetic, and ``zoneinfo`` (the tz database) alone decides
  the offset. A window ``0 9 * * *`` in Europe/Berlin therefore opens at 09:00 local on
  both sides of a DST change (08:00Z in winter, 07:00Z in summer). A start that falls in
  a spring-forward gap (02:30 on the change day) is read with the offset before the gap,
  i.e. one hour later in local time; one in an autumn fold is its first occurrence.
- ``duration`` is elapsed time from the start (a 2h window that opens at 01:00 on the
  night the clocks go forward closes at 04:00 local, two real hours later).

Nothing is cached between calls: each plan evaluates the windows at its own snapshot's
time, so a window that ends while ``watch`` waits is closed for the next cycle without a
restart (argo-cd#21692).

An instant later than ``core.pipeline.LAST_INSTANT`` (a freeze until 9999-12-31, say) is
read as that instant, so the horizon's arithmetic never leaves ``datetime``'s range.

Pure: no I/O and no clock; ``now`` is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from croniter import croniter

from reconciler.core.pipeline import Window, clamp_instant, zone

#: How far ahead to look for a window that opens, and how many overlapping starts to
#: chain, before saying "not within a year": a schedule that never fires (Feb 30) or a
#: deny window that never closes must end the search, not hang it.
HORIZON = timedelta(days=366)
MAX_STEPS = 2000


def _starts_before(window: Window, now: datetime) -> datetime | None:
    """The latest start of ``window`` at or before ``now`` (aware UTC), or None."""
    tz = zone(window.timezone)
    local = now.astimezone(tz).replace(tzinfo=None) + timedelta(seconds=1)
    try:
        naive = croniter(window.schedule, local).get_prev(datetime)
    except (StopIteration, ValueError):  # pragma: no cover - croniter found no match
        return None
    start = naive.replace(tzinfo=tz).astimezone(UTC)
    # A start placed after `now` by the zone's offset (a gap) is not yet a start.
    if start > now:
        try:
            naive = croniter(window.schedule, naive).get_prev(datetime)
        except (StopIteration, ValueError):  # pragma: no cover
            return None
        start = naive.replace(tzinfo=tz).astimezone(UTC)
    return start if now - start <= HORIZON else None


def _next_start(window: Window, after: datetime) -> datetime | None:
    """The first start of ``window`` strictly after ``after`` (aware UTC), or None."""
    tz = zone(window.timezone)
    local = after.astimezone(tz).replace(tzinfo=None)
    it = croniter(window.schedule, local)
    for _ in range(8):  # a gap can place a naive start before `after`: take the next one
        try:
            naive = it.get_next(datetime)
        except (StopIteration, ValueError):  # pragma: no cover
            return None
        start = naive.replace(tzinfo=tz).astimezone(UTC)
        if start > after:
            return start if start - after <= HORIZON else None
    return None  # pragma: no cover


def open_until(window: Window, now: datetime) -> datetime | None:
    """When ``window`` closes if it is open at ``now`` (overlapping starts chained), else
    None. A window that never closes within the horizon reports the horizon's end."""
    now = clamp_instant(now)  # a year's horizon past it must stay a datetime
    start = _starts_before(window, now)
    if start is None:
        return None
    end = start + timedelta(seconds=window.seconds)
    if end <= now:
        return None
    cursor = now
    for _ in range(MAX_STEPS):
        following = _next_start(window, cursor)
        if following is None or following >= end:
            return end
        end = max(end, following + timedelta(seconds=window.seconds))
        cursor = following
        if end - now >= HORIZON:
            break
    return max(end, now + HORIZON)  # never closes within the horizon


@dataclass(frozen=True)
class Closed:
    """Why a promotion cannot go at ``now``: the window that says so, and the first
    instant at or after ``now`` when every window lets it go (None: not within a year)."""

    window: Window
    denied: bool  # a deny window is open; else no allow window is
    until: datetime | None  # when that window ends (deny) or the next allow opens
    eligible: datetime | None


def _blocking(windows: tuple[Window, ...],
              at: datetime) -> tuple[Window, bool, datetime | None] | None:
    denies = [(w, open_until(w, at)) for w in windows if w.kind == "deny"]
    open_denies = [(w, end) for w, end in denies if end is not None]
    if open_denies:
        window, end = max(open_denies, key=lambda pair: pair[1] or at)
        return window, True, end
    allows = [w for w in windows if w.kind == "allow"]
    if allows and not any(open_until(w, at) is not None for w in allows):
        nexts = [(w, _next_start(w, at)) for w in allows]
        found = [(w, n) for w, n in nexts if n is not None]
        if not found:
            return allows[0], False, None
        window, start = min(found, key=lambda pair: pair[1])
        return window, False, start
    return None


def closed(windows: tuple[Window, ...], now: datetime) -> Closed | None:
    """None when the windows let a promotion go at ``now``; else why not and when."""
    now = clamp_instant(now)  # a year's horizon past it must stay a datetime
    first = _blocking(windows, now)
    if first is None:
        return None
    window, denied, until = first
    at: datetime | None = until
    for _ in range(MAX_STEPS):
        if at is None or at - now > HORIZON:
            at = None
            break
        again = _blocking(windows, at)
        if again is None:
            break
        at = again[2]
    return Closed(window=window, denied=denied, until=until, eligible=at)


def local(instant: datetime, timezone: str) -> str:
    """``Mon 07:00 Europe/Berlin (06:00Z)``: when, in the window's own zone and in UTC."""
    shown = instant.astimezone(zone(timezone))
    utc = instant.astimezone(UTC)
    return (f"{shown:%a %Y-%m-%d %H:%M} {timezone} ({utc:%H:%M}Z)" if timezone != "UTC"
            else f"{utc:%a %Y-%m-%d %H:%M}Z")


def describe(blocked: Closed) -> str:
    """The blocker's sentence: ``deny "weekend" until Mon 2026-12-07 07:00 Europe/Berlin
    (06:00Z)`` or ``outside every allow window; "business-hours" opens …``."""
    window = blocked.window
    if blocked.denied:
        until = local(blocked.until, window.timezone) if blocked.until \
            and blocked.eligible is not None else "further notice (it never closes within a year)"
        text = f'deny "{window.name}" until {until}'
    elif blocked.until is not None:
        text = (f'outside every allow window; "{window.name}" opens '
                f"{local(blocked.until, window.timezone)}")
    else:
        text = f'outside every allow window; "{window.name}" does not open within a year'
    if blocked.eligible is not None and blocked.eligible != blocked.until:
        text += f"; eligible {blocked.eligible.astimezone(UTC):%Y-%m-%d %H:%M}Z"
    return text
