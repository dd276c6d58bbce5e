"""``reconcile promote`` in words: each service promoted, already pinned or refused (with
its blockers), the diff of each file, the commit, the heading of the environment's plan,
and the pull request ``--pr`` opens (branch, title, body). Pure.

Owns the wording only; the exit codes and the choice of view are the command's, the
values the engine's (``core.promoted``). Why the branch of one service is
``proposals.branch_name``: it is the branch ``watch --promote-from`` proposes the same
promotion on, so a watcher finds this pull request instead of opening a second one.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from reconciler.core import proposals
from reconciler.core.promoted import PromoteRun, Promotion
from reconciler.core.sanitize import safe
from reconciler.render.said import Said, err, out


def story(result: PromoteRun, *, dry_run: bool) -> list[Said]:
    """Per service what happened (and its diff), then the commit when one was made."""
    said: list[Said] = []
    for item in result.promotions:
        if item.refused:
            said += err(f"✗ {item.service}: not promoted to {result.environment}: "
                        f"{safe(item.refused, 2000)}")
        elif not item.changes:
            said += out(f"{item.service}: {result.environment} already pins {item.digest}")
        else:
            verb = "would promote" if dry_run else "promoted"
            said += out(f"{verb} {item.service} to {result.environment}: {item.evidence}")
            said.append(Said(_diff(item), raw=True))
    if result.commit:
        said += out(f"committed {result.commit[:12]}")
    return said


def _diff(item: Promotion) -> str:
    return "".join(difflib.unified_diff(
        item.before.decode("utf-8", "replace").splitlines(keepends=True),
        item.after.decode("utf-8", "replace").splitlines(keepends=True),
        fromfile=f"a/{item.path}", tofile=f"b/{item.path}"))


def preview(result: PromoteRun) -> list[Said]:
    """What comes before the environment's plan: its heading, or why there is none."""
    if result.preview is not None:
        return out(f"\nplan for {result.environment} with these pins:")
    if result.preview_error:
        return err(f"(no plan: {safe(result.preview_error, 2000)})")
    return []


@dataclass(frozen=True)
class PullRequestText:
    branch: str
    title: str
    body: str


def pull_request(result: PromoteRun, commit: str) -> PullRequestText:
    """``--pr``: the branch, title and body (each promotion's evidence, then the plan in
    Markdown) of the pull request for the services written in ``commit``."""
    from reconciler.render import markdown  # the Markdown view loads only for --pr

    moved = [p for p in result.promotions if p.written]
    branch = proposals.branch_name(result.environment, moved[0].service, moved[0].digest) \
        if len(moved) == 1 and moved[0].digest else \
        (f"reconcile/promote-{result.environment}-"
         + "-".join(p.service for p in moved)[:80] + f"-{commit[:12]}")
    title = (f"Promote {', '.join(p.service for p in moved)} to {result.environment} "
             f"from {result.upstream}")
    body = "\n".join(f"- {p.evidence}" for p in moved)
    if result.preview is not None:
        body += "\n\n" + markdown.render(result.preview)
    return PullRequestText(branch, title, body)


def opened(number: int, url: str, created: bool) -> list[Said]:
    return out(f"pull request #{number} {'opened' if created else 'already open'}: {url}")
