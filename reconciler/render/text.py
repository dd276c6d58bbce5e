"""The terminal rendering of a plan.

Owns layout and colour for humans at a terminal: one header line per change with a
fixed verb, the reason on its own line, before → after, the per-cluster evidence as a
small table, blockers in red, drift apart from changes, and a summary line. A GO plan
with risks (``Plan.risks``) opens with them: its first line is "GO — <the first risk>
(+N more risks)", and a "Risks" list follows the header. A creation is
a ``+ create`` line (green: something new) with its preflight report compact under it;
the report's blockers are the service's blockers, shown by the control plane's own code. Colour is a
parameter: the CLI turns it on only for a TTY without ``NO_COLOR``. ``render`` reads
only ``common.untrusted(plan)``, so every string of the plan reaches the terminal passed
through ``safe`` whatever field it comes from. ``write`` puts the same text on a stream
(the commands' way: UTF-8 bytes, rendered whole before the first is written, so nothing
is written when rendering fails). Pure but for ``write``.
"""

from __future__ import annotations

import codecs
import io
import itertools
import os
from collections.abc import Iterator
from typing import TextIO, TypeGuard

from reconciler.core.plans import VERBS, Action, Blocker, Change, Plan, Verdict
from reconciler.core.preflight import ServicePreflight
from reconciler.core.review import Origin, Review
from reconciler.core.sanitize import safe
from reconciler.render import common, kindviews
from reconciler.render.common import EVIDENCE_HEADER, EvidenceRow

_CODES = {"red": "31", "green": "32", "yellow": "33", "cyan": "36", "bold": "1", "dim": "2"}


class _Style:
    def __init__(self, color: bool) -> None:
        self.color = color

    def __call__(self, text: str, *styles: str) -> str:
        if not self.color or not styles:
            return text
        codes = ";".join(_CODES[s] for s in styles)
        return f"\x1b[{codes}m{text}\x1b[0m"


def _table(rows: list[EvidenceRow], indent: str) -> list[str]:
    """The evidence rows as aligned lines: each column as wide as its widest cell, the
    note (unaligned) last, trailing blanks cut. One ``%`` format per row."""
    columns = [EVIDENCE_HEADER, *rows]
    widths = [max(map(len, column)) for column in itertools.islice(zip(*columns, strict=True), 6)]
    cells = "  ".join(f"%-{width}s" for width in widths)
    lines = []
    for row in columns:
        line = cells % row[:6]
        note = row.note
        lines.append(indent + (f"{line}  {note}" if note else line).rstrip())
    return lines


def _blocker(blocker: Blocker, style: _Style) -> str:
    """A service's blocker: a preflight blocker by the control plane's code, verbatim,
    with reconcile's own code after it (dim)."""
    if blocker.upstream_code:
        return ("  " + style(f"✗ {common.blocker_code(blocker)}", "red", "bold")
                + f"  {common.blocker_text(blocker)}" + style(f"  [{blocker.code}]", "dim"))
    return "  " + style(f"✗ {blocker.code}", "red", "bold") + f"  {blocker.message}"


def _preflight(pre: ServicePreflight, style: _Style) -> list[str]:
    """The preflight under its change, compact: a decision line, then one aligned line per
    fact; a fact that stops the creation in red. Its blockers follow with the service's."""
    first, *facts = common.preflight_facts(pre)
    decision = style(f"{first.label}: {first.text}", "green" if first.ok else "red")
    width = max((len(f.label) for f in facts), default=0)
    return [f"      {decision}", *(
        "        " + style(f"{f.label.ljust(width)}  {f.text}",
                          *(("red",) if f.ok is False else ())) for f in facts)]


_TAGS = {Origin.INTRODUCED: "  [introduced by this PR]",
         Origin.MODIFIED: "  [modified by this PR: pending on the base, changed]",
         Origin.PENDING: "  [already pending]", Origin.REMOVED: ""}


def _review(plan: Plan, style: _Style) -> list[str]:
    """The PR's part first: what it introduces, what it modifies of what the base has
    pending, what was pending anyway, what it removes."""
    review = plan.review
    if review is None:
        return []
    base = (review.base_commit or "?")[:12]
    head = (review.head_commit or "?")[:12]
    out = [style(f"This PR ({safe(review.base_ref)} {base}..{head}):", "bold")]
    if review.changes_nothing_managed:
        out += ["  changes nothing reconcile manages", ""]
        return out
    introduced = [c for c in plan.changes
                  if review.origin(c.idempotency_key) is Origin.INTRODUCED]
    pending = [c for c in plan.changes if review.origin(c.idempotency_key) is Origin.PENDING]
    if introduced or not review.modified:
        out.append(f"  introduces {len(introduced)} change(s): "
                   + ("; ".join(c.summary for c in introduced[:5]) or "none")
                   + (f" (+{len(introduced) - 5} more)" if len(introduced) > 5 else ""))
    if review.modified:
        out.append(f"  modifies {len(review.modified)} change(s) pending on the base: "
                   + "; ".join(common.modified_phrase(m) for m in review.modified[:5])
                   + (f" (+{len(review.modified) - 5} more)" if len(review.modified) > 5
                      else ""))
    if pending:
        out.append(f"  {len(pending)} change(s) were already pending on the base (they would "
                   "happen anyway)")
    for removed in review.removed:
        out.append("  " + style("- removes", "yellow") + f"  {removed.summary} (pending on the "
                   "base, no longer after this PR)")
    if review.base_verdict != plan.verdict.value:
        out.append(f"  verdict: base {review.base_verdict} → head {plan.verdict.value}")
    for ref in review.blockers_introduced:
        out.append("  " + style(f"✗ new blocker {ref.upstream_code or ref.code}", "red")
                   + f"  {ref.message}")
    for ref in review.blockers_cleared:
        out.append("  " + style(f"✓ clears {ref.upstream_code or ref.code}", "green")
                   + f"  {ref.message}")
    if review.settings_changed:
        out.append("  edits the Settings document (may change every service's plan)")
    out.append("")
    return out


