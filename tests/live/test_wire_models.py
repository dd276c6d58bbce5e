"""The wire models (``core.wireshape``) and what decoding straight from bytes keeps: only
the fields read, the same refusals as before, the same reading of odd but valid JSON,
and a misfit named by its field."""

from __future__ import annotations

import gc
import json
import weakref

import pytest

from reconciler.core.wireshape import decode
from reconciler.shell import heap
from reconciler.shell.controlplane import ProtocolError, envelope
from reconciler.shell.controlplane.wire import (
    ServiceList,
    ServicesReply,
    ServiceWire,
    parse_service,
)
from reconciler.shell.probing.parsing import (
    Malformed,
    StatusWire,
    parse_batch_page,
    parse_status,
    parse_status_json,
)


def page(*entries: object, cursor: object = None) -> bytes:
    body: dict[str, object] = {"apps": list(entries)}
    if cursor is not None:
        body["nextCursor"] = cursor
    return json.dumps(body).encode()


def status(app: str, **runtime: object) -> dict[str, object]:
    return {"appId": app, "state": "ACTIVE", "runtime": {"runtimeState": "RUNNING", **runtime},
            "unreadField": {"deep": ["x" * 100]}}


def test_fields_never_read_are_not_kept() -> None:
    wire = decode(StatusWire, json.dumps(status("a", replicas=2)).encode())
    assert "unreadField" not in wire.model_dump(by_alias=True)
    reply = decode(ServicesReply, json.dumps({"services": [
        {"id": "s", "data": {"name": "n", "huge": "y" * 1000, "egressRevision": 3}}]}).encode())
    assert reply.services is not None and isinstance(reply.services[0], ServiceWire)
    assert not hasattr(reply.services[0].data, "huge")
    assert parse_service(reply.services[0], []).egress_revision == 3


@pytest.mark.parametrize("runtime,field", [
    ({"replicas": True}, "runtime.replicas is not an integer"),
    ({"replicas": 2.0}, "runtime.replicas is not an integer"),
    ({"replicaCounts": {"required": "2"}}, "runtime.replicaCounts.required is not an integer"),
    ({"egress": [{"host": "h"}]}, "runtime.egress[0].port is not an integer"),
])
def test_a_malformed_entry_silences_its_app_alone_and_names_the_field(
        runtime: dict[str, object], field: str) -> None:
    parsed = parse_batch_page(page({"appId": "bad", "status": status("bad", **runtime)},
                                   {"appId": "good", "status": status("good", replicas=2)}))
    with pytest.raises(Malformed, match="malformed status: " + field.replace("[", r"\[")):
        parse_status("bad", parsed.statuses["bad"])
    assert parse_status("good", parsed.statuses["good"]).replicas == 2


@pytest.mark.parametrize("content,reason", [
    (page({"appId": "a", "status": status("a")})[:-5], "malformed JSON"),  # truncated
    (b"[1, 2]", "malformed JSON"),
    (b'{"apps": {}}', "batch page: apps is not a list"),
    (b'{"apps": [{"status": {}}]}', "batch page: an entry has no appId"),
    (page({"appId": "a"}, {"appId": "a"}), "batch page: app a is listed twice"),
    (page(cursor=""), "batch page: nextCursor is not a string"),
    (page(cursor=7), "batch page: nextCursor is not a string"),
])
def test_a_page_that_is_not_one_fails_whole(content: bytes, reason: str) -> None:
    with pytest.raises(Malformed) as caught:
        parse_batch_page(content)
    assert caught.value.reason == reason


def test_a_lone_surrogate_is_read_as_before_and_kept_visible() -> None:
    content = b'{"appId": "a", "runtime": {"lastError": "bad \\ud800 byte"}}'
    runtime = parse_status_json("a", content)
    assert runtime.last_error == "bad \\ud800 byte"
    assert parse_status("a", json.loads(content)).last_error == runtime.last_error


def test_another_apps_answer_is_refused() -> None:
    with pytest.raises(Malformed, match="another app"):
        parse_status_json("a", b'{"appId": "b"}')
    with pytest.raises(Malformed, match="another app"):
        parse_status_json("a", b'{"appId": 5}')


def test_a_control_plane_answer_that_does_not_fit_names_the_method_and_field() -> None:
    bad = b'{"response": {"services": [{"id": "s", "data": {"name": "n"}}, 7]}}'
    assert envelope.answer_as("getServices", bad, ServicesReply) is None
    with pytest.raises(ProtocolError, match=r"getServices: response.services\[1\] is not an "
                                            "object"):
        envelope.misfit("getServices", bad, ServicesReply)
    # One service that does not fit its model stays raw, and fails alone.
    odd = b'{"response": {"services": [{"id": "s", "data": {"name": 3}}]}}'
    reply = envelope.answer_as("getServices", odd, ServicesReply)
    assert reply is not None
    services = list(ServiceList(reply))
    assert services == [{"id": "s", "data": {"name": 3}}]
    with pytest.raises(ProtocolError, match=r"service s: malformed reply: data\.name is not a "
                                            r"string"):
        parse_service(services[0], [])


