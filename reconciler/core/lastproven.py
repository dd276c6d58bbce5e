"""The last proven release of a service (issue 20): the digest ``reconcile revert`` pins
back, and where each fact that makes it "proven" came from.

Owns the rule, and nothing else decides it:

- the **journal** must hold a proof of the digest: the one judge (``core.evidence``)
  found it converged on every expected cluster, either at an apply's convergence gate or
  on the snapshot an apply read before sending (the release that was running and proven
  before it was replaced); ``ProvenFact`` is one such record;
- the **control plane** must list the digest as a release of the service it accepted
  (``acceptedAt``): a rollback can target only an accepted release (seed 003), and the
  release gives the tag written back with the digest;
- the digest is not the failed one and not held.

The newest journal proof that passes wins. When none does, the answer is ``NotProven``
with the reason -- never a guess from the release list alone (a release accepted once
may never have run everywhere).

Pure: the engine reads the journal and the control plane and hands the facts over.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from reconciler.core import evidence
from reconciler.core.desired import DesiredState
from reconciler.core.evidence import ServiceProof
from reconciler.core.kinds.release import PromoteChange, RollbackChange
from reconciler.core.live import ImageRelease, LiveService, LiveSnapshot, ReadFailure
from reconciler.core.pinning import when
from reconciler.core.plans import Plan
from reconciler.core.sanitize import safe


@dataclass(frozen=True, slots=True)
class ProvenFact:
    """One journal record: the judge proved ``digest`` of ``service`` converged on
    ``clusters`` at ``at_ms`` (``stage``: ``gate`` or ``before-apply``), in ``run``."""

    service: str
    digest: str
    at_ms: int
    clusters: tuple[str, ...]
    run: str
    stage: str


@dataclass(frozen=True, slots=True)
class LastProven:
    service: str
    digest: str
    release: ImageRelease
    #: one sentence per source: the journal's proof, the control plane's acceptance
    sources: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NotProven:
    service: str
    reason: str


def last_proven(service: str, failed: str, facts: Sequence[ProvenFact],
                live: LiveService | ReadFailure | None,
                held: Collection[str] = ()) -> LastProven | NotProven:
    """The newest digest of ``service`` other than ``failed`` that the journal proves and
    the control plane accepted (module docstring), or why there is none."""
    if not isinstance(live, LiveService):
        why = safe(live.reason) if live is not None else "not read"
        return NotProven(service, f"{service}: the control plane's releases are unknown "
                                  f"({why}): refusing to guess a digest to revert to")
    mine = sorted((f for f in facts if f.service == service), key=lambda f: -f.at_ms)
    others = [f for f in mine if f.digest != failed]
    if not others:
        return NotProven(service, (
            f"{service}: the journal holds no proof of a digest other than {failed} (the "
            "judge must have proven one converged on every expected cluster, at an apply's "
            "gate or before an apply replaced it): refusing to guess a digest to revert to"))
    refused: list[str] = []
    for fact in others:
        if fact.digest in held:
            refused.append(f"{fact.digest[:19]} is held")
            continue
        release = live.release_by_digest(fact.digest)
        if release is None or release.accepted_at is None:
            refused.append(f"{fact.digest[:19]} is " + (
                "not a release the control plane lists" if release is None
                else "a release the control plane never accepted"))
            continue
        tags = ", ".join(safe(t, 130) for t in release.tags) or "no tag"
        return LastProven(service, fact.digest, release, (
            f"journal: {fact.stage} of run {fact.run} at {when(fact.at_ms)} proved "
            f"{fact.digest} converged on {', '.join(fact.clusters) or 'no cluster'}",
            f"control plane: release {safe(release.id, 80)} ({tags}) accepted at "
            f"{when(release.accepted_at)}"))
    return NotProven(service, f"{service}: no proven digest the control plane accepted "
                              f"({'; '.join(refused)}): refusing to guess")


def running_before(desired: DesiredState, plan: Plan,
                   snapshot: LiveSnapshot) -> tuple[ServiceProof, ...]:
    """The judge's word, on the snapshot an apply read before sending, on the release
    each promotion or rollback of ``plan`` replaces (``release_before``), with the egress
    the control plane declared then: what was proven running before the apply changed it.
    The engine journals the converged ones (``ProvenFact`` stage ``before-apply``)."""
    expected = {e.service: e.expected_clusters for e in plan.evidence}
    out: list[ServiceProof] = []
    for change in plan.changes:
        if not isinstance(change, PromoteChange | RollbackChange):
            continue
        before = change.release_before
        if before is None \
                or not before.digest:
            continue
        svc = desired.service_by_name(change.service)
        if svc is None:
            continue
        live = snapshot.services.get(svc.service_id)
        target = evidence.Target(service=svc.name, app_id=svc.app_id, digest=before.digest,
                                 egress=live.egress if isinstance(live, LiveService) else None)
        out.append(evidence.judge(target, live, expected.get(svc.name, plan.expected_clusters),
                                  snapshot.observations.get(svc.app_id, ())))
    return tuple(out)
