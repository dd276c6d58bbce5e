"""What ``watch --env ENV --promote-from UP`` does about each service at one observation.

Owns, for proposing promotions as pull requests:

- the deterministic branch of a proposal: one per (environment, service, digest), so a
  rerun, a restart or a second watcher finds the same branch and the same pull request;
- the decision per service (``decide``): nothing to promote (UP has no rollout), already
  pinned in ENV, already proposed (the journal says so), waiting (blockers, and *when* it
  becomes eligible when the rules can say), or propose -- naming the older proposal of
  another digest it supersedes;
- never proposing what would take ENV back (``older_than_pinned``): a digest ENV's control
  plane first observed before the one ENV pins (a release made for ENV alone, a hotfix,
  after the previous environment's) is said, not proposed;
- what is new enough to say (``Decision.key``: a promotion still soaking is said once per
  eligible time, not at every resync) and when the watcher must look again
  (``wake_at``: the earliest eligible time).

It decides nothing about *whether* a digest may go: the blockers it is given are
``core.promotion``'s gate (soak proven upstream by the one judge, windows, freezes) and
``core.policy``'s rules, as ENV's plan holds them. Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from reconciler.core.live import LiveService, ReadFailure
from reconciler.core.plans import Blocker
from reconciler.core.writegate import REFUSING

#: The blockers that hold a proposal back: the one gate's (``core.writegate``), the
#: environment's rules and holds. Other blockers of ENV's plan (a cluster of ENV that
#: gave no evidence) do not: the pull request shows them, and ENV's own apply is refused
#: while they last.
RULES = REFUSING

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")  # no dots: git refuses ".." and ".lock"


def older_than_pinned(environment: str, live: LiveService | ReadFailure | None,
                      pinned: str | None, candidate: str) -> str | None:
    """Why proposing ``candidate`` would take ``environment`` back, or None: its control
    plane (``live``, the service as ENV's control plane holds it) first observed
    ``candidate`` before the digest ENV pins. Unknown (a release it has not observed, no
    time) is not "older": the plan and the rules still judge the proposal."""
    if not isinstance(live, LiveService) or pinned is None or pinned == candidate:
        return None
    now, then = live.release_by_digest(pinned), live.release_by_digest(candidate)
    if now is None or then is None or not now.first_observed_at \
            or not then.first_observed_at or then.first_observed_at >= now.first_observed_at:
        return None
    return (f"{candidate} is older than {pinned}, which {environment} pins: "
            f"{environment}'s control plane observed it first; proposing it would take "
            f"{environment} back (a release made for {environment} alone, a hotfix?); "
            "promote it by hand if that is meant")


class Step(StrEnum):
    NOTHING = "nothing"  # the previous environment has no rollout of the service
    PINNED = "pinned"  # ENV already pins the digest the previous environment runs
    PROPOSED = "proposed"  # a proposal of that digest is recorded: nothing new to open
    WAITING = "waiting"  # the rules hold it (with the time it becomes eligible, if known)
    PROPOSE = "propose"  # eligible now and never proposed: push the branch, open the PR


@dataclass(frozen=True)
class Candidate:
    """One service at one observation: the digest the previous environment's current
    rollout is to (None: it has none), its tag, what ENV pins, the rules' blockers on
    promoting it, when they all allow it (ms; None: unknown), and a problem that stops
    a proposal though the rules allow it (no tag to pin; a file that would not load)."""

    service: str
    digest: str | None
    tag: str | None
    pinned: str | None
    blockers: tuple[Blocker, ...] = ()
    eligible_at: int | None = None
    problem: str | None = None


@dataclass(frozen=True)
class Earlier:
    """A proposal already made (the journal's record): its service, digest, branch and
    pull request."""

    service: str
    digest: str
    branch: str
    number: int | None = None
    url: str = ""


@dataclass(frozen=True)
class Decision:
    service: str
    step: Step
    digest: str | None = None
    tag: str | None = None
    branch: str | None = None
    eligible_at: int | None = None
    reason: str = ""
    codes: tuple[str, ...] = ()
    earlier: Earlier | None = None  # PROPOSED: the recorded proposal
    supersedes: Earlier | None = None  # PROPOSE: an older proposal of another digest

    @property
    def key(self) -> str:
        """Equal for decisions that say the same thing: a decision is said when its key
        was not said before (a soak's eligible time once, not at every resync)."""
        # Held by rules: their codes and the eligible time (the soak's progress is no
        # news); held by a problem (no tag, upstream unreadable): the problem itself.
        problem = self.reason if self.step is Step.WAITING and not self.codes else ""
        return "|".join((self.service, self.step.value, self.digest or "",
                         str(self.eligible_at), ",".join(self.codes), problem))


def branch_name(environment: str, service: str, digest: str) -> str:
    """``reconcile/promote-ENV-SERVICE-HEX16``: the same for the same promotion, so every
    cycle, restart and racing watcher pushes to (and finds the pull request of) one
    branch. Names are identifiers already; anything else is replaced, never dropped."""
    digest_part = _UNSAFE.sub("-", digest.split(":", 1)[-1])[:16] or "unknown"
    return (f"reconcile/promote-{_UNSAFE.sub('-', environment)}-"
            f"{_UNSAFE.sub('-', service)}-{digest_part}")


def decide(environment: str, candidate: Candidate, earlier: Sequence[Earlier]) -> Decision:
    """What to do about ``candidate`` given the proposals already made (oldest first)."""
    name, digest = candidate.service, candidate.digest
    if digest is None:
        if candidate.problem is not None:  # the previous environment could not be read
            return Decision(name, Step.WAITING, reason=candidate.problem)
        return Decision(name, Step.NOTHING, reason="the previous environment has no rollout "
                        "of it")
    if candidate.pinned == digest:
        return Decision(name, Step.PINNED, digest=digest, tag=candidate.tag,
                        reason=f"{environment} pins it already")
    mine = [e for e in earlier if e.service == name and e.digest == digest]
    if mine:
        return Decision(name, Step.PROPOSED, digest=digest, tag=candidate.tag,
                        branch=mine[-1].branch, earlier=mine[-1],
                        reason="proposed already" + (f" (#{mine[-1].number})"
                                                     if mine[-1].number else ""))
    if candidate.blockers:
        codes = tuple(sorted({b.code.value for b in candidate.blockers}))
        return Decision(name, Step.WAITING, digest=digest, tag=candidate.tag,
                        eligible_at=candidate.eligible_at, codes=codes,
                        reason="; ".join(f"{b.code.value}: {b.message}"
                                         for b in candidate.blockers))
    if candidate.problem is not None:
        return Decision(name, Step.WAITING, digest=digest, tag=candidate.tag,
                        reason=candidate.problem)
    older = [e for e in earlier if e.service == name and e.digest not in (digest,
                                                                          candidate.pinned)]
    return Decision(name, Step.PROPOSE, digest=digest, tag=candidate.tag,
                    branch=branch_name(environment, name, digest),
                    supersedes=older[-1] if older else None)


def wake_at(decisions: Iterable[Decision], now_ms: int) -> int | None:
    """The earliest eligible time still ahead (ms): the watcher observes again then, so
    a promotion is proposed on the first cycle after its soak without a restart."""
    ahead = [d.eligible_at for d in decisions
             if d.step is Step.WAITING and d.eligible_at is not None and d.eligible_at > now_ms]
    return min(ahead) if ahead else None


def rule_blockers(blockers: Iterable[Blocker], service: str) -> tuple[Blocker, ...]:
    """The environment's promotion rules among a plan's blockers, for ``service`` (a hold
    said once for several promotions names them in ``services``)."""
    return tuple(b for b in blockers if b.code in RULES
                 and (b.service == service or service in b.services))
