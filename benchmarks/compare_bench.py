"""Benchmark: this checkout against an earlier one, side by side on one seeded fleet.

One sandbox is seeded once (``scale_bench.Fleet``: N services × C clusters, every reply
delayed ``--latency-ms``, batch reads served), and ``scale_child`` -- read the commit,
observe, plan, render the text plan -- runs from each checkout in turn, alternating
which goes first in each round, so both see the same fleet and, as far as a shared
machine allows, the same load. Reported per checkout: the median of each phase's wall
time, the reconcile process's CPU time (``wait4``) and its peak RSS (``VmHWM``), with
the load average before every run and the ratio after/before of each median.

The earlier checkout is any directory holding the project at another commit, e.g.
``git worktree add /tmp/before HEAD~3`` or ``git archive HEAD~3 | tar -x -C /tmp/before``.
Writes ``benchmarks/out/compare.json`` and ``benchmarks/out/compare.md`` and nothing else.

    .venv/bin/python -m benchmarks.compare_bench --before DIR [--services 10000]
        [--clusters 10] [--runs 3] [--latency-ms 20] [--timeouts 600,300]
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
from typing import Any

from benchmarks import scale_bench

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = Path(__file__).resolve().parent / "out"
PHASES = ("plan_seconds", "load_seconds", "snapshot_seconds", "planning_seconds",
          "render_seconds")


def run(tree: Path, repo: Path, env: dict[str, str], scratch: Path) -> dict[str, Any]:
    """One cold ``scale_child`` from ``tree``: its figures, CPU time and load average."""
    load = os.getloadavg()[0]
    errors = scratch / "child.stderr"
    started = time.perf_counter()
    with open(errors, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.scale_child", "--repo", str(repo),
             "--resync-if-under", "0"],
            cwd=tree, env={**env, "PYTHONPATH": str(tree)}, stdout=subprocess.PIPE,
            stderr=err)
        assert proc.stdout is not None
        out = proc.stdout.read()
        proc.stdout.close()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        return {"failed": errors.read_text(errors="replace")[-1500:], "load_average": load}
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    result.update({"process_seconds": wall, "load_average": load,
                   "cpu_seconds": usage.ru_utime + usage.ru_stime})
    return result


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    done = [r for r in runs if "failed" not in r]
    out: dict[str, Any] = {"runs": len(done), "failed": len(runs) - len(done)}
    if not done:
        return out
    for key in (*PHASES, "cpu_seconds"):
        values = [r[key] for r in done if key in r]
        if values:
            out[key] = statistics.median(values)
    out["peak_rss_mb"] = statistics.median(r["peak_rss_mb"] for r in done)
    out["snapshot_peak_rss_mb"] = statistics.median(r["snapshot_peak_rss_mb"] for r in done)
    out["answered"] = [r["observations"]["answered"] for r in done]
    out["verdicts"] = sorted({r["verdict"] for r in done})
    return out


def markdown(report: dict[str, Any]) -> str:
    before, after = report["before"]["summary"], report["after"]["summary"]
    rows = [("plan (load+snapshot+planning+render) s", "plan_seconds"),
            ("load s", "load_seconds"), ("snapshot s", "snapshot_seconds"),
            ("planning s", "planning_seconds"), ("render s", "render_seconds"),
            ("reconcile CPU s", "cpu_seconds"), ("peak RSS MB", "peak_rss_mb"),
            ("peak RSS after the snapshot MB", "snapshot_peak_rss_mb")]
    lines = [f"# {report['services']:,} services × {report['clusters']} clusters, "
             f"{report['latency_ms']} ms per reply: before vs after", "",
             f"Before: `{report['before']['tree']}`; after: `{report['after']['tree']}`. "
             f"{report['rounds']} rounds, alternating which runs first; medians. Load average "
             f"(1 min) before each run: {report['loads']}.", "",
             "| | before | after | after/before |", "|---|---:|---:|---:|"]
    for label, key in rows:
        b, a = before.get(key), after.get(key)
        ratio = f"{a / b:.2f}" if a is not None and b else "-"
        lines.append(f"| {label} | {'-' if b is None else f'{b:.2f}'} | "
                     f"{'-' if a is None else f'{a:.2f}'} | {ratio} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--before", type=Path, required=True,
                        help="a checkout of the earlier commit")
    parser.add_argument("--services", type=int, default=10_000)
    parser.add_argument("--clusters", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3, help="rounds (each runs both)")
    parser.add_argument("--latency-ms", type=int, default=20)
    parser.add_argument("--timeouts", default="600,300",
                        help="controlPlane,mesh timeoutSeconds of the repo (a loaded "
                             "machine must show slowness, not timeouts)")
    args = parser.parse_args(argv)
    cp_timeout, mesh_timeout = (float(x) for x in args.timeouts.split(","))
    scale_bench.TIMEOUTS = (cp_timeout, mesh_timeout)
    trees = {"before": args.before.resolve(), "after": ROOT}
    report: dict[str, Any] = {"services": args.services, "clusters": args.clusters,
                              "latency_ms": args.latency_ms, "rounds": args.runs,
                              "loads": [], "before": {"tree": str(trees["before"]),
                                                      "runs": []},
                              "after": {"tree": str(trees["after"]), "runs": []}}
    with tempfile.TemporaryDirectory(prefix="compare-bench-") as tmp:
        seeded = scale_bench.Fleet(Path(tmp), args.services, args.clusters, args.latency_ms)
        try:
            env = seeded.env()
            for number in range(args.runs):
                order = ("before", "after") if number % 2 == 0 else ("after", "before")
                for name in order:
                    result = run(trees[name], seeded.repo, env, Path(tmp))
                    report["loads"].append(round(result["load_average"], 1))
                    report[name]["runs"].append(result)
                    print(f"round {number + 1} {name}: "
                          + ("FAILED" if "failed" in result else
                             f"plan {result['plan_seconds']:.2f} s, "
                             f"peak RSS {result['peak_rss_mb']:.0f} MB"), flush=True)
        finally:
            seeded.stop()
    for name in ("before", "after"):
        report[name]["summary"] = summary(report[name]["runs"])
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    (OUT_DIR / "compare.json").write_text(json.dumps(report, indent=2) + "\n",
                                          encoding="utf-8")
    (OUT_DIR / "compare.md").write_text(markdown(report), encoding="utf-8")
    print("\n" + markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
