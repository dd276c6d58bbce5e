"""Status values for the web view's tests: a fleet of N services × environments ×
clusters in every state, every string optionally tainted (the hostile corpus)."""

from __future__ import annotations

from reconciler.core import status as service_status
from reconciler.core.evidence import Proof
from reconciler.core.status import ClusterRow, NextPromotion, ServiceRow, Status

NOW = 1_790_000_000_000  # a fixed "now" (ms): renders never read a clock
DIGEST = "sha256:" + "a" * 64
OLD = "sha256:" + "b" * 64


def _clusters(service: str, kind: int, clusters: int, taint: str) -> tuple[ClusterRow, ...]:
    out = []
    for i in range(clusters):
        name = f"c{i}{taint}"
        if kind == 0:  # proven everywhere
            out.append(ClusterRow(service=service, cluster=name, pinned=DIGEST, running=DIGEST,
                                  proven=True, why=None, detail="", last_error=None,
                                  healthy_since=NOW - 3_600_000, replicas="3/3 healthy",
                                  egress=(f"api.example.net:443{taint}",),
                                  routes=(f"web shop.example{taint}/",)))
        elif kind == 1:  # converging: runs the old digest, says nothing wrong
            out.append(ClusterRow(service=service, cluster=name, pinned=DIGEST, running=OLD,
                                  proven=False, why="runs_other_digest",
                                  detail=f"runs {OLD[:19]}{taint}", last_error=None))
        elif kind == 2:  # failing: the cluster states an error
            out.append(ClusterRow(service=service, cluster=name, pinned=DIGEST, running=OLD,
                                  proven=False, why="not_running", detail=f"crash{taint}",
                                  last_error=f"CrashLoopBackOff{taint}"))
        else:  # unknown: silent
            out.append(ClusterRow(service=service, cluster=name, pinned=DIGEST, running=None,
                                  proven=False, why="silent", detail=f"timed out{taint}",
                                  last_error=None))
    return tuple(out)


PROOF = {0: Proof.CONVERGED, 1: Proof.NOT_CONVERGED, 2: Proof.NOT_CONVERGED,
         3: Proof.UNPROVEN}


def fleet(services: int = 4, environments: tuple[str, ...] = ("staging", "prod"),
          clusters: int = 3, taint: str = "", errors: tuple[tuple[str, str], ...] = ()
          ) -> Status:
    """Service i is proven (i % 4 == 0), converging (1), failing (2) or unknown (3) in
    every environment but the first, where it is proven; the last environment's rows
    wait for a soak (eligible in an hour) to promote the previous one's digest."""
    per: dict[str, tuple[ServiceRow, ...]] = {}
    for e_index, env in enumerate(environments):
        rows = []
        for i in range(services):
            name = f"svc-{i:05d}{taint}"
            kind = 0 if e_index == 0 else i % 4
            nxt = NextPromotion(digest="sha256:" + "c" * 64, tag=f"v2{taint}",
                                blockers=(f"not_soaked: soaked 1h of 2h{taint}",),
                                eligible_at=NOW + 3_600_000) \
                if e_index == len(environments) - 1 and e_index and kind == 0 else None
            rows.append(ServiceRow(
                environment=env, service=name, pinned=DIGEST, tag=f"v1{taint}",
                proof=PROOF[kind], proven=clusters if kind == 0 else 0, expected=clusters,
                since=NOW - 3_600_000 if kind == 0 else None,
                since_source=f"healthySince of c0{taint}" if kind == 0 else None,
                reasons=(f"reason {kind}{taint}",) if kind else (),
                clusters=_clusters(name, kind, clusters, taint), next=nxt,
                held=f"since 2026-01-01: bad{taint}" if i == 5 else None))
        per[env] = tuple(rows)
    return service_status.assemble(NOW - 5_000, list(environments), per, list(errors))
