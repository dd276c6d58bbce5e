"""The web view as a person on call sees it: a real headless Chromium (``browser.py``)
against a real ``reconcile watch --view`` on the sandbox, and the file ``reconcile status
--format html`` writes. Screenshots of each state are written to the test's directory.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from reconciler.core.webview import HistoryItem, LiveRead, View
from reconciler.render import webview
from reconciler.sandbox.launcher import CONTROL_PLANE, Sandbox
from tests.e2e_repo import Repo
from tests.plan.test_output_safety import HOSTILE
from tests.watch.test_watch_e2e import is_plan, watching
from tests.watch.test_watch_proof import free_port
from tests.webview.browser import chromium
from tests.webview.builders import NOW, fleet

pytestmark = pytest.mark.integration

SERVICES = 5  # examples/desired-state/services
ALL_STATES = "[...document.querySelectorAll('#grid td[data-state]')]"


def states(page: Any) -> list[str]:
    return list(page.evaluate(f"() => {ALL_STATES}.map(c => c.dataset.state)"))


def visible_rows(page: Any) -> int:
    return int(page.evaluate(
        "() => [...document.querySelectorAll('#grid tbody tr')].filter(r => !r.hidden).length"))


def rows_settle(page: Any, condition: str) -> None:
    """Wait until ``condition`` (over ``rows``, the grid's rows, and ``n``, how many are
    shown) holds and has held for a second: the watcher's answer to a filter arrives after
    the filter is applied to the rows already shown, and must not undo it."""
    page.wait_for_function(
        "() => { const rows = [...document.querySelectorAll('#grid tbody tr')];"
        " const n = rows.filter(r => !r.hidden).length;"
        f" const ok = {condition};"
        " if (!ok) { window.__settled = 0; return false; }"
        " window.__settled = window.__settled || Date.now();"
        " return Date.now() - window.__settled > 1000; }", timeout=20_000, polling=100)
    page.evaluate("() => { window.__settled = 0; }")


def request(method: str, url: str) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_the_watchers_view_follows_the_fleet_in_a_real_browser(
        repo: Repo, sandbox: Sandbox, tmp_path: Path) -> None:
    port = free_port()
    shots = tmp_path / "screenshots"
    shots.mkdir()
    with watching(repo, "--resync", "1", "--metrics-port", str(port), "--view") as w:
        w.wait_for(is_plan)
        url = f"http://127.0.0.1:{port}"
        # read-only: anything but GET and HEAD is refused
        assert request("POST", url + "/") == 405
        assert request("DELETE", url + "/pipeline") == 405
        assert request("PUT", url + "/service/checkout") == 405
        with chromium(tmp_path) as browser:
            page = browser.new_page()
            dialogs: list[str] = []
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            outside: list[str] = []
            page.on("request", lambda r: outside.append(r.url)
                    if not r.url.startswith((url, "data:")) else None)
            page.goto(url + "/")
            # The grid: every service, each cell's state in words; nothing applied yet,
            # so the services whose changes are pending are not proven.
            assert visible_rows(page) == SERVICES
            words = page.locator("#grid td[data-state] .word").all_inner_texts()
            assert len(words) == SERVICES
            assert all(any(s in w for s in webview.WORDS.values()) for w in words), words
            assert set(states(page)) - {"proven"}, "nothing pending before the apply?"
            assert "Live side read at" in page.inner_text("main")
            page.screenshot(path=str(shots / "fleet-pending-1280.png"), full_page=True)
            page.evaluate("() => { window.__same_page = true; }")

            # A filter: by name, then by state. The rows shown are filtered at once, then
            # replaced by the watcher's answer for the filter (a quarter second later), so
            # each step waits for the rows to settle rather than reading them once.
            page.fill("#f-name", "checkout")
            rows_settle(page, "n === 1")
            assert "1 of 5 services shown" in page.inner_text("#shown")
            page.fill("#f-name", "")
            rows_settle(page, f"n === {SERVICES}")
            page.select_option("#f-state", "proven")
            rows_settle(page, "n === rows.filter(r => r.querySelector("
                          "'td[data-state=\"proven\"]')).length")
            page.select_option("#f-state", "")
            rows_settle(page, f"n === {SERVICES}")

            # An apply (the CLI's): the cells go to proven without a reload.
            done = repo.run("apply", str(repo.path), "--auto-approve")
            assert done.code == 0, done.out + done.err
            page.wait_for_function(
                f"() => {ALL_STATES}.length === {SERVICES} && {ALL_STATES}"
                ".every(c => c.dataset.state === 'proven')", timeout=60_000)
            assert page.evaluate("() => window.__same_page === true"), "the page reloaded"
            page.screenshot(path=str(shots / "fleet-proven-1280.png"), full_page=True)

            # A service's page: per cluster what runs, replicas, egress, since when.
            page.goto(url + "/service/checkout")
            text = page.inner_text("main")
            assert "proven since" in text and "sha256:" in text
            clusters = page.locator("section.env tbody tr").count()
            assert clusters == len(sandbox.addresses)
            assert "healthy" in text  # replicas, as the cluster says them
            page.screenshot(path=str(shots / "service-1280.png"), full_page=True)
            page.goto(url + "/pipeline")
            assert "1. default" in page.inner_text("main")

            # 390 px wide: nothing runs off the side of the page.
            page.set_viewport_size({"width": 390, "height": 844})
            page.goto(url + "/")
            assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
            page.screenshot(path=str(shots / "fleet-390.png"), full_page=True)
            page.set_viewport_size({"width": 1280, "height": 900})

            # A cluster stops: its services' cells turn unknown, without a reload.
            page.evaluate("() => { window.__same_page = true; }")
            stopped = sorted(sandbox.addresses)[0]
            sandbox.fault(stopped, "down")
            page.wait_for_function(
                f"() => {ALL_STATES}.length > 0 && {ALL_STATES}"
                ".every(c => c.dataset.state === 'unknown')", timeout=60_000)
            assert page.evaluate("() => window.__same_page === true")
            page.screenshot(path=str(shots / "fleet-cluster-down-1280.png"), full_page=True)
            sandbox.fault(stopped, "down", on=False)
            page.wait_for_function(f"() => {ALL_STATES}.every(c => c.dataset.state === "
                                   "'proven')", timeout=60_000)

            # The control plane fails: "unknown since …" at the top, never stale green.
            sandbox.fault(CONTROL_PLANE, "5xx", times=1_000_000)
            page.wait_for_selector("#unknown-banner", timeout=60_000)
            banner = page.inner_text("#unknown-banner")
            assert banner.startswith("? UNKNOWN since 20"), banner
            assert "503" in banner
            assert set(states(page)) == {"unknown"}
            page.screenshot(path=str(shots / "fleet-control-plane-down-1280.png"),
                            full_page=True)
            sandbox.fault(CONTROL_PLANE, "5xx", on=False)
            page.wait_for_function(f"() => !document.getElementById('unknown-banner') && "
                                   f"{ALL_STATES}.every(c => c.dataset.state === 'proven')",
                                   timeout=60_000)
            assert not dialogs and not outside, (dialogs, outside)

            # The same view as one file (reconcile status --format html --out FILE),
            # opened from disk with the network of no use to it.
            out = tmp_path / "status.html"
            made = repo.run("status", str(repo.path), "--format", "html", "--out", str(out))
            assert made.code == 0, made.err
            page.goto(out.as_uri())
            assert visible_rows(page) == SERVICES
            assert set(states(page)) == {"proven"}
            page.fill("#f-name", "ledger")
            assert visible_rows(page) == 1
            page.click("#grid tr:not([hidden]) th a")
            assert "clusters prove it" in page.inner_text("article:target")
            assert not dialogs


def test_the_hostile_corpus_renders_as_text_and_runs_nothing(tmp_path: Path) -> None:
    status = fleet(taint=HOSTILE, errors=(("prod", "boom" + HOSTILE),))
    history = (HistoryItem(at_ms=NOW, kind="apply", words=HOSTILE,
                           services=(f"svc-00000{HOSTILE}",), commit="c" * 40 + HOSTILE),)
    view = View(status=status, live=LiveRead(ok=True), now_ms=NOW, history=history)
    page_file = tmp_path / "hostile.html"
    page_file.write_text(webview.document(view, "all", served=False))
    with chromium(tmp_path) as browser:
        page = browser.new_page()
        dialogs: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        page.goto(page_file.as_uri())
        assert page.locator("img, iframe, object, embed").count() == 0
        assert page.locator("a[href^='http']").count() == 0
        text = page.inner_text("body")
        assert "<img src=x onerror=alert(1)>" in text  # shown as text
        assert visible_rows(page) == 4
        assert page.evaluate("() => document.documentElement.scrollWidth") <= 1280
        page.screenshot(path=str(tmp_path / "hostile-1280.png"), full_page=False)
        assert not dialogs
        assert requests == [page_file.as_uri()], requests

        # A clean fleet of two environments: a service's page shows the blocker of its
        # next promotion with the eligible time, and the soak as a bar.
        clean = tmp_path / "fleet.html"
        clean.write_text(webview.document(View(status=fleet(), live=LiveRead(ok=True),
                                               now_ms=NOW), "all", served=False))
        page.goto(clean.as_uri())
        page.click("#grid tr[data-name='svc-00000'] th a")
        section = page.locator("article:target section.env[data-env='prod']")
        said = section.inner_text()
        assert "eligible 2026-09-21 15:13:20Z" in said and "not_soaked" in said, said
        assert section.locator("progress").get_attribute("value") == "3600000"
        page.screenshot(path=str(tmp_path / "service-blocker-1280.png"), full_page=False)


AXE = Path(__file__).resolve().parents[2] / "interop" / "node" / "node_modules" / "axe-core" \
    / "axe.min.js"


def test_axe_finds_no_serious_accessibility_violation(tmp_path: Path) -> None:
    """axe-core (npm, installed by `make node-deps` beside the interop harness) run in
    the page: no serious or critical violation on the fleet, pipeline and service pages,
    in every state (the file holds them all), live and unknown."""
    if not AXE.exists():
        pytest.fail(f"{AXE} is missing: run `make node-deps` (npm ci in interop/node)")
    down = LiveRead(ok=False, last_success_ms=NOW - 60_000, unknown_since_ms=NOW - 50_000,
                    reason="control_plane: HTTP 503")
    # the page's policy allows only its own script: the test lets axe in (bypass_csp)
    with chromium(tmp_path, bypass_csp=True) as browser:
        page = browser.new_page()
        for name, live in (("live", LiveRead(ok=True)), ("unknown", down)):
            target = tmp_path / f"{name}.html"
            target.write_text(webview.document(View(status=fleet(), live=live, now_ms=NOW),
                                               "all", served=False))
            for width in (1280, 390):
                page.set_viewport_size({"width": width, "height": 900})
                page.goto(target.as_uri())
                page.add_script_tag(path=str(AXE))
                found = page.evaluate(
                    "async () => (await axe.run(document, {resultTypes: ['violations']}))"
                    ".violations.map(v => ({id: v.id, impact: v.impact, help: v.help, "
                    "nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))}))")
                serious = [v for v in found if v["impact"] in ("serious", "critical")]
                assert not serious, (name, width, serious)
