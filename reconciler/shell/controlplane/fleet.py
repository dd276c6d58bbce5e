"""The whole fleet as the control plane holds it, read for one snapshot.

Owns the control-plane half of a snapshot: ``getServices`` (every service, one call),
the grants, and the releases of every managed service -- in pages of the [ext]
``getServicesReleases`` when ``capabilities()`` lists it (the managed ids in parts of a
page each, every part asked at once while ``getServices`` is still being sent), else one
``getServiceImageReleases`` per service as the seeds define (the real upstream) --
folded into ``core.live`` values. The two ways mean the same: a
service ``getServices`` does not list is ``SERVICE_NOT_FOUND``; a service the batch
listing did not carry although it exists is asked for on its own (it may have appeared
in between); a batch page that fails makes every service it had not yet carried a
``ReadFailure`` with the reason, never "no releases".

Conditional resync [ext]: a caller that keeps a ``Memory`` across snapshots (the watcher)
asks ``getServices`` with ``ifNoneMatch`` = the etag of its last clean read; the control
plane's ``{notModified: true}`` means nothing changed since (one global revision), so the
remembered services, releases and grants are reused: one request for an unchanged fleet.

Failure policy (unknown is never absent): one service's failure is a ``ReadFailure``;
unreadable grants are ``grants=None`` with the reason; only ``getServices`` failing (or
the control plane being unreachable) raises, because a snapshot without any service in
it would read as "nothing exists". Must not print; progress goes through ``Progress``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from reconciler.core.cpcodes import ControlPlaneCode
from reconciler.core.live import LiveGrant, LiveService, ReadFailure
from reconciler.core.routing import GatewayRoute
from reconciler.core.sanitize import safe
from reconciler.shell.controlplane.client import SERVICES_RELEASES, ControlPlaneClient
from reconciler.shell.controlplane.errors import (
    ControlPlaneError,
    DomainError,
    ProtocolError,
    UnknownMethod,
)
from reconciler.shell.controlplane.wire import (
    RawObject,
    ReleaseWire,
    ServiceFields,
    ServiceList,
    Services,
    ServiceWire,
    parse_grants,
    service_fields,
    service_id_of,
)
from reconciler.shell.progress import Progress

#: Services asked per ``getServicesReleases`` page (a server may answer fewer), and so
#: per part of the listing: the managed ids are asked in parts of this many, each part
#: its own paged listing, every part at once (a cursor chains one part's pages only).
RELEASES_PAGE: Final = 1000
#: Pages beyond what the services explain before a listing is taken as not ending.
SPARE_PAGES: Final = 100


@dataclass(frozen=True)
class Fleet:
    """What one read of the control plane produced."""

    services: dict[str, LiveService | ReadFailure]  # every managed service id
    grants: tuple[LiveGrant, ...] | None  # None: unreadable (``grants_error`` says why)
    grants_error: str | None
    #: appId -> service id, for every service ``getServices`` listed (a service's appId is
    #: ``data.appId``, else its name, as the clusters know it)
    app_ids: dict[str, str] = field(default_factory=dict)


def failure(service_id: str, exc: ControlPlaneError | None, reason: str | None = None
            ) -> ReadFailure:
    """A service that ``getServices`` listed but whose releases could not be read.

    The control plane's code is kept, except ``SERVICE_NOT_FOUND``: the planner takes that
    code for "the service does not exist" (a creation), and this service was just listed,
    so a release read saying otherwise is a failed read, never an absence."""
    code = (safe(exc.code, 60) or None) if isinstance(exc, DomainError) else None
    if code == ControlPlaneCode.SERVICE_NOT_FOUND:
        code = None
    message = exc.message if exc is not None else ""
    return ReadFailure(service_id=service_id, reason=reason or message, code=code)


#: A service as ``getServices`` listed it: its wire model, or raw when it does not fit.
Listed = ServiceWire | RawObject


@dataclass
class Memory:
    """The last clean read and the [ext] etag it was read at, kept by a caller across
    snapshots (the watcher's engine); empty for a one-shot plan.

    Invariant: ``fleet`` is remembered only with an ``etag`` that ``getServices`` and the
    grants both answered with, every managed service read (or absent from
    ``getServices``), for exactly ``managed``. A later ``{notModified}`` for that etag
    means nothing in the control plane changed since, so ``fleet`` is still its word."""

    etag: str | None = None
    managed: tuple[str, ...] = ()
    fleet: Fleet | None = None
    #: Issue 21: the gateway routes read *after* ``fleet`` was read at ``etag`` (so no
    #: older than it); the sandbox's revision moves with every route too, so a
    #: ``{notModified}`` for ``etag`` means they are still the control plane's word.
    routes: tuple[GatewayRoute, ...] | None = None

    def usable(self, managed: tuple[str, ...]) -> bool:
        return self.fleet is not None and self.etag is not None and self.managed == managed

    def keep(self, managed: tuple[str, ...], fleet: Fleet, etag: str | None) -> None:
        """Remember ``fleet`` at ``etag`` when it is clean, else forget everything."""
        clean = etag is not None and fleet.grants is not None and all(
            isinstance(s, LiveService) or s.code == ControlPlaneCode.SERVICE_NOT_FOUND
            for s in fleet.services.values())
        self.etag, self.managed, self.fleet = (etag, managed, fleet) if clean \
            else (None, (), None)


async def read(client: ControlPlaneClient, managed: Sequence[str], progress: Progress,
               memory: Memory | None = None) -> Fleet:
    """getServices, the grants and the capabilities together; then the releases of every
    service in ``managed`` (ids, unique), in pages or one by one.

    The [ext] releases listing does not wait for ``getServices``: it is asked for every
    managed id as soon as the capabilities say it is offered, while the control plane
    is still sending the (large) ``getServices`` reply, and folded in once that is read
    (a requested service that does not exist is absent from the listing, so asking for
    the managed ids is asking for the listed ones; docs/extensions.md §2). The ids are
    asked in parts of a page each, all parts at once: one listing's cursor would chain
    its pages one round trip after another (at 10,000 services, ten of them after
    ``getServices`` had arrived; docs/scaling.md, rounds 4 and 5).

    With a usable ``memory``, ``getServices`` goes first and alone, with the remembered
    etag: ``notModified`` returns the remembered fleet (one request for an unchanged
    fleet); anything else is a full read that starts from that reply."""
    ids = tuple(managed)
    first: Services | None = None
    if memory is not None and memory.usable(ids) and memory.fleet is not None:
        progress.add(1)
        first = await client.read_services(if_none_match=memory.etag)
        progress.advance()
        if first.services is None:
            return memory.fleet
    progress.add((2 if first is None else 1) + len(ids))

    async def grants_read() -> tuple[tuple[LiveGrant, ...] | None, str | None, str | None]:
        try:
            reply = await client.read_grants()
            return parse_grants(reply.grants), None, reply.etag
        except ControlPlaneError as exc:
            return None, exc.message, None
        finally:
            progress.advance()

    revisions: set[str | None] = set()  # every revision this read saw
    # A full read: the control plane changed (or this is the first read), so what it
    # offers is asked again -- a watcher must not keep using an extension a restarted
    # control plane no longer has, nor miss one it gained. Asked before anything else is
    # sent (one small round trip): asked together with getServices, the control plane
    # answers it only after that large reply, and the listing would wait for it too; and
    # a control plane that cannot be asked at all fails here, with its first error (the
    # scheme, the address), not with a later caller's.
    client.forget_capabilities()
    capabilities = await _offered(client)
    grants_task = asyncio.create_task(grants_read())
    listing_task = asyncio.create_task(_listings(client, ids, revisions)) \
        if SERVICES_RELEASES in capabilities and ids else None
    tasks = [grants_task] + ([listing_task] if listing_task is not None else [])
    try:
        if first is None:
            first = await client.read_services()
            progress.advance()
        revisions.add(first.etag)
        # Read while the listing may still be arriving, and let go of: one chunk's wire
        # models are alive at a time, and the reply's bytes only until the last chunk.
        listed, app_ids = _listed(first.services, ids)
        parts = await listing_task if listing_task is not None else None
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    services: dict[str, LiveService | ReadFailure] = {
        service_id: ReadFailure(
            service_id=service_id, code=ControlPlaneCode.SERVICE_NOT_FOUND.value,
            reason="the control plane has no service with this id")
        for service_id in ids if service_id not in listed}
    progress.advance(len(services))
    present = [s for s in ids if s in listed]
    if parts is not None and present:
        services.update(await _fold(client, parts, present, listed, progress))
    else:
        services.update(await _one_by_one(client, present, listed, progress))
    grants, grants_error, grants_etag = await grants_task
    revisions.add(grants_etag)
    fleet = Fleet(services={s: services[s] for s in ids}, grants=grants,
                  grants_error=grants_error, app_ids=app_ids)
    if memory is not None:
        # One revision for every read, or they may straddle a change: then nothing is
        # remembered and the next snapshot reads everything again.
        memory.keep(ids, fleet, first.etag if revisions == {first.etag} else None)
    return fleet


#: A listed service read into its fields (``wire.service_fields``), or why it could not be.
Read = ServiceFields | ProtocolError


def _listed(listed: ServiceList | None, ids: Sequence[str]
            ) -> tuple[dict[str, Read], dict[str, str]]:
    """Each managed service of ``ids`` that ``getServices`` listed, read into its fields
    (a service listed twice is its last listing's, as one read of the whole reply has
    it), and the appIds of every listed service (``add_app_ids``). Built a chunk at a
    time (``ServiceList.chunks``), each chunk read before the next is built."""
    managed = set(ids)
    app_ids: dict[str, str] = {}
    out: dict[str, Read] = {}
    for chunk in listed.chunks() if listed is not None else ():
        add_app_ids(app_ids, chunk)
        for raw in chunk:
            service_id = service_id_of(raw)
            if isinstance(service_id, str) and service_id in managed:
                try:
                    out[service_id] = service_fields(raw)
                except ProtocolError as exc:
                    out[service_id] = exc
    return out, app_ids


def _with_releases(service_id: str, read: Read,
                   releases: Sequence[ReleaseWire | RawObject]) -> LiveService | ReadFailure:
    if isinstance(read, ProtocolError):  # the service itself is malformed
        return failure(service_id, read)
    try:
        return read.with_releases(releases)
    except ControlPlaneError as exc:
        return failure(service_id, exc)


def add_app_ids(out: dict[str, str], listed: Iterable[Listed]) -> None:
    """appId -> service id of every listed ``IService``, into ``out`` (the first listed
    wins a tie); an entry without a usable id or name is skipped (its own read reports
    it)."""
    for raw in listed:
        if isinstance(raw, ServiceWire):
            service_id: object = raw.id
            app_id: object = raw.data.app_id or raw.data.name
        else:
            data = raw.get("data")
            service_id = raw.get("id")
            if not isinstance(data, dict):
                continue
            app_id = data.get("appId") or data.get("name")
        if isinstance(service_id, str) and isinstance(app_id, str) and app_id:
            out.setdefault(safe(app_id, 200), safe(service_id, 200))


async def _offered(client: ControlPlaneClient) -> frozenset[str]:
    """The extensions offered; a control plane that refuses to say offers none (its
    failure to answer at all is ``getServices``'s to report)."""
    try:
        return await client.capabilities()
    except DomainError:
        return frozenset()


async def _one_by_one(client: ControlPlaneClient, ids: Sequence[str],
                      listed: dict[str, Read],
                      progress: Progress) -> dict[str, LiveService | ReadFailure]:
    """One ``getServiceImageReleases`` per service, at most ``client.concurrency`` in
    flight: a call's deadline must start when it is sent, not while it queues behind
    2,000 others for a pooled connection."""
    slots = asyncio.Semaphore(client.concurrency)

    async def one(service_id: str) -> LiveService | ReadFailure:
        async with slots:
            try:
                releases = await client.get_releases(service_id)
            except ControlPlaneError as exc:
                return failure(service_id, exc)
            else:
                return _with_releases(service_id, listed[service_id], releases)
            finally:
                progress.advance()

    results = await asyncio.gather(*(one(s) for s in ids))
    return dict(zip(ids, results, strict=True))


@dataclass
class _Listing:
    """What one part of the [ext] releases listing carried for its ids, before
    ``getServices`` says which of them exist."""

    ids: frozenset[str]
    #: serviceId -> its releases as listed; None: listed on two pages (neither is its word)
    releases: dict[str, list[ReleaseWire | RawObject] | None] = field(default_factory=dict)
    #: the page that failed, and why (the services it had not carried fail with it)
    error: ControlPlaneError | _NoEnd | None = None
    page: int = 0
    #: listed by ``getCapabilities`` but not answered: the seeds' way for the rest
    unanswered: bool = False


async def _listings(client: ControlPlaneClient, ids: Sequence[str],
                    revisions: set[str | None]) -> list[_Listing]:
    """[ext] ``getServicesReleases`` for ``ids``, in parts of ``RELEASES_PAGE`` ids read
    at once (at most ``client.concurrency`` in flight), each part to its end."""
    slots = asyncio.Semaphore(client.concurrency)

    async def part(start: int) -> _Listing:
        async with slots:
            return await _listing(client, ids[start:start + RELEASES_PAGE], revisions)

    return list(await asyncio.gather(*(part(start)
                                       for start in range(0, len(ids), RELEASES_PAGE))))


async def _listing(client: ControlPlaneClient, ids: Sequence[str],
                   revisions: set[str | None]) -> _Listing:
    """[ext] ``getServicesReleases`` for ``ids``, every page; the etag of every page goes
    into ``revisions``. Never raises for the control plane's answer: a failure is kept
    in the listing, for ``_fold`` to word per service."""
    wanted = frozenset(ids)
    listing = _Listing(wanted)
    cursor: str | None = None
    seen_cursors: set[str] = set()
    most = len(ids) // RELEASES_PAGE + SPARE_PAGES
    try:
        while True:
            listing.page += 1
            page = await client.get_services_releases(ids, cursor=cursor, limit=RELEASES_PAGE)
            revisions.add(page.etag)
            for service_id, releases in page.releases.items():
                if service_id in wanted:
                    listing.releases[service_id] = \
                        None if service_id in listing.releases else releases
            cursor = page.next_cursor
            if cursor is None:
                return listing
            if cursor in seen_cursors or listing.page >= most:
                raise _NoEnd(f"{SERVICES_RELEASES}: the listing did not end after "
                             f"{listing.page} pages (its cursor repeats or runs past every "
                             "service)")
            seen_cursors.add(cursor)
    except UnknownMethod:
        listing.unanswered = True
    except (ControlPlaneError, _NoEnd) as exc:
        listing.error = exc
    return listing


async def _fold(client: ControlPlaneClient, parts: Sequence[_Listing], ids: Sequence[str],
                listed: dict[str, Read],
                progress: Progress) -> dict[str, LiveService | ReadFailure]:
    """The listing's releases of ``ids`` (each exists per ``getServices``) as
    ``core.live`` values; a service its part did not carry is asked for on its own (it
    may have appeared in between), or fails with the page of its part that failed."""
    out: dict[str, LiveService | ReadFailure] = {}
    missing: list[str] = []
    part_of = {service_id: part for part in parts for service_id in part.ids}
    for service_id in ids:
        part = part_of[service_id]
        if service_id in part.releases:
            releases = part.releases[service_id]
            out[service_id] = failure(service_id, None, reason=(
                f"{SERVICES_RELEASES}: listed on two pages")) if releases is None \
                else _with_releases(service_id, listed[service_id], releases)
        elif part.error is not None:
            exc = part.error
            message = exc.message if isinstance(exc, ControlPlaneError) else str(exc)
            reason = (f"{message} (page {part.page}; this service was not on a page read "
                      "before it)") if part.page > 1 else message
            out[service_id] = failure(
                service_id, exc if isinstance(exc, ControlPlaneError) else None, reason)
        else:
            missing.append(service_id)
            continue
        progress.advance()
    if missing:
        out.update(await _one_by_one(client, missing, listed, progress))
    return out


class _NoEnd(Exception):
    """A paginated listing whose cursor never ended."""


