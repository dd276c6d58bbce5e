"""Where a plan's desired state came from, said first in every view (issue 18, item 6):
a worktree preview, or a plan of a commit beside uncommitted edits it left out."""

from __future__ import annotations

import json

import pytest

from reconciler.core.planning import Provenance, plan
from reconciler.core.plans import Plan
from reconciler.render import jsonplan, markdown, text
from tests.plan import builders as b

COMMIT = "a" * 40


def planned(provenance: Provenance) -> Plan:
    return plan(b.reference_desired(), b.reference_live(), provenance)


def firsts(p: Plan) -> tuple[str, str, str | None]:
    document = json.loads(jsonplan.dumps(p))
    return (text.render(p).splitlines()[0], markdown.render(p).splitlines()[0],
            document["source_note"])


def test_a_clean_commit_says_nothing_first() -> None:
    first_text, first_md, note = firsts(planned(Provenance(commit=COMMIT)))
    assert first_text.startswith("reconcile plan · commit aaaaaaaaaaaa")
    assert first_md.startswith("## reconcile plan: ")
    assert note is None


@pytest.mark.parametrize("provenance,named", [
    (Provenance(commit=COMMIT, dirty=True, uncommitted=("services/search.yaml",)),
     "services/search.yaml (modified)"),
    (Provenance(commit=COMMIT, untracked=("services/new.yaml",)), "services/new.yaml (untracked)"),
    (Provenance(commit=COMMIT, dirty=True), "the edits to tracked files"),
])
def test_edits_left_out_are_said_first_in_every_view(provenance: Provenance,
                                                     named: str) -> None:
    p = planned(provenance)
    first_text, first_md, note = firsts(p)
    assert first_text.startswith("⚠ uncommitted edits are not included: this plan reads "
                                 "commit aaaaaaaaaaaa and leaves out " + named)
    assert first_md.startswith("## ⚠️ uncommitted edits are not included · reconcile plan:")
    assert named in markdown.render(p)
    assert note is not None and note.startswith("uncommitted edits are not included") \
        and named in note
    assert "plan --worktree" in note


def test_a_worktree_preview_is_marked_first_in_every_view_and_reads_back() -> None:
    p = planned(Provenance(commit=COMMIT, dirty=True, worktree=True,
                           uncommitted=("services/search.yaml",)))
    assert not any(bl.code == "repo_dirty" for bl in p.blockers)  # it read the edits
    first_text, first_md, note = firsts(p)
    assert first_text.startswith("PREVIEW — preview of uncommitted changes: the working tree "
                                 "as it is (commit aaaaaaaaaaaa plus services/search.yaml "
                                 "(modified))")
    assert first_md.startswith("## ⚠️ preview of uncommitted changes (never applied) · ")
    assert note is not None and "never applied" in note
    back = jsonplan.from_wire(json.loads(jsonplan.dumps(p)))
    assert back.worktree and back == p


def test_a_plan_of_a_commit_carries_its_tree_and_reads_back() -> None:
    files = (("services/search.yaml", "b" * 40),)
    p = planned(Provenance(commit=COMMIT, tree="c" * 40, files=files))
    document = json.loads(jsonplan.dumps(p))
    assert document["format_version"] == "2.4"
    assert document["desired_tree"] == "c" * 40
    assert document["desired_files"] == {"services/search.yaml": "b" * 40}
    assert jsonplan.from_wire(document) == p
