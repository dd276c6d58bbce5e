"""The sandbox's gateway routes: ``getGatewayClientRoutes`` and ``syncGatewayClientRoute``.

Owns the two request handlers of seed 11.2–11.4 as the sandbox control plane answers them
(docs/extensions.md §5 fixes the payloads the seed leaves open), the rows of ``store``'s
``gateway_routes`` table, the gateway's defaults (every stored route is written out in
full, so a read never shows a field the writer left out as a difference), and the route
list the clusters pull with their rollouts.

Rules: a route is owned by ``ownership`` = ``appId`` plus ``hostname`` and/or
``routeRef`` (one route per key) and by the client (the caller's user id) that first
synced it; another client syncing or deleting that key is refused
(``ROUTE_OWNED_BY_ANOTHER_CLIENT``), and no client ever sees another's route as its own. A
sync of the route that is stored changes nothing (``changed: false``; the clusters'
version does not move), so a replay is harmless by construction. The caller needs
``deployment:promote-route`` on the service with that appId (admins need none).

Must not speak HTTP or touch the clusters: they pull ``routes_for_clusters`` through the
control plane's sync route.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable
from typing import Any

from reconciler.sandbox import store
from reconciler.sandbox.callers import Authenticating, Caller

JsonDict = dict[str, Any]
Method = Callable[[sqlite3.Connection, JsonDict], JsonDict]

GET = "getGatewayClientRoutes"
SYNC = "syncGatewayClientRoute"
CAPABILITY = "deployment:promote-route"
MANAGED_KINDS = frozenset({"letsencrypt-http01-forward"})
TRANSPORTS = frozenset({"tcp", "udp", "all"})
#: The gateway's defaults for what a route leaves out (docs/extensions.md §5).
DEFAULT_PORTS = [443]
DEFAULT_PATH = "/"
DEFAULT_TRANSPORT = "tcp"
DEFAULT_PRIORITY = 0

_HOST = re.compile(r"(?:\*\.)?(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9-]{1,63}")
_PATH = re.compile(r"/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*")


#: What this module needs of ``controlplane.ControlPlane``: who calls.
Plane = Authenticating


class Gateway:
    """The two route methods over the control plane's store."""

    def __init__(self, plane: Plane, error: Callable[..., Exception]) -> None:
        self.plane = plane
        self.error = error

    def methods(self) -> dict[str, Method]:
        return {GET: self.get_routes, SYNC: self.sync_route}

    # -- shapes -------------------------------------------------------------------------

    def _invalid(self, field: str, text: str) -> Exception:
        return self.error("INVALID_REQUEST", f"{field} {text}", field=field)

    def ownership(self, value: object) -> tuple[str, str | None, str | None]:
        if not isinstance(value, dict) or set(value) - {"appId", "hostname", "routeRef"}:
            raise self._invalid("ownership", "must be {appId, hostname?, routeRef?}")
        app_id, hostname, route_ref = (value.get("appId"), value.get("hostname"),
                                       value.get("routeRef"))
        if not isinstance(app_id, str) or not app_id or len(app_id) > 200:
            raise self._invalid("ownership.appId", "must be a non-empty string")
        for field, item in (("hostname", hostname), ("routeRef", route_ref)):
            if item is not None and (not isinstance(item, str) or not item or len(item) > 253):
                raise self._invalid(f"ownership.{field}", "must be a non-empty string")
        if hostname is None and route_ref is None:
            raise self._invalid("ownership", "needs hostname, routeRef, or both")
        return app_id, hostname, route_ref

    def route(self, value: object) -> JsonDict:
        """The route, checked, with every default the gateway applies written out."""
        if not isinstance(value, dict):
            raise self._invalid("route", "must be an IGatewayRouteConfig object")
        name = value.get("name")
        if not isinstance(name, str) or not name or len(name) > 200:
            raise self._invalid("route.name", "must be a non-empty string")
        match = value.get("match", {})
        if not isinstance(match, dict) or set(match) - {"domains", "ports", "path", "transport"}:
            raise self._invalid("route.match", "must be {domains?, ports?, path?, transport?}")
        domains = match.get("domains", [])
        if not isinstance(domains, list) or not all(
                isinstance(d, str) and _HOST.fullmatch(d) for d in domains):
            raise self._invalid("route.match.domains", "must be a list of hostnames")
        ports = match.get("ports", DEFAULT_PORTS)
        if not isinstance(ports, list) or not ports or not all(
                isinstance(p, int) and not isinstance(p, bool) and 1 <= p <= 65535
                for p in ports):
            raise self._invalid("route.match.ports", "must be a non-empty list of ports")
        path = match.get("path", DEFAULT_PATH)
        if not isinstance(path, str) or not _PATH.fullmatch(path):
            raise self._invalid("route.match.path", "must be an absolute path prefix")
        transport = match.get("transport", DEFAULT_TRANSPORT)
        if transport not in TRANSPORTS:
            raise self._invalid("route.match.transport", "must be tcp, udp or all")
        action = value.get("action")
        target = action.get("target") if isinstance(action, dict) else None
        if not isinstance(action, dict) or action.get("type") != "forward" \
                or not isinstance(target, dict) or not isinstance(target.get("appId"), str) \
                or not isinstance(target.get("port"), int) or isinstance(target["port"], bool) \
                or not 1 <= target["port"] <= 65535:
            raise self._invalid("route.action", "must be {type: forward, target: {appId, port}}")
        priority = value.get("priority", DEFAULT_PRIORITY)
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise self._invalid("route.priority", "must be an integer")
        kind = value.get("managedRouteKind")
        if kind is not None and kind not in MANAGED_KINDS:
            raise self._invalid("route.managedRouteKind", "is not a known managed route kind")
        remote = value.get("remoteIngress", {"enabled": False})
        if not isinstance(remote, dict) or not isinstance(remote.get("enabled"), bool) \
                or not isinstance(remote.get("edgeFilter", []), list):
            raise self._invalid("route.remoteIngress", "must be {enabled, edgeFilter?}")
        extra = set(value) - {"name", "match", "action", "priority", "managedRouteKind",
                              "remoteIngress"}
        if extra:
            raise self._invalid("route", f"has unknown fields {sorted(extra)}")
        out: JsonDict = {
            "name": name,
            "match": {"domains": sorted(set(domains)), "ports": sorted(set(ports)),
                      "path": path, "transport": transport},
            "action": {"type": "forward",
                       "target": {"appId": target["appId"], "port": target["port"]}},
            "priority": priority,
            "remoteIngress": {"enabled": remote["enabled"],
                              "edgeFilter": sorted(set(remote.get("edgeFilter", [])))},
        }
        if kind is not None:
            out["managedRouteKind"] = kind
        return out

    # -- authorization --------------------------------------------------------------------

    def _authorise(self, conn: sqlite3.Connection, caller: Caller, app_id: str) -> None:
        if caller.admin:
            return
        service_ids = [s["id"] for s in store.all_services(conn)
                       if str(s["data"].get("appId") or s["data"]["name"]) == app_id]
        if not any(CAPABILITY in store.capabilities(conn, caller.user_id, sid)
                   for sid in service_ids):
            raise self.error("FORBIDDEN", f"{caller.user_id} lacks {CAPABILITY} on the "
                             f"service of appId {app_id}", capability=CAPABILITY, appId=app_id)

    # -- methods ------------------------------------------------------------------------

    def get_routes(self, conn: sqlite3.Connection, req: JsonDict) -> JsonDict:
        """The caller's routes (optionally of one ``appId``), and [ext] the routes other
        clients own, read-only, for a client's own analysis (``otherClientRoutes``)."""
        caller = self.plane.caller(conn, req)
        app_id = req.get("appId")
        if app_id is not None and not isinstance(app_id, str):
            raise self._invalid("appId", "must be a string")
        own, others = [], []
        for row in all_routes(conn):
            if row["clientId"] == caller.user_id:
                if app_id is None or row["ownership"]["appId"] == app_id:
                    own.append(row)
            else:
                others.append(row)
        return {"routes": own, "otherClientRoutes": others}

    def sync_route(self, conn: sqlite3.Connection, req: JsonDict) -> JsonDict:
        """Create, replace or (``delete: true``) remove the caller's route at
        ``ownership``; the same route again changes nothing."""
        app_id, hostname, route_ref = self.ownership(req.get("ownership"))
        delete = req.get("delete", False)
        if not isinstance(delete, bool):
            raise self._invalid("delete", "must be a boolean")
        route = None if delete else self.route(req.get("route"))
        if delete and req.get("route") is not None:
            raise self._invalid("route", "must be absent when delete is true")
        caller = self.plane.caller(conn, req)
        self._authorise(conn, caller, app_id)
        key = (app_id, hostname or "", route_ref or "")
        row = conn.execute("SELECT client_id, data FROM gateway_routes WHERE app_id = ? AND "
                           "hostname = ? AND route_ref = ?", key).fetchone()
        if row is not None and row[0] != caller.user_id:
            raise self.error("ROUTE_OWNED_BY_ANOTHER_CLIENT",
                             f"the route of {describe(app_id, hostname, route_ref)} is owned "
                             "by another client", ownership=req["ownership"])
        if route is None:
            if row is None:
                return {"route": None, "changed": False}
            conn.execute("DELETE FROM gateway_routes WHERE app_id = ? AND hostname = ? AND "
                         "route_ref = ?", key)
            store.bump_version(conn)
            return {"route": None, "changed": True}
        if row is not None and json.loads(row[1]) == route:
            return {"route": _view(caller.user_id, app_id, hostname, route_ref, route),
                    "changed": False}
        conn.execute("INSERT INTO gateway_routes (app_id, hostname, route_ref, client_id, data, "
                     "updated_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (app_id, hostname, "
                     "route_ref) DO UPDATE SET data = excluded.data, "
                     "updated_at = excluded.updated_at",
                     (*key, caller.user_id, store.canonical(route), store.now_ms()))
        store.bump_version(conn)
        return {"route": _view(caller.user_id, app_id, hostname, route_ref, route),
                "changed": True}


