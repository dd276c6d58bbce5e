"""Batch reads and conditional resync against the real sandbox (loopback HTTPS).

The same plan whether the live side offers the [ext] batch reads or not (byte for
byte, but for one note per cluster read app by app); a batch page failing mid-way
silences only the apps it had to carry; a cluster that advertises the route but answers
404 is read app by app, said once; an unchanged fleet's resync costs the control plane
one request and each cluster two (its health and one ``304``); and the watcher's plan
shows an old answer as unknown, never converged.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reconciler import engine
from reconciler.core import freshness
from reconciler.core.evidence import Proof
from reconciler.core.live import LiveSnapshot, Observation, ObservationKind
from reconciler.core.plans import Plan, Verdict
from reconciler.render import jsonplan, text
from reconciler.sandbox import launcher
from reconciler.shell import observing
from reconciler.shell.controlplane import ControlPlaneClient
from reconciler.shell.endpoints import Connection, Overrides
from reconciler.shell.probing import Prober
from tests import sandboxes
from tests.e2e_repo import make_repo
from tests.sandboxes import APPS, desired

pytestmark = pytest.mark.integration

BATCH_PATH = "/host/api/v3/baas/deployment/apps/status"
HEALTH_PATH = "/api/v3/cluster/health"


@pytest.fixture(scope="module")
def sb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[launcher.Sandbox]:
    yield from sandboxes.for_module(tmp_path_factory, "batch")


@pytest.fixture(autouse=True)
def _clean_faults(request: pytest.FixtureRequest) -> Iterator[None]:
    if "sb" not in request.fixturenames:
        yield
        return
    sandbox: launcher.Sandbox = request.getfixturevalue("sb")
    sandbox.clear_faults()
    yield
    sandbox.clear_faults()


def conn_for(sb: launcher.Sandbox, tmp: Path) -> Connection:
    conn = Connection.build(desired(sb).settings, repo_root=tmp,
                            overrides=Overrides.from_env(sb.env()))
    return dataclasses.replace(conn, probe_timeout=2.0, call_timeout=5.0)


def snapshot(sb: launcher.Sandbox, tmp: Path, **prober: Any) -> LiveSnapshot:
    conn = conn_for(sb, tmp)

    async def go() -> LiveSnapshot:
        async with ControlPlaneClient(conn, token=sb.token) as client, \
                Prober(conn, signer_key=sb.signer_key_file, **prober) as probe:
            return await observing.observe_async(desired(sb), conn, env=sb.env(),
                                                 client=client, prober=probe)

    return asyncio.run(go())


def on(snap: LiveSnapshot, cluster: str) -> dict[str, Observation]:
    return {app: next(o for o in rows if o.cluster_id == cluster)
            for app, rows in snap.observations.items()}


def since(sb: launcher.Sandbox, source: str, mark: int) -> list[dict[str, Any]]:
    return sb.audit(source)[mark:]


# -- evidence rules on the wire ---------------------------------------------------------


def test_a_page_failing_mid_way_silences_only_the_apps_it_had_to_carry(
        sb: launcher.Sandbox, tmp_path: Path) -> None:
    # Two apps a page: [catalog, checkout] then [notifications, search].
    before = snapshot(sb, tmp_path, batch_page=2)
    assert all(o.kind is ObservationKind.ANSWERED for rows in before.observations.values()
               for o in rows), "precondition: every app has a record on every cluster"
    sb.fault("sn2", "batch-page-error", page=1)
    snap = snapshot(sb, tmp_path, batch_page=2)
    sn2 = on(snap, "sn2")
    assert {a for a, o in sn2.items() if o.kind is ObservationKind.ANSWERED} == \
        {"catalog", "checkout"}
    for app in ("notifications", "search"):
        assert sn2[app].kind is ObservationKind.SILENT, "never 'no record'"
        assert sn2[app].reason == ("batch status read failed on page 2: HTTP 500; this app "
                                   "was not on the 1 page(s) read before it")
    for cluster in ("sn1", "sn3"):
        assert all(o.kind is ObservationKind.ANSWERED for o in on(snap, cluster).values())


def test_the_first_page_failing_silences_that_cluster_for_every_app(
        sb: launcher.Sandbox, tmp_path: Path) -> None:
    sb.fault("sn1", "batch-page-error", page=0)
    sn1 = on(snapshot(sb, tmp_path), "sn1")
    assert {o.kind for o in sn1.values()} == {ObservationKind.SILENT}
    assert {o.reason for o in sn1.values()} == {
        "batch status read failed on page 1: HTTP 500"}


def test_a_cluster_advertising_the_route_but_answering_404_is_read_app_by_app_said_once(
        sb: launcher.Sandbox, tmp_path: Path) -> None:
    sb.fault("sn3", "batch-route-missing")
    mark = len(sb.audit("sn3"))
    snap = snapshot(sb, tmp_path)
    assert all(o.kind is ObservationKind.ANSWERED for rows in snap.observations.values()
               for o in rows)
    address = sb.addresses["sn3"]
    assert snap.mesh.notes == (
        f"cluster sn3 ({address}) advertises the batch status route {BATCH_PATH} but "
        "answered 404 on it; read app by app",)
    gets = [(e["path"], e["status"]) for e in since(sb, "sn3", mark) if e["method"] == "GET"]
    assert gets.count((BATCH_PATH, 404)) == 1
    assert len([p for p, s in gets if p.endswith("/status") and p != BATCH_PATH
                and s == 200]) == len(APPS)
    # The other clusters still answer in one page each.
    assert [e["path"] for e in sb.audit("sn1")[-1:]] == [BATCH_PATH]


def test_the_fallback_is_said_once_in_the_plan_a_reader_sees(
        sb: launcher.Sandbox, tmp_path: Path) -> None:
    sb.fault("sn3", "batch-route-missing")
    repo = make_repo(tmp_path, sb)
    env = repo.env()
    made = engine.plan(repo.path, overrides=Overrides.from_env(env), env=env)
    said = (f"cluster sn3 ({sb.addresses['sn3']}) advertises the batch status route "
            f"{BATCH_PATH} but answered 404 on it; read app by app")
    assert made.notes == (said,)
    rendered = text.render(made)
    assert rendered.count("answered 404 on it") == 1
    assert f"note: {said}" in rendered
    assert jsonplan.from_wire(json.loads(jsonplan.dumps(made))).notes == (said,)


# -- batch on and off: the same plan ------------------------------------------------------


def settled_plan(repo_path: Path, env: dict[str, str]) -> tuple[str, str]:
    """The plan's JSON and text once two plans in a row agree (the sandbox's clusters
    converge asynchronously after a start), with the snapshot's time fixed."""
    previous: tuple[str, str] | None = None
    for _ in range(40):
        made = engine.plan(repo_path, overrides=Overrides.from_env(env), env=env)
        pinned = made.model_copy(update={"created_at": 0})
        current = (jsonplan.dumps(pinned), text.render(pinned))
        if current == previous:
            return current
        previous = current
        time.sleep(0.25)
    raise AssertionError("the sandbox did not settle")


