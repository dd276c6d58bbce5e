"""Evidence rules: what a cluster's answer proves, and what its silence does not.

Owns two judgements, both pure:

- ``judge_convergence``: does one cluster's observation prove it runs the pinned digest,
  RUNNING, every required replica observed, healthy and verified, none failed, with the
  declared egress in effect? The answer is ``converged``, ``not_converged`` (the cluster
  answered and runs something else) or ``no_evidence`` (it said nothing we can use). The
  apply gate and the planner both use it, so the plan and the gate cannot disagree.
- ``expected_clusters``: the union the contract defines (settings ∪ DNS ∪ rollout targets).

A cluster that sends no ``resolvedDigest`` has not proven what it runs: a tag match is
never enough (seed 000, "What a PASS here does and does not mean").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from reconciler.core.live import EgressRule, Observation, ObservationKind
from reconciler.core.sanitize import safe


class Verdict(StrEnum):
    CONVERGED = "converged"
    NOT_CONVERGED = "not_converged"
    NO_EVIDENCE = "no_evidence"


@dataclass(frozen=True)
class Judgement:
    cluster: str
    verdict: Verdict
    reason: str  # why not converged / why no evidence; "" when converged
    running: str | None = None  # the digest the cluster proved it runs, if any
    last_error: str | None = None


def expected_clusters(*sources: Iterable[str]) -> tuple[str, ...]:
    """The sorted union of every source of expected cluster ids."""
    union: set[str] = set()
    for source in sources:
        union.update(source)
    return tuple(sorted(union))


def egress_key(rules: Iterable[EgressRule]) -> frozenset[tuple[str, int]]:
    return frozenset((r.host, r.port) for r in rules)


def judge_convergence(
    observation: Observation,
    *,
    digest: str | None,
    egress: tuple[EgressRule, ...] | None,
) -> Judgement:
    """Judge one cluster against the pinned ``digest`` (None: release not checked) and
    the declared ``egress`` (None: egress not checked)."""
    cluster = observation.cluster_id
    if observation.kind is ObservationKind.SILENT:
        return Judgement(cluster, Verdict.NO_EVIDENCE, f"silent: {safe(observation.reason)}")
    runtime = observation.runtime
    if observation.kind is ObservationKind.NO_RECORD or runtime is None:
        return Judgement(cluster, Verdict.NOT_CONVERGED, "no runtime record for this app")
    last_error = safe(runtime.last_error) if runtime.last_error else None
    running = runtime.resolved_digest
    if digest is not None:
        if running is None:
            return Judgement(cluster, Verdict.NO_EVIDENCE,
                             "sent no resolvedDigest: it has not proven what it runs",
                             None, last_error)
        if running != digest:
            return Judgement(cluster, Verdict.NOT_CONVERGED,
                             f"runs {running}, not {digest}", running, last_error)
        if runtime.runtime_state != "RUNNING":
            return Judgement(cluster, Verdict.NOT_CONVERGED,
                             f"runtimeState {safe(runtime.runtime_state)}", running, last_error)
        counts = runtime.replica_counts
        if counts is None:
            return Judgement(cluster, Verdict.NO_EVIDENCE, "sent no replica counts", running,
                             last_error)
        if not (counts.required >= 1 and counts.required == counts.observed == counts.healthy
                == counts.verified and counts.failed == 0):
            return Judgement(
                cluster, Verdict.NOT_CONVERGED,
                f"replicas required={counts.required} observed={counts.observed} "
                f"healthy={counts.healthy} verified={counts.verified} failed={counts.failed}",
                running, last_error)
    if egress is not None:
        if runtime.egress is None:
            return Judgement(cluster, Verdict.NO_EVIDENCE, "sent no effective egress", running,
                             last_error)
        declared = egress_key(egress)
        dropped = egress_key(runtime.egress_dropped)
        in_effect = egress_key(runtime.egress)
        # A destination the cluster's operator refused is reported, not waited for: the
        # gate cannot make an allow-list change, and hiding it would be worse.
        if in_effect != declared - dropped:
            missing = sorted(declared - dropped - in_effect)
            extra = sorted(in_effect - declared)
            bits = []
            if missing:
                bits.append("missing " + ", ".join(f"{h}:{p}" for h, p in missing))
            if extra:
                bits.append("still allows " + ", ".join(f"{h}:{p}" for h, p in extra))
            return Judgement(cluster, Verdict.NOT_CONVERGED, "egress " + "; ".join(bits),
                             running, last_error)
    return Judgement(cluster, Verdict.CONVERGED, "", running, last_error)
