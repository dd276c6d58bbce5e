"""Issue "PR review" item 5: a saved plan written inside the config repo never dirties it,
so the suggested `reconcile apply plan.json` works where the plan was made, as printed."""

from __future__ import annotations

import shlex

import pytest

from reconciler.exitcodes import Exit
from tests.e2e_repo import Repo

pytestmark = pytest.mark.integration


def test_plan_out_inside_the_repo_then_apply_it_there(repo: Repo) -> None:
    plan_file = repo.path / "plan.json"
    made = repo.run("plan", str(repo.path), "--out", str(plan_file), "--detailed-exitcode")
    assert made.code == Exit.CHANGES, made.out + made.err
    assert f"reconcile apply {plan_file}" in made.err
    again = repo.run("plan", str(repo.path), "--detailed-exitcode")
    assert again.code == Exit.CHANGES and "repo_dirty" not in again.out, again.out
    # Runnable as printed, from where plan ran (outside the repo: it names --repo).
    printed = made.err.split("apply it with: ")[1].splitlines()[0]
    assert printed == f"reconcile apply {plan_file} --repo {repo.path}", printed
    applied = repo.run(*shlex.split(printed)[1:])
    assert applied.code == Exit.OK, applied.out + applied.err
    after = repo.run("plan", str(repo.path), "--detailed-exitcode")
    assert after.code == Exit.OK, after.out + after.err
