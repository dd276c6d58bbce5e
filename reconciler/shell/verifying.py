"""Taking the measurements of per-cluster verification (issue 34; docs/verification.md).

Owns ``Verifier``: for every service held to checks (``kind: Verification``), on every
cluster whose observation in the snapshot proves the pinned digest, each check's series
-- ``count`` measurements ``intervalSeconds`` apart, stopped as soon as more than
``failureLimit`` failed (``core.verification.combine``) -- and the snapshot returned with
each observation carrying its results (``Observation.checks``), bound to the digest and
the rollout generation the cluster reported. The judge (``core.evidence``) reads them;
this module decides nothing.

- ``http``: a GET through *each cluster separately*: the cluster's own address (as the
  prober resolved it: ``MeshView.resolved``) on the mesh port, TLS verified against the
  mesh CA with the gateway's name (SNI), ``Host`` the check's host (default the gateway).
- ``prometheus``: an instant query (``/api/v1/query``) against the Prometheus the
  Settings name, rendered per cluster (``{{cluster}}``) or asked once and its samples told
  apart by their ``cluster`` label.

Bounded everywhere: each request has the check's (or the source's) timeout around the
whole exchange, a reply body is read up to ``MAX_REPLY_BYTES`` and no further; a reply
that is not what was asked for (not JSON, an error, no sample, several, NaN) is an
unknown measurement saying what it got -- never a pass. Only services with checks cost
anything: a snapshot of a repo without ``Verification`` documents is returned unchanged.

Also owns ``query_problems``: each ``prometheus`` query asked once of Prometheus itself
(its parse error for a malformed query), for ``validate --live``-style checks at plan
time, with the document's file:line.

Must not print, judge, or write anything anywhere.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import httpx

from reconciler.core.desired import (
    DesiredState,
    PrometheusSource,
    Service,
    VerificationCheck,
)
from reconciler.core.diagnostics import Diagnostic
from reconciler.core.live import (
    LiveService,
    LiveSnapshot,
    MeshView,
    Observation,
    ObservationKind,
    ReadFailure,
)
from reconciler.core.sanitize import safe
from reconciler.core.verification import (
    CheckResult,
    Measurement,
    Outcome,
    combine,
    parse_condition,
    per_cluster,
    render_query,
    series_done,
)
from reconciler.shell import tracing
from reconciler.shell.controlplane import describe_transport_error
from reconciler.shell.endpoints import Connection, ssl_context
from reconciler.shell.probing.dialing import origin

#: The most of a reply body read (a Prometheus answer, an app's page): beyond it the
#: measurement is unknown ("a reply larger than ..."), never parsed in part.
MAX_REPLY_BYTES: Final = 1_000_000
QUERY_PATH: Final = "/api/v1/query"


class _TooLarge(Exception):
    pass


async def _read_capped(response: httpx.Response, limit: int = MAX_REPLY_BYTES) -> bytes:
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body.extend(chunk)
        if len(body) > limit:
            raise _TooLarge(f"a reply larger than {limit} bytes")
    return bytes(body)


@dataclass
class Counters:
    """What verification sent (for the measurements in docs/verification.md)."""

    http_requests: int = 0
    prometheus_queries: int = 0
    seconds: float = 0.0
    by_check: dict[str, int] = field(default_factory=dict)

    def count(self, check: str, n: int = 1) -> None:
        self.by_check[check] = self.by_check.get(check, 0) + n


#: Called once per check and cluster with its result and how long its series took
#: (tracing's span per check, the metric ``reconcile_verification_result``).
Observer = Callable[[CheckResult, float], None]


class Verifier:
    """Checks for one run; its connections outlive a snapshot (apply's gate polls and
    watch re-use them). ``transport`` replaces the network (tests)."""

    def __init__(self, conn: Connection, source: PrometheusSource | None, *,
                 transport: httpx.AsyncBaseTransport | None = None,
                 observer: Observer | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self._conn = conn
        self._source = source
        self._transport = transport
        self._ssl = ssl_context(conn.mesh_ca) if transport is None else None
        self._mesh: dict[str, httpx.AsyncClient] = {}
        self._prometheus: httpx.AsyncClient | None = None
        self._observer = observer
        self._sleep = sleep
        self.counters = Counters()

    async def aclose(self) -> None:
        clients = [*self._mesh.values(), *([self._prometheus] if self._prometheus else [])]
        self._mesh, self._prometheus = {}, None
        for client in clients:
            await client.aclose()

    # ------------------------------------------------------------------ the snapshot

    async def verify(self, desired: DesiredState, snapshot: LiveSnapshot) -> LiveSnapshot:
        """``snapshot`` with every checked service's observations carrying their results.
        Unchanged (the same object) when no service is held to checks."""
        observations = await self.checked(
            desired, snapshot.observations, snapshot.services, snapshot.mesh)
        if observations is None:
            return snapshot
        return snapshot.model_copy(update={"observations": observations})

    async def verify_observations(
            self, desired: DesiredState, observations: Mapping[str, tuple[Observation, ...]],
            live: Mapping[str, LiveService | ReadFailure], mesh: MeshView,
    ) -> Mapping[str, tuple[Observation, ...]]:
        """``observations`` (appId -> one per cluster) with the results of the checks of
        every service of ``desired`` they cover (the convergence gate's polls read the
        clusters without a whole snapshot); the same mapping when nothing is checked."""
        found = await self.checked(desired, observations, live, mesh)
        return observations if found is None else found

    async def checked(
            self, desired: DesiredState, observations: Mapping[str, tuple[Observation, ...]],
            live: Mapping[str, LiveService | ReadFailure], mesh: MeshView,
    ) -> dict[str, tuple[Observation, ...]] | None:
        """The observations with the checks' results, or None when nothing is checked."""
        held = [(svc, checks) for svc in desired.services
                if svc.app_id in observations and (checks := desired.checks_for(svc.name))]
        if not held:
            return None
        began = time.monotonic()
        addresses = _addresses(mesh)
        found = await asyncio.gather(*(
            self._service(svc, checks, observations.get(svc.app_id, ()),
                          live.get(svc.service_id), addresses) for svc, checks in held))
        out = dict(observations)
        for svc, results in zip((s for s, _ in held), found, strict=True):
            rows = out.get(svc.app_id)
            if rows is None or not results:
                continue
            out[svc.app_id] = tuple(
                replace(o, checks=results[o.cluster_id]) if o.cluster_id in results else o
                for o in rows)
        self.counters.seconds += time.monotonic() - began
        return out

    async def _service(self, svc: Service, checks: Sequence[tuple[str, VerificationCheck]],
                       rows: Iterable[Observation], live: LiveService | ReadFailure | None,
                       addresses: Mapping[str, str]) -> dict[str, tuple[CheckResult, ...]]:
        digest = svc.release.digest
        control = live.deployment.rollout_generation \
            if isinstance(live, LiveService) and live.deployment is not None else None
        # Only the clusters that prove they run the pinned digest are measured: what a
        # cluster running something else answers is no evidence about this release.
        running: dict[str, int | None] = {}
        for obs in rows:
            runtime = obs.runtime
            if obs.kind is ObservationKind.ANSWERED and runtime is not None \
                    and runtime.resolved_digest == digest:
                running[obs.cluster_id] = runtime.rollout_generation \
                    if runtime.rollout_generation is not None else control
        if not running:
            return {}
        per_check = await asyncio.gather(*(
            self._check(name, check, svc, digest, running, addresses)
            for name, check in checks))
        out: dict[str, list[CheckResult]] = {c: [] for c in running}
        for results in per_check:
            for result in results:
                out[result.cluster].append(result)
        return {c: tuple(r) for c, r in out.items()}

    async def _check(self, name: str, check: VerificationCheck, svc: Service, digest: str,
                     running: Mapping[str, int | None], addresses: Mapping[str, str],
                     ) -> list[CheckResult]:
        # A span per check (shell.tracing; nothing while tracing is off): what was asked,
        # of which clusters, and each cluster's outcome and value.
        with tracing.span(f"check {name}", **{
                "reconcile.service": svc.name, "reconcile.digest": digest,
                "reconcile.check": name,
                "reconcile.check.kind": "http" if check.http is not None else "prometheus",
                "reconcile.clusters": ",".join(sorted(running))}) as span:
            results = await self._series(name, check, svc, digest, running, addresses)
            if span is not None:
                span.set_attributes({
                    f"reconcile.check.{r.cluster}": f"{r.outcome.value} {r.value}".strip()
                    for r in results})
            return results

    async def _series(self, name: str, check: VerificationCheck, svc: Service, digest: str,
                      running: Mapping[str, int | None], addresses: Mapping[str, str],
                      ) -> list[CheckResult]:
        clusters = sorted(running)
        began = time.monotonic()
        measure: Callable[[Sequence[str]], Awaitable[dict[str, Measurement]]]
        if check.http is not None:
            measure = self._http_measure(name, check, svc, addresses)
        else:
            measure = self._prometheus_measure(name, check, svc, digest)
        history: dict[str, list[Measurement]] = {c: [] for c in clusters}
        for step in range(check.count):
            pending = [c for c in clusters if not series_done(
                history[c], count=check.count, failure_limit=check.failure_limit)]
            if not pending:
                break
            if step:
                await self._sleep(check.interval_seconds)
            got = await measure(pending)
            for cluster in pending:
                history[cluster].append(got.get(cluster) or Measurement(
                    Outcome.UNKNOWN, "", f"no measurement for cluster {cluster}"))
        took = time.monotonic() - began
        results: list[CheckResult] = []
        for cluster in clusters:
            verdict = combine(history[cluster], count=check.count,
                              failure_limit=check.failure_limit)
            result = CheckResult(check=name, cluster=cluster, service=svc.name, digest=digest,
                                 generation=running[cluster], outcome=verdict.outcome,
                                 value=safe(verdict.value, 80), why=safe(verdict.why, 300),
                                 measurements=len(history[cluster]))
            results.append(result)
            if self._observer is not None:
                self._observer(result, took)
        return results

    # ------------------------------------------------------------------ http

    def _http_measure(self, name: str, check: VerificationCheck, svc: Service,
                      addresses: Mapping[str, str],
                      ) -> Callable[[Sequence[str]], Awaitable[dict[str, Measurement]]]:
        async def measure(clusters: Sequence[str]) -> dict[str, Measurement]:
            found = await asyncio.gather(*(
                self._http_one(name, check, svc, addresses.get(c)) for c in clusters))
            return dict(zip(clusters, found, strict=True))
        return measure

    def _mesh_client(self, address: str, timeout: float) -> httpx.AsyncClient:
        client = self._mesh.get(address)
        if client is None:
            client = self._mesh[address] = httpx.AsyncClient(
                verify=self._ssl if self._ssl is not None else True,
                transport=self._transport, trust_env=False, follow_redirects=False,
                timeout=httpx.Timeout(timeout))
        return client

    async def _http_one(self, name: str, check: VerificationCheck, svc: Service,
                        address: str | None) -> Measurement:
        http = check.http
        assert http is not None
        if address is None:
            return Measurement(Outcome.UNKNOWN, "", "no address answered as this cluster")
        path = render_query(http.path, cluster="", service=svc.name, app=svc.app_id,
                            digest=svc.release.digest)
        host = http.host or self._conn.gateway
        timeout = check.timeout_seconds
        self.counters.http_requests += 1
        self.counters.count(name)
        began = time.monotonic()
        try:
            async with asyncio.timeout(timeout):
                client = self._mesh_client(address, timeout)
                request = client.build_request(
                    "GET", origin(address, self._conn.mesh_port) + path,
                    headers={"Host": host, "Accept": "*/*"},
                    extensions={"sni_hostname": self._conn.gateway})
                response = await client.send(request, stream=True)
                try:
                    body = await _read_capped(response, 64_000)
                finally:
                    await response.aclose()
        except (TimeoutError, httpx.TimeoutException):
            return Measurement(Outcome.UNKNOWN, "", f"no answer within {timeout:g}s")
        except httpx.TransportError as exc:
            return Measurement(Outcome.UNKNOWN, "", describe_transport_error(exc))
        except _TooLarge as exc:
            return Measurement(Outcome.UNKNOWN, "", str(exc))
        latency = time.monotonic() - began
        if response.status_code != http.status:
            return Measurement(Outcome.FAIL, f"HTTP {response.status_code}",
                               f"expected HTTP {http.status} for {safe(path, 200)}")
        if http.body is not None and http.body not in body.decode("utf-8", "replace"):
            return Measurement(Outcome.FAIL, f"HTTP {response.status_code}",
                               f"the body does not contain {safe(http.body, 80)!r}")
        if http.max_latency_seconds is not None and latency > http.max_latency_seconds:
            return Measurement(Outcome.FAIL, f"{latency:.3f}s",
                               f"slower than {http.max_latency_seconds:g}s")
        return Measurement(Outcome.PASS, f"HTTP {response.status_code} in {latency:.3f}s")

    # ------------------------------------------------------------------ prometheus

    def _prometheus_measure(self, name: str, check: VerificationCheck, svc: Service,
                            digest: str,
                            ) -> Callable[[Sequence[str]], Awaitable[dict[str, Measurement]]]:
        prom = check.prometheus
        assert prom is not None
        condition = parse_condition(prom.success_condition)

        def judged(value: float, shown: str) -> Measurement:
            if math.isnan(value):
                return Measurement(Outcome.UNKNOWN, "NaN", "the query gave NaN (no traffic "
                                   "to divide by?), which proves nothing")
            if condition.holds(value):
                return Measurement(Outcome.PASS, shown)
            return Measurement(Outcome.FAIL, shown, f"not {condition.text}")

        def query_for(cluster: str) -> str:
            return render_query(prom.query, cluster=cluster, service=svc.name,
                                app=svc.app_id, digest=digest)

        async def one(cluster: str) -> Measurement:
            samples = await self._query(name, query_for(cluster))
            if isinstance(samples, Measurement):
                return samples
            if len(samples) != 1:
                return _sample_count(samples, cluster)
            return judged(*samples[0][1:])

        async def each(clusters: Sequence[str]) -> dict[str, Measurement]:
            found = await asyncio.gather(*(one(c) for c in clusters))
            return dict(zip(clusters, found, strict=True))

        async def labelled(clusters: Sequence[str]) -> dict[str, Measurement]:
            samples = await self._query(name, query_for(""))
            if isinstance(samples, Measurement):
                return dict.fromkeys(clusters, samples)
            out: dict[str, Measurement] = {}
            for cluster in clusters:
                mine = [s for s in samples if s[0] == cluster]
                out[cluster] = judged(*mine[0][1:]) if len(mine) == 1 \
                    else _sample_count(mine, cluster)
            return out

        return each if per_cluster(prom.query) else labelled

    def _prometheus_client(self) -> httpx.AsyncClient:
        if self._prometheus is None:
            timeout = self._source.timeout_seconds if self._source else 5.0
            self._prometheus = httpx.AsyncClient(
                transport=self._transport, trust_env=False, follow_redirects=False,
                timeout=httpx.Timeout(timeout))
        return self._prometheus

    async def _query(self, name: str, query: str
                     ) -> list[tuple[str, float, str]] | Measurement:
        """An instant query's samples as (cluster label, value, value as said), or the
        unknown measurement saying why there are none to read."""
        if self._source is None:
            return Measurement(Outcome.UNKNOWN, "", "no Prometheus is configured "
                               "(verification.prometheus.url)")
        self.counters.prometheus_queries += 1
        self.counters.count(name)
        status, body = await self._ask(query)
        if isinstance(body, Measurement):
            return body
        return _samples(status, body)

    async def _ask(self, query: str) -> tuple[int, Any | Measurement]:
        assert self._source is not None
        url = self._source.url.rstrip("/") + QUERY_PATH
        timeout = self._source.timeout_seconds
        where = f"Prometheus {safe(self._source.url, 120)}"
        try:
            async with asyncio.timeout(timeout):
                client = self._prometheus_client()
                request = client.build_request("GET", url, params={"query": query})
                response = await client.send(request, stream=True)
                try:
                    raw = await _read_capped(response)
                finally:
                    await response.aclose()
        except (TimeoutError, httpx.TimeoutException):
            return 0, Measurement(Outcome.UNKNOWN, "", f"{where} gave no answer within "
                                  f"{timeout:g}s")
        except httpx.TransportError as exc:
            return 0, Measurement(Outcome.UNKNOWN, "", f"{where}: "
                                  f"{describe_transport_error(exc)}")
        except _TooLarge as exc:
            return 0, Measurement(Outcome.UNKNOWN, "", f"{where} sent {exc}")
        try:
            return response.status_code, json.loads(raw)
        except ValueError:
            return response.status_code, Measurement(
                Outcome.UNKNOWN, "", f"{where} answered HTTP {response.status_code} with no "
                f"JSON: {safe(raw[:120].decode('utf-8', 'replace'), 120)!r}")

    async def query_problem(self, query: str) -> str | None:
        """Prometheus's own word on ``query``'s syntax: its error for a query it cannot
        parse (``bad_data``), else None (an unreachable Prometheus says nothing here:
        the checks themselves will be unknown)."""
        _, body = await self._ask(query)
        if isinstance(body, Measurement) or not isinstance(body, dict):
            return None
        if body.get("status") == "error" and body.get("errorType") == "bad_data":
            return safe(str(body.get("error", "")), 300)
        return None


