"""[ext] Batch reads on the sandbox (docs/extensions.md): the cluster batch status route,
``getServicesReleases``, ETags on both sides, the switch, and the two batch faults."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from reconciler.sandbox import launcher, store
from reconciler.sandbox.launcher import Sandbox
from tests.sandbox.wire import ControlPlaneClient, MeshClient, sandbox_cli, wait_for

pytestmark = pytest.mark.integration

BATCH = "/host/api/v3/baas/deployment/apps/status"
APPS = ["catalog", "checkout", "notifications", "search"]
SERVICES = ["svc-catalog", "svc-checkout", "svc-notifications", "svc-search"]
UNKNOWN_METHOD_TEXT = "There is no available method for this call on the server side"
#: Several deployer ticks (SYNC_INTERVAL_S = 0.1): "nothing changed" must hold across them.
QUIET_S = 1.0


class Batch:
    """Calls the batch route of one cluster with a token minted there."""

    def __init__(self, mesh: MeshClient, cluster_id: str = "sn1") -> None:
        self.mesh = mesh
        self.cluster_id = cluster_id
        self.token = mesh.login(cluster_id)

    def get(self, *, if_none_match: str | None = None, token: str | None = None,
            **params: str) -> httpx.Response:
        headers = {"Host": self.mesh.sb.gateway,
                   "Authorization": f"Bearer {token or self.token}"}
        if if_none_match is not None:
            headers["If-None-Match"] = if_none_match
        return self.mesh.http.get(self.mesh.url(self.cluster_id, BATCH), params=params,
                                  headers=headers,
                                  extensions={"sni_hostname": self.mesh.sb.gateway})

    def page(self, **params: str) -> dict[str, Any]:
        response = self.get(**params)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def every_app(self, **params: str) -> tuple[list[dict[str, Any]], int]:
        """All pages in order: the entries and how many pages it took."""
        apps: list[dict[str, Any]] = []
        pages = 0
        cursor = ""
        while True:
            body = self.page(cursor=cursor, **params)
            pages += 1
            apps += body["apps"]
            if body["nextCursor"] is None:
                return apps, pages
            cursor = body["nextCursor"]


@pytest.fixture
def batch(mesh: MeshClient) -> Batch:
    return Batch(mesh)


# -- the cluster batch route ------------------------------------------------------------------


def test_health_advertises_the_batch_route(mesh: MeshClient, sandbox: Sandbox) -> None:
    for cluster_id in sandbox.clusters:
        assert mesh.health(cluster_id).json()["extensions"] == {"batchStatus": BATCH}


def test_each_entry_is_exactly_the_per_app_status(batch: Batch, mesh: MeshClient) -> None:
    body = batch.page()
    assert body["nextCursor"] is None
    assert [a["appId"] for a in body["apps"]] == APPS
    for entry in body["apps"]:
        single = mesh.status("sn1", entry["appId"], batch.token)
        assert single.status_code == 200
        assert entry["status"] == single.json()
        assert set(entry) == {"appId", "status"}


def test_pages_follow_the_cursor_and_end_with_null(batch: Batch) -> None:
    apps, pages = batch.every_app(limit="1")
    assert [a["appId"] for a in apps] == APPS and pages == 4
    apps, pages = batch.every_app(limit="3")
    assert [a["appId"] for a in apps] == APPS and pages == 2


def test_apps_without_a_record_are_absent(batch: Batch) -> None:
    body = batch.page(appIds="search,no-such-app,checkout,search")
    assert [a["appId"] for a in body["apps"]] == ["checkout", "search"]
    apps, pages = batch.every_app(appIds="zzz,search,checkout,notifications", limit="2")
    assert [a["appId"] for a in apps] == ["checkout", "notifications", "search"]
    assert pages == 2
    assert batch.page(appIds="") == {"apps": [], "nextCursor": None}


def test_the_route_wants_a_token_of_this_cluster(batch: Batch, mesh: MeshClient) -> None:
    other = mesh.login("sn2")
    assert batch.get(token=other).status_code == 401
    response = mesh.request("GET", "sn1", BATCH)
    assert response.status_code == 401


@pytest.mark.parametrize("params", [{"limit": "0"}, {"limit": "many"},
                                    {"cursor": "not-a-cursor"}])
def test_a_bad_limit_or_cursor_is_400(batch: Batch, params: dict[str, str]) -> None:
    response = batch.get(**params)
    assert response.status_code == 400
    assert ("limit" if "limit" in params else "cursor") in response.json()["error"]


def test_an_unchanged_page_is_304_until_something_changes(
        batch: Batch, sandbox: Sandbox, cp: ControlPlaneClient) -> None:
    first = batch.get(limit="2")
    etag = first.headers["ETag"]
    assert first.status_code == 200 and etag.startswith('"')
    time.sleep(QUIET_S)  # deployer ticks that converge nothing move no revision
    again = batch.get(limit="2", if_none_match=etag)
    assert again.status_code == 304 and again.content == b""
    assert again.headers["ETag"] == etag
    assert batch.get(limit="3").headers["ETag"] != etag  # the query is part of it
    # A fault that changes no record leaves the ETag alone; one that changes the view
    # (and every entry's body) does not.
    sandbox.fault("sn1", "latency", ms=1)
    assert batch.get(limit="2", if_none_match=etag).status_code == 304
    sandbox.fault("sn1", "failed")
    failed = batch.get(limit="2", if_none_match=etag)
    assert failed.status_code == 200
    assert failed.json()["apps"][0]["status"]["runtime"]["runtimeState"] == "FAILED"
    sandbox.fault("sn1", "failed", on=False)
    # Promoting checkout changes its record on sn1, so the page holding it changes.
    release = cp.release_by_tag("svc-checkout", "v2.4.0")
    assert "error" not in cp.promote("svc-checkout", release["id"])
    wait_for(lambda: batch.page(appIds="checkout")["apps"][0]["status"]["runtime"]
             ["resolvedDigest"] == release["data"]["registryRootDigest"])
    changed = batch.get(limit="2", if_none_match=etag)
    assert changed.status_code == 200 and changed.headers["ETag"] != etag
    sandbox.wait_settled()
    settled = batch.get(limit="2").headers["ETag"]
    time.sleep(QUIET_S)
    assert batch.get(limit="2", if_none_match=settled).status_code == 304


def test_a_restarted_cluster_never_reuses_an_etag(batch: Batch, sandbox: Sandbox,
                                                   mesh: MeshClient) -> None:
    etag = batch.get().headers["ETag"]
    sandbox.restart("sn1")
    fresh = Batch(mesh)
    response = fresh.get(if_none_match=etag)
    assert response.status_code == 200 and response.headers["ETag"] != etag


# -- faults on the batch route ----------------------------------------------------------------


def test_batch_page_error_fails_exactly_that_page(batch: Batch, sandbox: Sandbox) -> None:
    cursors = [""]
    while True:
        following = batch.page(cursor=cursors[-1], limit="1")["nextCursor"]
        if following is None:
            break
        cursors.append(following)
    assert len(cursors) == 4
    sandbox.fault("sn1", "batch-page-error", page=1)
    codes = [batch.get(cursor=c, limit="1").status_code for c in cursors]
    assert codes == [200, 500, 200, 200]
    sandbox.fault("sn1", "batch-page-error")  # default: the first page
    assert batch.get(limit="1").status_code == 500
    assert batch.get(cursor=cursors[1], limit="1").status_code == 200
    assert batch.mesh.status("sn1", "checkout", batch.token).status_code == 200


def test_batch_route_missing_is_advertised_and_answers_404(
        batch: Batch, sandbox: Sandbox, mesh: MeshClient) -> None:
    sandbox.fault("sn2", "batch-route-missing")
    assert mesh.health("sn2").json()["extensions"] == {"batchStatus": BATCH}
    missing = Batch(mesh, "sn2")
    response = missing.get()
    assert response.status_code == 404
    assert response.json() == {"error": "Not found"}  # the reply of any unknown route
    assert mesh.status("sn2", "checkout", missing.token).status_code == 200
    assert batch.get().status_code == 200  # sn1 is unaffected


@pytest.mark.parametrize("kind", ["garbage", "truncated"])
def test_body_faults_break_every_page_even_a_conditional_one(
        batch: Batch, sandbox: Sandbox, kind: str) -> None:
    etag = batch.get().headers["ETag"]
    sandbox.fault("sn1", kind)
    response = batch.get(if_none_match=etag)
    assert response.status_code == 200 and "ETag" not in response.headers
    with pytest.raises(ValueError):
        json.loads(response.content)


# -- the control plane ------------------------------------------------------------------------


def test_services_releases_equal_the_per_item_replies(cp: ControlPlaneClient) -> None:
    reply = cp.ok("getServicesReleases")
    assert list(reply["releases"]) == SERVICES and reply["nextCursor"] is None
    for service_id, releases in reply["releases"].items():
        assert releases == cp.releases(service_id)
    assert isinstance(reply["etag"], str) and reply["etag"]


def test_services_releases_pages_and_absent_services(cp: ControlPlaneClient) -> None:
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        request: dict[str, Any] = {"limit": 3}
        if cursor is not None:
            request["cursor"] = cursor
        reply = cp.ok("getServicesReleases", **request)
        seen += list(reply["releases"])
        pages += 1
        cursor = reply["nextCursor"]
        if cursor is None:
            break
    assert seen == SERVICES and pages == 2
    reply = cp.ok("getServicesReleases", serviceIds=["svc-search", "svc-gone", "svc-checkout"],
                  limit=1)
    assert list(reply["releases"]) == ["svc-checkout"]
    reply = cp.ok("getServicesReleases", serviceIds=["svc-search", "svc-gone", "svc-checkout"],
                  limit=1, cursor=reply["nextCursor"])
    assert list(reply["releases"]) == ["svc-search"] and reply["nextCursor"] is None


def test_a_service_without_releases_maps_to_an_empty_list(sandbox: Sandbox,
                                                          cp: ControlPlaneClient) -> None:
    sandbox.seed({"services": [{"id": "svc-empty", "name": "empty"},
                               {"id": "svc-one", "name": "one", "releases": [{"tag": "v1"}]}]})
    reply = cp.ok("getServicesReleases")
    assert reply["releases"]["svc-empty"] == []
    assert [r["data"]["observedTags"] for r in reply["releases"]["svc-one"]] == [["v1"]]


@pytest.mark.parametrize("request_", [{"serviceIds": "svc-checkout"}, {"serviceIds": [""]},
                                      {"limit": 0}, {"limit": "3"}, {"cursor": "nope"},
                                      {"ifNoneMatch": 7}])
def test_bad_batch_requests_are_invalid(cp: ControlPlaneClient,
                                        request_: dict[str, Any]) -> None:
    assert cp.error("getServicesReleases", **request_)["data"]["code"] == "INVALID_REQUEST"


def test_the_batch_method_needs_an_identity_and_no_admin(sandbox: Sandbox,
                                                          cp: ControlPlaneClient) -> None:
    anonymous = cp.raw("getServicesReleases", identity={"jwt": "sbxjwt.unknown"},
                       ifNoneMatch=cp.ok("getServices")["etag"])
    assert anonymous["error"]["data"]["code"] == "UNAUTHORIZED"
    assert sandbox.deploy_bot_token_file is not None
    bot = ControlPlaneClient(sandbox, token=sandbox.deploy_bot_token_file.read_text().strip())
    try:
        assert list(bot.ok("getServicesReleases")["releases"]) == SERVICES
    finally:
        bot.close()


def test_one_etag_for_the_fleet_reads_and_not_modified(cp: ControlPlaneClient) -> None:
    etag = cp.ok("getServices")["etag"]
    assert cp.ok("getServicesReleases")["etag"] == etag
    assert cp.ok("getServiceDeploymentGrants")["etag"] == etag
    for method in ("getServices", "getServicesReleases", "getServiceDeploymentGrants"):
        assert cp.ok(method, ifNoneMatch=etag) == {"notModified": True, "etag": etag}
        full = cp.ok(method, ifNoneMatch="stale")
        assert full["etag"] == etag and "notModified" not in full
    assert "etag" not in cp.ok("getServiceById", serviceId="svc-checkout")


def test_the_revision_moves_on_every_change_and_only_then(
        sandbox: Sandbox, cp: ControlPlaneClient) -> None:
    sandbox.wait_settled()
    etag = cp.ok("getServices")["etag"]
    time.sleep(QUIET_S)  # clusters keep syncing, reporting nothing new
    assert cp.ok("getServices", ifNoneMatch=etag)["notModified"] is True
    service = cp.service("svc-search")
    egress = [*service["data"]["egress"], {"host": "extra.example.net", "port": 443}]
    cp.ok("setServiceEgress", serviceId="svc-search", egress=egress, idempotencyKey="k-egress",
          expectedEgressRevision=service["data"]["egressRevision"])
    after_write = cp.ok("getServices", ifNoneMatch=etag)
    assert "notModified" not in after_write and after_write["etag"] != etag
    # A replayed idempotent write changes nothing: the revision stays.
    cp.ok("setServiceEgress", serviceId="svc-search", egress=egress, idempotencyKey="k-egress",
          expectedEgressRevision=service["data"]["egressRevision"])
    assert cp.ok("getServices", ifNoneMatch=after_write["etag"])["notModified"] is True
    # A promotion moves it, and so do the clusters' reports as the rollout converges.
    release = cp.release_by_tag("svc-checkout", "v2.4.0")
    promoted = cp.ok("getServices")["etag"]
    assert "error" not in cp.promote("svc-checkout", release["id"])
    assert cp.ok("getServices", ifNoneMatch=promoted).get("notModified") is None
    sandbox.wait_settled()
    settled = cp.ok("getServices")
    status = next(s for s in settled["services"] if s["id"] == "svc-checkout")
    assert status["data"]["imageRolloutStatus"]["status"] == "succeeded"
    time.sleep(QUIET_S)
    assert cp.ok("getServices", ifNoneMatch=settled["etag"])["notModified"] is True
    sandbox.push("checkout", "v2.5.0")
    assert cp.ok("getServicesReleases", ifNoneMatch=settled["etag"]).get("notModified") is None


# -- the switch -------------------------------------------------------------------------------


def test_switched_off_nothing_is_advertised_or_served(
        sandbox_factory: Callable[..., Sandbox]) -> None:
    sb = sandbox_factory(batch_reads=False, clusters=1)
    mesh = MeshClient(sb)
    cp = ControlPlaneClient(sb)
    try:
        assert "extensions" not in mesh.health("sn1").json()
        response = Batch(mesh).get()
        assert response.status_code == 404 and response.json() == {"error": "Not found"}
        assert mesh.status("sn1", "checkout").status_code == 200
        error = cp.error("getServicesReleases")
        assert error == {"text": UNKNOWN_METHOD_TEXT, "data": {}}
        assert "getServicesReleases" not in cp.ok("getCapabilities")["methods"]
        services = cp.ok("getServices", ifNoneMatch="anything")
        assert "etag" not in services and "notModified" not in services
        assert "etag" not in cp.ok("getServiceDeploymentGrants")
        assert json.loads((sb.state_dir / launcher.DESCRIPTOR).read_text())["batchReads"] is False
        assert launcher.attach(sb.state_dir).batch_reads is False
        sb.restart("sn1")  # a restart keeps the switch
        assert "extensions" not in mesh.health("sn1").json()
    finally:
        mesh.close()
        cp.close()


def test_cli_up_no_batch_reads(tmp_path: Path) -> None:
    state = tmp_path / "cli"
    run = sandbox_cli(state, timeout=60)

    up = run("up", "--detach", "--port", "0", "--mesh-port", "0", "--clusters", "1",
             "--no-batch-reads")
    assert up.returncode == 0, up.stderr
    assert "batch reads     off" in up.stdout
    sb = launcher.attach(state)
    mesh = MeshClient(sb)
    try:
        assert sb.batch_reads is False
        assert "extensions" not in mesh.health("sn1").json()
    finally:
        mesh.close()
        down = run("down")
    assert down.returncode == 0, down.stderr


def test_switched_on_the_method_is_listed(cp: ControlPlaneClient, sandbox: Sandbox) -> None:
    assert "getServicesReleases" in cp.ok("getCapabilities")["methods"]
    assert launcher.attach(sandbox.state_dir).batch_reads is True


def test_a_fresh_sandbox_starts_quiet(cp: ControlPlaneClient, batch: Batch) -> None:
    etag = cp.ok("getServices")["etag"]
    page = batch.get().headers["ETag"]
    time.sleep(QUIET_S)  # clusters adopt the seed and report it: that changes nothing
    assert cp.ok("getServices", ifNoneMatch=etag) == {"notModified": True, "etag": etag}
    assert batch.get(if_none_match=page).status_code == 304


def test_get_services_equals_the_per_item_reads_across_changes(
        sandbox: Sandbox, cp: ControlPlaneClient) -> None:
    def same() -> None:
        services = cp.ok("getServices")["services"]
        assert [s["id"] for s in services] == SERVICES
        for service in services:
            assert service == cp.service(service["id"])

    same()
    release = cp.release_by_tag("svc-checkout", "v2.4.0")
    assert "error" not in cp.promote("svc-checkout", release["id"])
    same()  # pending: one service's status recomputed, the others reused
    sandbox.wait_settled()
    same()
    sandbox.seed({"services": [{"id": "svc-solo", "name": "solo",
                                "releases": [{"tag": "v1"}], "current": "v1"}]})
    services = cp.ok("getServices")["services"]
    assert [s["id"] for s in services] == ["svc-solo"]
    assert services[0] == cp.service("svc-solo")


def test_a_promotion_makes_clusters_report_that_service_only(
        sandbox: Sandbox, cp: ControlPlaneClient) -> None:
    # Resending every report on every change would make an apply of n services cost
    # n x n report comparisons on the control plane.
    def syncs(cluster_id: str) -> list[dict[str, Any]]:
        return [row for row in store.read_audit(sandbox.state_dir, cluster_id)
                if row["method"] == "sandboxClusterSync"]

    before = {cid: len(syncs(cid)) for cid in sandbox.clusters}
    release = cp.release_by_tag("svc-checkout", "v2.4.0")
    assert "error" not in cp.promote("svc-checkout", release["id"])
    sandbox.wait_settled()
    after = [row for cid in sandbox.clusters for row in syncs(cid)[before[cid]:]]
    assert {row["reports"] for row in after} == {1}, after
    assert len(after) >= len(sandbox.clusters)  # every cluster reported the rollout
