"""A replay live side for benchmarks: a fleet's recorded replies, served from memory over TLS.

A benchmark of reconcile against the sandbox measures the sandbox too: its control plane
and clusters (Python doing TLS and JSON on the same cores) spend about as much CPU per
10,000 × 10 plan as reconcile does. This server stands in for them: it listens on the
very addresses and ports the sandbox did, with the sandbox's certificates, and answers
every request with the reply recorded for it -- status, headers (the same ETags), body
bytes (the same paging), serialised once at start -- so what it spends per plan is TLS
and a dictionary look-up.

Replies are found by request content, never by order: the control plane's typedrequest
POSTs by ``(method, request)`` with the identity left out, everything else by
``(method, host, port, path with query)``. A request carrying ``If-None-Match`` equal
to the recorded reply's ``ETag`` is answered ``304`` (as recorded when it was). So two
trees asking in different orders are answered alike, and a recording made by several
trees (``record`` appends to the file) answers each of them, whatever parts they ask in.

Three commands:

* ``record --file F [--module M] -- ARGS``: runs ``python -m M ARGS`` (default
  ``benchmarks.scale_child``; from ``sys.path``,
  so ``PYTHONPATH`` chooses the tree) with every HTTP reply kept, added to ``F``. The
  identity's ``expiresAt`` is moved into the future so a replay never exchanges it
  again for want of time.
* ``serve --file F --state DIR --control-plane HOST:PORT [--latency-ms N]``: serves
  ``F`` on every address it holds (the control plane's certificate on the control plane's
  address, the gateway's elsewhere, both from the sandbox state ``DIR``), prints
  ``READY`` once listening. A request the recording does not hold is answered ``599``
  with the key it was looked up by, and counted (``SIGUSR1`` prints the counts).
* ``cpu PID``: the CPU seconds (user + system) a process has spent, from
  ``/proc/PID/stat`` (what the benchmark reads around each run).

Writes only the recording file it is given (``benchmarks/out/`` in the benchmarks).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pickle
import runpy
import signal
import ssl
import sys
from collections import Counter
from pathlib import Path
from typing import Any

FAR_FUTURE_MS = 4_000_000_000_000
TYPEDREQUEST = "/typedrequest"

#: What identifies a request across runs and trees (never its identity, nonce,
#: signature or correlation id).
Key = tuple[str, ...]
#: status, headers (name, value) without the framing ones, body
Reply = tuple[int, list[tuple[bytes, bytes]], bytes]
#: the recording: endpoints (host, port) and, by key, the full reply and the ``304``
Recording = dict[str, Any]

FRAMING = (b"content-length", b"content-encoding", b"transfer-encoding", b"connection",
           b"keep-alive")


def content_key(method: str, host: str, port: int, target: str, body: bytes) -> Key:
    """The key of one request, the same on the recording and the serving side."""
    if method == "POST" and target.split("?", 1)[0].endswith(TYPEDREQUEST):
        try:
            envelope = json.loads(body)
            payload = dict(envelope.get("request") or {})
            payload.pop("identity", None)
            return ("cp", str(envelope.get("method")), json.dumps(payload, sort_keys=True))
        except (ValueError, AttributeError, TypeError):
            pass
    return (method, host, str(port), target)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (``/proc/PID/stat`` fields 14, 15)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load(file: Path) -> Recording:
    if not file.exists():
        return {"endpoints": set(), "replies": {}, "not_modified": {}}
    with open(file, "rb") as fh:
        recording: Recording = pickle.load(fh)  # our own recording, never a download
    return recording


# -- recording ---------------------------------------------------------------------------


def _future_identity(body: bytes) -> bytes:
    try:
        reply = json.loads(body)
        reply["response"]["identity"]["expiresAt"] = FAR_FUTURE_MS
        return json.dumps(reply).encode()
    except (ValueError, KeyError, TypeError):
        return body


def record(file: Path, child_args: list[str], module: str = "benchmarks.scale_child") -> int:
    import httpx  # only the recording side needs it

    recording = load(file)
    endpoints: set[tuple[str, int]] = recording["endpoints"]
    replies: dict[Key, Reply] = recording["replies"]
    not_modified: dict[Key, Reply] = recording["not_modified"]
    send = httpx.AsyncClient.send

    async def recording_send(client: httpx.AsyncClient, request: httpx.Request,
                             *args: Any, **kwargs: Any) -> httpx.Response:
        response = await send(client, request, *args, **kwargs)
        body = await response.aread()
        url = request.url
        port = url.port or (443 if url.scheme == "https" else 80)
        endpoints.add((url.host, port))
        key = content_key(request.method, url.host, port, url.raw_path.decode(),
                          request.content)
        if key[:2] == ("cp", "getIdentityByToken"):
            body = _future_identity(body)
        headers = [(k, v) for k, v in response.headers.raw if k.lower() not in FRAMING]
        kept = (response.status_code, headers, body)
        # The first full reply stays (every tree reads the same fleet); a 304 is kept
        # beside it, for the conditional read that got it.
        if response.status_code == 304:
            not_modified.setdefault(key, kept)
        else:
            replies.setdefault(key, kept)
        return response

    httpx.AsyncClient.send = recording_send  # type: ignore[method-assign,assignment]
    sys.argv = [module, *child_args]
    code: int | str | None = 0
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as done:
        code = done.code
    finally:
        file.parent.mkdir(parents=True, exist_ok=True)
        with open(file, "wb") as fh:
            pickle.dump(recording, fh)
    return code if isinstance(code, int) else (0 if code is None else 1)


# -- serving ---------------------------------------------------------------------------------


def _serialise(reply: Reply, reason: bytes = b"") -> bytes:
    status, headers, body = reply
    head = [b"HTTP/1.1 %d %s" % (status, reason or _REASONS.get(status, b"OK"))]
    head += [k + b": " + v for k, v in headers]
    head.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(head) + b"\r\n\r\n" + (b"" if status == 304 else body)


_REASONS = {200: b"OK", 304: b"Not Modified", 400: b"Bad Request", 401: b"Unauthorized",
            403: b"Forbidden", 404: b"Not Found", 409: b"Conflict", 429: b"Too Many Requests",
            500: b"Internal Server Error", 503: b"Service Unavailable"}


class Replayer:
    """Every recorded reply, serialised once; answers by request content."""

    def __init__(self, recording: Recording, latency_ms: float) -> None:
        self.full: dict[Key, bytes] = {}
        self.etags: dict[Key, bytes] = {}
        self.not_modified: dict[Key, bytes] = {}
        for key, reply in recording["replies"].items():
            self.full[key] = _serialise(reply)
            etag = next((v for k, v in reply[1] if k.lower() == b"etag"), None)
            if etag is not None:
                self.etags[key] = etag
                kept = recording["not_modified"].get(key)
                self.not_modified[key] = _serialise(kept if kept is not None else (
                    304, [(b"ETag", etag)], b""))
        self.latency = latency_ms / 1000.0
        self.missing: Counter[Key] = Counter()
        self.served = 0

    def answer(self, key: Key, if_none_match: bytes | None) -> bytes:
        self.served += 1
        if if_none_match is not None and self.etags.get(key) == if_none_match:
            return self.not_modified[key]
        found = self.full.get(key)
        if found is None:
            self.missing[key] += 1
            body = json.dumps({"error": "not in the recording", "key": list(key)}).encode()
            return _serialise((599, [(b"Content-Type", b"application/json")], body),
                              b"Not Recorded")
        return found

    async def connection(self, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> None:
        host, port = writer.get_extra_info("sockname")[:2]
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
                    return
                lines = head[:-4].split(b"\r\n")
                method, target = lines[0].split(b" ", 2)[:2]
                length = 0
                if_none_match: bytes | None = None
                for line in lines[1:]:
                    name, _, value = line.partition(b":")
                    lowered = name.strip().lower()
                    if lowered == b"content-length":
                        length = int(value)
                    elif lowered == b"if-none-match":
                        if_none_match = value.strip()
                body = await reader.readexactly(length) if length else b""
                key = content_key(method.decode(), host, port, target.decode(), body)
                reply = self.answer(key, if_none_match)
                if self.latency:
                    await asyncio.sleep(self.latency)
                writer.write(reply)
                await writer.drain()
        except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()


async def serve(args: argparse.Namespace) -> None:
    recording = load(args.file)
    replayer = Replayer(recording, args.latency_ms)
    cp_host, cp_port = args.control_plane.rsplit(":", 1)
    contexts = {}
    for name in ("control-plane", "gateway"):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(args.state / f"{name}.pem", args.state / f"{name}-key.pem")
        contexts[name] = ctx
    servers = []
    for host, port in sorted(recording["endpoints"]):
        ctx = contexts["control-plane" if (host, port) == (cp_host, int(cp_port))
                       else "gateway"]
        servers.append(await asyncio.start_server(
            replayer.connection, host, port, ssl=ctx, reuse_address=True, backlog=256,
            limit=1 << 20))
    loop = asyncio.get_running_loop()

    def report() -> None:
        print(json.dumps({"served": replayer.served,
                          "missing": sum(replayer.missing.values()),
                          "missing_keys": [list(k) for k, _ in
                                           replayer.missing.most_common(5)]}), flush=True)

    loop.add_signal_handler(signal.SIGUSR1, report)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    print(f"READY {len(replayer.full)} replies on {len(servers)} endpoints", flush=True)
    await stop.wait()
    report()
    for server in servers:
        server.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--file", type=Path, required=True)
    rec.add_argument("--module", default="benchmarks.scale_child",
                     help="what to run (python -m MODULE ARGS); e.g. reconciler for a "
                          "`reconcile plan` whose plan files are compared")
    rec.add_argument("child", nargs=argparse.REMAINDER)
    srv = sub.add_parser("serve")
    srv.add_argument("--file", type=Path, required=True)
    srv.add_argument("--state", type=Path, required=True, help="the sandbox's state dir")
    srv.add_argument("--control-plane", required=True, help="HOST:PORT")
    srv.add_argument("--latency-ms", type=float, default=0.0)
    cpu = sub.add_parser("cpu")
    cpu.add_argument("pid", type=int)
    args = parser.parse_args(argv)
    if args.command == "record":
        child = args.child[1:] if args.child[:1] == ["--"] else args.child
        return record(args.file, child, args.module)
    if args.command == "cpu":
        print(f"{cpu_seconds(args.pid):.2f}")
        return 0
    asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
