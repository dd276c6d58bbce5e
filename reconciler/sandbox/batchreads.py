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

Runs inside the caller's transaction (``controlplane.dispatch``). Must not know the
envelope; errors are raised through the ``error`` factory the control plane passes in.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any

from reconciler.sandbox import batch, store

JsonDict = dict[str, Any]
Method = Callable[[sqlite3.Connection, JsonDict], JsonDict]
#: Checks the request's identity (raises when it is missing, unknown or expired).
CallerCheck = Callable[[sqlite3.Connection, JsonDict], object]
#: Builds the control plane's domain error: ``error(code, text, **data)``.
ErrorFactory = Callable[..., Exception]

#: The whole-fleet reads that answer conditionally.
CONDITIONAL = ("getServices", batch.SERVICES_RELEASES, "getServiceDeploymentGrants")
_CHUNK = 500  # ids per ``IN (...)``: well under SQLite's bound on parameters


def with_batch_reads(methods: dict[str, Method], *, caller: CallerCheck,
                     error: ErrorFactory, enabled: bool) -> dict[str, Method]:
    """``methods`` with the batch method added and the fleet reads made conditional; the
    table unchanged when ``enabled`` is False (the real upstream has neither)."""
    if not enabled:
        return dict(methods)
    out = dict(methods)
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
