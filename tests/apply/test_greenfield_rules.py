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


# -- bound to the desired-state tree (issue 18) ------------------------------------------

MERGED = "d" * 40
TREE = "1" * 40
FILES = {"services/ledger.yaml": "a" * 40, "settings.yaml": "b" * 40}


def at(commit: str, tree: str | None = TREE, files: dict[str, str] | None = None,
       ) -> Provenance:
    return Provenance(commit=commit, tree=tree, files=tuple((files or FILES).items()))


def where(commit: str, tree: str | None = TREE,
          files: dict[str, str] | None = None) -> binding.Where:
    return binding.Where(control_plane_url="https://cp", gateway="gw", repo_root=None,
                         repo_path=None, commit=commit, tree=tree, files=files or FILES)


def test_a_plan_applies_at_another_commit_holding_the_same_tree() -> None:
    saved = planned(provenance=at(COMMIT))
    assert saved.desired_tree == TREE and saved.desired_files == FILES
    assert binding.source(saved, where(MERGED)) is None
    assert binding.source(saved, where(COMMIT)) is None


def test_another_tree_is_refused_naming_each_file_that_differs() -> None:
    saved = planned(provenance=at(COMMIT))
    now = {"services/ledger.yaml": "e" * 40, "services/new.yaml": "f" * 40}
    refusal = binding.source(saved, where(MERGED, "2" * 40, now))
    assert refusal is not None and refusal.kind is binding.Unbound.TREE
    assert refusal.files == ("services/ledger.yaml (modified)", "services/new.yaml (added)",
                             "settings.yaml (deleted)")
    assert "3 file(s) differ: services/ledger.yaml (modified)" in refusal.message
    assert f"planned at commit {COMMIT[:12]}" in refusal.message
    assert f"at commit {MERGED[:12]}" in refusal.message


def test_a_plan_with_no_tree_stays_bound_to_its_commit() -> None:
    # What reconcile < 2.3 saved: no desired_tree. Same commit: fine; another: refused.
    saved = planned(provenance=Provenance(commit=COMMIT))
    assert saved.desired_tree is None
    assert binding.source(saved, where(COMMIT)) is None
    refusal = binding.source(saved, where(MERGED))
    assert refusal is not None and refusal.kind is binding.Unbound.COMMIT
    assert f"made from commit {COMMIT}" in refusal.message and "plan again" in refusal.message


def test_a_worktree_preview_is_never_bound() -> None:
    saved = planned(provenance=Provenance(commit=COMMIT, worktree=True))
    refusal = binding.source(saved, where(COMMIT))
    assert refusal is not None and refusal.kind is binding.Unbound.PREVIEW
    assert "never applied" in refusal.message


def test_a_creation_asked_again_at_the_merged_commit_is_the_reviewed_one() -> None:
    saved = planned(provenance=at(COMMIT))
    fresh = planned(provenance=at(MERGED))
    then, now = (next(c for c in p.changes if c.action is Action.CREATE) for p in (saved, fresh))
    assert then.idempotency_key == now.idempotency_key  # the key follows the intent
    assert then.creation and now.creation and then.creation.fence and now.creation.fence
    assert (then.creation.fence.source_revision, now.creation.fence.source_revision) == \
        (COMMIT, MERGED)
    # Bound to the commit (a plan < 2.3), the revision is a difference; bound to the tree,
    # it is not.
    assert binding.changes(saved, fresh) != []
    assert binding.changes(saved, fresh, same_tree=True) == []


def test_a_creation_at_the_merged_commit_must_still_be_go_for_the_same_intent() -> None:
    saved = planned(provenance=at(COMMIT))
    no_go = planned(provenance=at(MERGED),
                    blockers=[{"code": "NAMESPACE_COLLISION", "message": "taken"}])
    diffs = binding.changes(saved, no_go, same_tree=True)
    assert len(diffs) == 1 and "create ledger" in diffs[0], diffs
    # Anything else in the fence (here the version) is another creation, tree or not.
    doc = ledger_doc()
    doc["release"]["version"] = "1.0.1"
    other = planned(desired_with(doc), provenance=at(MERGED))
    diffs = binding.changes(saved, other, same_tree=True)
    assert len(diffs) == 1 and "fence.version 1.0.0 → 1.0.1" in diffs[0], diffs