def _resident_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:")) / 1024


def test_trim_gives_back_what_was_freed_between_what_is_kept() -> None:
    """A snapshot's pattern: texts of a kilobyte made and freed between texts kept
    (one in sixteen); glibc holds the freed pages until ``heap.trim``."""
    assert heap._MALLOC_TRIM is not None  # glibc, as every machine this runs on
    texts = [b"%d" % number + b"x" * 1_000 for number in range(60_000)]
    kept = texts[::16]
    texts.clear()
    before = _resident_mb()
    heap.trim()
    assert _resident_mb() < before - 10, (before, _resident_mb())  # about 20-40 MB
    assert len(kept) == 3_750


_MAPPED = """
from reconciler.shell import heap
def resident():
    with open("/proc/self/status", encoding="ascii") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:")) / 1024
assert heap.LARGE_MAPPED
first = bytearray(4 << 20)
del first  # freed: with the dynamic threshold this would raise it to 4 MB
held = [bytearray(1 << 20) for _ in range(40)]
keep = [b"k%d" % n for n in range(1000)]  # small objects after them, kept
before = resident()
held.clear()
print(before - resident())
"""


@pytest.mark.integration  # starts an interpreter
def test_large_buffers_are_mapped_and_given_back_when_freed() -> None:
    """glibc's mmap threshold is fixed (``heap``): a megabyte buffer freed after another
    was freed is still a mapping of its own, not heap memory that stays resident. In a
    fresh interpreter, as a ``reconcile`` process starts (a test worker's heap has been
    shaped by every test before it)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _MAPPED], capture_output=True, text=True,
                          check=True, timeout=60)
    assert float(done.stdout) > 30, done.stdout  # 40 MB freed; 0 without the fixed threshold


def test_bulk_pauses_the_collector_and_restores_it() -> None:
    assert gc.isenabled()
    with heap.bulk():
        assert not gc.isenabled()
        with heap.bulk():
            assert not gc.isenabled()
        assert not gc.isenabled()  # nested: still the outer pass
    assert gc.isenabled()
    gc.disable()
    try:
        with heap.bulk():
            pass
        assert not gc.isenabled()  # left as it was found
    finally:
        gc.enable()


def test_bulk_keep_freezes_what_was_built_until_the_next_pass_begins() -> None:
    """A kept build (a load, a plan) is frozen out of later walks; the next pass's first
    ``bulk`` hands it back, so a cycle that became garbage meanwhile is collected."""

    class Node:
        def __init__(self) -> None:
            self.me = self  # a cycle: only the collector frees it

    gc.collect()
    try:
        with heap.bulk(keep=True):
            assert not gc.isenabled()
            built = Node()
        assert gc.isenabled() and gc.get_freeze_count() > 0
        gone = weakref.ref(built)
        del built
        gc.collect()
        assert gone() is not None  # frozen: a full collection does not walk it
        with heap.bulk():
            assert gc.get_freeze_count() == 0  # the next pass: handed back
        assert gc.get_freeze_count() == 0  # a plain bulk freezes nothing
        gc.collect()
        assert gone() is None
        with heap.settled():
            frozen = gc.get_freeze_count()
            with heap.bulk(keep=True):
                pass
            assert gc.get_freeze_count() == frozen  # settled's freeze rules inside it
    finally:
        gc.unfreeze()


def test_settled_freezes_what_was_alive_and_hands_it_back() -> None:
    before = gc.get_freeze_count()
    with heap.settled():
        frozen = gc.get_freeze_count()
        assert frozen > before and gc.isenabled()  # still collecting what is made inside
        with heap.settled():
            assert gc.get_freeze_count() == frozen  # nested: one freeze
    assert gc.get_freeze_count() == 0


def test_a_released_response_is_freed_without_the_collector() -> None:
    """Over a real socket, httpx's response sits in a cycle with its bound stream: with
    the collector paused (a snapshot) it would live, body and all, to the end of the pass
    -- unless released once read (``heap.release``), as every reader of a reply does."""
    import asyncio
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    import httpx

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"x" * 100_000
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"

    async def freed(release: bool) -> bool:
        async with httpx.AsyncClient() as client:
            with heap.bulk():
                response = await client.get(url)
                assert len(response.content) == 100_000
                if release:
                    heap.release(response)
                    assert len(response.content) == 100_000  # the body stays readable
                ref = weakref.ref(response)
                del response
                return ref() is None

    try:
        assert asyncio.run(freed(release=False)) is False  # the cycle is real
        assert asyncio.run(freed(release=True)) is True
    finally:
        server.shutdown()
        gc.collect()
