"""Benchmark: the cost curve of reading the live world, batch reads against per-item reads.

For each fleet size (100, 1,000, 10,000 services) × cluster count (3, 10; the sandbox's
clusters on 127.0.0.2–127.0.0.11), one sandbox is seeded (``benchmarks/fleet.py``: every
service runs v1.0.0, the repo pins v1.1.0, so every service is a promotion), every reply
of the control plane and of every cluster is delayed ``--latency-ms`` (20 ms: a WAN round
trip), and the same repo is measured in two modes, in the same run, against the same
sandbox state:

* **batch** -- the sandbox serves and advertises the batch reads (issue 13): the cluster
  batch status route and ``getServicesReleases``; the client negotiates them.
* **per-item** -- the sandbox restarted on the same state with ``batch_reads=False``
  (neither served nor advertised, like the real upstream): the client falls back to
  one request per service and one per service per cluster.

Each run is a fresh process (``benchmarks/scale_child.py``): read the commit, observe
(**snapshot**), plan, render the text plan (**plan** = all four, without the
interpreter's start), then observe again with what the watcher keeps (**resync** of the
unchanged fleet). Reported per configuration: median wall time over ``--runs`` (one run
when a run is slow), requests (the sandbox's audit logs; the client's own count per host
alongside), HTTP bytes, peak RSS of the reconcile process (its own ``VmHWM``) and its CPU
time (``os.wait4``).
Per-item runs past ``--per-item-max`` service×cluster pairs are skipped and their time
extrapolated from the largest measured per-item run (marked as such).

Writes ``benchmarks/out/scale.json`` and ``benchmarks/out/scale.md`` (``--quick``:
``scale-quick.*``) and nothing else: a benchmark never edits a tracked file (the README's
table is copied by hand from a run).
The figures are wall times on whatever machine runs this; the sandbox (one control plane,
up to ten clusters) shares its cores with the reconcile process, so the load average is
recorded with every run.

With ``--live replay`` the sandbox only makes the fleet: each tree of ``--trees`` (default
this checkout) runs one plan and resync against it with every reply recorded, then the
sandbox stops and ``benchmarks/replay_server.py`` answers on its addresses, from memory,
by request content. Every run is then against the replay (``--runs`` rounds, each tree
once per round, alternating which runs first), and the server's own CPU over each run
(``/proc/PID/stat``) is reported beside reconcile's: the figures are reconcile's, not the
sandbox's. Written to ``scale-replay.*``; the recording to
``benchmarks/out/replay-<services>x<clusters>.pickle``.

    .venv/bin/python -m benchmarks.scale_bench [--quick] [--sizes 100,1000,10000]
        [--clusters 3,10] [--modes batch,per-item] [--runs 3] [--latency-ms 20]
        [--live sandbox|replay] [--trees DIR,DIR]
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks import fleet, replay_server
from reconciler.sandbox import cluster as cluster_mod
from reconciler.sandbox import launcher, store

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = Path(__file__).resolve().parent / "out"
MODES = ("batch", "per-item")
#: A run slower than this is not repeated (its median is its one value).
REPEAT_UNDER_S = 25.0
#: The repo's controlPlane.timeoutSeconds and mesh.timeoutSeconds (defaults 10 and 5):
#: the sandbox's control plane, serving ten clusters' reports of 10,000 apps on the same
#: two cores, can take longer than 10 s to list 10,000 services. The benchmark measures
#: how long a read takes, not where the default deadlines cut it.
TIMEOUTS = (60.0, 30.0)
#: How long a big sandbox may take to start (see ``Fleet._start``).
READY_TIMEOUT_S = 180.0
#: Per-item: the resync is a second full read; done only when the first took less.
PER_ITEM_RESYNC_UNDER_S = 8.0
NOTE = ("Wall times from one machine whose cores the sandbox (a control plane and up to "
        "ten cluster processes, all Python doing TLS and JSON) shares with the reconcile "
        "process; other work on the machine moves them. Requests and bytes do not move.")


def batch_switch() -> bool:
    """Whether this sandbox can turn the batch reads off (``start(..., batch_reads=)``)."""
    return "batch_reads" in inspect.signature(launcher.start).parameters


# -- the sandbox ----------------------------------------------------------------------------


class Audit:
    """Requests the sandbox saw since ``mark``: the control plane's audit table and each
    cluster's ``audit.jsonl``, grouped by method / route."""

    def __init__(self, sb: launcher.Sandbox) -> None:
        self.sb = sb
        self._seq = 0
        self._offsets: dict[str, int] = {}
        self.mark()

    def _cluster_file(self, cid: str) -> Path:
        return cluster_mod.cluster_dir(self.sb.state_dir, cid) / "audit.jsonl"

    def mark(self) -> None:
        conn = store.connect(self.sb.state_dir)
        try:
            row = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM audit").fetchone()
        finally:
            conn.close()
        self._seq = int(row[0])
        self._offsets = {cid: self._size(cid) for cid in self.sb.clusters}

    def _size(self, cid: str) -> int:
        try:
            return self._cluster_file(cid).stat().st_size
        except FileNotFoundError:
            return 0

    def since(self) -> dict[str, Any]:
        conn = store.connect(self.sb.state_dir)
        try:
            rows = conn.execute(
                "SELECT method, COUNT(*) FROM audit WHERE source = ? AND seq > ? "
                "GROUP BY method", (launcher.CONTROL_PLANE, self._seq)).fetchall()
        finally:
            conn.close()
        control_plane = {str(m): int(n) for m, n in rows}
        clusters: dict[str, dict[str, int]] = {}
        for cid in self.sb.clusters:
            routes: Counter[str] = Counter()
            path = self._cluster_file(cid)
            if path.exists():
                with open(path, "rb") as fh:
                    fh.seek(self._offsets.get(cid, 0))
                    for line in fh:
                        try:
                            entry = json.loads(line)
                        except ValueError:
                            continue  # a line still being written
                        routes[route(str(entry.get("path", "")))] += 1
            clusters[cid] = dict(routes)
        per_cluster = [sum(r.values()) for r in clusters.values()]
        return {
            "control_plane": control_plane,
            "control_plane_requests": sum(control_plane.values()),
            "clusters": clusters,
            "cluster_requests": sum(per_cluster),
            "max_requests_per_cluster": max(per_cluster, default=0),
            "requests": sum(control_plane.values()) + sum(per_cluster),
        }