def render(plan: Plan, *, color: bool = False) -> str:
    """The text plan, whole."""
    return "".join(_pieces(plan, color))


def write(plan: Plan, stream: TextIO, *, color: bool = False) -> None:
    """Write the text plan to ``stream``: the same text as ``render``, all or nothing.

    The whole plan is rendered before anything is written, so an error while rendering
    leaves nothing on the stream. To a UTF-8 text file (the terminal, a pipe, a file)
    each piece is encoded as it is made and the bytes written at once: the 10,000 × 10
    plan is 12 MB of UTF-8, against 25 MB for the same text as one ``str`` (one "●"
    makes a string two bytes a character) plus its pieces while they are joined. Any other
    stream gets ``render``'s text (``docs/scaling.md``)."""
    if not _utf8_file(stream):
        stream.write(render(plan, color=color))
        stream.flush()
        return
    errors = stream.errors or "strict"
    chunks = [piece.encode("utf-8", errors) for piece in _pieces(plan, color)]
    stream.flush()  # whatever the text layer holds goes first
    buffer = stream.buffer
    for chunk in chunks:
        buffer.write(chunk)
    buffer.flush()


def _utf8_file(stream: TextIO) -> TypeGuard[io.TextIOWrapper]:
    """A text file whose bytes are UTF-8 of its text, newlines untranslated: where
    ``write`` may put its bytes under the text layer."""
    return (isinstance(stream, io.TextIOWrapper) and os.linesep == "\n"
            and codecs.lookup(stream.encoding).name == "utf-8")


#: A piece is yielded once it holds this many entries: a line, or a service's lines as
#: one (a piece is at most about 64 services: some 80 kB of text at 10,000 × 10).
_PIECE_LINES = 64


def _header(plan: Plan, style: _Style) -> list[str]:
    """What comes before the services: where the plan was made, the verdict when GO
    with risks, the notes, the review, the risks and the blockers of no one service."""
    out: list[str] = []
    source = common.source_note(plan)
    if source is not None:  # first, before "no changes" can be read beside an edited file
        out.append(style(("PREVIEW — " if plan.worktree else "⚠ ") + source, "yellow", "bold"))
    risk_line = plan.risk_line()
    if risk_line is not None and plan.verdict is Verdict.GO:
        # What apply is already known to meet comes first, before any detail.
        out.append(style(f"{common.VERDICT_LINE[plan.verdict]} — {risk_line}", "yellow",
                         "bold"))
    commit = plan.commit[:12] if plan.commit else "<no commit>"
    dirty = " (dirty)" if plan.dirty else ""
    if plan.worktree:
        dirty = " + working tree (preview)"
    out.append(style(f"reconcile plan · commit {commit}{dirty} · {safe(plan.control_plane_url)}",
                     "bold"))
    out.append(f"gateway {safe(plan.gateway)} · expected clusters: "
               f"{', '.join(plan.expected_clusters) or '<none>'}")
    out.extend(style(f"note: {safe(note)}", "dim") for note in plan.notes)
    out.append("")
    out.extend(_review(plan, style))
    if plan.risks:
        out.append(style("Risks (GO: the writes are allowed, but apply's gate will fail, exit "
                         "15, until the cluster recovers):", "yellow", "bold"))
        for group in plan.risk_groups():  # one per cause, what it said once
            out.append("  " + style(f"⚠ {group.first.code}", "yellow")
                       + f"  {group.sentence(brief=True)}")
            out.append(f"      it said: {safe(group.first.reason, 400)}")
        out.append("")
    general = [b for b in plan.blockers if b.service is None]
    if general:
        out.append(style("Blockers (root causes first):", "red", "bold"))
        for blocker in general:
            out.append(_blocker(blocker, style))
        out.append("")
    return out


