"""The apps' own traffic on each sandbox cluster, and its metrics (issue 34).

Owns what a request to an app through one cluster answers, the per-app request counters
and latency histograms of that cluster, their ``/metrics`` exposition, the synthetic
traffic that keeps those counters moving without a load generator, and what the
``app-errors`` / ``app-slow`` faults do to both. Must not touch the runtime records or the
route table (``cluster`` owns them; this module only reads what it is handed) and must
not do any per-app work between scrapes: the 10,000-service benchmark runs these clusters.

Interface (what verification checks and the tests rely on)
==========================================================

Where: each cluster's own address (``Sandbox.addresses[cluster]``, the gateway hostname's
A records as ``--resolve`` and the probes resolve them) on the mesh port
(``Sandbox.mesh_port``), HTTPS verified with the sandbox CA (``Sandbox.ca_file``). TLS
server name (SNI) = the gateway hostname (``Sandbox.gateway``, ``gateway.sandbox.test``):
the clusters' certificate names only it, as for the probes.

Which app -- two ways, both ``GET`` or ``HEAD``, no credentials (an app's public traffic):

- **By route, as a gateway does**: ``Host: HOSTNAME`` where a gateway route *in effect on
  that cluster* (``syncGatewayClientRoute``; each cluster swaps routes in after its delay)
  matches HOSTNAME -- one of ``route.match.domains`` (``*.example.com`` matches one
  label), or ``ownership.hostname`` for a route without domains -- and the request path
  starts with ``route.match.path``. The highest ``priority`` wins, then the longest path.
  The app is the route's ``action.target.appId``. Ports, transport and remote ingress are
  not looked at. A HOSTNAME no route in effect names: ``421`` (as before: this ingress
  does not serve it); a known HOSTNAME whose routes do not match the path: ``404``
  ``{"error": "no route for HOSTNAME PATH on cluster C", "cluster": C}``.
- **Direct** (sandbox only, no route needed): ``Host:`` the gateway hostname and the path
  ``/sandbox/apps/{appId}`` or ``/sandbox/apps/{appId}/anything``.

What the app answers (``Content-Type: application/json``; headers ``X-Sandbox-Cluster``,
``X-Sandbox-App`` and, when it runs here, ``X-Sandbox-Digest``):

- ``200`` ``{"app": A, "digest": "sha256:...", "cluster": C, "path": "/...",
  "rolloutGeneration": G}`` (``path`` as requested, the direct prefix included) when
  cluster C has a runtime record for app A: the digest is
  the record's ``resolvedDigest`` (while a new rollout converges, the previous digest
  still answers, as on a real cluster);
- ``404`` ``{"error": "app A does not run on cluster C", "app": A, "cluster": C}``: no
  runtime record for A on C (not targeted there, or not rolled out yet);
- ``503`` ``{"error": "app A is FAILED on cluster C", ...}``: the ``failed`` fault;
- ``500`` (or the fault's ``code``) ``{"error": "app A answered an error (fault
  app-errors)", "app", "digest", "cluster"}``: the ``app-errors`` fault.

The cluster-wide faults (``down``, ``blackhole``, ``latency``, ``slow``, ``trickle``) act
on app traffic as on every route of the cluster.

Metrics: ``GET /metrics`` on the same address and port, over the same TLS, with
``Authorization: Bearer TOKEN`` where TOKEN is the text of ``<state>/metrics-token``
(``Sandbox.metrics_token_file``; written 0600 at start; Prometheus reads it with
``authorization: {credentials_file: ...}``); anything else is ``401``. The Host header is
not checked on this route (Prometheus sends the target's address). Prometheus text
exposition format 0.0.4. No ``cluster`` label: the scraper adds one per target (as
``tests/prometheus.py`` does). ``app`` is the appId (a service's appId, or its name).

- ``sandbox_app_requests_total{app, digest, code}`` -- counter: requests answered by the
  app (real ones and synthetic ones), ``code`` the HTTP status (``200``, ``500``, ``503``);
- ``sandbox_app_request_duration_seconds{app, digest}`` -- histogram (``_bucket{le}``,
  ``_sum``, ``_count``; buckets ``LATENCY_BUCKETS``): how long the app took;
- ``sandbox_app_running{app, digest}`` -- gauge, 1 for each app with a runtime record here
  and the digest it serves.

Series appear once an app has been counted (at the first scrape after it runs here), and
stay (as counters do) after its digest changes. A scrape costs O(apps): about 16 lines per
app (23 MB and ~11 s for 10,000 apps on a loaded 2-core machine), so a real Prometheus is
for small sandboxes; nobody scraping costs nothing.

Synthetic traffic: every app with a runtime record here is counted as answering
``SYNTHETIC_RPS`` requests per second, each taking ``SYNTHETIC_LATENCY_S`` (or the
``app-slow`` seconds), with the code a real request would get (``200``, ``500`` under
``app-errors``, ``503`` under ``failed``), and none while the cluster is ``down`` or a
``blackhole``. It is counted lazily -- from the wall time elapsed since it was last
counted, at each scrape and whenever this cluster's faults change (so a fault's effect
starts when it is set, to within the cluster's 50 ms loop) -- never by a timer per app.
An app's current digest is counted from when that rollout was applied here.

Faults (cluster kinds; ``Sandbox.fault(cluster, kind, **params)`` or ``reconcile sandbox
fault CLUSTER KIND --param K=V ...``; ``--off`` / ``on=False`` restores the app):

- ``app-errors``: ``digest=sha256:...`` (or a prefix of it; absent: every digest),
  ``ratio=R`` (0..1, default 1), ``code=N`` (default 500), ``app=A`` (default every app):
  that share of the requests to the app while it runs that digest on this cluster answer
  ``code`` -- deterministically, the n-th affected request fails when
  ``floor(n*R) > floor((n-1)*R)``, counted apart for real and synthetic requests;
- ``app-slow``: ``digest=...`` (as above), ``seconds=S`` (default 2), ``app=A``: the app
  answers S seconds late (real requests sleep; synthetic ones are observed at S).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconciler.sandbox import faults as faults_mod
from reconciler.sandbox import store

JsonDict = dict[str, Any]

#: Synthetic requests per second each app running on a cluster is counted as answering.
SYNTHETIC_RPS = 2.0
#: What a synthetic request takes when the app is not slowed.
SYNTHETIC_LATENCY_S = 0.005
#: The latency histogram's upper bounds (seconds), ``+Inf`` implied.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
METRICS_PATH = "/metrics"
DIRECT_PREFIX = "/sandbox/apps/"
METRICS_TOKEN_FILE = "metrics-token"
REQUESTS = "sandbox_app_requests_total"
DURATION = "sandbox_app_request_duration_seconds"
RUNNING = "sandbox_app_running"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


#: The cluster-wide faults during which nobody reaches the apps (no synthetic traffic).
UNREACHABLE_FAULTS = ("down", "blackhole")


def read_metrics_token(state_dir: Path) -> str | None:
    """The scrape token (``<state>/metrics-token``), None when there is none."""
    try:
        token = (state_dir / METRICS_TOKEN_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return token or None


# -- which app ------------------------------------------------------------------------


def _domain_matches(pattern: str, host: str) -> bool:
    # The gateway's own rule, written here on purpose and not imported from
    # ``core.routing``: the sandbox is the other side of the wire and imports nothing of
    # reconcile, so a mistake in reconcile's reading of routes is not copied into the
    # cluster that checks it.
    if pattern.startswith("*."):
        suffix = pattern[1:]
        label = host[: -len(suffix)] if host.endswith(suffix) else ""
        return bool(label) and "." not in label
    return pattern == host


def _hostnames(entry: JsonDict) -> list[str]:
    route = entry.get("route") or {}
    domains = list((route.get("match") or {}).get("domains") or [])
    if domains:
        return [str(d).lower() for d in domains]
    hostname = (entry.get("ownership") or {}).get("hostname")
    return [str(hostname).lower()] if hostname else []


def route_target(route_table: Iterable[JsonDict], host: str,
                 path: str) -> tuple[bool, str | None]:
    """(whether a route in effect names ``host``, the appId it sends ``path`` to)."""
    host = host.lower()
    known = False
    best: tuple[int, int] | None = None
    app: str | None = None
    for entry in route_table:
        if not any(_domain_matches(d, host) for d in _hostnames(entry)):
            continue
        known = True
        route = entry.get("route") or {}
        prefix = str((route.get("match") or {}).get("path") or "/")
        if not path.startswith(prefix):
            continue
        rank = (int(route.get("priority") or 0), len(prefix))
        if best is None or rank > best:
            best = rank
            app = str(((route.get("action") or {}).get("target") or {}).get("appId") or "")
    return known, (app or None)


def direct_target(path: str) -> str | None:
    """The appId of a direct path (``/sandbox/apps/{appId}[/...]``), else None."""
    if not path.startswith(DIRECT_PREFIX):
        return None
    app = path[len(DIRECT_PREFIX):].split("/", 1)[0]
    return app or None


# -- faults -------------------------------------------------------------------------------


def app_fault(current: dict[str, dict[str, Any]], kind: str, app: str,
              digest: str) -> dict[str, Any] | None:
    """The ``kind`` fault's parameters when it affects ``app`` at ``digest``."""
    params = current.get(kind)
    if params is None:
        return None
    wanted_app = str(params.get("app") or "")
    wanted_digest = str(params.get("digest") or "")
    if wanted_app and wanted_app != app:
        return None
    if wanted_digest and not digest.startswith(wanted_digest):
        return None
    return params


