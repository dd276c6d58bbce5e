"""The web view's renderer (``render.webview``): every string escaped (the hostile corpus
renders as text), no request to another host, a state always a word beside its colour,
unknown never shown as green."""

from __future__ import annotations

import base64
import hashlib
import re
import unicodedata
from html.parser import HTMLParser

import pytest

from reconciler.core.webview import CellState, ClusterCheck, HistoryItem, LiveRead, View
from reconciler.render import webview
from tests.plan.test_output_safety import HOSTILE
from tests.webview.builders import NOW, fleet

LIVE = LiveRead(ok=True, last_success_ms=NOW - 5_000)
#: The elements the pages are made of; a hostile string must add none.
TAGS = {"html", "head", "meta", "title", "style", "link", "body", "header", "h1", "h2", "h3",
        "h4", "nav", "a", "span", "div", "strong", "time", "main", "p", "form", "label",
        "input", "select", "option", "table", "caption", "thead", "tbody", "tr", "th", "td",
        "code", "small", "ul", "li", "section", "article", "progress", "br", "script"}


class Parsed(HTMLParser):
    """Every start tag with its attributes, and the text of each ``.word`` and
    ``[data-state]`` element."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.stack: list[tuple[str, dict[str, str | None], list[str]]] = []
        self.closed: list[tuple[str, dict[str, str | None], str]] = []
        self.scripts: list[str] = []
        self.styles: list[str] = []
        self._raw: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        self.tags.append((tag, attributes))
        if tag in ("script", "style"):
            self._raw = tag
        if tag not in ("meta", "link", "input", "br"):
            self.stack.append((tag, attributes, []))

    def handle_endtag(self, tag: str) -> None:
        self._raw = None
        while self.stack:
            name, attrs, text = self.stack.pop()
            self.closed.append((name, attrs, "".join(text)))
            if self.stack:
                self.stack[-1][2].append("".join(text))
            if name == tag:
                break

    def handle_data(self, data: str) -> None:
        if self._raw == "script":
            self.scripts.append(data)
        elif self._raw == "style":
            self.styles.append(data)
        if self.stack:
            self.stack[-1][2].append(data)


def parse(page: str) -> Parsed:
    parsed = Parsed()
    parsed.feed(page)
    parsed.close()
    return parsed


def view(status: object = None, live: LiveRead = LIVE, **extra: object) -> View:
    return View(status=status or fleet(), live=live, now_ms=NOW, **extra)  # type: ignore[arg-type]


PAGES = [("fleet", None, True), ("pipeline", None, True), ("service", "svc-00002", True),
         ("all", None, False)]


@pytest.mark.parametrize(("page", "name", "served"), PAGES)
def test_every_state_is_a_word_beside_its_colour(page: str, name: str | None,
                                                 served: bool) -> None:
    parsed = parse(webview.document(view(), page, name, served=served))
    seen = set()
    for tag, attrs, text in parsed.closed:
        classes = (attrs.get("class") or "").split()
        for state in CellState:
            if f"s-{state.value}" in classes and tag in ("span", "td", "section"):
                seen.add(state)
                # the coloured element says its state in words (a check says passed/failed)
                words = {webview.WORDS[state], "passed", "failed", "not run"}
                assert any(w in text for w in words), (tag, attrs, text)
        if "data-state" in attrs:
            assert attrs["data-state"] in text, (tag, attrs, text)
    if page in ("fleet", "all"):
        assert seen == set(CellState)


def test_the_fleet_grid_has_each_service_and_its_state_per_environment() -> None:
    parsed = parse(webview.document(view(), "fleet"))
    cells = [(a.get("data-env"), a.get("data-state")) for t, a, _ in parsed.closed
             if t == "td" and "data-state" in a]
    assert len(cells) == 4 * 2
    assert cells.count(("staging", "proven")) == 4
    assert {s for e, s in cells if e == "prod"} == {"proven", "converging", "failing",
                                                     "unknown"}
    rows = [a["data-name"] for t, a in parsed.tags if t == "tr" and "data-name" in a]
    assert rows == [f"svc-{i:05d}" for i in range(4)]


def test_an_unread_live_side_shows_unknown_everywhere_and_says_since_when() -> None:
    down = LiveRead(ok=False, last_success_ms=NOW - 600_000, unknown_since_ms=NOW - 590_000,
                    reason="control_plane: HTTP 503")
    page = webview.document(view(live=down), "fleet")
    parsed = parse(page)
    states = {a["data-state"] for _, a in parsed.tags if "data-state" in a}
    assert states == {"unknown"}, "never the last read's green"
    assert "proven" not in {a.get("data-state") for _, a in parsed.tags}
    banner = next(text for t, a, text in parsed.closed if a.get("id") == "unknown-banner")
    assert "UNKNOWN since 2026-09-21" in banner and "HTTP 503" in banner
    service = parse(webview.document(view(live=down), "service", "svc-00000"))
    assert {a["data-state"] for _, a in service.tags if "data-state" in a} == {"unknown"}


def test_an_environment_that_could_not_be_read_is_unknown_not_absent() -> None:
    status = fleet(environments=("staging", "prod"), errors=(("prod", "connection refused"),))
    status = type(status)(taken_at=status.taken_at, environments=status.environments,
                          rows=tuple(r for r in status.rows if r.environment != "prod"),
                          errors=status.errors)
    parsed = parse(webview.document(view(status), "fleet"))
    prod = {a.get("data-state") for t, a, _ in parsed.closed
            if t == "td" and a.get("data-env") == "prod"}
    assert prod == {"unknown"}
    assert any("prod unknown" in text for _, _, text in parsed.closed)


def test_the_service_page_shows_clusters_blockers_soak_history_and_checks() -> None:
    checks = {("prod", "svc-00000", "c0"): (ClusterCheck("smoke /healthz", True, "200 in 40ms"),
                                           ClusterCheck("latency p99", False, "900ms"))}
    history = (HistoryItem(at_ms=NOW - 1000, kind="apply", words="apply converged (1 change)",
                           services=("svc-00000",), commit="f" * 40),
               HistoryItem(at_ms=NOW - 2000, kind="promotion", words="promotion proposed",
                           services=("svc-00000",), link="https://github.com/o/r/pull/7"),
               HistoryItem(at_ms=NOW - 3000, kind="apply", words="other service",
                           services=("svc-00001",)))
    page = webview.document(view(history=history, verification=checks,
                                 commit_url="https://github.com/o/r/commit/{commit}"),
                            "service", "svc-00000")
    parsed = parse(page)
    text = re.sub(r"\s+", " ", "".join(t for _, _, t in parsed.closed if _ == "html"))
    assert "not_soaked" in page and "eligible <time" in page
    [bar] = [a for t, a in parsed.tags if t == "progress"]
    assert bar["max"] == "7200000" and bar["value"] == "3600000"  # soaked 1h of 2h
    assert "3/3 healthy" in page and "api.example.net:443" in page and "shop.example" in page
    assert "smoke /healthz" in page and "passed" in page and "failed" in page
    assert "none declared" in page  # the other clusters
    hrefs = [a["href"] for t, a in parsed.tags if t == "a"]
    assert "https://github.com/o/r/commit/" + "f" * 40 in hrefs
    assert "https://github.com/o/r/pull/7" in hrefs
    assert "other service" not in page
    assert "without a plan" in page  # a status file knows no pending change
    del text


def test_a_link_that_is_not_https_is_not_a_link() -> None:
    history = (HistoryItem(at_ms=NOW, kind="revert", words="x", link="javascript:alert(1)"),)
    page = webview.document(view(history=history, commit_url="javascript:{commit}"),
                            "service", "svc-00000")
    assert "javascript:" not in page


@pytest.mark.parametrize(("page", "name", "served"), PAGES)
def test_the_hostile_corpus_renders_as_text(page: str, name: str | None, served: bool) -> None:
    status = fleet(taint=HOSTILE, errors=(("prod", "boom" + HOSTILE),))
    down = LiveRead(ok=False, last_success_ms=NOW, unknown_since_ms=NOW, reason=HOSTILE)
    target = f"svc-00002{HOSTILE}" if name else None
    history = (HistoryItem(at_ms=NOW, kind="apply" + HOSTILE, words=HOSTILE,
                           services=(target or "",), commit="c" * 40 + HOSTILE,
                           link="https://github.com/o/r/pull/1" + HOSTILE),)
    for live in (LIVE, down):
        out = webview.document(view(status, live, history=history,
                                    commit_url="https://github.com/o/r/commit/{commit}"),
                               page, target, served=served)
        parsed = parse(out)
        assert {t for t, _ in parsed.tags} <= TAGS
        assert len(parsed.scripts) == 1 and parsed.scripts[0] == webview.SCRIPT
        assert not [a for _, attrs in parsed.tags for a in attrs if a.startswith("on")]
        assert "<img" not in out and "evil.example/a'" not in out
        assert "\x1b" not in out and "\u202e" not in out
        for ch in out:
            assert ch == "\n" or unicodedata.category(ch) not in ("Cc", "Cf", "Zl", "Zp"), \
                repr(ch)
        assert "&lt;img src=x onerror=alert(1)&gt;" in out  # shown, as text


@pytest.mark.parametrize(("page", "name", "served"), PAGES)
def test_no_request_leaves_the_page_for_another_host(page: str, name: str | None,
                                                     served: bool) -> None:
    out = webview.document(view(), page, name, served=served)
    parsed = parse(out)
    for tag, attrs in parsed.tags:
        for attr in ("src", "href", "action", "data", "poster", "srcset"):
            value = attrs.get(attr)
            if value is not None:
                assert not re.match(r"(?i)\s*(https?:)?//", value), (tag, attr, value)
    assert not [t for t, _ in parsed.tags if t in ("img", "iframe", "object", "embed")]
    assert "@import" not in webview.CSS and "url(" not in webview.CSS
    assert not re.search(r"https?://", webview.SCRIPT)


def test_the_content_security_policy_allows_exactly_the_inline_script_and_style() -> None:
    parsed = parse(webview.document(view(), "fleet"))
    [csp] = [a["content"] for t, a in parsed.tags
             if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp == webview.CSP and "default-src 'none'" in csp
    for text in (parsed.scripts[0], parsed.styles[0]):
        digest = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in csp


def test_the_file_has_every_page_and_links_by_anchor() -> None:
    parsed = parse(webview.document(view(), "all", served=False))
    ids = {a.get("id") for _, a in parsed.tags}
    assert {"fleet", "pipeline", "services"} <= ids
    anchors = [a["href"] for t, a in parsed.tags if t == "a"]
    assert all(h.startswith("#") for h in anchors), anchors
    assert {h[1:] for h in anchors} <= ids
    body = next(a for t, a in parsed.tags if t == "body")
    assert body["data-live"] == "0"  # a file does not poll


def test_a_served_fleet_is_filtered_and_paged_by_the_watcher() -> None:
    big = view(fleet(services=1_203, environments=("staging", "prod"), clusters=1))
    first = parse(webview.document(big, "fleet"))
    names = [a["data-name"] for t, a in first.tags if t == "tr" and "data-name" in a]
    assert len(names) == webview.PAGE_ROWS and names[0] == "svc-00000"
    page = webview.document(big, "fleet")
    assert "services 1–500 of 1203 matching (1203 in all)" in page
    last = webview.document(big, "fleet", window=webview.Window(page=2))
    assert "services 1001–1203 of 1203" in last and "previous" in last
    failing = parse(webview.main(big, "fleet", window=webview.Window(
        env="prod", state="failing", name="svc-001")))
    rows = [a["data-name"] for t, a in failing.tags if t == "tr" and "data-name" in a]
    assert rows and all(r.startswith("svc-001") and int(r[-5:]) % 4 == 2 for r in rows)
    envs = {a.get("data-env") for t, a in failing.tags if t == "td"}
    assert envs == {"prod"}  # the environment filter leaves one column
    # a file is never paged: every row, filtered in the browser
    whole = parse(webview.document(big, "all", served=False))
    assert len([1 for t, a in whole.tags if t == "tr" and "data-name" in a]) == 1_203


def test_a_clusters_verification_results_are_shown_in_words() -> None:
    """The judge's check results on a cluster (``ClusterRow.checks``, core.verification)
    reach the service page with no mapping given: failing with the value, unknown with
    why."""
    from dataclasses import replace

    from reconciler.core.verification import CheckResult, Outcome

    status = fleet()
    digest = status.rows[0].pinned
    results = (
        CheckResult(check="errors/ratio", cluster="c0", service="svc-00000", digest=digest,
                    generation=3, outcome=Outcome.FAIL, value="0.52", why="result < 0.01"),
        CheckResult(check="errors/http", cluster="c0", service="svc-00000", digest=digest,
                    generation=3, outcome=Outcome.UNKNOWN, why="Prometheus unreachable"))
    rows = tuple(replace(r, clusters=tuple(replace(c, checks=results) if c.cluster == "c0"
                                           else c for c in r.clusters))
                 if r.service == "svc-00000" else r for r in status.rows)
    page = webview.document(view(replace(status, rows=rows)), "service", "svc-00000")
    assert "check errors/ratio failed: 0.52 (result &lt; 0.01)" in page
    assert "check errors/http is unknown (Prometheus unreachable)" in page
