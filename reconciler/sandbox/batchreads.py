"""The control plane's [ext] fleet-scale reads: ``getServicesReleases`` and ETags.

Owns ``docs/extensions.md`` §2: the batch method (the releases of many services in one
paginated reply) and the conditional form of the whole-fleet reads (``getServices``,
``getServicesReleases``, ``getServiceDeploymentGrants``): each reply carries ``etag``, the
one global state revision of this control plane (``store.state_revision``, moved by the
database itself on every change), and a request whose ``ifNoneMatch`` equals it gets
``{notModified: true, etag}`` instead of the data.

``with_batch_reads`` turns the control plane's method table into the one with these
extensions, or leaves it as the real upstream's when they are off: then the batch method
is absent (unknown method, not listed by ``getCapabilities``, which reads the table) and
no reply carries an ``etag``.

Either way ``getServices`` is answered through a ``FleetView``, which changes its cost and
nothing on the wire: at 10,000 services x 10 clusters the reply aggregates 100,000 reporter
statuses (seconds of work), so a reply is kept for the state revision it was read at, and
each service's aggregated status for the exact rows it was computed from.

Runs inside the caller's transaction (``controlplane.dispatch``). Must not know the
envelope; errors are raised through the ``error`` factory the control plane passes in.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

from reconciler.sandbox import batch, store

JsonDict = dict[str, Any]
Method = Callable[[sqlite3.Connection, JsonDict], JsonDict]
#: Checks the request's identity (raises when it is missing, unknown or expired).
CallerCheck = Callable[[sqlite3.Connection, JsonDict], object]
#: Builds the control plane's domain error: ``error(code, text, **data)``.
ErrorFactory = Callable[..., Exception]
#: The control plane's ``with_status``: a service with its aggregated rollout status.
WithStatus = Callable[[sqlite3.Connection, JsonDict], JsonDict]
#: A database connection for the calling thread.
Connect = Callable[[], sqlite3.Connection]

#: The whole-fleet reads that answer conditionally.
CONDITIONAL = ("getServices", batch.SERVICES_RELEASES, "getServiceDeploymentGrants")
_CHUNK = 500  # ids per ``IN (...)``: well under SQLite's bound on parameters


def with_batch_reads(methods: dict[str, Method], *, caller: CallerCheck,
                     error: ErrorFactory, enabled: bool,
                     with_status: WithStatus | None = None,
                     connect: Connect | None = None) -> dict[str, Method]:
    """``methods`` with the batch method added and the fleet reads made conditional; the
    table as the real upstream's when ``enabled`` is False (it has neither). With
    ``with_status``, ``getServices`` is served through a ``FleetView`` in both cases,
    computed once in the background from ``connect``'s database when that is given."""
    out = dict(methods)
    if with_status is not None and "getServices" in out:
        view = FleetView(caller, with_status)
        out["getServices"] = view.get_services
        if connect is not None:
            threading.Thread(target=view.warm, args=(connect,), name="fleet-view",
                             daemon=True).start()
    if not enabled:
        return out
    out[batch.SERVICES_RELEASES] = lambda conn, req: services_releases(
        conn, req, caller=caller, error=error)
    for name in CONDITIONAL:
        if name in out:
            out[name] = conditional(out[name], caller=caller, error=error)
    return out


def conditional(method: Method, *, caller: CallerCheck, error: ErrorFactory) -> Method:
    """``method`` answering ``{notModified, etag}`` when ``ifNoneMatch`` is current."""

    def run(conn: sqlite3.Connection, req: JsonDict) -> JsonDict:
        # Identity first: an unknown caller learns nothing, not even the revision.
        caller(conn, req)
        seen = req.get("ifNoneMatch")
        if seen is not None and (not isinstance(seen, str) or len(seen) > 200):
            raise error("INVALID_REQUEST", "ifNoneMatch must be an etag string",
                        field="ifNoneMatch")
        etag = store.state_revision(conn)
        if seen == etag:
            return {"notModified": True, "etag": etag}
        return {**method(conn, req), "etag": etag}

    return run


def _service_ids(req: JsonDict, error: ErrorFactory) -> list[str] | None:
    ids = req.get("serviceIds")
    if ids is None:
        return None
    if not isinstance(ids, list) or any(
            not isinstance(i, str) or not i or len(i) > 500 for i in ids):
        raise error("INVALID_REQUEST", "serviceIds must be a list of non-empty strings",
                    field="serviceIds")
    return sorted(set(ids))


def _page_of_services(conn: sqlite3.Connection, wanted: list[str] | None,
                      cursor: batch.Cursor, limit: int) -> tuple[list[str], bool]:
    """Up to ``limit`` existing service ids after the cursor, and whether more follow."""
    if wanted is None:
        if cursor.after is None:
            rows = conn.execute("SELECT id FROM services ORDER BY id LIMIT ?", (limit + 1,))
        else:
            rows = conn.execute("SELECT id FROM services WHERE id > ? ORDER BY id LIMIT ?",
                                (cursor.after, limit + 1))
        found = [str(r[0]) for r in rows]
    else:
        # Walk the requested ids after the cursor a chunk at a time and stop as soon as
        # one id more than the page exists: the cost is the page's, not the list's.
        found = []
        start = 0 if cursor.after is None else batch.bisect_after(wanted, cursor.after)
        while start < len(wanted) and len(found) <= limit:
            chunk = wanted[start:start + _CHUNK]
            marks = ",".join("?" * len(chunk))
            present = {str(r[0]) for r in conn.execute(
                f"SELECT id FROM services WHERE id IN ({marks})", chunk)}
            found.extend(i for i in chunk if i in present)
            start += _CHUNK
    return found[:limit], len(found) > limit