def _sample_count(samples: Sequence[tuple[str, float, str]], cluster: str) -> Measurement:
    if not samples:
        return Measurement(Outcome.UNKNOWN, "", f"the query gave no sample for cluster "
                           f"{cluster}")
    return Measurement(Outcome.UNKNOWN, "", f"the query gave {len(samples)} samples for "
                       f"cluster {cluster}, not one (aggregate it, e.g. with sum)")


def _samples(status: int, body: Any) -> list[tuple[str, float, str]] | Measurement:
    """A ``/api/v1/query`` reply's samples, or why they cannot be read."""
    def unknown(why: str) -> Measurement:
        return Measurement(Outcome.UNKNOWN, "", f"Prometheus: {why}")
    if not isinstance(body, dict):
        return unknown(f"HTTP {status}, a reply that is not a JSON object")
    if body.get("status") != "success":
        return unknown(f"HTTP {status}, {safe(str(body.get('errorType', 'error')), 40)}: "
                       f"{safe(str(body.get('error', '')), 200)}")
    data = body.get("data")
    if not isinstance(data, dict):
        return unknown("a reply without data")
    kind, result = data.get("resultType"), data.get("result")
    try:
        if kind == "scalar" and isinstance(result, list) and len(result) == 2:
            text = str(result[1])
            return [("", float(text), text)]
        if kind == "vector" and isinstance(result, list):
            out: list[tuple[str, float, str]] = []
            for sample in result:
                metric, value = sample["metric"], sample["value"]
                text = str(value[1])
                label = metric.get("cluster", "") if isinstance(metric, dict) else ""
                out.append((str(label), float(text), safe(text, 40)))
            return out
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        return unknown(f"a sample that cannot be read ({type(exc).__name__})")
    return unknown(f"a {safe(str(kind), 20)} result; an instant vector or scalar is needed")


