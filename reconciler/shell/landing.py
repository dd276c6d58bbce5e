"""Where a revert commit may land: the branch's protection on GitHub, and the push of the
commit to the branch the checkout tracks.

Owns the two questions ``apply --on-gate-failure revert`` and ``reconcile revert`` ask
before a revert commit lands on the current branch (issue 20: "commit, or open a PR when
the branch is protected"):

- ``protection``: is the branch protected on GitHub? Asked of ``GET
  /repos/{o}/{r}/branches/{branch}`` (its ``protected`` field; read access is enough)
  through the comment client's githubkit setup (``shell.github.CommentsClient``: the token
  never shown), with a short deadline and one bounded retry budget, so a GitHub that is
  away costs seconds, not the rollback. An answer that cannot be had is ``None`` with the
  reason -- the caller commits as before and says it could not ask;
- ``push``: when the current branch tracks a branch of a remote (``branch.<b>.remote``
  and ``.merge``: what ``git clone``, ``actions/checkout`` and ``git push -u`` set up), the
  revert commit is pushed there as a fast-forward (never forced) *before* it lands
  locally, so git's history of record has it. A refusal by the remote -- a protected
  branch's ``pre-receive`` hook (GitHub's ``GH006``), a branch that moved, a rule of the
  server -- is ``Pushed.refused``, in the remote's own words: the caller proposes a pull
  request instead of failing. A push that never reached an answer (no network, no
  credentials to push with) is not a refusal: the caller lands the revert in the checkout
  as before and says it was not pushed -- the rollback must not wait on a remote. Without
  an upstream nothing is pushed.

Must not: decide what to revert, build the commit (``shell.reverting``), or open the pull
request (``shell.pullrequests``).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from reconciler.core.sanitize import safe

_ENV = {"LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0"}
#: One request's deadline and the retry budget of the protection question: a revert
#: waits on it before the rollback is sent.
TIMEOUT, BUDGET = 10.0, 15.0


@dataclass(frozen=True, slots=True)
class Upstream:
    """The branch of a remote the current branch tracks."""

    remote: str
    branch: str  # the remote's branch name (``refs/heads/`` stripped)

    def __str__(self) -> str:
        return f"{self.remote}/{self.branch}"


@dataclass(frozen=True, slots=True)
class Pushed:
    """The push's outcome: ``ok`` (the remote has the commit on the branch), else
    ``refused`` (the remote answered no) or not (it could not be asked), and the words."""

    ok: bool
    refused: bool = False
    said: str = ""


@dataclass(frozen=True, slots=True)
class Protection:
    """GitHub's answer for one branch: ``protected`` (None: unknown) and the words."""

    branch: str
    protected: bool | None
    said: str


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                          timeout=120, check=False, env={**os.environ, **_ENV})


def upstream(root: Path, branch: str) -> Upstream | None:
    """The remote branch ``branch`` tracks, or None (no upstream, or a local one: ``.``)."""
    try:
        remote = _git(root, "config", "--get", f"branch.{branch}.remote").stdout.strip()
        merge = _git(root, "config", "--get", f"branch.{branch}.merge").stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    if not remote or remote == "." or not merge.startswith("refs/heads/"):
        return None
    return Upstream(remote, merge.removeprefix("refs/heads/"))


def protection(api_url: str, repo: str, token: str | None, branch: str) -> Protection:
    """Whether ``branch`` of GitHub's ``repo`` is protected (module docstring)."""
    from reconciler.shell.github import GitHubError
    from reconciler.shell.pullrequests import PullRequestsClient

    try:
        with PullRequestsClient(api_url, repo, token, wait_budget=BUDGET,
                                timeout=TIMEOUT) as client:
            protected = client.protected(branch)
    except GitHubError as exc:
        return Protection(branch, None, f"could not ask GitHub whether {branch} is "
                                        f"protected: {exc}")
    if protected is None:
        return Protection(branch, None, f"GitHub's answer for the branch {branch} of {repo} "
                                        "says nothing of its protection")
    return Protection(branch, protected, f"{branch} is {'' if protected else 'not '}"
                                         f"protected on GitHub ({repo})")


def push(root: Path, target: Upstream, commit: str) -> Pushed:
    """Push ``commit`` to ``target`` as a fast-forward (already there: a rerun after a
    crash, ok). ``--porcelain`` marks each ref the remote rejected with ``!``: that,
    and only that, is a refusal."""
    try:
        done = _git(root, "push", "--porcelain", "--", target.remote,
                    f"{commit}:refs/heads/{target.branch}")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Pushed(False, said=f"git push to {target} failed: {safe(exc, 300)}")
    if done.returncode == 0:
        return Pushed(True)
    said = " ".join(line.strip() for line in (done.stderr + "\n" + done.stdout).splitlines()
                    if line.strip() and not line.startswith(("To ", "Done")))
    refused = any(line.startswith("!") for line in done.stdout.splitlines())
    verb = "was refused" if refused else "failed"
    return Pushed(False, refused, f"git push to {target} {verb}: {safe(said, 500)}")
