"""Attribution: which answer belongs to which cluster, and which cannot belong to any.

Owns the evidence rules of CONTRACT §3 that follow from the mesh alone, with no I/O:

- ``mesh_view``: the resolved addresses and the clusters they named -> a ``MeshView``
  (expected clusters = settings ∪ named; a cluster named by two addresses is a
  duplicate claim; an address whose health route named nobody is unnamed);
- ``rows``: one row per expected cluster (and per unnamed address), each either
  probeable at exactly one address or silent with the reason -- a duplicate claim, not
  resolved, no address answered as it, the gateway not resolved at all (then one row
  for the gateway, so "every row answered" is never vacuously true);
- ``assemble``: per app, one observation per row, in row order; a row that should have
  been asked but has no answer is silent with the caller's reason, never omitted;
- ``with_targets``: rollout targets join the expected set after the control plane was
  read; a target no address named is silent without any further I/O.

Callers: the prober (``shell.probing``) and the observer (``shell.observing``). Pure: no
I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from reconciler.core.live import Endpoint, MeshView, Observation, ObservationKind


class Row(NamedTuple):
    """One expected cluster (or unnamed address): where to ask it, or why not to."""

    cluster: str  # the cluster id, or the address when unnamed, or the gateway
    address: str | None  # where it answers; None: no address answered as it
    reason: str | None  # None: ask it at ``address``; else it is silent with this reason

    @property
    def probe(self) -> bool:
        return self.reason is None and self.address is not None

    def silent(self, reason: str | None = None) -> Observation:
        """This row's silent observation (its own reason unless one is given)."""
        return Observation(cluster_id=self.cluster, address=self.address,
                           kind=ObservationKind.SILENT,
                           reason=reason or self.reason or "not probed")


def mesh_view(gateway: str, settings_clusters: tuple[str, ...],
              endpoints: Sequence[Endpoint]) -> MeshView:
    """The mesh as the resolved addresses named it."""
    named = [e.cluster_id for e in endpoints if e.cluster_id is not None]
    duplicates = sorted({c for c in named if named.count(c) > 1})
    return MeshView(
        gateway=gateway,
        settings_clusters=settings_clusters,
        resolved=tuple(endpoints),
        expected_clusters=tuple(dict.fromkeys([*settings_clusters, *named])),
        duplicate_claims=tuple(duplicates),
        unnamed_addresses=tuple(e.address for e in endpoints if e.cluster_id is None),
    )


def unresolved(gateway: str, settings_clusters: tuple[str, ...], error: str) -> MeshView:
    """A total evidence gap: every expected cluster will be silent."""
    return MeshView(gateway=gateway, settings_clusters=settings_clusters,
                    resolve_error=error, expected_clusters=settings_clusters)


def rows(mesh: MeshView, extra_expected: Iterable[str] = ()) -> list[Row]:
    """One row per expected cluster (settings ∪ named ∪ ``extra_expected``), then one per
    unnamed address. A row is probeable only when exactly one address claims it."""
    expected = list(dict.fromkeys([*mesh.expected_clusters, *extra_expected]))
    claims: dict[str, list[str]] = {}
    for endpoint in mesh.resolved:
        if endpoint.cluster_id is not None:
            claims.setdefault(endpoint.cluster_id, []).append(endpoint.address)
    unnamed = [e for e in mesh.resolved if e.cluster_id is None]
    out: list[Row] = []
    for cluster in expected:
        addresses = claims.get(cluster, [])
        if len(addresses) == 1:
            out.append(Row(cluster, addresses[0], None))
        elif len(addresses) > 1:
            out.append(Row(cluster, addresses[1],
                           f"address {addresses[1]} answered as {cluster} (claimed twice, "
                           f"also by {', '.join(a for a in addresses if a != addresses[1])});"
                           " its answers cannot be attributed"))
        elif mesh.resolve_error is not None:
            out.append(Row(cluster, None, f"not resolved by DNS ({mesh.resolve_error})"))
        elif unnamed:
            detail = "; ".join(f"{e.address}: {e.error}" for e in unnamed)
            out.append(Row(cluster, None,
                           f"no resolved address answered as this cluster ({detail})"))
        else:
            out.append(Row(cluster, None, "not resolved by DNS (no address answered as it)"))
    for endpoint in unnamed:
        out.append(Row(endpoint.address, endpoint.address,
                       f"{endpoint.error}; this address's answers cannot be attributed "
                       "to a cluster"))
    if not out and mesh.resolve_error is not None:
        # No cluster is known at all: one row for the gateway itself, so that "every
        # row answered" can never be vacuously true (seed 000, #2887).
        out.append(Row(mesh.gateway, None,
                       f"not resolved by DNS ({mesh.resolve_error}); no cluster can be probed"))
    return out


def assemble(apps: Iterable[str], rows_: Sequence[Row],
             answers: Mapping[tuple[str, str], Observation],
             unanswered: str) -> dict[str, tuple[Observation, ...]]:
    """Per app, one observation per row: the answer for (app, cluster) when the row was
    probed, else the row's silence; a probed row without an answer says ``unanswered``."""
    observations: dict[str, tuple[Observation, ...]] = {}
    for app in apps:
        observations[app] = tuple(
            (answers.get((app, row.cluster)) or row.silent(unanswered)) if row.probe
            else row.silent()
            for row in rows_)
    return observations


def with_targets(mesh: MeshView, observations: Mapping[str, tuple[Observation, ...]],
                 targets: Iterable[str]) -> tuple[MeshView, dict[str, tuple[Observation, ...]]]:
    """Rollout targets the mesh did not expect join it; each app gets a silent row for
    each (a target no address named needs no I/O to be known silent)."""
    extra = [c for c in dict.fromkeys(targets) if c not in mesh.expected_clusters]
    if not extra:
        return mesh, dict(observations)
    added = [row.silent(row.reason or "rollout target not probed")
             for row in rows(mesh, extra) if row.cluster in extra]
    return (mesh.model_copy(update={"expected_clusters": (*mesh.expected_clusters, *extra)}),
            {app: (*rows_, *added) for app, rows_ in observations.items()})