def describe(app_id: str, hostname: str | None, route_ref: str | None) -> str:
    parts = [f"appId {app_id}"]
    if hostname:
        parts.append(f"hostname {hostname}")
    if route_ref:
        parts.append(f"routeRef {route_ref}")
    return ", ".join(parts)


def _view(client_id: str, app_id: str, hostname: str | None, route_ref: str | None,
          route: JsonDict) -> JsonDict:
    """An ``IGatewayClientRoute``: ownership and route, plus [ext] ``clientId``."""
    ownership: JsonDict = {"appId": app_id}
    if hostname:
        ownership["hostname"] = hostname
    if route_ref:
        ownership["routeRef"] = route_ref
    return {"ownership": ownership, "route": route, "clientId": client_id}


def all_routes(conn: sqlite3.Connection) -> list[JsonDict]:
    """Every client's routes, in key order."""
    rows = conn.execute("SELECT app_id, hostname, route_ref, client_id, data FROM "
                        "gateway_routes ORDER BY app_id, hostname, route_ref").fetchall()
    return [_view(str(r[3]), str(r[0]), r[1] or None, r[2] or None, json.loads(r[4]))
            for r in rows]


def seed_route(conn: sqlite3.Connection, client_id: str, ownership: JsonDict,
               route: JsonDict) -> None:
    """Store a route as ``client_id``'s (the seed's foreign routes), defaults written out."""
    checker = Gateway(_NoPlane(), _SeedError)
    app_id, hostname, route_ref = checker.ownership(ownership)
    conn.execute("INSERT OR REPLACE INTO gateway_routes (app_id, hostname, route_ref, "
                 "client_id, data, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                 (app_id, hostname or "", route_ref or "", client_id,
                  store.canonical(checker.route(route)), store.now_ms()))


class _SeedError(ValueError):
    def __init__(self, code: str, text: str, **data: Any) -> None:
        super().__init__(f"{code}: {text}")


class _NoPlane:
    def caller(self, conn: sqlite3.Connection, req: JsonDict) -> Caller:
        raise _SeedError("UNAUTHORIZED", "no caller while seeding")
