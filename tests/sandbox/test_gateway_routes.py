"""The sandbox's gateway routes (issue 21): ``getGatewayClientRoutes``,
``syncGatewayClientRoute`` and each cluster's route view, over real HTTPS.

Written from docs/extensions.md §5 with the test clients of ``tests/sandbox/wire.py``
(not the reconciler's own), so the sandbox is checked against the contract.
"""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.sandbox.launcher import Sandbox
from tests.sandbox.wire import ControlPlaneClient, MeshClient, wait_for

pytestmark = pytest.mark.integration

HOST = "shop.sandbox.test"
NORMAL = {"appId": "checkout", "hostname": HOST}
ACME = {"appId": "checkout", "hostname": HOST, "routeRef": "acme"}


def web_route(priority: int = 100, port: int = 8080) -> dict[str, Any]:
    return {"name": "shop-web", "match": {"domains": [HOST], "ports": [80, 443]},
            "action": {"type": "forward", "target": {"appId": "checkout", "port": port}},
            "priority": priority}


def acme_route() -> dict[str, Any]:
    return {"name": "shop-acme",
            "match": {"domains": [HOST], "ports": [80], "path": "/.well-known/acme-challenge/"},
            "action": {"type": "forward", "target": {"appId": "checkout", "port": 8089}},
            "priority": 200, "managedRouteKind": "letsencrypt-http01-forward"}


def test_sync_writes_every_default_out_and_a_replay_changes_nothing(
        cp: ControlPlaneClient) -> None:
    first = cp.ok("syncGatewayClientRoute", ownership=NORMAL, route=web_route())
    assert first["changed"] is True
    stored = first["route"]["route"]
    assert stored["match"] == {"domains": [HOST], "ports": [80, 443], "path": "/",
                               "transport": "tcp"}
    assert stored["remoteIngress"] == {"enabled": False, "edgeFilter": []}
    again = cp.ok("syncGatewayClientRoute", ownership=NORMAL, route=web_route())
    assert again["changed"] is False
    # The explicit form of the same route is the same route.
    explicit = cp.ok("syncGatewayClientRoute", ownership=NORMAL, route=stored)
    assert explicit["changed"] is False


def test_hostname_and_routeref_keep_two_routes_of_one_hostname_apart(
        cp: ControlPlaneClient) -> None:
    cp.ok("syncGatewayClientRoute", ownership=NORMAL, route=web_route())
    cp.ok("syncGatewayClientRoute", ownership=ACME, route=acme_route())
    listed = cp.ok("getGatewayClientRoutes")
    owned = {(r["ownership"].get("routeRef"), r["route"]["name"], r["route"]["priority"])
             for r in listed["routes"]}
    assert owned == {(None, "shop-web", 100), ("acme", "shop-acme", 200)}
    # The default seed's route of another client is listed apart, never as ours.
    assert [r["route"]["name"] for r in listed["otherClientRoutes"]] == ["shop-status"]
    assert listed["otherClientRoutes"][0]["clientId"] == "edge-team"
    deleted = cp.ok("syncGatewayClientRoute", ownership=ACME, delete=True)
    assert deleted == {"route": None, "changed": True}
    assert cp.ok("syncGatewayClientRoute", ownership=ACME, delete=True)["changed"] is False
    names = [r["route"]["name"] for r in cp.ok("getGatewayClientRoutes")["routes"]]
    assert names == ["shop-web"]


def test_another_clients_route_is_never_written_or_deleted(
        cp: ControlPlaneClient, sandbox: Sandbox) -> None:
    theirs = {"appId": "status-page", "hostname": HOST, "routeRef": "status"}
    error = cp.error("syncGatewayClientRoute", ownership=theirs, delete=True)
    assert error["data"]["code"] == "ROUTE_OWNED_BY_ANOTHER_CLIENT"
    error = cp.error("syncGatewayClientRoute", ownership=theirs, route=web_route())
    assert error["data"]["code"] == "ROUTE_OWNED_BY_ANOTHER_CLIENT"
    assert [r["route"]["name"] for r in cp.ok("getGatewayClientRoutes")["otherClientRoutes"]] \
        == ["shop-status"]


def test_bad_shapes_and_missing_capability_are_refused(sandbox: Sandbox,
                                                       cp: ControlPlaneClient) -> None:
    assert cp.error("syncGatewayClientRoute", ownership={"appId": "checkout"},
                    route=web_route())["data"]["code"] == "INVALID_REQUEST"
    bad = {**web_route(), "match": {"ports": ["443"]}}
    assert cp.error("syncGatewayClientRoute", ownership=NORMAL,
                    route=bad)["data"]["code"] == "INVALID_REQUEST"
    assert sandbox.deploy_bot_token_file is not None
    bot = ControlPlaneClient(sandbox, token=sandbox.deploy_bot_token_file.read_text().strip())
    try:
        # deploy-bot has promote-route on checkout; no service has appId ledger yet.
        assert bot.ok("syncGatewayClientRoute", ownership=NORMAL,
                      route=web_route())["changed"] is True
        denied = bot.error("syncGatewayClientRoute",
                           ownership={"appId": "ledger", "hostname": "ledger.sandbox.test"},
                           route={**web_route(), "action": {
                               "type": "forward", "target": {"appId": "ledger", "port": 80}}})
        assert denied["data"]["code"] == "FORBIDDEN"
        # The admin does not see the bot's route as its own.
        assert [r["route"]["name"] for r in cp.ok("getGatewayClientRoutes")["routes"]] == []
    finally:
        bot.close()


def routes_seen(mesh: MeshClient, cluster: str) -> list[tuple[str, int, int]]:
    body = mesh.status(cluster, "checkout").json()
    return sorted((r["route"]["name"], r["route"]["priority"],
                   r["route"]["action"]["target"]["port"]) for r in body["routes"])


def test_each_cluster_reports_the_routes_in_effect_and_a_stuck_one_keeps_the_old(
        cp: ControlPlaneClient, mesh: MeshClient, sandbox: Sandbox) -> None:
    cp.ok("syncGatewayClientRoute", ownership=NORMAL, route=web_route())
    for cluster in sandbox.clusters:
        wait_for(lambda c=cluster: routes_seen(mesh, c) == [("shop-web", 100, 8080)])
    stuck = sandbox.clusters[0]
    sandbox.fault(stuck, "route-stuck")
    cp.ok("syncGatewayClientRoute", ownership=NORMAL, route=web_route(priority=120, port=9090))
    for cluster in sandbox.clusters[1:]:
        wait_for(lambda c=cluster: routes_seen(mesh, c) == [("shop-web", 120, 9090)])
    assert routes_seen(mesh, stuck) == [("shop-web", 100, 8080)]
    # The batch status route carries the same view.
    token = mesh.login(stuck)
    page = mesh.request("GET", stuck, "/host/api/v3/baas/deployment/apps/status?appIds=checkout",
                        token=token).json()
    assert [r["route"]["priority"] for r in page["apps"][0]["status"]["routes"]] == [100]
    sandbox.fault(stuck, "route-stuck", on=False)
    wait_for(lambda: routes_seen(mesh, stuck) == [("shop-web", 120, 9090)])
