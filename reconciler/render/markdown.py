"""The Markdown rendering of a plan, made for a PR comment.

Owns the comment layout: a one-line verdict, counts, a section per service with its
changes and its per-cluster evidence (in ``<details>``), blockers and drift, and a hard
size budget. GitHub rejects comments over 65,536 characters, so sections that do not fit
are left out whole and a closing note names how many and which; nothing is cut mid-table.

Every string taken from the plan is untrusted (a server's words, or a hand-edited saved
plan): ``render`` reads only ``common.untrusted(plan)`` (controls escaped, length
bounded) and embeds each such string as an inline code span (``code``/``cell``). Inside
a code span GitHub renders no HTML, no emphasis, no links or autolinks (``https://…``,
``www.``, e-mail), no ``@org/team`` mentions and no ``#123`` / ``GH-123`` / repository
autolink references, so a server string can neither ping anyone, link anywhere, open a
tag nor break a table (``|`` is escaped in cells). Only this module's own words are plain
Markdown. Pure.
"""

from __future__ import annotations

import re

from reconciler.core.plans import VERBS, Plan
from reconciler.core.sanitize import safe
from reconciler.render import common

BUDGET = 65_536
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>#+!|~])")
_BACKTICKS = re.compile(r"`+")


def esc(text: object, limit: int = 300) -> str:
    """Make trusted text inert in Markdown and HTML: controls escaped, specials backslashed."""
    return _MD_SPECIAL.sub(r"\\\1", safe(text, limit)).replace("&", "&amp;")


def code(text: object, limit: int = 300) -> str:
    """An untrusted string as one inline code span: shown verbatim, never interpreted.

    The fence is one backtick longer than the longest run inside; a space pads content
    that starts or ends with a backtick or a space (CommonMark strips one from each side).
    ``safe`` has already turned newlines into ``\\x0a``, so the span stays on its line.
    """
    value = safe(text, limit)
    if not value:
        return ""
    fence = "`" * (max((len(m) for m in _BACKTICKS.findall(value)), default=0) + 1)
    pad = " " if value[0] in " `" or value[-1] in " `" else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def cell(text: object, limit: int = 300) -> str:
    """``code`` for a table cell: a ``|`` (even inside a code span) would end the cell."""
    return code(text, limit).replace("|", "\\|")


def _reason(reason: str) -> str:
    sentence = common.REASONS.get(reason)
    return f"{code(reason)}: {sentence}" if sentence else code(reason)


def _service_section(plan: Plan, name: str) -> str:
    lines: list[str] = []
    changes = [c for c in plan.changes if c.service == name]
    blockers = [b for b in plan.blockers if b.service == name]
    drift = [d for d in plan.drift if d.service == name]
    mark = "❌" if blockers else "🔁" if changes else "⚠️" if drift else "✅"
    lines.append(f"### {mark} {code(name)}")
    lines.append("")
    for change in changes:
        lines.append(f"- **{VERBS[change.action]}** — {code(change.summary)}  ")
        lines.append(f"  _reason:_ {_reason(change.reason)}  ")
        for detail in common.change_detail(change):
            lines.append(f"  {code(detail.strip())}  ")
        lines.append(f"  _planned against:_ {code(common.preconditions_text(change))}")
    proof = plan.proof_of(name)
    if name in plan.converging and proof is not None:
        lines.append("- **not proven converged** — nothing to send; apply gates it until every "
                     "cluster proves it:")
        lines.extend(f"  - {code(reason, 300)}" for reason in proof.reasons()[:6])
    if not changes and not blockers and name not in plan.converging:
        lines.append("- no changes")
    for blocker in blockers:
        lines.append(f"- ❌ {code(blocker.code)} {code(blocker.message, 1000)}")
    for item in drift:
        lines.append(f"- ⚠️ drift {code(item.code)} {code(item.message, 1000)}")
    ev = next((e for e in plan.evidence if e.service == name), None)
    if ev is not None:
        rows = common.evidence_rows(ev)
        silent = sum(1 for r in rows if r.status == "SILENT")
        lines.append("")
        lines.append(f"<details><summary>Evidence: {len(rows) - silent}/{len(rows)} clusters "
                     f"answered</summary>")
        lines.append("")
        lines.append("| cluster | address | status | runs | state | replicas r/o/h/v/f | note |")
        lines.append("|---|---|---|---|---|---|---|")
        for r in rows:
            # status and replicas are this program's words and numbers (common._row).
            lines.append(f"| {cell(r.cluster)} | {cell(r.address)} | {esc(r.status)} | "
                         f"{cell(r.runs)} | {cell(r.state)} | {esc(r.replicas)} | "
                         f"{cell(r.note)} |")
        lines.append("")
        lines.append("</details>")
    lines.append("")
    return "\n".join(lines) + "\n"


def render(plan: Plan, *, budget: int = BUDGET) -> str:
    plan = common.untrusted(plan)
    counts = plan.counts()
    verdict = common.VERDICT_LINE[plan.verdict]
    head = [
        f"## reconcile plan: **{verdict}**",
        "",
        f"{counts['promote']} promote · {counts['rollback']} rollback · "
        f"{counts['set_egress']} egress · {counts['set_grant']} grant · "
        f"{counts['blockers']} blocker(s) · {counts['drift']} drift · "
        f"commit {code(plan.commit[:12]) if plan.commit else 'none'}"
        + (" (dirty)" if plan.dirty else "")
        + f" · clusters {', '.join(code(c, 64) for c in plan.expected_clusters) or 'none'}",
        "",
    ]
    general = [b for b in plan.blockers if b.service is None]
    if general:
        head.append("**Blockers**")
        head.append("")
        head.extend(f"- ❌ {code(b.code)} {code(b.message, 1000)}" for b in general)
        head.append("")
    general_drift = [d for d in plan.drift if d.service is None]
    if general_drift:
        head.append("**Drift**")
        head.extend(f"- ⚠️ {code(d.code)} {code(d.message, 1000)}" for d in general_drift)
        head.append("")
    text = "\n".join(head) + "\n"
    # Services that need attention first, so a truncation drops the quiet ones.
    names = plan.services()
    loud = {c.service for c in plan.changes} | {b.service for b in plan.blockers if b.service} \
        | {d.service for d in plan.drift if d.service} | set(plan.converging)
    ordered = [n for n in names if n in loud] + [n for n in names if n not in loud]
    reserve = 1_500  # room for the truncation note and the footer
    omitted: list[str] = []
    for name in ordered:
        section = _service_section(plan, name)
        if omitted or len(text) + len(section) > budget - reserve:
            omitted.append(name)
            continue
        text += section
    if omitted:
        shown = ", ".join(code(n, 40) for n in omitted[:10])
        more = f" and {len(omitted) - 10} more" if len(omitted) > 10 else ""
        text += (f"> **Truncated:** {len(omitted)} of {len(names)} service section(s) left out "
                 f"to stay under GitHub's {budget:,}-character limit: {shown}{more}. "
                 f"The counts above cover the whole plan; the saved JSON plan has every "
                 f"section.\n\n")
    text += (f"<sub>{esc(common.summary_line(plan))} · "
             f"fingerprint {code(plan.fingerprint[:16])}</sub>\n")
    return text
