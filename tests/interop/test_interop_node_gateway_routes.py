"""The real Node ``TypedRequest`` client sends the seed's two gateway route requests
(``getGatewayClientRoutes``, ``syncGatewayClientRoute``, seed 11.2–11.4) to the sandbox,
over TLS: the sandbox answers them as a TypedRouter would, including the domain error of
another client's route, which the library raises as a ``TypedResponseError``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from interop_harness import RunNodeClient, node_env, typedrequest_url

from reconciler.sandbox.launcher import Sandbox
from tests import sandboxes

pytestmark = [pytest.mark.node, pytest.mark.integration,
              pytest.mark.xdist_group("interop-routes")]

HOST = "shop.sandbox.test"


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    yield from sandboxes.for_module(tmp_path_factory, "interop-routes",
                                    converge_delay_ms=200)


def test_sync_then_list_then_replay_then_delete(sandbox: Sandbox,
                                                run_node_client: RunNodeClient) -> None:
    ownership = {"appId": "checkout", "hostname": HOST, "routeRef": "acme"}
    route = {"name": "shop-acme",
             "match": {"domains": [HOST], "ports": [80],
                       "path": "/.well-known/acme-challenge/"},
             "action": {"type": "forward", "target": {"appId": "checkout", "port": 8089}},
             "priority": 200, "managedRouteKind": "letsencrypt-http01-forward"}
    synced = run_node_client(typedrequest_url(sandbox), "syncGatewayClientRoute",
                             {"ownership": ownership, "route": route},
                             with_identity=True, env=node_env(sandbox))
    assert synced.returncode == 0, synced.out
    assert synced.out["response"]["changed"] is True
    assert synced.out["response"]["route"]["route"]["managedRouteKind"] == \
        "letsencrypt-http01-forward"

    listed = run_node_client(typedrequest_url(sandbox), "getGatewayClientRoutes",
                             {"appId": "checkout"}, with_identity=True, env=node_env(sandbox))
    assert listed.returncode == 0, listed.out
    [mine] = listed.out["response"]["routes"]
    assert mine["ownership"] == ownership
    assert mine["route"]["priority"] == 200
    assert mine["route"]["match"]["transport"] == "tcp"  # the default, written out

    replay = run_node_client(typedrequest_url(sandbox), "syncGatewayClientRoute",
                             {"ownership": ownership, "route": mine["route"]},
                             with_identity=True, env=node_env(sandbox))
    assert replay.out["response"]["changed"] is False

    deleted = run_node_client(typedrequest_url(sandbox), "syncGatewayClientRoute",
                              {"ownership": ownership, "delete": True},
                              with_identity=True, env=node_env(sandbox))
    assert deleted.out["response"] == {"route": None, "changed": True}


def test_another_clients_route_is_a_typed_response_error(
        sandbox: Sandbox, run_node_client: RunNodeClient) -> None:
    theirs = {"appId": "status-page", "hostname": HOST, "routeRef": "status"}
    result = run_node_client(typedrequest_url(sandbox), "syncGatewayClientRoute",
                             {"ownership": theirs, "delete": True},
                             with_identity=True, env=node_env(sandbox))
    assert result.returncode == 1
    assert result.out["errorClass"] == "TypedResponseError", result.out
    assert result.out["data"]["code"] == "ROUTE_OWNED_BY_ANOTHER_CLIENT"
    assert sandbox.token not in result.stderr
