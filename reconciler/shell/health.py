"""The watcher's HTTP endpoint: ``/metrics``, ``/healthz`` and ``/readyz`` on one port.

``/healthz`` answers 200 while the process serves at all (liveness). ``/readyz`` answers
200 only while the live side has been read recently enough to trust what the watcher
says: at least one of the last N observations succeeded (N=2 by default, so it turns
503 at the second failed resync in a row and 200 again at the first success), with a
one-line reason when it is not. A **suspended** watcher is ready (suspension is a healthy
state an operator chose, and a watcher restarted while suspended reads nothing, so it
would otherwise never become Ready): ``/readyz`` answers 200 with ``suspended`` on its
first line, then the suspension (since when, why, how to resume), then what the live
side's readiness will be at resume when that is not ready.
``/metrics`` is Prometheus' text format from the watcher's own registry. With the web
view on (``watch --view``), ``/``, ``/pipeline`` and ``/service/NAME`` are its pages
(``shell.webserve``: read-only, 405 to anything but GET and HEAD). ``POST
/suspend``, ``/resume`` and ``/reconcile`` are answered by ``shell.control`` (404 while
control is off).

Owns the server (a small ``http.server`` on a daemon thread; loopback by default) and
the readiness state, which the watcher updates and the server thread reads under a lock.
Decides nothing else; ``shell.watching`` tells it what happened.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

if TYPE_CHECKING:
    from reconciler.shell.control import Control
    from reconciler.shell.webserve import WebView


@dataclass
class Readiness:
    """Whether the last observations of the live side succeeded; thread-safe."""

    window: int = 2  # ready while at least one of the last ``window`` observations succeeded
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _failures: int = 0  # consecutive failed observations since the last success
    _last_ok: float | None = None  # wall-clock time of the last successful observation
    _reason: str = "no observation of the live side yet"
    #: Reasons besides the live side to answer 503, by name (sharded watching: etcd
    #: unreachable, shards nobody reconciled for two resyncs); each one a line.
    _held: dict[str, str] = field(default_factory=dict)
    #: The suspension's description while the watcher is suspended, None otherwise
    #: (``Control.detail``); set by ``follow``.
    _suspension: Callable[[], str | None] | None = None

    def follow(self, suspension: Callable[[], str | None]) -> None:
        """Answer ready, saying so, whenever ``suspension()`` describes one."""
        with self._lock:
            self._suspension = suspension

    def hold(self, name: str, reason: str | None) -> None:
        """Not ready for ``reason`` until it is held again with None."""
        with self._lock:
            if reason is None:
                self._held.pop(name, None)
            else:
                self._held[name] = reason

    def succeeded(self) -> None:
        with self._lock:
            self._failures, self._last_ok, self._reason = 0, time.time(), ""

    def failed(self, reason: str) -> None:
        with self._lock:
            self._failures += 1
            self._reason = reason

    def waiting(self, reason: str) -> None:
        """Nothing could be observed (no valid desired state yet): not ready, no failure."""
        with self._lock:
            if self._last_ok is None:
                self._reason = reason

    @property
    def last_success(self) -> float | None:
        with self._lock:
            return self._last_ok

    def state(self) -> tuple[bool, str]:
        with self._lock:
            suspension = self._suspension
        detail = suspension() if suspension is not None else None
        ready, reason = self._live_state()
        if detail is None:
            return ready, reason
        # Suspended: an operator's choice, not a fault -- ready whatever the live side
        # said before (or, restarted while suspended, never said: nothing is read).
        lines = ["suspended", detail]
        if not ready:
            lines.append(f"at resume, not ready until the live side is read: {reason}")
        return True, "\n".join(lines)

    def _live_state(self) -> tuple[bool, str]:
        with self._lock:
            if self._held:
                return False, "\n".join(self._held[k] for k in sorted(self._held))
            if self._last_ok is None:
                return False, self._reason
            if self._failures >= self.window:
                age = time.time() - self._last_ok
                return False, (f"{self._failures} observation(s) of the live side failed in "
                               f"a row (last success {age:.0f}s ago): {self._reason}")
            return True, "ready"


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], registry: CollectorRegistry,
                 readiness: Readiness, control: Control | None = None,
                 web: WebView | None = None) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)
        self.registry = registry
        self.readiness = readiness
        self.control = control
        self.web = web


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "reconcile"

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def do_PUT(self) -> None:
        self._read_only()

    def do_DELETE(self) -> None:
        self._read_only()

    def do_PATCH(self) -> None:
        self._read_only()

    def do_OPTIONS(self) -> None:
        self._read_only()

    def _read_only(self) -> None:
        """Nothing here takes PUT, DELETE, PATCH or OPTIONS (control is POST)."""
        data = b"method not allowed: GET or HEAD (POST for the control routes)\n"
        self.send_response(405)
        self.send_header("Allow", "GET, HEAD, POST")
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _web(self, method: str, *, body: bool) -> bool:
        """A web view page (``shell.webserve``) when the view is on; False otherwise."""
        from reconciler.shell.webserve import is_view_path

        web = self.server.web
        if web is None or not is_view_path(self.path.split("?", 1)[0]):
            return False
        status, headers, data = web.answer(method, self.path,
                                           self.headers.get("Authorization"),
                                           int(time.time() * 1000))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)
        return True

    def do_POST(self) -> None:
        from reconciler.shell.control import MAX_REASON, Answer

        if self._web("POST", body=True):
            return
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 <= length <= 4 * MAX_REASON:
            answer = Answer(413, {"error": "the request body is too large"})
        else:
            body = self.rfile.read(length) if length else b""
            control = self.server.control
            answer = control.handle(path, self.headers.get("Authorization"),
                                    str(self.client_address[0]), body) \
                if control is not None else Answer(404, {"error": "control is off: start "
                                                         "watch with --control-token-file FILE"})
        data = (json.dumps(answer.body, sort_keys=True) + "\n").encode()
        self.send_response(answer.status)
        for name, value in answer.headers:
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def _answer(self, *, body: bool) -> None:
        if self._web("GET", body=body):
            return
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            status, ctype, data = 200, CONTENT_TYPE_LATEST, generate_latest(self.server.registry)
        elif path == "/healthz":
            status, ctype, data = 200, "text/plain; charset=utf-8", b"ok\n"
        elif path == "/readyz":
            ready, reason = self.server.readiness.state()
            status = 200 if ready else 503
            ctype, data = "text/plain; charset=utf-8", (reason + "\n").encode()
        else:
            status, ctype, data = 404, "text/plain; charset=utf-8", \
                b"not found: /metrics, /healthz, /readyz\n"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        return  # scrapes and probes are not events


@dataclass
class Endpoint:
    """The running server; ``address`` is where it listens (port 0 resolved)."""

    server: _Server
    thread: threading.Thread

    @property
    def address(self) -> str:
        host, port = self.server.server_address[:2]
        host = str(host)
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def serve(addr: str, port: int, registry: CollectorRegistry, readiness: Readiness,
          control: Control | None = None, web: WebView | None = None) -> Endpoint:
    """Listen on ``addr:port`` (``OSError`` if it cannot) and serve on a daemon thread;
    with ``web``, the web view's pages too (``shell.webserve``)."""
    if control is not None:
        readiness.follow(control.detail)
    server = _Server((addr, port), registry, readiness, control, web)
    thread = threading.Thread(target=server.serve_forever, name="reconcile-metrics",
                              daemon=True)
    thread.start()
    return Endpoint(server, thread)
