"""Allow/deny windows (core.windows): deny beats allow, local times across a DST change,
and a window that ends is closed for the very next evaluation."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from reconciler.core import windows
from reconciler.core.pipeline import Window

BERLIN = "Europe/Berlin"


def window(kind: str, name: str, schedule: str, duration: str, tz: str = BERLIN) -> Window:
    return Window(kind=kind, name=name, schedule=schedule, duration=duration, timezone=tz)


def at(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


WEEKEND = window("deny", "weekend", "0 18 * * 5", "61h")
BUSINESS = window("allow", "business-hours", "0 9 * * 1-5", "8h")


def test_no_windows_never_hold() -> None:
    assert windows.closed((), at(2026, 12, 5, 12)) is None


def test_a_deny_window_says_until_when_in_its_own_zone() -> None:
    blocked = windows.closed((WEEKEND,), at(2026, 12, 5, 12))  # Saturday
    assert blocked is not None and blocked.denied
    assert windows.describe(blocked) == \
        'deny "weekend" until Mon 2026-12-07 07:00 Europe/Berlin (06:00Z)'
    assert blocked.eligible == at(2026, 12, 7, 6)


def test_deny_beats_allow_and_the_eligible_time_needs_both() -> None:
    # Friday 18:30 Berlin: the allow window (09-17) is closed anyway, the deny is open.
    blocked = windows.closed((BUSINESS, WEEKEND), at(2026, 12, 4, 17, 30))
    assert blocked is not None and blocked.denied and blocked.window.name == "weekend"
    # Monday 07:00 the deny ends, but nothing is allowed before 09:00 Berlin (08:00Z).
    assert blocked.eligible == at(2026, 12, 7, 8)
    # An allow window open at the same time as a deny one does not win.
    noon_deny = window("deny", "lunch", "0 12 * * *", "1h")
    blocked = windows.closed((BUSINESS, noon_deny), at(2026, 12, 2, 11, 30))
    assert blocked is not None and blocked.window.name == "lunch"
    assert windows.closed((BUSINESS, noon_deny), at(2026, 12, 2, 12, 30)) is None


def test_outside_every_allow_window_says_when_the_next_opens() -> None:
    blocked = windows.closed((BUSINESS,), at(2026, 12, 2, 19))
    assert blocked is not None and not blocked.denied
    assert windows.describe(blocked) == ('outside every allow window; "business-hours" opens '
                                         "Thu 2026-12-03 09:00 Europe/Berlin (08:00Z)")


def test_a_window_across_a_dst_change_opens_and_closes_at_local_times() -> None:
    # Clocks go forward in Berlin on Sunday 2026-03-29 at 02:00 (CET+1 -> CEST+2).
    nine = window("deny", "morning", "0 9 * * *", "1h")
    # Saturday: 09:00 CET is 08:00Z.
    assert windows.open_until(nine, at(2026, 3, 28, 7, 59)) is None
    assert windows.open_until(nine, at(2026, 3, 28, 8, 0)) == at(2026, 3, 28, 9)
    assert windows.open_until(nine, at(2026, 3, 28, 9, 0)) is None
    # Sunday: 09:00 CEST is 07:00Z; at 08:30Z it has closed.
    assert windows.open_until(nine, at(2026, 3, 29, 7, 0)) == at(2026, 3, 29, 8)
    assert windows.open_until(nine, at(2026, 3, 29, 8, 30)) is None
    # Autumn: back to CET on 2026-10-25; 09:00 local is 08:00Z again.
    assert windows.open_until(nine, at(2026, 10, 24, 7, 30)) == at(2026, 10, 24, 8)
    assert windows.open_until(nine, at(2026, 10, 25, 7, 30)) is None
    assert windows.open_until(nine, at(2026, 10, 25, 8, 30)) == at(2026, 10, 25, 9)


def test_a_window_spanning_the_dst_night_lasts_its_real_duration() -> None:
    # Opens 01:00 CET (00:00Z) the night clocks go forward; 3 h later is 04:00 CEST.
    night = window("deny", "night", "0 1 * * *", "3h")
    assert windows.open_until(night, at(2026, 3, 29, 1, 30)) == at(2026, 3, 29, 3)
    blocked = windows.closed((night,), at(2026, 3, 29, 1, 30))
    assert blocked is not None
    assert "until Sun 2026-03-29 05:00 Europe/Berlin (03:00Z)" in windows.describe(blocked)


def test_a_window_that_ends_is_closed_at_the_next_evaluation() -> None:
    # Nothing is cached: the evaluation a second after the end lets the promotion go.
    short = window("deny", "change-freeze", "30 14 * * *", "10m", "UTC")
    assert windows.closed((short,), at(2026, 12, 2, 14, 39, 59)) is not None
    assert windows.closed((short,), at(2026, 12, 2, 14, 40, 0)) is None


def test_overlapping_starts_are_chained() -> None:
    # Every hour for 90 minutes: always open, never closes within the horizon.
    always = window("deny", "always", "0 * * * *", "90m", "UTC")
    end = windows.open_until(always, at(2026, 12, 2, 12, 15))
    assert end is not None and end - at(2026, 12, 2, 12, 15) >= windows.HORIZON
    blocked = windows.closed((always,), at(2026, 12, 2, 12, 15))
    assert blocked is not None and blocked.eligible is None
    assert "until further notice" in windows.describe(blocked)


@pytest.mark.parametrize(("field", "value", "said"), [
    ("schedule", "0 25 * * *", "not a five-field cron schedule"),
    ("schedule", "* * * *", "not a five-field cron schedule"),
    ("duration", "90", "not a duration"),
    ("timezone", "Europe/Atlantis", "not an IANA time zone"),
])
def test_a_bad_window_is_refused_with_the_reason(field: str, value: str, said: str) -> None:
    values = {"kind": "deny", "name": "w", "schedule": "0 9 * * *", "duration": "1h",
              "timezone": "UTC", field: value}
    with pytest.raises(ValueError, match=said):
        Window.model_validate(values)
