"""``reconcile promote`` against two sandboxes: it writes exactly the digest staging proves
(every other byte of prod's file kept), commits it with the evidence, opens the pull
request on the GitHub stand-in -- and refuses, writing nothing, while the soak runs."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from reconciler.exitcodes import Exit
from reconciler.sandbox.launcher import Sandbox
from tests.comment.conftest import TOKEN
from tests.comment.github_standin import StandIn
from tests.promotion.pipeline_repo import NEW, OLD, PipelineRepo, make_pipeline_repo
from tests.promotion.test_soak_e2e import apply

pytestmark = pytest.mark.integration


def repo_with_old_prod(tmp_path: Path, sandbox_factory: Callable[..., Sandbox],
                       soak: str) -> PipelineRepo:
    repo = make_pipeline_repo(tmp_path, sandbox_factory(name="staging"),
                              sandbox_factory(name="prod"), soak=soak)
    repo.pin("prod", OLD, "v2.3.0")  # prod pins what it runs; staging pins the new one
    apply(repo, "staging")
    return repo


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                          text=True).stdout


def test_promote_writes_what_staging_proves_commits_the_evidence_and_opens_a_pr(
        tmp_path: Path, sandbox_factory: Callable[..., Sandbox], standin: StandIn) -> None:
    repo = repo_with_old_prod(tmp_path, sandbox_factory, soak="1s")
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    git(repo.path, "remote", "add", "origin", str(remote))
    git(repo.path, "push", "-q", "origin", "HEAD:refs/heads/main")
    standin.state.git_remote = str(remote)
    before = repo.service_file("prod").read_bytes()
    time.sleep(1.1)

    result = repo.run("promote", "checkout", "--to", "prod", "-C", str(repo.path), "--pr",
                      "--repo", "acme/fleet", "--api-url", standin.api_url,
                      GITHUB_TOKEN=TOKEN)

    assert result.code == Exit.OK, result.out + result.err
    after = repo.service_file("prod").read_bytes()
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines(), strict=True)
               if a != b]
    assert changed == [(f"  digest: {OLD}".encode(), f"  digest: {NEW}".encode()),
                       (b"  tag: v2.3.0", b"  tag: v2.4.0")]
    message = git(repo.path, "log", "-1", "--format=%B")
    assert message.startswith("promote checkout to prod from staging")
    assert f"checkout: {NEW} (v2.4.0) proven on staging clusters sn1, sn2, sn3 since" in message
    assert git(repo.path, "status", "--porcelain") == ""
    [pull] = standin.state.pull_requests.values()
    assert pull["base"]["ref"] == "main"
    assert pull["head"]["ref"].startswith("reconcile/promote-prod-checkout-")
    assert "proven on staging clusters sn1, sn2, sn3" in pull["body"]
    assert "promote checkout" in pull["body"]  # the plan, as Markdown
    assert "pull request #" in result.out
    # The written pin is what prod's plan now promotes, with nothing blocking it.
    plan = repo.run("plan", str(repo.path), "--env", "prod", "--detailed-exitcode")
    assert plan.code == Exit.CHANGES, plan.out + plan.err


def test_promote_pr_without_its_repository_or_token_writes_nothing(
        tmp_path: Path, sandbox_factory: Callable[..., Sandbox]) -> None:
    """--pr's prerequisites are asked before anything is written: a promotion committed
    and then refused its pull request would leave a commit to undo."""
    repo = repo_with_old_prod(tmp_path, sandbox_factory, soak="1s")
    before = repo.service_file("prod").read_bytes()
    head = git(repo.path, "rev-parse", "HEAD")
    time.sleep(1.1)
    promote = ("promote", "checkout", "--to", "prod", "-C", str(repo.path), "--pr")
    no_repo = repo.run(*promote, GITHUB_REPOSITORY="", GITHUB_TOKEN=TOKEN)
    no_token = repo.run(*promote, "--repo", "acme/fleet", GITHUB_TOKEN="")
    bad_token = repo.run(*promote, "--repo", "acme/fleet", "--token-env", "PR_TOKEN",
                         PR_TOKEN="ghp_one two")
    for result, said in ((no_repo, "--pr needs --repo OWNER/NAME"),
                         (no_token, "--pr needs a GitHub token in GITHUB_TOKEN"),
                         (bad_token, "PR_TOKEN does not hold a token")):
        assert result.code == Exit.USAGE, result.out + result.err
        assert said in result.err, result.err
        assert "Traceback" not in result.err
    assert repo.service_file("prod").read_bytes() == before
    assert git(repo.path, "rev-parse", "HEAD") == head
    assert git(repo.path, "status", "--porcelain") == ""


def test_promote_refuses_while_the_soak_runs_and_writes_nothing(
        tmp_path: Path, sandbox_factory: Callable[..., Sandbox]) -> None:
    repo = repo_with_old_prod(tmp_path, sandbox_factory, soak="1h")
    before = repo.service_file("prod").read_bytes()
    head = git(repo.path, "rev-parse", "HEAD")
    result = repo.run("promote", "--all", "--to", "prod", "-C", str(repo.path), "--commit")
    assert result.code == Exit.REFUSED_NO_GO, result.out + result.err
    assert "checkout: not promoted to prod: not_soaked:" in result.err
    assert "eligible" in result.err
    assert repo.service_file("prod").read_bytes() == before
    assert git(repo.path, "rev-parse", "HEAD") == head
