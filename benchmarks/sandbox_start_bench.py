"""Benchmark: how long a sandbox (control plane + three clusters, as processes) takes to
start and to stop, as the test fixtures start it.

Not a test. The suite only checks that a start finishes (tests/sandbox/test_lifecycle.py,
with a bound a loaded machine cannot break); how fast it is belongs here, where the load
is printed beside the figure. Starts and stops one sandbox at a time in a temporary
directory, ``--runs`` times, and writes the medians to ``benchmarks/out/sandbox_start.json``.
Idle, a start takes about 0.3 s.

    .venv/bin/python -m benchmarks.sandbox_start_bench [--runs 10]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from reconciler.sandbox import launcher

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "out" / "sandbox_start.json"
#: The test fixtures' convergence delay (tests/conftest.py), so the figure is theirs.
CONVERGE_DELAY_MS = 200


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args(argv)
    starts: list[float] = []
    stops: list[float] = []
    with tempfile.TemporaryDirectory(prefix="sandbox-start-") as tmp:
        for run in range(args.runs + 1):  # the first run warms the bytecode caches
            began = time.perf_counter()
            sandbox = launcher.start(Path(tmp) / f"s{run}", converge_delay_ms=CONVERGE_DELAY_MS)
            started = time.perf_counter()
            sandbox.stop()
            stopped = time.perf_counter()
            if run:
                starts.append(started - began)
                stops.append(stopped - started)
    load = os.getloadavg()[0]
    figures = {"start_median_s": round(statistics.median(starts), 3),
               "start_max_s": round(max(starts), 3),
               "stop_median_s": round(statistics.median(stops), 3)}
    print(f"sandbox start: median {figures['start_median_s']:.3f} s "
          f"(max {figures['start_max_s']:.3f} s), stop: median "
          f"{figures['stop_median_s']:.3f} s over {args.runs} runs; load {load:.2f}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"runs": args.runs, "load": load, **figures}, indent=2) + "\n",
                   encoding="utf-8")
    print(f"written to {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
