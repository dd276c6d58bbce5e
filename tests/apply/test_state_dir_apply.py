"""Scenario 10 at apply time: a journal inside the config repo must be refused unless git
ignores it (a relative ``stateDir`` is refused at validation; this is the environment's
``RECONCILE_STATE_DIR`` or an absolute path)."""

from __future__ import annotations

import pytest

from reconciler.exitcodes import Exit
from tests.e2e_repo import Repo, git

pytestmark = pytest.mark.integration


def test_a_state_dir_inside_the_repo_is_refused_unless_git_ignores_it(repo: Repo) -> None:
    inside = repo.path / "journal-here"
    refused = repo.run("apply", str(repo.path), "--auto-approve",
                       RECONCILE_STATE_DIR=str(inside))
    assert refused.code == Exit.ERROR, refused.out + refused.err
    assert "inside the config repo" in refused.err and not inside.exists()
    (repo.path / ".gitignore").write_text("journal-here/\n")
    git(repo.path, "add", ".gitignore")
    git(repo.path, "commit", "-qm", "ignore the journal")
    applied = repo.run("apply", str(repo.path), "--auto-approve",
                       RECONCILE_STATE_DIR=str(inside))
    assert applied.code == Exit.OK, applied.out + applied.err
    assert (inside / "journal.jsonl").is_file()
    again = repo.run("plan", str(repo.path), "--detailed-exitcode",
                     RECONCILE_STATE_DIR=str(inside))
    assert again.code == Exit.OK, again.out + again.err  # the journal made nothing dirty
