"""Per-address authentication (CONTRACT §2 step 2): a session minted on one cluster is
not valid on another, so each address gets its own.

Owns the challenge/verify handshake with the Ed25519 signer, the bearer cached per
address (kept across passes until a cluster refuses it), the rule of seed 000 -- a
*reused* bearer that gets 401 is re-minted once, a *fresh* one that gets 401 is an
error -- and, per pass, the addresses whose handshake failed (asked once per pass, not
once per app).

Must not: print, log or put the key or a bearer into any reason; every reason starts
with ``auth:``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Final

from cryptography.hazmat.primitives import serialization

from reconciler.core.sanitize import register_secret
from reconciler.shell.endpoints import Connection
from reconciler.shell.keys import load_signer_key
from reconciler.shell.probing.dialing import Dialer, Silent
from reconciler.shell.probing.parsing import body_of

CHALLENGE_PATH: Final = "/host/api/v3/baas/auth/challenge"
VERIFY_PATH: Final = "/host/api/v3/baas/auth/verify"


def _auth_reason(reason: str) -> str:
    return reason if reason.startswith("auth: ") else f"auth: {reason}"


class Authenticator:
    """Bearer tokens for the mesh's addresses, minted on first use."""

    def __init__(self, conn: Connection, dialer: Dialer, *, signer_key: bytes | Path) -> None:
        self._conn = conn
        self._dialer = dialer
        self._key = load_signer_key(signer_key)
        self._public_hex = self._key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()
        self.tokens: dict[str, str] = {}
        self._mint_locks: dict[str, asyncio.Lock] = {}
        self._failed: dict[str, str] = {}  # this pass: address -> why its handshake failed

    def new_pass(self) -> None:
        """A new pass tries the handshake again where it failed (tokens are kept)."""
        self._failed.clear()

    async def token(self, address: str) -> tuple[str, bool]:
        """The address's bearer and whether it was reused from an earlier request."""
        cached = self.tokens.get(address)
        if cached is not None:
            return cached, True
        async with self._mint_locks.setdefault(address, asyncio.Lock()):
            cached = self.tokens.get(address)
            if cached is not None:
                return cached, False  # minted a moment ago by a concurrent request
            if address in self._failed:
                raise Silent(self._failed[address])
            try:
                token = await self._mint(address)
            except Silent as exc:
                reason = _auth_reason(exc.reason)
                self._failed[address] = reason
                raise Silent(reason) from exc
            self.tokens[address] = token
            return token, False

    async def remint(self, address: str, stale: str) -> str:
        """A new bearer for ``address`` after ``stale`` was refused (once per refusal)."""
        async with self._mint_locks.setdefault(address, asyncio.Lock()):
            current = self.tokens.get(address)
            if current is not None and current != stale:
                return current  # another request re-minted already
            self.tokens.pop(address, None)
            try:
                token = await self._mint(address)
            except Silent as exc:
                raise Silent(_auth_reason(exc.reason)) from exc
            self.tokens[address] = token
            return token

    async def _mint(self, address: str) -> str:
        """The challenge/verify handshake against ONE address."""
        conn = self._conn
        response = await self._dialer.request(address, "POST", CHALLENGE_PATH, payload={
            "chain": "ed25519", "walletAddress": conn.wallet_address, "appId": conn.auth_app_id})
        challenge = body_of(response.content)
        if response.status_code >= 400:
            raise Silent(f"auth: challenge HTTP {response.status_code}")
        if not (isinstance(challenge, dict) and isinstance(challenge.get("challengeId"), str)
                and isinstance(challenge.get("message"), str)):
            raise Silent("auth: malformed challenge reply")
        signature = self._key.sign(challenge["message"].encode("utf-8")).hex()
        response = await self._dialer.request(address, "POST", VERIFY_PATH, payload={
            "challengeId": challenge["challengeId"], "signature": signature,
            "publicKey": self._public_hex})
        verified = body_of(response.content)
        if response.status_code >= 400:
            raise Silent(f"auth: verify HTTP {response.status_code}")
        if not (isinstance(verified, dict) and isinstance(verified.get("token"), str)
                and verified["token"]):
            raise Silent("auth: malformed verify reply")
        token: str = verified["token"]
        register_secret(token)  # a cluster that echoes it must not have it printed
        return token
