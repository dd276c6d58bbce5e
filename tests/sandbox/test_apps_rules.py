"""``sandbox.apps`` in-process: which app a request reaches, what it answers, how the
synthetic load is counted (with an injected clock) and the exposition (issue 34)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from reconciler.sandbox import apps, faults

DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32


def route(app: str, domains: list[str], path: str = "/", priority: int = 0,
          hostname: str | None = None) -> dict[str, Any]:
    ownership: dict[str, Any] = {"appId": app}
    if hostname:
        ownership["hostname"] = hostname
    return {"ownership": ownership,
            "route": {"name": app, "match": {"domains": domains, "path": path},
                      "action": {"type": "forward", "target": {"appId": app, "port": 80}},
                      "priority": priority}}


def test_a_route_sends_its_hostnames_and_path_to_its_app() -> None:
    table = [route("web", ["shop.test"]), route("api", ["shop.test"], "/api/"),
             route("acme", ["shop.test"], "/api/.well-known/", priority=-1),
             route("wild", ["*.eu.test"]), route("owned", [], hostname="own.test")]
    assert apps.route_target(table, "shop.test", "/") == (True, "web")
    assert apps.route_target(table, "SHOP.test", "/api/x") == (True, "api")  # longer path
    assert apps.route_target(table, "shop.test", "/api/.well-known/x") == (True, "api")
    assert apps.route_target(table, "de.eu.test", "/") == (True, "wild")
    assert apps.route_target(table, "a.de.eu.test", "/") == (False, None)  # one label
    assert apps.route_target(table, "eu.test", "/") == (False, None)
    assert apps.route_target(table, "own.test", "/") == (True, "owned")
    assert apps.route_target([route("api", ["x.test"], "/api/")], "x.test", "/") \
        == (True, None)
    assert apps.route_target(table, "nowhere.test", "/") == (False, None)


def test_the_direct_path_names_the_app() -> None:
    assert apps.direct_target("/sandbox/apps/checkout") == "checkout"
    assert apps.direct_target("/sandbox/apps/checkout/healthz") == "checkout"
    assert apps.direct_target("/sandbox/apps/") is None
    assert apps.direct_target("/api/v3/cluster/health") is None


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def counted(traffic: apps.Traffic) -> dict[tuple[str, str, str], float]:
    out: dict[tuple[str, str, str], float] = {}
    for family in text_string_to_metric_families(traffic.exposition([]).decode()):
        for sample in family.samples:
            if sample.name == apps.REQUESTS:
                labels = sample.labels
                out[(labels["app"], labels["digest"], labels["code"])] = sample.value
    return out


def test_the_synthetic_load_is_counted_from_elapsed_time_with_the_faults_it_ran_under(
        state: Path) -> None:
    clock = Clock()
    traffic = apps.Traffic("sn1", faults.FaultView(state, "sn1"), clock=clock)
    views = [("web", DIGEST, "RUNNING", 0), ("api", OTHER, "RUNNING", 0)]
    clock.ms += 10_000
    traffic.settle(views)  # no scrape yet: nothing is counted
    assert counted(traffic) == {}
    traffic.settle(views, scrape=True)  # the first scrape counts from the start
    assert counted(traffic) == {("web", DIGEST, "200"): 20, ("api", OTHER, "200"): 20}
    faults.set_fault(state, "sn1", "app-errors", on=True,
                     params={"digest": DIGEST[:12], "ratio": "0.5"})
    assert traffic.faults_changed()
    clock.ms += 5_000
    traffic.settle(views)  # the 5 s before the fault was seen ran without it
    assert not traffic.faults_changed()
    clock.ms += 4_000
    traffic.settle(views, scrape=True)
    assert counted(traffic) == {("web", DIGEST, "200"): 34, ("web", DIGEST, "500"): 4,
                                ("api", OTHER, "200"): 38}
    # An app counted from when its digest started running here; the down fault: nothing.
    clock.ms += 1_000
    traffic.settle([("web", DIGEST, "RUNNING", clock.ms - 500)], scrape=True)
    assert counted(traffic) == {("web", DIGEST, "200"): 35, ("web", DIGEST, "500"): 4,
                                ("api", OTHER, "200"): 38}  # the 9th request: no error
    faults.set_fault(state, "sn1", "down", on=True, params={})
    traffic.settle(views)
    clock.ms += 60_000
    traffic.settle(views, scrape=True)
    assert counted(traffic)[("web", DIGEST, "200")] == 35


def test_real_requests_answer_as_the_faults_say(state: Path) -> None:
    traffic = apps.Traffic("sn2", faults.FaultView(state, "sn2"))
    view = {"resolvedDigest": DIGEST, "runtimeState": "RUNNING", "rolloutGeneration": 4}
    ok = traffic.answer("web", view, "/x")
    assert (ok.status, ok.body, ok.digest) == (
        200, {"app": "web", "digest": DIGEST, "cluster": "sn2", "path": "/x",
              "rolloutGeneration": 4}, DIGEST)
    missing = traffic.answer("web", None, "/x")
    assert (missing.status, missing.digest) == (404, None)
    assert traffic.answer("web", {**view, "runtimeState": "FAILED"}, "/").status == 503
    faults.set_fault(state, "sn2", "app-errors", on=True,
                     params={"app": "web", "ratio": "0.5", "code": "502"})
    assert [traffic.answer("web", view, "/").status for _ in range(4)] == [200, 502] * 2
    assert traffic.answer("api", view, "/").status == 200
    faults.set_fault(state, "sn2", "app-slow", on=True, params={"digest": OTHER,
                                                                 "seconds": "1.5"})
    assert traffic.answer("web", view, "/").delay_s == 0
    assert traffic.answer("web", {**view, "resolvedDigest": OTHER}, "/").delay_s == 1.5


def test_the_exposition_is_prometheus_text(state: Path) -> None:
    traffic = apps.Traffic("sn1", faults.FaultView(state, "sn1"))
    traffic.observe("web", DIGEST, 200, 0.003)
    traffic.observe("web", DIGEST, 500, 0.3)
    traffic.observe('we"b\\', DIGEST, 200, 20.0)
    families = {f.name: f for f in text_string_to_metric_families(
        traffic.exposition([("web", DIGEST)]).decode())}
    assert families["sandbox_app_requests"].type == "counter"
    assert families[apps.DURATION].type == "histogram"
    assert families[apps.RUNNING].type == "gauge"
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in families.values() for s in f.samples}
    web = (("app", "web"), ("digest", DIGEST))
    assert samples[(apps.REQUESTS, (*web[:1], ("code", "500"), web[1]))] == 1
    assert samples[(apps.DURATION + "_bucket", (*web, ("le", "0.005")))] == 1
    assert samples[(apps.DURATION + "_bucket", (*web, ("le", "0.25")))] == 1
    assert samples[(apps.DURATION + "_bucket", (*web, ("le", "0.5")))] == 2
    assert samples[(apps.DURATION + "_count", web)] == 2
    assert samples[(apps.DURATION + "_sum", web)] == pytest.approx(0.303)
    odd = (("app", 'we"b\\'), ("digest", DIGEST))
    assert samples[(apps.DURATION + "_bucket", (*odd, ("le", "10.0")))] == 0
    assert samples[(apps.DURATION + "_bucket", (*odd, ("le", "+Inf")))] == 1
    assert samples[(apps.RUNNING, web)] == 1
