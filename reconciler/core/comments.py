"""A living pull-request comment set: which comments are ours, and what turns them into
exactly the bodies we want. Pure.

Owns the comment value (``Comment``: id, body, author), the hidden marker on a part's
first line (``<!-- reconcile:plan path=KEY part=k/n -->``, KEY as it is written in the
marker, already quoted by the caller), and the two decisions the engine's comment loop
(``engine.sync_comment``) executes: ``plan_sync`` (post, edit, keep, delete, in thread
order) and ``sweep_steps`` (after posting: every copy of a part but the lowest id goes,
so concurrent runs agree on the survivor).

Must not: talk to GitHub (``shell.github``), render a body (``render.markdown``) or
sequence the calls (the engine does).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

_MARKER = re.compile(r"<!-- reconcile:plan path=(\S+) part=(\d{1,4})/(\d{1,4}) -->")


@dataclass(frozen=True)
class Comment:
    id: int
    body: str
    author: str  # user.login ("" when GitHub gives none, e.g. a deleted account: "ghost")
    author_is_bot: bool
    url: str = ""  # html_url


@dataclass(frozen=True)
class Owned:
    comment: Comment
    part: int
    total: int


def parse_marker(body: str, marker_key: str) -> tuple[int, int] | None:
    """(part, total) when ``body``'s first line is our marker for ``marker_key``."""
    first = body.split("\n", 1)[0].rstrip("\r")
    match = _MARKER.fullmatch(first)
    if match is None or match.group(1) != marker_key:
        return None
    part, total = int(match.group(2)), int(match.group(3))
    return (part, total) if 1 <= part <= total else None


def owned(comments: Sequence[Comment], marker_key: str,
          is_ours: Callable[[Comment], bool]) -> tuple[list[Owned], list[Comment]]:
    """Our comments for the key (ascending id), and marker comments by someone else."""
    ours: list[Owned] = []
    foreign: list[Comment] = []
    for comment in sorted(comments, key=lambda c: c.id):
        parsed = parse_marker(comment.body, marker_key)
        if parsed is None:
            continue
        if is_ours(comment):
            ours.append(Owned(comment, *parsed))
        else:
            foreign.append(comment)
    return ours, foreign


Verb = Literal["post", "edit", "keep", "delete"]


@dataclass(frozen=True)
class Step:
    verb: Verb
    part: int
    total: int
    comment_id: int | None = None
    body: str = ""
    why: str = ""


def plan_sync(existing: Sequence[Owned], bodies: Sequence[str]) -> list[Step]:
    """What turns ``existing`` into exactly ``bodies``, in thread order.

    Part k reuses the lowest-id comment marked part k while those ids keep increasing
    with k; after a gap (a part missing, or out of order) the rest are posted anew, so
    the parts read in order in the thread. Everything not reused is deleted.
    """
    lowest: dict[int, Owned] = {}
    for item in sorted(existing, key=lambda o: o.comment.id):
        lowest.setdefault(item.part, item)
    total = len(bodies)
    steps: list[Step] = []
    reused: set[int] = set()
    previous, in_order = 0, True
    for k, body in enumerate(bodies, 1):
        slot = lowest.get(k)
        if slot is not None and in_order and slot.comment.id > previous:
            reused.add(slot.comment.id)
            previous = slot.comment.id
            verb: Verb = "keep" if slot.comment.body == body else "edit"
            steps.append(Step(verb, k, total, slot.comment.id, body))
        else:
            in_order = False
            steps.append(Step("post", k, total, None, body))
    for item in existing:
        if item.comment.id in reused:
            continue
        why = (f"duplicate of part {item.part}" if lowest.get(item.part) is not item
               else f"leftover part {item.part}/{item.total}")
        steps.append(Step("delete", item.part, item.total, item.comment.id, why=why))
    return steps


def sweep_steps(existing: Sequence[Owned], total: int) -> list[Step]:
    """After posting: delete every copy of a part but the lowest id, and parts past
    ``total``. Every concurrent run computes the same survivors."""
    seen: set[int] = set()
    steps: list[Step] = []
    for item in sorted(existing, key=lambda o: o.comment.id):
        if item.part > total:
            steps.append(Step("delete", item.part, item.total, item.comment.id,
                              why=f"leftover part {item.part}/{item.total}"))
        elif item.part in seen:
            steps.append(Step("delete", item.part, item.total, item.comment.id,
                              why=f"duplicate of part {item.part} (a concurrent run's)"))
        else:
            seen.add(item.part)
    return steps
