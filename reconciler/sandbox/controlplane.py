"""The sandbox control plane: TypedRequest over HTTPS, CONTRACT.md §1, one process.

Owns the envelope (correlation echo, ``error {text, data: {code}}``, ``retry``, the
unknown-method text, body ``null`` without a correlation, HTTP 400 for non-JSON), every
§1.2 method and every §1.3 rule (compare-and-swap, idempotency keys, promotion and
rollback transitions, grants, egress, identities with expiry, FORBIDDEN), the audit row of
every request, the control-plane faults, and one internal route the clusters use
(``POST /sandbox/internal/sync``: report rollout status, fetch the desired rollouts and
egress), kept apart from the contract's methods and guarded by a shared secret. The
greenfield preflight and the [ext] creation are ``greenfield``'s (``--no-greenfield``
leaves the creation out of the table); the [ext] batch reads are ``batchreads``'; the
gateway route requests are ``gateway``'s (the clusters pull the routes with their rollouts).

Each request runs in one ``BEGIN IMMEDIATE`` transaction (see ``store``). Must not reach
into the clusters: they pull from here.

Run: ``python -m reconciler.sandbox.controlplane --state DIR --fd N`` (the launcher does).
"""

from __future__ import annotations

import argparse
import contextlib
import hmac
import json
import secrets
import socket
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reconciler.sandbox import (
    batchreads,
    faults,
    gateway,
    greenfield,
    pki,
    rollouts,
    serving,
    store,
)

JsonDict = dict[str, Any]

UNKNOWN_METHOD_TEXT = "There is no available method for this call on the server side"
CAPABILITIES = frozenset({"deployment:preflight", "deployment:create-greenfield",
                          "deployment:promote-route", "deployment:rollback-route"})
SECRET_FILE = "cluster-secret"
#: Audited request fields (never the identity, a token or a jwt).
AUDIT_KEYS = ("serviceId", "releaseId", "idempotencyKey", "expectedRolloutGeneration",
              "expectedCurrentRolloutId", "expectedEgressRevision", "userId", "capabilities",
              "egress", "requestId", "operationId", "ownership", "delete")
IDEMPOTENCY_TTL_MS = 7 * 86_400_000


class DomainError(Exception):
    """A §1.3 failure: becomes ``error: {text, data: {code, ...}}``."""

    def __init__(self, code: str, text: str, **data: Any) -> None:
        super().__init__(text)
        self.code = code
        self.text = text
        self.data = data


def _require_str(req: JsonDict, key: str) -> str:
    value = req.get(key)
    if not isinstance(value, str) or not value or len(value) > 500:
        raise DomainError("INVALID_REQUEST", f"{key} must be a non-empty string", field=key)
    return value


def _require_int(req: JsonDict, key: str) -> int:
    value = req.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise DomainError("INVALID_REQUEST", f"{key} must be a non-negative integer", field=key)
    return value


class Caller:
    def __init__(self, user_id: str, role: str) -> None:
        self.user_id = user_id
        self.role = role

    @property
    def admin(self) -> bool:
        return self.role == "admin"


