"""``shell.groupnotify.GroupNotifier``: a member records, and delivers only the group's
word -- the final one when it won the claim, the pending one to GitHub only, nothing
when etcd cannot be reached (said in the log) and nothing for a member with no shard.
The group's side is a stand-in here (the etcd side runs for real in
test_group_outcome_e2e.py); the sinks are in-process recorders."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from reconciler.core.desired import Delivery, Notifications
from reconciler.core.groupoutcome import ShardOutcome, ShardState, aggregate
from reconciler.core.notifying import Kind, Notification
from reconciler.core.outcomes import ApplyReport
from reconciler.core.plans import Plan
from reconciler.shell.coordination import CoordinationError
from reconciler.shell.groupnotify import GroupNotifier, Held, Word
from reconciler.shell.notifying import Notifier
from tests.notify.test_deciding import A, plan, proof


@dataclass
class Recorder:
    kind: str
    name: str
    kinds: frozenset[Kind] = frozenset(Kind)
    got: list[Notification] = field(default_factory=list)

    async def send(self, note: Notification, timeout: float) -> None:
        self.got.append(note)


@dataclass
class Shards:
    """The group as the engine answers: ``answer`` (or ``error``) to every record."""

    answer: Word | None = None
    error: Exception | None = None
    held: Held = ()
    group: str | None = "g"
    words: list[str] = field(default_factory=list)
    cleared: list[str] = field(default_factory=list)

    def outcomes_of(self, plan: Plan, report: ApplyReport | None) -> Held:
        return self.held

    async def word(self, commit: str, outcomes: Held) -> Word:
        self.words.append(commit)
        if self.error is not None:
            raise self.error
        assert self.answer is not None
        return self.answer

    async def pending_in_flight(self, commit: str) -> bool:
        return False

    async def pending_delivered(self, commit: str, reported: int) -> None:
        self.cleared.append(commit)


def notifier(tmp_path: Path, shards: Shards) -> tuple[GroupNotifier, Recorder, Recorder]:
    hook, github = Recorder("webhook", "webhooks[0]"), Recorder("github", "github")
    config = Notifications(environment="prod", delivery=Delivery(attempts=1))
    inner = Notifier(config, [hook, github], tmp_path, environment="prod", applying=True)
    return GroupNotifier(inner, shards, CoordinationError), hook, github


def told(notifier: GroupNotifier, made: Plan) -> None:
    async def run() -> None:
        notifier.outcome(made)
        await notifier.settle(5)
        await notifier.deliveries.drain(5)
    asyncio.run(run())


MINE: Held = ((ShardOutcome(0, ShardState.PROVEN, 1), 7),)


def test_a_member_with_no_shard_says_nothing(tmp_path: Path) -> None:
    shards = Shards(held=())
    group, hook, github = notifier(tmp_path, shards)
    told(group, plan(proofs=(proof("checkout"),)))
    assert shards.words == [] and hook.got == [] and github.got == []


def test_an_unreachable_etcd_records_nothing_sends_nothing_and_says_so(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    shards = Shards(held=MINE, error=CoordinationError("etcd: no endpoint answered"))
    group, hook, github = notifier(tmp_path, shards)
    with caplog.at_level(logging.WARNING, logger="reconcile.notify"):
        told(group, plan(proofs=(proof("checkout"),)))
    assert hook.got == [] and github.got == []
    assert "not recorded (etcd unreachable" in caplog.text
    assert "stays pending" in caplog.text


def test_the_final_word_goes_to_every_sink_the_pending_one_to_github_only(
        tmp_path: Path) -> None:
    complete = aggregate(A, 1, {0: MINE[0][0]}, applying=True)
    group, hook, github = notifier(tmp_path, Shards(held=MINE, answer=Word(complete,
                                                                           "final")))
    told(group, plan(proofs=(proof("checkout"),)))
    assert [n.kind for n in hook.got] == [Kind.CONVERGED]
    assert [n.kind for n in github.got] == [Kind.CONVERGED]
    half = aggregate(A, 2, {0: MINE[0][0]}, applying=True)
    shards = Shards(held=MINE, answer=Word(half, "pending"))
    group, hook, github = notifier(tmp_path, shards)
    told(group, plan(proofs=(proof("checkout"),)))
    assert hook.got == []
    [note] = github.got
    assert note.spec.commit_state == "pending" and "1 of 2 shards reported" in note.summary
    assert shards.cleared == [A]  # no longer in flight: a final word may go


def test_a_member_that_lost_the_claim_says_nothing(tmp_path: Path) -> None:
    complete = aggregate(A, 1, {0: MINE[0][0]}, applying=True)
    group, hook, github = notifier(tmp_path, Shards(held=MINE, answer=Word(complete)))
    told(group, plan(proofs=(proof("checkout"),)))
    assert hook.got == [] and github.got == []