def test_batch_reads_on_and_off_give_the_same_plan_byte_for_byte(tmp_path: Path) -> None:
    state = tmp_path / "sandbox"
    sandbox = launcher.start(state)
    port, mesh_port = sandbox.control_plane_port, sandbox.mesh_port
    try:
        repo = make_repo(tmp_path, sandbox)
        # A service to create carries the control plane's preflight report, stamped with
        # the time it was made: not a read of the fleet, so not compared here.
        for doc in (repo.path / "services").glob("*.yaml"):
            if "\ncreate:" in doc.read_text(encoding="utf-8"):
                doc.unlink()
                # ...and the grant entry naming it (a grant of an undeclared service is
                # invalid desired state).
                grants = repo.path / "grants" / "deploy-bot.yaml"
                lines = grants.read_text(encoding="utf-8").splitlines(keepends=True)
                at = lines.index(f"  - service: {doc.stem}\n")
                del lines[at:at + 2]  # the entry and its capabilities line
                grants.write_text("".join(lines), encoding="utf-8")
        repo.commit("only services that exist")
        env = repo.env()
        batched = settled_plan(repo.path, env)
        used = {e["path"] for e in sandbox.audit("sn1")}
        assert BATCH_PATH in used
        assert "getServicesReleases" in {e["method"] for e in sandbox.audit()}
    finally:
        sandbox.stop()
    # The same state, ports and CA; only the [ext] batch reads are gone (the upstream).
    sandbox = launcher.start(state, port=port, mesh_port=mesh_port, batch_reads=False)
    try:
        marks = {c: len(sandbox.audit(c)) for c in ("control-plane", *sandbox.clusters)}
        one_by_one = settled_plan(repo.path, env)
        paths = [e["path"] for c in sandbox.clusters for e in since(sandbox, c, marks[c])]
        assert BATCH_PATH not in paths
        assert any(p.endswith("/checkout/status") for p in paths)  # app by app
        methods = {e["method"] for e in since(sandbox, "control-plane", marks["control-plane"])}
        assert "getServiceImageReleases" in methods and "getServicesReleases" not in methods
    finally:
        sandbox.stop()
    # The same plan, but for the notes: the upstream's per-item reads are said once per
    # cluster (as the 404 fallback is), never once per app or per read.
    said = tuple(f"cluster {c} ({sandbox.addresses[c]}) offers no batch status route; "
                 "read app by app" for c in sorted(sandbox.clusters))
    assert tuple(sorted(json.loads(one_by_one[0])["notes"])) == said
    assert json.loads(batched[0])["notes"] == []
    for note in said:
        assert one_by_one[1].count(note) == 1 and f"note: {note}" in one_by_one[1]
    assert without_notes(one_by_one[0]) == without_notes(batched[0])
    assert [line for line in one_by_one[1].splitlines() if not line.startswith("note: ")] \
        == batched[1].splitlines()
    assert json.loads(batched[0])["evidence"], "the plan carries evidence to compare"


