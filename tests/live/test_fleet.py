"""The control plane's half of a snapshot over a fake: releases in [ext] pages or one by
one with the same meaning, and the conditional re-read of an unchanged fleet."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import httpx
import pytest

from reconciler.core.live import LiveService, ReadFailure
from reconciler.shell.controlplane import ControlPlaneClient, ProtocolError, fleet
from reconciler.shell.progress import NullProgress
from tests.live.fakes import CANARY, FakeControlPlane, connection, error

IDS = ("svc-a", "svc-b", "svc-c")
ALL_METHODS = {"methods": ["getServices", "getServicesReleases", "getServiceImageReleases",
                           "getServiceDeploymentGrants", "getCapabilities"]}


def raw(service_id: str) -> dict[str, Any]:
    return {"id": service_id, "data": {"name": service_id.removeprefix("svc-"),
                                       "egressRevision": 0}}


def release(service_id: str) -> dict[str, Any]:
    return {"id": f"rel-{service_id}", "data": {
        "registryHost": "registry.test", "repository": f"shop/{service_id}",
        "registryRootDigest": "sha256:" + "b" * 64,
        "manifestMediaType": "application/vnd.oci.image.index.v1+json",
        "observedTags": ["v1"], "firstObservedAt": 1}}


def paged(env: dict[str, Any], per_page: int = 2, etag: str | None = None) -> dict[str, Any]:
    """getServicesReleases over IDS: ``per_page`` services a page, cursor = index."""
    request = env["request"]
    wanted = sorted(request.get("serviceIds") or IDS)
    index = int(request.get("cursor") or 0)
    page = wanted[index * per_page:(index + 1) * per_page]
    more = (index + 1) * per_page < len(wanted)
    reply: dict[str, Any] = {"releases": {s: [release(s)] for s in page},
                             "nextCursor": str(index + 1) if more else None}
    return reply if etag is None else {**reply, "etag": etag}


def control_plane(**script: list[Any]) -> FakeControlPlane:
    base: dict[str, list[Any]] = {
        "getCapabilities": [ALL_METHODS],
        "getServices": [{"services": [raw(s) for s in IDS]}],
        "getServicesReleases": [paged],
        "getServiceImageReleases": [lambda env: {"releases": [release(
            env["request"]["serviceId"])]}],
        "getServiceDeploymentGrants": [{"grants": []}],
    }
    base.update(script)
    return FakeControlPlane(script=base)


def read(cp: FakeControlPlane, ids: Sequence[str] = IDS, *, passes: int = 1,
         memory: fleet.Memory | None = None) -> list[fleet.Fleet]:
    """``passes`` reads with one client (and ``memory``, when given); what was sent is
    cleared before the last pass, so ``cp.sent`` holds what that one cost."""
    async def go() -> list[fleet.Fleet]:
        async with ControlPlaneClient(connection(), token=CANARY,
                                      transport=cp.transport()) as client:
            out = []
            for number in range(passes):
                if number == passes - 1 and passes > 1:
                    cp.sent.clear()
                out.append(await fleet.read(client, list(ids), NullProgress(), memory))
            return out

    return asyncio.run(go())


def read_through(handle: Callable[[httpx.Request], Awaitable[httpx.Response]],
                 ids: Sequence[str]) -> fleet.Fleet:
    """One read whose every request goes through ``handle`` (which may hold it back)."""
    async def go() -> fleet.Fleet:
        async with ControlPlaneClient(connection(), token=CANARY,
                                      transport=httpx.MockTransport(handle)) as client:
            return await fleet.read(client, list(ids), NullProgress())

    return asyncio.run(go())


def methods(cp: FakeControlPlane) -> list[str]:
    return [e["method"] for e in cp.sent if e["method"] != "getIdentityByToken"]


def test_releases_come_in_pages_when_the_control_plane_offers_them() -> None:
    cp = control_plane()
    [result] = read(cp)
    assert methods(cp).count("getServicesReleases") == 2  # three services, two a page
    assert "getServiceImageReleases" not in methods(cp)
    assert cp.calls("getServicesReleases")[0]["request"]["serviceIds"] == list(IDS)
    assert all(isinstance(s, LiveService) and s.releases[0].id == f"rel-{i}"
               for i, s in result.services.items())


def test_pages_and_one_by_one_read_the_same_fleet() -> None:
    [batched] = read(control_plane())
    upstream = control_plane(getCapabilities=[None])  # the seeds' control plane: unknown
    [one_by_one] = read(upstream)
    assert methods(upstream).count("getServiceImageReleases") == len(IDS)
    assert batched == one_by_one


def test_a_failed_page_is_a_read_failure_for_the_services_it_had_not_carried() -> None:
    cp = control_plane(getServicesReleases=[paged, error("INTERNAL", "page two broke")])
    [result] = read(cp)
    assert all(isinstance(result.services[s], LiveService) for s in ("svc-a", "svc-b"))
    failed = result.services["svc-c"]
    assert isinstance(failed, ReadFailure)
    assert failed.reason == ("getServicesReleases: INTERNAL: page two broke (page 2; this "
                             "service was not on a page read before it)")
    assert failed.code == "INTERNAL"


def test_a_listed_method_that_is_not_answered_falls_back_one_by_one() -> None:
    cp = control_plane(getServicesReleases=[None])
    [result] = read(cp)
    assert methods(cp).count("getServiceImageReleases") == len(IDS)
    assert all(isinstance(s, LiveService) for s in result.services.values())


def test_a_service_a_complete_listing_left_out_is_asked_for_on_its_own() -> None:
    cp = control_plane(getServicesReleases=[lambda env: {
        "releases": {"svc-a": [], "svc-b": []}, "nextCursor": None}])
    [result] = read(cp)
    assert [c["request"]["serviceId"] for c in cp.calls("getServiceImageReleases")] == \
        ["svc-c"]
    assert isinstance(result.services["svc-c"], LiveService)


def test_a_service_get_services_does_not_list_is_not_found_either_way() -> None:
    cp = control_plane()
    [result] = read(cp, (*IDS, "svc-gone"))
    gone = result.services["svc-gone"]
    assert isinstance(gone, ReadFailure) and gone.code == "SERVICE_NOT_FOUND"
    # The listing is asked for every managed id before getServices has answered; the
    # control plane leaves a service that does not exist out of it, and nothing asks
    # for that service on its own.
    assert "svc-gone" not in [c["request"]["serviceId"]
                              for c in cp.calls("getServiceImageReleases")]


def test_a_service_only_the_listing_carries_is_not_found() -> None:
    """Created between the two reads: getServices' word (it does not exist) stands."""
    cp = control_plane(getServices=[{"services": [raw(s) for s in IDS[:2]]}])
    [result] = read(cp)
    gone = result.services["svc-c"]
    assert isinstance(gone, ReadFailure) and gone.code == "SERVICE_NOT_FOUND"
    assert all(isinstance(result.services[s], LiveService) for s in IDS[:2])


