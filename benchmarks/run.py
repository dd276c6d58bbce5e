"""`make bench`: every benchmark, one after another, each in its own process.

They run in sequence on purpose: on a 2-core machine two benchmarks side by side would
measure each other. Each writes its figures to ``benchmarks/out/*.json`` and prints a
table; the README quotes those figures.
"""

from __future__ import annotations

import subprocess
import sys

BENCHMARKS: list[tuple[str, list[str]]] = [
    ("validate: 5,000 services + 500 grants vs check-jsonschema", ["benchmarks.validate_bench"]),
    ("sandbox load floor: 50 clients", ["benchmarks.sandbox_load"]),
    ("live snapshot: 2,000 services × 3 clusters, 20 ms replies",
     ["benchmarks.snapshot_bench", "--no-readme"]),
    ("plan: 2,000 services × 3 clusters, 20 ms replies", ["benchmarks.plan_bench"]),
    ("apply: 200 promotions × 3 clusters", ["benchmarks.apply_bench"]),
    ("watch: save → plan printed, 1,000 services", ["benchmarks.watch_bench"]),
    ("PR comment: a 10,000-service plan into parts", ["benchmarks.comment_bench"]),
]


def main() -> int:
    failed = []
    for title, argv in BENCHMARKS:
        print(f"\n=== {title}", flush=True)
        code = subprocess.run([sys.executable, "-m", *argv], check=False).returncode
        if code != 0:
            failed.append(f"{argv[0]} (exit {code})")
    if failed:
        print("\nmissed a target or failed: " + ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