def without_notes(plan_json: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(plan_json)
    document.pop("notes", None)
    document.pop("content_digest", None)  # a digest of the whole, notes included
    return document


# -- conditional resync and stale observations ---------------------------------------------


def test_an_unchanged_fleets_resync_costs_one_request_per_endpoint_and_a_health(
        tmp_path: Path, sb: launcher.Sandbox) -> None:
    repo = make_repo(tmp_path, sb)
    env = repo.env()
    steps = engine.WatchSteps(repo.path, overrides=Overrides.from_env(env), env=env)

    async def go() -> tuple[LiveSnapshot, LiveSnapshot, dict[str, list[dict[str, Any]]]]:
        loaded = steps.load()
        assert loaded.state is not None
        try:
            first = await steps.observe(loaded.state)
            # Settled: a read while a cluster is still converging would change the ETag.
            for _ in range(40):
                again = await steps.observe(loaded.state)
                if again.services == first.services and _runtimes(again) == _runtimes(first):
                    break
                first = again
                await asyncio.sleep(0.25)
            marks = {s: len(sb.audit(s)) for s in ("control-plane", *sb.clusters)}
            second = await steps.observe(loaded.state)
            return first, second, {s: since(sb, s, m) for s, m in marks.items()}
        finally:
            await steps.close()

    first, second, sent = asyncio.run(go())
    # A service the repo would create is asked about (its preflight) at every resync:
    # that is the creation's question, not the reading of the fleet.
    assert [e["method"] for e in sent["control-plane"]
            if e["method"] != "getDeploymentPreflight"] == ["getServices"]
    for cluster in sb.clusters:
        assert [(e["path"], e["status"]) for e in sent[cluster]] == [
            (HEALTH_PATH, 200), (BATCH_PATH, 304)], cluster
    assert second.services == first.services and _runtimes(second) == _runtimes(first)
    # The reused answers are confirmed now, not when first read: each cluster's 304 once
    # (the mesh view's ``confirmed``), which is when freshness says they were last said.
    assert sorted(c.cluster_id for c in second.mesh.confirmed) == sorted(sb.clusters)
    again = freshness.confirmations(second)
    assert min(freshness.observed_at(o, again) or 0
               for rows in second.observations.values() for o in rows) \
        >= max(o.observed_at or 0 for rows in first.observations.values() for o in rows)


def _runtimes(snap: LiveSnapshot) -> dict[str, list[Any]]:
    return {app: [(o.cluster_id, o.kind, o.runtime) for o in rows]
            for app, rows in snap.observations.items()}


def test_the_watchers_plan_shows_an_old_answer_unknown_never_converged(
        tmp_path: Path, sb: launcher.Sandbox) -> None:
    repo = make_repo(tmp_path, sb)
    env = repo.env()
    now = {"s": time.time()}
    steps = engine.WatchSteps(repo.path, overrides=Overrides.from_env(env), env=env,
                              clock=lambda: now["s"])

    async def go() -> tuple[LiveSnapshot, Any]:
        loaded = steps.load()
        assert loaded.state is not None
        try:
            return await steps.observe(loaded.state), loaded
        finally:
            await steps.close()

    snap, loaded = asyncio.run(go())
    assert loaded.state is not None
    newest = max(o.observed_at or 0 for rows in snap.observations.values() for o in rows)
    now["s"] = newest / 1000 + 1
    fresh: Plan = steps.plan(loaded.state, snap, loaded.provenance, max_age=60)
    assert not any("stale" in b.message for b in fresh.blockers)
    now["s"] = newest / 1000 + 75
    old: Plan = steps.plan(loaded.state, snap, loaded.provenance, max_age=60)
    assert old.verdict is Verdict.NO_GO
    assert all(p.proof is not Proof.CONVERGED for p in old.proofs)
    assert any("older than two resyncs (60 s)" in b.message for b in old.blockers)
