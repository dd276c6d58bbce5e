"""The watcher's per-service metrics and its commit info metric.

Owns, from each plan the watcher makes: one ``reconcile_service_info`` series per
managed service (labels: service, pinned_digest, pinned_tag, verdict -- the judge's word
from the plan's proofs: converged, not_converged, unproven; ``unknown`` while the live
side is unread or the watcher is suspended), ``reconcile_service_proven_clusters`` and
``reconcile_service_expected_clusters`` (NaN while unknown: unknown is not 0),
``reconcile_service_last_transition_timestamp_seconds`` (when the verdict last changed
between the judge's three words, as seen by this process), and ``reconcile_commit_info``
(commit, desired_tree) of the last plan. Issue 34: ``reconcile_verification_result``
(service, cluster, check) for each check a service is held to on each expected cluster:
1 passing, 0 failing, NaN unknown (no result, unreadable, or the live side unread) --
unknown is not 0; only services with declared checks have such series.

Cardinality: four series per managed service and one for the commit -- 40,001 series
for 10,000 services. A service's info series changes identity only when its pin or its
verdict changes; this collector yields the current rows only, so an old combination is
never exported again (Prometheus marks it stale), and nothing accumulates in the process.
The rows are replaced whole after each plan (one reference swap), so a scrape on the
server thread sees one plan's rows, never a mix.

Must not judge anything: the verdict is ``ServiceProof.proof``, the judge's own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from reconciler.core.desired import DesiredState
from reconciler.core.evidence import Proof
from reconciler.core.plans import Plan
from reconciler.core.sanitize import redact
from reconciler.core.verification import Outcome

UNKNOWN = "unknown"


@dataclass(frozen=True)
class Row:
    service: str
    digest: str
    tag: str
    verdict: str
    proven: int
    expected: int


class ServiceMetrics(Collector):
    """A Prometheus collector of the last plan's per-service rows (see module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._rows: tuple[Row, ...] = ()
        self._known = False
        self._commit: tuple[str, str] | None = None
        self._transitions: dict[str, tuple[str, float]] = {}  # service -> (verdict, when)
        #: (service, cluster, check) -> 1 pass, 0 fail, NaN unknown (issue 34)
        self._checks: tuple[tuple[str, str, str, float], ...] = ()

    def observe(self, plan: Plan, desired: DesiredState | None) -> None:
        """The rows of a new plan (``desired`` gives the pinned tags; the plan's proofs
        give the digest, the verdict and the clusters)."""
        tags = {s.name: s.release.tag or "" for s in desired.services} if desired else {}
        now = self.clock()
        rows = []
        transitions = {}
        for proof in plan.proofs:
            verdict = proof.proof.value
            before = self._transitions.get(proof.service)
            transitions[proof.service] = before if before is not None and \
                before[0] == verdict else (verdict, now)
            rows.append(Row(service=proof.service, digest=proof.digest,
                            tag=tags.get(proof.service, ""), verdict=verdict,
                            proven=sum(1 for c in proof.clusters
                                       if c.proof is Proof.CONVERGED),
                            expected=len(proof.clusters)))
        self._transitions = transitions  # services no longer managed are forgotten
        self._checks = _check_rows(plan)
        self._rows, self._known = tuple(rows), True
        self._commit = (plan.commit or "", plan.desired_tree or "")

    def unknown(self) -> None:
        """The live side is unread (or the watcher suspended): every verdict is
        ``unknown`` and the cluster counts NaN; the pins and transition times are kept."""
        self._known = False

    def collect(self) -> Iterator[GaugeMetricFamily]:
        rows, known, commit = self._rows, self._known, self._commit
        transitions = self._transitions
        info = GaugeMetricFamily(
            "reconcile_service_info", "1 per managed service: its pinned digest and tag and "
            "the judge's verdict (unknown while the live side is unread)",
            labels=["service", "pinned_digest", "pinned_tag", "verdict"])
        proven = GaugeMetricFamily(
            "reconcile_service_proven_clusters", "expected clusters the judge proves run the "
            "service's pinned release (NaN while unknown)", labels=["service"])
        expected = GaugeMetricFamily(
            "reconcile_service_expected_clusters", "clusters the service is expected on "
            "(NaN while unknown)", labels=["service"])
        since = GaugeMetricFamily(
            "reconcile_service_last_transition_timestamp_seconds", "when the judge's "
            "verdict on the service last changed, as this watcher saw it",
            labels=["service"])
        nan = float("nan")
        for row in rows:
            name = redact(row.service)
            info.add_metric([name, row.digest, redact(row.tag),
                             row.verdict if known else UNKNOWN], 1.0)
            proven.add_metric([name], float(row.proven) if known else nan)
            expected.add_metric([name], float(row.expected) if known else nan)
            moved = transitions.get(row.service)
            if moved is not None:
                since.add_metric([name], moved[1])
        yield from (info, proven, expected, since)
        checks = GaugeMetricFamily(
            "reconcile_verification_result", "each check a service is held to, per cluster: "
            "1 passing, 0 failing, NaN unknown (docs/verification.md)",
            labels=["service", "cluster", "check"])
        for service, cluster, check, value in self._checks:
            checks.add_metric([redact(service), redact(cluster), redact(check)],
                              value if known else nan)
        yield checks
        commit_info = GaugeMetricFamily(
            "reconcile_commit_info", "1 for the commit (and desired-state tree) of the "
            "last plan", labels=["commit", "desired_tree"])
        if commit is not None:
            commit_info.add_metric([commit[0], commit[1]], 1.0)
        yield commit_info


_VALUE = {Outcome.PASS: 1.0, Outcome.FAIL: 0.0}


def _check_rows(plan: Plan) -> tuple[tuple[str, str, str, float], ...]:
    """Every (service, expected cluster, declared check) with its value in ``plan``: a
    result taken for another digest, or none at all, is NaN (unknown)."""
    nan = float("nan")
    evidence = {e.service: e for e in plan.evidence}
    rows: list[tuple[str, str, str, float]] = []
    for held in plan.verifications:
        ev = evidence.get(held.service)
        if ev is None:
            continue
        results = {(o.cluster_id, r.check): r for o in ev.observations for r in o.checks
                   if r.digest == ev.desired_digest}
        for cluster in ev.expected_clusters:
            for check in held.checks:
                found = results.get((cluster, check.name))
                rows.append((held.service, cluster, check.name,
                             _VALUE.get(found.outcome, nan) if found else nan))
    return tuple(rows)
