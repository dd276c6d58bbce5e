"""Benchmark: `reconcile watch`, from a commit to the new plan printed.

A 1,000-service repo against the sandbox; the watcher has read the live side once and
keeps that snapshot (``--resync`` far away), so each commit (an edit, then `git commit`:
the plan reads the commit, never the working tree) is: debounce, re-read only the changed
blob (the rest comes from the cache), re-plan, print the difference. The
watcher is the real CLI process; the clock runs from just before the write to the
moment its plan line is read from its stdout. Reports p50/p90/max over ``--saves``.

    .venv/bin/python -m benchmarks.watch_bench [--services 1000] [--saves 20] [--debounce 0.1]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import fleet
from reconciler.sandbox import launcher

OUT = Path(__file__).resolve().parent / "out" / "watch.json"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--services", type=int, default=1000)
    parser.add_argument("--saves", type=int, default=20)
    parser.add_argument("--debounce", type=float, default=0.1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        sb = launcher.start(tmp / "sb", seed=fleet.write_seed(tmp / "seed.json", args.services))
        try:
            repo = fleet.write_repo(tmp / "repo", sb, args.services, pin="current")
            env = {**os.environ, **sb.env()}
            proc = subprocess.Popen(
                [sys.executable, "-m", "reconciler", "watch", str(repo), "--log-format", "json",
                 "--resync", "3600", "--debounce", str(args.debounce)],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            assert proc.stdout is not None

            def next_plan() -> dict[str, object]:
                assert proc.stdout is not None
                for line in proc.stdout:
                    event = json.loads(line)
                    if event["event"] == "plan":
                        return dict(event)
                raise RuntimeError("the watcher stopped")

            next_plan()  # the first full plan after the live read
            time.sleep(2.5)  # let the cache keep files older than the racy window
            target = repo / "services" / f"{fleet.name(0)}.yaml"
            base = target.read_text()
            latencies, plan_ms = [], []
            for i in range(args.saves):
                port = 1000 + i
                started = time.perf_counter()
                target.write_text(base.replace("  - host: api.example.net\n",
                                               f"  - host: api.example.net\n    port: {port}\n"))
                subprocess.run(["git", "-C", str(repo), "-c", "user.email=bench@example.net",
                                "-c", "user.name=bench", "commit", "-qam", f"port {port}"],
                               check=True, capture_output=True)
                event = next_plan()
                latencies.append(time.perf_counter() - started)
                plan_ms.append(float(event["elapsed_ms"]))  # type: ignore[arg-type]
                time.sleep(0.2)
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=20)
        finally:
            sb.stop()
    p50 = statistics.median(latencies)
    p90 = sorted(latencies)[int(0.9 * (len(latencies) - 1))]
    print(f"watch: commit → plan printed, {args.services} services, cached snapshot, "
          f"debounce {args.debounce:g}s, {args.saves} saves")
    print(f"  p50 {1000 * p50:.0f} ms   p90 {1000 * p90:.0f} ms   max "
          f"{1000 * max(latencies):.0f} ms   (planning alone: median "
          f"{statistics.median(plan_ms):.0f} ms)")
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps({"services": args.services, "debounce": args.debounce,
                               "latencies_s": latencies, "p50_s": p50, "p90_s": p90,
                               "plan_ms": plan_ms}, indent=2))
    return 0 if p50 < 0.3 else 1


if __name__ == "__main__":
    sys.exit(main())
