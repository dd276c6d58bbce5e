"""``core.writegate``: the one gate before every write into git, read from the plan of
the change -- which blockers refuse each kind of write, the documented exceptions in one
place, and each refusal naming when it may go."""

from __future__ import annotations

import pytest

from reconciler.core.codes import BlockerCode
from reconciler.core.plans import Blocker, Plan
from reconciler.core.writegate import REFUSING, Write, eligible, verdict


def plan(*blockers: Blocker) -> Plan:
    return Plan(created_at=0, control_plane_url="https://cp", gateway="mesh",
                expected_clusters=("sn1",), changes=(), blockers=blockers, drift=(),
                evidence=(), fingerprint="f")


HELD = Blocker(code=BlockerCode.HELD, service="checkout",
               message="checkout: the pinned release sha256:ab is held since …")
DENIED = Blocker(code=BlockerCode.POLICY_DENIED, service="checkout",
                 message='checkout: policy "p" rule "r" (policies/p.yaml): no')
SOAKING = Blocker(code=BlockerCode.NOT_SOAKED, service="checkout",
                  message="checkout: sha256:ab proven on staging 5s of 1h; eligible "
                  "2026-12-04 18:00:00Z")
FROZEN = Blocker(code=BlockerCode.FROZEN, services=("checkout", "search"),
                 message='prod is frozen: "incident" until 2026-12-05 00:00:00Z '
                 "(freezes/prod.yaml; `reconcile unfreeze` ends it)")
SILENT = Blocker(code=BlockerCode.CLUSTER_SILENT, cluster="sn1", service="checkout",
                 message="sn1 gave no answer")


@pytest.mark.parametrize("blocker", [HELD, DENIED, SOAKING, FROZEN])
def test_the_environment_rules_refuse_a_promotion(blocker: Blocker) -> None:
    found = verdict(plan(blocker), Write.PROMOTION, {"checkout"})
    # restricted to the services written (a shared cause names only those)
    assert not found.go and [(b.code, b.message) for b in found.refusing] == \
        [(blocker.code, blocker.message)]
    [line] = found.lines("checkout")
    assert line.startswith(f"{blocker.code.value}: ") and "(eligible: " in line


def test_the_live_side_does_not_refuse_a_write_into_git() -> None:
    assert verdict(plan(SILENT), Write.PROMOTION, {"checkout"}).go
    assert SILENT.code not in REFUSING


def test_no_plan_is_no_verdict_never_go() -> None:
    found = verdict(None, Write.PROMOTION, {"checkout"}, unknown="prod unreadable")
    assert not found.go and found.lines() == ["no verdict: prod unreadable"]


def test_another_services_blocker_does_not_refuse_this_one() -> None:
    other = Blocker(code=BlockerCode.HELD, service="search", message="search: held")
    assert verdict(plan(other), Write.PROMOTION, {"checkout"}).go


def test_override_window_lifts_windows_and_freezes_never_soak_policy_or_hold() -> None:
    found = verdict(plan(FROZEN, SOAKING, DENIED, HELD), Write.PROMOTION, {"checkout"},
                    override="incident 4711")
    assert set(found.refusing) == {SOAKING, DENIED, HELD}
    assert [b.code for b, _ in found.lifted] == [BlockerCode.FROZEN]
    assert "incident 4711" in found.notes()[0]


def test_a_rollback_goes_through_a_freeze_and_soak_but_not_a_hold_or_a_policy() -> None:
    through = verdict(plan(FROZEN, SOAKING), Write.ROLLBACK, {"checkout"})
    assert through.go and {b.code for b, _ in through.lifted} == {BlockerCode.FROZEN,
                                                                   BlockerCode.NOT_SOAKED}
    assert not verdict(plan(FROZEN, HELD), Write.ROLLBACK, {"checkout"}).go
    assert not verdict(plan(DENIED), Write.ROLLBACK, {"checkout"}).go


def test_each_refusal_says_when_it_may_go() -> None:
    assert eligible(SOAKING) == "2026-12-04 18:00:00Z"
    assert eligible(FROZEN).startswith("2026-12-05 00:00:00Z (or when reconcile unfreeze")
    assert "release-hold" in eligible(HELD)
    assert "names no time" in eligible(DENIED)


def test_a_reason_written_by_a_person_is_never_read_as_a_time() -> None:
    held = Blocker(code=BlockerCode.HELD, service="checkout",
                   message="checkout: sha256:ab is held: do not use until v2 ships")
    denied = Blocker(code=BlockerCode.POLICY_DENIED, service="checkout",
                     message="policy x: no prod deploys until the audit ends")
    frozen = Blocker(code=BlockerCode.FROZEN, message='prod is frozen: "wait until the '
                     'audit ends" until it is lifted (freezes/f.yaml; `reconcile unfreeze` '
                     "ends it)")
    window = Blocker(code=BlockerCode.WINDOW_CLOSED, message='prod: deny "weekend" until '
                     "Mon 2026-12-07 07:00 Europe/Berlin (06:00Z)")
    assert "release-hold" in eligible(held)
    assert "names no time" in eligible(denied)
    assert eligible(frozen) == "no end (or when reconcile unfreeze lifts it)"
    assert eligible(window) == "2026-12-07 07:00 Europe/Berlin"
