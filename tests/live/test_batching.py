"""Batch status reads against an in-process fake mesh: the evidence rules of a listing,
the fallback, and conditional re-reads (the real-wire cases are in test_batch_reads)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import httpx

from reconciler.core.live import MeshView, Observation, ObservationKind
from reconciler.shell.probing import Prober
from tests.live.fakes import BATCH_PATH, FakeCluster, FakeMesh, connection, runtime, signer_pem

KEY = signer_pem()
APPS = ("a1", "a2", "a3", "a4", "a5")


def batch_mesh(apps: Sequence[str] = APPS, **options: Any) -> FakeMesh:
    return FakeMesh({f"127.0.0.{i + 2}": FakeCluster(
        f"sn{i + 1}", status={a: runtime(a) for a in apps}, batch=True, **options)
        for i in range(3)})


def probe(mesh: FakeMesh, apps: Sequence[str] = APPS, *, passes: int = 1, page: int = 2,
          ) -> tuple[MeshView, dict[str, tuple[Observation, ...]]]:
    async def go() -> tuple[MeshView, dict[str, tuple[Observation, ...]]]:
        async with Prober(connection(), signer_key=KEY, transport=mesh.transport(),
                          batch_page=page) as prober:
            result: dict[str, tuple[Observation, ...]] = {}
            for _ in range(passes):
                prober.forget_mesh()
                result = await prober.observe_apps(apps)
            return await prober.resolve(), result

    return asyncio.run(go())


def on(rows: dict[str, tuple[Observation, ...]], cluster: str) -> dict[str, Observation]:
    return {app: next(o for o in obs if o.cluster_id == cluster) for app, obs in rows.items()}


def requests_to(mesh: FakeMesh, address: str, path: str) -> list[httpx.Request]:
    return [r for r in mesh.seen if r.url.host == address and r.url.path == path]


def test_a_batch_listing_answers_every_app_in_pages_not_one_request_each() -> None:
    mesh = batch_mesh()
    _, rows = probe(mesh)
    assert all(o.kind is ObservationKind.ANSWERED and o.observed_at for obs in rows.values()
               for o in obs)
    pages = requests_to(mesh, "127.0.0.2", BATCH_PATH)
    assert len(pages) == 3  # five apps, two per page
    assert pages[0].url.params["appIds"] == ",".join(APPS)
    assert not [r for r in mesh.seen if r.url.path.endswith("/a1/status")]


def test_an_app_missing_from_a_complete_listing_has_no_record() -> None:
    mesh = batch_mesh()
    mesh.clusters["127.0.0.3"].status["a3"] = 404
    _, rows = probe(mesh)
    assert on(rows, "sn2")["a3"].kind is ObservationKind.NO_RECORD
    assert on(rows, "sn1")["a3"].kind is ObservationKind.ANSWERED


def test_a_failed_page_makes_the_apps_not_yet_carried_silent_never_no_record() -> None:
    mesh = batch_mesh()
    mesh.clusters["127.0.0.3"].batch_pages[1] = 500
    _, rows = probe(mesh)
    sn2 = on(rows, "sn2")
    assert [sn2[a].kind for a in ("a1", "a2")] == [ObservationKind.ANSWERED] * 2
    for app in ("a3", "a4", "a5"):
        assert sn2[app].kind is ObservationKind.SILENT
        assert sn2[app].reason == ("batch status read failed on page 2: HTTP 500; this app "
                                   "was not on the 1 page(s) read before it")
    assert all(o.kind is ObservationKind.ANSWERED for o in on(rows, "sn1").values())


def test_the_last_page_failing_silences_exactly_its_apps() -> None:
    mesh = batch_mesh()
    mesh.clusters["127.0.0.3"].batch_pages[2] = b'{"apps": [{"appId": "a5", "sta'
    _, rows = probe(mesh)
    sn2 = on(rows, "sn2")
    assert [a for a, o in sn2.items() if o.kind is ObservationKind.SILENT] == ["a5"]
    assert "page 3: malformed JSON" in (sn2["a5"].reason or "")


def test_a_malformed_entry_silences_that_app_only() -> None:
    mesh = batch_mesh()
    mesh.clusters["127.0.0.2"].status["a2"] = {**runtime("a2"), "runtime": "not an object"}
    _, rows = probe(mesh)
    sn1 = on(rows, "sn1")
    assert sn1["a2"].kind is ObservationKind.SILENT
    assert sn1["a2"].reason == "batch status entry: malformed status: runtime is not an object"
    assert sn1["a1"].kind is sn1["a3"].kind is ObservationKind.ANSWERED


def test_an_entry_answering_for_another_app_is_not_taken_as_this_apps() -> None:
    mesh = batch_mesh()
    mesh.clusters["127.0.0.2"].status["a1"] = runtime("a4")
    _, rows = probe(mesh)
    assert on(rows, "sn1")["a1"].kind is ObservationKind.SILENT
    assert "answered for another app" in (on(rows, "sn1")["a1"].reason or "")


def test_an_app_listed_on_two_pages_is_silent() -> None:
    mesh = batch_mesh()
    mesh.clusters["127.0.0.2"].batch_pages[1] = {
        "apps": [{"appId": "a1", "status": runtime("a1")}], "nextCursor": None}
    _, rows = probe(mesh)
    sn1 = on(rows, "sn1")
    assert sn1["a1"].kind is ObservationKind.SILENT and "two pages" in (sn1["a1"].reason or "")
    # The listing ended after page 2: apps it never carried have no record.
    assert sn1["a3"].kind is ObservationKind.NO_RECORD


def test_a_cursor_that_never_ends_is_a_failed_page() -> None:
    mesh = batch_mesh()
    mesh.clusters["127.0.0.2"].batch_pages[1] = {"apps": [], "nextCursor": "1"}
    _, rows = probe(mesh)
    sn1 = on(rows, "sn1")
    assert sn1["a5"].kind is ObservationKind.SILENT
    assert "did not end" in (sn1["a5"].reason or "")


def test_an_advertised_route_answering_404_falls_back_app_by_app_said_once() -> None:
    mesh = batch_mesh(batch_missing=False)
    mesh.clusters["127.0.0.4"].batch_missing = True
    view, rows = probe(mesh)
    assert all(o.kind is ObservationKind.ANSWERED for obs in rows.values() for o in obs)
    assert len(requests_to(mesh, "127.0.0.4", BATCH_PATH)) == 1
    assert len([r for r in mesh.seen if r.url.host == "127.0.0.4"
                and r.url.path.endswith("/status") and r.url.path != BATCH_PATH]) == len(APPS)
    assert view.notes == ("cluster sn3 (127.0.0.4) advertises the batch status route "
                          f"{BATCH_PATH} but answered 404 on it; read app by app",)


def test_an_unchanged_listing_is_confirmed_with_one_conditional_request() -> None:
    mesh = batch_mesh(etag='"rev-7"')

    async def go() -> tuple[dict[str, tuple[Observation, ...]], ...]:
        async with Prober(connection(), signer_key=KEY, transport=mesh.transport(),
                          batch_page=2) as prober:
            first = await prober.observe_apps(APPS)
            mesh.seen.clear()
            prober.forget_mesh()  # a new pass, as the watcher's resync
            return first, await prober.observe_apps(APPS)

    first, second = asyncio.run(go())
    for address in mesh.clusters:
        sent = [r for r in mesh.seen if r.url.host == address]
        assert [r.url.path for r in sent] == ["/api/v3/cluster/health", BATCH_PATH]
        assert sent[1].headers["If-None-Match"] == '"rev-7"'
    assert {app: [o.runtime for o in obs] for app, obs in second.items()} == \
        {app: [o.runtime for o in obs] for app, obs in first.items()}
    # A 304 is a fresh confirmation: the reused answers carry the time of the 304.
    assert all(n.observed_at and o.observed_at and n.observed_at >= o.observed_at
               for app in APPS for n, o in zip(second[app], first[app], strict=True))


def test_a_changed_listing_is_read_again_in_full() -> None:
    mesh = batch_mesh(etag='"rev-7"')

    async def go() -> dict[str, tuple[Observation, ...]]:
        async with Prober(connection(), signer_key=KEY, transport=mesh.transport(),
                          batch_page=2) as prober:
            await prober.observe_apps(APPS)
            for cluster in mesh.clusters.values():
                cluster.etag = '"rev-8"'
                cluster.status["a4"] = 404
            prober.forget_mesh()
            return await prober.observe_apps(APPS)

    rows = asyncio.run(go())
    assert on(rows, "sn1")["a4"].kind is ObservationKind.NO_RECORD


def test_a_cluster_without_the_extension_is_read_app_by_app_as_before() -> None:
    mesh = batch_mesh()
    mesh.clusters["127.0.0.2"].batch = False
    view, rows = probe(mesh)
    assert not requests_to(mesh, "127.0.0.2", BATCH_PATH)
    assert all(o.kind is ObservationKind.ANSWERED for obs in rows.values() for o in obs)
    # Said once, for that cluster only: the others read in pages.
    assert view.notes == ("cluster sn1 (127.0.0.2) offers no batch status route; "
                          "read app by app",)


def test_an_etag_that_is_not_an_ascii_entity_tag_is_never_sent_back(
        monkeypatch: Any) -> None:
    # An If-None-Match built from it could not even be encoded: the next read of the
    # cluster would fail. It is not remembered, so the next pass reads in full.
    original = FakeMesh.batch_page

    def foreign_etag(cluster: FakeCluster, request: httpx.Request) -> httpx.Response:
        reply = original(cluster, request)
        return httpx.Response(reply.status_code, content=reply.content, headers=[
            (b"ETag", b'"\xc3\xa9tag"'), (b"content-type", b"application/json")])

    monkeypatch.setattr(FakeMesh, "batch_page", staticmethod(foreign_etag))
    mesh = batch_mesh()
    _, rows = probe(mesh, passes=2)
    assert all(o.kind is ObservationKind.ANSWERED for obs in rows.values() for o in obs)
    assert not any("If-None-Match" in r.headers for r in mesh.seen)


def test_a_reader_that_breaks_silences_its_cluster_with_what_happened(
        monkeypatch: Any) -> None:
    # Whatever no reader anticipated ends as silence with the real reason, for that
    # cluster's apps only -- never as "the deadline passed", never as a stray traceback.
    from reconciler.shell.probing import batching

    original = batching.BatchReader.read

    async def breaks_on_sn2(self: Any, cluster: str, *args: Any) -> bool:
        if cluster == "sn2":
            raise RuntimeError("unforeseen reply")
        return await original(self, cluster, *args)

    monkeypatch.setattr(batching.BatchReader, "read", breaks_on_sn2)
    _, rows = probe(batch_mesh())
    broken = on(rows, "sn2")
    assert all(o.kind is ObservationKind.SILENT and o.reason ==
               "reading this cluster failed: RuntimeError: unforeseen reply"
               for o in broken.values())
    assert all(o.kind is ObservationKind.ANSWERED for cluster in ("sn1", "sn3")
               for o in on(rows, cluster).values())
