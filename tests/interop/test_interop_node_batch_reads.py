"""The real Node ``TypedRequest`` client calls the [ext] batch method on the sandbox.

``getServicesReleases`` (docs/extensions.md §2) must be an ordinary TypedRequest method to
the real @api.global/typedrequest 3.3.0 client: fired over TLS with an identity from
``getIdentityByToken``, it resolves to ``{releases, nextCursor, etag}``, pages with the
cursor it returned, answers ``{notModified, etag}`` to a current ``ifNoneMatch``, and its
refusals arrive as ``TypedResponseError`` with ``data.code``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from interop_harness import RunNodeClient

from reconciler.sandbox.launcher import Sandbox
from tests import sandboxes

pytestmark = [pytest.mark.node, pytest.mark.integration,
              pytest.mark.xdist_group("interop-sandbox")]

CONVERGE_DELAY_MS = 200  # as tests/conftest.py
SERVICES = ["svc-catalog", "svc-checkout", "svc-notifications", "svc-search"]


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    yield from sandboxes.for_module(tmp_path_factory, "interop-batch",
                                    converge_delay_ms=CONVERGE_DELAY_MS)


def _fire(sandbox: Sandbox, run_node_client: RunNodeClient,
          request: dict[str, Any]) -> dict[str, Any]:
    url = sandbox.control_plane_url.rstrip("/") + "/typedrequest"
    result = run_node_client(url, "getServicesReleases", request, with_identity=True,
                             env={"NODE_EXTRA_CA_CERTS": str(sandbox.ca_file),
                                  "RECONCILE_TOKEN": sandbox.token})
    assert sandbox.token not in result.stderr
    out: dict[str, Any] = result.out
    assert (result.returncode == 0) is (out["ok"] is True), out
    return out


def test_the_node_client_reads_every_release_in_pages(
        sandbox: Sandbox, run_node_client: RunNodeClient) -> None:
    everything = _fire(sandbox, run_node_client, {})
    assert everything["ok"] is True, everything
    reply = everything["response"]
    assert list(reply["releases"]) == SERVICES and reply["nextCursor"] is None
    checkout = reply["releases"]["svc-checkout"]
    assert [r["data"]["observedTags"] for r in checkout] == [["v2.3.0"], ["v2.4.0"]]
    assert all(r["data"]["serviceId"] == "svc-checkout" for r in checkout)

    first = _fire(sandbox, run_node_client, {"limit": 3})["response"]
    assert list(first["releases"]) == SERVICES[:3] and isinstance(first["nextCursor"], str)
    second = _fire(sandbox, run_node_client,
                   {"limit": 3, "cursor": first["nextCursor"]})["response"]
    assert list(second["releases"]) == SERVICES[3:] and second["nextCursor"] is None
    assert {**first["releases"], **second["releases"]} == reply["releases"]


def test_the_node_client_gets_not_modified_for_the_current_etag(
        sandbox: Sandbox, run_node_client: RunNodeClient) -> None:
    etag = _fire(sandbox, run_node_client, {"serviceIds": ["svc-search"]})["response"]["etag"]
    again = _fire(sandbox, run_node_client, {"serviceIds": ["svc-search"], "ifNoneMatch": etag})
    assert again["response"] == {"notModified": True, "etag": etag}


def test_a_refusal_reaches_the_node_client_as_a_typed_response_error(
        sandbox: Sandbox, run_node_client: RunNodeClient) -> None:
    refused = _fire(sandbox, run_node_client, {"limit": 0})
    assert refused["ok"] is False
    assert refused["errorClass"] == "TypedResponseError", refused
    assert refused["data"]["code"] == "INVALID_REQUEST" and refused["data"]["field"] == "limit"
