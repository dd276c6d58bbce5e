"""The one gate before every write into git: the verdict on a change about to be written.

Owns which of a plan's blockers refuse a write of each kind, and the documented
exceptions, in one place:

- ``Write.PROMOTION`` -- ``promote`` (the file, ``--commit``, ``--pr``) and
  ``watch --promote-from`` (a proposal's branch and pull request): refused by the
  environment's rules as the plan of the written change holds them (``REFUSING``: a hold
  on the digest, the upstream's proof and soak, windows, freezes, policies).
- ``Write.ROLLBACK`` -- ``revert`` (by hand, and ``--on-gate-failure revert``): a
  rollback goes back to a release this environment proved and accepted, so it goes
  through a freeze and a closed window, and the upstream's proof and soak are no rule of
  it (``THROUGH``). Policies are rules of promotions (``core.promotion.PROMOTING``) and
  are not evaluated for a rollback; a hold on the digest it goes back to refuses it.
- ``Write.RELEASE_HOLD`` -- ``release-hold``: judged as a promotion of the digest it
  frees, when the environment pins it (else it changes nothing the plan sends).

``--override-window REASON`` lifts windows and freezes for every kind (``OVERRIDABLE``),
never soak, proof upstream, a policy or a hold.

The verdict is read from the plan the one judge made for the change as it will be
written (``core.planning`` with the environment's rules: ``core.holds``,
``core.promotion``, ``core.policy``): its blockers, never a second assessment. Blockers
about the live side (a silent cluster of the environment) do not refuse a write into
git -- it sends nothing; the environment's own apply refuses while they last -- and
without a plan there is no verdict, so nothing is written (``unknown``).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from reconciler.core.codes import BlockerCode
from reconciler.core.plans import Blocker, Plan, restrict
from reconciler.core.promotion import OVERRIDABLE
from reconciler.core.sanitize import safe


class Write(StrEnum):
    """What is about to be written into git."""

    PROMOTION = "promotion"
    ROLLBACK = "rollback"
    RELEASE_HOLD = "release-hold"


#: The blockers that refuse a write into git: the environment's rules and holds.
REFUSING = frozenset({BlockerCode.HELD, BlockerCode.NOT_SOAKED,
                      BlockerCode.NOT_PROVEN_UPSTREAM, BlockerCode.WINDOW_CLOSED,
                      BlockerCode.FROZEN, BlockerCode.POLICY_DENIED})

#: The documented exceptions: what a write of each kind goes through, and why.
THROUGH: dict[Write, tuple[frozenset[BlockerCode], str]] = {
    Write.ROLLBACK: (frozenset({BlockerCode.FROZEN, BlockerCode.WINDOW_CLOSED,
                                BlockerCode.NOT_SOAKED, BlockerCode.NOT_PROVEN_UPSTREAM}),
                     "a rollback goes back to a release this environment proved and "
                     "accepted: it goes through freezes and windows, and is no promotion"),
}

#: When a refusal of each code can end, for the codes whose message names no time.
_WHEN = {
    BlockerCode.HELD: "when the hold is released by a commit (reconcile release-hold)",
    BlockerCode.POLICY_DENIED: "when the rule allows it (a policy names no time)",
    BlockerCode.NOT_PROVEN_UPSTREAM: "unknown: when the previous environment proves it",
}


#: A time as the soak, window and freeze messages write it, after the word that says
#: what it is. Only a time is taken: a reason written by a person ("until the audit
#: ends") is never read as one.
_TIMED = re.compile(r"\b(?:eligible|until|opens) (?:[A-Z][a-z]{2} )?"
                    r"(\d{4}-\d\d-\d\d[ T]\d\d:\d\d(?::\d\d)?(?:Z| [A-Za-z_]+/[A-Za-z_/+-]+)?)")


def eligible(blocker: Blocker) -> str:
    """When the write ``blocker`` refuses may go, as far as the rules can say: for a
    hold, a policy or an unproven upstream what would lift it; else the last time its
    own message names (a soak's ``eligible``, a freeze's or a window's ``until`` or
    ``opens``)."""
    if blocker.code in _WHEN:
        return _WHEN[blocker.code]
    times = _TIMED.findall(blocker.message)
    if blocker.code is BlockerCode.FROZEN:
        said = times[-1] if times else "no end"
        return f"{said} (or when reconcile unfreeze lifts it)"
    return times[-1] if times else "unknown"


@dataclass(frozen=True)
class WriteVerdict:
    """The gate's word on one write: the blockers that refuse it (per service, as the
    plan names them), those a documented exception lifted, and -- without a plan --
    why there is no verdict."""

    write: Write
    services: tuple[str, ...]
    refusing: tuple[Blocker, ...] = ()
    lifted: tuple[tuple[Blocker, str], ...] = ()
    unknown: str | None = None

    @property
    def go(self) -> bool:
        return not self.refusing and self.unknown is None

    def refusing_of(self, service: str) -> tuple[Blocker, ...]:
        """The blockers refusing ``service``'s part of the write (a cause shared by several
        services names them in ``services``)."""
        return tuple(b for b in self.refusing if b.service == service
                     or service in b.services or (b.service is None and not b.services))

    def lines(self, service: str | None = None) -> list[str]:
        """Each blocker (of ``service``, else all) with when it may go."""
        if self.unknown is not None:
            return [f"no verdict: {safe(self.unknown, 500)}"]
        chosen = self.refusing if service is None else self.refusing_of(service)
        return [f"{b.code.value}: {safe(b.message)} (eligible: {eligible(b)})" for b in chosen]

    def notes(self) -> list[str]:
        """What the exceptions lifted, to be recorded with the write."""
        return [f"{self.write.value} goes through {b.code.value} ({why}): {safe(b.message)}"
                for b, why in self.lifted]


def verdict(plan: Plan | None, write: Write, services: Iterable[str], *,
            override: str | None = None, unknown: str | None = None) -> WriteVerdict:
    """The verdict on writing ``services``' change, from ``plan`` (the environment's plan
    of the desired state as the write leaves it); ``unknown``: why no plan could be made
    (no plan is never GO)."""
    names = tuple(sorted(set(services)))
    if plan is None or unknown is not None:
        return WriteVerdict(write, names, unknown=unknown or "no plan of the change was made")
    scoped = restrict(plan, frozenset(names))
    through, why = THROUGH.get(write, (frozenset(), ""))
    refusing: list[Blocker] = []
    lifted: list[tuple[Blocker, str]] = []
    for blocker in scoped.blockers:
        if blocker.code not in REFUSING:
            continue
        if blocker.code in through:
            lifted.append((blocker, why))
        elif override and blocker.code in OVERRIDABLE:
            lifted.append((blocker, f"--override-window: {safe(override)}"))
        else:
            refusing.append(blocker)
    return WriteVerdict(write, names, tuple(refusing), tuple(lifted))
