"""A plan reviewed on a pull request's merge preview, applied after the real merge.

Real git repositories in tmp (the desired state in ``deploy/`` of a larger repo, a PR
branch, GitHub's merge preview as a detached merge commit, other PRs landing on main
first), the real sandbox, the real CLI. A saved plan is bound to the tree of the
desired-state directory, not to the commit: the merged tree identical to the reviewed
one applies (and the creation's preflight is asked again at the merged commit, whose
revision is what is sent and recorded); a merged tree that differs is refused with exit
18 naming the files that differ, before anything is sent.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from reconciler.exitcodes import Exit
from reconciler.render import jsonplan
from reconciler.sandbox import store
from reconciler.sandbox.launcher import Sandbox
from tests.e2e_repo import EXAMPLES, Repo, git

pytestmark = pytest.mark.integration

WRITES = {"promoteServiceImageRelease", "rollbackServiceImageRelease", "setServiceEgress",
          "configureServiceDeploymentMachineUser", "createGreenfieldDeployment"}


def writes(sandbox: Sandbox) -> list[dict[str, object]]:
    return [a for a in sandbox.audit() if a["method"] in WRITES]


def out(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def mono(tmp: Path, sandbox: Sandbox) -> Repo:
    """A repo holding more than the desired state: ``deploy/`` is the desired-state
    directory, ``docs/`` is not. Branch ``main``, one commit."""
    top = tmp / "mono"
    deploy = top / "deploy"
    shutil.copytree(EXAMPLES, deploy)
    settings = json.loads(sandbox.settings_yaml(interval_seconds=0.2, attempts=40))
    (deploy / "settings.yaml").write_text(json.dumps(settings, indent=2) + "\n")
    (top / "docs").mkdir()
    (top / "docs" / "runbook.md").write_text("# runbook\n")
    git(top, "init", "-q", "-b", "main")
    repo = Repo(deploy, sandbox, tmp / "apply-state")
    repo.commit("desired state")
    return repo


def branch(repo: Repo, name: str, edits: dict[str, str], *, start: str = "main") -> None:
    """Commit ``edits`` (path under the repo top -> text appended) on a new branch."""
    top = repo.path.parent
    git(top, "checkout", "-q", "-b", name, start)
    for rel, text in edits.items():
        path = top / rel
        path.write_text((path.read_text() if path.exists() else "") + text)
    git(top, "add", "-A")
    git(top, "-c", "user.email=ci@example.net", "-c", "user.name=ci", "commit", "-qm", name)
    git(top, "checkout", "-q", "main")


def merge(repo: Repo, name: str, *, detached: bool = False) -> str:
    """Merge ``name`` into main (``detached``: GitHub's merge preview, main untouched)."""
    top = repo.path.parent
    if detached:
        git(top, "checkout", "-q", "--detach", "main")
    git(top, "-c", "user.email=ci@example.net", "-c", "user.name=ci", "merge", "-q",
        "--no-ff", "-m", f"merge {name}", name)
    return out(top, "rev-parse", "HEAD")


def review_on_preview(repo: Repo, tmp: Path) -> tuple[Path, str]:
    """The PR edits a service file; the plan is saved on its merge preview."""
    branch(repo, "pr", {"deploy/services/search.yaml": "# reviewed in the PR\n"})
    preview = merge(repo, "pr", detached=True)
    plan_file = tmp / "plan.json"
    saved = repo.run("plan", str(repo.path), "--out", str(plan_file))
    assert saved.code == Exit.OK, saved.out + saved.err
    document = json.loads(plan_file.read_text())
    assert document["commit"] == preview
    assert document["desired_tree"] == out(repo.path, "rev-parse", f"{preview}:./")
    git(repo.path.parent, "checkout", "-q", "main")
    return plan_file, preview


def operation_revision(sandbox: Sandbox, key: str) -> str:
    conn = store.connect(sandbox.state_dir)
    try:
        found = store.load_operation(conn, idempotency_key=key)
    finally:
        conn.close()
    assert found is not None, f"no greenfield operation for {key}"
    return str(found[0]["data"]["fence"]["sourceRevision"])


def test_a_plan_reviewed_on_the_merge_preview_applies_after_a_merge_with_the_same_tree(
        tmp_path: Path, sandbox: Sandbox) -> None:
    repo = mono(tmp_path, sandbox)
    plan_file, preview = review_on_preview(repo, tmp_path)
    # Another PR lands on main first; it touches only files outside deploy/.
    branch(repo, "docs-pr", {"docs/runbook.md": "step 2\n", "README.md": "# mono\n"})
    merge(repo, "docs-pr")
    merged = merge(repo, "pr")
    assert merged != preview
    assert out(repo.path, "rev-parse", f"{merged}:./") == \
        json.loads(plan_file.read_text())["desired_tree"]

    applied = repo.run("apply", str(plan_file), cwd=repo.path)
    assert applied.code == Exit.OK, applied.out + applied.err
    assert "Converged" in applied.out and "Apply complete" in applied.out
    assert "made from commit" not in applied.err
    sent = writes(sandbox)
    assert len(sent) == 6, sent  # the reviewed five writes and the creation of ledger

    # The creation was asked again at the merged commit, and that revision was sent.
    saved = jsonplan.from_wire(json.loads(plan_file.read_text()))
    ledger = next(c for c in saved.changes if c.service == "ledger")
    assert ledger.creation is not None and ledger.creation.fence is not None
    assert ledger.creation.fence.source_revision == preview
    assert operation_revision(sandbox, ledger.idempotency_key) == merged

    history = repo.run("history", str(repo.path), "--format", "json")
    assert history.code == Exit.OK, history.err
    run = json.loads(history.out)["runs"][0]
    assert run["commit"] == merged and run["reviewed_commit"] == preview
    text = repo.run("history", str(repo.path))
    assert f"reviewed at {preview[:12]}" in text.out

    again = repo.run("plan", str(repo.path), "--detailed-exitcode")
    assert again.code == Exit.OK, again.out + again.err


def test_a_merge_that_changes_the_desired_tree_is_refused_naming_the_file(
        tmp_path: Path, sandbox: Sandbox) -> None:
    repo = mono(tmp_path, sandbox)
    plan_file, _ = review_on_preview(repo, tmp_path)
    # Another PR lands on main first; it edits a service file (and a doc).
    branch(repo, "catalog-pr", {"deploy/services/catalog.yaml": "# someone else's edit\n",
                                "docs/runbook.md": "step 3\n"})
    merge(repo, "catalog-pr")
    merge(repo, "pr")

    applied = repo.run("apply", str(plan_file), cwd=repo.path)
    assert applied.code == Exit.REFUSED_MISMATCH, applied.out + applied.err
    assert "services/catalog.yaml (modified)" in applied.err
    # Only the files that differ inside the desired-state directory are named.
    assert "search.yaml" not in applied.err and "runbook" not in applied.err
    assert "nothing was sent" in applied.err
    assert writes(sandbox) == []


def test_any_file_added_to_the_desired_state_directory_is_another_tree(
        tmp_path: Path, sandbox: Sandbox) -> None:
    # The binding is the directory's tree, not the YAML the loader reads: a file the plan
    # never read still makes the merged desired state another one than was reviewed.
    repo = mono(tmp_path, sandbox)
    plan_file, _ = review_on_preview(repo, tmp_path)
    branch(repo, "notes-pr", {"deploy/NOTES.md": "who owns what\n"})
    merge(repo, "notes-pr")
    merge(repo, "pr")
    applied = repo.run("apply", str(plan_file), cwd=repo.path)
    assert applied.code == Exit.REFUSED_MISMATCH, applied.out + applied.err
    assert "1 file(s) differ: NOTES.md (added)" in applied.err
    assert writes(sandbox) == []


# -- a saved plan is checked where it is applied (issue 32) ---------------------------


def clone(repo: Repo, tmp: Path, name: str) -> Path:
    """Another checkout of the repo's main (a CI runner's): its own path."""
    top = tmp / name
    git(tmp, "clone", "-q", "--branch", "main", str(repo.path.parent), str(top))
    return top


def test_a_saved_plan_is_checked_against_the_checkout_it_is_applied_in(
        tmp_path: Path, sandbox: Sandbox) -> None:
    repo = mono(tmp_path, sandbox)
    plan_file, preview = review_on_preview(repo, tmp_path)
    branch(repo, "catalog-pr", {"deploy/services/catalog.yaml": "# someone else's edit\n"})
    merge(repo, "catalog-pr")
    merge(repo, "pr")
    merged = clone(repo, tmp_path, "runner")
    # The checkout the plan was made in still holds the reviewed tree: it is not where
    # apply runs, and says nothing about the merged desired state.
    git(repo.path.parent, "checkout", "-q", "--detach", preview)

    applied = repo.run("apply", str(plan_file), cwd=merged)
    assert applied.code == Exit.REFUSED_MISMATCH, applied.out + applied.err
    assert "services/catalog.yaml (modified)" in applied.err
    assert writes(sandbox) == []
    # --repo names the checkout the same way, from anywhere.
    again = repo.run("apply", str(plan_file), "--repo", str(merged / "deploy"), cwd=tmp_path)
    assert again.code == Exit.REFUSED_MISMATCH, again.out + again.err
    assert "services/catalog.yaml (modified)" in again.err
    assert writes(sandbox) == []


def test_a_downloaded_plan_applies_in_the_merged_checkout_when_its_maker_is_gone(
        tmp_path: Path, sandbox: Sandbox) -> None:
    repo = mono(tmp_path, sandbox)
    plan_file, _ = review_on_preview(repo, tmp_path)
    merge(repo, "pr")
    runner = clone(repo, tmp_path, "runner")
    shutil.rmtree(repo.path.parent)  # the planning checkout is gone: an artifact is all
    artifact = tmp_path / "artifact"
    artifact.mkdir()
    downloaded = artifact / "plan.json"
    downloaded.write_bytes(plan_file.read_bytes())

    outside = repo.run("apply", str(downloaded), cwd=artifact)
    assert outside.code == Exit.ERROR, outside.out + outside.err
    assert "not in a git checkout" in outside.err and "--repo" in outside.err
    assert "Traceback" not in outside.err and writes(sandbox) == []

    applied = repo.run("apply", str(downloaded), cwd=runner)
    assert applied.code == Exit.OK, applied.out + applied.err
    assert "not a directory" not in applied.err
    assert len(writes(sandbox)) == 6


def test_a_saved_plan_applied_in_a_checkout_of_another_repository_is_refused(
        tmp_path: Path, sandbox: Sandbox) -> None:
    repo = mono(tmp_path, sandbox)
    plan_file, _ = review_on_preview(repo, tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    (other / "README.md").write_text("# not the fleet\n")
    git(other, "init", "-q", "-b", "main")
    git(other, "add", "-A")
    git(other, "-c", "user.email=ci@example.net", "-c", "user.name=ci", "commit", "-qm", "x")
    applied = repo.run("apply", str(plan_file), cwd=other)
    assert applied.code == Exit.ERROR, applied.out + applied.err
    assert "deploy" in applied.err and "not a directory" in applied.err
    assert writes(sandbox) == []
