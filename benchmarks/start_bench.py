"""Benchmark: how long ``reconcile`` takes to start, beside a bare interpreter.

Not a test. Runs, in turn and in one run (A B C D A B C D ...), ``python -c pass``,
``reconcile --version``, ``reconcile plan --help`` and ``reconcile completion bash``,
each a fresh process, and takes the median of each one's CPU (user + system, the
operating system's own accounting of the finished child) and wall time. Every command
builds the whole parser, so this is what completion, pre-commit hooks and each CI step
pay before any work. Bytecode caches are allowed (one warm-up run of each writes them),
as on an installed copy; ``--no-bytecode`` measures instead a checkout that never wrote
its own (``PYTHONDONTWRITEBYTECODE=1``, as a developer's shell may set it): a copy of the
``reconciler`` package without ``__pycache__`` goes first on ``PYTHONPATH``, so every
start compiles the project's modules it imports while Python's and the dependencies'
bytecode, written when they were installed, is read as usual. Results go to
``benchmarks/out/start.json`` (``start-no-bytecode.json``). Target (issue 33):
``--version`` ≤ 0.15 s of CPU and ``plan --help`` ≤ 0.25 s where a bare interpreter
takes about 0.02 s; the ratio to the bare interpreter travels between machines.

    .venv/bin/python -m benchmarks.start_bench [--runs 10] [--no-bytecode]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "out" / "start.json"
OUT_NO_BYTECODE = ROOT / "benchmarks" / "out" / "start-no-bytecode.json"
#: The console script, as a user runs it (``-m reconciler`` would add runpy's cost).
CLI = [str(Path(sys.executable).parent / "reconcile")]
COMMANDS: dict[str, list[str]] = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "reconcile --version": [*CLI, "--version"],
    "reconcile plan --help": [*CLI, "plan", "--help"],
    "reconcile completion bash": [*CLI, "completion", "bash"],
}


def once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run of ``argv`` to its exit."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--no-bytecode", action="store_true",
                        help="never read or write bytecode caches: every start compiles")
    args = parser.parse_args(argv)
    # As installed: bytecode is cached (a developer's PYTHONDONTWRITEBYTECODE would make
    # every run compile the sources again and measure the compiler), unless asked.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if not args.no_bytecode:
        return measure(args.runs, env, OUT)
    with tempfile.TemporaryDirectory() as fresh:
        package = installed_package(env)
        shutil.copytree(package, Path(fresh) / "reconciler",
                        ignore=shutil.ignore_patterns("__pycache__"))
        path = os.pathsep.join(p for p in (fresh, env.get("PYTHONPATH")) if p)
        env |= {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": path}
        return measure(args.runs, env, OUT_NO_BYTECODE)


def installed_package(env: dict[str, str]) -> Path:
    """The ``reconciler`` package the console script imports (from outside the checkout,
    where the current directory would come first)."""
    where = subprocess.run([sys.executable, "-c", "import reconciler; print(reconciler.__file__)"],
                           env=env, cwd="/", capture_output=True, text=True, check=True)
    return Path(where.stdout.strip()).parent


def measure(runs: int, env: dict[str, str], out: Path) -> int:
    """Run every command ``runs`` times in turn; print and write the medians to ``out``."""
    for command in COMMANDS.values():
        once(command, env)  # warm-up: writes the bytecode caches, fills the page cache
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in COMMANDS}
    for _ in range(runs):
        for name, command in COMMANDS.items():
            samples[name].append(once(command, env))
    bare = statistics.median(cpu for cpu, _ in samples["python -c pass"])
    figures: dict[str, dict[str, float]] = {}
    load = os.getloadavg()[0]
    print(f"{'command':28} {'cpu s (median)':>15} {'wall s (median)':>16} {'× bare cpu':>11}")
    for name, taken in samples.items():
        cpu = statistics.median(c for c, _ in taken)
        wall = statistics.median(w for _, w in taken)
        ratio = cpu / bare if bare else float("nan")
        figures[name] = {
            "cpu_median_s": round(cpu, 4), "wall_median_s": round(wall, 4),
            "cpu_min_s": round(min(c for c, _ in taken), 4),
            "cpu_max_s": round(max(c for c, _ in taken), 4), "cpu_vs_bare": round(ratio, 2)}
        print(f"{name:28} {cpu:15.3f} {wall:16.3f} {ratio:11.1f}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"runs": runs, "load": load, "bytecode": "PYTHONDONTWRITEBYTECODE"
                               not in env, "commands": figures}, indent=2) + "\n",
                   encoding="utf-8")
    print(f"load {load:.2f}; written to {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
