"""``reconcile status`` as text, JSON and Markdown.

Owns the three views of ``core.status.Status``: a service × environment table (pinned
digest/tag, proven on N/M clusters, since, what the next promotion waits for and when it
is eligible) and, with ``clusters``, a service × cluster table (pinned, running, proven,
since -- the cluster's own healthySince --, last error). The JSON is versioned
(``format: reconcile.status``).

Pure: builds strings; every value that came from the live side goes through ``safe``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from reconciler.core.evidence import Proof
from reconciler.core.pipeline import LAST_INSTANT_MS, eligible_shown
from reconciler.core.sanitize import safe
from reconciler.core.status import ServiceRow, Status

FORMAT = "reconcile.status"
FORMAT_VERSION = "1.0"


def _at(ms: int | None) -> str:
    if ms is None:
        return "-"
    at = min(max(ms, 0), LAST_INSTANT_MS)  # the rules' own bound: never an OverflowError
    return f"{datetime.fromtimestamp(at / 1000, UTC):%Y-%m-%d %H:%M:%S}Z"


def _short(digest: str | None) -> str:
    return "-" if not digest else digest[:19]


def _release(digest: str, tag: str | None) -> str:
    return f"{tag} ({_short(digest)})" if tag else _short(digest)


def _proven(row: ServiceRow) -> str:
    word = "converged" if row.proof is Proof.CONVERGED else row.proof.value.replace("_", " ")
    return f"{row.proven}/{row.expected} {word}" + (", HELD" if row.held else "") \
        + (", REFUSED" if row.refused else "")


def _next(row: ServiceRow) -> str:
    nxt = row.next
    if nxt is None:
        return "-"
    if nxt.unknown is not None or nxt.digest is None:
        return f"unknown: {nxt.unknown or 'no digest'}"
    what = _release(nxt.digest, nxt.tag)
    if nxt.ready:
        return f"{what}: eligible now"
    codes = ", ".join(sorted({b.split(":", 1)[0] for b in nxt.blockers}))
    when = (f"eligible {_at(eligible_shown(nxt.eligible_at))}" if nxt.eligible_at
            else "not eligible")
    return f"{what}: {codes}; {when}"


def _table(headers: list[str], lines: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in lines)) if lines else len(h)
              for i, h in enumerate(headers)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*headers).rstrip()] + [fmt.format(*r).rstrip() for r in lines]


def text(status: Status, *, clusters: bool = False) -> str:
    out = [f"status at {_at(status.taken_at)} ({', '.join(status.environments)})", ""]
    rows = [[safe(r.service), r.environment, _release(r.pinned, r.tag), _proven(r),
             _at(r.since), safe(_next(r), 300)] for r in status.rows]
    out += _table(["service", "env", "pinned", "proven", "since", "next promotion"], rows)
    if any(r.since is not None for r in status.rows):
        # One legend, not a source per row: the JSON carries each row's (since_source).
        out.append("(since: proven without a gap -- the latest of the rollout's success "
                   "and every cluster's healthySince; a promotion's soak counts from it)")
    for env, error in status.errors:
        out.append(f"! {env}: could not be read: {safe(error, 500)}")
    held = [r for r in status.rows if r.held]
    if held:
        out += ["", "held (reconcile release-hold SERVICE DIGEST lifts a hold):"]
        out += [f"  {r.environment}/{safe(r.service)}: {_short(r.pinned)} "
                f"{safe(r.held or '', 600)}" for r in held]
    refused = [(r, b) for r in status.rows for b in r.refused]
    if refused:
        out += ["", "pinned but refused (apply will not send it):"]
        out += [f"  {r.environment}/{safe(r.service)}: {_short(r.pinned)} {safe(b, 600)}"
                for r, b in refused]
    blocked = [(r, b) for r in status.rows if r.next for b in r.next.blockers]
    if blocked:
        out += ["", "waiting:"]
        out += [f"  {r.environment}/{safe(r.service)}: {safe(b, 600)}" for r, b in blocked]
    if clusters:
        out += ["", *_table(
            ["service", "env", "cluster", "pinned", "running", "proven", "since",
             "last error"],
            [[safe(c.service), r.environment, safe(c.cluster), _short(c.pinned),
              _short(c.running), "yes" if c.proven else f"no ({c.why})",
              _at(c.healthy_since) if c.proven else "-", safe(c.last_error or "-", 120)]
             for r in status.rows for c in r.clusters])]
        checked = [(r, c, k) for r in status.rows for c in r.clusters for k in c.checks]
        if checked:
            # Issue 34: each check on each cluster: passing, failing with the value,
            # unknown with why.
            out += ["", "checks (per cluster, for the digest they were taken for):"]
            out += [f"  {r.environment}/{safe(c.service)} @ {safe(c.cluster)}: "
                    f"{safe(k.sentence(), 400)}" for r, c, k in checked]
    return "\n".join(out) + "\n"


def document(status: Status) -> dict[str, Any]:
    def row(r: ServiceRow) -> dict[str, Any]:
        return {
            "service": r.service, "environment": r.environment, "pinned": r.pinned,
            "tag": r.tag, "proof": r.proof.value, "proven_clusters": r.proven,
            "expected_clusters": r.expected, "since": r.since,
            "since_source": None if r.since_source is None else safe(r.since_source, 600),
            "reasons": [safe(x, 600) for x in r.reasons],
            "held": None if r.held is None else safe(r.held, 600),
            "refused": [safe(b, 600) for b in r.refused],
            "next": None if r.next is None else {
                "digest": r.next.digest, "tag": r.next.tag, "ready": r.next.ready,
                "eligible_at": r.next.eligible_at,
                "blockers": [safe(b, 600) for b in r.next.blockers],
                "unknown": None if r.next.unknown is None else safe(r.next.unknown, 300)},
            "clusters": [{"cluster": c.cluster, "pinned": c.pinned, "running": c.running,
                          "proven": c.proven, "why": c.why,
                          "since": r.since if c.proven else None,
                          "healthy_since": c.healthy_since,
                          "last_error": safe(c.last_error, 600) if c.last_error else None,
                          # issue 34: only where checks are declared (else as before)
                          **({"checks": [{"check": k.check, "outcome": k.outcome.value,
                                          "value": safe(k.value, 80),
                                          "why": safe(k.why, 300), "digest": k.digest,
                                          "generation": k.generation}
                                         for k in c.checks]} if c.checks else {})}
                         for c in r.clusters],
        }

    return {"format": FORMAT, "format_version": FORMAT_VERSION, "taken_at": status.taken_at,
            "environments": list(status.environments),
            "errors": [{"environment": e, "error": safe(m, 600)} for e, m in status.errors],
            "services": [row(r) for r in status.rows]}


def as_json(status: Status) -> str:
    return json.dumps(document(status), indent=2, sort_keys=True) + "\n"


def _cell(value: str) -> str:
    return safe(value, 600).replace("|", "\\|")


def markdown(status: Status, *, clusters: bool = False) -> str:
    out = [f"### Status at {_at(status.taken_at)}", "",
           "| service | env | pinned | proven | since | next promotion |",
           "|---|---|---|---|---|---|"]
    out += [f"| {_cell(r.service)} | {r.environment} | `{_cell(_release(r.pinned, r.tag))}` | "
            f"{_proven(r)} | {_at(r.since)} | {_cell(_next(r))} |" for r in status.rows]
    for env, error in status.errors:
        out.append(f"\n> **{env}** could not be read: {_cell(error)}")
    if clusters:
        out += ["", "| service | env | cluster | running | proven | last error |",
                "|---|---|---|---|---|---|"]
        out += [f"| {_cell(c.service)} | {r.environment} | {_cell(c.cluster)} | "
                f"`{_short(c.running)}` | {'✅' if c.proven else '❌ ' + str(c.why)} | "
                f"{_cell(c.last_error or '')} |" for r in status.rows for c in r.clusters]
    return "\n".join(out) + "\n"
