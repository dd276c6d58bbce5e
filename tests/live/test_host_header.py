"""The mesh ``Host`` header is the gateway name alone, over a real TLS socket.

A strict ingress (the kind that answers 421 Misdirected Request to a ``Host`` it does not
serve verbatim) stands in for a cluster: it records the ``Host`` and the SNI it received
and names itself only when ``Host`` is exactly the gateway.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from reconciler.sandbox import pki
from reconciler.shell.probing import HEALTH_PATH, Prober
from tests.live.fakes import connection, signer_pem

GATEWAY = "gw.strict.test"


class StrictIngress(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, context: ssl.SSLContext) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.hosts: list[str | None] = []
        self.snis: list[str | None] = []
        context.sni_callback = lambda sock, name, ctx: self.snis.append(name)  # type: ignore[assignment]
        self.socket = context.wrap_socket(self.socket, server_side=True)


class Handler(BaseHTTPRequestHandler):
    server: StrictIngress

    def do_GET(self) -> None:
        host = self.headers.get("Host")
        self.server.hosts.append(host)
        if host != GATEWAY:
            self._send(421, {"error": f"misdirected: {host}"})
        elif self.path == HEALTH_PATH:
            self._send(200, {"clusterId": "sn1"})
        else:
            self._send(404, {})

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        return


@pytest.fixture
def ingress(tmp_path: Path) -> Iterator[tuple[StrictIngress, Path]]:
    pki.ensure_ca(tmp_path)
    cert, key = pki.ensure_server_cert(tmp_path, "gw.pem", "gw-key.pem", dns=[GATEWAY], ips=[])
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = StrictIngress(context)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, tmp_path / pki.CA_FILE
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("gateway", [GATEWAY, "GW.Strict.Test"])
def test_host_is_the_gateway_name_without_the_port(
        ingress: tuple[StrictIngress, Path], gateway: str) -> None:
    server, ca = ingress
    port = server.server_address[1]
    assert port != 443  # the case where a ":port" used to be added

    async def go() -> Any:
        # A real TLS handshake with a server thread: the fakes' 1 s probe timeout ran out
        # on a loaded machine; this test is about the Host header, not the timeout.
        conn = connection(gateway=gateway.lower(), mesh_port=port, mesh_ca=ca,
                          static_addresses=("127.0.0.1",), settings_clusters=("sn1",),
                          probe_timeout=30.0)
        async with Prober(conn, signer_key=signer_pem()) as prober:
            return await prober.resolve()

    view = asyncio.run(go())
    assert [e.cluster_id for e in view.resolved] == ["sn1"], view
    assert server.hosts == [GATEWAY]
    assert server.snis == [GATEWAY]
