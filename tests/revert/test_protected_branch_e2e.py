"""Issue 20, item 3: the revert commits -- "or opens a PR when the branch is protected".
Against the sandbox (sn3 refusing the release) and the GitHub stand-in, whose git remote
refuses a push to a protected branch as GitHub does (``GH006``):

- GitHub says the branch is protected -> a pull request is opened, the branch (local and
  remote) untouched, nothing rolled back, and the output says why;
- not protected -> the revert is committed as before, pushed to the branch the checkout
  tracks, rolled back and proven, and the output says so;
- GitHub says "not protected" but the remote refuses the push (a rule the API did not
  show) -> the pull request after all, nothing landed locally.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from reconciler.exitcodes import Exit
from reconciler.sandbox.launcher import Sandbox
from tests.comment.conftest import TOKEN
from tests.comment.github_standin import StandIn
from tests.e2e_repo import Repo, git
from tests.revert.commits import out, revert_commits
from tests.revert.test_revert_e2e import NEW, OLD, apply_reverting

pytestmark = pytest.mark.integration


@dataclass
class Setup:
    repo: Repo
    remote: Path
    branch: str
    github: StandIn

    def env(self) -> dict[str, str]:
        return {"GITHUB_API_URL": self.github.api_url, "GITHUB_REPOSITORY": "acme/fleet",
                "GITHUB_TOKEN": TOKEN}

    def remote_head(self) -> str:
        return out(self.repo.path, "ls-remote", "origin",
                   f"refs/heads/{self.branch}").split()[0]


@pytest.fixture
def setup(repo_factory: Callable[..., Repo], sandbox: Sandbox,
          tmp_path: Path) -> Iterator[Setup]:
    repo = repo_factory(sandbox, attempts=60, interval_seconds=0.3)
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    git(repo.path, "remote", "add", "origin", str(remote))
    branch = out(repo.path, "branch", "--show-current").strip()
    git(repo.path, "push", "-q", "-u", "origin", branch)  # the checkout tracks it
    github = StandIn().start()
    github.add_user(TOKEN, "github-actions[bot]", bot=True)
    github.state.git_remote = str(remote)
    sandbox.fault("sn3", "refuse-digest", digest=NEW)
    try:
        yield Setup(repo, remote, branch, github)
    finally:
        github.stop()


def checkout_rollbacks(sandbox: Sandbox) -> list[dict[str, object]]:
    return [r for r in sandbox.audit() if r["method"] == "rollbackServiceImageRelease"
            and r.get("serviceId") == "svc-checkout" and r["result"] == "ok"]


def test_a_protected_branch_gets_a_pull_request_and_stays_untouched(
        setup: Setup, sandbox: Sandbox) -> None:
    setup.github.protect(setup.branch)
    head = out(setup.repo.path, "rev-parse", "HEAD").strip()
    code, stdout, stderr = apply_reverting(setup.repo, **setup.env())
    assert code == Exit.NOT_CONVERGED, stdout + stderr
    said = stdout + stderr
    assert "proposed in pull request #" in said, said
    assert f"{setup.branch} is protected on GitHub (acme/fleet)" in said, said
    assert "nothing rolled back until it is merged" in said
    # The branch: untouched here and on the remote; nothing rolled back.
    assert out(setup.repo.path, "rev-parse", "HEAD").strip() == head
    assert setup.remote_head() == head
    assert not revert_commits(setup.repo.path)
    assert not checkout_rollbacks(sandbox)
    # The pull request: from the revert's branch into the protected one, with the story.
    [pull] = setup.github.state.pull_requests.values()
    assert pull["base"]["ref"] == setup.branch
    assert pull["head"]["ref"].startswith("reconcile/rvt-")
    assert "protected on GitHub" in pull["body"] and NEW in pull["body"] \
        and OLD in pull["body"]
    assert out(setup.repo.path, "ls-remote", "origin", f"refs/heads/{pull['head']['ref']}")
    branches = [e for e in setup.github.requests("GET") if "/branches/" in e.path]
    assert [e.path.rsplit("/", 1)[-1] for e in branches] == [setup.branch]


def test_an_unprotected_branch_is_committed_pushed_and_rolled_back_as_before(
        setup: Setup, sandbox: Sandbox) -> None:
    code, stdout, stderr = apply_reverting(setup.repo, **setup.env())
    assert code == Exit.NOT_CONVERGED, stdout + stderr
    assert "release failed, rolled back to checkout v2.3.0" in stderr, stderr
    assert "and proven on every cluster" in stderr
    assert (f"landed: committed to {setup.branch} ({setup.branch} is not protected on "
            f"GitHub (acme/fleet)); pushed to origin/{setup.branch}") in stderr, stderr
    [commit] = revert_commits(setup.repo.path)
    head = out(setup.repo.path, "rev-parse", "HEAD").strip()
    assert commit.startswith(head) and setup.remote_head() == head
    assert not setup.github.state.pull_requests
    assert len(checkout_rollbacks(sandbox)) == 1


def test_a_push_the_remote_refuses_falls_back_to_a_pull_request(
        setup: Setup, sandbox: Sandbox) -> None:
    # The remote refuses pushes to the branch; GitHub's API does not say it is protected.
    setup.github.protect(setup.branch)
    setup.github.state.protected.clear()
    head = out(setup.repo.path, "rev-parse", "HEAD").strip()
    code, stdout, stderr = apply_reverting(setup.repo, **setup.env())
    assert code == Exit.NOT_CONVERGED, stdout + stderr
    said = stdout + stderr
    assert f"git push to origin/{setup.branch} was refused" in said, said
    assert "GH006" in said and "proposed in pull request #" in said
    assert out(setup.repo.path, "rev-parse", "HEAD").strip() == head
    assert setup.remote_head() == head
    assert len(setup.github.state.pull_requests) == 1
    assert not checkout_rollbacks(sandbox)


def test_a_remote_that_cannot_be_reached_does_not_hold_the_rollback_back(
        setup: Setup, sandbox: Sandbox) -> None:
    """No answer from the remote is no refusal: the revert lands in the checkout as it
    did before pushes, the rollback is sent and proven, and the output says it was not
    pushed."""
    git(setup.repo.path, "remote", "set-url", "origin", str(setup.remote) + ".gone")
    code, stdout, stderr = apply_reverting(setup.repo, **setup.env())
    assert code == Exit.NOT_CONVERGED, stdout + stderr
    assert "and proven on every cluster" in stderr, stderr
    assert f"NOT pushed (git push to origin/{setup.branch} failed" in stderr, stderr
    assert len(revert_commits(setup.repo.path)) == 1
    assert not setup.github.state.pull_requests
    assert len(checkout_rollbacks(sandbox)) == 1


def test_a_revert_proposed_for_a_protected_branch_is_told_as_proposed(
        setup: Setup, sandbox: Sandbox) -> None:
    """Notifications (issue 23) of the pull-request path: ``reverted`` as the proposed
    revert's own CDEvent (nothing is rolled back yet: not ``service.rolledback``), the
    failed commit's GitHub status linking the pull request, and no rollback proof told."""
    from cloudevents.core.bindings.http import HTTPMessage, from_binary_event

    from tests.notify import receivers
    from tests.notify.test_notify_e2e import with_notifications

    hook = receivers.start()
    try:
        failed = with_notifications(setup.repo, {
            "environment": "sandbox", "webhooks": [{"url": hook.url}],
            "github": {"repository": "acme/fleet", "apiUrl": setup.github.api_url},
            "delivery": {"attempts": 3, "backoffSeconds": 0.2, "timeoutSeconds": 2.0}})
        git(setup.repo.path, "push", "-q", "origin", setup.branch)
        setup.github.protect(setup.branch)
        done = setup.repo.run("apply", str(setup.repo.path), "--auto-approve",
                              "--on-gate-failure", "revert", timeout=240, **setup.env())
        assert done.code == Exit.NOT_CONVERGED, done.out + done.err
        assert "proposed in pull request #" in done.err, done.err
        [pull] = setup.github.state.pull_requests.values()
        events = []
        for r in hook.wait_for(2):
            data = from_binary_event(HTTPMessage(headers=r.headers, body=r.body)).get_data()
            assert isinstance(data, dict)
            events.append(data)
        kinds = sorted(e["customData"]["kind"] for e in events)
        assert kinds == ["gate_failed", "reverted"], kinds
        [reverted] = [e for e in events if e["customData"]["kind"] == "reverted"]
        assert reverted["context"]["type"] == "dev.cdeventsx.reconcile-revert.proposed.0.1.0"
        revert = reverted["customData"]["revert"]
        assert revert["pullRequest"] == pull["html_url"] and not revert["landed"]
        assert "protected" in revert["why"]
        statuses = [s for s in setup.github.state.statuses if s["sha"] == failed]
        assert [s["state"] for s in statuses] == ["failure", "failure"], statuses
        assert statuses[-1]["target_url"] == pull["html_url"]
        assert f"pull request #{pull['number']}" in statuses[-1]["description"]
    finally:
        hook.stop()


