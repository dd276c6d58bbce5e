"""A freeze's ``until`` as every reader meets it: any time the schema accepts, up to
9999-12-31T23:59:59Z, holds and is said without an OverflowError (read as
``LAST_INSTANT`` beyond it), beside windows that look a year ahead; an open-ended freeze
holds until it is removed and has no eligible time; an ended one holds nothing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from reconciler.core import promotion, windows
from reconciler.core.pipeline import LAST_INSTANT, Environment, Freeze, Window

NOW = int(datetime(2026, 12, 4, 12, tzinfo=UTC).timestamp() * 1000)
PROD = Environment(name="prod", path="environments/prod", windows=(
    Window(kind="deny", name="weekend", schedule="0 18 * * 5", duration="61h",
           timezone="Europe/Berlin"),
    Window(kind="allow", name="office", schedule="0 8 * * 1-5", duration="10h",
           timezone="Europe/Berlin")))


def freeze(until: str | None) -> Freeze:
    document = {"apiVersion": "reconcile/v1", "kind": "Freeze", "reason": "incident"}
    if until is not None:
        document["until"] = until
    return Freeze.model_validate(document)


@pytest.mark.parametrize("until", ["9999-12-31T23:59:59Z", "9999-12-31T23:59:59+00:00",
                                   "9998-06-01T00:00:00-05:00", "9996-12-31T00:00:00Z"])
def test_a_far_future_freeze_holds_and_is_said(until: str) -> None:
    found = freeze(until)
    assert found.until_ms is not None and found.until_ms <= LAST_INSTANT.timestamp() * 1000
    gate = promotion.gate("checkout", "sha256:x", PROD, None, [(found, "freezes/f.yaml")], NOW)
    [frozen] = gate.blockers
    assert frozen.code.value == "frozen"
    assert f"until {until[:10]}" in frozen.message
    if found.until_ms >= LAST_INSTANT.timestamp() * 1000:
        assert gate.eligible_at is None  # as long as an open-ended one: no time is said
    else:
        assert gate.eligible_at is None or gate.eligible_at >= found.until_ms
    holds = promotion.environment_holds(PROD, [(found, "freezes/f.yaml")], NOW)
    assert "frozen" in {b.code.value for b in holds}


def test_windows_read_any_instant_up_to_the_end_of_datetime() -> None:
    end = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)
    for window in PROD.windows:
        windows.open_until(window, end)  # no OverflowError
    windows.closed(PROD.windows, end)


def test_an_open_ended_freeze_holds_until_removed() -> None:
    found = freeze(None)
    assert found.until_ms is None and found.holds_at(NOW) and found.holds_at(10**15)
    gate = promotion.gate("checkout", "sha256:x", PROD, None, [(found, "freezes/f.yaml")], NOW)
    [frozen] = gate.blockers
    assert "until it is lifted" in frozen.message
    assert gate.eligible_at is None  # no time can be said


def test_an_ended_freeze_holds_nothing() -> None:
    found = freeze("2020-01-01T00:00:00Z")
    assert not found.holds_at(NOW)
    assert promotion.environment_holds(Environment(name="prod", path="p"),
                                       [(found, "freezes/f.yaml")], NOW) == ()
