"""The revert's words (``render.revertview``): the story and how the way back ended are
worded once, and ``apply --on-gate-failure revert`` says where a revert landed once --
by composing the two, not by dropping repeated lines (two services failing with the
same evidence keep their own lines)."""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.core import reverts
from reconciler.render import revertview

A = "sha256:" + "a" * 64
B = "sha256:" + "b" * 64


@dataclass(frozen=True)
class _Pull:
    number: int = 7
    url: str = "https://github.example/o/r/pull/7"
    branch: str = "reconcile/revert-x"
    created: bool = True


@dataclass(frozen=True)
class _Run:
    key: str = "rvt-1"
    items: tuple[reverts.Item, ...] = ()
    commit: str | None = "c" * 40
    already: bool = False
    pull: _Pull | None = None
    why_pr: str | None = None
    rollback: None = None
    how: str | None = "fast-forward of main"


def item(service: str) -> reverts.Item:
    return reverts.Item(service=service, failed=B, failed_tag="v2", to=A, to_tag="v1",
                        evidence=("control plane: rollout r-1 failed",),
                        sources=("journal",), path=f"{service}.yaml",
                        hold_path=f"holds/{service}.yaml")


def test_apply_says_where_a_committed_revert_landed_once() -> None:
    run = _Run(items=(item("checkout"),))
    lines = revertview.after_gate(run, None)
    assert lines.count("landed: fast-forward of main") == 1
    assert lines[-1].startswith("release failed; reverted in git to checkout v1")
    # The story says it after the commit; the way back's sentence alone says it too.
    assert revertview.way_back(run, None)[-1] == "landed: fast-forward of main"


def test_two_services_failing_alike_each_keep_their_evidence() -> None:
    lines = revertview.after_gate(_Run(items=(item("checkout"), item("search"))), None)
    assert lines.count("  failed: control plane: rollout r-1 failed") == 2


def test_a_proposed_revert_names_its_pull_request_and_rolls_nothing_back() -> None:
    run = _Run(items=(item("checkout"),), commit="d" * 40, pull=_Pull(),
               why_pr="the branch is protected")
    lines = revertview.after_gate(run, None)
    assert "pull request #7 opened" in lines[-2]
    assert lines[-1].endswith("nothing rolled back until it is merged")
    assert revertview.next_step(run) == []


def test_no_revert_is_said_with_why() -> None:
    assert revertview.after_gate(None, "no proven release") == [
        "release failed; no revert: no proven release"]
    assert revertview.after_gate(None, None) == []