def route(path: str) -> str:
    """A cluster route with its app id folded, so per-app reads count as one route."""
    return re.sub(r"/apps/[^/?]+/", "/apps/{id}/", path.split("?")[0])


class Fleet:
    """One seeded sandbox and the repo that describes it, switched between the modes by
    restarting the sandbox on the same state (same database, same cluster runtimes,
    same ports: the repo's settings name them)."""

    def __init__(self, tmp: Path, services: int, clusters: int, latency_ms: int) -> None:
        self.tmp = tmp
        self.services = services
        self.clusters = clusters
        self.latency_ms = latency_ms
        started = time.perf_counter()
        self.batch = True
        self.sb = self._start(seed=fleet.write_seed(tmp / "seed.json", services))
        try:
            self._settle()
            self.setup = {"sandbox_seconds": time.perf_counter() - started}
            t = time.perf_counter()
            self.repo = fleet.write_repo(tmp / "repo", self.sb, services, pin="new",
                                         timeouts=TIMEOUTS)
            self.setup["repo_seconds"] = time.perf_counter() - t
            self._slow_down()
        except BaseException:
            self.sb.stop()
            raise

    def _start(self, *, seed: Path | None = None,
               ports: tuple[int, int] | None = None) -> launcher.Sandbox:
        kwargs: dict[str, Any] = {"clusters": self.clusters, "seed": seed}
        if batch_switch():
            kwargs["batch_reads"] = self.batch
        if ports is not None:
            kwargs["port"], kwargs["mesh_port"] = ports
        # Ten clusters taking over 10,000 apps each need more than the launcher's 15 s
        # to say READY on two busy cores; start() has no parameter for it, so this
        # process (and only it) waits longer.
        launcher.READY_TIMEOUT_S = max(launcher.READY_TIMEOUT_S, READY_TIMEOUT_S)
        return launcher.start(self.tmp / "sb", **kwargs)

    def _settle(self, timeout: float = 900.0) -> None:
        """Every rollout done and every cluster running every app (no ``no record``)."""
        deadline = time.monotonic() + timeout
        self.sb.wait_settled(timeout=timeout)
        while True:
            counts = {cid: len(apps) for cid, apps in self.sb.cluster_status().items()}
            if all(n >= self.services for n in counts.values()):
                return
            if time.monotonic() > deadline:
                raise launcher.SandboxError(
                    f"clusters did not take every app in {timeout:g}s: {counts}")
            time.sleep(0.5)

    def _slow_down(self) -> None:
        if self.latency_ms:
            for target in [launcher.CONTROL_PLANE, *self.sb.clusters]:
                self.sb.fault(target, "latency", ms=self.latency_ms)

    def use(self, mode: str) -> None:
        """Serve the batch reads (``batch``) or not (``per-item``)."""
        batch = mode == "batch"
        if batch == self.batch or not batch_switch():
            return
        ports = (self.sb.control_plane_port, self.sb.mesh_port)
        self.sb.stop()
        self.batch = batch
        self.sb = self._start(ports=ports)
        self._settle()
        self._slow_down()

    def env(self) -> dict[str, str]:
        return {**os.environ, **self.sb.env(), "RECONCILE_STATE_DIR": str(self.tmp / "state")}

    def stop(self) -> None:
        self.sb.stop()


