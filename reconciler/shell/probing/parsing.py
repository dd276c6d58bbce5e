"""Cluster replies -> sanitized values: the only reader of the mesh's wire shapes.

Owns the field names of the health reply (``clusterId``; the [ext] ``extensions``
advertising the batch status route) and of an app's status (CONTRACT §2 step 3), the
batch status page [ext] (``{apps: [{appId, status}], nextCursor}``, each ``status``
exactly an app's status body), and the wording of what is malformed: a ``Malformed``
carries the reason a silent observation will say. Every server string passes
``core.sanitize.safe``; ``resolvedDigest`` is taken only as sent, never inferred from
the image reference (a cluster that sends none has not proven what it runs).

``Shared``: within one pass, equal status bodies make one value. Ten clusters running
the same app send the same body, and most apps share their replica counts and egress:
parsing each once and sharing the (frozen) result keeps a 10,000 × 10 snapshot from
holding 100,000 copies of the same few values. Parsing is a pure function of the body,
so a body seen before yields exactly what parsing it again would.

Pure: parses bytes and values handed to it; no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import ValidationError

from reconciler.core.live import ClusterRuntime, ReplicaCounts
from reconciler.core.routing import GatewayRoute
from reconciler.core.sanitize import safe
from reconciler.shell.controlplane import ProtocolError, parse_client_route, parse_egress

T = TypeVar("T")


class Malformed(ValueError):
    """A reply that cannot be read; ``reason`` says what was wrong, sanitized."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def body_of(content: bytes) -> Any:
    """The JSON value of a reply body; None when it is not JSON."""
    try:
        return json.loads(content)
    except ValueError:
        return None


@dataclass(frozen=True)
class Health:
    """What a health reply says: the cluster's name, and the batch route it offers."""

    cluster_id: str
    batch_path: str | None = None


def parse_health(body: Any) -> Health:
    """The health reply (CONTRACT §2 step 1); ``Malformed`` says why it names nobody.

    ``extensions.batchStatus`` [ext] is kept only when it is an absolute path on this
    host (no scheme, no ``//``, no query, bounded): it is dialled at the same address."""
    if not isinstance(body, dict):
        raise Malformed("malformed JSON")
    cluster_id = body.get("clusterId")
    if not isinstance(cluster_id, str) or not cluster_id.strip():
        raise Malformed("the reply names no clusterId")
    extensions = body.get("extensions")
    batch = extensions.get("batchStatus") if isinstance(extensions, dict) else None
    usable = (isinstance(batch, str) and batch.startswith("/") and not batch.startswith("//")
              and len(batch) <= 200 and safe(batch, 200) == batch
              and not any(c in batch for c in "?#\\ "))
    return Health(cluster_id=safe(cluster_id.strip(), 100),
                  batch_path=batch if usable and isinstance(batch, str) else None)


