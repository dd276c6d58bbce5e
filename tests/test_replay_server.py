"""The benchmarks' replay server: recorded replies served over real TLS by request content.

A recording made by hand (two requests), served by ``benchmarks/replay_server.py serve``
as its own process on loopback with sandbox certificates, read with httpx as reconcile
reads: the same bytes and ETag whatever the order, ``304`` to the recorded ETag, the
typedrequest found by method and request without the identity, ``599`` (and nothing
made up) for what the recording does not hold.
"""

from __future__ import annotations

import json
import os
import pickle
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from benchmarks import replay_server
from reconciler.sandbox import pki

ROOT = Path(__file__).resolve().parent.parent
PAGE = b'{"apps":[{"appId":"a1","status":{"state":"RUNNING"}}],"nextCursor":null}'


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    state = tmp_path_factory.mktemp("replay")
    pki.ensure_all(state, gateway="gateway.sandbox.test")
    port = _free_port()
    listing = replay_server.content_key("GET", "127.0.0.1", port,
                                        "/deployment/apps/status?limit=2", b"")
    typed = replay_server.content_key(
        "POST", "127.0.0.1", port, "/typedrequest",
        json.dumps({"method": "getServices",
                    "request": {"identity": {"jwt": "x"}, "b": 1, "a": [2]}}).encode())
    recording = {
        "endpoints": {("127.0.0.1", port)},
        "replies": {listing: (200, [(b"ETag", b'"e1"'), (b"Content-Type", b"application/json")],
                              PAGE),
                    typed: (200, [(b"Content-Type", b"application/json")], b'{"response":1}')},
        "not_modified": {},
    }
    file = state / "rec.pickle"
    file.write_bytes(pickle.dumps(recording))
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "benchmarks" / "replay_server.py"), "serve",
         "--file", str(file), "--state", str(state), "--control-plane", f"127.0.0.1:{port}"],
        stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline().decode()
        assert ready.startswith("READY 2 replies on 1 endpoints"), ready
        yield f"https://127.0.0.1:{port}", state / pki.CA_FILE
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_replies_by_content_with_etags(served: tuple[str, Path]) -> None:
    url, ca = served
    with httpx.Client(verify=ssl.create_default_context(cafile=str(ca))) as client:
        first = client.get(f"{url}/deployment/apps/status?limit=2")
        assert (first.status_code, first.content, first.headers["ETag"]) == (200, PAGE, '"e1"')
        # The same key again (any order, any connection): the same bytes.
        assert client.get(f"{url}/deployment/apps/status?limit=2").content == PAGE
        again = client.get(f"{url}/deployment/apps/status?limit=2",
                           headers={"If-None-Match": '"e1"'})
        assert (again.status_code, again.content, again.headers["ETag"]) == (304, b'', '"e1"')
        stale = client.get(f"{url}/deployment/apps/status?limit=2",
                           headers={"If-None-Match": '"old"'})
        assert (stale.status_code, stale.content) == (200, PAGE)
        # A typedrequest by method and request, the identity and key order aside.
        typed = client.post(f"{url}/typedrequest", content=json.dumps(
            {"method": "getServices", "request": {"a": [2], "b": 1,
                                                  "identity": {"jwt": "other"}}}))
        assert (typed.status_code, typed.content) == (200, b'{"response":1}')


def test_what_was_not_recorded_is_599_never_made_up(served: tuple[str, Path]) -> None:
    url, ca = served
    with httpx.Client(verify=ssl.create_default_context(cafile=str(ca))) as client:
        other_query = client.get(f"{url}/deployment/apps/status?limit=3")
        assert other_query.status_code == 599
        assert other_query.json()["error"] == "not in the recording"
        other_params = client.post(f"{url}/typedrequest", content=json.dumps(
            {"method": "getServices", "request": {"a": [2], "b": 2}}))
        assert other_params.status_code == 599


def test_cpu_seconds_reads_proc() -> None:
    spent = replay_server.cpu_seconds(os.getpid())
    assert spent > 0
