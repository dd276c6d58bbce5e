"""Shared types for the interop tests (imported by conftest and the test modules)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NODE_DIR = Path(__file__).resolve().parents[2] / "interop" / "node"


@dataclass(frozen=True)
class NodeServer:
    """A running ``interop/node/server.mjs``: a real TypedRouter behind node:http."""

    base: str  # http://127.0.0.1:PORT
    token: str

    @property
    def url(self) -> str:
        """The honest endpoint: ``JSON.stringify(await router.routeAndAddResponse(body))``."""
        return f"{self.base}/typedrequest"

    def fault_url(self, fault: str) -> str:
        """A fault path: ``strip-correlation``, ``http-500`` or ``http-400`` (see server.mjs)."""
        return f"{self.base}/{fault}/typedrequest"


@dataclass(frozen=True)
class NodeResult:
    """What client.mjs printed: ``ok`` plus ``response`` or the error's fields."""

    returncode: int
    out: dict[str, Any]
    stderr: str


RunNodeClient = Callable[..., NodeResult]