# -- one configuration -----------------------------------------------------------------------


def run_child(repo: Path, env: Mapping[str, str], resync_if_under: float,
              audit: Audit | None, scratch: Path, *, tree: Path = ROOT,
              server_pid: int | None = None) -> dict[str, Any]:
    """One cold run in its own process; returns its figures (peak RSS its own, read by
    itself), the audit's count, and its CPU time as the kernel accounts it for that
    process (``wait4`` on its pid; ``RUSAGE_CHILDREN`` would also hold every sandbox
    process stopped so far). ``tree``: the checkout whose reconcile runs (its own
    ``scale_child``, first on ``sys.path``); ``server_pid``: the replay server, whose CPU
    around the run is reported beside reconcile's."""
    if audit is not None:
        audit.mark()
    errors = scratch / "child.stderr"
    server_before = replay_server.cpu_seconds(server_pid) if server_pid else None
    started = time.perf_counter()
    with open(errors, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.scale_child", "--repo", str(repo),
             "--resync-if-under", str(resync_if_under)],
            cwd=tree, env={**env, "PYTHONPATH": str(tree)}, stdout=subprocess.PIPE,
            stderr=err)
        assert proc.stdout is not None
        out = proc.stdout.read()
        proc.stdout.close()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    server_cpu = (replay_server.cpu_seconds(server_pid) - server_before
                  if server_pid and server_before is not None else None)
    if proc.returncode != 0:
        raise ChildFailed(f"scale_child exited {proc.returncode}:\n"
                          f"{errors.read_text(errors='replace')[-3000:]}")
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    result.update({
        "process_seconds": wall, "audit": audit.since() if audit is not None else None,
        "server_cpu_seconds": server_cpu,
        # The child's own peak RSS comes from the child (VmHWM, see scale_child.maxrss_mb):
        # wait4's ru_maxrss would include this process's size at the fork.
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
        "load_average": os.getloadavg()[0],
    })
    return result


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    def med(key: str) -> float | None:
        values = [r[key] for r in runs if r.get(key) is not None]
        return statistics.median(values) if values else None

    first = runs[0]
    resyncs = [r for r in runs if "resync_seconds" in r]
    summary: dict[str, Any] = {
        "runs": len(runs),
        "snapshot_seconds": med("snapshot_seconds"),
        "plan_seconds": med("plan_seconds"),
        "load_seconds": med("load_seconds"),
        "planning_seconds": med("planning_seconds"),
        "render_seconds": med("render_seconds"),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
        "plan_peak_rss_mb": max(r["plan_peak_rss_mb"] for r in runs),
        "cpu_seconds": med("cpu_seconds"),
        "server_cpu_seconds": med("server_cpu_seconds"),
        "requests": first["snapshot_wire"]["requests"],
        "bytes_received": first["snapshot_wire"]["bytes_received"],
        "bytes_sent": first["snapshot_wire"]["bytes_sent"],
        "observations": first["observations"],
        "changes": first["changes"], "blockers": first["blockers"],
        "verdict": first["verdict"],
        "load_average": [r["load_average"] for r in runs],
    }
    by_host = first["snapshot_wire"]["requests_by_host"]
    summary["control_plane_requests"] = by_host.get("127.0.0.1", 0)
    summary["max_requests_per_cluster"] = max(
        (n for h, n in by_host.items() if h != "127.0.0.1"), default=0)
    if resyncs:
        wire = resyncs[0]["resync_wire"]
        hosts = wire["requests_by_host"]
        summary.update({
            "resync_seconds": statistics.median(r["resync_seconds"] for r in resyncs),
            "resync_requests": wire["requests"],
            "resync_max_requests_per_endpoint": max(hosts.values(), default=0),
            "resync_bytes_received": wire["bytes_received"],
            "resync_statuses": wire["statuses"],
            "resync_same": all(r["resync_same"] for r in resyncs),
        })
    return summary


