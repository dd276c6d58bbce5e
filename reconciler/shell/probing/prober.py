"""The prober: ask every cluster behind the gateway, one at a time, what it runs.

Owns one pass over the mesh (CONTRACT §2, seed 000, rebuilt): the mesh resolved once
per pass (``resolving``), the rows of ``core.attribution`` (which cluster is asked at
which address, which is silent and why), every (app, cluster) read in flight together
(``reading`` app by app; ``batching`` in a few pages where a cluster's health reply
advertises the [ext] batch route; app by app where a cluster offers no batch route or
that route answers 404, each said once per cluster in the mesh view's notes; a cluster
that confirmed its remembered listing with a ``304`` is said once in the mesh view's
``confirmed``), all bounded by the dialer, and the pass deadline after which whatever
has not answered is silent. Within one pass -- one plan, one apply and its gate -- the
mesh is asked once and the expected clusters only grow; ``forget_mesh`` starts the next.

It must not raise for a per-cluster problem (those are observations), must not print,
and must not write anything to a cluster: it issues auth handshakes and GETs only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from pathlib import Path

import httpx

from reconciler.core import attribution
from reconciler.core.live import Confirmation, MeshView, Observation, ObservationKind
from reconciler.core.sanitize import safe
from reconciler.shell.endpoints import Connection
from reconciler.shell.probing import resolving
from reconciler.shell.probing.authenticating import Authenticator
from reconciler.shell.probing.batching import PAGE_LIMIT, BatchReader
from reconciler.shell.probing.dialing import DEFAULT_MAX_FAILURES, Dialer, now_ms
from reconciler.shell.probing.parsing import Shared
from reconciler.shell.probing.reading import Reader
from reconciler.shell.progress import NullProgress, Progress


class Prober:
    """Probes every cluster of the mesh; one per run (the DNS answer is fixed per pass).

    ``transport`` and ``resolver`` are seams for tests. ``deadline`` bounds one
    ``observe_apps`` pass (default ``max(60, 10 × probe_timeout)`` seconds).
    ``batch_page`` is how many apps one batch status page asks for.
    ``requests_sent`` and ``connections_opened`` count what went over the wire.
    """

    def __init__(
        self,
        conn: Connection,
        *,
        signer_key: bytes | Path,
        transport: httpx.AsyncBaseTransport | None = None,
        resolver: resolving.Resolver | None = None,
        deadline: float | None = None,
        max_failures: int = DEFAULT_MAX_FAILURES,
        batch_page: int = PAGE_LIMIT,
    ) -> None:
        self._conn = conn
        self._dialer = Dialer(conn, transport=transport, max_failures=max_failures)
        self._auth = Authenticator(conn, self._dialer, signer_key=signer_key)
        self._reader = Reader(self._dialer, self._auth)
        self._batches = BatchReader(self._dialer, self._auth, page_limit=batch_page)
        # Looked up at call time, so the module's resolver can be replaced in tests.
        self._resolver = resolver
        self.deadline = deadline if deadline is not None else max(60.0, 10 * conn.probe_timeout)
        self._mesh: MeshView | None = None
        self._mesh_lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"Prober(gateway={self._conn.gateway!r}, port={self._conn.mesh_port})"

    @property
    def requests_sent(self) -> int:
        return self._dialer.requests_sent

    @property
    def connections_opened(self) -> int:
        return self._dialer.connections_opened

    @property
    def _tokens(self) -> dict[str, str]:
        """The bearer cached per address (tests replace one to see the re-mint)."""
        return self._auth.tokens

    async def _token(self, address: str) -> tuple[str, bool]:
        """The address's bearer, minted now if there is none (and whether it was reused)."""
        return await self._auth.token(address)

    async def aclose(self) -> None:
        await self._dialer.aclose()

    async def __aenter__(self) -> Prober:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- the mesh -----------------------------------------------------------------------

    def forget_mesh(self) -> None:
        """Start a new pass: the next ``resolve`` asks DNS and every address's health
        again. (Within one pass -- one plan, one apply and its gate -- the mesh is asked
        once and the expected clusters only grow.)"""
        self._mesh = None

    async def resolve(self) -> MeshView:
        """Resolve the gateway and name each address; cached until ``forget_mesh``."""
        async with self._mesh_lock:
            if self._mesh is None:
                self._mesh = await resolving.resolve(
                    self._conn, self._dialer, self._resolver or resolving.system_resolver)
            return self._mesh

    @staticmethod
    def plan_rows(mesh: MeshView, extra_expected: Iterable[str] = (),
                  ) -> list[attribution.Row]:
        """``core.attribution.rows``: (cluster or address, address, silent reason)."""
        return attribution.rows(mesh, extra_expected)

    # -- one pass -----------------------------------------------------------------------

    async def observe_apps(
        self,
        app_ids: Iterable[str],
        *,
        extra_expected: Iterable[str] = (),
        progress: Progress | None = None,
    ) -> dict[str, tuple[Observation, ...]]:
        """One observation per expected cluster (and per unnamed address) for every app.

        Expected clusters = settings ∪ named by DNS ∪ ``extra_expected``. Never raises for
        a cluster's failure; a cluster that has not answered when the pass deadline
        passes is silent with that reason.
        """
        started = time.monotonic()
        progress = progress or NullProgress()
        mesh = await self.resolve()
        apps = list(dict.fromkeys(app_ids))
        self._auth.new_pass()
        self._dialer.new_pass()

        rows = attribution.rows(mesh, extra_expected)
        probed = [row for row in rows if row.probe]
        progress.add(len(apps) * len(probed))

        answers: dict[tuple[str, str], Observation] = {}
        shared = Shared()  # one value for equal bodies, across every cluster of this pass
        batch_routes = {e.address: e.batch_status for e in mesh.resolved
                        if e.batch_status is not None}
        notes: list[str] = []
        confirmed: list[Confirmation] = []

        def broken(cluster: str, address: str, exc: Exception, only: Iterable[str]) -> None:
            # A failure no reader turned into an answer (a bug, or a reply nothing
            # anticipated): every app it leaves unanswered is silent with what happened,
            # never "the deadline passed", and the pass goes on for the other clusters.
            reason = safe(f"reading this cluster failed: {type(exc).__name__}: {exc}", 300)
            for app in only:
                answers.setdefault((app, cluster), Observation(
                    cluster_id=cluster, address=address, kind=ObservationKind.SILENT,
                    reason=reason, observed_at=now_ms()))

        async def probe(app_id: str, cluster: str, address: str) -> None:
            try:
                answers[(app_id, cluster)] = await self._reader.observe(
                    app_id, cluster, address, shared)
            except Exception as exc:  # see broken()
                broken(cluster, address, exc, (app_id,))
            progress.advance()

        async def one_by_one(cluster: str, address: str) -> None:
            await asyncio.gather(*(probe(app, cluster, address) for app in apps))

        async def batch(cluster: str, address: str, path: str) -> None:
            def record(app_id: str, observation: Observation) -> None:
                answers[(app_id, cluster)] = observation
                progress.advance()

            def confirm(at: int) -> None:
                confirmed.append(Confirmation(cluster_id=cluster, address=address, at=at))

            try:
                found = await self._batches.read(cluster, address, path, apps, record, shared,
                                                 confirm)
            except Exception as exc:  # see broken()
                broken(cluster, address, exc, apps)
                return
            if not found:
                # Advertised but not there: read app by app, and say so once per cluster.
                notes.append(f"cluster {cluster} ({address}) advertises the batch status "
                             f"route {path} but answered 404 on it; read app by app")
                await one_by_one(cluster, address)

        batched = [row for row in probed if row.address in batch_routes and apps]
        tasks = [asyncio.create_task(batch(row.cluster, row.address, batch_routes[row.address]))
                 for row in batched if row.address is not None]
        # App by app, interleaved across clusters as ever: each address's pool stays busy.
        tasks += [asyncio.create_task(probe(app, row.cluster, row.address))
                  for app in apps for row in probed
                  if row.address is not None and row not in batched]
        # Said once per cluster, as the 404 fallback is: one request per app is what a
        # large fleet's plan costs on a cluster that offers no batch reads.
        notes.extend(f"cluster {row.cluster} ({row.address}) offers no batch status route; "
                     "read app by app" for row in probed
                     if row.address is not None and row not in batched and apps)
        remaining = max(0.0, self.deadline - (time.monotonic() - started))
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=remaining)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)

        if notes or confirmed:
            await self._note(mesh, notes, confirmed)
        late = f"the probe deadline of {self.deadline:g}s passed before this cluster answered"
        return attribution.assemble(apps, rows, answers, late)

    async def _note(self, mesh: MeshView, notes: Iterable[str],
                    confirmed: Iterable[Confirmation] = ()) -> None:
        """Add ``notes`` (each said once however often seen) and the clusters that
        ``confirmed`` their reused answers to this pass's mesh view."""
        async with self._mesh_lock:
            if self._mesh is mesh:
                merged = tuple(dict.fromkeys([*mesh.notes, *sorted(notes)]))
                self._mesh = mesh.model_copy(update={
                    "notes": merged, "confirmed": (*mesh.confirmed, *confirmed)})