def _change(change: Change, review: Review | None, pre: ServicePreflight | None,
            style: _Style) -> list[str]:
    """One change of a service: its verb and headline (tagged with its origin in a
    pull request's review), what this PR modified, the reason, the kind's detail, the
    control plane's preflight answer, and what it was planned against."""
    verb = VERBS[change.action]
    tag = ""
    modified = None
    if review is not None:
        tag = _TAGS[review.origin(change.idempotency_key)]
        modified = review.modification(change.idempotency_key)
    creates, headline = kindviews.view_of(change).headline(change)
    out: list[str] = []
    if creates:
        out.append("  " + style(f"+ {verb}", "green", "bold")
                   + f"  {headline}" + style(tag, "dim"))
    else:
        out.append("  " + style(f"~ {verb}", "yellow", "bold") + f"  {headline}"
                   + style(tag, "dim"))
    if modified is not None:
        out.append("      " + style(f"this PR: {common.modified_phrase(modified)}", "bold"))
        out.extend(f"        {line}" for line in common.modified_detail(modified))
    out.append(f"      reason: {common.reason_text(change.reason)}")
    out.extend(f"      {line}" for line in kindviews.change_detail(change))
    if pre is not None:
        out.extend(_preflight(pre, style))
    out.append(style(f"      planned against: {kindviews.preconditions_text(change)} · "
                     f"key {change.idempotency_key}", "dim"))
    return out


def _pieces(plan: Plan, color: bool) -> Iterator[str]:
    """The text plan in pieces, each ending with a newline: the header, about a service
    each, the drift and the summary. Joined, they are the text."""
    plan = common.untrusted(plan)
    style = _Style(color)
    out = _header(plan, style)
    # Every per-service lookup is made once here: a 10,000-service plan with a blocker or
    # a drift per service would otherwise scan them all for each service.
    evidence = {e.service: e for e in plan.evidence}
    changes_by_service: dict[str, list[int]] = {}
    for index, change in enumerate(plan.changes):
        changes_by_service.setdefault(change.service, []).append(index)
    blockers_by_service: dict[str | None, list[Blocker]] = {}
    for blocker in plan.blockers:
        blockers_by_service.setdefault(blocker.service, []).append(blocker)
    drifting = {d.service for d in plan.drift}
    review = plan.review
    converging = set(plan.converging)  # computed once: a property walking every proof
    proofs = {p.service: p for p in plan.proofs}
    preflights = {(p.service, p.purpose): p for p in plan.preflights}
    rows = common.EvidenceRows()
    checks = common.check_lines(plan)  # issue 34: empty without Verification documents
    for name in plan.services():
        if len(out) >= _PIECE_LINES:
            out.append("")  # the piece's final newline
            yield "\n".join(out)
            out.clear()
        ev = evidence.get(name)
        indices = changes_by_service.get(name, [])
        service_blockers = blockers_by_service.get(name, [])
        if review is not None and name not in review.touched and not any(
                review.origin(plan.changes[i].idempotency_key) is not Origin.PENDING
                for i in indices) and not service_blockers:
            pending = len(indices)
            out.append(style(f"· {name}", "dim") + style(
                "  not touched by this PR" + (f" · {pending} change(s) already pending on the "
                                              "base" if pending else ""), "dim"))
            continue
        if not indices and not service_blockers and ev is not None \
                and name not in converging:
            if name in drifting:
                out.append(style(f"! {name}", "yellow")
                           + f"  no changes · {common.agreement(ev)} · drift below")
            else:
                out.append(style(f"= {name}", "dim") + style(
                    f"  no changes · {common.agreement(ev)}", "dim"))
            out.extend(style(f"    check {line}", "dim") for line in checks.get(name, ()))
            continue
        # A service's lines are one piece once written (same text when joined): 10,000
        # services' evidence tables as 300,000 line strings were 40 MB of peak RSS.
        first = len(out)
        out.append(style(f"● {name}", "bold"))
        for index in indices:
            change = plan.changes[index]
            pre = preflights.get((name, "create" if change.action is Action.CREATE
                                  else "promotion"))
            out.extend(_change(change, review, pre, style))
        proof = proofs.get(name)
        if name in converging and proof is not None:
            out.append("  " + style("… not proven converged", "cyan") +
                       "  nothing to send; apply gates it until every cluster proves it:")
            out.extend(f"      {reason}" for reason in proof.reasons()[:6])
        shown, left_out = common.bounded_blockers(service_blockers)
        for blocker in shown:
            out.append(_blocker(blocker, style))
        for blocker_code, count in left_out:
            out.append("  " + style(f"✗ … and {count:,} more {blocker_code} blockers", "red")
                       + style("  (--format json lists every one)", "dim"))
        if ev is not None:
            out.append("    evidence:")
            out.extend(_table(rows(ev), "      "))
        if name in checks:
            out.append("    checks (on every cluster, for the pinned digest):")
            out.extend(f"      {line}" for line in checks[name])
        out.append("")
        out[first:] = ["\n".join(out[first:])]
    if plan.drift:
        out.append(style("Drift (live differs; not part of this plan):", "yellow", "bold"))
        for drift in plan.drift:
            out.append("  " + style(f"! {drift.code}", "yellow") + f"  {drift.message}")
        out.append("")
    verdict_style = {"go": "green", "no_go": "red", "no_changes": "green"}[plan.verdict.value]
    out.append(style(common.summary_line(plan), verdict_style, "bold"))
    out.append("")  # the final newline
    yield "\n".join(out)
