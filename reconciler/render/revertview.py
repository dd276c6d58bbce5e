"""The way back from a failed release in words: the revert itself (``story``: what
failed, what it went back to, where it landed, its key) and how the way back ended
(``way_back``: rolled back and proven, or not, or proposed, or not made). Pure.

Owns every sentence ``reconcile revert``, ``release-hold``, ``apply --on-gate-failure
revert`` and the watcher say about a revert; before, the same outcome was worded in the command, the
engine's run and again merged by dropping repeated lines. The notification of a revert
is ``core.notifying``'s (another medium, its own fields).

The values are the engine's (``engine.RevertRun``, ``engine.ApplyRun``); they are read
through the small protocols below, so this view imports only the core. Whether the
rollback is proven is the gate's word -- the one judge's (``core.reverts``).
"""

from __future__ import annotations

from typing import Protocol

from reconciler.core import reverts
from reconciler.core.outcomes import ApplyReport
from reconciler.core.plans import Plan


class Pull(Protocol):
    """The pull request a revert is proposed in (``shell.pullrequests.PullRequest``)."""

    @property
    def number(self) -> int: ...

    @property
    def url(self) -> str: ...

    @property
    def branch(self) -> str: ...

    @property
    def created(self) -> bool: ...


class Rollback(Protocol):
    """The rollback's apply (``engine.ApplyRun``): the plan judged fresh, what it did."""

    @property
    def plan(self) -> Plan: ...

    @property
    def report(self) -> ApplyReport: ...


class Reverted(Protocol):
    """One revert (``engine.RevertRun``)."""

    @property
    def key(self) -> str: ...

    @property
    def items(self) -> tuple[reverts.Item, ...]: ...

    @property
    def commit(self) -> str | None: ...

    @property
    def already(self) -> bool: ...

    @property
    def pull(self) -> Pull | None: ...

    @property
    def why_pr(self) -> str | None: ...

    @property
    def rollback(self) -> Rollback | None: ...

    @property
    def how(self) -> str | None: ...


def story(done: Reverted) -> list[str]:
    """The revert in words: what failed, what it went back to, where, and the key."""
    lines: list[str] = []
    for item in done.items:
        lines.append(f"{item.service}: release {item.failed} failed; pinned back to "
                     f"{item.to_tag} ({item.to}), the last proven release; {item.failed} "
                     f"held in {item.hold_path}")
        lines += [f"  proven: {source}" for source in item.sources]
        lines += [f"  failed: {line}" for line in item.evidence[:5]]
    if done.pull is not None:
        verb = "opened" if done.pull.created else "already open"
        lines.append(f"pull request #{done.pull.number} {verb}: {done.pull.url} "
                     f"(branch {done.pull.branch}; {done.why_pr})")
    elif done.commit is not None:
        said = "already made (found by its key)" if done.already else "committed"
        lines.append(f"revert {said}: commit {done.commit[:12]}"
                     + (f" (key {done.key})" if done.key else "")
                     + (f"; {done.why_pr}" if done.why_pr and not done.items else ""))
        lines += _landed(done)
    return lines


def next_step(done: Reverted) -> list[str]:
    """``reconcile revert``'s last line: a revert just committed is not yet applied."""
    if done.pull is None and done.commit is not None and not done.already:
        return ["next: reconcile apply (rolls back and proves it on every cluster)"]
    return []


def released(service: str, digest: str, commit: str, path: str, *,
             environment: str | None) -> str:
    """``reconcile release-hold``: the hold removed, by which commit."""
    where = f" in {environment}" if environment is not None else ""
    return (f"hold on {service} {digest} released{where} ({path} removed): commit "
            f"{commit[:12]}")


def way_back(done: Reverted | None, error: str | None, *, landed: bool = True) -> list[str]:
    """How the way back ended, in one sentence (empty: no revert was asked for or
    needed), then where it landed (``landed``: unless the revert's story said it). A
    sharded watcher that reverted some services and left others (their shards are no
    longer its own) says both."""
    told = _ended(done, error, landed=landed)
    if done is not None and error:
        told.append(f"not reverted by this watcher: {error}")
    return told


def after_gate(done: Reverted | None, error: str | None) -> list[str]:
    """``apply --on-gate-failure revert``: the revert's story, then how the way back
    ended -- where it landed said once, in the story, when the story says it."""
    if done is None:
        return way_back(done, error)
    # The story names where a committed revert landed; the sentence after it does not
    # say it again.
    story_landed = done.pull is None and done.commit is not None
    return story(done) + way_back(done, error, landed=not story_landed)


def _landed(done: Reverted) -> list[str]:
    return [f"landed: {done.how}"] if done.how else []


def _ended(done: Reverted | None, error: str | None, *, landed: bool) -> list[str]:
    if done is None:
        return [f"release failed; no revert: {error}"] if error else []
    back = ", ".join(f"{i.service} {i.to_tag} ({i.to[:19]})" for i in done.items)
    if done.pull is not None:
        return [f"release failed; the revert to {back} is proposed in pull request "
                f"#{done.pull.number} ({done.pull.url}) because {done.why_pr}; nothing "
                "rolled back until it is merged"]
    where = _landed(done) if landed else []
    rolled = done.rollback
    if rolled is None:
        return [f"release failed; reverted in git to {back}; the rollback was not applied",
                *where]
    if reverts.rollback_proven(rolled.plan, rolled.report):
        return [f"release failed, rolled back to {back} and proven on every cluster", *where]
    pending = reverts.unproven_lines(rolled.report)
    return [f"release failed, reverted in git to {back}; the rollback is NOT proven: "
            f"{' | '.join(pending) or 'no gate ran'}", *where]