def measure_mode(fleet_: Fleet, mode: str, *, runs: int,
                 resync_if_under: float) -> dict[str, Any]:
    audit = Audit(fleet_.sb)
    env = fleet_.env()

    def once() -> dict[str, Any]:
        return run_child(fleet_.repo, env, resync_if_under, audit, fleet_.tmp)

    done = [once()]
    # A cold run first; more only while they stay cheap, so the largest fleet costs one.
    while len(done) < runs and done[0]["process_seconds"] < REPEAT_UNDER_S:
        done.append(once())
    problems = check(done[0], mode=mode, services=fleet_.services)
    return {"summary": summarize(done), "runs": done, "problems": problems}


def check(run: Mapping[str, Any], *, mode: str, services: int) -> list[str]:
    """What would make the figures meaningless: rows not answered, the client's count
    and the sandbox's disagreeing, a mode that did not read the way it is named, a
    replayed request the recording did not hold."""
    problems = []
    audit = run["audit"]
    if audit is None:  # replayed: no sandbox audited it; every request must be recorded
        unrecorded = (run["snapshot_wire"]["statuses"].get("599", 0)
                      + run.get("resync_wire", {}).get("statuses", {}).get("599", 0))
        if unrecorded:
            problems.append(f"{unrecorded} requests were not in the recording")
        audit = {"clusters": {}, "control_plane": {}, "requests": None}
        batch_routes = 1  # the client's count (below) says whether it paged
    else:
        batch_routes = sum(n for routes in audit["clusters"].values()
                           for r, n in routes.items()
                           if r.endswith("/deployment/apps/status"))
    batch_method = audit["control_plane"].get("getServicesReleases", 0)
    if mode == "per-item" and (batch_routes or batch_method):
        problems.append(f"per-item mode, yet {batch_routes} batch status and {batch_method} "
                        "getServicesReleases requests reached the sandbox")
    per_cluster = max((n for h, n in run["snapshot_wire"]["requests_by_host"].items()
                       if h != "127.0.0.1"), default=0)
    if mode == "batch" and services > 10 and (per_cluster >= services or not batch_routes):
        problems.append("batch mode, yet the client read the clusters app by app "
                        f"({per_cluster} snapshot requests on one cluster, {batch_routes} "
                        "batch pages): the client does not use the batch route")
    obs = run["observations"]
    if obs["answered"] != obs["rows"]:
        problems.append(f"only {obs['answered']} of {obs['rows']} observations answered: {obs}")
    if run["blockers"]:
        problems.append(f"{run['blockers']} blockers in the plan")
    counted = run["snapshot_wire"]["requests"] + run.get("resync_wire", {}).get("requests", 0)
    if run["audit"] is not None and run["audit"]["requests"] != counted:
        problems.append(f"the sandbox audited {run['audit']['requests']} requests, the "
                        f"client counted {counted}")
    if run.get("resync_same") is False:
        problems.append("the resync read something else than the first observation: "
                        + ", ".join(run.get("resync_differs", [])))
    return problems


# -- the whole curve --------------------------------------------------------------------------


