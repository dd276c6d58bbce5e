"""The reconcile side of one scale measurement, alone in its own process.

``benchmarks/scale_bench.py`` starts this once per run so that the peak RSS it reads
(``os.wait4``) is the reconcile process's and nothing else's, and so that every run
starts cold (new connections, TLS, cluster handshakes, no cache). It does what the
watcher does, through the engine's ``WatchSteps`` (the same pieces ``reconcile plan``
uses): read the commit, observe the live side, plan, write the text plan (to the null
device, as ``reconcile plan`` writes it to stdout: ``render.text.write``); then,
optionally, observe again with everything the watcher keeps between resyncs (an
unchanged fleet: the resync). Prints one JSON object on stdout's last line.

Wire figures come from a counter installed on httpx (``Wire``): requests as sent (each
retry counts) and bytes of request/status lines, headers and bodies as HTTP carries
them (TLS framing not included), per host. The sandbox's audit logs give the parent an
independent request count. Must not write anything outside its temporary directory.

    python -m benchmarks.scale_child --repo DIR [--resync-if-under SECONDS]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import sys
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from reconciler.core.live import LiveService, LiveSnapshot, ObservationKind
from reconciler.engine import WatchSteps
from reconciler.render import text
from reconciler.shell.endpoints import Overrides


class Wire:
    """What this process sent and read over HTTP, by host, since ``install``."""

    def __init__(self) -> None:
        self.requests: Counter[str] = Counter()
        self.statuses: Counter[int] = Counter()
        self.sent = 0
        self.received = 0

    def install(self) -> None:
        wire = self
        send = httpx.AsyncClient.send
        aclose = httpx.Response.aclose

        async def counted_send(client: httpx.AsyncClient, request: httpx.Request,
                               *args: Any, **kwargs: Any) -> httpx.Response:
            wire.requests[request.url.host] += 1
            wire.sent += len(request.method) + len(request.url.raw_path) + 11 + _headers(
                request.headers)
            with contextlib.suppress(httpx.RequestNotRead):  # a streamed upload: none are
                wire.sent += len(request.content)
            response = await send(client, request, *args, **kwargs)
            wire.statuses[response.status_code] += 1
            wire.received += 15 + len(response.reason_phrase) + _headers(response.headers)
            return response

        async def counted_aclose(response: httpx.Response) -> None:
            # A body read to the end closes its response: the byte count is final here,
            # streamed or not. A response closed twice is counted once.
            if not response.is_closed:
                wire.received += response.num_bytes_downloaded
            await aclose(response)

        httpx.AsyncClient.send = counted_send  # type: ignore[method-assign,assignment]
        httpx.Response.aclose = counted_aclose  # type: ignore[method-assign,assignment]

    def mark(self) -> dict[str, Any]:
        return {"requests": dict(self.requests), "statuses": dict(self.statuses),
                "sent": self.sent, "received": self.received}


def _headers(headers: httpx.Headers) -> int:
    return sum(len(k) + len(v) + 4 for k, v in headers.raw) + 2


def delta(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """What went over the wire between two ``Wire.mark`` calls."""
    hosts = set(before["requests"]) | set(after["requests"])
    requests = {h: after["requests"].get(h, 0) - before["requests"].get(h, 0) for h in hosts}
    statuses = {str(s): after["statuses"].get(s, 0) - before["statuses"].get(s, 0)
                for s in set(before["statuses"]) | set(after["statuses"])}
    return {"requests": sum(requests.values()),
            "requests_by_host": {h: n for h, n in sorted(requests.items()) if n},
            "statuses": {s: n for s, n in sorted(statuses.items()) if n},
            "bytes_sent": after["sent"] - before["sent"],
            "bytes_received": after["received"] - before["received"]}


def kinds(snapshot: LiveSnapshot) -> dict[str, int]:
    counted = Counter(o.kind.value for rows in snapshot.observations.values() for o in rows)
    return {"rows": sum(counted.values()),
            "answered": counted.get(ObservationKind.ANSWERED.value, 0),
            **{k: n for k, n in counted.items() if k != ObservationKind.ANSWERED.value}}


def differences(first: LiveSnapshot, again: LiveSnapshot) -> list[str]:
    """What two readings of the same fleet disagree on, times of reading aside (at most
    a few examples)."""
    found: list[str] = []
    if again.services != first.services:
        found += [f"service {sid}" for sid in first.services
                  if again.services.get(sid) != first.services[sid]][:3] or ["services"]
    if again.grants != first.grants or again.grants_error != first.grants_error:
        found.append("grants")
    if again.mesh.expected_clusters != first.mesh.expected_clusters:
        found.append("expected clusters")

    def rows(snapshot: LiveSnapshot, app: str) -> list[tuple[object, ...]]:
        return [(o.cluster_id, o.address, o.kind, o.runtime, o.reason)
                for o in snapshot.observations.get(app, ())]

    apps = set(first.observations) | set(again.observations)
    found += [f"observations of {app}" for app in sorted(apps)
              if rows(first, app) != rows(again, app)][:3]
    return found


def maxrss_mb() -> float:
    """This process's peak resident set so far, in MiB.

    ``VmHWM`` (Linux): the high-water mark of this process's own address space, which
    starts at ``exec``. Not ``ru_maxrss``: Linux carries the parent's peak across
    fork+exec into the child's ``ru_maxrss`` (``RUSAGE_SELF`` and ``wait4`` alike), so a
    child of a large benchmark process would report the benchmark's size, not its own.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # elsewhere: best effort


