"""Where a reviewed plan lives once CI has saved it: the workflow run and its artifact.

Owns ``Delivery``, the facts the comment's "what next" states so that it is true on the
PR page rather than on the runner: a link to the workflow run that made the plan, the
artifact that holds the saved plan (and a link to it, once uploaded), the file's name
inside the artifact, and the command that applies it after the merge -- or, for a plan
that needs approval (the merge changed what was reviewed), why, and the one action that
applies exactly it.

The values come from the CI environment (``GITHUB_SERVER_URL``, ``GITHUB_REPOSITORY``,
``GITHUB_RUN_ID``) and flags; ``from_env`` builds one. They are not trusted to be
well-formed: a URL that is not plain ``http(s)://host/path`` (no quotes, spaces,
parentheses or brackets that could break out of a Markdown link) is dropped, not
rendered; an identifier that is not ``[A-Za-z0-9._-]`` likewise. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_URL = re.compile(r"https?://[A-Za-z0-9.-]+(?::\d{1,5})?(?:/[A-Za-z0-9._~%/+=-]*)?")
_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")
_REPO = re.compile(r"[A-Za-z0-9._-]{1,100}/[A-Za-z0-9._-]{1,100}")


def link(url: str | None) -> str | None:
    """``url`` when it is safe inside ``[text](url)``, else None."""
    return url if url is not None and _URL.fullmatch(url) else None


def name(value: str | None) -> str | None:
    return value if value is not None and _NAME.fullmatch(value) else None


@dataclass(frozen=True)
class Delivery:
    """The run that made the plan and where its saved plan is.

    ``run_url``/``artifact_url`` are links (checked by ``link``); ``run_id`` the number
    ``gh run download`` takes; ``artifact`` the artifact's name; ``plan_name`` the saved
    plan's file name inside the artifact (what ``reconcile apply`` takes once downloaded).
    """

    run_url: str | None = None
    run_id: str | None = None
    artifact: str | None = None
    artifact_url: str | None = None
    plan_name: str = "plan.json"
    #: why this plan is not applied until someone approves it (the apply-on-merge
    #: workflow's plan of a merge that changed what was reviewed), None: the usual loop
    approval: str | None = None
    #: the one action that applies exactly this saved plan once approved (a command, e.g.
    #: ``gh workflow run … -f commit=… -f plan-run=…``)
    approve: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "run_url", link(self.run_url))
        object.__setattr__(self, "artifact_url", link(self.artifact_url))
        object.__setattr__(self, "run_id", self.run_id if self.run_id and
                           self.run_id.isdigit() else None)
        object.__setattr__(self, "artifact", name(self.artifact))
        object.__setattr__(self, "plan_name", name(self.plan_name) or "plan.json")

    @property
    def known(self) -> bool:
        return bool(self.run_url or self.artifact)

    def download_command(self) -> str | None:
        """``gh run download ID -n NAME``: the saved plan into the current directory."""
        if self.run_id and self.artifact:
            return f"gh run download {self.run_id} -n {self.artifact}"
        return None


def from_env(env: Mapping[str, str], *, artifact: str | None = None,
             artifact_url: str | None = None, plan_name: str | None = None,
             approval: str | None = None, approve: str | None = None) -> Delivery:
    """The run from GitHub Actions' variables (``GITHUB_SERVER_URL``/``GITHUB_REPOSITORY``/
    ``GITHUB_RUN_ID``, and ``GITHUB_RUN_ATTEMPT`` past the first); nothing outside CI."""
    server = (env.get("GITHUB_SERVER_URL") or "").rstrip("/")
    repo = env.get("GITHUB_REPOSITORY") or ""
    run_id = env.get("GITHUB_RUN_ID") or ""
    run_url = None
    if server and _REPO.fullmatch(repo) and run_id.isdigit():
        run_url = f"{server}/{repo}/actions/runs/{run_id}"
        attempt = env.get("GITHUB_RUN_ATTEMPT") or "1"
        if attempt.isdigit() and attempt != "1":
            run_url += f"/attempts/{attempt}"
    return Delivery(run_url=run_url, run_id=run_id or None, artifact=artifact,
                    artifact_url=artifact_url, plan_name=plan_name or "plan.json",
                    approval=approval or None, approve=approve or None)
