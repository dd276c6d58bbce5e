"""Telling a coordinated group's outcome once per commit (``watch --coordinate`` with
``notifications``; issue 32).

Owns the delivery side of the group's word: ``GroupNotifier`` stands where a lone
watcher's ``Notifier`` stands (the plan and the apply tell it their outcome), but it
never sends a member's own outcome. It hands the outcomes of the member's shards to the
group (``GroupShards``: the engine's sharded steps, which record them in etcd, fenced
on each shard's owner key, read the set back and claim, once, what is to be said), and
delivers only what the group's verdict (``core.groupoutcome``) says, when this member
won the claim:

- the final word (one success, one failure, one NO-GO per commit), after any pending
  word still being delivered by another member (its in-flight key), so a late pending
  never lands over it;
- until the set is complete, a pending commit status "k of N shards reported", told
  again each time k moves (to GitHub only: chat and webhooks hear the outcome, not the
  count).

A member that owns no shard records nothing and says nothing; a member that cannot reach
etcd records nothing, says so (logged) and sends nothing -- the group's status stays
pending, never success. The way back (``way_back``) is told as a lone watcher tells it.

Must not decide the verdict (``core.groupoutcome``) nor call etcd itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Protocol

from reconciler.core import groupoutcome
from reconciler.core.groupoutcome import GroupVerdict, ShardOutcome
from reconciler.core.notifying import Notification
from reconciler.core.outcomes import ApplyReport
from reconciler.core.plans import Plan
from reconciler.core.sanitize import safe
from reconciler.shell.applying import crash_point
from reconciler.shell.notifying import Deliveries, Notifier, log

#: What the final word waits at most for a pending word in flight (seconds), beyond the
#: deliveries' own bound.
INFLIGHT_POLL = 0.2


@dataclass(frozen=True)
class Word:
    """What the group answered a member's record: the verdict read back (None: nothing
    of ours was recorded -- no shard held, or all lost), and what this member won the
    claim to say (``final``, ``pending`` or None)."""

    verdict: GroupVerdict | None
    role: str | None = None


#: (outcome, the owner-key revision of its shard when the plan or apply started)
Held = tuple[tuple[ShardOutcome, int], ...]


class GroupShards(Protocol):
    """The engine's side (``engine.ShardedWatchSteps``)."""

    group: str | None

    def outcomes_of(self, plan: Plan, report: ApplyReport | None) -> Held:
        """This member's shards' outcomes, each with the owner-key revision it was made
        under (the record is fenced on it: a shard lost since is not recorded)."""
        ...

    async def word(self, commit: str, outcomes: Held) -> Word: ...

    async def pending_in_flight(self, commit: str) -> bool: ...

    async def pending_delivered(self, commit: str, reported: int) -> None: ...


class GroupNotifier(Notifier):
    """A member's notifier: records, and delivers only the group's word."""

    def __init__(self, inner: Notifier, shards: GroupShards,
                 unreachable: type[Exception]) -> None:
        super().__init__(inner.config, inner.deliveries.targets, inner.memory.path.parent,
                         environment=inner.environment, applying=inner.applying,
                         count=inner.deliveries.count)
        self.shards = shards
        self.unreachable = unreachable
        github = [t for t in inner.deliveries.targets if t.kind == "github"]
        self.pending_deliveries = Deliveries(github, inner.config.delivery,
                                             count=inner.deliveries.count)
        self.telling: set[asyncio.Task[None]] = set()
        self.said: list[Notification] = []  # what this member delivered (tests, logs)

    def outcome(self, plan: Plan, report: ApplyReport | None = None,
                ) -> tuple[Notification, ...]:
        """Record this member's shards' outcome in the background; nothing is said here
        (the member that completes the set says the group's word)."""
        outcomes = self.shards.outcomes_of(plan, report)
        if not outcomes or plan.commit is None:
            return ()
        if report is not None:  # kill -9 between a member's apply and its report (tests)
            crash_point("before-group-report")
        task = asyncio.get_running_loop().create_task(self._tell(plan, plan.commit, outcomes))
        self.telling.add(task)
        task.add_done_callback(self.telling.discard)
        return ()

    async def _tell(self, plan: Plan, commit: str, outcomes: Held) -> None:
        group = self.shards.group or "?"
        try:
            word = await self.shards.word(commit, outcomes)
        except self.unreachable as exc:
            log.warning("notify: the outcome of shard(s) %s at commit %s is not recorded "
                        "(etcd unreachable: %s); this watcher says nothing about the "
                        "commit, and the group's status stays pending",
                        ", ".join(str(o.shard) for o, _ in outcomes), commit[:12],
                        safe(exc, 300))
            return
        verdict = word.verdict
        if verdict is None or word.role is None:
            return
        if word.role == "pending":
            note = groupoutcome.pending(verdict, plan, environment=self.environment,
                                        group=group)
            before = set(self.pending_deliveries.tasks)
            self.pending_deliveries.submit([note])
            started = set(self.pending_deliveries.tasks) - before
            try:
                if started:
                    await asyncio.gather(*started, return_exceptions=True)
                    self.said.append(note)
            finally:
                # Unreachable: the in-flight key goes with this member's lease.
                with contextlib.suppress(self.unreachable):
                    await self.shards.pending_delivered(commit, len(verdict.reported))
            return
        final = groupoutcome.notification(verdict, plan, environment=self.environment,
                                          group=group)
        if final is None or final.kind not in self.kinds:
            return
        # A pending word another member is still delivering must land first.
        bound = time.monotonic() + self.config.delivery.drain_seconds + \
            self.config.delivery.timeout_seconds * self.config.delivery.attempts
        while time.monotonic() < bound:
            try:
                if not await self.shards.pending_in_flight(commit):
                    break
            except self.unreachable:
                break
            await asyncio.sleep(INFLIGHT_POLL)
        self.deliveries.submit([final])
        self.said.append(final)

    async def settle(self, seconds: float) -> None:
        """Wait up to ``seconds`` for the records still being made (a clean stop)."""
        pending = set(self.telling)
        if pending:
            _, late = await asyncio.wait(pending, timeout=seconds)
            for task in late:
                task.cancel()
        await self.pending_deliveries.drain(min(5.0, self.config.delivery.drain_seconds))
