"""Read many apps' status from one cluster in a few requests: the [ext] batch route.

Owns the batch status read of one cluster (CONTRACT §2 [ext]; docs/live-side.md): the
query (the app ids needed when their list is short enough for a URL, else every app of
the cluster), the pages followed by cursor, and the evidence rules of a listing:

- an entry is parsed exactly like the per-app status reply (``parsing.parse_status``): a
  malformed entry makes that one app silent;
- an app missing from a *complete* listing (every page read) has no runtime record,
  as a 404 says today;
- when a page fails (transport, HTTP status, malformed or truncated body, a listing that
  does not end), every needed app not carried by the pages read before it is silent with
  that reason -- never "no record": without the failed page's cursor no later page can be
  asked, so those are exactly the apps the failed page (or one after it) had to carry;
- a route the health reply advertised but that answers 404 on its first page is not
  there: the caller reads that cluster app by app (``read`` returns False).

Conditional resync: the first page of a complete listing leaves its ``ETag`` and the
observations it produced in ``BatchReader``'s memory (one entry per address, for the
exact query); the next read of the same query sends ``If-None-Match``, and a ``304``
reuses those very observations and reports the time of the ``304`` once (a fresh
confirmation of all of them: ``core.live.Confirmation``) -- not a re-stamped copy of each.
That relies on the route's contract that the ETag changes whenever anything the listing
could show changes (it is the cluster's runtime revision, docs/extensions.md §1), so an
unchanged first page speaks for every page. The memory lives as long as the prober: a
watcher keeps it across resyncs; a one-shot plan starts without one.

Must not raise for a cluster's failure (those are observations) and must not print.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlencode

import httpx

from reconciler.core.live import Observation, ObservationKind
from reconciler.core.sanitize import safe
from reconciler.shell.probing.authenticating import Authenticator
from reconciler.shell.probing.dialing import Dialer, Silent, now_ms
from reconciler.shell.probing.parsing import (
    Malformed,
    Shared,
    parse_batch_page,
    read_status,
)

#: Apps asked per page (a server may answer fewer: it follows with a cursor).
PAGE_LIMIT: Final = 1000
#: Longest ``appIds`` value sent; a longer list asks for every app of the cluster instead
#: (one URL stays well under the 8 KiB most servers accept, and a long list costs more to
#: send on every page than the entries it would leave out).
MAX_APP_IDS_QUERY: Final = 2000
#: Pages one listing may take beyond what the needed apps explain (a server whose cursor
#: never ends must not keep a pass busy).
SPARE_PAGES: Final = 100
#: An RFC 9110 entity-tag, ASCII only: it is sent back verbatim as ``If-None-Match``,
#: and a header value httpx cannot encode would break the next read of the cluster.
ENTITY_TAG: Final = re.compile(r'(?:W/)?"[\x21\x23-\x7e]*"')
#: The longest ETag kept and sent back (anything longer is not remembered).
MAX_ETAG: Final = 512

#: Receives each (app, observation) as soon as it is known.
Record = Callable[[str, Observation], None]
#: Receives the time (ms since the epoch) a cluster confirmed its remembered listing.
Confirm = Callable[[int], None]


@dataclass(frozen=True)
class Query:
    """What one listing asks for: the apps needed, and whether they are named."""

    apps: tuple[str, ...]  # sorted, unique
    named: bool  # True: ``appIds`` lists them; False: every app of the cluster

    @classmethod
    def of(cls, apps: Sequence[str]) -> Query:
        needed = tuple(sorted(set(apps)))
        return cls(needed, len(",".join(needed)) <= MAX_APP_IDS_QUERY)

    def target(self, path: str, cursor: str | None, limit: int) -> str:
        params: dict[str, str] = {}
        if self.named:
            params["appIds"] = ",".join(self.apps)
        if cursor is not None:
            params["cursor"] = cursor
        params["limit"] = str(limit)
        return f"{path}?{urlencode(params, safe=',')}"


@dataclass(frozen=True)
class Remembered:
    """A complete listing: what it asked, its first page's ETag, what it showed."""

    cluster: str
    path: str
    query: Query
    etag: str
    observations: dict[str, Observation]


