"""What a revert is (issue 20): which failed services qualify, the revert's key, and the
words of its commit -- pure values the engine sequences and the shell writes.

Owns four rules:

- ``failed``: a service qualifies for an automatic revert only when the one judge says it
  is **not converged for a reason the control plane or a cluster stated** -- the rollout
  is failed or mismatched (``ServiceProof.terminal``) or a cluster says why it does not
  run the release (``ClusterProof.stated``: a ``lastError``, failed replicas). A silent
  cluster is unknown (``Proof.UNPROVEN``), never a failure: no revert is made on it;
- ``key``: one revert of the same failed releases to the same proven ones has one key,
  whoever computes it and whenever (two watchers, a rerun after a crash): it is carried
  as the commit's ``Reconcile-Revert:`` trailer and names the pull-request branch;
- ``message``: the commit message, with the failure evidence (cluster, digests, what the
  control plane said) and where the proven release's proof came from.
- ``rollback_proven``: whether the rollback's apply ended proven on every expected
  cluster -- the gate's word (or, nothing sent, the plan's proofs); the run's story and
  its notification (``core.notifying``) both ask it, never a second opinion.

Must not: do I/O or decide which digest is proven (``core.lastproven``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from reconciler.core.evidence import Proof, ServiceProof
from reconciler.core.outcomes import ApplyReport, GateReport
from reconciler.core.plans import Plan

TRAILER = "Reconcile-Revert"


def failed(gate: GateReport | None) -> dict[str, ServiceProof]:
    """The services the gate ended on with a stated failure (module docstring)."""
    if gate is None:
        return {}
    return {p.service: p for p in gate.proofs
            if p.proof is Proof.NOT_CONVERGED and (p.terminal or p.stated())}


def rollback_proven(plan: Plan, report: ApplyReport) -> bool:
    """Whether the rollback's apply (``plan`` judged fresh, ``report`` what it did) ended
    proven on every expected cluster: the gate's word, or -- nothing sent, no gate --
    the plan's own proofs. The one place the way back is called proven (the run's story
    and its notification both ask it)."""
    gate = report.gate
    if gate is not None:
        return gate.converged
    return not report.results and all(p.converged for p in plan.proofs)


def unproven_lines(report: ApplyReport) -> list[str]:
    """What the judge still misses after a rollback: one line per service not proven."""
    gate = report.gate
    return [f"{p.service}: {'; '.join(p.reasons()[:3])}"
            for p in (gate.pending() if gate is not None else ())]


def evidence_lines(proof: ServiceProof) -> list[str]:
    """What the control plane and each cluster said, one line each (already sanitized by
    the judge): the rollout first, then every cluster not proven."""
    lines = [f"control plane: {proof.rollout_detail}"] if proof.rollout_detail else []
    for cluster in proof.pending():
        said = f"; lastError: {cluster.last_error}" if cluster.last_error else ""
        lines.append(f"{cluster.cluster}: {cluster.detail}{said}")
    return lines


@dataclass(frozen=True, slots=True)
class Item:
    """One service's revert: from the failed digest back to the proven one."""

    service: str
    failed: str
    failed_tag: str | None
    to: str
    to_tag: str
    evidence: tuple[str, ...]
    sources: tuple[str, ...]  # where "proven" came from (``core.lastproven``)
    path: str  # the service's file, relative to the desired-state directory
    hold_path: str


def key(items: Sequence[Item]) -> str:
    material = json.dumps(sorted([i.service, i.failed, i.to] for i in items),
                          separators=(",", ":"))
    return "rvt-" + hashlib.sha256(material.encode()).hexdigest()[:20]


def reason(item: Item) -> str:
    first = item.evidence[0] if item.evidence else "the judge did not prove it"
    return f"release {item.failed} failed: {first}"


def subject(items: Sequence[Item]) -> str:
    return "revert " + ", ".join(f"{i.service} to {i.to_tag}" for i in items) + \
        ": release failed"


def message(items: Sequence[Item], revert_key: str, *, newer: Mapping[str, str] | None = None,
            through: Sequence[str] = ()) -> str:
    """The commit (or pull request) message: the evidence, the proof, the hold, the key.
    ``newer``: service -> the intent on the branch that replaced the failed pin since the
    failed apply (a pull request then names both intents, and overwrites neither).
    ``through``: what the gate let the rollback go through (a freeze), recorded."""
    out = [subject(items), ""]
    for item in items:
        tag = f" ({item.failed_tag})" if item.failed_tag else ""
        out.append(f"{item.service}: release {item.failed}{tag} failed:")
        out += [f"  {line}" for line in item.evidence] or ["  (no statement)"]
        out.append(f"{item.service}: pinned back to the last proven release {item.to} "
                   f"({item.to_tag}) in {item.path}:")
        out += [f"  {line}" for line in item.sources]
        out.append(f"{item.service}: {item.failed} is held ({item.hold_path}) until "
                   f"`reconcile release-hold {item.service} {item.failed}` is committed")
        if newer and item.service in newer:
            out.append(f"{item.service}: NOT applied over a newer intent: {newer[item.service]}"
                       " -- review both: the failed release and the branch's newer pin")
        out.append("")
    if through:
        out += [f"gate: {line}" for line in through] + [""]
    out.append(f"{TRAILER}: {revert_key}")
    return "\n".join(out) + "\n"
