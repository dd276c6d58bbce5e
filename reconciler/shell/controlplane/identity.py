"""The caller's identity (CONTRACT §1.1): the machine token, and the identity it buys.

Owns reading the token from the environment variable the settings name (never from the
repo, never printed), and ``Identities``: the ``IIdentity`` exchanged for it, cached and
shared by concurrent calls, exchanged again ``IDENTITY_SKEW_MS`` before its
``expiresAt`` or when the server said ``UNAUTHORIZED`` for it. The exchange itself is
the session's (``getIdentityByToken`` is an ordinary envelope); this module only decides
when one is needed.

Must not: log or put the token or the jwt into any message (the session registers the
jwt with its ``Redactor`` as soon as it has one).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from reconciler.core.sanitize import register_secret
from reconciler.shell.endpoints import Connection, required_variable

#: Re-exchange the identity this long before its ``expiresAt``.
IDENTITY_SKEW_MS: Final = 30_000


def token_from_env(conn: Connection, env: Mapping[str, str]) -> str:
    """The machine token from the variable the settings name; the error names the variable."""
    value = required_variable(env, conn.token_env, what="the control-plane token",
                              setting="controlPlane.tokenEnv", set_to="a machine user's token")
    register_secret(value)  # known to the run from now on: redacted from every output
    return value


def expired(identity: Mapping[str, Any], *, now_ms: float | None = None) -> bool:
    """Whether ``identity`` is at (or within the skew of) its ``expiresAt``."""
    expires = identity.get("expiresAt")
    if not isinstance(expires, int | float) or isinstance(expires, bool):
        return False  # no expiry given: keep it until the server says UNAUTHORIZED
    now = time.time() * 1000 if now_ms is None else now_ms
    return now >= float(expires) - IDENTITY_SKEW_MS


class Identities:
    """One cached identity, exchanged on first use and again when stale or refused."""

    def __init__(self, exchange: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        self._exchange = exchange
        self._identity: dict[str, Any] | None = None
        self._lock = asyncio.Lock()

    async def current(self) -> dict[str, Any]:
        """The identity to send; concurrent callers share one exchange."""
        async with self._lock:
            if self._identity is None or expired(self._identity):
                self._identity = await self._exchange()
            return self._identity

    async def drop(self, stale: dict[str, Any]) -> None:
        """Forget ``stale`` (the server refused it), unless another caller already has."""
        async with self._lock:
            if self._identity is stale:
                self._identity = None
