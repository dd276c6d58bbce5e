"""Pushing a branch and opening (or finding the already-open) pull request for it.

Owns the two outside effects a change proposed for review needs: ``git push`` of one
commit to one branch of a remote (the ``git`` command, never ``.git`` by hand), and
GitHub's pull-request endpoints (``GET``/``POST /repos/{o}/{r}/pulls``, and closing a
superseded one: ``GET``/``PATCH .../pulls/{n}`` with a comment) through the same
githubkit client ``reconcile comment`` uses (``shell.github.CommentsClient``: its
token handling, bounded retry, API version header and error messages without the
token). It decides nothing about *what* is proposed: the caller gives the branch name,
the base, the title and the body; ``revert --pr`` and ``promote --pr`` are callers.

Idempotent by construction, so a rerun after a crash, or a second process racing the
first, ends with one branch and one pull request:

- the push sends a commit id; a branch already at that commit is left as it is, and a
  branch at another commit is refused unless the caller says ``force`` (then it is
  replaced with ``--force-with-lease`` against what was just read, so a third writer's
  push in between is not overwritten);
- ``open_pull_request`` first looks for an open pull request from that branch into that
  base and returns it; only when there is none does it create one, and when GitHub
  answers the create with "A pull request already exists" (a concurrent run won the
  race) it looks again and returns that one.

Must not: print (the command reports), decide the branch name or the body, or retry a
POST on a server error (it may have been applied; the look-up above finds it on rerun).
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciler.core.sanitize import safe
from reconciler.shell.github import _HEADERS, CommentsClient, GitHubError

_ENV = {"LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0"}
# git's own rule for a branch name is longer (``git check-ref-format``, asked below);
# this keeps option-like and whitespace names out before git sees them.
_BRANCH = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9._/-]*$")


class PullRequestError(Exception):
    """The branch could not be pushed or the pull request could not be opened; the
    message names what was asked and what git or GitHub said (never the token)."""


@dataclass(frozen=True, slots=True)
class PullRequest:
    """An open pull request: its number, its page, the branch it proposes, and whether
    this call created it (False: it was already open, e.g. a rerun or a racing run)."""

    number: int
    url: str
    branch: str
    base: str
    created: bool


@dataclass(frozen=True, slots=True)
class Pushed:
    """The outcome of ``push_branch``: the commit now at the branch, and whether this
    call moved it (False: the branch already pointed at that commit)."""

    branch: str
    commit: str
    moved: bool


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=120, check=False, env={**os.environ, **_ENV})
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PullRequestError(f"git {args[0]} failed in {root}: {safe(exc)}") from None


def check_branch(branch: str) -> str:
    if not _BRANCH.match(branch) or _git(Path("."), "check-ref-format", "--branch",
                                         branch).returncode != 0:
        raise PullRequestError(f"not a usable branch name: {safe(branch)}")
    return branch


def remote_head(root: Path, remote: str, branch: str) -> str | None:
    """The commit ``branch`` points at on ``remote`` now (asked of the remote, not of a
    remote-tracking ref that may be stale), or None when the branch does not exist."""
    done = _git(root, "ls-remote", "--heads", "--", remote, f"refs/heads/{branch}")
    if done.returncode != 0:
        raise PullRequestError(f"git ls-remote {safe(remote)} failed in {root}: "
                               f"{safe(done.stderr.strip(), 300)}")
    for line in done.stdout.splitlines():
        oid, _, ref = line.partition("\t")
        if ref == f"refs/heads/{branch}":
            return oid
    return None


def push_branch(root: Path, branch: str, *, commit: str = "HEAD", remote: str = "origin",
                force: bool = False, keep_existing: bool = False) -> Pushed:
    """Make ``branch`` on ``remote`` point at ``commit`` (a commit id or a ref of ``root``).

    A branch already at that commit is not pushed again. A branch at another commit is a
    refusal unless ``force``: a branch somebody else pushed to is theirs -- or, with
    ``keep_existing``, left where it is (the caller's branch names say *what* is
    proposed, so an existing branch already proposes it: ``watch --promote-from`` after
    a restart, when the branch it watches has moved since the first push)."""
    check_branch(branch)
    resolved = _git(root, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
    if resolved.returncode != 0:
        raise PullRequestError(f"no such commit in {root}: {safe(commit)}")
    oid = resolved.stdout.strip()
    current = remote_head(root, remote, branch)
    if current == oid:
        return Pushed(branch, oid, moved=False)
    if current is not None and keep_existing:
        return Pushed(branch, current, moved=False)
    args = ["push", "--porcelain", "--quiet"]
    if current is not None:
        if not force:
            raise PullRequestError(
                f"branch {branch} on {safe(remote)} is at {current[:12]}, not {oid[:12]}: "
                "refusing to move a branch somebody else may have pushed to")
        args.append(f"--force-with-lease=refs/heads/{branch}:{current}")
    done = _git(root, *args, "--", remote, f"{oid}:refs/heads/{branch}")
    if done.returncode != 0:
        if remote_head(root, remote, branch) == oid:
            # A racing run pushed the same commit first (git: "cannot lock ref"): the
            # branch is where we wanted it.
            return Pushed(branch, oid, moved=False)
        raise PullRequestError(f"git push of {oid[:12]} to {branch} on {safe(remote)} failed: "
                               f"{safe((done.stderr or done.stdout).strip(), 300)}")
    return Pushed(branch, oid, moved=True)


def _pull(data: Any, branch: str, base: str, created: bool) -> PullRequest:
    if not isinstance(data, dict) or not isinstance(data.get("number"), int):
        raise GitHubError("GitHub answered with something that is not a pull request")
    return PullRequest(number=data["number"], url=str(data.get("html_url") or ""),
                       branch=branch, base=base, created=created)


class PullRequestsClient(CommentsClient):
    """One repository's pull requests, through the comment client's githubkit setup."""

    def __enter__(self) -> PullRequestsClient:
        super().__enter__()
        return self

    def find_open(self, branch: str, base: str) -> PullRequest | None:
        """The open pull request from ``branch`` (of this repository) into ``base``."""
        what = f"GET /repos/{self.owner}/{self.name}/pulls"
        with self._errors(what):
            reply = self._github.rest.pulls.list(
                self.owner, self.name, state="open", head=f"{self.owner}:{branch}",
                base=base, per_page=100, headers=_HEADERS)
            items = reply.json()
        if not isinstance(items, list):
            raise GitHubError(f"{what}: GitHub answered with something that is not a list")
        for item in items:
            head = item.get("head") if isinstance(item, dict) else None
            # GitHub filters by head and base; checked again so a server that ignores a
            # filter cannot hand us somebody else's pull request.
            if (isinstance(head, dict) and head.get("ref") == branch
                    and isinstance(item.get("base"), dict)
                    and item["base"].get("ref") == base):
                return _pull(item, branch, base, created=False)
        return None

    def protected(self, branch: str) -> bool | None:
        """``GET /repos/{o}/{r}/branches/{branch}``'s ``protected`` field (read access is
        enough to see it); None when the answer carries none."""
        what = f"GET /repos/{self.owner}/{self.name}/branches/{branch}"
        with self._errors(what):
            data = self._github.rest.repos.get_branch(self.owner, self.name, branch,
                                                      headers=_HEADERS).json()
        found = data.get("protected") if isinstance(data, dict) else None
        return found if isinstance(found, bool) else None

    def open(self, branch: str, base: str, title: str, body: str) -> PullRequest:
        """The open pull request from ``branch`` into ``base``, created if there is none."""
        found = self.find_open(branch, base)
        if found is not None:
            return found
        what = f"POST /repos/{self.owner}/{self.name}/pulls"
        try:
            with self._errors(what):
                reply = self._github.rest.pulls.create(
                    self.owner, self.name, head=branch, base=base, title=title, body=body,
                    headers=_HEADERS)
                return _pull(reply.json(), branch, base, created=True)
        except GitHubError as exc:
            if exc.status == 422 and "already exists" in str(exc).lower():
                again = self.find_open(branch, base)
                if again is not None:
                    return again
            raise

    def close_superseded(self, number: int, branch: str, comment: str) -> bool:
        """Close pull request ``number`` with ``comment``, when it is still open and still
        proposes ``branch``; False when it is not (merged, closed by someone, or another
        branch's now): a pull request a person acted on is left as they left it."""
        where = f"/repos/{self.owner}/{self.name}"
        with self._errors(f"GET {where}/pulls/{number}"):
            data = self._github.rest.pulls.get(self.owner, self.name, number,
                                               headers=_HEADERS).json()
        head = data.get("head") if isinstance(data, dict) else None
        if not (isinstance(data, dict) and data.get("state") == "open"
                and not data.get("merged") and isinstance(head, dict)
                and head.get("ref") == branch):
            return False
        with self._errors(f"POST {where}/issues/{number}/comments"):
            self._github.rest.issues.create_comment(self.owner, self.name, number,
                                                    body=comment, headers=_HEADERS)
        with self._errors(f"PATCH {where}/pulls/{number}"):
            self._github.rest.pulls.update(self.owner, self.name, number, state="closed",
                                           headers=_HEADERS)
        return True


def close_superseded(*, api_url: str, repo: str, token: str | None, number: int,
                     branch: str, comment: str) -> bool:
    """``PullRequestsClient.close_superseded`` on GitHub's ``repo`` (OWNER/NAME)."""
    try:
        with PullRequestsClient(api_url, repo, token) as client:
            return client.close_superseded(number, branch, comment)
    except GitHubError as exc:
        raise PullRequestError(str(exc)) from None


def open_pull_request(root: Path, *, api_url: str, repo: str, token: str | None,
                      branch: str, base: str, title: str, body: str,
                      commit: str = "HEAD", remote: str = "origin",
                      force: bool = False,
                      keep_existing: bool = False) -> tuple[Pushed, PullRequest]:
    """Push ``commit`` of ``root`` to ``branch`` on ``remote``, then open (or find) the
    pull request from it into ``base`` on GitHub's ``repo`` (OWNER/NAME)."""
    check_branch(base)
    pushed = push_branch(root, branch, commit=commit, remote=remote, force=force,
                         keep_existing=keep_existing)
    try:
        with PullRequestsClient(api_url, repo, token) as client:
            pull = client.open(branch, base, title, body)
    except GitHubError as exc:
        raise PullRequestError(str(exc)) from None
    return pushed, pull