class _PageFailed(Exception):
    """A page that could not be read; ``reason`` is said for every app not yet carried."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _RouteMissing(Exception):
    """The advertised route answered 404 on its first page."""


class _Unchanged(Exception):
    """The first page answered 304 to the remembered ETag."""


class BatchReader:
    """Batch status reads against the mesh's addresses, with their bearers; remembers
    the last complete listing per address for conditional re-reads."""

    def __init__(self, dialer: Dialer, auth: Authenticator, *,
                 page_limit: int = PAGE_LIMIT) -> None:
        self._dialer = dialer
        self._auth = auth
        self.page_limit = page_limit
        self._memory: dict[str, Remembered] = {}

    async def read(self, cluster: str, address: str, path: str, apps: Sequence[str],
                   record: Record, shared: Shared | None = None,
                   confirm: Confirm | None = None) -> bool:
        """Record one observation per app in ``apps`` for ``cluster``; False (nothing
        recorded) when the advertised route is not there and the caller must read the
        apps one by one. ``shared``: the pass's parsed values (``parsing.Shared``).
        ``confirm``: told when a ``304`` confirmed the remembered observations recorded
        (without it they keep the time they were first said, and age from there)."""
        query = Query.of(apps)
        seen: dict[str, Observation] = {}
        known = self._memory.get(address)
        if known is not None and (known.cluster, known.path, known.query) != (
                cluster, path, query):
            known = None  # another question (or another cluster there now): ask afresh

        def keep(app: str, observation: Observation) -> None:
            seen[app] = observation
            record(app, observation)

        try:
            etag = await self._listing(cluster, address, path, query, keep, known, shared)
        except _Unchanged:
            assert known is not None
            confirmed = now_ms()
            for app in query.apps:
                record(app, known.observations[app])
            if confirm is not None:
                confirm(confirmed)
            return True
        except _RouteMissing:
            self._memory.pop(address, None)
            return False
        except _PageFailed as exc:
            self._memory.pop(address, None)
            failed = now_ms()
            for app in query.apps:
                if app not in seen:
                    record(app, Observation(cluster_id=cluster, address=address,
                                            kind=ObservationKind.SILENT, reason=exc.reason,
                                            observed_at=failed))
            return True
        done = now_ms()
        for app in query.apps:
            if app not in seen:  # a complete listing without it: no runtime record
                keep(app, Observation(cluster_id=cluster, address=address,
                                      kind=ObservationKind.NO_RECORD, observed_at=done))
        if etag is None:
            self._memory.pop(address, None)
        else:
            self._memory[address] = Remembered(cluster, path, query, etag, seen)
        return True

    async def _listing(self, cluster: str, address: str, path: str, query: Query,
                       keep: Record, known: Remembered | None,
                       shared: Shared | None) -> str | None:
        """Every page, in order; the first page's ETag (None: it sent none)."""
        # Each app asked for, as the caller's own string: a page's keys are strings of
        # its own, and what is kept (the listing, the snapshot's rows) names the app by
        # the one string every cluster's answer shares, not by ten copies of it.
        wanted = {app: app for app in query.apps}
        listed: set[str] = set()
        cursor: str | None = None
        cursors: set[str] = set()
        most = len(query.apps) // max(1, self.page_limit) + SPARE_PAGES
        etag: str | None = None
        number = 0
        while True:
            number += 1
            conditional = known.etag if known is not None and number == 1 else None
            response = await self._page(
                address, query.target(path, cursor, self.page_limit), number, conditional)
            arrived = now_ms()
            if response.status_code == 304 and conditional is not None:
                raise _Unchanged
            if response.status_code == 404 and number == 1:
                raise _RouteMissing
            if response.status_code != 200:
                raise _PageFailed(self._where(number, f"HTTP {response.status_code}"))
            try:
                page = parse_batch_page(response.content)
            except Malformed as exc:
                raise _PageFailed(self._where(number, exc.reason)) from exc
            if number == 1:
                sent = response.headers.get("ETag")
                etag = sent if sent and len(sent) <= MAX_ETAG and ENTITY_TAG.fullmatch(
                    sent) else None
            for listed_as, status in page.statuses.items():
                app = wanted.get(listed_as)
                if app is None:
                    continue  # another app of this cluster (every app was asked for)
                if app in listed:
                    # Two pages, two answers: neither can be taken as the cluster's word.
                    keep(app, self._silent(cluster, address, "batch status: listed on two "
                                           "pages", arrived))
                    continue
                listed.add(app)
                try:
                    runtime, since = read_status(app, status, shared)
                    observation = Observation(cluster_id=cluster, address=address,
                                              kind=ObservationKind.ANSWERED,
                                              runtime=runtime, observed_at=arrived,
                                              healthy_since=since)
                except Malformed as exc:
                    observation = self._silent(cluster, address,
                                               f"batch status entry: {exc.reason}", arrived)
                keep(app, observation)
            cursor = page.next_cursor
            if cursor is None:
                return etag
            if cursor in cursors or number >= most:
                raise _PageFailed(self._where(number + 1, "the listing did not end (its "
                                              "cursor repeats or runs past every app)"))
            cursors.add(cursor)

    async def _page(self, address: str, target: str, number: int,
                    etag: str | None) -> httpx.Response:
        """One page with the address's bearer (a reused one refused is re-minted once)."""
        headers = {"If-None-Match": etag} if etag is not None else None
        try:
            token, reused = await self._auth.token(address)
            response = await self._dialer.request(address, "GET", target, bearer=token,
                                                  headers=headers)
            if response.status_code == 401 and reused:
                token = await self._auth.remint(address, token)
                response = await self._dialer.request(address, "GET", target, bearer=token,
                                                      headers=headers)
        except Silent as exc:
            # On the first page the cluster said nothing at all: the same words as the
            # per-app read. Later, which page it was matters.
            raise _PageFailed(exc.reason if number == 1 else self._where(number, exc.reason)) \
                from exc
        if response.status_code == 401:
            raise _PageFailed(self._where(
                number, "auth: HTTP 401 with a freshly minted token"))
        return response

    @staticmethod
    def _silent(cluster: str, address: str, reason: str, at: int) -> Observation:
        return Observation(cluster_id=cluster, address=address, kind=ObservationKind.SILENT,
                           reason=reason, observed_at=at)

    @staticmethod
    def _where(number: int, why: str) -> str:
        before = "" if number == 1 else \
            f"; this app was not on the {number - 1} page(s) read before it"
        return f"batch status read failed on page {number}: {safe(why, 200)}{before}"