def _addresses(mesh: MeshView) -> dict[str, str]:
    """Each cluster's own address, as the prober resolved the gateway: a cluster named by
    two addresses has none (its answers could not be attributed; nor can a check's)."""
    named: dict[str, list[str]] = {}
    for endpoint in mesh.resolved:
        if endpoint.cluster_id is not None and endpoint.error is None:
            named.setdefault(endpoint.cluster_id, []).append(endpoint.address)
    duplicated = set(mesh.duplicate_claims)
    return {c: a[0] for c, a in named.items() if len(a) == 1 and c not in duplicated}


def held(desired: DesiredState) -> bool:
    """Whether any service is held to checks (only then is anything measured)."""
    return any(desired.checks_for(s.name) for s in desired.services)


async def query_problems(desired: DesiredState, conn: Connection) -> list[Diagnostic]:
    """Every ``prometheus`` check Prometheus itself cannot parse (its own parse error, by
    asking its query API), at the line the Verification document starts on with the
    check's field. Empty when no Prometheus is configured or none is unparseable; an
    unreachable Prometheus says nothing here (the checks will be unknown)."""
    source = desired.settings.verification.prometheus \
        if desired.settings.verification is not None else None
    if source is None:
        return []
    asked: list[tuple[str, int, int, str, str]] = []  # path, line, index, name, query
    for doc in desired.verifications:
        where = desired.sources.get(f"Verification/{doc.name}")
        for index, check in enumerate(doc.checks):
            if check.prometheus is not None:
                asked.append((where.path if where else "?", where.line if where else 0, index,
                              f"{doc.name}/{check.name}", render_query(
                                  check.prometheus.query, cluster="c", service="s", app="a",
                                  digest="sha256:" + "0" * 64)))
    if not asked:
        return []
    verifier = Verifier(conn, source)
    try:
        # Asked together: a hanging Prometheus costs one timeout, not one per check.
        found = await asyncio.gather(*(verifier.query_problem(q) for *_, q in asked))
    finally:
        await verifier.aclose()
    return [Diagnostic(path, line, 0, f"checks[{index}].prometheus.query",
                       f"check {name}: Prometheus cannot parse the query: {problem}")
            for (path, line, index, name, _), problem in zip(asked, found, strict=True)
            if problem is not None]


def results(snapshot: LiveSnapshot) -> Iterable[CheckResult]:
    """Every check result a snapshot holds (for status, metrics and traces)."""
    for rows in snapshot.observations.values():
        for obs in rows:
            yield from obs.checks
