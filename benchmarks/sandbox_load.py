"""Load floor of the sandbox: 50 concurrent clients against the control plane and a cluster.

Starts a fresh sandbox, then for a bounded time each runs 50 concurrent httpx clients:
``getServiceById`` against the control plane, the status route against one cluster (each
client with its own token). Prints requests/s and p50/p99 latency and writes
``benchmarks/out/sandbox_load.json``. Must not be run in the test suite: it saturates the
machine on purpose.

    .venv/bin/python -m benchmarks.sandbox_load [--seconds 10] [--clients 50]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import ssl
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from reconciler.sandbox import launcher

OUT = Path(__file__).resolve().parent / "out" / "sandbox_load.json"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _run(clients: int, seconds: float,
         make: Any, call: Any) -> dict[str, float]:
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors = [0] * clients
    barrier = threading.Barrier(clients + 1)
    stop_at = [0.0]

    def worker(index: int) -> None:
        state = make()
        barrier.wait()
        mine = latencies[index]
        while time.monotonic() < stop_at[0]:
            start = time.perf_counter()
            try:
                ok = call(state)
            except httpx.HTTPError:
                ok = False
            mine.append(time.perf_counter() - start)
            if not ok:
                errors[index] += 1

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    stop_at[0] = time.monotonic() + seconds + 60
    barrier.wait()
    began = time.monotonic()
    stop_at[0] = began + seconds
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - began
    flat = [x for per in latencies for x in per]
    return {"requests": len(flat), "errors": sum(errors), "seconds": round(elapsed, 2),
            "rps": round(len(flat) / elapsed, 1),
            "p50_ms": round(statistics.median(flat) * 1000, 2),
            "p99_ms": round(_percentile(flat, 0.99) * 1000, 2)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sb = launcher.start(Path(tmp) / "sandbox", clusters=3)
        try:
            ctx = ssl.create_default_context(cafile=str(sb.ca_file))
            with httpx.Client(verify=ctx, base_url=sb.control_plane_url) as client:
                identity = client.post("/typedrequest", json={
                    "method": "getIdentityByToken", "request": {"token": sb.token},
                    "response": None, "correlation": {"id": "uni_0", "phase": "request"},
                }).json()["response"]["identity"]

            def make_cp() -> httpx.Client:
                return httpx.Client(verify=ctx, base_url=sb.control_plane_url, timeout=30)

            def call_cp(client: httpx.Client) -> bool:
                reply = client.post("/typedrequest", json={
                    "method": "getServiceById",
                    "request": {"identity": identity, "serviceId": "svc-checkout"},
                    "response": None,
                    "correlation": {"id": "uni_" + secrets.token_hex(12), "phase": "request"}})
                return reply.status_code == 200 and "error" not in reply.json()

            key = serialization.load_pem_private_key(sb.signer_key_file.read_bytes(), None)
            assert isinstance(key, Ed25519PrivateKey)
            public = key.public_key().public_bytes(
                serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()
            base = f"https://{sb.addresses['sn1']}:{sb.mesh_port}"
            ext = {"sni_hostname": sb.gateway}

            def make_cluster() -> tuple[httpx.Client, str]:
                client = httpx.Client(verify=ctx, base_url=base, timeout=30,
                                      headers={"Host": sb.gateway})
                challenge = client.post("/host/api/v3/baas/auth/challenge", extensions=ext,
                                        json={"chain": "ed25519",
                                              "walletAddress": sb.wallet_address,
                                              "appId": sb.auth_app_id}).json()
                token = client.post("/host/api/v3/baas/auth/verify", extensions=ext, json={
                    "challengeId": challenge["challengeId"],
                    "signature": key.sign(challenge["message"].encode()).hex(),
                    "publicKey": public}).json()["token"]
                return client, str(token)

            def call_cluster(state: tuple[httpx.Client, str]) -> bool:
                client, token = state
                reply = client.get("/host/api/v3/baas/deployment/apps/checkout/status",
                                   headers={"Authorization": f"Bearer {token}"}, extensions=ext)
                return reply.status_code == 200

            results = {
                "control-plane getServiceById": _run(args.clients, args.seconds, make_cp,
                                                     call_cp),
                "cluster sn1 status": _run(args.clients, args.seconds, make_cluster,
                                           call_cluster),
            }
        finally:
            sb.stop()
    report = {"clients": args.clients, "seconds": args.seconds, "cpus": os.cpu_count(),
              "python": platform.python_version(), "results": results}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{'target':<32} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7}")
    for name, r in results.items():
        print(f"{name:<32} {r['rps']:>8} {r['p50_ms']:>8} {r['p99_ms']:>8} {r['errors']:>7}")
    print(f"written {OUT}")


if __name__ == "__main__":
    main()