class ControlPlane:
    """The methods, over a per-thread SQLite connection."""

    def __init__(self, state_dir: Path, *, identity_ttl_ms: int,
                 batch_reads: bool = True, greenfield_execution: bool = True) -> None:
        self.state_dir = state_dir
        self.identity_ttl_ms = identity_ttl_ms
        self.faults = faults.FaultView(state_dir, faults.CONTROL_PLANE)
        self.secret = (state_dir / SECRET_FILE).read_text(encoding="utf-8").strip()
        self._local = threading.local()
        #: jwt -> the token it was exchanged for, kept only while ``echo-secrets`` is on
        #: (the store keeps hashes): what that fault echoes back to the caller.
        self._echoed_tokens: dict[str, str] = {}
        # Issue 12: the preflight, and the [ext] creation unless switched off.
        self.creations = greenfield.Greenfield(self, DomainError, enabled=greenfield_execution)
        # Issue 21: the seed's gateway route requests.
        self.gateway = gateway.Gateway(self, DomainError)
        self.methods: dict[str, Callable[[sqlite3.Connection, JsonDict], JsonDict]] = {
            "getIdentityByToken": self.get_identity_by_token,
            "getServiceById": self.get_service_by_id,
            "getServices": self.get_services,
            "getServiceImageReleases": self.get_service_image_releases,
            "promoteServiceImageRelease": self.promote,
            "rollbackServiceImageRelease": self.rollback,
            "getDeploymentPreflight": self.creations.preflight,
            "configureServiceDeploymentMachineUser": self.configure_grant,
            "getServiceDeploymentGrants": self.get_grants,
            "setServiceEgress": self.set_egress,
            "getCapabilities": self.get_capabilities,
            **self.creations.methods(),
            **self.gateway.methods(),
        }
        # [ext] issue 13: getServicesReleases and the etag of the fleet reads, or neither.
        self.methods = batchreads.with_batch_reads(
            self.methods, caller=self.caller, error=DomainError, enabled=batch_reads,
            with_status=self.with_status, connect=self.conn)

    def conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = store.connect(self.state_dir)
            self._local.conn = conn
        return conn

    # -- identity and authorization -------------------------------------------------

    def caller(self, conn: sqlite3.Connection, req: JsonDict) -> Caller:
        identity = req.get("identity")
        jwt = identity.get("jwt") if isinstance(identity, dict) else None
        if not isinstance(jwt, str) or not jwt:
            raise DomainError("UNAUTHORIZED", "identity with a jwt is required")
        row = conn.execute(
            "SELECT s.user_id, s.expires_at, u.role FROM sessions s "
            "JOIN users u ON u.user_id = s.user_id WHERE s.jwt_hash = ?",
            (store.sha256_hex(jwt),)).fetchone()
        if row is None:
            raise DomainError("UNAUTHORIZED", "identity is not known")
        if int(row[1]) <= store.now_ms():
            raise DomainError("UNAUTHORIZED", "identity has expired", expiredAt=int(row[1]))
        return Caller(str(row[0]), str(row[2]))

    def require(self, conn: sqlite3.Connection, caller: Caller, service_id: str,
                capability: str | None) -> None:
        if caller.admin:
            return
        if capability is None or capability not in store.capabilities(
                conn, caller.user_id, service_id):
            needed = capability or "role admin"
            raise DomainError("FORBIDDEN", f"{caller.user_id} lacks {needed} on {service_id}",
                              capability=needed, serviceId=service_id)

    def service(self, conn: sqlite3.Connection, service_id: str) -> JsonDict:
        service = store.load_service(conn, service_id)
        if service is None:
            raise DomainError("SERVICE_NOT_FOUND", f"service {service_id} does not exist",
                              serviceId=service_id)
        return service

    def with_status(self, conn: sqlite3.Connection, service: JsonDict) -> JsonDict:
        plan = service["data"].get("imageDeployment")
        if plan is not None:
            reports = store.load_reports(conn, service["id"])
            service["data"]["imageRolloutStatus"] = rollouts.aggregate(plan, reports)
        return service

    # -- idempotency ------------------------------------------------------------------

    def replay(self, conn: sqlite3.Connection, method: str, req: JsonDict,
               key: str) -> tuple[str, JsonDict | None]:
        payload = {k: v for k, v in req.items() if k != "identity"}
        digest = store.sha256_hex(method + "\n" + store.canonical(payload))
        row = conn.execute("SELECT method, payload_hash, response, created_at FROM idempotency "
                           "WHERE key = ?", (key,)).fetchone()
        if row is None or int(row[3]) < store.now_ms() - IDEMPOTENCY_TTL_MS:
            return digest, None
        if row[0] != method or row[1] != digest:
            raise DomainError("IDEMPOTENCY_KEY_REUSED",
                              "idempotencyKey was used with a different payload",
                              idempotencyKey=key)
        return digest, dict(json.loads(row[2]))

    def remember(self, conn: sqlite3.Connection, method: str, key: str, digest: str,
                 response: JsonDict) -> None:
        conn.execute("INSERT OR REPLACE INTO idempotency "
                     "(key, method, payload_hash, response, created_at) VALUES (?, ?, ?, ?, ?)",
                     (key, method, digest, store.canonical(response), store.now_ms()))

    # -- methods ----------------------------------------------------------------------

    def get_identity_by_token(self, conn: sqlite3.Connection, req: JsonDict) -> JsonDict:
        token = req.get("token")
        if not isinstance(token, str) or not token:
            raise DomainError("UNAUTHORIZED", "token is required")
        row = conn.execute("SELECT u.user_id, u.name, u.type, u.role FROM tokens t "
                           "JOIN users u ON u.user_id = t.user_id WHERE t.token_hash = ?",
                           (store.sha256_hex(token),)).fetchone()
        if row is None:
            raise DomainError("UNAUTHORIZED", "token is not valid")
        jwt = "sbxjwt." + secrets.token_hex(32)
        expires_at = store.now_ms() + self.identity_ttl_ms
        conn.execute("INSERT INTO sessions (jwt_hash, user_id, expires_at) VALUES (?, ?, ?)",
                     (store.sha256_hex(jwt), row[0], expires_at))
        conn.execute("DELETE FROM sessions WHERE expires_at < ?",
                     (store.now_ms() - 86_400_000,))
        if self.faults.get("echo-secrets") is not None:
            self._echoed_tokens[jwt] = token
        return {"identity": {"name": row[1], "userId": row[0], "type": row[2], "role": row[3],
                             "expiresAt": expires_at, "jwt": jwt}}

    def echo_secrets(self, response: JsonDict, req: JsonDict) -> JsonDict:
        """The ``echo-secrets`` fault: every service in a successful reply carries a rollout
        status ``failed`` whose ``mismatchReason`` quotes the caller's token and session
        jwt, as a careless deployer's debug message would. Applied to the reply only (after
        the idempotency record is kept), so a replay echoes the replaying caller's."""
        identity = req.get("identity")
        jwt = identity.get("jwt") if isinstance(identity, dict) else None
        if not isinstance(jwt, str):
            return response
        token = self._echoed_tokens.get(jwt, "<unknown token>")
        reason = f"deployer debug: authorization token={token} session={jwt} rejected the image"

        def echo(service: Any) -> Any:
            if isinstance(service, dict) and isinstance(service.get("data"), dict) \
                    and isinstance(service["data"].get("imageRolloutStatus"), dict):
                data = dict(service["data"])
                data["imageRolloutStatus"] = {**data["imageRolloutStatus"], "status": "failed",
                                              "mismatchReason": reason}
                return {**service, "data": data}
            return service

        out = dict(response)
        if "service" in out:
            out["service"] = echo(out["service"])
        if isinstance(out.get("services"), list):
            out["services"] = [echo(s) for s in out["services"]]
        return out

    def get_capabilities(self, conn: sqlite3.Connection, req: JsonDict) -> JsonDict:
        """[ext] Every method this control plane answers, read from the handler table, so a
        method switched off (``--no-greenfield``, ``--no-batch-reads``) is never listed."""
        self.caller(conn, req)
        return {"methods": sorted(self.methods)}

    def get_service_by_id(self, conn: sqlite3.Connection, req: JsonDict) -> JsonDict:
        self.caller(conn, req)
        service = self.service(conn, _require_str(req, "serviceId"))
        return {"service": self.with_status(conn, service)}

    def get_services(self, conn: sqlite3.Connection, req: JsonDict) -> JsonDict:
        self.caller(conn, req)
        return {"services": [self.with_status(conn, s) for s in store.all_services(conn)]}

    def get_service_image_releases(self, conn: sqlite3.Connection, req: JsonDict) -> JsonDict:
        self.caller(conn, req)
        service = self.service(conn, _require_str(req, "serviceId"))
        return {"releases": store.load_releases(conn, service["id"])}

    def _cas(self, plan: JsonDict | None, req: JsonDict, *, id_required: bool) -> None:
        actual_generation = int(plan["rolloutGeneration"]) if plan else 0
        expected_generation = _require_int(req, "expectedRolloutGeneration")
        if expected_generation != actual_generation:
            raise DomainError("ROLLOUT_GENERATION_MISMATCH",
                              f"rollout generation is {actual_generation}, "
                              f"not {expected_generation}",
                              expected=expected_generation, actual=actual_generation)
        if id_required or req.get("expectedCurrentRolloutId") is not None:
            expected_id = _require_str(req, "expectedCurrentRolloutId")
            actual_id = plan["rolloutId"] if plan else None
            if expected_id != actual_id:
                raise DomainError("ROLLOUT_ID_MISMATCH",
                                  f"current rollout is {actual_id}, not {expected_id}",
                                  expected=expected_id, actual=actual_id)

    def _roll(self, conn: sqlite3.Connection, req: JsonDict, *, rollback: bool) -> JsonDict:
        method = "rollbackServiceImageRelease" if rollback else "promoteServiceImageRelease"
        service_id = _require_str(req, "serviceId")
        release_id = _require_str(req, "releaseId")
        key = _require_str(req, "idempotencyKey")
        _require_int(req, "expectedRolloutGeneration")
        if rollback:
            _require_str(req, "expectedCurrentRolloutId")
        elif req.get("enableImmutableImage") is not True:
            raise DomainError("INVALID_REQUEST", "enableImmutableImage must be true",
                              field="enableImmutableImage")
        caller = self.caller(conn, req)
        self.require(conn, caller, service_id,
                     "deployment:rollback-route" if rollback else "deployment:promote-route")
        service = self.service(conn, service_id)
        digest, previous = self.replay(conn, method, req, key)
        if previous is not None:
            # [ext] says the reply is the first call's, replayed: nothing changed now.
            return {**previous, "idempotentReplay": True}
        release = store.load_release(conn, release_id)
        if release is None or release["data"]["serviceId"] != service_id:
            raise DomainError("RELEASE_NOT_FOUND",
                              f"release {release_id} is not a release of {service_id}",
                              releaseId=release_id)
        plan: JsonDict | None = service["data"].get("imageDeployment")
        self._cas(plan, req, id_required=rollback)
        self.creations.refresh_service(conn, service_id)
        now = store.now_ms()
        if rollback and not release["data"].get("acceptedAt"):
            raise DomainError("ROLLBACK_TARGET_NOT_ACCEPTED",
                              f"release {release_id} was never accepted", releaseId=release_id)
        generation = (int(plan["rolloutGeneration"]) if plan else 0) + 1
        new_plan = rollouts.new_plan(
            release=release, rollout_id=f"rollout-{secrets.token_hex(8)}",
            generation=generation, created_at=now,
            mode="rollback" if rollback else "promotion", clusters=store.clusters(conn),
            rollback_of=plan["rolloutId"] if (rollback and plan) else None)
        if not rollback:
            data = release["data"]
            data.setdefault("acceptedAt", now)
            data["lastPromotedAt"] = now
            data["promotionCount"] = int(data.get("promotionCount", 0)) + 1
            store.save_release(conn, release)
        service["data"]["imageDeployment"] = new_plan
        service["data"]["immutableImageRequired"] = True
        tags = release["data"].get("observedTags") or []
        service["data"]["imageVersion"] = tags[0] if tags else release["data"]["registryRootDigest"]
        store.save_service(conn, service)
        store.bump_version(conn)
        response = {"service": self.with_status(conn, service)}
        self.remember(conn, method, key, digest, response)
        return response

    def promote(self, conn: sqlite3.Connection, req: JsonDict) -> JsonDict:
        return self._roll(conn, req, rollback=False)

    def rollback(self, conn: sqlite3.Connection, req: JsonDict) -> JsonDict:
        return self._roll(conn, req, rollback=True)

    def configure_grant(self, conn: sqlite3.Connection, req: JsonDict) -> JsonDict:
        user_id = _require_str(req, "userId")
        service_id = _require_str(req, "serviceId")
        caps = req.get("capabilities")
        if not isinstance(caps, list) or any(c not in CAPABILITIES for c in caps):
            raise DomainError("INVALID_REQUEST", "capabilities must be a list of "
                              + ", ".join(sorted(CAPABILITIES)), field="capabilities")
        caller = self.caller(conn, req)
        self.require(conn, caller, service_id, None)
        # No existence check: a grant may name a service that does not exist yet, which is
        # how a new (greenfield) service is authorised before it is created.
        unique = sorted(set(caps))
        store.set_grant(conn, user_id, service_id, unique)
        return {"userId": user_id, "serviceId": service_id, "capabilities": unique,
                "tokenRolesNormalized": True}

    def get_grants(self, conn: sqlite3.Connection, req: JsonDict) -> JsonDict:
        caller = self.caller(conn, req)
        rows = store.grants(conn)
        if not caller.admin:
            rows = [g for g in rows if g["userId"] == caller.user_id]
        return {"grants": rows}

    def configuration_salt(self) -> str | None:
        """A server-side configuration fact the faults change (None: none): ``config-salt``
        a fixed one (every preflight from now on reports another configuration digest
        than before), ``config-drift`` a new one on every call (two preflights of one plan
        disagree)."""
        if self.faults.get("config-drift") is not None:
            return "drift-" + secrets.token_hex(8)
        salt = self.faults.get("config-salt")
        if salt is not None:
            return "salt-" + str(salt.get("salt", salt.get("_nonce", "")))
        return None

    def egress_from(self, egress: object) -> list[JsonDict]:
        """A declared egress list, checked: at most 50 unique ``{host, port}``."""
        if not isinstance(egress, list) or len(egress) > 50:
            raise DomainError("INVALID_REQUEST", "egress must be a list of at most 50",
                              field="egress")
        clean: list[JsonDict] = []
        for entry in egress:
            host = entry.get("host") if isinstance(entry, dict) else None
            port = entry.get("port") if isinstance(entry, dict) else None
            if (not isinstance(host, str) or not host or len(host) > 253
                    or not isinstance(port, int) or isinstance(port, bool)
                    or not 1 <= port <= 65535):
                raise DomainError("INVALID_REQUEST", "egress entries are {host, port}",
                                  field="egress")
            if {"host": host, "port": port} in clean:
                raise DomainError("INVALID_REQUEST", f"duplicate egress {host}:{port}",
                                  field="egress")
            clean.append({"host": host, "port": port})
        return clean

    def set_egress(self, conn: sqlite3.Connection, req: JsonDict) -> JsonDict:
        method = "setServiceEgress"
        service_id = _require_str(req, "serviceId")
        key = _require_str(req, "idempotencyKey")
        expected = _require_int(req, "expectedEgressRevision")
        clean = self.egress_from(req.get("egress"))
        caller = self.caller(conn, req)
        self.require(conn, caller, service_id, None)
        service = self.service(conn, service_id)
        digest, previous = self.replay(conn, method, req, key)
        if previous is not None:
            # [ext] says the reply is the first call's, replayed: nothing changed now.
            return {**previous, "idempotentReplay": True}
        actual = int(service["data"].get("egressRevision", 0))
        if expected != actual:
            raise DomainError("EGRESS_REVISION_MISMATCH",
                              f"egress revision is {actual}, not {expected}",
                              expected=expected, actual=actual)
        if service["data"].get("egress") != clean:
            service["data"]["egress"] = clean
            service["data"]["egressRevision"] = actual + 1
            store.save_service(conn, service)
            store.bump_version(conn)
        response = {"service": self.with_status(conn, service)}
        self.remember(conn, method, key, digest, response)
        return response

    # -- the envelope ------------------------------------------------------------------

    def dispatch(self, envelope: JsonDict) -> JsonDict:
        """Run one routed envelope; returns the reply envelope. Audits in the same commit."""
        method = envelope.get("method")
        req = envelope.get("request")
        reply: JsonDict = {**envelope,
                           "correlation": {**envelope["correlation"], "phase": "response"},
                           "response": None}
        reply.pop("error", None)
        reply.pop("retry", None)
        fields = {k: req[k] for k in AUDIT_KEYS if isinstance(req, dict) and k in req}
        fields["correlationId"] = envelope["correlation"].get("id")
        nested = req.get("preflight") if isinstance(req, dict) else None
        if isinstance(nested, dict) and "serviceId" in nested:
            fields.setdefault("serviceId", nested["serviceId"])
        handler = self.methods.get(method) if isinstance(method, str) else None
        conn = self.conn()
        with store.transaction(conn):
            if isinstance(req, dict) and handler is not None:
                try:
                    caller = self.caller(conn, req) if method != "getIdentityByToken" else None
                    fields["caller"] = caller.user_id if caller else None
                except DomainError:
                    fields["caller"] = None
            if handler is None:
                # Exactly the real router's error: no code, so a client classifies it
                # the same way against the sandbox and against the real control plane.
                reply["error"] = {"text": UNKNOWN_METHOD_TEXT, "data": {}}
                result = "UNKNOWN_METHOD"
            elif not isinstance(req, dict):
                reply["error"] = {"text": "request must be an object",
                                  "data": {"code": "INVALID_REQUEST"}}
                result = "INVALID_REQUEST"
            else:
                conn.execute("SAVEPOINT method")
                try:
                    reply["response"] = handler(conn, req)
                    if self.faults.get("echo-secrets") is not None \
                            and isinstance(reply["response"], dict):
                        reply["response"] = self.echo_secrets(reply["response"], req)
                    conn.execute("RELEASE method")
                    result = "ok"
                except DomainError as exc:
                    conn.execute("ROLLBACK TO method")
                    conn.execute("RELEASE method")
                    reply["error"] = {"text": exc.text, "data": {"code": exc.code, **exc.data}}
                    result = exc.code
            store.audit(conn, "control-plane", str(method), fields, result)
        return reply

    def audit_fault(self, method: object, envelope: JsonDict | None, result: str) -> None:
        req = envelope.get("request") if isinstance(envelope, dict) else None
        fields = {k: req[k] for k in AUDIT_KEYS if isinstance(req, dict) and k in req}
        conn = self.conn()
        with store.transaction(conn):
            store.audit(conn, "control-plane", str(method), fields, result)

    def sync(self, body: JsonDict) -> JsonDict:
        """Internal: store a cluster's reports, hand back what it must run."""
        cluster_id = str(body.get("clusterId"))
        conn = self.conn()
        with store.transaction(conn):
            changed = False
            for item in body.get("reports", []):
                service_id = str(item.get("serviceId"))
                if store.load_service(conn, service_id) is not None and \
                        store.save_report(conn, service_id, item["report"]):
                    changed = True
                    self.creations.refresh_service(conn, service_id)
            if changed:
                store.audit(conn, cluster_id, "sandboxClusterSync",
                            {"reports": len(body.get("reports", []))}, "ok")
            version = int(store.get_meta(conn, "version", "0") or 0)
            if body.get("knownVersion") == version:
                return {"version": version, "unchanged": True}
            services = []
            for service in store.all_services(conn):
                data = service["data"]
                services.append({"serviceId": service["id"], "appId": greenfield.app_id_of(service),
                                 "plan": data.get("imageDeployment"),
                                 "egress": data.get("egress"),
                                 "egressRevision": data.get("egressRevision", 0)})
            return {"version": version, "services": services,
                    "routes": gateway.all_routes(conn)}


