"""``reconcile comment``: the pull request's comment(s) written in place, owned by a marker
and an author, split under GitHub's size limit (sends through ``shell.github``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from reconciler.core import (
    comments,
)
from reconciler.core.comments import Comment, Owned

if TYPE_CHECKING:  # the GitHub client (githubkit) loads only when a comment is written
    from reconciler.shell.github import CommentsClient


# -- the pull-request comment ---------------------------------------------------------------

#: The comment bodies, given our comments there now and a size limit (renders, sends nothing).
Bodies = Callable[[Sequence[Owned], int], list[str]]


@dataclass(frozen=True)
class CommentRun:
    """What ``sync_comment`` left on the pull request."""

    parts: int
    url: str  # the first part's, "" when GitHub named none


def comment_ownership(client: CommentsClient | None, author: str | None,
                      ) -> tuple[Callable[[Comment], bool], str]:
    """Which comments count as ours, and how that was decided: ``--author``, else the
    token's login, else (an installation token, which ``GET /user`` refuses) any bot."""
    token = client is not None and client.authenticated
    if author:
        wanted = author.lower()
        return (lambda c: c.author.lower() == wanted), f"comments by {author}"
    login = client.identity() if client is not None and token else None
    if login:
        mine = login.lower()
        return (lambda c: c.author.lower() == mine), f"comments by {login}"
    if token:
        return (lambda c: c.author_is_bot), "comments by a bot account (installation token)"
    return (lambda c: True), "comments by anyone (no token to tell whose)"


def comment_listing(client: CommentsClient, pr: int, marker_key: str, author: str | None,
                    ) -> tuple[list[Owned], list[Comment], str]:
    """Our parts for the key now, the marker comments by others, and whose count as ours."""
    is_ours, whose = comment_ownership(client, author)
    ours, foreign = comments.owned(client.list_comments(pr), marker_key, is_ours)
    return ours, foreign, whose


def sync_comment(client: CommentsClient, pr: int, marker_key: str, bodies: Bodies,
                 author: str | None, *, limit: int, say: Callable[[str], None],
                 warn: Callable[[str], None]) -> CommentRun:
    """Make the key's comment set on ``pr`` exactly ``bodies``: edit in place, post what
    is new, delete what is left over; after posting, re-list and sweep the copies a
    concurrent run made (``core.comments``). A part GitHub finds too long (it counts
    differently) is split smaller and the whole set written again, at most four times."""
    from reconciler.shell.github import GitHubError

    is_ours, _ = comment_ownership(client, author)
    for attempt in range(4):
        try:
            return _write_comment(client, pr, marker_key, bodies, limit, is_ours, say, warn)
        except GitHubError as exc:
            if not exc.body_too_long or attempt == 3:
                if exc.body_too_long:
                    raise GitHubError(f"{exc} (a part was up to {limit:,} characters;"
                                      " GitHub would not take it)", exc.status) from None
                raise
            limit = int(limit * 0.7)  # GitHub counted more than we did: split smaller
            warn(f"github: a part was too long for GitHub; splitting within {limit:,}")
    raise AssertionError("unreachable")  # pragma: no cover


def _write_comment(client: CommentsClient, pr: int, marker_key: str, make: Bodies, limit: int,
                   is_ours: Callable[[Comment], bool], say: Callable[[str], None],
                   warn: Callable[[str], None]) -> CommentRun:
    from reconciler.shell.github import GitHubError

    ours, foreign = comments.owned(client.list_comments(pr), marker_key, is_ours)
    bodies = make(ours, limit)
    if foreign:
        warn(f"note: {len(foreign)} comment(s) carry this marker but are not ours; "
             "left alone")
    steps = comments.plan_sync(ours, bodies)
    urls = {item.comment.id: item.comment.url for item in ours}
    posted = False
    first_url = ""
    for step in steps:
        if step.verb == "keep":
            first_url = first_url or urls.get(step.comment_id or 0, "")
            say(f"unchanged part {step.part}/{step.total}: comment {step.comment_id}")
        elif step.verb == "edit":
            assert step.comment_id is not None
            try:
                reply = client.update(step.comment_id, step.body)
                say(f"edited part {step.part}/{step.total}: comment {reply.id}")
            except GitHubError as exc:
                if exc.status != 404:
                    raise
                reply = client.create(pr, step.body)  # deleted meanwhile (a concurrent sweep)
                posted = True
                say(f"posted part {step.part}/{step.total}: comment {reply.id}")
            first_url = first_url or reply.url
        elif step.verb == "post":
            reply = client.create(pr, step.body)
            posted = True
            first_url = first_url or reply.url
            say(f"posted part {step.part}/{step.total}: comment {reply.id}")
    for step in steps:
        if step.verb == "delete" and step.comment_id is not None:
            client.delete(step.comment_id)
            say(f"deleted comment {step.comment_id} ({step.why})")
    if posted:
        ours_now, _ = comments.owned(client.list_comments(pr), marker_key, is_ours)
        for step in comments.sweep_steps(ours_now, len(bodies)):
            if step.comment_id is not None and client.delete(step.comment_id):
                say(f"deleted comment {step.comment_id} ({step.why})")
    return CommentRun(parts=len(bodies), url=first_url)
