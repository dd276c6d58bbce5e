"""``shell.pullrequests``: push a branch to a real bare git remote and open the pull
request on the GitHub stand-in over real HTTP on loopback; reruns and races find the
pull request already open instead of opening a second one."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest

from reconciler.shell import pullrequests
from reconciler.shell.pullrequests import PullRequestError
from tests.comment.conftest import TOKEN
from tests.comment.github_standin import StandIn


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path, standin: StandIn) -> Path:
    """A clone whose ``origin`` is a bare repository standing for GitHub's side."""
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    work = tmp_path / "work"
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
    git(work, "config", "user.email", "t@example.com")
    git(work, "config", "user.name", "t")
    (work / "a.yaml").write_text("a: 1\n")
    git(work, "add", "a.yaml")
    git(work, "commit", "-q", "-m", "first")
    git(work, "remote", "add", "origin", str(remote))
    git(work, "push", "-q", "origin", "main")
    (work / "a.yaml").write_text("a: 2\n")
    git(work, "commit", "-q", "-am", "second")
    standin.state.git_remote = str(remote)
    return work


def open_pr(repo: Path, standin: StandIn, **kw: object) -> tuple[pullrequests.Pushed,
                                                                  pullrequests.PullRequest]:
    args: dict[str, object] = dict(api_url=standin.api_url, repo="acme/fleet", token=TOKEN,
                                   branch="reconcile/revert-x", base="main", title="Revert x",
                                   body="because")
    args.update(kw)
    return pullrequests.open_pull_request(repo, **args)  # type: ignore[arg-type]


def test_pushes_the_branch_and_opens_one_pull_request(repo: Path, standin: StandIn) -> None:
    pushed, pull = open_pr(repo, standin)
    head = git(repo, "rev-parse", "HEAD")
    assert pushed.moved and pushed.commit == head
    assert git(repo, "ls-remote", "origin", "refs/heads/reconcile/revert-x").split()[0] == head
    assert pull.created and pull.number in standin.state.pull_requests
    made = standin.state.pull_requests[pull.number]
    assert (made["title"], made["body"], made["head"]["ref"], made["base"]["ref"]) == (
        "Revert x", "because", "reconcile/revert-x", "main")
    assert pull.url.endswith(f"/pull/{pull.number}")

    # A rerun (after a crash, say) neither pushes nor opens again.
    again_pushed, again = open_pr(repo, standin)
    assert not again_pushed.moved and not again.created and again.number == pull.number
    assert len(standin.state.pull_requests) == 1
    assert len(standin.requests("POST")) == 1


def test_two_racing_runs_open_one_pull_request(repo: Path, standin: StandIn) -> None:
    results: list[pullrequests.PullRequest] = []
    errors: list[BaseException] = []

    def one() -> None:
        try:
            results.append(open_pr(repo, standin)[1])
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert len({r.number for r in results}) == 1 and len(standin.state.pull_requests) == 1


def test_a_branch_somebody_moved_is_not_overwritten(repo: Path, standin: StandIn) -> None:
    git(repo, "push", "-q", "origin", "HEAD~1:refs/heads/reconcile/revert-x")
    with pytest.raises(PullRequestError, match="refusing to move"):
        open_pr(repo, standin)
    assert not standin.state.pull_requests
    pushed, pull = open_pr(repo, standin, force=True)
    assert pushed.moved and pull.created


def test_errors_name_the_call_and_never_the_token(repo: Path, standin: StandIn) -> None:
    with pytest.raises(PullRequestError) as caught:
        open_pr(repo, standin, token="ghs_wrongTokenValue0123456789abcdefabcd")
    assert "401" in str(caught.value) and "POST" not in str(caught.value)
    assert "ghs_wrong" not in str(caught.value)
    with pytest.raises(PullRequestError, match="not a usable branch name"):
        open_pr(repo, standin, branch="--force")
    with pytest.raises(PullRequestError, match="no such commit"):
        open_pr(repo, standin, commit="f" * 40)


def test_a_superseded_pull_request_is_closed_only_while_open_on_its_branch(
        repo: Path, standin: StandIn) -> None:
    _, pull = open_pr(repo, standin)

    def close(number: int, branch: str = "reconcile/revert-x") -> bool:
        return pullrequests.close_superseded(
            api_url=standin.api_url, repo="acme/fleet", token=TOKEN, number=number,
            branch=branch, comment="Superseded by #9")

    assert close(pull.number, branch="reconcile/other") is False  # not the branch proposed
    assert standin.state.pull_requests[pull.number]["state"] == "open"
    assert not standin.comments_on(pull.number)
    assert close(pull.number) is True
    assert standin.state.pull_requests[pull.number]["state"] == "closed"
    assert [c["body"] for c in standin.comments_on(pull.number)] == ["Superseded by #9"]
    assert close(pull.number) is False  # closed already: nothing more is said
    assert len(standin.comments_on(pull.number)) == 1
    standin.state.pull_requests[pull.number].update(state="open", merged=True)
    assert close(pull.number) is False  # a merged one is never touched
    with pytest.raises(PullRequestError, match="GET /repos/acme/fleet/pulls/404"):
        close(404)