class Handler(serving.JsonHandler):
    server: ControlPlaneServer

    def _delay(self) -> None:
        view = self.server.plane.faults
        for kind, default in (("latency", 0), ("slow", 3000)):
            params = view.get(kind)
            if params is not None:
                time.sleep(faults.param_int(params, "ms", default) / 1000)

    def do_HEAD(self) -> None:
        if self.path.split("?")[0] != "/typedrequest":
            self.send_raw(404, b"")
            return
        self._delay()
        self.send_raw(200, b"")

    def do_GET(self) -> None:
        self.send_json(404, {"error": "Not found"})

    def do_POST(self) -> None:
        path = self.path.split("?")[0]
        raw = self.read_body()
        plane = self.server.plane
        if path == "/sandbox/internal/sync":
            secret = self.headers.get("X-Sandbox-Secret", "")
            if not hmac.compare_digest(secret, plane.secret):
                self.send_json(403, {"error": "Forbidden"})
                return
            self.send_json(200, plane.sync(json.loads(raw)))
            return
        if path != "/typedrequest":
            self.send_json(404, {"error": "Not found"})
            return
        self._delay()
        try:
            envelope = json.loads(raw)
        except ValueError:
            envelope = None
        if not isinstance(envelope, dict):
            plane.audit_fault(None, None, "INVALID_JSON")
            self.send_json(400, {"error": "Invalid request"})
            return
        method = envelope.get("method")
        if plane.faults.fires("5xx") is not None:
            plane.audit_fault(method, envelope, "FAULT_5XX")
            self.send_json(503, {"error": "Service Unavailable"})
            return
        correlation = envelope.get("correlation")
        # Like the real TypedRouter: only a request-phase envelope is routed.
        if not isinstance(correlation, dict) or correlation.get("phase") != "request":
            plane.audit_fault(method, envelope, "NO_CORRELATION")
            self.send_raw(200, b"null")
            return
        reply_base = {**envelope, "correlation": {**envelope["correlation"], "phase": "response"}}
        retry = plane.faults.fires("retry")
        if retry is not None:
            plane.audit_fault(method, envelope, "FAULT_RETRY")
            reply_base.pop("error", None)
            self.send_json(200, {**reply_base, "response": None, "retry": {
                "waitForMs": faults.param_int(retry, "waitForMs", 50),
                "reason": str(retry.get("reason", "sandbox retry fault"))}})
            return
        if plane.faults.fires("null-response") is not None:
            plane.audit_fault(method, envelope, "FAULT_NULL_RESPONSE")
            reply_base.pop("error", None)
            reply_base.pop("retry", None)
            self.send_json(200, {**reply_base, "response": None})
            return
        try:
            reply = plane.dispatch(envelope)
        except Exception as exc:
            self.send_json(500, {"error": f"internal error: {type(exc).__name__}"})
            return
        late = plane.faults.get("slow-reply")
        if late is not None and late.get("method", method) == method \
                and plane.faults.fires("slow-reply") is not None:
            # Committed (dispatch ran in its own transaction): only the answer is late.
            plane.audit_fault(method, envelope, "FAULT_SLOW_REPLY")
            time.sleep(faults.param_int(late, "ms", 3000) / 1000)
            with contextlib.suppress(OSError):  # the client may have given up by now
                self.send_json(200, reply)
            return
        self.send_json(200, reply)