async def measure(repo: Path, env: Mapping[str, str], resync_if_under: float) -> dict[str, Any]:
    wire = Wire()
    wire.install()
    steps = WatchSteps(repo, overrides=Overrides.from_env(env), env=env)
    try:
        t0 = time.perf_counter()
        loaded = steps.load()
        if loaded.state is None:
            raise SystemExit(f"{repo}: the desired state is invalid: {loaded.problems[:3]}")
        t1 = time.perf_counter()
        load_rss = maxrss_mb()
        w1 = wire.mark()
        snapshot = await steps.observe(loaded.state)
        t2 = time.perf_counter()
        w2 = wire.mark()
        snapshot_rss = maxrss_mb()
        made = steps.plan(loaded.state, snapshot, loaded.provenance)
        t3 = time.perf_counter()
        with open(os.devnull, "w", encoding="utf-8") as shown:  # as ``reconcile plan`` writes it
            text.write(made, shown)
        t4 = time.perf_counter()
        out: dict[str, Any] = {
            "load_seconds": t1 - t0, "snapshot_seconds": t2 - t1,
            "planning_seconds": t3 - t2, "render_seconds": t4 - t3,
            "plan_seconds": t4 - t0,
            "snapshot_wire": delta(w1, w2),
            "observations": kinds(snapshot),
            "services_read": sum(isinstance(s, LiveService)
                                 for s in snapshot.services.values()),
            "changes": len(made.changes), "blockers": len(made.blockers),
            "verdict": made.verdict.value,
            # Peak RSS (a high-water mark) after each phase: where the memory went.
            "load_peak_rss_mb": load_rss, "snapshot_peak_rss_mb": snapshot_rss,
            "plan_peak_rss_mb": maxrss_mb(),
        }
        if t2 - t1 < resync_if_under:
            w3 = wire.mark()
            t5 = time.perf_counter()
            again = await steps.observe(loaded.state)
            t6 = time.perf_counter()
            out.update({
                "resync_seconds": t6 - t5,
                "resync_wire": delta(w3, wire.mark()),
                "resync_observations": kinds(again),
                "resync_peak_rss_mb": maxrss_mb(),
                # An unchanged fleet must read back exactly as it was the first time
                # (modulo when it was read).
                "resync_differs": differences(snapshot, again),
            })
            out["resync_same"] = not out["resync_differs"]
    finally:
        await steps.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repo", type=Path, required=True)
    parser.add_argument("--resync-if-under", type=float, default=float("inf"),
                        help="observe a second time only when the first took less (seconds)")
    args = parser.parse_args(argv)
    result = asyncio.run(measure(args.repo, dict(os.environ), args.resync_if_under))
    result["peak_rss_mb"] = maxrss_mb()
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
