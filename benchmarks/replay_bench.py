"""Benchmark: reconcile's own cost of a plan, with the live side replayed from a recording.

``scale_bench`` measures a plan against the sandbox on the same cores: on a shared,
loaded machine the sandbox (ten cluster processes and a control plane doing TLS and
JSON) can take most of the CPU, and the wall time says more about the neighbours than
about reconcile. This benchmark takes the servers out of the measurement:

* ``record``: one ``scale_child`` run against a live sandbox (a seeded fleet, e.g. the
  one ``scale_bench`` or ``compare_bench`` builds), every HTTP reply kept -- status,
  headers, body bytes -- by request (control plane: method and request without the
  identity; clusters: method, host and path with query), in order. The identity's
  ``expiresAt`` is moved into the future so a replay does not exchange it again.
* ``replay``: ``scale_child`` again (read the commit, observe, plan, render), every
  request answered from the recording in-process, no socket: what is measured is
  reconcile's own work -- decoding, parsing, planning, rendering -- and its memory.

Run ``replay`` with ``PYTHONPATH`` set to the checkout to measure, so two checkouts can be
compared on the very same bytes. Prints ``scale_child``'s JSON line; the recording goes
wherever ``--file`` says (``benchmarks/out/`` by default, never a tracked file).

    python benchmarks/replay_bench.py record --repo DIR [--file F]   (sandbox env set)
    PYTHONPATH=CHECKOUT python benchmarks/replay_bench.py replay --repo DIR [--file F]
"""

from __future__ import annotations

import argparse
import json
import pickle
import runpy
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx

OUT = Path(__file__).resolve().parent / "out"
FAR_FUTURE_MS = 4_000_000_000_000

Key = tuple[str, ...]
Reply = tuple[int, list[tuple[bytes, bytes]], bytes]


def key_of(request: httpx.Request) -> Key:
    """What identifies a request across runs (never its correlation id, identity, nonce
    or signature)."""
    if request.method == "POST" and request.url.path.endswith("/typedrequest"):
        try:
            envelope = json.loads(request.content)
            payload = dict(envelope.get("request") or {})
            payload.pop("identity", None)
            return ("cp", str(envelope.get("method")), json.dumps(payload, sort_keys=True))
        except (ValueError, AttributeError):
            pass
    return (request.method, request.url.host, request.url.raw_path.decode())


def _future_identity(body: bytes) -> bytes:
    try:
        reply = json.loads(body)
        identity = reply["response"]["identity"]
        identity["expiresAt"] = FAR_FUTURE_MS
        return json.dumps(reply).encode()
    except (ValueError, KeyError, TypeError):
        return body


def record(file: Path) -> None:
    replies: dict[Key, list[Reply]] = defaultdict(list)
    send = httpx.AsyncClient.send

    async def recording(client: httpx.AsyncClient, request: httpx.Request,
                        *args: Any, **kwargs: Any) -> httpx.Response:
        response = await send(client, request, *args, **kwargs)
        body = await response.aread()
        key = key_of(request)
        if key[:2] == ("cp", "getIdentityByToken"):
            body = _future_identity(body)
        headers = [(k, v) for k, v in response.headers.raw
                   if k.lower() not in (b"content-length", b"content-encoding",
                                        b"transfer-encoding")]
        replies[key].append((response.status_code, headers, body))
        return response

    httpx.AsyncClient.send = recording  # type: ignore[method-assign,assignment]
    try:
        runpy.run_module("benchmarks.scale_child", run_name="__main__")
    except SystemExit as done:
        if done.code not in (0, None):
            raise
    finally:
        file.parent.mkdir(parents=True, exist_ok=True)
        with open(file, "wb") as fh:
            pickle.dump(dict(replies), fh)


def replay(file: Path) -> None:
    with open(file, "rb") as fh:
        replies: dict[Key, list[Reply]] = pickle.load(fh)  # our own recording
    served: dict[Key, int] = defaultdict(int)

    async def replaying(client: httpx.AsyncClient, request: httpx.Request,
                        *args: Any, **kwargs: Any) -> httpx.Response:
        key = key_of(request)
        recorded = replies.get(key)
        if not recorded:
            raise httpx.ConnectError(f"not in the recording: {key}", request=request)
        number = served[key]
        served[key] += 1
        status, headers, body = recorded[min(number, len(recorded) - 1)]
        response = httpx.Response(status, headers=headers, content=body, request=request)
        await response.aread()
        return response

    httpx.AsyncClient.send = replaying  # type: ignore[method-assign,assignment]
    runpy.run_module("benchmarks.scale_child", run_name="__main__")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("mode", choices=("record", "replay"))
    parser.add_argument("--repo", required=True)
    parser.add_argument("--file", type=Path, default=OUT / "replay.pickle")
    args = parser.parse_args()
    sys.argv = ["scale_child", "--repo", args.repo, "--resync-if-under", "0"]
    (record if args.mode == "record" else replay)(args.file)


if __name__ == "__main__":
    main()
