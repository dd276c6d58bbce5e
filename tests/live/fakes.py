"""In-process fakes of the control plane and the cluster mesh, for ``httpx.MockTransport``.

Each fake records what it received so tests can assert on the wire (envelopes, headers,
SNI, idempotency keys) without a socket. The real-wire cases run against the sandbox.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
)

from reconciler.shell.endpoints import Connection

#: a Settings document for the sandbox's addresses, read by the connection tests (copy it
#: before changing it)
SETTINGS: dict[str, Any] = {
    "apiVersion": "reconcile/v1", "kind": "Settings",
    "controlPlane": {"url": "https://127.0.0.1:18443", "tokenEnv": "RECONCILE_TOKEN",
                     "caFile": "ca.pem"},
    "mesh": {"gateway": "gateway.sandbox.test", "port": 18444, "caFile": "ca.pem",
             "resolve": ["127.0.0.2", "127.0.0.3", "127.0.0.4"],
             "clusters": ["sn1", "sn2", "sn3"],
             "signer": {"walletAddress": "rBot", "appId": "reconcile",
                        "keyFileEnv": "RECONCILE_SIGNER_KEY"}},
}

CANARY = "canary-tok-7f3a9c1e5b2d4f6a8c0e"
BATCH_PATH = "/host/api/v3/baas/deployment/apps/status"
GATEWAY = "gateway.test"
PORT = 18444


def connection(**changes: Any) -> Connection:
    values: dict[str, Any] = {
        "control_plane_url": "https://cp.test",
        "control_plane_ca": None,
        "token_env": "RECONCILE_TOKEN",
        "call_timeout": 2.0,
        "gateway": GATEWAY,
        "mesh_port": PORT,
        "mesh_ca": None,
        "static_addresses": ("127.0.0.2", "127.0.0.3", "127.0.0.4"),
        "settings_clusters": ("sn1", "sn2", "sn3"),
        "concurrency": 8,
        "probe_timeout": 1.0,
        "wallet_address": "rWallet",
        "auth_app_id": "reconcile",
        "signer_key_env": "RECONCILE_SIGNER_KEY",
    }
    values.update(changes)
    return Connection(**values)


def signer_pem() -> bytes:
    return Ed25519PrivateKey.generate().private_bytes(
        Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())


def write_signer(tmp: Path) -> Path:
    path = tmp / "signer.pem"
    path.write_bytes(signer_pem())
    return path


# -- control plane ----------------------------------------------------------------------

Handler = Callable[[dict[str, Any]], "httpx.Response | dict[str, Any] | None"]


@dataclass
class FakeControlPlane:
    """Answers TypedRequest envelopes; ``script[method]`` yields replies in order."""

    script: dict[str, list[Any]] = field(default_factory=dict)
    sent: list[dict[str, Any]] = field(default_factory=list)
    identity_expires_in_ms: int = 3_600_000
    exchanges: int = 0

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        assert request.method == "POST"
        assert request.url.path == "/typedrequest"
        envelope = json.loads(request.content)
        self.sent.append(envelope)
        method = envelope["method"]
        if method == "getIdentityByToken":
            self.exchanges += 1
            import time

            return self.reply(envelope, {"identity": {
                "name": "bot", "userId": "u1", "type": "machine", "role": "api",
                "expiresAt": int(time.time() * 1000) + self.identity_expires_in_ms,
                "jwt": f"jwt-{self.exchanges}"}})
        queue = self.script.get(method)
        step: Any = queue.pop(0) if queue and len(queue) > 1 else (queue[0] if queue else None)
        if callable(step):
            step = step(envelope)
        if isinstance(step, httpx.Response):
            return step
        if step is None:
            return self.reply(envelope, None, extra={"error": {
                "text": "There is no available method for this call on the server side",
                "data": {}}})
        if isinstance(step, dict) and ("error" in step or "retry" in step):
            return self.reply(envelope, None, extra=step)
        return self.reply(envelope, step)

    @staticmethod
    def reply(envelope: dict[str, Any], response: Any,
              extra: dict[str, Any] | None = None) -> httpx.Response:
        body = {**envelope, "response": response,
                "correlation": {**envelope["correlation"], "phase": "response"}}
        body.update(extra or {})
        return httpx.Response(200, json=body)

    def calls(self, method: str) -> list[dict[str, Any]]:
        return [e for e in self.sent if e["method"] == method]


def error(code: str, text: str = "refused", **data: Any) -> dict[str, Any]:
    return {"error": {"text": text, "data": {"code": code, **data}}}


# -- mesh -------------------------------------------------------------------------------


@dataclass
class FakeCluster:
    cluster_id: str | None
    status: dict[str, Any] = field(default_factory=dict)  # appId -> body (or int status)
    health: Any = None  # override: an int status, a raw bytes body, or an exception
    refuse: bool = False
    blackhole: bool = False
    delay: float = 0.0
    reauth: bool = False  # 401 for a token used once already
    verify_status: int = 200
    tokens: dict[str, int] = field(default_factory=dict)
    minted: int = 0
    # [ext] batch status route: advertised in health when ``batch``; ``batch_missing``
    # answers 404 on it; ``batch_pages`` overrides page N (0-based) with an int status,
    # raw bytes or a JSON body; ``etag`` is sent on every page and answers 304 to it.
    batch: bool = False
    batch_missing: bool = False
    batch_pages: dict[int, Any] = field(default_factory=dict)
    etag: str | None = None


@dataclass
class FakeMesh:
    clusters: dict[str, FakeCluster]  # by address
    seen: list[httpx.Request] = field(default_factory=list)
    challenges: dict[str, tuple[str, str]] = field(default_factory=dict)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        address = request.url.host
        cluster = self.clusters.get(address)
        if cluster is None or cluster.refuse:
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        if cluster.blackhole:
            await asyncio.sleep(3600)
        if cluster.delay:
            await asyncio.sleep(cluster.delay)
        path = request.url.path
        if path == "/api/v3/cluster/health":
            if isinstance(cluster.health, int):
                return httpx.Response(cluster.health)
            if isinstance(cluster.health, bytes):
                return httpx.Response(200, content=cluster.health)
            health: dict[str, Any] = {"clusterId": cluster.cluster_id, "gateway": {}}
            if cluster.batch:
                health["extensions"] = {"batchStatus": BATCH_PATH}
            return httpx.Response(200, json=health)
        if path.endswith("/auth/challenge"):
            body = json.loads(request.content)
            assert body["chain"] == "ed25519"
            cid = secrets.token_hex(4)
            message = f"sign in to {cluster.cluster_id}: {secrets.token_hex(8)}"
            self.challenges[cid] = (address, message)
            return httpx.Response(200, json={"challengeId": cid, "message": message,
                                             "expiresAt": 0})
        if path.endswith("/auth/verify"):
            body = json.loads(request.content)
            where, message = self.challenges.pop(body["challengeId"])
            assert where == address
            key = Ed25519PublicKey.from_public_bytes(bytes.fromhex(body["publicKey"]))
            key.verify(bytes.fromhex(body["signature"]), message.encode())
            if cluster.verify_status != 200:
                return httpx.Response(cluster.verify_status, json={"error": "no"})
            cluster.minted += 1
            token = f"{address}-{cluster.minted}-{secrets.token_hex(4)}"
            cluster.tokens[token] = 0
            return httpx.Response(200, json={"token": token, "expiresAt": 0})
        if path == BATCH_PATH and cluster.batch:
            token = request.headers.get("Authorization", "").removeprefix("Bearer ")
            if token not in cluster.tokens:
                return httpx.Response(401, json={"error": "unknown token"})
            return self.batch_page(cluster, request)
        if "/deployment/apps/" in path:
            auth = request.headers.get("Authorization", "")
            token = auth.removeprefix("Bearer ")
            if token not in cluster.tokens:
                return httpx.Response(401, json={"error": "unknown token"})
            if cluster.reauth and cluster.tokens[token] >= 1:
                return httpx.Response(401, json={"error": "token used"})
            cluster.tokens[token] += 1
            app = path.split("/")[-2]
            body = cluster.status.get(app, 404)
            if isinstance(body, int):
                return httpx.Response(body)
            if isinstance(body, bytes):
                return httpx.Response(200, content=body)
            return httpx.Response(200, json=body)
        return httpx.Response(404)


    @staticmethod
    def batch_page(cluster: FakeCluster, request: httpx.Request) -> httpx.Response:
        """Keyset pages over the apps with a record (a dict body), sorted; the cursor is
        the page index as text."""
        if cluster.batch_missing:
            return httpx.Response(404, json={"error": "not found"})
        params = request.url.params
        index = int(params.get("cursor") or 0)
        limit = int(params.get("limit") or 1000)
        headers = {"ETag": cluster.etag} if cluster.etag else {}
        if cluster.etag and request.headers.get("If-None-Match") == cluster.etag:
            return httpx.Response(304, headers=headers)
        override = cluster.batch_pages.get(index)
        if isinstance(override, int):
            return httpx.Response(override, json={"error": "page failed"})
        if isinstance(override, bytes):
            return httpx.Response(200, content=override, headers=headers)
        if isinstance(override, dict):
            return httpx.Response(200, json=override, headers=headers)
        wanted = params.get("appIds")
        ids = sorted(a for a, body in cluster.status.items() if isinstance(body, dict)
                     and (wanted is None or a in wanted.split(",")))
        page = ids[index * limit:(index + 1) * limit]
        more = (index + 1) * limit < len(ids)
        return httpx.Response(200, headers=headers, json={
            "apps": [{"appId": a, "status": cluster.status[a]} for a in page],
            "nextCursor": str(index + 1) if more else None})


def runtime(app: str, digest: str | None = "sha256:" + "a" * 64, **extra: Any) -> dict[str, Any]:
    rt: dict[str, Any] = {
        "image": f"registry.test/shop/{app}@sha256:{'a' * 64}",
        "runtimeState": "RUNNING", "replicas": 2, "lastError": None,
        "rolloutId": "r1", "rolloutGeneration": 3,
        "replicaCounts": {"required": 2, "observed": 2, "healthy": 2, "verified": 2,
                          "failed": 0},
        "egress": [{"host": "api.stripe.com", "port": 443}], "egressDropped": [],
    }
    if digest is not None:
        rt["resolvedDigest"] = digest
    rt.update(extra)
    return {"appId": app, "state": "ACTIVE", "runtime": rt}


def three_clusters(apps: tuple[str, ...] = ("checkout",)) -> dict[str, FakeCluster]:
    return {
        f"127.0.0.{i + 2}": FakeCluster(f"sn{i + 1}", status={a: runtime(a) for a in apps})
        for i in range(3)
    }