def test_watch_does_not_apply_the_failed_commit_again_while_its_revert_is_a_pull_request(
        setup: Setup, sandbox: Sandbox) -> None:
    """Issue 20's "does not try the failed release again on its next cycle", when the way
    back is a pull request: the failed commit stays HEAD, and a watcher that backed off
    and tried it again would send the refused release once per backoff until someone
    merges. It waits for a newer commit instead, and says so."""
    from tests.watch.events import watch_process

    setup.github.protect(setup.branch)
    with watch_process(str(setup.repo.path), "--log-format", "json", "--apply",
                       "--on-gate-failure", "revert", "--only", "checkout", "--resync", "1",
                       env={**setup.repo.env(), **setup.env()}) as w:
        told = w.wait_for(lambda e: e["event"] == "reverted", timeout=150)
        assert any("proposed in pull request #" in line for line in told.get("lines", [])), \
            told
        waiting = w.wait_for(lambda e: e["event"] == "backoff", timeout=30)
        assert "is not applied again: its revert is proposed as a pull request" \
            in waiting["message"], waiting
        w.drain(12.0)  # past the first backoffs (5 s, then 10 s) at one resync a second
        assert not [e for e in w.seen if e["event"] == "apply"][1:], \
            "the failed commit was applied again"
    [pull] = setup.github.state.pull_requests.values()
    # A watcher started later (a restart, a redeploy) finds it in the journal.
    with watch_process(str(setup.repo.path), "--log-format", "json", "--apply",
                       "--on-gate-failure", "revert", "--only", "checkout", "--resync", "1",
                       env={**setup.repo.env(), **setup.env()}) as again:
        waiting = again.wait_for(lambda e: e["event"] == "backoff", timeout=60)
        assert f"its revert is proposed as pull request #{pull['number']}" \
            in waiting["message"], waiting
        again.drain(4.0)
        assert not [e for e in again.seen if e["event"] == "apply"]
    promotions = [a for a in sandbox.audit() if a["method"] == "promoteServiceImageRelease"
                  and a.get("serviceId") == "svc-checkout"]
    assert len(promotions) == 1
    assert len(setup.github.state.pull_requests) == 1
    assert not checkout_rollbacks(sandbox)
    told = setup.repo.run("history", str(setup.repo.path))
    assert f"REVERT PROPOSED in pull request #{pull['number']}" in told.out, told.out + told.err
