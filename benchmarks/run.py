"""`make bench`: every benchmark, one after another, each in its own process.

They run in sequence on purpose: on a 2-core machine two benchmarks side by side would
measure each other. Each writes its figures to ``benchmarks/out/`` (ignored by git) and
prints a table; the README quotes those figures, copied by hand from a run.

A benchmark never edits a tracked file: a dirty tree turns every later plan NO-GO. So
``git status`` is read before and after each benchmark, and one that leaves a path
changed fails the run, naming the paths (if someone else edits the tree meanwhile, the
check names their paths too; on the machine that publishes the figures nobody does).

    .venv/bin/python -m benchmarks.run [--quick]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BENCHMARKS: list[tuple[str, list[str]]] = [
    ("start: --version, plan --help, completion beside python -c pass, median of 10",
     ["benchmarks.start_bench"]),
    ("start, bytecode never written (PYTHONDONTWRITEBYTECODE=1): the same, median of 10",
     ["benchmarks.start_bench", "--no-bytecode"]),
    ("validate: 5,000 services + 500 grants vs check-jsonschema", ["benchmarks.validate_bench"]),
    ("sandbox start and stop: control plane + 3 clusters, median of 10",
     ["benchmarks.sandbox_start_bench"]),
    ("sandbox load floor: 50 clients", ["benchmarks.sandbox_load"]),
    ("live snapshot: 2,000 services × 3 clusters, 20 ms replies", ["benchmarks.snapshot_bench"]),
    ("plan: 2,000 services × 3 clusters, 20 ms replies", ["benchmarks.plan_bench"]),
    ("apply: 200 promotions × 3 clusters", ["benchmarks.apply_bench"]),
    ("watch: save → plan printed, 1,000 services", ["benchmarks.watch_bench"]),
    ("PR comment: a 10,000-service plan into parts", ["benchmarks.comment_bench"]),
    ("scale: 100–10,000 services × 3 and × 10 clusters, batch vs per-item, 20 ms replies",
     ["benchmarks.scale_bench"]),
    ("scale, replayed: 2,000 and 10,000 services × 3 and × 10 clusters against the replay "
     "server (reconcile's CPU alone, the server's beside it), median of 5",
     ["benchmarks.scale_bench", "--live", "replay", "--sizes", "2000,10000",
      "--clusters", "3,10", "--runs", "5"]),
]

#: ``--quick``: the scale curve's small sizes only, nothing else (a smoke run).
QUICK: list[tuple[str, list[str]]] = [
    ("scale (quick): 100 and 1,000 services × 3 clusters, batch vs per-item",
     ["benchmarks.scale_bench", "--quick"]),
]


def tree_state() -> set[str]:
    """``git status`` lines: changed tracked paths and untracked, not ignored, files."""
    done = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain=v1",
                           "--untracked-files=all"], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        return set()  # not a git checkout (an unpacked release): nothing to protect
    return set(done.stdout.splitlines())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="only the scale benchmark's small sizes (a smoke run)")
    args = parser.parse_args(argv)
    failed = []
    for title, argv_ in QUICK if args.quick else BENCHMARKS:
        print(f"\n=== {title}", flush=True)
        before = tree_state()
        code = subprocess.run([sys.executable, "-m", *argv_], cwd=ROOT,
                              check=False).returncode
        if code != 0:
            failed.append(f"{argv_[0]} (exit {code})")
        dirtied = sorted(tree_state() - before)
        if dirtied:
            print(f"{argv_[0]} left the work tree changed (a benchmark writes only under "
                  "benchmarks/out/):\n  " + "\n  ".join(dirtied), flush=True)
            failed.append(f"{argv_[0]} (changed the tree)")
    if failed:
        print("\nmissed a target or failed: " + ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
