"""Benchmark: a live snapshot of 2,000 services × 3 clusters against the sandbox.

Every sandbox reply is delayed 20 ms (a WAN round trip; loopback alone hides what the
concurrency is for). Three measurements, in the same run, against the same sandbox:

The sandbox serves no batch reads here (``batch_reads=False``, like the real upstream):
this is the per-item path; ``benchmarks/scale_bench.py`` compares it with batch reads.

* **snapshot** -- ``observing.observe_async``: getServices, grants, releases per service,
  health + handshake per cluster, and every cluster's status for every app; parsed and
  validated into a ``LiveSnapshot``.
* **floor** -- a bare ``httpx.AsyncClient`` fetching the same URLs (same envelopes, same
  bearer tokens minted beforehand, same TLS/SNI) at the same concurrency, parsing
  nothing. The ratio snapshot/floor is the cost of everything the snapshot adds.
* **sequential** -- the same requests one at a time. Only a sample is fetched (``--sample``,
  default 200); the full time is extrapolated *from that sample* linearly and reported
  as such.

Prints a table, writes ``benchmarks/out/snapshot.json`` and nothing else: a benchmark
never edits a tracked file (the README's figures are copied in by hand from a run).
Targets (issue 4): snapshot ≤ 1.5× floor, and ≥ 10× faster than sequential.

    .venv/bin/python -m benchmarks.snapshot_bench [--services 2000] [--latency-ms 20]
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from reconciler.core.desired import DesiredState, Service, Settings
from reconciler.core.live import LiveSnapshot, ObservationKind
from reconciler.sandbox import launcher
from reconciler.shell.controlplane import CONNECT_EVENT, ControlPlaneClient, new_correlation_id
from reconciler.shell.endpoints import Connection, Overrides, ssl_context
from reconciler.shell.observing import observe_async
from reconciler.shell.probing import STATUS_PATH, Prober

OUT = Path(__file__).resolve().parent / "out" / "snapshot.json"

#: method, url, headers, body, SNI hostname (None: the control plane)
Request = tuple[str, str, dict[str, str], bytes | None, str | None]


def seed_document(count: int) -> dict[str, Any]:
    services = [{
        "id": f"svc-b{i:04d}", "name": f"b{i:04d}",
        "egress": [{"host": "api.example.net", "port": 443}],
        "releases": [{"tag": "v1.0.0", "accepted": True}],
        "current": "v1.0.0", "generation": 1,
    } for i in range(count)]
    return {"services": services, "grants": []}


def desired_state(sb: launcher.Sandbox, count: int) -> DesiredState:
    settings = Settings.model_validate(json.loads(sb.settings_yaml()))
    services = tuple(Service.model_validate({
        "apiVersion": "reconcile/v1", "kind": "Service", "name": f"b{i:04d}",
        "serviceId": f"svc-b{i:04d}", "appId": f"b{i:04d}",
        "release": {"registryHost": "registry.sandbox.test", "repository": f"shop/b{i:04d}",
                    "digest": "sha256:" + "a" * 64}}) for i in range(count))
    return DesiredState(settings=settings, services=services, grants=())


async def run_snapshot(
    state: DesiredState, conn: Connection, env: Mapping[str, str], key: Path
) -> tuple[float, LiveSnapshot, dict[str, int]]:
    client = ControlPlaneClient(conn, token=env["RECONCILE_TOKEN"])
    prober = Prober(conn, signer_key=key)
    async with client, prober:
        started = time.perf_counter()
        snapshot = await observe_async(state, conn, env=env, client=client, prober=prober)
        elapsed = time.perf_counter() - started
        counts = {
            "requests": client.requests_sent + prober.requests_sent,
            "connections": client.connections_opened + prober.connections_opened,
            "control_plane_requests": client.requests_sent,
            "cluster_requests": prober.requests_sent,
        }
    return elapsed, snapshot, counts


async def same_requests(state: DesiredState, conn: Connection, token: str,
                        key: Path) -> list[Request]:
    """The requests the snapshot sends, with credentials obtained beforehand."""
    async with ControlPlaneClient(conn, token=token) as client:
        identity = await client._ensure_identity()
    prober = Prober(conn, signer_key=key)
    async with prober:
        mesh = await prober.resolve()
        tokens = {e.address: (await prober._token(e.address))[0] for e in mesh.resolved}
    url = conn.typedrequest_url
    host = conn.gateway  # as the prober sends it: the gateway name, no port
    requests: list[Request] = []

    def envelope(method: str, request: dict[str, Any]) -> bytes:
        return json.dumps({"method": method, "request": {**request, "identity": identity},
                           "response": None, "correlation": {"id": new_correlation_id(),
                                                             "phase": "request"}}).encode()

    json_headers = {"Content-Type": "application/json"}
    requests.append(("POST", url, json_headers, envelope("getServices", {}), None))
    requests.append(("POST", url, json_headers,
                     envelope("getServiceDeploymentGrants", {}), None))
    for service in state.services:
        requests.append(("POST", url, json_headers, envelope(
            "getServiceImageReleases", {"serviceId": service.service_id}), None))
    for address in tokens:
        requests.append(("GET", f"https://{address}:{conn.mesh_port}/api/v3/cluster/health",
                         {"Host": host}, None, conn.gateway))
    for service in state.services:
        for address, bearer in tokens.items():
            requests.append(("GET", f"https://{address}:{conn.mesh_port}"
                             + STATUS_PATH.format(app_id=service.app_id),
                             {"Host": host, "Authorization": f"Bearer {bearer}"}, None,
                             conn.gateway))
    return requests


async def bare_fetch(requests: list[Request], conn: Connection, *,
                     concurrency: int, sequential: bool = False) -> tuple[float, int, int]:
    """Fetch ``requests`` with a bare client; returns (seconds, non-2xx/404 count, connections)."""
    connections = 0

    async def trace(event: str, info: Mapping[str, Any]) -> None:
        nonlocal connections
        if event == CONNECT_EVENT:
            connections += 1

    # Room for every origin's connections, so the floor pays no pool churn: the
    # semaphore, not the pool, is what bounds the concurrency here.
    room = concurrency * 4
    limits = httpx.Limits(max_connections=room, max_keepalive_connections=room)
    cp = httpx.AsyncClient(verify=ssl_context(conn.control_plane_ca), trust_env=False,
                           limits=limits, timeout=30)
    mesh = httpx.AsyncClient(verify=ssl_context(conn.mesh_ca), trust_env=False,
                             limits=limits, timeout=30)
    # Like the snapshot: ``concurrency`` in flight to the control plane and, at the same
    # time, ``concurrency`` in flight to the mesh.
    slots = {False: asyncio.Semaphore(concurrency), True: asyncio.Semaphore(concurrency)}
    bad = 0

    async def one(request: Request) -> None:
        nonlocal bad
        method, url, headers, body, sni = request
        client = mesh if sni else cp
        extensions: dict[str, Any] = {"trace": trace}
        if sni:
            extensions["sni_hostname"] = sni
        async with slots[sni is not None]:
            response = await client.request(method, url, headers=headers, content=body,
                                            extensions=extensions)
        if response.status_code not in (200, 404):
            bad += 1

    async with cp, mesh:
        started = time.perf_counter()
        if sequential:
            for request in requests:
                await one(request)
        else:
            await asyncio.gather(*(one(r) for r in requests))
        elapsed = time.perf_counter() - started
    return elapsed, bad, connections


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=2000)
    parser.add_argument("--latency-ms", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=None,
                        help="default: the settings' mesh.concurrency (16)")
    parser.add_argument("--sample", type=int, default=200,
                        help="requests fetched sequentially; the rest is extrapolated")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="snapshot-bench-") as tmp:
        seed_file = Path(tmp) / "seed.json"
        seed_file.write_text(json.dumps(seed_document(args.services)))
        started = time.perf_counter()
        # Per-item reads, on purpose: the floor below fetches the per-item URLs, so the
        # snapshot must send them too (benchmarks/scale_bench.py compares batch reads).
        per_item = ({"batch_reads": False}
                    if "batch_reads" in inspect.signature(launcher.start).parameters else {})
        sb = launcher.start(Path(tmp) / "sandbox", seed=seed_file, **per_item)
        try:
            sb.wait_settled(timeout=300)
            setup = time.perf_counter() - started
            state = desired_state(sb, args.services)
            env = sb.env()
            conn = Connection.build(state.settings, repo_root=Path(tmp),
                                    overrides=Overrides.from_env(env))
            if args.concurrency:
                import dataclasses
                conn = dataclasses.replace(conn, concurrency=args.concurrency)
            for target in [launcher.CONTROL_PLANE, *sb.clusters]:
                sb.fault(target, "latency", ms=args.latency_ms)
            result = asyncio.run(measure(state, conn, env, sb.signer_key_file, args.sample))
        finally:
            sb.stop()
    result.update({"services": args.services, "clusters": 3, "latency_ms": args.latency_ms,
                   "concurrency": conn.concurrency, "sandbox_setup_seconds": round(setup, 2)})
    report(result)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {OUT}")
    return 0


async def measure(state: DesiredState, conn: Connection, env: Mapping[str, str], key: Path,
                  sample: int) -> dict[str, Any]:
    # Warm nothing on purpose: the snapshot pays for its own DNS, TLS and handshakes.
    snap_s, snapshot, counts = await run_snapshot(state, conn, env, key)
    answered = sum(1 for rows in snapshot.observations.values() for o in rows
                   if o.kind is ObservationKind.ANSWERED)
    total_rows = sum(len(rows) for rows in snapshot.observations.values())
    requests = await same_requests(state, conn, env["RECONCILE_TOKEN"], key)
    floor_s, floor_bad, floor_conns = await bare_fetch(requests, conn,
                                                       concurrency=conn.concurrency)
    picked = requests[:: max(1, len(requests) // sample)][:sample]
    seq_s, _, _ = await bare_fetch(picked, conn, concurrency=1, sequential=True)
    seq_full = seq_s / len(picked) * len(requests)
    return {
        "snapshot_seconds": round(snap_s, 3),
        "snapshot_requests": counts["requests"],
        "snapshot_connections": counts["connections"],
        "snapshot_control_plane_requests": counts["control_plane_requests"],
        "snapshot_cluster_requests": counts["cluster_requests"],
        "observations": total_rows,
        "observations_answered": answered,
        "floor_seconds": round(floor_s, 3),
        "floor_requests": len(requests),
        "floor_connections": floor_conns,
        "floor_failed_replies": floor_bad,
        "sequential_sample_requests": len(picked),
        "sequential_sample_seconds": round(seq_s, 3),
        "sequential_seconds_extrapolated": round(seq_full, 1),
        "ratio_to_floor": round(snap_s / floor_s, 3),
        "speedup_over_sequential": round(seq_full / snap_s, 1),
    }


def report(r: Mapping[str, Any]) -> None:
    rows = [
        ("snapshot (observe_async)", f"{r['snapshot_seconds']:.2f}", r["snapshot_requests"],
         r["snapshot_connections"]),
        ("floor (bare httpx, same URLs)", f"{r['floor_seconds']:.2f}", r["floor_requests"],
         r["floor_connections"]),
        (f"sequential (extrapolated from {r['sequential_sample_requests']})",
         f"{r['sequential_seconds_extrapolated']:.1f}", r["floor_requests"], "-"),
    ]
    print(f"\n{r['services']} services × {r['clusters']} clusters, "
          f"{r['latency_ms']} ms per reply, concurrency {r['concurrency']}")
    print(f"{'':40} {'seconds':>9} {'requests':>9} {'conns':>6}")
    for name, secs, reqs, conns in rows:
        print(f"{name:40} {secs:>9} {reqs!s:>9} {conns!s:>6}")
    print(f"ratio to floor: {r['ratio_to_floor']}× (target ≤ 1.5×); "
          f"speedup over sequential: {r['speedup_over_sequential']}× (target ≥ 10×)")
    print(f"observations: {r['observations_answered']}/{r['observations']} answered")


if __name__ == "__main__":
    sys.exit(main())