def _number(params: dict[str, Any], name: str, default: float) -> float:
    try:
        value = float(params.get(name, default))
    except (TypeError, ValueError):
        return default
    return value if math.isfinite(value) else default


def error_ratio(params: dict[str, Any]) -> float:
    return min(1.0, max(0.0, _number(params, "ratio", 1.0)))


def error_code(params: dict[str, Any]) -> int:
    code = faults_mod.param_int(params, "code", 500)
    return code if 400 <= code <= 599 else 500


def slow_seconds(params: dict[str, Any]) -> float:
    return min(600.0, max(0.0, _number(params, "seconds", 2.0)))


# -- counting -------------------------------------------------------------------------------


@dataclass
class _Series:
    """One (app, digest): requests per code and the latency histogram."""

    codes: dict[int, int] = field(default_factory=dict)
    buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    count: int = 0
    total: float = 0.0

    def observe(self, code: int, seconds: float, times: int = 1) -> None:
        self.codes[code] = self.codes.get(code, 0) + times
        index = next((i for i, bound in enumerate(LATENCY_BUCKETS) if seconds <= bound),
                     len(LATENCY_BUCKETS))
        self.buckets[index] += times
        self.count += times
        self.total += seconds * times


@dataclass(frozen=True)
class Answer:
    """What the app answers one real request: status, JSON body, extra headers, and how
    long it takes before answering (``app-slow``)."""

    status: int
    body: JsonDict
    headers: dict[str, str]
    delay_s: float = 0.0
    digest: str | None = None  # counted under this digest (None: not counted)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _float(value: float) -> str:
    return repr(float(value))


