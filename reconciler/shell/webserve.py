"""The web view as the watcher serves it (``watch --view``, issue 35).

Owns the pages' routes on the watcher's HTTP port (``shell.health``): ``/`` the fleet,
``/pipeline``, ``/service/NAME``; ``?part=main`` answers only a page's ``<main>`` (what
the page's poll swaps in) with the generation in ``X-Reconcile-Generation``. Read-only:
GET and HEAD only, anything else is 405 (suspend and resume stay on the control routes
and the CLI). With a token (``--view-token-file``) every page asks for
``Authorization: Bearer TOKEN`` (compared in constant time); the token is registered as a
secret, so no page or log line can show it.

Holds the last ``core.webview.View`` the watcher published (under a lock: the server
thread reads it) and renders on request (``render.webview``); the journal's history is
read when a service page is asked for, again only when the file changed. Decides nothing
about proof: the watcher publishes the rows the judge made.
"""

from __future__ import annotations

import dataclasses
import hmac
import threading
from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qs, unquote

from reconciler.core import sanitize
from reconciler.core import status as service_status
from reconciler.core.webview import HistoryItem, LiveRead, View, history_of
from reconciler.render import webview

#: The headers every page carries: the policy that lets only its own script and style
#: run, no framing, no sniffing, no referrer, never cached.
HEADERS: tuple[tuple[str, str], ...] = (
    ("Content-Security-Policy", webview.CSP), ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"), ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"))

Answer = tuple[int, tuple[tuple[str, str], ...], bytes]


def is_view_path(path: str) -> bool:
    return path in ("/", "/pipeline") or path.startswith("/service/")


class WebView:
    """The pages' state and their answers; thread-safe."""

    def __init__(self, *, token: str | None = None,
                 journal: Callable[[], Path | None] | None = None,
                 commit_url: str | None = None) -> None:
        if token:
            sanitize.register_secret(token)
        self.token = token
        self.journal = journal
        self.commit_url = commit_url
        self._lock = threading.Lock()
        self._view: View | None = None
        self._generation = 0
        self._history: tuple[tuple[str, float, int], tuple[HistoryItem, ...]] | None = None

    def publish(self, view: View) -> None:
        with self._lock:
            self._view = view
            self._generation += 1

    @property
    def generation(self) -> int:
        with self._lock:
            return self._generation

    def current(self, now_ms: int) -> tuple[View, int]:
        with self._lock:
            view, generation = self._view, self._generation
        if view is None:  # nothing observed yet: unknown, said so
            view = View(status=service_status.Status(taken_at=now_ms, environments=(), rows=()),
                        live=LiveRead(ok=False, reason="no observation of the live side yet"),
                        now_ms=now_ms, source="watch")
        return dataclasses.replace(view, now_ms=now_ms, commit_url=self.commit_url), generation

    def answer(self, method: str, raw_path: str, authorization: str | None,
               now_ms: int) -> Answer:
        """The answer to ``method raw_path`` (a view path: ``is_view_path``)."""
        if method not in ("GET", "HEAD"):
            return 405, (("Allow", "GET, HEAD"), ("Content-Type", "text/plain; charset=utf-8")
                         ), b"the web view is read-only: GET or HEAD\n"
        if self.token is not None:
            scheme, _, given = (authorization or "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                    given.strip().encode(), self.token.encode()):
                return 401, (("WWW-Authenticate", 'Bearer realm="reconcile view"'),
                             ("Content-Type", "text/plain; charset=utf-8")), \
                    b"missing or wrong bearer token (the one in --view-token-file)\n"
        path, _, query = raw_path.partition("?")
        asked = parse_qs(query)

        def one(key: str) -> str:
            return asked.get(key, [""])[0][:200]

        part = one("part")
        window = webview.Window(name=one("name"), env=one("env"), state=one("state"),
                                page=int(one("page")) if one("page").isdigit() else 0)
        page, name = "fleet", None
        if path == "/pipeline":
            page = "pipeline"
        elif path.startswith("/service/"):
            page, name = "service", unquote(path.removeprefix("/service/"))
        view, generation = self.current(now_ms)
        if page == "service":
            view = dataclasses.replace(view, history=self._read_history())
            if name not in {r.service for r in view.status.rows} and view.status.rows:
                body = webview.document(view, page, name, generation=generation)
                return 404, self._headers(generation), body.encode()
        body = webview.main(view, page, name, window=window) if part == "main" else \
            webview.document(view, page, name, generation=generation, window=window)
        return 200, self._headers(generation), body.encode()

    @staticmethod
    def _headers(generation: int) -> tuple[tuple[str, str], ...]:
        return (("Content-Type", "text/html; charset=utf-8"),
                ("X-Reconcile-Generation", str(generation)), *HEADERS)

    def _read_history(self) -> tuple[HistoryItem, ...]:
        """The journal's history, read again only when the file changed; a journal that
        cannot be read leaves the history empty (the page says nothing recorded)."""
        from reconciler.shell import journal as journal_mod

        path = self.journal() if self.journal is not None else None
        if path is None:
            return ()
        try:
            stat = path.stat()
        except OSError:
            return ()
        key = (str(path), stat.st_mtime, stat.st_size)
        cached = self._history
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            runs = journal_mod.history(path, on_torn=lambda _tail: None)
            reverts = journal_mod.reverts(path, on_torn=lambda _tail: None)
            proposals = journal_mod.proposals(path, on_torn=lambda _tail: None)
        except (journal_mod.JournalError, OSError):
            return ()
        items = history_of([r.to_json() for r in runs], reverts, proposals)
        self._history = (key, items)
        return items
