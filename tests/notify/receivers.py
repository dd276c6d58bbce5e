"""A local HTTP receiver for notification tests: real HTTP on 127.0.0.1, every request
recorded (method, path, headers, body); ``statuses`` answers the next requests with
those codes (503, 503, ...) before 200, to test retries."""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    status: int
    at: float

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    server: ThreadingHTTPServer
    requests: list[Received] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/hook"

    def ok(self) -> list[Received]:
        with self.lock:
            return [r for r in self.requests if r.status < 300]

    def wait_for(self, count: int, timeout: float = 30) -> list[Received]:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if len(self.ok()) >= count:
                return self.ok()
            time.sleep(0.05)
        raise AssertionError(f"{len(self.ok())} request(s) received, wanted {count}: "
                             f"{self.requests}")

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start() -> Receiver:
    holder: dict[str, Receiver] = {}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return None

        def do_POST(self) -> None:
            receiver = holder["r"]
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with receiver.lock:
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                receiver.requests.append(Received("POST", self.path, dict(self.headers),
                                                  body, status, time.monotonic()))
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver = Receiver(server)
    holder["r"] = receiver
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return receiver


def closed_port_url() -> str:
    """A loopback URL nothing listens on: a receiver that is down."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/hook"


@dataclass
class Trickler:
    """A receiver that takes the request, then answers one byte every ``every`` seconds
    (headers and body): each read is quick, the answer never ends in reasonable time."""

    sock: socket.socket
    every: float
    stopped: threading.Event = field(default_factory=threading.Event)
    accepted: list[float] = field(default_factory=list)

    @property
    def url(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"http://{host}:{port}/hook"

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(time.monotonic())
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        answer = b"HTTP/1.1 200 OK\r\nContent-Length: 200\r\n\r\n" + b"x" * 200
        with conn:
            conn.settimeout(5)
            try:
                conn.recv(65536)  # the request (its start is enough)
                for byte in answer:
                    if self.stopped.is_set():
                        return
                    conn.sendall(bytes([byte]))
                    time.sleep(self.every)
            except OSError:
                return  # the client gave up

    def stop(self) -> None:
        self.stopped.set()
        self.sock.close()


def trickler(every: float) -> Trickler:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    t = Trickler(sock, every)
    threading.Thread(target=t._serve, daemon=True).start()
    return t