def _frozen(value: Any) -> Hashable:
    """A hashable stand-in for a JSON value, equal only for equal values of equal types
    (``1``, ``1.0`` and ``True`` stay apart: a parser tells them apart)."""
    if isinstance(value, dict):
        return (dict, tuple((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, list):
        return (list, tuple(_frozen(v) for v in value))
    return (type(value), value)


class Shared:
    """The values parsed in one pass, by the body they were parsed from (see the module
    docstring). Lives for one pass: what it holds is what the snapshot holds anyway."""

    def __init__(self) -> None:
        self._values: dict[Hashable, Any] = {}

    def get(self, kind: str, raw: Any, parse: Callable[[Any], T]) -> T:
        """``parse(raw)``, or the value an equal ``raw`` of this ``kind`` already made."""
        key = (kind, _frozen(raw))
        if key in self._values:
            known: T = self._values[key]
            return known
        value = self._values[key] = parse(raw)
        return value


def parse_status(app_id: str, body: Any, shared: Shared | None = None) -> ClusterRuntime:
    """One app's status body; ``Malformed`` when it is not one, or is another app's.
    With ``shared``, an equal body parsed before in this pass gives the same value."""
    if not isinstance(body, dict):
        raise Malformed("malformed JSON")
    answered_for = body.get("appId")
    if answered_for is not None and answered_for != app_id:
        raise Malformed(f"answered for another app ({safe(answered_for, 80)})")
    try:
        if shared is not None:
            return shared.get("status", body, lambda raw: parse_runtime(raw, shared))
        return parse_runtime(body)
    except (TypeError, ValueError, ValidationError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise Malformed(f"malformed status: {safe(first, 160)}") from exc


@dataclass(frozen=True)
class BatchPage:
    """One page of the batch status route: raw status bodies by app, and what follows."""

    statuses: dict[str, Any]
    next_cursor: str | None


def parse_batch_page(body: Any) -> BatchPage:
    """``{apps: [{appId, status}], nextCursor}``; ``Malformed`` for anything else.

    An app listed twice on a page is malformed (which answer would count?). The status
    bodies are left raw: each is parsed by ``parse_status`` like a per-app reply."""
    if not isinstance(body, dict):
        raise Malformed("malformed JSON")
    apps = body.get("apps")
    if not isinstance(apps, list):
        raise Malformed("batch page: apps is not a list")
    statuses: dict[str, Any] = {}
    for entry in apps:
        if not isinstance(entry, dict) or not isinstance(entry.get("appId"), str):
            raise Malformed("batch page: an entry has no appId")
        app_id = entry["appId"]
        if app_id in statuses:
            raise Malformed(f"batch page: app {safe(app_id, 80)} is listed twice")
        statuses[app_id] = entry.get("status")
    cursor = body.get("nextCursor")
    if cursor is not None and (not isinstance(cursor, str) or not cursor
                               or len(cursor) > 1000):
        raise Malformed("batch page: nextCursor is not a string")
    return BatchPage(statuses=statuses, next_cursor=cursor)


def parse_runtime(body: Mapping[str, Any], shared: Shared | None = None) -> ClusterRuntime:
    """A cluster's status reply as a sanitized ``ClusterRuntime`` (CONTRACT §2 step 3).

    ``resolvedDigest`` is taken only as sent: a runtime without it has not proven what
    it runs, so it is never inferred from the image reference. ``shared``: replica counts
    and egress lists equal to ones parsed before in this pass are that same value.
    """
    runtime = body.get("runtime")
    if runtime is None:
        runtime = {}
    if not isinstance(runtime, dict):
        raise TypeError("runtime is not an object")
    counts = runtime.get("replicaCounts")
    egress = runtime.get("egress")
    dropped = runtime.get("egressDropped")
    return ClusterRuntime(
        state=_opt_text(body.get("state"), "state"),
        image=_opt_text(runtime.get("image"), "runtime.image"),
        runtime_state=_opt_text(runtime.get("runtimeState"), "runtime.runtimeState"),
        replicas=_opt_int(runtime.get("replicas"), "runtime.replicas"),
        last_error=_opt_text(runtime.get("lastError"), "runtime.lastError"),
        resolved_digest=_opt_text(runtime.get("resolvedDigest"), "runtime.resolvedDigest"),
        rollout_id=_opt_text(runtime.get("rolloutId"), "runtime.rolloutId"),
        rollout_generation=_opt_int(runtime.get("rolloutGeneration"),
                                    "runtime.rolloutGeneration"),
        replica_counts=None if counts is None else _part("counts", counts, _counts, shared),
        egress=None if egress is None else _part("egress", egress, parse_egress, shared),
        egress_dropped=() if dropped is None else _part("egress", dropped, parse_egress,
                                                        shared),
        routes=None if body.get("routes") is None else _routes(body["routes"]),
    )


def _routes(raw: Any) -> tuple[GatewayRoute, ...]:
    """[ext] the routes in effect (docs/extensions.md §5), defaults filled in as for the
    control plane's listing, so the judge compares like with like."""
    if not isinstance(raw, list):
        raise TypeError("routes is not a list")
    try:
        return tuple(parse_client_route(r, ours=True) for r in raw)
    except ProtocolError as exc:
        raise ValueError(str(exc)) from None


def _part(kind: str, raw: Any, parse: Callable[[Any], T], shared: Shared | None) -> T:
    return parse(raw) if shared is None else shared.get(kind, raw, parse)


def _counts(raw: Any) -> ReplicaCounts:
    if not isinstance(raw, dict):
        raise TypeError("runtime.replicaCounts is not an object")
    values = {}
    for name in ("required", "observed", "healthy", "verified", "failed"):
        value = _opt_int(raw.get(name), f"runtime.replicaCounts.{name}")
        values[name] = 0 if value is None else value
    return ReplicaCounts(**values)


def _opt_text(value: Any, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{field} is not a string")
    return safe(value)


def _opt_int(value: Any, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{field} is not an integer")
    return value