def services_releases(conn: sqlite3.Connection, req: JsonDict, *, caller: CallerCheck,
                      error: ErrorFactory) -> JsonDict:
    """``getServicesReleases``: ``{releases: {serviceId: IImageRelease[]}, nextCursor}``.

    A requested service that does not exist is absent from ``releases`` (the per-item
    method would answer SERVICE_NOT_FOUND); one without releases maps to ``[]``. Each list
    is exactly what ``getServiceImageReleases`` returns for that service, oldest first.
    """
    caller(conn, req)
    wanted = _service_ids(req, error)
    limit_value = req.get("limit")
    if limit_value is not None and (not isinstance(limit_value, int)
                                    or isinstance(limit_value, bool)):
        # JSON carries a number; decimal text is a query string's form only.
        raise error("INVALID_REQUEST", "limit must be a positive integer", field="limit")
    try:
        cursor = batch.decode_cursor(req.get("cursor"))
        limit = batch.page_size(limit_value)
    except batch.PageRequestError as exc:
        field = "cursor" if "cursor" in str(exc) else "limit"
        raise error("INVALID_REQUEST", str(exc), field=field) from exc
    page, more = _page_of_services(conn, wanted, cursor, limit)
    releases: dict[str, list[JsonDict]] = {sid: [] for sid in page}
    for offset in range(0, len(page), _CHUNK):
        chunk = page[offset:offset + _CHUNK]
        marks = ",".join("?" * len(chunk))
        for rid, sid, data in conn.execute(
                f"SELECT id, service_id, data FROM releases WHERE service_id IN ({marks}) "
                "ORDER BY service_id, seq", chunk):
            releases[str(sid)].append({"id": rid, "data": json.loads(data)})
    return {"releases": releases, "nextCursor": batch.next_cursor(page, cursor, more)}


class FleetView:
    """``getServices`` as the control plane computes it, without computing it twice.

    The reply is ``{services: [with_status(s) for s in every service, by id]}``. Its
    inputs are the ``services`` and ``reports`` rows (``with_status`` aggregates a
    service's plan with its reporters' rows), all covered by the state revision
    (``store.REVISED_TABLES``): so a reply is reused while the revision holds, and a
    service's entry is reused while the digest of its own rows holds (one promotion
    re-aggregates one service, not the fleet). A ``with_status`` that came to read other
    tables would have to add them to that digest.

    ``warm`` computes the first reply in the background when the control plane starts,
    so the first reader of a large fleet does not pay for it; a reader arriving meanwhile
    waits for that computation instead of repeating it.

    Entries are shared between replies and never mutated after they are built.
    """

    def __init__(self, caller: CallerCheck, with_status: WithStatus) -> None:
        self._caller = caller
        self._with_status = with_status
        self._lock = threading.Lock()
        self._computing = threading.Lock()
        self._reply: tuple[str, JsonDict] | None = None
        self._entries: dict[str, tuple[bytes, JsonDict]] = {}

    def get_services(self, conn: sqlite3.Connection, req: JsonDict) -> JsonDict:
        self._caller(conn, req)
        return self._services(conn, store.state_revision(conn))

    def warm(self, connect: Connect) -> None:
        """Compute the reply of the current revision, in a read transaction of its own
        (a reader in WAL mode: writers are not held up meanwhile)."""
        conn = connect()
        conn.execute("BEGIN")
        try:
            self._services(conn, store.state_revision(conn))
        except sqlite3.Error:
            pass  # an optimisation only: the next reader computes it
        finally:
            conn.execute("COMMIT")

    def _cached(self, revision: str) -> JsonDict | None:
        with self._lock:
            if self._reply is not None and self._reply[0] == revision:
                return self._reply[1]
        return None

    def _services(self, conn: sqlite3.Connection, revision: str) -> JsonDict:
        reply = self._cached(revision)
        if reply is not None:
            return reply
        with self._computing:
            reply = self._cached(revision)
            return reply if reply is not None else self._compute(conn, revision)

    def _compute(self, conn: sqlite3.Connection, revision: str) -> JsonDict:
        reports: dict[str, list[str]] = {}
        for service_id, data in conn.execute(
                "SELECT service_id, data FROM reports ORDER BY service_id, reporter_id"):
            reports.setdefault(str(service_id), []).append(str(data))
        with self._lock:
            known = self._entries
        entries: dict[str, tuple[bytes, JsonDict]] = {}
        services: list[JsonDict] = []
        for service_id, data in conn.execute("SELECT id, data FROM services ORDER BY id"):
            rows = hashlib.blake2b(str(data).encode("utf-8"), digest_size=20)
            for report in reports.get(str(service_id), ()):
                rows.update(b"\x00" + report.encode("utf-8"))
            digest = rows.digest()
            entry = known.get(str(service_id))
            if entry is None or entry[0] != digest:
                service = {"id": str(service_id), "data": json.loads(data)}
                entry = (digest, self._with_status(conn, service))
            entries[str(service_id)] = entry
            services.append(entry[1])
        reply: JsonDict = {"services": services}
        with self._lock:
            self._entries = entries
            self._reply = (revision, reply)
        return reply
