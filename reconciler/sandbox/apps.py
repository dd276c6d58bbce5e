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
  "rolloutGeneration": G}`` when cluster C has a runtime record for app A: the digest is
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
stay (as counters do) after its digest changes.

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
