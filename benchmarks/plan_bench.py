"""Benchmark: `reconcile plan` of 2,000 services × 3 clusters against the sandbox.

Phases measured in-process, in one run, against one sandbox: load+validate the repo,
observe the live world (every service, its releases, the grants, every cluster's status
for every app), plan (the pure function), and render (text, JSON, Markdown). Reported as
medians over ``--runs``; the target (issue 5) is planning under 10% of the total. Also
times the whole CLI (`reconcile plan --format json`, a fresh process) once per run.

    .venv/bin/python -m benchmarks.plan_bench [--services 2000] [--latency-ms 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import fleet
from reconciler.core.planning import Provenance, plan
from reconciler.render import jsonplan, markdown, text
from reconciler.sandbox import launcher
from reconciler.shell import observing, validating
from reconciler.shell.endpoints import Connection, Overrides

OUT = Path(__file__).resolve().parent / "out" / "plan.json"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--services", type=int, default=2000)
    parser.add_argument("--latency-ms", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        sb = launcher.start(tmp / "sb", seed=fleet.write_seed(tmp / "seed.json", args.services))
        try:
            for target in ["control-plane", *sb.clusters]:
                sb.fault(target, "latency", ms=args.latency_ms)
            repo = fleet.write_repo(tmp / "repo", sb, args.services, pin="new")
            env = {**os.environ, **sb.env()}
            phases: dict[str, list[float]] = {k: [] for k in
                                              ("load", "observe", "plan", "render", "total")}
            cli: list[float] = []
            for _ in range(args.runs):
                t0 = time.perf_counter()
                loaded = validating.load_repo(repo)
                assert loaded.state is not None, loaded.diagnostics[:3]
                t1 = time.perf_counter()
                conn = Connection.build(loaded.state.settings, repo_root=repo,
                                        overrides=Overrides.from_env(env))
                snap = observing.observe(loaded.state, conn, env=env)
                t2 = time.perf_counter()
                result = plan(loaded.state, snap, Provenance(commit="0" * 40))
                t3 = time.perf_counter()
                text.render(result), jsonplan.dumps(result), markdown.render(result)
                t4 = time.perf_counter()
                assert len(result.changes) == args.services and not result.blockers
                for key, value in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t4 - t0),
                                      strict=True):
                    phases[key].append(value)
                c0 = time.perf_counter()
                proc = subprocess.run([sys.executable, "-m", "reconciler", "plan", str(repo),
                                       "--format", "json", "--detailed-exitcode"],
                                      env=env, capture_output=True, check=False)
                cli.append(time.perf_counter() - c0)
                assert proc.returncode == 2, proc.stderr[-500:]
        finally:
            sb.stop()
    med = {k: statistics.median(v) for k, v in phases.items()}
    share = med["plan"] / med["total"]
    print(f"plan: {args.services} services × 3 clusters, {args.latency_ms} ms per reply, "
          f"median of {args.runs}")
    for key in ("load", "observe", "plan", "render", "total"):
        print(f"  {key:<8} {med[key]:8.3f} s  {100 * med[key] / med['total']:5.1f}%")
    print(f"  CLI plan --format json (fresh process): {statistics.median(cli):.3f} s")
    print(f"  planning share of the total: {100 * share:.2f}% (target < 10%)")
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps({"services": args.services, "latency_ms": args.latency_ms,
                               "median_seconds": med, "cli_seconds": cli,
                               "planning_share": share}, indent=2))
    return 0 if share < 0.10 else 1


if __name__ == "__main__":
    sys.exit(main())