class ControlPlaneServer(serving.TLSServer):
    plane: ControlPlane


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="reconciler.sandbox.controlplane", allow_abbrev=False)
    parser.add_argument("--state", type=Path, required=True)
    parser.add_argument("--fd", type=int, default=-1, help="inherited listening socket")
    parser.add_argument("--port", type=int, default=18443)
    parser.add_argument("--parent-fd", type=int, default=-1)
    parser.add_argument("--identity-ttl-ms", type=int, default=3_600_000)
    parser.add_argument("--no-greenfield", dest="greenfield", action="store_false",
                        help="no [ext] greenfield creation (as on the real upstream)")
    parser.add_argument("--no-batch-reads", dest="batch_reads", action="store_false",
                        help="no [ext] getServicesReleases and etags (as on the real upstream)")
    args = parser.parse_args(argv)
    serving.install_term_handler()
    serving.die_with_parent(args.parent_fd)
    state: Path = args.state
    sock = (socket.socket(fileno=args.fd) if args.fd >= 0
            else serving.listen_socket("127.0.0.1", args.port))
    plane = ControlPlane(state, identity_ttl_ms=args.identity_ttl_ms,
                         batch_reads=args.batch_reads, greenfield_execution=args.greenfield)
    server = ControlPlaneServer(
        sock, Handler, serving.server_context(state / pki.CONTROL_PLANE_CERT,
                                              state / pki.CONTROL_PLANE_KEY))
    server.plane = plane
    host, port = sock.getsockname()[:2]
    serving.say_ready(f"{host}:{port}")
    server.serve_forever(poll_interval=0.2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
