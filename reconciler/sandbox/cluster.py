"""One sandbox cluster: its own HTTPS ingress, auth, runtime records and deployer loop.

Owns CONTRACT.md §2 for one cluster: ``GET /api/v3/cluster/health`` (names the cluster),
the per-cluster Ed25519 challenge/verify handshake (single-use challenges, tokens valid on
this cluster only, with expiry), ``GET /host/api/v3/baas/deployment/apps/{appId}/status``
(Bearer; 404 without a runtime record), the cluster faults on the wire, and the deployer:
a loop that pulls the desired rollouts and egress from the control plane, converges after
this cluster's delay (asynchronously: the control plane never waits for it), filters egress
through the operator allow-list, and reports per-reporter rollout status back.

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
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from reconciler.sandbox import controlplane, faults, pki, rollouts, serving, store

JsonDict = dict[str, Any]

HEALTH_PATH = "/api/v3/cluster/health"
CHALLENGE_PATH = "/host/api/v3/baas/auth/challenge"
VERIFY_PATH = "/host/api/v3/baas/auth/verify"
STATUS_RE = re.compile(r"^/host/api/v3/baas/deployment/apps/([^/?]+)/status$")
CHALLENGE_TTL_MS = 120_000
SYNC_INTERVAL_S = 0.1
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


def read_runtime(state_dir: Path, cluster_id: str) -> dict[str, JsonDict]:
    try:
        data = json.loads((cluster_dir(state_dir, cluster_id) / "runtime.json").read_text(
            encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return {}
    return dict(data.get("apps", {}))


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
        self.cp_host, self.cp_port = args.control_plane.rsplit(":", 1)
        self.secret = (self.state_dir / controlplane.SECRET_FILE).read_text().strip()
        self.wallets = {args.wallet: (self.state_dir / pki.SIGNER_PUB_FILE).read_text().strip()}
        self.auth_app_id: str = args.auth_app_id
        self.session = f"{self.id}-{secrets.token_hex(4)}"
        self.faults = faults.FaultView(self.state_dir, self.id)
        self.lock = threading.Lock()
        self.audit_lock = threading.Lock()
        self.challenges: dict[str, JsonDict] = {}
        self.tokens: dict[str, JsonDict] = {}
        self.apps: dict[str, JsonDict] = read_runtime(self.state_dir, self.id)
        self.desired: dict[str, JsonDict] = {}
        self.pending: dict[str, tuple[tuple[Any, ...], float]] = {}
        self.version: int | None = None
        self.acked_reports: str = ""
        self.last_report_at = 0.0
        self.report_seq = 0
        self.synced = threading.Event()
        self._cp_ctx = serving.client_context(self.state_dir / pki.CA_FILE)
        self._cp: http.client.HTTPSConnection | None = None

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
                    self.cp_host, int(self.cp_port), context=self._cp_ctx, timeout=5)
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

    def reports(self) -> list[JsonDict]:
        out: list[JsonDict] = []
        now = store.now_ms()
        with self.lock:
            for app_id, want in self.desired.items():
                plan = want.get("plan")
                if not self._targets_me(plan):
                    continue
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
                out.append({"serviceId": want["serviceId"], "report": report})
        return out

    def tick(self) -> None:
        reports = self.reports()
        fingerprint = store.canonical([
            {**r, "report": {k: v for k, v in r["report"].items()
                             if k not in ("reportedAt", "reportSequence")}} for r in reports])
        body: JsonDict = {"clusterId": self.id, "knownVersion": self.version}
        resend = time.monotonic() - self.last_report_at > 2.0
        if fingerprint != self.acked_reports or resend:
            body["reports"] = reports
        answer = self._call_control_plane(body)
        if "reports" in body:
            self.acked_reports = fingerprint
            self.last_report_at = time.monotonic()
            self.report_seq += 1
        if not answer.get("unchanged"):
            with self.lock:
                self.desired = {s["appId"]: s for s in answer.get("services", [])}
            self.version = int(answer["version"])
        self.converge()
        self.synced.set()

    def converge(self) -> None:
        now = time.monotonic()
        allow = self._allow()
        stuck = self.faults.get("stuck") is not None
        changed = False
        with self.lock:
            for app_id in list(self.apps):
                if not self._targets_me(self.desired.get(app_id, {}).get("plan")) and self.desired:
                    del self.apps[app_id]
                    self.pending.pop(app_id, None)
                    changed = True
            for app_id, want in self.desired.items():
                plan = want.get("plan")
                if not self._targets_me(plan):
                    continue
                assert plan is not None
                record = self.apps.get(app_id)
                blocked = stuck and record is not None and record["rolloutId"] != plan["rolloutId"]
                target = (plan["rolloutId"], want.get("egressRevision"), store.canonical(allow),
                          blocked)
                if record is not None and tuple(record.get("_applied", ())) == target:
                    continue
                due = self.pending.get(app_id)
                if due is None or due[0] != target:
                    delay = 0.0 if (self.adopt and record is None) else self.delay_ms / 1000
                    self.pending[app_id] = (target, now + delay)
                    if record is not None and record["rolloutId"] != plan["rolloutId"] \
                            and not blocked:
                        record["runtimeState"] = "DEPLOYING"
                        changed = True
                    due = self.pending[app_id]
                if due[1] > now:
                    continue
                del self.pending[app_id]
                self.apps[app_id] = self._apply(app_id, want, record, allow, blocked, target)
                changed = True
        self.adopt = False
        if changed:
            self._persist()

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
            }
        new["egress"] = egress
        new["egressDropped"] = dropped
        new["_applied"] = list(target)
        return new

    def _persist(self) -> None:
        path = self.dir / "runtime.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"apps": self.apps}, sort_keys=True), encoding="utf-8")
        tmp.replace(path)

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
        if self.faults.get("ansi") is not None:
            view["lastError"] = ANSI_ERROR
        view["rolloutId"] = record.get("rolloutId")
        return view

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
        return {"clusterId": self.id,
                "gateway": {"hostname": self.gateway, "status": "ok"},
                "validator": {"status": "ok"},
                "host": {"address": self.address, "port": self.port},
                "lastChecked": store.now_ms()}


class Handler(serving.JsonHandler):
    server: ClusterServer

    def _reply(self, status: int, value: object, raw: bytes | None = None) -> None:
        cluster = self.server.cluster
        trickle = cluster.faults.get("trickle")
        trickle_ms = faults.param_int(trickle, "ms", 20) if trickle is not None else 0
        result = "ok" if status < 400 else str(status)
        path = self.path.split("?")[0]
        if raw is not None:
            result = "fault"
            self.send_raw(status, raw, trickle_ms=trickle_ms)
        else:
            self.send_json(status, value, trickle_ms=trickle_ms)
        cluster.audit(self.command, path, status, result)

    def _prelude(self) -> bool:
        cluster = self.server.cluster
        if cluster.faults.get("down") is not None:
            cluster.audit(self.command, self.path, 0, "down")
            self.close_connection = True
            return False
        for kind, default in (("latency", 0), ("slow", 3000)):
            params = cluster.faults.get(kind)
            if params is not None:
                time.sleep(faults.param_int(params, "ms", default) / 1000)
        host = (self.headers.get("Host") or "").rsplit(":", 1)[0] if ":" in (
            self.headers.get("Host") or "") else (self.headers.get("Host") or "")
        if host != cluster.gateway:
            self._reply(421, {"error": f"this ingress serves {cluster.gateway}"})
            return False
        return True

    def do_GET(self) -> None:
        if not self._prelude():
            return
        cluster = self.server.cluster
        path = self.path.split("?")[0]
        if path == HEALTH_PATH:
            self._reply(200, cluster.health())
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
            record = cluster.effective(app_id)
        if record is None:
            self._reply(404, {"error": f"no runtime record for {app_id}"})
            return
        body = {"appId": app_id, "state": "ACTIVE", "runtime": record}
        if cluster.faults.get("garbage") is not None:
            self._reply(200, None, raw=b"<html><body>502 Bad Gateway</body></html>{{\x00")
            return
        if cluster.faults.get("truncated") is not None:
            text = json.dumps(body).encode("utf-8")
            self._reply(200, None, raw=text[: len(text) // 2])
            return
        self._reply(200, body)

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
    parser = argparse.ArgumentParser(prog="reconciler.sandbox.cluster")
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
