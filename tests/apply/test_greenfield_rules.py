"""In-process rules apply uses for a creation (issue 12): when a planned create is still
safe to send, and when a saved plan's create is not the one a fresh plan would send."""

from __future__ import annotations

from reconciler.core import binding, staleness
from reconciler.core.live import LiveSnapshot
from reconciler.core.planning import Provenance, creation_requests
from reconciler.core.plans import Action, Change
from reconciler.core.staleness import Freshness
from tests.plan import builders as b
from tests.plan.test_greenfield_plan import (
    COMMIT,
    desired_with,
    ledger_doc,
    live_without_ledger,
    planned,
    report_for,
)


def the_create() -> Change:
    return next(c for c in planned().changes if c.action is Action.CREATE)


def with_ledger(current: str) -> LiveSnapshot:
    live = live_without_ledger()
    ledger = b.live_service("ledger", [("v1.0.0", 300, 310), ("v0.9.0", 200, 210)], current, 1,
                            [("api.stripe.com", 443)], 1)
    return live.model_copy(update={"services": {**live.services, "svc-ledger": ledger}})


def test_a_create_is_fresh_while_absent_and_ours_when_journaled() -> None:
    change = the_create()
    assert staleness.check(change, live_without_ledger(), journaled=False).freshness \
        is Freshness.FRESH
    assert staleness.check(change, live_without_ledger(), journaled=True).freshness \
        is Freshness.OURS


def test_a_create_is_already_live_once_the_service_runs_the_pinned_digest() -> None:
    # A rerun after kill -9: the first run's creation landed.
    check = staleness.check(the_create(), with_ledger("v1.0.0"), journaled=True)
    assert check.freshness is Freshness.ALREADY_LIVE


def test_a_create_is_stale_when_the_service_appeared_with_something_else() -> None:
    check = staleness.check(the_create(), with_ledger("v0.9.0"), journaled=False)
    assert check.freshness is Freshness.STALE and "has it now" in check.detail


def test_a_saved_create_binds_to_the_fence_of_the_preflight_it_saw() -> None:
    saved = planned()
    assert binding.changes(saved, planned()) == []
    # The fresh preflight yields another fence (another version pinned): refused by field.
    doc = ledger_doc()
    doc["release"]["version"] = "1.0.1"
    fresh = planned(desired_with(doc))
    diffs = binding.changes(saved, fresh)
    assert len(diffs) == 1 and diffs[0].startswith("create ledger: the fresh preflight binds")
    assert "fence.version 1.0.0 → 1.0.1" in diffs[0]


def test_a_saved_create_whose_fresh_report_binds_another_fence_is_refused() -> None:
    # Same intent (same key), but the control plane now reports another configuration.
    saved = planned()
    desired = desired_with()
    live = live_without_ledger()
    prov = Provenance(commit=COMMIT)
    ask = creation_requests(desired, live, prov)[0]
    other = report_for(ask.request)
    other["source"]["configurationDigest"] = "sha256:" + "f" * 64
    fresh = planned(reply=other)
    diffs = binding.changes(saved, fresh)
    assert len(diffs) == 1 and "fence.configuration_digest" in diffs[0], diffs


def test_a_saved_create_settled_by_a_crashed_run_is_accepted() -> None:
    saved = planned()
    key = the_create().idempotency_key
    fresh = saved.model_copy(update={"changes": tuple(
        c for c in saved.changes if c.action is not Action.CREATE)})
    assert binding.changes(saved, fresh, settled={key}) == []
    assert binding.changes(saved, fresh) != []
