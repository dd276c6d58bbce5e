"""Benchmark: `reconcile apply` of 200 promotions across 3 clusters in the sandbox.

One run: the fleet pins a never-accepted release for every service, so the plan holds
200 promotions. Reports the wall time of the whole apply (observe, plan, send, gate)
and how much of it is the convergence gate's waiting -- which the sandbox's simulated
per-cluster convergence delay (``--converge-ms``) dominates by design.

    .venv/bin/python -m benchmarks.apply_bench [--services 200] [--converge-ms 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import fleet
from reconciler.core.events import ApplyStarted, Event, GateStarted
from reconciler.core.outcomes import Outcome
from reconciler.engine import apply_async
from reconciler.sandbox import launcher
from reconciler.shell.endpoints import Overrides

OUT = Path(__file__).resolve().parent / "out" / "apply.json"


class _Events:
    """Apply's typed events, each with the moment it arrived."""

    def __init__(self) -> None:
        self.events: list[tuple[float, Event]] = []

    def __call__(self, event: Event) -> None:
        self.events.append((time.perf_counter(), event))

    def first(self, kind: type) -> float:
        return next(t for t, event in self.events if isinstance(event, kind))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--services", type=int, default=200)
    parser.add_argument("--converge-ms", type=int, default=300)
    parser.add_argument("--latency-ms", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        sb = launcher.start(tmp / "sb", seed=fleet.write_seed(tmp / "seed.json", args.services),
                            converge_delay_ms=args.converge_ms)
        try:
            if args.latency_ms:
                for target in ["control-plane", *sb.clusters]:
                    sb.fault(target, "latency", ms=args.latency_ms)
            repo = fleet.write_repo(tmp / "repo", sb, args.services, pin="new",
                                    interval_seconds=0.25, attempts=240)
            env = {**os.environ, **sb.env(), "RECONCILE_STATE_DIR": str(tmp / "state")}
            hook = _Events()
            started = time.perf_counter()
            run = asyncio.run(apply_async(repo, overrides=Overrides.from_env(env), env=env,
                                          hook=hook))
            total = time.perf_counter() - started
            writes = [a for a in sb.audit() if a["method"] == "promoteServiceImageRelease"]
        finally:
            sb.stop()
    gate_start = hook.first(GateStarted)
    applying_start = hook.first(ApplyStarted)
    gate = run.report.gate
    assert gate is not None and gate.converged, "the gate did not converge"
    applied = run.report.count(Outcome.APPLIED)
    result = {
        "services": args.services, "converge_delay_ms": args.converge_ms,
        "total_seconds": total,
        "observe_and_plan_seconds": applying_start - started,
        "send_seconds": gate_start - applying_start,
        "gate_seconds": gate.waited_seconds, "gate_polls": gate.attempts,
        "promotions_applied": applied, "promotion_requests": len(writes),
    }
    print(f"apply: {args.services} promotions × 3 clusters "
          f"(sandbox converges {args.converge_ms} ms after a rollout)")
    print(f"  total            {total:7.2f} s")
    print(f"  observe + plan   {result['observe_and_plan_seconds']:7.2f} s")
    print(f"  send (200 CAS)   {result['send_seconds']:7.2f} s")
    print(f"  gate             {gate.waited_seconds:7.2f} s  ({gate.attempts} polls; "
          f"{100 * gate.waited_seconds / total:.0f}% of the total)")
    print(f"  promotions applied {applied}, promote requests seen by the sandbox {len(writes)}")
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2))
    return 0 if applied == args.services == len(writes) else 1


if __name__ == "__main__":
    sys.exit(main())
