"""The web view (issue 35): the fleet grid, a service's page and the pipeline, as HTML.

Owns the pages' markup, their one stylesheet and their one script, all inline: a page
makes no request to another host (no fonts, no CDN), and its Content-Security-Policy
(a ``<meta>``, and the watcher's header) allows only this script and this stylesheet by
hash -- so a string that got past escaping still could not run. The same markup is
served by ``watch --view`` (each page apart, updated by a short poll of ``?part=main``)
and written whole by ``reconcile status --format html`` (every page in one file, linked
by anchors).

Built from strings with ``html.escape``, not a template engine: the pages are a few
dozen elements repeated per row, every value is put in through one function (``_e``:
``core.sanitize.safe`` -- secrets redacted, controls and bidi characters made visible,
bounded -- then ``html.escape`` with quotes), and a 10,000-service grid renders in well
under a second (docs/web-view.md has the numbers). A state is always a colour AND a word
(and a sign): ``proven``, ``converging``, ``failing``, ``unknown`` (``core.webview``).

Pure: builds strings; reads no file, no clock (``View.now_ms`` is "now").
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from reconciler.core.pipeline import LAST_INSTANT_MS, eligible_shown
from reconciler.core.sanitize import safe
from reconciler.core.status import ServiceRow, Status
from reconciler.core.webview import (
    CellState,
    ClusterCheck,
    HistoryItem,
    View,
    cell_state,
    checks_of,
    cluster_state,
)

#: A state's sign and its words: never a colour alone.
SIGNS: dict[CellState, str] = {CellState.PROVEN: "✓", CellState.CONVERGING: "↻",
                               CellState.FAILING: "✗", CellState.UNKNOWN: "?"}
WORDS: dict[CellState, str] = {
    CellState.PROVEN: "proven", CellState.CONVERGING: "converging",
    CellState.FAILING: "failing", CellState.UNKNOWN: "unknown"}

#: How often a served page asks the watcher for news (ms).
POLL_MS = 2000

CSS = """
:root{--fg:#1f2328;--muted:#57606a;--bg:#fff;--line:#d0d7de;--head:#f6f8fa;
--proven:#1a7f37;--proven-bg:#dafbe1;--converging:#7d4e00;--converging-bg:#fff8c5;
--failing:#a40e26;--failing-bg:#ffebe9;--unknown:#424a53;--unknown-bg:#eaeef2}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:var(--fg);
background:var(--bg)}
header{display:flex;flex-wrap:wrap;gap:.5rem 1.5rem;align-items:baseline;padding:.6rem 1rem;
border-bottom:1px solid var(--line);background:var(--head)}
header h1{font-size:1.1rem;margin:0}
nav a{margin-right:1rem}
a{color:#0550ae}
main{padding:.75rem 1rem 2rem}
.bar{padding:.6rem 1rem 0}
#conn{margin:.6rem 1rem 0}
code,.mono{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;
overflow-wrap:anywhere}
.banner{padding:.6rem .8rem;margin:0 0 .75rem;border:2px solid;border-radius:6px}
.banner.s-unknown{border-color:var(--unknown);background:var(--unknown-bg)}
.banner.s-failing{border-color:var(--failing);background:var(--failing-bg)}
.meta{color:var(--muted);margin:.25rem 0 .75rem}
form.filters{display:flex;flex-wrap:wrap;gap:.5rem 1rem;margin:0 0 .75rem;align-items:end}
form.filters label{display:flex;flex-direction:column;font-size:12px;color:var(--muted)}
form.filters input,form.filters select{font:inherit;padding:.2rem .3rem;min-width:9rem}
.tablewrap{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;width:100%}
table#grid{width:auto;min-width:min(100%,40rem)}
caption{text-align:left;caption-side:bottom;padding:.3rem 0}
#grid th[scope=row]{min-width:10rem}
th,td{border:1px solid var(--line);padding:.3rem .45rem;text-align:left;vertical-align:top}
th{background:var(--head);position:sticky;top:0}
tbody tr{content-visibility:auto;contain-intrinsic-size:auto 3.2em}
td.cell{min-width:11rem}
.word{display:inline-block;font-weight:600;border-radius:999px;padding:0 .5em;
border:1px solid;white-space:nowrap}
.s-proven .word,.word.s-proven{color:var(--proven);background:var(--proven-bg)}
.s-converging .word,.word.s-converging{color:var(--converging);background:var(--converging-bg)}
.s-failing .word,.word.s-failing{color:var(--failing);background:var(--failing-bg)}
.s-unknown .word,.word.s-unknown{color:var(--unknown);background:var(--unknown-bg);
border-style:dashed}
td.s-proven{border-left:4px solid var(--proven)}
td.s-converging{border-left:4px solid var(--converging)}
td.s-failing{border-left:4px solid var(--failing)}
td.s-unknown{border-left:4px dashed var(--unknown)}
small,.small{color:var(--muted);font-size:12px;display:block;overflow-wrap:anywhere}
section.env{border:1px solid var(--line);border-radius:6px;padding:.5rem .8rem;margin:.75rem 0}
section.env h3{margin:.2rem 0 .4rem}
ul{margin:.2rem 0;padding-left:1.2rem}
progress{width:14rem;max-width:100%;vertical-align:middle}
.pipeline{display:flex;flex-wrap:wrap;gap:.75rem;align-items:stretch}
.stage{flex:1 1 15rem;border:1px solid var(--line);border-radius:6px;padding:.5rem .8rem}
.stage h3{margin:.1rem 0 .3rem}
.arrow{align-self:center;font-size:1.4rem;color:var(--muted)}
.count{margin-right:.4rem}
[hidden]{display:none!important}
@media (max-width:600px){header{padding:.5rem}main{padding:.5rem}
td.cell{min-width:8rem}form.filters input,form.filters select{min-width:7rem}}
"""

SCRIPT = """
(function () {
  "use strict";
  var body = document.body;
  function fmtAge(ms) {
    var s = Math.max(0, Math.round((Date.now() - ms) / 1000));
    if (s < 90) return s + " s";
    var m = Math.round(s / 60);
    if (m < 90) return m + " min";
    var h = Math.round(m / 60);
    return h < 48 ? h + " h" : Math.round(h / 24) + " d";
  }
  function ages() {
    var list = document.querySelectorAll("[data-age].tick");
    for (var i = 0; i < list.length; i++) {
      list[i].textContent = fmtAge(+list[i].getAttribute("data-age")) + " ago";
    }
  }
  function val(id) { var n = document.getElementById(id); return n ? n.value : ""; }
  function filter() {
    var name = val("f-name").toLowerCase(), env = val("f-env"), st = val("f-state");
    var cells = document.querySelectorAll("#grid [data-env]");
    for (var i = 0; i < cells.length; i++) {
      var hide = !!env && cells[i].getAttribute("data-env") !== env;
      if (cells[i].hidden !== hide) cells[i].hidden = hide;
    }
    var rows = document.querySelectorAll("#grid tr[data-name]"), shown = 0;
    for (var j = 0; j < rows.length; j++) {
      var r = rows[j], ok = !name || r.getAttribute("data-name").indexOf(name) >= 0;
      if (ok && st) {
        ok = false;
        var cs = r.querySelectorAll("td[data-state]");
        for (var k = 0; k < cs.length; k++) {
          if (!cs[k].hidden && cs[k].getAttribute("data-state") === st) { ok = true; break; }
        }
      }
      if (r.hidden !== !ok) r.hidden = !ok;
      if (ok) shown++;
    }
    // out of the fleet's services, not the rows here: the watcher's answer to a filter
    // holds only the matching rows
    var c = document.getElementById("shown"), g = document.getElementById("grid");
    var all = Math.max(rows.length, +(g && g.getAttribute("data-total")) || 0);
    if (c && rows.length) c.textContent = shown + " of " + all + " services shown";
  }
  function unknownAll(since) {
    var cs = document.querySelectorAll("main [data-state]");
    for (var i = 0; i < cs.length; i++) {
      var c = cs[i];
      c.setAttribute("data-state", "unknown");
      c.className = c.className.replace(/s-(proven|converging|failing)/, "s-unknown");
      var w = c.querySelector(".word");
      if (w) w.textContent = "? unknown";
    }
    var b = document.getElementById("conn");
    if (b) {
      b.hidden = false;
      b.querySelector("time").textContent = new Date(since).toISOString();
    }
  }
  var live = body.getAttribute("data-live") === "1", down = null, wait = null;
  function query(part) {
    // a served page filters and pages on the watcher: the fleet may be 10,000 rows
    var q = new URLSearchParams(location.search);
    if (document.getElementById("filters")) {
      q.set("name", val("f-name")); q.set("env", val("f-env")); q.set("state", val("f-state"));
    }
    var keys = ["name", "env", "state", "page"];
    for (var i = 0; i < keys.length; i++) { if (!q.get(keys[i])) q.delete(keys[i]); }
    if (part) q.set("part", "main");
    var s = q.toString();
    return location.pathname + (s ? "?" + s : "");
  }
  function fetchMain(force) {
    var asked = query(true);
    return fetch(asked, {cache: "no-store", credentials: "same-origin"})
      .then(function (r) {
        if (!r.ok) throw new Error(String(r.status));
        var g = r.headers.get("X-Reconcile-Generation");
        return r.text().then(function (t) {
          // an answer for filters changed since it was asked is dropped: it would replace
          // the rows with another filter's (the newer filter's own request is on its way)
          if (asked !== query(true)) return;
          down = null;
          var b = document.getElementById("conn");
          if (b) b.hidden = true;
          if (force || g !== body.getAttribute("data-gen")) {
            body.setAttribute("data-gen", g);
            document.querySelector("main").innerHTML = t;
            filter();
            ages();
          }
        });
      })
      .catch(function () {
        if (down === null) down = Date.now();
        body.setAttribute("data-gen", "down");  // what comes back is shown, whatever it is
        unknownAll(down);
      });
  }
  var form = document.getElementById("filters");
  if (form) {
    form.addEventListener("input", function () {
      if (!live) { filter(); return; }
      filter();  // at once on the rows shown, then the watcher's answer for them all
      clearTimeout(wait);
      wait = setTimeout(function () {
        var u = new URL(query(false), location.href);
        u.searchParams.delete("page");  // a new filter starts at its first page
        history.replaceState(null, "", u.pathname + u.search);
        fetchMain(true);
      }, 250);
    });
    form.addEventListener("submit", function (e) { e.preventDefault(); });
  }
  filter();
  ages();
  setInterval(ages, 1000);
  if (!live) return;
  setInterval(function () {
    fetchMain(false);
  }, POLL);
})();
""".replace("POLL", str(POLL_MS))


def _hash(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


#: Only this stylesheet and this script run; nothing is fetched from anywhere but the
#: page's own origin (the poll), and nothing at all from a file.
CSP = (f"default-src 'none'; style-src '{_hash(CSS)}'; script-src '{_hash(SCRIPT)}'; "
       "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
       "frame-ancestors 'none'")


#: ``_e``'s answers by (text, limit): a fleet repeats its environments, tags and words,
#: and a page is rendered again at each poll. Bounded, then started afresh.
_ESCAPED: dict[tuple[str, int], str] = {}
_ESCAPED_MAX = 200_000


def _e(value: object, limit: int = 600) -> str:
    """The one way a value enters the markup: redacted, controls shown, bounded, escaped."""
    text = "" if value is None else value if type(value) is str else str(value)
    key = (text, limit)
    made = _ESCAPED.get(key)
    if made is None:
        if len(_ESCAPED) >= _ESCAPED_MAX:
            _ESCAPED.clear()
        made = _ESCAPED[key] = html.escape(safe(text, limit), quote=True)
    return made


def _at(ms: int | None) -> str:
    if ms is None:
        return "-"
    at = min(max(ms, 0), LAST_INSTANT_MS)
    return f"{datetime.fromtimestamp(at / 1000, UTC):%Y-%m-%d %H:%M:%S}Z"


def _time(ms: int | None) -> str:
    if ms is None:
        return "-"
    return f'<time datetime="{_at(ms).replace(" ", "T")}">{_at(ms)}</time>'


def _age(ms: int | None, now_ms: int, *, tick: bool = True) -> str:
    """``N s ago`` as of ``now_ms``; the script keeps it current (``tick``; a grid's
    ages are not ticked one by one: the poll brings them new)."""
    if ms is None:
        return "never"
    seconds = max(0, (now_ms - ms) // 1000)
    said = f"{seconds} s" if seconds < 90 else f"{round(seconds / 60)} min" \
        if seconds < 5400 else f"{round(seconds / 3600)} h"
    return f'<span data-age="{int(ms)}"{" class=tick" if tick else ""}>{said} ago</span>'


_PLAIN = re.compile(r"[A-Za-z0-9._~-]*")
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def quote(text: str) -> str:
    """``text`` percent-encoded as one URL path segment (RFC 3986 unreserved kept)."""
    if _PLAIN.fullmatch(text):
        return text  # the common case: a DNS-label-like name
    return "".join(chr(b) if b in _UNRESERVED else f"%{b:02X}" for b in text.encode())


def _short(digest: str | None) -> str:
    return "-" if not digest else digest[:19]


def _release(digest: str | None, tag: str | None) -> str:
    short = f"<code>{_e(_short(digest), 80)}</code>"
    return f"{_e(tag, 120)} {short}" if tag else short


def _word(state: CellState) -> str:
    return f'<span class="word s-{state.value}">{SIGNS[state]} {WORDS[state]}</span>'


def _slug(name: str) -> str:
    """An anchor id for a service (the file's links): hex of its name, always valid."""
    return "svc-" + name.encode().hex()[:200]


class _Links:
    """Where a service's page is: ``/service/NAME`` when served, ``#svc-…`` in a file."""

    def __init__(self, served: bool) -> None:
        self.served = served

    def service(self, name: str) -> str:
        return f"/service/{quote(name)}" if self.served else f"#{_slug(name)}"

    def fleet(self) -> str:
        return "/" if self.served else "#fleet"

    def pipeline(self) -> str:
        return "/pipeline" if self.served else "#pipeline"


@dataclass(frozen=True)
class Window:
    """What a served fleet page shows of a large fleet: the filters, applied by the
    watcher, and one page of ``PAGE_ROWS`` services (a file shows every row and filters
    in the browser)."""

    name: str = ""
    env: str = ""
    state: str = ""
    page: int = 0

    def query(self, **change: object) -> str:
        values = {"name": self.name, "env": self.env, "state": self.state,
                  "page": str(self.page)} | {k: str(v) for k, v in change.items()}
        return "?" + "&".join(f"{k}={quote(v)}" for k, v in values.items()
                              if v and v != "0")


#: Services per page of a served fleet grid: a 10,000-service fleet paints at once.
PAGE_ROWS = 500


# -- pieces ----------------------------------------------------------------------------------

def _banner(view: View) -> str:
    live, out = view.live, []
    if not live.ok:
        since = live.unknown_since_ms
        out.append(
            f'<div class="banner s-unknown" role="alert" id="unknown-banner"><strong>'
            f'{SIGNS[CellState.UNKNOWN]} UNKNOWN since {_time(since)}</strong> '
            f'({_age(since, view.now_ms)}): the live side cannot be read'
            f'{": " + _e(live.reason, 400) if live.reason else ""}. Every state below is '
            f'unknown, not the last read\'s. Last successful read: '
            f'{_time(live.last_success_ms)} ({_age(live.last_success_ms, view.now_ms)}).'
            '</div>')
    for env, error in view.status.errors:
        out.append(f'<div class="banner s-unknown" role="alert"><strong>'
                   f'{SIGNS[CellState.UNKNOWN]} {_e(env, 100)} unknown</strong>: could not '
                   f'be read: {_e(error, 400)}</div>')
    return "".join(out)


def _observed(view: View) -> str:
    taken = view.status.taken_at
    what = "Live side read at" if view.live.ok else "Last read of the live side at"
    return (f'<p class="meta">{what} {_time(taken)} ({_age(taken, view.now_ms)}); '
            f'page made at {_time(view.now_ms)}.</p>')


def _by_service(view: View) -> dict[str, dict[str, ServiceRow]]:
    grid: dict[str, dict[str, ServiceRow]] = {}
    for row in view.status.rows:
        grid.setdefault(row.service, {})[row.environment] = row
    return grid


def _fleet_cell(row: ServiceRow | None, env: str, view: View, links: _Links,
                unread: set[str]) -> str:
    if row is None:
        if env in unread:
            return (f'<td class="cell s-unknown" data-env="{_e(env, 100)}" '
                    f'data-state="unknown">{_word(CellState.UNKNOWN)}'
                    '<small>environment could not be read</small></td>')
        return f'<td class="cell" data-env="{_e(env, 100)}"><small>not here</small></td>'
    state = cell_state(row, view.live)
    detail = f"{row.proven}/{row.expected} clusters" if view.live.ok else \
        f"at the last read: {row.proven}/{row.expected} clusters"
    if state is CellState.PROVEN and row.since is not None:
        detail += f" · since {_age(row.since, view.now_ms, tick=False)}"
    elif state is CellState.FAILING:
        stated = next((c for c in row.clusters if c.last_error and not c.proven), None)
        if stated is not None:
            detail += f" · {_e(stated.cluster, 80)}: {_e(stated.last_error, 120)}"
    elif state is CellState.UNKNOWN and view.live.ok:
        gaps = [c for c in row.clusters if cluster_state(c, view.live) is CellState.UNKNOWN]
        if gaps:
            detail += f" · {_e(gaps[0].cluster, 80)}: {_e(gaps[0].why, 60)}" + (
                f" (+{len(gaps) - 1} more)" if len(gaps) > 1 else "")
    extra = ""
    if row.held:
        extra += "<small>HELD</small>"
    if row.refused:
        extra += "<small>REFUSED by policy</small>"
    if row.next is not None and view.live.ok:
        extra += f"<small>next: {_next_short(row, view)}</small>"
    return (f'<td class="cell s-{state.value}" data-env="{_e(env, 100)}" '
            f'data-state="{state.value}">{_word(state)} '
            f'<a href="{_e(links.service(row.service), 800)}">'
            f'{_release(row.pinned, row.tag)}</a><small>{detail}</small>{extra}</td>')


def _next_short(row: ServiceRow, view: View) -> str:
    nxt = row.next
    assert nxt is not None
    if nxt.unknown is not None or nxt.digest is None:
        return f"unknown ({_e(nxt.unknown or 'no digest', 200)})"
    if nxt.ready:
        return f"{_release(nxt.digest, nxt.tag)} eligible now"
    when = (f"eligible {_time(eligible_shown(nxt.eligible_at))}" if nxt.eligible_at
            else "not eligible")
    codes = ", ".join(sorted({b.split(":", 1)[0] for b in nxt.blockers}))
    return f"{_release(nxt.digest, nxt.tag)} {_e(codes, 200)}; {when}"


def _filters(view: View, window: Window | None) -> str:
    chosen = window or Window()
    envs = "".join(f'<option value="{_e(e, 100)}"'
                   f'{" selected" if e == chosen.env else ""}>{_e(e, 100)}</option>'
                   for e in view.status.environments)
    states = "".join(f'<option value="{s.value}"{" selected" if s.value == chosen.state else ""}'
                     f">{SIGNS[s]} {WORDS[s]}</option>" for s in CellState)
    return ('<form class="filters" id="filters" role="search" aria-label="Filter the fleet">'
            '<label for="f-name">name<input id="f-name" type="search" '
            f'placeholder="service name" autocomplete="off" value="{_e(chosen.name, 200)}">'
            '</label>'
            f'<label for="f-env">environment<select id="f-env"><option value="">all'
            f'</option>{envs}</select></label>'
            f'<label for="f-state">state<select id="f-state"><option value="">all</option>'
            f'{states}</select></label><span id="shown" class="small" aria-live="polite">'
            '</span></form>')


def _counts(view: View, env: str | None = None) -> str:
    counted = dict.fromkeys(CellState, 0)
    for row in view.status.rows:
        if env is None or row.environment == env:
            counted[cell_state(row, view.live)] += 1
    return "".join(f'<span class="count s-{s.value}">{_word(s)} {n}</span>'
                   for s, n in counted.items() if n)


def fleet(view: View, links: _Links, window: Window | None = None) -> str:
    envs = view.status.environments
    unread = {e for e, _ in view.status.errors}
    grid = _by_service(view)
    total, pager = len(grid), ""
    if window is not None:
        if window.env in envs:
            envs = (window.env,)
        wanted = window.name.lower()
        chosen = [(n, cells) for n, cells in grid.items() if wanted in n.lower() and (
            not window.state or any(e in cells and cell_state(cells[e], view.live).value
                                    == window.state for e in envs))]
        pages = max(1, -(-len(chosen) // PAGE_ROWS))
        at = min(max(window.page, 0), pages - 1)
        shown = chosen[at * PAGE_ROWS:(at + 1) * PAGE_ROWS]
        pager = (f'<p class="small" id="pager">services {at * PAGE_ROWS + 1 if shown else 0}–'
                 f"{at * PAGE_ROWS + len(shown)} of {len(chosen)} matching ({total} in all)"
                 + (f' · <a href="{_e(window.query(page=at - 1), 900)}">previous</a>'
                    if at > 0 else "")
                 + (f' · <a href="{_e(window.query(page=at + 1), 900)}">next</a>'
                    if at + 1 < pages else "") + "</p>")
    else:
        shown = list(grid.items())
    head = "".join(f'<th scope="col" data-env="{_e(e, 100)}">{_e(e, 100)}</th>' for e in envs)
    rows: list[str] = []
    for name, cells in shown:
        rows.append(
            f'<tr data-name="{_e(name.lower(), 300)}"><th scope="row"><a href="'
            f'{_e(links.service(name), 800)}">{_e(name, 200)}</a></th>'
            + "".join(_fleet_cell(cells.get(e), e, view, links, unread) for e in envs)
            + "</tr>")
    return (f'<h2 id="fleet">Fleet</h2><p>{_counts(view)}</p>{pager}'
            f'<div class="tablewrap" tabindex="0" role="region" aria-label="fleet grid">'
            f'<table id="grid" data-total="{total}"><caption class="small">services × '
            f'environments: the pinned release and what the clusters prove of it</caption>'
            f'<thead><tr><th scope="col">service</th>{head}</tr></thead><tbody>'
            + "".join(rows) + "</tbody></table></div>" + pager.replace(' id="pager"', ""))


def pipeline(view: View, links: _Links) -> str:
    envs = view.status.environments
    stages: list[str] = []
    for index, env in enumerate(envs):
        rows = [r for r in view.status.rows if r.environment == env]
        digests = sorted({(r.service, r.pinned, r.tag) for r in rows
                          if cell_state(r, view.live) is CellState.PROVEN})
        moving = [r for r in rows if r.next is not None]
        items = "".join(
            f'<li><a href="{_e(links.service(r.service), 800)}">{_e(r.service, 200)}</a>: '
            f'{_next_short(r, view) if view.live.ok else _word(CellState.UNKNOWN)}</li>'
            for r in moving[:200])
        more = f"<li>… {len(moving) - 200} more</li>" if len(moving) > 200 else ""
        proves = "".join(f"<li>{_e(s, 200)} {_release(d, t)}</li>"
                         for s, d, t in digests[:50])
        proves += f"<li>… {len(digests) - 50} more</li>" if len(digests) > 50 else ""
        if index:
            stages.append('<div class="arrow" aria-hidden="true">→</div>')
        stages.append(
            f'<div class="stage" data-stage="{_e(env, 100)}"><h3>{index + 1}. '
            f'{_e(env, 100)}</h3><p>{_counts(view, env)}</p>'
            f'<p class="small">proves:</p><ul>{proves or "<li>nothing proven</li>"}</ul>'
            + (f'<p class="small">moving in next:</p><ul>{items}{more}</ul>' if index else "")
            + "</div>")
    return f'<h2 id="pipeline">Pipeline</h2><div class="pipeline">{"".join(stages)}</div>'


#: The last status's rows by (service, environment): a page of 10,000 services asks for
#: the previous environment's row of each (kept for one status value only).
_INDEX: list[tuple[Status, dict[tuple[str, str], ServiceRow]]] = []


def _row(view: View, service: str, environment: str) -> ServiceRow | None:
    cached = _INDEX[0] if _INDEX else None  # one read: another thread may replace it
    if cached is None or cached[0] is not view.status:
        cached = (view.status, {(r.service, r.environment): r for r in view.status.rows})
        _INDEX[:] = [cached]
    return cached[1].get((service, environment))


def _soak(row: ServiceRow, view: View) -> str:
    """The soak as a bar: from when the previous environment proved the digest (its row's
    ``since``) to when the promotion is eligible."""
    nxt = row.next
    if nxt is None or nxt.eligible_at is None or not any(
            b.startswith("not_soaked") for b in nxt.blockers):
        return ""
    envs = view.status.environments
    index = envs.index(row.environment) if row.environment in envs else 0
    upstream = _row(view, row.service, envs[index - 1]) if index else None
    start = upstream.since if upstream is not None else None
    end = nxt.eligible_at
    if start is None or end <= start:
        return f"<p>soak ends {_time(end)}</p>"
    done = min(max(view.now_ms - start, 0), end - start)
    percent = round(100 * done / (end - start))
    return (f'<p><label>soak <progress max="{end - start}" value="{done}" '
            f'aria-label="soak {percent}% done">{percent}%</progress></label> '
            f"{percent}% · ends {_time(end)}</p>")


def _checks(checks: Sequence[ClusterCheck]) -> str:
    if not checks:
        return '<span class="small">none declared</span>'
    out = []
    for check in checks:
        state = CellState.UNKNOWN if check.ok is None else \
            CellState.PROVEN if check.ok else CellState.FAILING
        word = {CellState.UNKNOWN: "not run", CellState.PROVEN: "passed",
                CellState.FAILING: "failed"}[state]
        out.append(f'<div><span class="word s-{state.value}">{SIGNS[state]} {word}</span> '
                   f'{_e(check.name, 120)}'
                   + (f"<small>{_e(check.detail, 300)}</small>" if check.detail else "")
                   + "</div>")
    return "".join(out)


def _cluster_rows(row: ServiceRow, view: View) -> str:
    out = []
    for c in row.clusters:
        state = cluster_state(c, view.live)
        checks = view.verification.get((row.environment, row.service, c.cluster)) \
            or checks_of(c)
        why = "" if c.proven else f"<small>{_e(c.why, 80)}: {_e(c.detail, 300)}</small>"
        error = f"<small>stated: {_e(c.last_error, 300)}</small>" if c.last_error else ""
        out.append(
            f'<tr><th scope="row">{_e(c.cluster, 120)}</th>'
            f'<td class="s-{state.value}" data-state="{state.value}">{_word(state)}'
            f'{why}{error}</td><td><code>{_e(_short(c.running), 80)}</code></td>'
            f"<td>{_e(c.replicas or '-', 60)}</td><td>{_list(c.egress)}</td>"
            f"<td>{_list(c.routes)}</td>"
            f"<td>{_time(c.healthy_since) if c.proven else '-'}</td>"
            f"<td>{_checks(checks)}</td></tr>")
    return "".join(out)


def _list(items: Sequence[str] | None) -> str:
    if items is None:
        return '<span class="small">not said</span>'
    if not items:
        return '<span class="small">none</span>'
    return "".join(f"<code>{_e(i, 200)}</code><br>" for i in items[:40]) + \
        (f"<small>… {len(items) - 40} more</small>" if len(items) > 40 else "")


def _blockers(row: ServiceRow, view: View) -> str:
    nxt = row.next
    if nxt is None:
        return "<p>Next promotion: nothing to promote.</p>"
    if nxt.unknown is not None or nxt.digest is None:
        return f"<p>Next promotion: {_word(CellState.UNKNOWN)} {_e(nxt.unknown, 300)}</p>"
    when = ("eligible now" if nxt.ready else
            f"eligible {_time(eligible_shown(nxt.eligible_at))}" if nxt.eligible_at
            else "not eligible yet")
    items = "".join(f"<li><code>{_e(b.split(':', 1)[0], 60)}</code>"
                    f"{_e(':' + b.split(':', 1)[1], 600) if ':' in b else ''}</li>"
                    for b in nxt.blockers)
    return (f"<p>Next promotion: {_release(nxt.digest, nxt.tag)} — <strong>{when}"
            f"</strong></p>{_soak(row, view)}"
            + (f"<p>Blockers:</p><ul>{items}</ul>" if items else ""))


def _history(items: Iterable[HistoryItem], view: View) -> str:
    out = []
    for item in items:
        commit = ""
        if item.commit:
            short = f"<code>{_e(item.commit[:12], 40)}</code>"
            target = (view.commit_url or "").replace("{commit}", quote(item.commit))
            commit = f' <a href="{_e(target, 800)}">{short}</a>' \
                if view.commit_url and _web(view.commit_url) else " " + short
        link = f' <a href="{_e(item.link, 800)}" rel="noreferrer">pull request</a>' \
            if item.link and _web(item.link) else ""
        out.append(f"<li>{_time(item.at_ms)} <strong>{_e(item.kind, 40)}</strong> "
                   f"{_e(item.words, 600)}{commit}{link}</li>")
    return "<ul>" + "".join(out) + "</ul>" if out else "<p>nothing recorded</p>"


def _web(url: str) -> bool:
    """Only https links leave the page (never ``javascript:`` or ``data:``)."""
    return url.startswith("https://")


def service(view: View, name: str, links: _Links, *, anchor: bool = False,
            rows: Sequence[ServiceRow] | None = None) -> str:
    """A service's page; ``rows``: its rows when the caller has them grouped already."""
    if rows is None:
        rows = [r for r in view.status.rows if r.service == name]
    if not rows:
        return f"<h2>{_e(name, 200)}</h2><p>No such service in this view.</p>"
    envs: list[str] = []
    for row in rows:
        state = cell_state(row, view.live)
        since = (f"proven since {_time(row.since)} ({_age(row.since, view.now_ms)})"
                 + (f" <small>on the word of: {_e(row.since_source, 300)}</small>"
                    if row.since_source else "")) if state is CellState.PROVEN and row.since \
            else ""
        reasons = "".join(f"<li>{_e(r, 600)}</li>" for r in row.reasons[:20]) \
            if state is not CellState.PROVEN and view.live.ok else ""
        pending = [p for p in view.pending if p.service == name
                   and p.environment == row.environment]
        pend = ("<ul>" + "".join(f"<li><code>{_e(p.action, 40)}</code> {_e(p.summary, 600)}"
                                 "</li>" for p in pending) + "</ul>") if pending else \
            "<p>none</p>" if view.planned else \
            "<p class=\"small\">not known here: this page was made without a plan " \
            "(the watcher's view shows the current plan's)</p>"
        envs.append(
            f'<section class="env s-{state.value}" data-env="{_e(row.environment, 100)}">'
            f'<h3>{_e(row.environment, 100)} {_word(state)}</h3>'
            f"<p>pinned {_release(row.pinned, row.tag)} · "
            + ("" if view.live.ok else "at the last read, ")
            + f"{row.proven}/{row.expected} clusters prove it{'; ' + since if since else ''}"
            "</p>"
            + (f"<p><strong>HELD</strong> {_e(row.held, 600)}</p>" if row.held else "")
            + "".join(f"<p><strong>REFUSED</strong> {_e(b, 600)}</p>" for b in row.refused)
            + (f"<ul>{reasons}</ul>" if reasons else "")
            + _blockers(row, view)
            + f'<div class="tablewrap" tabindex="0" role="region" aria-label="clusters of '
            f'{_e(name, 200)} in {_e(row.environment, 100)}"><table><thead><tr>'
            '<th scope="col">cluster</th>'
            '<th scope="col">state</th><th scope="col">running</th><th scope="col">replicas'
            '</th><th scope="col">egress</th><th scope="col">routes</th><th scope="col">'
            'healthy since</th><th scope="col">verification</th></tr></thead><tbody>'
            + _cluster_rows(row, view) + "</tbody></table></div>"
            + f"<h4>Pending changes</h4>{pend}</section>")
    history = [h for h in view.history if not h.services or name in h.services]
    ident = f' id="{_slug(name)}"' if anchor else ""
    return (f"<article{ident}><h2>{_e(name, 200)}</h2>" + "".join(envs)
            + f"<h3>History</h3>{_history(history[:50], view)}</article>")


# -- documents -------------------------------------------------------------------------------

def main(view: View, page: str, name: str | None = None, *, served: bool = True,
         window: Window | None = None) -> str:
    """The ``<main>`` of a page: what a live page's poll replaces. ``window``: a served
    fleet page's filters and page (default: the first page, unfiltered)."""
    links = _Links(served)
    if served and window is None:
        window = Window()
    body = _banner(view) + _observed(view)
    if page == "service" and name is not None:
        return body + service(view, name, links)
    if page == "pipeline":
        return body + pipeline(view, links)
    if page == "all":
        return (body + fleet(view, links) + pipeline(view, links)
                + '<h2 id="services">Services</h2>'
                + "".join(service(view, n, links, anchor=True, rows=tuple(cells.values()))
                          for n, cells in _by_service(view).items()))
    return body + fleet(view, links, window if served else None)


def document(view: View, page: str = "fleet", name: str | None = None, *,
             served: bool = True, generation: int = 0, window: Window | None = None) -> str:
    """A whole page. ``served``: a page of the watcher (its own URLs, the poll);
    otherwise one self-contained file with every page in it (``page="all"``)."""
    links = _Links(served)
    title = {"service": name or "service", "pipeline": "pipeline"}.get(page, "fleet")
    live = "1" if served and view.source == "watch" else "0"
    filters = _filters(view, window) if page in ("fleet", "all") else ""
    return (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="referrer" content="no-referrer">'
        '<link rel="icon" href="data:,">'
        f"<title>reconcile · {_e(title, 200)}</title><style>{CSS}</style></head>"
        f'<body data-live="{live}" data-gen="{generation}"><header><h1>reconcile</h1>'
        f'<nav aria-label="pages"><a href="{links.fleet()}">Fleet</a>'
        f'<a href="{links.pipeline()}">Pipeline</a></nav>'
        f'<span class="small">{"live from the watcher" if live == "1" else "a snapshot"}'
        f" of {_e(', '.join(view.status.environments), 400)}</span></header>"
        '<div class="banner s-unknown" id="conn" role="alert" hidden><strong>? unknown'
        '</strong>: the watcher does not answer since <time></time>; every state shown is '
        "unknown until it does.</div>"
        + (f'<div class="bar">{filters}</div>' if filters else "")
        + "<main>" + main(view, page, name, served=served, window=window) + "</main>"
        + f"<script>{SCRIPT}</script></body></html>\n")
