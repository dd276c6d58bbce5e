"""What the sandbox's method modules (gateway routes, greenfield) need of the control plane
to know who calls: the caller's user and whether it is an admin.

Protocols only, so those modules need not import ``controlplane`` (which imports them).
"""

from __future__ import annotations

import sqlite3
from typing import Any, Protocol

JsonDict = dict[str, Any]


class Caller(Protocol):
    @property
    def user_id(self) -> str: ...

    @property
    def admin(self) -> bool: ...


class Authenticating(Protocol):
    """The control plane as far as it names the caller of a request (its identity JWT)."""

    def caller(self, conn: sqlite3.Connection, req: JsonDict) -> Caller: ...
