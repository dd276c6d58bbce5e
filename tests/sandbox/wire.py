"""Test clients for the sandbox: TypedRequest envelopes and per-cluster HTTPS calls.

Written from CONTRACT.md, independently of the reconciler's own clients, so the sandbox
is checked against the contract rather than against another implementation of it.
"""

from __future__ import annotations

import secrets
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from reconciler.sandbox.launcher import Sandbox

JsonDict = dict[str, Any]


def sandbox_cli(state: Path, *, timeout: float) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``reconcile sandbox --state STATE ARGV...`` as a subprocess from the project root
    (the CLI is the point of these tests, so it runs as a user runs it), its output as text."""
    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "reconciler", "sandbox", "--state", str(state), *argv],
            capture_output=True, text=True, timeout=timeout,
            cwd=Path(__file__).resolve().parents[2])
    return run


def correlation() -> JsonDict:
    return {"id": "uni_" + secrets.token_hex(12), "phase": "request"}


class ControlPlaneClient:
    def __init__(self, sb: Sandbox, *, token: str | None = None, timeout: float = 10.0) -> None:
        self.sb = sb
        ctx = ssl.create_default_context(cafile=str(sb.ca_file))
        self.http = httpx.Client(base_url=sb.control_plane_url, verify=ctx, timeout=timeout)
        self.token = token or sb.token
        self._identity: JsonDict | None = None

    def close(self) -> None:
        self.http.close()

    def post(self, body: object) -> httpx.Response:
        return self.http.post("/typedrequest", json=body)

    def envelope(self, method: str, request: JsonDict) -> JsonDict:
        return {"method": method, "request": request, "response": None,
                "correlation": correlation()}

    def raw(self, method: str, **request: Any) -> JsonDict:
        response = self.post(self.envelope(method, request))
        assert response.status_code == 200, response.text
        body: JsonDict = response.json()
        return body

    @property
    def identity(self) -> JsonDict:
        if self._identity is None:
            reply = self.raw("getIdentityByToken", token=self.token)
            assert "error" not in reply, reply
            self._identity = reply["response"]["identity"]
        return self._identity

    def call(self, method: str, **request: Any) -> JsonDict:
        """The reply envelope of ``method`` called with this client's identity."""
        return self.raw(method, identity=self.identity, **request)

    def ok(self, method: str, **request: Any) -> JsonDict:
        reply = self.call(method, **request)
        assert "error" not in reply, reply.get("error")
        result: JsonDict = reply["response"]
        return result

    def error(self, method: str, **request: Any) -> JsonDict:
        reply = self.call(method, **request)
        assert "error" in reply, reply
        assert reply["response"] is None
        error: JsonDict = reply["error"]
        return error

    def service(self, service_id: str) -> JsonDict:
        return self.ok("getServiceById", serviceId=service_id)["service"]  # type: ignore[no-any-return]

    def releases(self, service_id: str) -> list[JsonDict]:
        return self.ok("getServiceImageReleases", serviceId=service_id)["releases"]  # type: ignore[no-any-return]

    def release_by_tag(self, service_id: str, tag: str) -> JsonDict:
        return next(r for r in self.releases(service_id) if tag in r["data"]["observedTags"])

    def promote(self, service_id: str, release_id: str, *, key: str | None = None,
                generation: int | None = None, rollout_id: str | None = None) -> JsonDict:
        service = self.service(service_id)
        plan = service["data"].get("imageDeployment") or {}
        request: JsonDict = {
            "serviceId": service_id, "releaseId": release_id,
            "idempotencyKey": key or secrets.token_hex(8),
            "expectedRolloutGeneration": (plan.get("rolloutGeneration", 0)
                                          if generation is None else generation),
            "enableImmutableImage": True}
        if rollout_id is not None:
            request["expectedCurrentRolloutId"] = rollout_id
        return self.call("promoteServiceImageRelease", **request)


class MeshClient:
    """Dials each cluster address directly with SNI and Host pinned to the gateway."""

    def __init__(self, sb: Sandbox, *, timeout: float = 5.0) -> None:
        self.sb = sb
        ctx = ssl.create_default_context(cafile=str(sb.ca_file))
        self.http = httpx.Client(verify=ctx, timeout=timeout)
        key = serialization.load_pem_private_key(sb.signer_key_file.read_bytes(), None)
        assert isinstance(key, Ed25519PrivateKey)
        self.key = key
        self.public_hex = key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()

    def close(self) -> None:
        self.http.close()

    def url(self, cluster_id: str, path: str) -> str:
        return f"https://{self.sb.addresses[cluster_id]}:{self.sb.mesh_port}{path}"

    def request(self, method: str, cluster_id: str, path: str, *, token: str | None = None,
                json: JsonDict | None = None, timeout: float | None = None) -> httpx.Response:
        headers = {"Host": self.sb.gateway}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return self.http.request(
            method, self.url(cluster_id, path), headers=headers, json=json,
            extensions={"sni_hostname": self.sb.gateway},
            timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT)

    def health(self, cluster_id: str) -> httpx.Response:
        return self.request("GET", cluster_id, "/api/v3/cluster/health")

    def challenge(self, cluster_id: str) -> JsonDict:
        response = self.request("POST", cluster_id, "/host/api/v3/baas/auth/challenge", json={
            "chain": "ed25519", "walletAddress": self.sb.wallet_address,
            "appId": self.sb.auth_app_id})
        assert response.status_code == 200, response.text
        body: JsonDict = response.json()
        return body

    def sign(self, message: str) -> str:
        return self.key.sign(message.encode("utf-8")).hex()

    def verify(self, cluster_id: str, challenge: JsonDict,
               signature: str | None = None) -> httpx.Response:
        return self.request("POST", cluster_id, "/host/api/v3/baas/auth/verify", json={
            "challengeId": challenge["challengeId"],
            "signature": signature or self.sign(challenge["message"]),
            "publicKey": self.public_hex})

    def login(self, cluster_id: str) -> str:
        response = self.verify(cluster_id, self.challenge(cluster_id))
        assert response.status_code == 200, response.text
        return str(response.json()["token"])

    def status(self, cluster_id: str, app_id: str, token: str | None = None,
               **kw: Any) -> httpx.Response:
        token = token or self.login(cluster_id)
        return self.request("GET", cluster_id,
                            f"/host/api/v3/baas/deployment/apps/{app_id}/status",
                            token=token, **kw)


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll ``predicate`` until it holds; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)
