"""Benchmark: ``reconcile validate`` vs ``check-jsonschema`` on a generated 5,500-file repo.

Not a test. Generates a repo of 5,000 Service files, 500 Grant files and one Settings
file in a temporary directory, then times, side by side in one run, five wall-clock runs
of each of

- ``reconcile validate DIR`` (a fresh process: imports, discovery, YAML, models,
  cross-document checks), and
- ``check-jsonschema --schemafile schemas/desired-state.schema.json FILE...`` (the same
  files against the same schema),

and prints the medians; results go to ``benchmarks/out/validate.json``. Target (issue
2): under 2 s, and no slower than check-jsonschema.

    .venv/bin/python benchmarks/validate_bench.py [--services 5000] [--grants 500] [--runs 5]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "schemas" / "desired-state.schema.json"
OUT = ROOT / "benchmarks" / "out" / "validate.json"
BIN = Path(sys.executable).parent

SETTINGS = (ROOT / "examples" / "desired-state" / "settings.yaml").read_text(encoding="utf-8")
SERVICE = """\
# yaml-language-server: $schema=../../schemas/desired-state.schema.json
apiVersion: reconcile/v1
kind: Service
name: svc{i:05d}
serviceId: svc-{i:05d}
appId: app{i:05d}
release:
  registryHost: registry.example.net
  repository: shop/svc{i:05d}
  digest: sha256:{digest}
  tag: v1.{i}.0
  mediaType: application/vnd.oci.image.index.v1+json
immutable: true
egress:
  - host: api{i}.example.com
  - host: hooks.example.org
    port: 8443
"""
GRANT_HEAD = """\
apiVersion: reconcile/v1
kind: Grant
userId: bot{g:04d}
services:
"""
GRANT_ENTRY = """\
  - service: svc{i:05d}
    capabilities: [deployment:preflight, deployment:promote-route, deployment:rollback-route]
"""


def generate(root: Path, services: int, grants: int) -> list[Path]:
    (root / "services").mkdir(parents=True)
    (root / "grants").mkdir()
    files = [root / "settings.yaml"]
    files[0].write_text(SETTINGS, encoding="utf-8")
    for i in range(services):
        digest = hashlib.sha256(f"svc{i}".encode()).hexdigest()
        path = root / "services" / f"svc{i:05d}.yaml"
        path.write_text(SERVICE.format(i=i, digest=digest), encoding="utf-8")
        files.append(path)
    per_grant = max(1, services // grants)
    for g in range(grants):
        body = GRANT_HEAD.format(g=g) + "".join(
            GRANT_ENTRY.format(i=(g * per_grant + k) % services) for k in range(per_grant))
        path = root / "grants" / f"bot{g:04d}.yaml"
        path.write_text(body, encoding="utf-8")
        files.append(path)
    return files


def timed(argv: list[str], runs: int, expect: int = 0) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU (user + system of the child) seconds of each run.

    CPU time is reported too because wall time on a shared 2-core machine moves with
    whatever else runs; CPU time much less so.
    """
    times: list[float] = []
    cpu: list[float] = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if done.returncode != expect:
            raise SystemExit(f"{argv[0]} exited {done.returncode}:\n{done.stdout[-2000:]}"
                             f"{done.stderr[-2000:]}")
    return times, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--services", type=int, default=5000)
    parser.add_argument("--grants", type=int, default=500)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    checker = shutil.which("check-jsonschema", path=str(BIN)) or shutil.which("check-jsonschema")
    if checker is None:
        raise SystemExit("check-jsonschema is not installed (pip install -e '.[test]')")
    with tempfile.TemporaryDirectory(prefix="reconcile-bench-") as tmp:
        repo = Path(tmp) / "repo"
        files = generate(repo, args.services, args.grants)
        size = sum(f.stat().st_size for f in files)
        ours, ours_cpu = timed(
            [sys.executable, "-m", "reconciler", "validate", str(repo)], args.runs)
        theirs, theirs_cpu = timed(
            [checker, "--schemafile", str(SCHEMA), *map(str, files)], args.runs)
    from reconciler.shell import loading

    result = {
        "files": len(files), "bytes": size, "runs": args.runs,
        "reconcile_validate_s": {"median": statistics.median(ours), "all": ours,
                                 "cpu_median": statistics.median(ours_cpu)},
        "check_jsonschema_s": {"median": statistics.median(theirs), "all": theirs,
                               "cpu_median": statistics.median(theirs_cpu)},
        "load_average": os.getloadavg(),
        "yaml_parser": loading.PARSER_NAME,
        "python": platform.python_version(), "cpus": os.cpu_count(),
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"{len(files)} files, {size / 1e6:.1f} MB, median of {args.runs} runs "
          f"(YAML parser: {loading.PARSER_NAME})")
    print(f"{'tool':<22}{'wall median':>12}{'wall min':>10}{'wall max':>10}{'cpu median':>12}")
    for name, times, cpu in (("reconcile validate", ours, ours_cpu),
                             ("check-jsonschema", theirs, theirs_cpu)):
        print(f"{name:<22}{statistics.median(times):>12.3f}{min(times):>10.3f}"
              f"{max(times):>10.3f}{statistics.median(cpu):>12.3f}")
    print(f"load average during the run: {os.getloadavg()[0]:.2f}")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
