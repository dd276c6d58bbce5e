"""One sandbox cluster: its own HTTPS ingress, auth, runtime records and deployer loop.

Owns CONTRACT.md §2 for one cluster: ``GET /api/v3/cluster/health`` (names the cluster),
the per-cluster Ed25519 challenge/verify handshake (single-use challenges, tokens valid on
this cluster only, with expiry), ``GET /host/api/v3/baas/deployment/apps/{appId}/status``
(Bearer; 404 without a runtime record), the [ext] batch status route
``GET /host/api/v3/baas/deployment/apps/status`` (docs/extensions.md §1: pages of the same
per-app bodies, an ``ETag`` from this cluster's runtime revision, ``304`` on
``If-None-Match``; advertised in the health reply; absent with ``--no-batch-reads``, as on
the real upstream), the cluster faults on the wire, and the deployer: a loop that pulls the
desired rollouts and egress from the control plane, converges after this cluster's delay
(asynchronously: the control plane never waits for it), filters egress through the operator
allow-list, and reports per-reporter rollout status back. Issue 21: the same loop pulls the
gateway routes and swaps them in after the cluster's delay; each app's status carries
[ext] ``routes``, the routes in effect here that the app owns (so the batch route carries
them too), and the ``route-stuck`` fault keeps an old route table.

[ext] ``runtime.healthySince`` (docs/extensions.md §6): since when (ms) this cluster has
run the record's ``resolvedDigest`` with every replica healthy, without a gap. It starts
when a rollout is applied here (a new rollout or digest; an egress change keeps it), and
again after any stretch in which the cluster was not seen healthy: the ``down`` and
``blackhole`` faults (an outage nobody observed), the ``failed`` fault (replicas
unhealthy; no ``healthySince`` is said meanwhile), and this process's own start (whatever
ran before it, nobody here watched). The end of such a stretch moves the runtime revision,
so a conditional read never keeps the old statement.

The deployer's work per tick is proportional to what changed, not to the fleet: a full
pass over every app runs only when the desired state, the allow-list or a fault that
changes the runtime view moved; otherwise only the apps due to converge are looked at, and
only reports that differ from the last acknowledged one are sent. The runtime revision
(the batch route's ETag) moves only when a record as the status routes show it changed.

Runtime records persist in ``<state>/clusters/<id>/runtime.json``; every request is
appended to ``<state>/clusters/<id>/audit.jsonl``. Must not touch the control plane's
database: it only speaks HTTP to it.

Run: ``python -m reconciler.sandbox.cluster --state DIR --id sn1 --address 127.0.0.2 ...``.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import re
import secrets
import socket
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from reconciler.sandbox import apps, batch, controlplane, faults, pki, rollouts, serving, store

JsonDict = dict[str, Any]

HEALTH_PATH = "/api/v3/cluster/health"
CHALLENGE_PATH = "/host/api/v3/baas/auth/challenge"
VERIFY_PATH = "/host/api/v3/baas/auth/verify"
STATUS_RE = re.compile(r"^/host/api/v3/baas/deployment/apps/([^/?]+)/status$")
CHALLENGE_TTL_MS = 120_000
SYNC_INTERVAL_S = 0.1
#: Reports per sync call: a fleet's worth (after a start or a new seed) goes out over
#: several ticks, so no call keeps the control plane busy for seconds.
REPORTS_PER_SYNC = 500
SYNC_TIMEOUT_S = 30.0
#: Faults during which this cluster was not seen running healthily: when one lifts,
#: ``healthySince`` restarts (see the module).
GAP_FAULTS = ("down", "blackhole", "failed")
ANSI_ERROR = ("\x1b[31;1mERROR\x1b[0m image pull failed\r\n\x1b[2K\x1b]0;owned\x07"
              "\x1b[?25l\x1b[1A\x1b[Hdeploy \x1b[32mOK\x1b[0m\x08\x08\x00\u202e\x9b31m done")


def cluster_dir(state_dir: Path, cluster_id: str) -> Path:
    return state_dir / "clusters" / cluster_id


def read_audit(state_dir: Path, cluster_id: str) -> list[JsonDict]:
    path = cluster_dir(state_dir, cluster_id) / "audit.jsonl"
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in lines if line.strip()]


def _read_state(state_dir: Path, cluster_id: str, name: str) -> JsonDict:
    """One of a cluster's state files; {} when it is missing or not a JSON object."""
    try:
        data = json.loads((cluster_dir(state_dir, cluster_id) / name).read_text(
            encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_state(path: Path, text: str) -> None:
    """Replace a state file whole: a reader sees the old text or the new, never half."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def read_runtime(state_dir: Path, cluster_id: str) -> dict[str, JsonDict]:
    return dict(_read_state(state_dir, cluster_id, "runtime.json").get("apps", {}))


def read_settled(state_dir: Path, cluster_id: str) -> JsonDict:
    """What the cluster's last converge acted on (``Cluster.note_settled``); {} before
    its first."""
    return _read_state(state_dir, cluster_id, "settled.json")


def read_routes(state_dir: Path, cluster_id: str) -> list[JsonDict]:
    """The gateway routes a cluster had in effect when it stopped ([] for a new one)."""
    return list(_read_state(state_dir, cluster_id, "routes.json").get("routes", []))


def _encode(value: object) -> bytes:
    """JSON exactly as ``serving.JsonHandler.send_json`` sends it."""
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def _public(record: JsonDict | None) -> JsonDict | None:
    """A runtime record without the deployer's own bookkeeping (``_``-prefixed keys)."""
    return None if record is None else {k: v for k, v in record.items()
                                        if not k.startswith("_")}


def _allowed(allow: list[str] | None, host: str, port: int) -> bool:
    if allow is None:
        return True
    return any(e in ("*", host, f"{host}:{port}") for e in allow)


class Cluster:
    """The cluster's state: sessions, runtime records and the deployer loop."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.id: str = args.id
        self.state_dir: Path = args.state
        self.dir = cluster_dir(self.state_dir, self.id)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.gateway: str = args.gateway
        self.address: str = args.address
        self.port: int = args.port
        self.delay_ms: int = args.delay_ms
        self.token_ttl_ms: int = args.token_ttl_ms
        self.adopt: bool = args.adopt
        self.batch_reads: bool = args.batch_reads
        self.cp_host, self.cp_port = args.control_plane.rsplit(":", 1)
        self.secret = (self.state_dir / controlplane.SECRET_FILE).read_text().strip()
        self.wallets = {args.wallet: (self.state_dir / pki.SIGNER_PUB_FILE).read_text().strip()}
        self.auth_app_id: str = args.auth_app_id
        # A cluster adopting a fresh seed reports as the seed's reporter session did
        # (seeding.full_report), so its first reports equal the seeded ones and change
        # nothing: a fresh sandbox starts quiet. Any later start is a new session.
        self.session = f"{self.id}-seed" if args.adopt else f"{self.id}-{secrets.token_hex(4)}"
        #: This process's run: part of every ETag, so a restart never repeats one.
        self.incarnation = secrets.token_hex(6)
        self.faults = faults.FaultView(self.state_dir, self.id)
        self.lock = threading.Lock()
        self.audit_lock = threading.Lock()
        self.challenges: dict[str, JsonDict] = {}
        self.tokens: dict[str, JsonDict] = {}
        self.apps: dict[str, JsonDict] = read_runtime(self.state_dir, self.id)
        self.desired: dict[str, JsonDict] = {}
        self.pending: dict[str, tuple[tuple[Any, ...], float]] = {}
        self.version: int | None = None
        #: app -> the last report the control plane acknowledged, without its timestamps.
        self.sent: dict[str, str] = {}
        #: apps whose report may differ from ``sent`` (their record changed).
        self.dirty: set[str] = set()
        #: the next report pass / converge pass looks at every app, not only ``dirty`` /
        #: the pending ones (a new desired state, allow-list or view fault).
        self.full_reports = True
        self.full_converge = True
        self._inputs: tuple[str, bool, str] | None = None
        self._view_faults: str | None = None
        #: [ext] moves whenever a record as the status routes show it changes.
        self.revision = 0
        self._sorted_ids: list[str] | None = None
        #: app -> its status body as sent (compact JSON), kept until its record or the
        #: view faults change: a 1,000-app page is then a join, not 1,000 encodings.
        self._encoded: dict[str, bytes] = {}
        self._encoded_view: str | None = None
        self.report_seq = 0
        #: Issue 21: the gateway routes in effect on this cluster's ingress, the routes the
        #: control plane last handed out, and (canonical text, when due) of the pending swap.
        self.route_table: list[JsonDict] = read_routes(self.state_dir, self.id)
        self.desired_routes: list[JsonDict] | None = None
        self.routes_due: tuple[str, float] | None = None
        self.synced = threading.Event()
        self._cp_ctx = serving.client_context(self.state_dir / pki.CA_FILE)
        self._cp: http.client.HTTPSConnection | None = None
        #: [ext] the end of the last stretch nobody saw healthy (``GAP_FAULTS``, or this
        #: process's start): no app's ``healthySince`` is earlier.
        self.recovered_at = store.now_ms()
        self._settled_mark = ""  # note_settled's last write
        self._in_gap = False
        #: Issue 34: the apps' own traffic on this ingress and its /metrics (sandbox.apps).
        self.traffic = apps.Traffic(self.id, self.faults)
        self.metrics_token = apps.read_metrics_token(self.state_dir)

    # -- audit ----------------------------------------------------------------------

    def audit(self, method: str, path: str, status: int, result: str) -> None:
        line = json.dumps({"at": store.now_ms(), "method": method, "path": path,
                           "status": status, "result": result}) + "\n"
        with self.audit_lock, open(self.dir / "audit.jsonl", "a", encoding="utf-8") as fh:
            fh.write(line)

    # -- the deployer -------------------------------------------------------------------

    def _allow(self) -> list[str] | None:
        params = self.faults.get("egress-allow")
        if params is None:
            return None
        return [h.strip() for h in str(params.get("hosts", "")).split(",") if h.strip()]

    def _targets_me(self, plan: JsonDict | None) -> bool:
        return bool(plan) and self.id in plan["targetScope"]["targetClusterIds"]  # type: ignore[index]

    def _call_control_plane(self, body: JsonDict) -> JsonDict:
        for attempt in (1, 2):
            if self._cp is None:
                self._cp = http.client.HTTPSConnection(
                    self.cp_host, int(self.cp_port), context=self._cp_ctx,
                    timeout=SYNC_TIMEOUT_S)
            try:
                self._cp.request("POST", "/sandbox/internal/sync", body=json.dumps(body),
                                 headers={"Content-Type": "application/json",
                                          "X-Sandbox-Secret": self.secret})
                response = self._cp.getresponse()
                data = response.read()
                if response.status != 200:
                    raise OSError(f"sync HTTP {response.status}")
                return dict(json.loads(data))
            except (OSError, http.client.HTTPException, ValueError):
                self._cp.close()
                self._cp = None
                if attempt == 2:
                    raise
        raise OSError("unreachable")

    def note_gaps(self) -> None:
        """Restart every ``healthySince`` when a ``GAP_FAULTS`` fault has just lifted
        (called by the main loop, and before a status route answers)."""
        gap = any(self.faults.get(k) is not None for k in GAP_FAULTS)
        with self.lock:
            if gap == self._in_gap:
                return
            self._in_gap = gap
            if not gap:
                self.recovered_at = store.now_ms()
            self.revision += 1
            self._encoded.clear()

    def view_faults(self) -> str:
        """The faults that change what the status routes show (and the reports say)."""
        return "".join(k[0] for k in ("failed", "ansi") if self.faults.get(k) is not None) or "-"

    def _report(self, app_id: str, want: JsonDict, now: int) -> JsonDict | None:
        """This cluster's reporter status for ``app_id`` (caller holds the lock)."""
        plan = want.get("plan")
        if not self._targets_me(plan):
            return None
        assert plan is not None
        record = self.effective(app_id)
        required = rollouts.NODES_PER_CLUSTER * rollouts.REPLICAS_PER_NODE
        report: JsonDict = {
            "reporterId": rollouts.reporter_id(self.id),
            "reporterSessionId": self.session,
            "clusterId": self.id,
            "reporterNodeNames": rollouts.node_names(self.id),
            "rolloutId": plan["rolloutId"],
            "rolloutGeneration": plan["rolloutGeneration"],
            "reportSequence": self.report_seq,
            "reportedAt": now,
            "requiredReplicaCount": required,
            "observedReplicaCount": 0, "healthyReplicaCount": 0,
            "verifiedReplicaCount": 0, "failedReplicaCount": 0,
        }
        if record is not None and record["rolloutId"] == plan["rolloutId"]:
            counts = record["replicaCounts"]
            report.update(observedReplicaCount=counts["observed"],
                          healthyReplicaCount=counts["healthy"],
                          verifiedReplicaCount=counts["verified"],
                          failedReplicaCount=counts["failed"])
        elif self.apps.get(app_id, {}).get("_stuckOn") == plan["rolloutId"]:
            report["mismatchReason"] = "pulled-digest-mismatch"
        return {"serviceId": want["serviceId"], "report": report}

    def outgoing_reports(self) -> tuple[list[JsonDict], dict[str, str]]:
        """The reports that differ from the acknowledged ones, and their fingerprints."""
        now = store.now_ms()
        view = self.view_faults()
        with self.lock:
            if view != self._view_faults:
                self._view_faults = view
                self.full_reports = True
            candidates = list(self.desired) if self.full_reports else list(self.dirty)
            self.full_reports = False
            self.dirty.clear()
            out: list[JsonDict] = []
            fingerprints: dict[str, str] = {}
            for index, app_id in enumerate(candidates):
                if len(out) >= REPORTS_PER_SYNC:
                    self.dirty.update(candidates[index:])  # the next ticks send the rest
                    break
                want = self.desired.get(app_id)
                item = None if want is None else self._report(app_id, want, now)
                if item is None:
                    continue
                fingerprint = store.canonical(
                    {k: v for k, v in item["report"].items()
                     if k not in ("reportedAt", "reportSequence")})
                if self.sent.get(app_id) != fingerprint:
                    out.append(item)
                    fingerprints[app_id] = fingerprint
        return out, fingerprints

    def tick(self) -> None:
        reports, fingerprints = self.outgoing_reports()
        body: JsonDict = {"clusterId": self.id, "knownVersion": self.version}
        if reports:
            body["reports"] = reports
        try:
            answer = self._call_control_plane(body)
        except BaseException:
            with self.lock:
                self.dirty.update(fingerprints)  # not acknowledged: send them again
            raise
        if reports:
            self.sent.update(fingerprints)
            self.report_seq += 1
        if not answer.get("unchanged"):
            self._new_desired({s["appId"]: s for s in answer.get("services", [])})
            with self.lock:
                self.desired_routes = list(answer.get("routes", []))
            self.version = int(answer["version"])
        self.converge_routes()
        adopting = self.adopt and bool(self.desired)
        self.converge()
        self.note_settled()
        if adopting:
            self._adopted_reports()
        with self.lock:
            quiet = not reports and not self.dirty and not self.full_reports
        if quiet:
            # Ready once every report is acknowledged: a sandbox that has just started
            # is quiet (its control-plane revision holds still) rather than settling.
            self.synced.set()

    def _new_desired(self, desired: dict[str, JsonDict]) -> None:
        """Take a new desired state; mark the reports it may have made stale.

        Only what can differ is said again (a promotion must not make every cluster
        resend every report: over an apply of n services that would be n x n): the apps
        whose desired entry changed, and those whose report may differ from the converged
        one a new seed writes for every cluster (``seeding.full_report``) -- the apps still
        converging or stuck, and every app while a fault changes the view.
        """
        view = self.view_faults()
        with self.lock:
            stale = {a for a, want in desired.items() if self.desired.get(a) != want}
            stale |= set(self.pending)
            stale |= {a for a, record in self.apps.items() if record.get("_stuckOn")}
            self.desired = desired
            self.full_converge = True
            for app_id in set(self.sent) - set(desired):
                del self.sent[app_id]
            if view != "-":
                self.full_reports = True
                self.sent.clear()
            for app_id in stale:
                self.sent.pop(app_id, None)
            self.dirty |= stale

    def _adopted_reports(self) -> None:
        """On a fresh seed the control plane already holds this cluster's reports:
        seeding wrote them as this reporter session (converged, no faults: the launcher
        clears them first, and starts an adopting cluster right after seeding, before any
        client can write). Count them as acknowledged instead of sending 10,000 copies."""
        view = self.view_faults()
        now = store.now_ms()
        with self.lock:
            for app_id, want in self.desired.items():
                item = self._report(app_id, want, now)
                if item is not None:
                    self.sent[app_id] = store.canonical(
                        {k: v for k, v in item["report"].items()
                         if k not in ("reportedAt", "reportSequence")})
            self.dirty.clear()
            self.full_reports = False
            self._view_faults = view

    def converge(self) -> None:
        now = time.monotonic()
        allow = self._allow()
        stuck = self.faults.get("stuck") is not None
        refuse = self.faults.get("refuse-digest")
        # One digest refused (the failed release), every other accepted: a rollback to
        # the previous digest converges here while a `stuck` cluster would refuse it too.
        refused = str(refuse.get("digest") or "") if refuse is not None else ""
        inputs = (store.canonical(allow), stuck, refused)
        touched: set[str] = set()
        visible = False
        snapshot = ""
        with self.lock:
            full = self.full_converge or inputs != self._inputs
            self.full_converge = False
            self._inputs = inputs
            if full:
                if self.desired:
                    for app_id in list(self.apps):
                        if not self._targets_me(self.desired.get(app_id, {}).get("plan")):
                            del self.apps[app_id]
                            self.pending.pop(app_id, None)
                            touched.add(app_id)
                            visible = True
                candidates = list(self.desired)
            else:
                # Nothing the targets depend on moved: only the apps now due can change.
                candidates = [a for a, (_, due) in self.pending.items() if due <= now]
            for app_id in candidates:
                want = self.desired.get(app_id)
                plan = want.get("plan") if want is not None else None
                if want is None or not self._targets_me(plan):
                    self.pending.pop(app_id, None)
                    continue
                assert plan is not None
                record = self.apps.get(app_id)
                blocked = (stuck or (bool(refused) and str(plan["requestedDigest"])
                                     .startswith(refused))) \
                    and record is not None and record["rolloutId"] != plan["rolloutId"]
                target = (plan["rolloutId"], want.get("egressRevision"), inputs[0], blocked)
                if record is not None and tuple(record.get("_applied", ())) == target:
                    self.pending.pop(app_id, None)
                    continue
                due = self.pending.get(app_id)
                if due is None or due[0] != target:
                    delay = 0.0 if (self.adopt and record is None) else self.delay_ms / 1000
                    self.pending[app_id] = (target, now + delay)
                    if record is not None and record["rolloutId"] != plan["rolloutId"] \
                            and not blocked and record["runtimeState"] != "DEPLOYING":
                        record["runtimeState"] = "DEPLOYING"
                        touched.add(app_id)
                        visible = True
                    due = self.pending[app_id]
                if due[1] > now:
                    continue
                del self.pending[app_id]
                new = self._apply(app_id, want, record, allow, blocked, target)
                visible = visible or _public(new) != _public(record)
                self.apps[app_id] = new
                touched.add(app_id)
            self.adopt = False
            if touched:
                self.dirty |= touched
                self._sorted_ids = None
                for app_id in touched:
                    self._encoded.pop(app_id, None)
                snapshot = json.dumps({"apps": self.apps}, sort_keys=True)
            if visible:
                self.revision += 1
        if touched:
            self._persist(snapshot)

    def note_settled(self) -> None:
        """Write what the last converge acted on -- the control plane's revision, the
        faults file's stamp as read, and whether an app or a route swap is still due --
        when it changed: a fault such as an egress allow-list is applied by the loop a
        delay later, and a test that set one waits (``Sandbox.wait_settled``) until every
        cluster has acted on it."""
        with self.lock:
            mark = json.dumps({"version": self.version, "faults": self.faults.seen(),
                               "pending": bool(self.pending) or self.routes_due is not None})
        if mark == self._settled_mark:
            return
        _write_state(self.dir / "settled.json", mark)
        self._settled_mark = mark

    def converge_routes(self) -> None:
        """Swap in the control plane's routes after this cluster's delay, all at once, as
        an ingress reloads its configuration. The ``route-stuck`` fault keeps the routes in
        effect now: the cluster goes on serving an old route (issue 21)."""
        snapshot = ""
        with self.lock:
            if self.desired_routes is None:
                return
            wanted = store.canonical(self.desired_routes)
            if wanted == store.canonical(self.route_table):
                self.routes_due = None
                return
            if self.faults.get("route-stuck") is not None:
                return
            now = time.monotonic()
            if self.routes_due is None or self.routes_due[0] != wanted:
                delay = 0.0 if self.adopt else self.delay_ms / 1000
                self.routes_due = (wanted, now + delay)
            if self.routes_due[1] > now:
                return
            self.route_table = list(self.desired_routes)
            self.routes_due = None
            self.revision += 1
            self._encoded.clear()
            snapshot = json.dumps({"routes": self.route_table}, sort_keys=True)
        _write_state(self.dir / "routes.json", snapshot)

    def routes_of(self, app_id: str) -> list[JsonDict]:
        """[ext] The routes in effect on this ingress that ``app_id`` owns (caller holds
        the lock): each ``{ownership, route}`` as the gateway applies it."""
        return [{"ownership": r["ownership"], "route": r["route"]} for r in self.route_table
                if r["ownership"]["appId"] == app_id]

    def _apply(self, app_id: str, want: JsonDict, record: JsonDict | None,
               allow: list[str] | None, blocked: bool, target: tuple[Any, ...]) -> JsonDict:
        plan = want["plan"]
        declared = want.get("egress") or []
        egress = [d for d in declared if _allowed(allow, d["host"], d["port"])]
        dropped = [d for d in declared if not _allowed(allow, d["host"], d["port"])]
        required = rollouts.NODES_PER_CLUSTER * rollouts.REPLICAS_PER_NODE
        if blocked and record is not None:
            # Seed 000: a stale build-attestation pins the previous digest, so this
            # cluster's deployer refuses the new image and keeps serving the old one.
            new = {**record}
            new["runtimeState"] = "RUNNING"
            new["lastError"] = (
                f"build-attestation digest MISMATCH: attestation pins {record['resolvedDigest']}"
                f" but rollout {plan['rolloutId']} requests {plan['requestedDigest']};"
                " deployer refused the image (stale attestation)")
            new["_stuckOn"] = plan["rolloutId"]
        else:
            same = record is not None and record.get("rolloutId") == plan["rolloutId"] \
                and record.get("resolvedDigest") == plan["requestedDigest"] \
                and not record.get("_stuckOn")
            new = {
                "serviceId": want["serviceId"],
                "image": plan["digestPinnedImageReference"],
                "runtimeState": "RUNNING",
                "replicas": required,
                "lastError": None,
                "resolvedDigest": plan["requestedDigest"],
                "rolloutId": plan["rolloutId"],
                "rolloutGeneration": plan["rolloutGeneration"],
                "replicaCounts": {"required": required, "observed": required,
                                  "healthy": required, "verified": required, "failed": 0},
                # [ext] a new rollout starts the clock; an egress change keeps it
                "_healthySince": record.get("_healthySince", store.now_ms())
                if same and record is not None else store.now_ms(),
            }
        new["egress"] = egress
        new["egressDropped"] = dropped
        new["_applied"] = list(target)
        return new

    def _persist(self, text: str) -> None:
        _write_state(self.dir / "runtime.json", text)

    def effective(self, app_id: str) -> JsonDict | None:
        """The runtime record as the status route shows it, faults applied."""
        record = self.apps.get(app_id)
        if record is None:
            return None
        view = {k: v for k, v in record.items() if not k.startswith("_") and k != "serviceId"}
        view["replicaCounts"] = dict(record["replicaCounts"])
        if self.faults.get("failed") is not None:
            required = view["replicaCounts"]["required"]
            view["runtimeState"] = "FAILED"
            view["lastError"] = ("container exited with code 137 (OOMKilled); "
                                 f"0/{required} replicas healthy, restarting in 30s")
            view["replicaCounts"].update(healthy=0, verified=0, failed=required)
        else:
            view["healthySince"] = max(int(record.get("_healthySince") or 0),
                                       self.recovered_at)
        if self.faults.get("ansi") is not None:
            view["lastError"] = ANSI_ERROR
        view["rolloutId"] = record.get("rolloutId")
        return view

    def status_body(self, app_id: str) -> JsonDict | None:
        """The per-app status reply (caller holds the lock); None without a record."""
        record = self.effective(app_id)
        if record is None:
            return None
        return {"appId": app_id, "state": "ACTIVE", "runtime": record,
                "routes": self.routes_of(app_id)}

    # -- the apps' own traffic (issue 34, sandbox.apps) ------------------------------

    def app_views(self) -> list[tuple[str, str, str, int]]:
        """Every app with a runtime record here: (appId, digest it serves, state, since
        when (ms) it serves that digest) -- what the synthetic load is counted for."""
        with self.lock:
            return [(app_id, str(record.get("resolvedDigest") or ""),
                     str(record.get("runtimeState") or ""),
                     int(record.get("_healthySince") or 0))
                    for app_id, record in self.apps.items()]

    def settle_traffic(self, *, scrape: bool = False) -> None:
        self.traffic.settle(self.app_views(), scrape=scrape)

    def metrics(self) -> bytes:
        """``/metrics``: the synthetic load counted up to now, then every series."""
        self.settle_traffic(scrape=True)
        running = [(app_id, digest) for app_id, digest, _, _ in self.app_views() if digest]
        return self.traffic.exposition(running)

    # -- [ext] batch status ---------------------------------------------------------

    def batch_served(self) -> bool:
        return self.batch_reads and self.faults.get("batch-route-missing") is None

    def page_etag(self, app_ids: list[str] | None, cursor: batch.Cursor, limit: int) -> str:
        """This cluster's runtime revision (caller holds the lock) plus the query. The
        incarnation makes a restarted cluster's ETags new; the view faults are part of
        what a reply shows."""
        query = batch.query_digest(app_ids, cursor.after, cursor.page, limit)
        return batch.strong(f"{self.incarnation}.{self.revision}.{self.view_faults()}.{query}")

    def status_page(self, app_ids: list[str] | None, cursor: batch.Cursor,
                    limit: int) -> bytes:
        """One page of the batch route as sent (caller holds the lock): only apps with a
        record, each ``status`` byte for byte the per-app route's body."""
        if app_ids is None:
            if self._sorted_ids is None:
                self._sorted_ids = sorted(self.apps)
            ids = self._sorted_ids
        else:
            ids = [a for a in app_ids if a in self.apps]
        page, following = batch.paginate(ids, cursor, limit)
        view = self.view_faults()
        if view != self._encoded_view:
            self._encoded.clear()
            self._encoded_view = view
        entries = []
        for app_id in page:
            encoded = self._encoded.get(app_id)
            if encoded is None:
                encoded = self._encoded[app_id] = _encode(self.status_body(app_id))
            entries.append(b'{"appId":' + _encode(app_id) + b',"status":'
                           + encoded + b"}")
        return (b'{"apps":[' + b",".join(entries) + b'],"nextCursor":'
                + _encode(following) + b"}")

    def loop(self) -> None:
        while True:
            with contextlib.suppress(OSError, http.client.HTTPException, ValueError, KeyError):
                self.tick()
            time.sleep(SYNC_INTERVAL_S)

    # -- auth -----------------------------------------------------------------------------

    def challenge(self, body: JsonDict) -> tuple[int, JsonDict]:
        chain, wallet, app_id = body.get("chain"), body.get("walletAddress"), body.get("appId")
        if chain != "ed25519":
            return 400, {"error": "unsupported chain"}
        if not isinstance(wallet, str) or wallet not in self.wallets:
            return 401, {"error": "unknown wallet"}
        if app_id != self.auth_app_id:
            return 400, {"error": "unknown appId"}
        challenge_id = "chl_" + secrets.token_hex(12)
        now = store.now_ms()
        message = (f"{self.gateway} asks {wallet} to sign in.\n"
                   f"Cluster: {self.id}\nApp: {app_id}\nChallenge: {challenge_id}\n"
                   f"Nonce: {secrets.token_hex(16)}\nIssued At: {now}")
        with self.lock:
            self.challenges = {k: v for k, v in self.challenges.items() if v["expiresAt"] > now}
            self.challenges[challenge_id] = {"wallet": wallet, "message": message,
                                             "expiresAt": now + CHALLENGE_TTL_MS}
        return 200, {"challengeId": challenge_id, "message": message,
                     "expiresAt": now + CHALLENGE_TTL_MS}

    def verify(self, body: JsonDict) -> tuple[int, JsonDict]:
        challenge_id, signature, public_key = (
            body.get("challengeId"), body.get("signature"), body.get("publicKey"))
        if not all(isinstance(v, str) for v in (challenge_id, signature, public_key)):
            return 400, {"error": "challengeId, signature and publicKey are required"}
        with self.lock:
            # Single use: the challenge is gone whether or not the signature holds.
            entry = self.challenges.pop(str(challenge_id), None)
        if entry is None or entry["expiresAt"] <= store.now_ms():
            return 401, {"error": "unknown or expired challenge"}
        if str(public_key).lower() != self.wallets[entry["wallet"]]:
            return 401, {"error": "public key is not registered for this wallet"}
        try:
            Ed25519PublicKey.from_public_bytes(bytes.fromhex(str(public_key))).verify(
                bytes.fromhex(str(signature)), entry["message"].encode("utf-8"))
        except (ValueError, InvalidSignature):
            return 401, {"error": "signature does not verify"}
        token = f"{self.id}.{secrets.token_urlsafe(24)}"
        expires_at = store.now_ms() + self.token_ttl_ms
        with self.lock:
            self.tokens[token] = {"expiresAt": expires_at, "used": False}
        return 200, {"token": token, "expiresAt": expires_at}

    def authorised(self, header: str | None) -> bool:
        if not header or not header.startswith("Bearer "):
            return False
        token = header[len("Bearer "):].strip()
        with self.lock:
            entry = self.tokens.get(token)
            if entry is None or entry["expiresAt"] <= store.now_ms():
                return False
            reused = entry["used"]
            entry["used"] = True
        return not (reused and self.faults.get("reauth") is not None)

    def health(self) -> JsonDict:
        reply: JsonDict = {"clusterId": self.id,
                           "gateway": {"hostname": self.gateway, "status": "ok"},
                           "validator": {"status": "ok"},
                           "host": {"address": self.address, "port": self.port},
                           "lastChecked": store.now_ms()}
        if self.batch_reads:
            # Advertised even under the batch-route-missing fault: that fault is a
            # cluster that says it has the route and then does not.
            reply["extensions"] = {"batchStatus": batch.BATCH_STATUS_PATH}
        return reply


class Handler(serving.JsonHandler):
    server: ClusterServer

    def _reply(self, status: int, value: object, raw: bytes | None = None,
               etag: str | None = None, encoded: bytes | None = None,
               headers: dict[str, str] | None = None) -> None:
        cluster = self.server.cluster
        trickle = cluster.faults.get("trickle")
        trickle_ms = faults.param_int(trickle, "ms", 20) if trickle is not None else 0
        result = "ok" if status < 400 else str(status)
        path = self.path.split("?")[0]
        extra = {**(headers or {}), **({"ETag": etag} if etag is not None else {})} or None
        if status == 304:
            # No body, so no Content-Length either (RFC 9110 §15.4.5).
            result = "not-modified"
            self.send_response(304)
            self.send_header("ETag", etag or "")
            self.end_headers()
        elif raw is not None:
            result = "fault"
            self.send_raw(status, raw, trickle_ms=trickle_ms)
        elif encoded is not None:
            self.send_raw(status, encoded, trickle_ms=trickle_ms, extra=extra)
        else:
            self.send_json(status, value, trickle_ms=trickle_ms, extra=extra)
        cluster.audit(self.command, path, status, result)

    def _host(self) -> str:
        host = self.headers.get("Host") or ""
        return host.rsplit(":", 1)[0] if ":" in host else host

    def _prelude(self, *, check_host: bool = True) -> bool:
        cluster = self.server.cluster
        if cluster.faults.get("down") is not None:
            cluster.audit(self.command, self.path, 0, "down")
            self.close_connection = True
            return False
        for kind, default in (("latency", 0), ("slow", 3000)):
            params = cluster.faults.get(kind)
            if params is not None:
                time.sleep(faults.param_int(params, "ms", default) / 1000)
        if check_host and self._host() != cluster.gateway:
            self._misdirected()
            return False
        return True

    def _misdirected(self) -> None:
        self._reply(421, {"error": f"this ingress serves {self.server.cluster.gateway}"})

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        cluster = self.server.cluster
        path = self.path.partition("?")[0]
        if path == apps.METRICS_PATH:
            # Any Host: Prometheus sends the target's address (sandbox.apps).
            if self._prelude(check_host=False):
                self._metrics()
            return
        if self._host() != cluster.gateway:
            if not self._prelude(check_host=False):
                return
            with cluster.lock:
                known, app_id = apps.route_target(cluster.route_table, self._host(), path)
            if not known:
                self._misdirected()
            elif app_id is None:
                self._reply(404, {"error": f"no route for {self._host()} {path} on cluster "
                                  f"{cluster.id}", "cluster": cluster.id})
            else:
                self._app(app_id, path)
            return
        if not self._prelude():
            return
        direct = apps.direct_target(path)
        if direct is not None:
            self._app(direct, path)
            return
        cluster.note_gaps()
        path, _, query = self.path.partition("?")
        if path == HEALTH_PATH:
            self._reply(200, cluster.health())
            return
        if path == batch.BATCH_STATUS_PATH and cluster.batch_served():
            self._batch_status(query)
            return
        match = STATUS_RE.match(path)
        if match is None:
            self._reply(404, {"error": "Not found"})
            return
        if not cluster.authorised(self.headers.get("Authorization")):
            self._reply(401, {"error": "Unauthorized"})
            return
        app_id = match.group(1)
        with cluster.lock:
            body = cluster.status_body(app_id)
        if body is None:
            self._reply(404, {"error": f"no runtime record for {app_id}"})
            return
        encoded = _encode(body)
        if not self._body_fault(encoded):
            self._reply(200, None, encoded=encoded)

    def _metrics(self) -> None:
        cluster = self.server.cluster
        expected = cluster.metrics_token
        given = self.headers.get("Authorization") or ""
        if expected is None or not secrets.compare_digest(
                given.encode("utf-8"), f"Bearer {expected}".encode()):
            self._reply(401, {"error": "Unauthorized: /metrics wants the Bearer token of "
                              "<state>/metrics-token"})
            return
        body = cluster.metrics()
        self.send_raw(200, body, content_type=apps.CONTENT_TYPE)
        cluster.audit(self.command, apps.METRICS_PATH, 200, "ok")

    def _app(self, app_id: str, path: str) -> None:
        """One real request to ``app_id`` (sandbox.apps): answered, then counted."""
        cluster = self.server.cluster
        began = time.monotonic()
        with cluster.lock:
            view = cluster.effective(app_id)
        answer = cluster.traffic.answer(app_id, view, path)
        if answer.delay_s > 0:
            time.sleep(answer.delay_s)
        self._reply(answer.status, answer.body, headers=answer.headers)
        if answer.digest is not None:
            cluster.traffic.observe(app_id, answer.digest, answer.status,
                                    time.monotonic() - began)

    def _body_fault(self, encoded: bytes) -> bool:
        """The garbage / truncated faults: True when one of them answered instead."""
        cluster = self.server.cluster
        if cluster.faults.get("garbage") is not None:
            self._reply(200, None, raw=b"<html><body>502 Bad Gateway</body></html>{{\x00")
            return True
        if cluster.faults.get("truncated") is not None:
            self._reply(200, None, raw=encoded[: len(encoded) // 2])
            return True
        return False

    def _batch_status(self, query: str) -> None:
        """[ext] ``GET .../apps/status?appIds=a,b&cursor=&limit=`` (docs/extensions.md §1)."""
        cluster = self.server.cluster
        if not cluster.authorised(self.headers.get("Authorization")):
            self._reply(401, {"error": "Unauthorized"})
            return
        params = urllib.parse.parse_qs(query, keep_blank_values=True)
        try:
            cursor = batch.decode_cursor(params["cursor"][-1] if "cursor" in params else None)
            limit = batch.page_size(params["limit"][-1] if "limit" in params else None)
        except batch.PageRequestError as exc:
            self._reply(400, {"error": str(exc)})
            return
        app_ids = None if "appIds" not in params else sorted(
            {a for value in params["appIds"] for a in value.split(",") if a})
        failing = cluster.faults.get("batch-page-error")
        if failing is not None and faults.param_int(failing, "page", 0) == cursor.page:
            self._reply(500, {"error": f"internal error while reading page {cursor.page}"})
            return
        # A garbage or truncated fault breaks every page, conditional or not.
        broken = any(cluster.faults.get(k) is not None for k in ("garbage", "truncated"))
        with cluster.lock:
            etag = cluster.page_etag(app_ids, cursor, limit)
            hit = not broken and batch.none_match_hits(self.headers.get("If-None-Match"), etag)
            body = None if hit else cluster.status_page(app_ids, cursor, limit)
        if body is None:
            self._reply(304, None, etag=etag)
        elif not self._body_fault(body):
            self._reply(200, None, etag=etag, encoded=body)

    def do_POST(self) -> None:
        raw = self.read_body()
        if not self._prelude():
            return
        cluster = self.server.cluster
        path = self.path.split("?")[0]
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self._reply(400, {"error": "Invalid request"})
            return
        if path == CHALLENGE_PATH:
            self._reply(*cluster.challenge(body))
        elif path == VERIFY_PATH:
            self._reply(*cluster.verify(body))
        else:
            self._reply(404, {"error": "Not found"})


class ClusterServer(serving.TLSServer):
    cluster: Cluster

    def before_tls(self, request: socket.socket) -> bool:
        view = self.cluster.faults
        if view.get("down") is not None:
            request.close()
            return False
        if view.get("blackhole") is not None:
            # Accept and never answer; hold the connection until the fault is lifted.
            deadline = time.monotonic() + 600
            while view.get("blackhole") is not None and time.monotonic() < deadline:
                time.sleep(0.1)
            request.close()
            return False
        return True


def _serve(server: ClusterServer) -> None:
    server.serve_forever(poll_interval=0.1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="reconciler.sandbox.cluster", allow_abbrev=False)
    parser.add_argument("--state", type=Path, required=True)
    parser.add_argument("--id", required=True)
    parser.add_argument("--address", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--fd", type=int, default=-1)
    parser.add_argument("--gateway", default="gateway.sandbox.test")
    parser.add_argument("--control-plane", required=True, help="HOST:PORT")
    parser.add_argument("--delay-ms", type=int, default=300)
    parser.add_argument("--token-ttl-ms", type=int, default=900_000)
    parser.add_argument("--wallet", default="rReconcileDeployBot")
    parser.add_argument("--auth-app-id", default="reconcile")
    parser.add_argument("--adopt", action="store_true",
                        help="take the control plane's rollouts as converged on first sync")
    parser.add_argument("--no-batch-reads", dest="batch_reads", action="store_false",
                        help="no [ext] batch status route (as on the real upstream)")
    parser.add_argument("--parent-fd", type=int, default=-1)
    args = parser.parse_args(argv)
    serving.install_term_handler()
    serving.die_with_parent(args.parent_fd)
    cluster = Cluster(args)
    context = serving.server_context(args.state / pki.GATEWAY_CERT, args.state / pki.GATEWAY_KEY)
    sock = (socket.socket(fileno=args.fd) if args.fd >= 0
            else serving.listen_socket(args.address, args.port))
    server = ClusterServer(sock, Handler, context)
    server.cluster = cluster
    threading.Thread(target=cluster.loop, name="deployer", daemon=True).start()
    serving_thread = threading.Thread(target=_serve, args=(server,), daemon=True)
    serving_thread.start()
    cluster.synced.wait(timeout=10)
    serving.say_ready(f"{args.address}:{args.port}")
    listening = True
    while True:
        cluster.note_gaps()
        if cluster.traffic.faults_changed():
            # Count the load so far with the faults it ran under (sandbox.apps).
            cluster.settle_traffic()
        down = cluster.faults.get("down") is not None
        if down and listening:
            server.shutdown()
            serving_thread.join()
            server.socket.close()
            listening = False
        elif not down and not listening:
            try:
                server.socket = serving.listen_socket(args.address, args.port)
            except OSError:
                time.sleep(0.1)
                continue
            serving_thread = threading.Thread(target=_serve, args=(server,), daemon=True)
            serving_thread.start()
            listening = True
        time.sleep(0.05)


if __name__ == "__main__":
    raise SystemExit(main())