def test_the_listing_does_not_wait_for_get_services() -> None:
    """getServices is the large reply: the releases listing is read while it is still
    being sent. Here getServices answers only once a listing page was asked for; a read
    that waited for getServices first would never get it (and fail on the deadline)."""
    cp = control_plane()
    asked = asyncio.Event()

    async def handle(request: httpx.Request) -> httpx.Response:
        method = json.loads(request.content).get("method")
        if method == "getServicesReleases":
            asked.set()
        elif method == "getServices":
            await asyncio.wait_for(asked.wait(), timeout=5)
        return cp.handle(request)

    result = read_through(handle, IDS)
    assert all(isinstance(s, LiveService) for s in result.services.values())


FIVE = ("svc-a", "svc-b", "svc-c", "svc-d", "svc-e")


def test_the_ids_are_listed_in_parts_of_a_page_all_asked_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One listing's cursor chains its pages one round trip after another; parts of a
    page each do not wait for each other. Here no part is answered before every part
    was asked for: a read that listed the parts one after another would never finish."""
    monkeypatch.setattr(fleet, "RELEASES_PAGE", 2)
    cp = control_plane(getServices=[{"services": [raw(s) for s in FIVE]}])
    parts: list[list[str]] = []
    every_part_asked = asyncio.Event()

    async def handle(request: httpx.Request) -> httpx.Response:
        envelope = json.loads(request.content)
        if envelope.get("method") == "getServicesReleases":
            parts.append(envelope["request"]["serviceIds"])
            if len(parts) == 3:
                every_part_asked.set()
            await asyncio.wait_for(every_part_asked.wait(), timeout=5)
        return cp.handle(request)

    result = read_through(handle, FIVE)
    assert sorted(parts) == [["svc-a", "svc-b"], ["svc-c", "svc-d"], ["svc-e"]]
    assert all(isinstance(s, LiveService) and s.releases[0].id == f"rel-{i}"
               for i, s in result.services.items())
    assert "getServiceImageReleases" not in methods(cp)


def test_a_failed_page_fails_only_what_its_own_part_had_not_carried(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fleet, "RELEASES_PAGE", 2)

    def listing(env: dict[str, Any]) -> dict[str, Any]:
        if "svc-c" in env["request"]["serviceIds"]:
            return error("INTERNAL", "this part broke")
        return paged(env)

    cp = control_plane(getServices=[{"services": [raw(s) for s in FIVE]}],
                       getServicesReleases=[listing])
    [result] = read(cp, FIVE)
    for broken in ("svc-c", "svc-d"):
        failed = result.services[broken]
        assert isinstance(failed, ReadFailure) and failed.code == "INTERNAL"
        assert failed.reason == "getServicesReleases: INTERNAL: this part broke"
    assert all(isinstance(result.services[s], LiveService) for s in ("svc-a", "svc-b", "svc-e"))
    assert "getServiceImageReleases" not in methods(cp)  # a failure is never "ask again"


def conditional_services(env: dict[str, Any]) -> dict[str, Any]:
    if env["request"].get("ifNoneMatch") == "rev-1":
        return {"notModified": True, "etag": "rev-1"}
    return {"services": [raw(s) for s in IDS], "etag": "rev-1"}


def test_an_unchanged_fleet_is_confirmed_with_one_request() -> None:
    cp = control_plane(getServices=[conditional_services],
                       getServicesReleases=[lambda env: paged(env, etag="rev-1")],
                       getServiceDeploymentGrants=[{"grants": [], "etag": "rev-1"}])
    memory = fleet.Memory()
    first, second = read(cp, passes=2, memory=memory)  # one client, as the watcher's
    assert memory.etag == "rev-1"
    assert [e["method"] for e in cp.sent] == ["getServices"]
    assert cp.sent[-1]["request"]["ifNoneMatch"] == "rev-1"
    assert second == first


def test_a_changed_fleet_is_read_in_full_from_the_conditional_reply() -> None:
    revision = {"now": "rev-1"}

    def services(env: dict[str, Any]) -> dict[str, Any]:
        if env["request"].get("ifNoneMatch") == revision["now"]:
            return {"notModified": True, "etag": revision["now"]}
        ids = IDS if revision["now"] == "rev-1" else IDS[:2]
        return {"services": [raw(s) for s in ids], "etag": revision["now"]}

    cp = control_plane(getServices=[services], getServiceDeploymentGrants=[
        lambda env: {"grants": [], "etag": revision["now"]}], getServicesReleases=[
        lambda env: paged(env, etag=revision["now"])])
    memory = fleet.Memory()
    read(cp, memory=memory)
    revision["now"] = "rev-2"  # svc-c deleted upstream
    [second] = read(cp, memory=memory)
    [conditional] = cp.calls("getServices")[1:]  # its reply is the full read's services
    assert conditional["request"]["ifNoneMatch"] == "rev-1"
    gone = second.services["svc-c"]
    assert isinstance(gone, ReadFailure) and gone.code == "SERVICE_NOT_FOUND"
    assert memory.etag == "rev-2"


@pytest.mark.parametrize(("grants", "releases", "why"), [
    ({"grants": [], "etag": "rev-0"}, "rev-1", "the grants were read at another revision"),
    ({"grants": []}, "rev-1", "the grants carry no revision"),
    (error("FORBIDDEN", "no"), "rev-1", "the grants could not be read"),
    ({"grants": [], "etag": "rev-1"}, "rev-2", "a releases page was read at another one"),
    ({"grants": [], "etag": "rev-1"}, None, "a releases page carries no revision"),
])
def test_nothing_is_remembered_from_a_read_that_may_straddle_a_change(
        grants: dict[str, Any], releases: str | None, why: str) -> None:
    cp = control_plane(getServices=[conditional_services], getServiceDeploymentGrants=[grants],
                       getServicesReleases=[lambda env: paged(env, etag=releases)])
    memory = fleet.Memory()
    read(cp, passes=2, memory=memory)
    assert memory.etag is None, why
    assert "ifNoneMatch" not in cp.calls("getServices")[-1]["request"]


def test_nothing_is_remembered_when_a_service_could_not_be_read() -> None:
    cp = control_plane(getServices=[conditional_services],
                       getServiceDeploymentGrants=[{"grants": [], "etag": "rev-1"}],
                       getServicesReleases=[error("INTERNAL", "broken")])
    memory = fleet.Memory()
    read(cp, memory=memory)
    assert memory.etag is None and memory.fleet is None


def test_not_modified_for_a_revision_not_asked_about_is_malformed() -> None:
    cp = control_plane(getServices=[{"notModified": True, "etag": "rev-9"}])
    with pytest.raises(ProtocolError, match="notModified"):
        read(cp)


@pytest.mark.parametrize("batched", [True, False], ids=["in pages", "one by one"])
def test_a_listed_service_whose_releases_say_not_found_is_a_failed_read_never_absent(
        batched: bool) -> None:
    # SERVICE_NOT_FOUND is what makes the planner call a service absent (a creation);
    # getServices just listed these, so a release read saying otherwise is a failure --
    # and a fleet with a failure is never remembered for the next resync.
    refusal = error("SERVICE_NOT_FOUND", "no such service")
    script: dict[str, list[Any]] = (
        {"getServicesReleases": [paged, refusal]} if batched else
        {"getCapabilities": [None], "getServiceImageReleases": [
            lambda env: refusal if env["request"]["serviceId"] == "svc-c"
            else {"releases": [release(env["request"]["serviceId"])]}]})
    cp = control_plane(getServices=[conditional_services],
                       getServiceDeploymentGrants=[{"grants": [], "etag": "rev-1"}], **script)
    memory = fleet.Memory()
    [result] = read(cp, memory=memory)
    failed = result.services["svc-c"]
    assert isinstance(failed, ReadFailure)
    assert failed.code is None
    assert "SERVICE_NOT_FOUND" in failed.reason
    assert memory.etag is None and memory.fleet is None


def test_a_service_listed_on_two_pages_is_a_failed_read() -> None:
    def twice(env: dict[str, Any]) -> dict[str, Any]:
        cursor = env["request"].get("cursor")
        return ({"releases": {"svc-a": [release("svc-a")], "svc-b": [release("svc-b")]},
                 "nextCursor": "1"} if cursor is None else
                {"releases": {"svc-b": [release("svc-b")], "svc-c": [release("svc-c")]},
                 "nextCursor": None})
    [result] = read(control_plane(getServicesReleases=[twice]))
    doubled = result.services["svc-b"]
    assert isinstance(doubled, ReadFailure) and "listed on two pages" in doubled.reason
    assert all(isinstance(result.services[s], LiveService) for s in ("svc-a", "svc-c"))


def test_what_the_control_plane_offers_is_asked_again_only_when_it_changed() -> None:
    # One client across three reads, as the watcher keeps it: the first reads in full,
    # the second is confirmed unchanged (the offer is not asked again), the third finds a
    # new revision -- a restarted or upgraded control plane -- and asks again.
    calls = {"getServices": 0}

    def services(env: dict[str, Any]) -> dict[str, Any]:
        calls["getServices"] += 1
        now = "rev-1" if calls["getServices"] <= 2 else "rev-2"
        if env["request"].get("ifNoneMatch") == now:
            return {"notModified": True, "etag": now}
        return {"services": [raw(s) for s in IDS], "etag": now}

    cp = control_plane(
        getServices=[services],
        getServiceDeploymentGrants=[lambda env: {
            "grants": [], "etag": "rev-1" if calls["getServices"] <= 2 else "rev-2"}],
        getServicesReleases=[lambda env: paged(
            env, etag="rev-1" if calls["getServices"] <= 2 else "rev-2")])

    async def go() -> list[list[str]]:
        memory = fleet.Memory()
        seen: list[list[str]] = []
        async with ControlPlaneClient(connection(), token=CANARY,
                                      transport=cp.transport()) as client:
            for _ in range(3):
                cp.sent.clear()
                await fleet.read(client, list(IDS), NullProgress(), memory)
                seen.append(methods(cp))
        return seen

    first, unchanged, changed = asyncio.run(go())
    assert "getCapabilities" in first
    assert unchanged == ["getServices"]
    assert "getCapabilities" in changed
