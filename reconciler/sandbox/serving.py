"""The HTTP/TLS plumbing both sandbox servers share: stdlib only, no web framework.

Owns the threaded HTTPS server (TLS is negotiated in each connection's own thread, so a
client that never completes its handshake cannot stall the accept loop), JSON replies
(optionally trickled a byte at a time), the process lifecycle helpers (die with the
parent, say READY once) and opening a listening socket. HTTP/1.1 with keep-alive.

Must not know any route: ``controlplane`` and ``cluster`` define handlers on top.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def listen_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (0 = a free port), inheritable by children."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(256)
    return sock


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    return ctx


def client_context(ca_file: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca_file))


class TLSServer(ThreadingHTTPServer):
    """A threaded HTTPS server over an already listening socket."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, sock: socket.socket, handler: type[BaseHTTPRequestHandler],
                 context: ssl.SSLContext) -> None:
        super().__init__(sock.getsockname(), handler, bind_and_activate=False)
        self.socket.close()
        self.socket = sock
        self.server_address = sock.getsockname()
        self.ssl_context = context

    def before_tls(self, request: socket.socket) -> bool:
        """Hook: False drops the connection before the TLS handshake."""
        return True

    def finish_request(self, request: Any, client_address: Any) -> None:
        if not self.before_tls(request):
            return
        request.settimeout(15.0)
        # Headers and body leave in two writes; without TCP_NODELAY, Nagle holds the
        # body until the client's delayed ACK (~40 ms per keep-alive request).
        with contextlib.suppress(OSError):
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            tls = self.ssl_context.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError):
            return
        try:
            self.RequestHandlerClass(tls, client_address, self)  # type: ignore[arg-type]
        except (OSError, ssl.SSLError):
            pass
        finally:
            with contextlib.suppress(OSError):
                tls.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client hanging up mid-reply is normal for a test server; stay quiet.
        pass


class JsonHandler(BaseHTTPRequestHandler):
    """Keep-alive JSON request handler with an optional byte-by-byte body."""

    protocol_version = "HTTP/1.1"
    server_version = "reconcile-sandbox"
    sys_version = ""
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def send_raw(self, status: int, body: bytes, *, content_type: str = "application/json",
                 trickle_ms: int = 0, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command == "HEAD":
            return
        if trickle_ms <= 0:
            self.wfile.write(body)
            return
        for index in range(len(body)):
            self.wfile.write(body[index:index + 1])
            self.wfile.flush()
            time.sleep(trickle_ms / 1000)

    def send_json(self, status: int, value: object, *, trickle_ms: int = 0,
                  extra: dict[str, str] | None = None) -> None:
        body = json.dumps(value, separators=(",", ":")).encode("utf-8")
        self.send_raw(status, body, trickle_ms=trickle_ms, extra=extra)


def die_with_parent(fd: int | None) -> None:
    """Exit when the launcher goes away: it holds the write end of the pipe ``fd``."""
    if fd is None or fd < 0:
        return

    def watch() -> None:
        try:
            while os.read(fd, 1):
                pass
        except OSError:
            pass
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def install_term_handler() -> None:
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))


def say_ready(detail: str = "") -> None:
    """One line on stdout tells the launcher this process serves; nothing else goes there."""
    sys.stdout.write(f"READY {detail}\n")
    sys.stdout.flush()