class Traffic:
    """One cluster's app traffic: answers, counters, synthetic load, exposition.

    ``views`` hands the runtime records as the status routes show them, faults applied
    (``cluster.Cluster.app_views``): ``(appId, resolvedDigest, runtimeState, since_ms)``.
    """

    def __init__(self, cluster_id: str, fault_view: faults_mod.FaultView, *,
                 clock: Callable[[], int] = store.now_ms) -> None:
        self.cluster_id = cluster_id
        self.faults = fault_view
        self.clock = clock
        self.lock = threading.Lock()
        self.series: dict[tuple[str, str], _Series] = {}
        self.started_ms = clock()
        #: the synthetic load is counted up to here (None: never scraped, nothing counted)
        self.counted_ms: int | None = None
        self.carry: dict[tuple[str, str], float] = {}
        #: the faults in effect since ``counted_ms`` (what the elapsed time is counted with)
        self.faults_seen: dict[str, dict[str, Any]] = dict(fault_view.current())
        #: (real or synthetic, app, digest, fault nonce) -> affected requests so far
        self.affected: dict[tuple[str, str, str, str], int] = {}

    # -- errors, deterministically ------------------------------------------------------

    def _failing(self, source: str, app: str, digest: str, params: dict[str, Any],
                 n: int) -> int:
        """How many of the next ``n`` affected requests fail (caller holds the lock)."""
        ratio = error_ratio(params)
        key = (source, app, digest, str(params.get("_nonce", "")))
        before = self.affected.get(key, 0)
        after = before + n
        self.affected[key] = after
        return math.floor(after * ratio + 1e-9) - math.floor(before * ratio + 1e-9)

    # -- real requests ----------------------------------------------------------------------

    def answer(self, app: str, view: JsonDict | None, path: str) -> Answer:
        """What ``app`` answers a real request for ``path`` (``view``: its runtime record
        as the status route shows it, None without one)."""
        headers = {"X-Sandbox-Cluster": self.cluster_id, "X-Sandbox-App": app}
        if view is None:
            return Answer(404, {"error": f"app {app} does not run on cluster {self.cluster_id}",
                                "app": app, "cluster": self.cluster_id}, headers)
        digest = str(view.get("resolvedDigest") or "")
        headers["X-Sandbox-Digest"] = digest
        base = {"app": app, "digest": digest, "cluster": self.cluster_id}
        current = self.faults.current()
        slow = app_fault(current, "app-slow", app, digest)
        delay = slow_seconds(slow) if slow is not None else 0.0
        if view.get("runtimeState") == "FAILED":
            return Answer(503, {"error": f"app {app} is FAILED on cluster {self.cluster_id}",
                                **base}, headers, delay, digest)
        errors = app_fault(current, "app-errors", app, digest)
        if errors is not None:
            with self.lock:
                failing = self._failing("real", app, digest, errors, 1)
            if failing:
                return Answer(error_code(errors),
                              {"error": f"app {app} answered an error (fault app-errors)",
                               **base}, headers, delay, digest)
        return Answer(200, {**base, "path": path,
                            "rolloutGeneration": view.get("rolloutGeneration")},
                      headers, delay, digest)

    def observe(self, app: str, digest: str, code: int, seconds: float) -> None:
        """Count one real request the app answered."""
        with self.lock:
            self.series.setdefault((app, digest), _Series()).observe(code, seconds)

    # -- synthetic load ---------------------------------------------------------------------

    def faults_changed(self) -> bool:
        """Whether this cluster's faults differ from those the load is being counted
        with (cheap: the cluster's main loop asks every tick)."""
        return self.faults.current() != self.faults_seen

    def settle(self, views: Iterable[tuple[str, str, str, int]], *,
               scrape: bool = False) -> None:
        """Count the synthetic load from ``counted_ms`` to now with the faults that were
        in effect meanwhile, then take the current faults. Before the first scrape
        nothing is counted (no series exist for nobody); the first scrape counts from
        this cluster's start."""
        now = self.clock()
        current = dict(self.faults.current())
        with self.lock:
            if self.counted_ms is None:
                if not scrape:
                    self.faults_seen = current
                    return
                self.counted_ms = self.started_ms
            seen = self.faults_seen
            since = self.counted_ms
            self.counted_ms = max(now, since)
            self.faults_seen = current
            if any(seen.get(k) is not None for k in UNREACHABLE_FAULTS):
                return
            failed = seen.get("failed") is not None
            for app, digest, state, began in views:
                start = max(since, began)
                if now <= start or not digest:
                    continue
                key = (app, digest)
                amount = self.carry.get(key, 0.0) + (now - start) / 1000 * SYNTHETIC_RPS
                whole = int(amount)
                self.carry[key] = amount - whole
                if whole <= 0:
                    continue
                slow = app_fault(seen, "app-slow", app, digest)
                latency = slow_seconds(slow) if slow is not None else SYNTHETIC_LATENCY_S
                series = self.series.setdefault(key, _Series())
                if failed or state == "FAILED":
                    series.observe(503, latency, whole)
                    continue
                errors = app_fault(seen, "app-errors", app, digest)
                failing = 0 if errors is None else self._failing(
                    "synthetic", app, digest, errors, whole)
                if failing:
                    series.observe(error_code(errors or {}), latency, failing)
                if whole - failing:
                    series.observe(200, latency, whole - failing)

    # -- exposition ----------------------------------------------------------------------

    def exposition(self, running: Iterable[tuple[str, str]]) -> bytes:
        """The Prometheus text format (0.0.4) of every series, and ``running`` as the
        ``sandbox_app_running`` gauge."""
        lines = [f"# HELP {REQUESTS} Requests the app answered on this cluster (real "
                 "and synthetic), by digest and HTTP status.",
                 f"# TYPE {REQUESTS} counter"]
        with self.lock:
            items = sorted(self.series.items())
            for (app, digest), series in items:
                labels = f'app="{_escape(app)}",digest="{_escape(digest)}"'
                for code in sorted(series.codes):
                    lines.append(f'{REQUESTS}{{{labels},code="{code}"}} '
                                 f"{series.codes[code]}")
            lines += [f"# HELP {DURATION} How long the app took to answer.",
                      f"# TYPE {DURATION} histogram"]
            for (app, digest), series in items:
                labels = f'app="{_escape(app)}",digest="{_escape(digest)}"'
                cumulative = 0
                for bound, count in zip((*LATENCY_BUCKETS, math.inf), series.buckets,
                                        strict=True):
                    cumulative += count
                    le = "+Inf" if math.isinf(bound) else _float(bound)
                    lines.append(f'{DURATION}_bucket{{{labels},le="{le}"}} {cumulative}')
                lines.append(f"{DURATION}_sum{{{labels}}} {_float(series.total)}")
                lines.append(f"{DURATION}_count{{{labels}}} {series.count}")
        lines += [f"# HELP {RUNNING} 1 for each app with a runtime record on this cluster, "
                  "with the digest it serves.",
                  f"# TYPE {RUNNING} gauge"]
        for app, digest in sorted(running):
            lines.append(f'{RUNNING}{{app="{_escape(app)}",digest="{_escape(digest)}"}} 1')
        return ("\n".join(lines) + "\n").encode("utf-8")