def measure_all(args: argparse.Namespace) -> dict[str, Any]:
    """Every configuration; the report is written again after each one, so a run cut
    short (or one configuration failing) still leaves everything measured before it."""
    modes = [m for m in args.modes if m in MODES]
    available = batch_switch()
    if not available and "batch" in modes:
        print("note: this sandbox has no batch_reads switch yet; measuring per-item only",
              flush=True)
        modes = ["per-item"]
    report: dict[str, Any] = {
        # --quick writes beside the full curve, never over it.
        "name": ("scale-quick" if args.quick else "scale")
        + ("-replay" if args.live == "replay" else ""),
        "latency_ms": args.latency_ms, "batch_switch": available, "seconds": 0.0,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform(), "note": NOTE,
                    "load_average_before": os.getloadavg(),
                    "load_average_after": os.getloadavg(), "operator_note": args.note},
        "results": [], "skipped": [], "failed": [], "targets": [],
    }
    results: list[dict[str, Any]] = report["results"]
    started = time.perf_counter()
    for clusters in args.clusters:
        for services in args.sizes:
            pairs = services * clusters
            todo = [m for m in modes if m != "per-item" or pairs <= args.per_item_max]
            if "per-item" in modes and "per-item" not in todo:
                report["skipped"].append({
                    "services": services, "clusters": clusters, "mode": "per-item",
                    "reason": f"{pairs:,} service×cluster pairs > --per-item-max "
                              f"{args.per_item_max:,}"})
            if todo:
                print(f"\n--- {services:,} services × {clusters} clusters: {', '.join(todo)}",
                      flush=True)
                try:
                    if args.live == "replay":
                        measure_replay(args, services, clusters, results)
                    else:
                        measure_size(args, services, clusters, todo, results)
                except (launcher.SandboxError, ChildFailed, OSError) as exc:
                    print(f"    failed: {exc}", flush=True)
                    report["failed"].append({"services": services, "clusters": clusters,
                                             "error": str(exc)[-2000:]})
            extrapolate(report["skipped"], results)
            report["targets"] = targets(results)
            report["seconds"] = time.perf_counter() - started
            report["machine"]["load_average_after"] = os.getloadavg()
            write(report)
    return report


class ChildFailed(RuntimeError):
    """A measuring process exited non-zero."""


def measure_size(args: argparse.Namespace, services: int, clusters: int, todo: list[str],
                 results: list[dict[str, Any]]) -> None:
    with tempfile.TemporaryDirectory(prefix="scale-bench-") as tmp_:
        fleet_ = Fleet(Path(tmp_), services, clusters, args.latency_ms)
        try:
            print(f"    sandbox seeded and settled in {fleet_.setup['sandbox_seconds']:.1f} s, "
                  f"repo written in {fleet_.setup['repo_seconds']:.1f} s", flush=True)
            for mode in todo:
                fleet_.use(mode)
                measured = measure_mode(
                    fleet_, mode, runs=args.runs,
                    resync_if_under=(float("inf") if mode == "batch"
                                     else PER_ITEM_RESYNC_UNDER_S))
                entry = {"services": services, "clusters": clusters, "mode": mode,
                         "setup": fleet_.setup, **measured}
                results.append(entry)
                print_row(entry)
        finally:
            fleet_.stop()


def measure_replay(args: argparse.Namespace, services: int, clusters: int,
                   results: list[dict[str, Any]]) -> None:
    """``--live replay``: one seeded sandbox, recorded once by every tree (a plan and a
    resync each, ``replay_server record``), then stopped and replaced by the replay
    server on its addresses; then ``--runs`` rounds, each running every tree once
    (alternating which goes first), with the server's CPU read around each run."""
    with tempfile.TemporaryDirectory(prefix="scale-bench-") as tmp_:
        tmp = Path(tmp_)
        fleet_ = Fleet(tmp, services, clusters, 0)  # replies recorded without delay
        recording = OUT_DIR / f"replay-{services}x{clusters}.pickle"
        recording.unlink(missing_ok=True)
        try:
            print(f"    sandbox seeded and settled in {fleet_.setup['sandbox_seconds']:.1f} s, "
                  f"repo written in {fleet_.setup['repo_seconds']:.1f} s", flush=True)
            env = fleet_.env()
            for tree in args.trees:
                t = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, str(Path(replay_server.__file__)), "record",
                     "--file", str(recording), "--", "--repo", str(fleet_.repo)],
                    cwd=tree, env={**env, "PYTHONPATH": str(tree)}, capture_output=True,
                    check=False)
                if done.returncode != 0:
                    raise ChildFailed(f"recording with {tree} exited {done.returncode}:\n"
                                      f"{done.stderr.decode(errors='replace')[-3000:]}")
                print(f"    recorded {tree} in {time.perf_counter() - t:.1f} s", flush=True)
            state_dir, cp_port = fleet_.sb.state_dir, fleet_.sb.control_plane_port
        finally:
            fleet_.stop()
        server = subprocess.Popen(
            [sys.executable, str(Path(replay_server.__file__)), "serve",
             "--file", str(recording), "--state", str(state_dir),
             "--control-plane", f"127.0.0.1:{cp_port}", "--latency-ms", str(args.latency_ms)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            assert server.stdout is not None
            ready = server.stdout.readline().decode()
            if not ready.startswith("READY"):
                raise ChildFailed(f"the replay server did not start: {ready}"
                                  f"{server.stdout.read().decode(errors='replace')[-2000:]}")
            print(f"    replay server: {ready.strip()}", flush=True)
            by_tree: dict[Path, list[dict[str, Any]]] = {t: [] for t in args.trees}
            for number in range(args.runs):
                order = args.trees if number % 2 == 0 else list(reversed(args.trees))
                for tree in order:
                    by_tree[tree].append(run_child(
                        fleet_.repo, env, float("inf"), None, tmp, tree=tree,
                        server_pid=server.pid))
            for tree, done_runs in by_tree.items():
                entry = {"services": services, "clusters": clusters, "mode": "batch",
                         "live": "replay", "tree": str(tree), "setup": fleet_.setup,
                         "summary": summarize(done_runs), "runs": done_runs,
                         "problems": check(done_runs[0], mode="batch", services=services)}
                results.append(entry)
                print_row(entry)
        finally:
            server.terminate()
            server.wait(timeout=30)


def write(report: Mapping[str, Any]) -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    name = report["name"]
    (OUT_DIR / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (OUT_DIR / f"{name}.md").write_text(markdown(report), encoding="utf-8")


def extrapolate(skipped: list[dict[str, Any]], results: list[dict[str, Any]]) -> None:
    """A skipped per-item run's time, scaled linearly from the largest per-item run at
    the same cluster count (per-item cost is one request per service per cluster)."""
    for entry in skipped:
        basis = [r for r in results if r["mode"] == "per-item"
                 and r["clusters"] == entry["clusters"]]
        if not basis:
            continue
        base = max(basis, key=lambda r: r["services"])
        factor = entry["services"] / base["services"]
        s = base["summary"]
        entry["extrapolated_from"] = f"{base['services']:,} services × {base['clusters']}"
        entry["snapshot_seconds_extrapolated"] = s["snapshot_seconds"] * factor
        entry["requests_extrapolated"] = round(s["requests"] * factor)


# -- reporting -------------------------------------------------------------------------------


def _mb(n: float | None) -> str:
    return "-" if n is None else f"{n:.0f}"


def _s(n: float | None) -> str:
    return "-" if n is None else f"{n:.2f}"


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def row(entry: Mapping[str, Any]) -> list[str]:
    s = entry["summary"]
    resync = "-"
    if "resync_seconds" in s:
        resync = (f"{s['resync_seconds']:.2f} s, {s['resync_requests']} req "
                  f"(≤{s['resync_max_requests_per_endpoint']}/endpoint)")
    mode = entry["mode"]
    if entry.get("live") == "replay":
        mode += f", replay ({Path(entry['tree']).name})"
    return [f"{entry['services']:,} × {entry['clusters']}", mode,
            _s(s["snapshot_seconds"]), _s(s["plan_seconds"]),
            f"{s['requests']:,}", f"{s['control_plane_requests']:,} / "
            f"{s['max_requests_per_cluster']:,}", _bytes(s["bytes_received"]),
            _mb(s["peak_rss_mb"]), _s(s["cpu_seconds"]), _s(s.get("server_cpu_seconds")),
            resync,
            str(s["runs"]) + (" ⚠" if entry["problems"] else "")]


HEADER = ["services × clusters", "mode", "snapshot s", "plan s", "requests",
          "control plane / max per cluster", "bytes read", "peak RSS MB", "CPU s",
          "server CPU s", "resync (unchanged fleet)", "runs"]


def print_row(entry: Mapping[str, Any]) -> None:
    cells = row(entry)
    print("    " + "  ".join(f"{h}: {c}" for h, c in zip(HEADER, cells, strict=True)),
          flush=True)
    for problem in entry["problems"]:
        print(f"    ⚠ {problem}", flush=True)


def markdown(report: Mapping[str, Any]) -> str:
    lines = [
        f"# Scale benchmark: batch vs per-item reads, {report['latency_ms']} ms per reply",
        "",
        f"Run of `benchmarks/scale_bench.py` on a {report['machine']['cpus']}-core machine "
        f"(Python {report['machine']['python']}), {report['seconds']:.0f} s in all. "
        + report["machine"]["note"]
        + " Load average (1 min) {:.2f} before, {:.2f} after.".format(
            report["machine"]["load_average_before"][0],
            report["machine"]["load_average_after"][0])
        + (f" {report['machine']['operator_note']}" if report["machine"]["operator_note"]
           else ""),
        "",
        "snapshot = one cold observation (control plane + every cluster); plan = read the "
        "commit + snapshot + plan + text render, in one fresh process (interpreter start "
        "not included); times are medians over the runs column; requests and bytes are "
        "the snapshot's; peak RSS and CPU are the reconcile process's (resync included); "
        "resync = a second observation of the unchanged fleet with what the watcher keeps; "
        "server CPU = the replay server's over each run (replayed rows only). "
        f"Deadlines raised to {TIMEOUTS[0]:g} s per control-plane call and {TIMEOUTS[1]:g} s "
        "per cluster request (defaults 10 and 5) so that a loaded machine shows slowness, "
        "not timeouts.",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "|".join(["---"] * 2 + ["---:"] * (len(HEADER) - 2)) + "|",
    ]
    for entry in report["results"]:
        lines.append("| " + " | ".join(row(entry)) + " |")
    for entry in report["skipped"]:
        est = ""
        if "snapshot_seconds_extrapolated" in entry:
            est = (f"≈{entry['snapshot_seconds_extrapolated']:.0f} s, "
                   f"≈{entry['requests_extrapolated']:,} requests (extrapolated from "
                   f"{entry['extrapolated_from']})")
        lines.append(f"| {entry['services']:,} × {entry['clusters']} | {entry['mode']} | "
                     f"not run: {entry['reason']} | {est} |" + " |" * (len(HEADER) - 4))
    if report["targets"]:
        lines += ["", "Issue 13's and issue 22's targets (batch mode):", ""]
        lines += [f"- {t['target']}: {t['measured']} -- {'met' if t['met'] else 'MISSED'}"
                  for t in report["targets"]]
    for entry in report["failed"]:
        lines.append(f"| {entry['services']:,} × {entry['clusters']} | - | failed: "
                     f"{entry['error'].splitlines()[-1][:200]} |" + " |" * (len(HEADER) - 3))
    problems = [(e, p) for e in report["results"] for p in e["problems"]]
    if problems:
        lines += ["", "⚠ Problems (figures of these rows are suspect):", ""]
        lines += [f"- {e['services']:,} × {e['clusters']} {e['mode']}: {p}"
                  for e, p in problems]
    if not report["batch_switch"]:
        lines += ["", "The sandbox had no `batch_reads` switch: per-item only."]
    return "\n".join(lines) + "\n"


def targets(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 13's targets, for the configurations this run measured (batch mode)."""
    out: list[dict[str, Any]] = []

    def find(services: int, clusters: int | None = None) -> list[dict[str, Any]]:
        return [r["summary"] for r in results if r["mode"] == "batch"
                and r["services"] == services and clusters in (None, r["clusters"])]

    for s in find(2000, 3):
        out.append({"target": "2,000 × 3: snapshot ≤ 2 s, ≤ 10 requests per cluster",
                    "measured": f"{s['snapshot_seconds']:.2f} s, "
                                f"{s['max_requests_per_cluster']} per cluster",
                    "met": s["snapshot_seconds"] <= 2 and s["max_requests_per_cluster"] <= 10})
    for s in find(10_000, 10):
        out.append({"target": "10,000 × 10: plan ≤ 15 s, peak RSS ≤ 400 MB",
                    "measured": f"{s['plan_seconds']:.2f} s, {s['peak_rss_mb']:.0f} MB",
                    "met": s["plan_seconds"] <= 15 and s["peak_rss_mb"] <= 400})
        out.append({"target": "10,000 × 10 (issue 22): plan ≤ 8 s, peak RSS ≤ 300 MB",
                    "measured": f"{s['plan_seconds']:.2f} s, {s['peak_rss_mb']:.0f} MB",
                    "met": s["plan_seconds"] <= 8 and s["peak_rss_mb"] <= 300})
    for r in results:
        s = r["summary"]
        if r["mode"] == "batch" and r["services"] == 10_000 and "resync_seconds" in s:
            out.append({
                "target": f"resync of an unchanged 10,000-service fleet (× {r['clusters']}): "
                          "≤ 0.5 s, ≤ 2 requests per endpoint",
                "measured": f"{s['resync_seconds']:.2f} s, "
                            f"≤ {s['resync_max_requests_per_endpoint']} per endpoint",
                "met": s["resync_seconds"] <= 0.5
                and s["resync_max_requests_per_endpoint"] <= 2})
    return out


def parse_list(text: str) -> list[int]:
    return [int(x.replace("_", "")) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", type=parse_list, default=[100, 1000, 10_000],
                        help="services per fleet, comma-separated (default 100,1000,10000)")
    parser.add_argument("--clusters", type=parse_list, default=[3, 10],
                        help="cluster counts, comma-separated, each 1..10 (default 3,10)")
    parser.add_argument("--modes", type=lambda t: t.split(","), default=list(MODES),
                        help="batch,per-item (default both)")
    parser.add_argument("--runs", type=int, default=3,
                        help="runs per configuration while a run takes under "
                             f"{REPEAT_UNDER_S:g} s (median reported)")
    parser.add_argument("--latency-ms", type=int, default=20)
    parser.add_argument("--live", choices=("sandbox", "replay"), default="sandbox",
                        help="replay: record the seeded sandbox once per tree, then "
                             "measure against benchmarks/replay_server.py on its addresses "
                             "(batch mode only; the server's CPU is reported)")
    parser.add_argument("--trees", type=lambda t: [Path(x).resolve() for x in t.split(",")],
                        default=[ROOT],
                        help="with --live replay: checkouts to compare, comma-separated; "
                             "every round runs each once, alternating the order")
    parser.add_argument("--per-item-max", type=int, default=10_000,
                        help="skip per-item runs past this many service×cluster pairs "
                             "(default 10000: per-item reads of 10,000 services × 3 clusters "
                             "take minutes on two cores, and time out under load)")
    parser.add_argument("--note", default="",
                        help="a sentence for the report (e.g. what else ran on the machine)")
    parser.add_argument("--quick", action="store_true",
                        help="100 and 1,000 services × 3 clusters, one run each (written "
                             "to benchmarks/out/scale-quick.*, not over the full curve)")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.clusters, args.runs = [100, 1000], [3], 1
    if args.live == "replay":
        args.modes = ["batch"]
    if not all(1 <= c <= 10 for c in args.clusters):
        parser.error("--clusters: each between 1 and 10 (127.0.0.2–127.0.0.11)")
    report = measure_all(args)
    print("\n" + markdown(report))
    print(f"wrote {(OUT_DIR / (report['name'] + '.json')).relative_to(ROOT)} and "
          f"{(OUT_DIR / (report['name'] + '.md')).relative_to(ROOT)}")
    return 1 if report["failed"] or any(e["problems"] for e in report["results"]) else 0


if __name__ == "__main__":
    sys.exit(main())
