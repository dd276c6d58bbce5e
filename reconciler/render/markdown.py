"""The Markdown rendering of a plan, made for a PR comment a reviewer approves from.

Owns the comment layout, in reading order:

1. the first line: the verdict and what the plan (with ``plan --base``: what *this PR*)
   does, in words ("promotes `checkout` `v2.3.0` → `v2.4.0` on `sn1`–`sn3`; revokes all
   2 egress destinations of `search` ⚠️"); a PR that changes nothing managed says so; a
   GO plan with risks names the first risk before that, briefly ("**GO** — ⚠️ `sn3`
   refused the last digest for `checkout` (`sha256:b10540cb4377`); apply will not prove
   it until `sn3` recovers (+1 more risk) · promotes …"), and a **Risks** section lists
   each with what the cluster said;
2. the environment (control-plane host only, no credentials or path; gateway; clusters;
   base..head commits or the commit) and the counts;
3. **Why NO-GO**, root causes first and once: a cluster no address answered as is one
   line naming it, why (its message carries the address), and the services it blocks;
   each blocked service's section only points back to it;
4. **This PR** (with a review): changes introduced, modified (pending on the base, and
   changed by the PR: each said in words, "adds `api.sendgrid.com:443` to `checkout`'s
   egress (`api.paypal.com:443` already pending)"), already pending, removed; the base's
   verdict; blockers introduced and cleared;
5. **Destructive changes** (⚠️): an egress revoke-all or any egress destination revoked,
   a capability removed, a rollback; each is flagged again in its service's section;
6. **Apply**: the exact command (``reconcile apply FILE`` when the caller names the saved
   file, else how to save one) and the saved plan's content digest; or, given a
   ``Delivery`` (CI saved the plan), **What next**: the workflow run and the artifact
   holding the plan (links), and how it is applied after the merge, never a path on
   the runner;
7. the services: with a review, "Introduced by this PR" and "Modified by this PR" (full
   sections; a modified change shows what the PR changes against the base's pending
   change and against live), blocked services
   the PR does not touch, "Removed by this PR", "Already pending on the base" and "Not
   touched by this PR" (both collapsed, one line per service); without one, every service
   with a change, a blocker, drift or no proof of convergence gets a section (changes,
   destructive flags, what the judge does not prove, evidence table in ``<details>``) and
   the services proven converged collapse to one line each.

**Parts.** GitHub rejects a comment over 65,536 characters, so ``render_parts`` splits
past ``budget`` into parts rather than dropping anything: part 1 carries the head above
and as many sections as fit; each further part starts with "## reconcile plan · part
k/N" and re-opens the group it continues. Each part is valid Markdown on its own: a
section, a table or a ``<details>`` is never cut; a section larger than a whole part is
split at entry (row) boundaries, the ``<details>`` closed and re-opened and the table
header repeated; as a last resort an entry too large for any part is replaced by a note
saying so (the saved JSON plan has it). Every part is at most ``budget`` characters.

``render`` returns one string: the whole comment when it fits the budget, else part 1
with an honest "**Truncated:**" note naming how many service sections (and which) are
in the later parts and the saved JSON plan. It is what ``plan --format markdown`` and
``show --format markdown`` print, so a terminal never receives an over-long comment;
``reconcile comment`` posts ``render_parts``.

Every string taken from the plan is untrusted (a server's words, or a hand-edited saved
plan): rendering reads only ``common.untrusted(plan)`` (controls escaped, length bounded)
and embeds each such string as an inline code span (``code``/``cell``), never inside an
HTML block (``<summary>`` holds only this module's words and numbers). Inside a code
span GitHub renders no HTML, no emphasis, no links or autolinks (``https://…``, ``www.``,
e-mail), no ``@org/team`` mentions and no ``#123`` / ``GH-123`` / repository autolink
references, so a server string can neither ping anyone, link anywhere, open a tag nor
break a table (``|`` is escaped in cells). Only this module's own words are plain
Markdown. Pure.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from reconciler.core import greenfield
from reconciler.core.codes import BlockerCode
from reconciler.core.evidence import ServiceProof
from reconciler.core.live import EgressRule
from reconciler.core.plans import (
    VERBS,
    Action,
    Blocker,
    Change,
    Plan,
    ReleaseRef,
    ServiceEvidence,
    Verdict,
)
from reconciler.core.preflight import ServicePreflight
from reconciler.core.review import Origin, Review
from reconciler.core.sanitize import safe
from reconciler.render import common, jsonplan, kindviews
from reconciler.render.delivery import Delivery

BUDGET = 65_536
#: The smallest budget a part can honour (the head, one section title and one entry).
MIN_BUDGET = 8_000
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>#+!|~])")
_BACKTICKS = re.compile(r"`+")
_URL_HOST = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://(?:[^@/?#]*@)?([^/?#]*)")
_NUMBERED = re.compile(r"^(.*?)(\d+)$")
_TITLE_WORDS = 240  # the first line details each change only while it stays this short
_LIST_MAX = 25  # names or entries listed in a summary line before "and N more"
_EVIDENCE_HEADER = ("| cluster | address | status | runs | state | replicas r/o/h/v/f | note |\n"
                    "|---|---|---|---|---|---|---|\n")
_WORST_PART = "999999"  # reserve room for any "part k/N" in a heading
_VERDICT_WORDS = {v.value: words for v, words in common.VERDICT_LINE.items()}
_ACTIONS = frozenset(a.value for a in Action)


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


# -- words ---------------------------------------------------------------------------


def _n(count: int, one: str, many: str | None = None) -> str:
    return f"{count:,} {one if count == 1 else many or one + 's'}"


def _names(names: Sequence[str], limit: int = _LIST_MAX, where: str = "") -> str:
    shown = ", ".join(code(n, 64) for n in names[:limit])
    more = len(names) - limit
    return shown + (f" and {more:,} more{where}" if more > 0 else "")


def _host(url: str) -> str:
    """The control plane's host[:port]: never its credentials, path or query."""
    match = _URL_HOST.match(url)
    if match:
        return match.group(1)
    return re.split(r"[/?#]", url, maxsplit=1)[0].rsplit("@", 1)[-1]


def _clusters(names: Sequence[str]) -> str:
    """``sn1``–``sn3`` for a numbered run, a short list, or a count."""
    if not names:
        return "no cluster"
    matches = [_NUMBERED.match(n) for n in names]
    numbered = [(m.group(1), int(m.group(2)), n) for m, n in zip(matches, names, strict=True)
                if m is not None]
    if len(names) >= 3 and len(numbered) == len(names) \
            and len({p for p, _, _ in numbered}) == 1:
        ordered = sorted(numbered, key=lambda t: t[1])
        numbers = [num for _, num, _ in ordered]
        if numbers == list(range(numbers[0], numbers[0] + len(numbers))):
            return f"{code(ordered[0][2], 64)}–{code(ordered[-1][2], 64)}"
    if len(names) <= 3:
        return ", ".join(code(n, 64) for n in names)
    return _n(len(names), "cluster")


def _version(ref: ReleaseRef | None) -> str:
    if ref is None or ref.digest is None:
        return "nothing"
    return code(ref.tags[0], 64) if ref.tags else code(common.short(ref.digest))


def _rules(rules: Iterable[EgressRule]) -> str:
    return ", ".join(code(f"{r.host}:{r.port}", 120) for r in rules)


def _caps(caps: Sequence[str]) -> str:
    return ", ".join(code(c, 64) for c in caps)


#: The words each kind's view writes its Markdown with (``render.kindviews``).
_WORDS = kindviews.Words(code=code, n=_n, clusters=_clusters, version=_version,
                         rules=_rules, caps=_caps)


def _reason(reason: str) -> str:
    sentence = common.REASONS.get(reason)
    return f"{code(reason)}: {sentence}" if sentence else code(reason)


def destructive(change: Change) -> str | None:
    """What a change takes away, in words, or None: an egress revoke-all or any egress
    destination revoked, a capability removed, a rollback (each kind says: its view)."""
    return kindviews.view_of(change).destructive(change, _WORDS)


def _phrase(change: Change, clusters: Sequence[str]) -> str:
    """One change as the first line says it."""
    warn = " ⚠️" if destructive(change) else ""
    return kindviews.view_of(change).phrase(change, clusters, warn, _WORDS)


def _aggregate(action: Action, changes: Sequence[Change], named: bool) -> str:
    """Changes of one kind as the first line says them: naming the services (``named``)
    or counting them."""
    taking = sum(1 for c in changes if destructive(c))
    services = sorted({c.service for c in changes})
    who = ", ".join(code(s, 64) for s in services) if named else _n(len(services), "service")
    return kindviews.view_of(action).aggregate(action, changes, named, who, taking, _WORDS)


#: The order the first line names kinds in (each kind's view ranks its own).
_TITLE_ORDER = kindviews.TITLE_ORDER


def _does(plan: Plan, changes: Sequence[Change], room: int = _TITLE_WORDS) -> str:
    """What ``changes`` do, in words: each one with its versions and clusters while that
    fits ``room`` characters, else the services named by kind, else counted by kind."""
    clusters = {e.service: e.expected_clusters for e in plan.evidence}
    kinds = [[c for c in changes if c.action is action] for action in _TITLE_ORDER]
    if len(changes) <= 6:
        detailed = "; ".join(_phrase(c, clusters.get(c.service, plan.expected_clusters))
                             for items in kinds for c in items)
        if len(detailed) <= room:
            return detailed
    if len({c.service for c in changes}) <= 8:
        named = "; ".join(_aggregate(items[0].action, items, True) for items in kinds if items)
        if len(named) <= room:
            return named
    return "; ".join(_aggregate(items[0].action, items, False) for items in kinds if items)


def _blocker_name(blocker: Blocker) -> str:
    if blocker.code is BlockerCode.CLUSTER_UNREACHABLE and blocker.cluster:
        return f"cluster {code(blocker.cluster, 64)} unreachable"
    if blocker.code is BlockerCode.CLUSTER_SILENT and blocker.cluster and blocker.service:
        return f"cluster {code(blocker.cluster, 64)} silent for {code(blocker.service, 64)}"
    if blocker.service:
        return f"{code(common.blocker_code(blocker))} on {code(blocker.service, 64)}"
    if blocker.cluster:
        return f"{code(blocker.code)} on cluster {code(blocker.cluster, 64)}"
    return code(common.blocker_code(blocker))


def _cause(plan: Plan) -> str:
    shared = [b for b in plan.blockers if b.services]
    first = shared[0] if shared else plan.blockers[0]
    words = _blocker_name(first)
    if first.services:
        words += f", blocking {_n(len(first.services), 'service')}"
    rest = len(plan.blockers) - 1
    return words + (f" (+{_n(rest, 'more blocker')})" if rest else "")


def _introduced(plan: Plan, review: Review) -> list[Change]:
    return [c for c in plan.changes if review.origin(c.idempotency_key) is Origin.INTRODUCED]


def _md_code(text: str) -> str:
    return code(text, 120)


def _modified_words(review: Review, room: int = _TITLE_WORDS) -> str:
    """The changes this PR modifies, each in words while that fits ``room``, else
    counted with the services named."""
    detailed = "; ".join(common.modified_phrase(m, _md_code, " ⚠️") for m in review.modified)
    if len(detailed) <= room:
        return detailed
    services = sorted({m.service for m in review.modified})
    return (f"modifies {_n(len(review.modified), 'change')} pending on the base "
            f"({_names(services, 8)})")


#: How a change's origin is said next to it.
_ORIGIN_WORDS = {Origin.INTRODUCED: " · _introduced by this PR_",
                 Origin.MODIFIED: " · _modified by this PR (pending on the base, changed)_",
                 Origin.PENDING: " · _already pending on the base_", Origin.REMOVED: ""}


def _title_words(plan: Plan) -> str:
    review = plan.review
    if review is not None:
        if review.changes_nothing_managed:
            what = "this PR changes nothing reconcile manages" + (
                f" ({_n(len(plan.changes), 'change')} already pending on the base)"
                if plan.changes else "")
        else:
            bits = []
            introduced = _introduced(plan, review)
            if introduced:
                bits.append(_does(plan, introduced))
            if review.modified:
                bits.append(_modified_words(review))
            if review.removed:
                bits.append(f"drops {_n(len(review.removed), 'change')} pending on the base")
            if review.blockers_introduced:
                bits.append(f"adds {_n(len(review.blockers_introduced), 'blocker')}")
            if review.blockers_cleared:
                bits.append(f"clears {_n(len(review.blockers_cleared), 'blocker')}")
            if not bits:
                edited = (_names(review.touched, 3) if review.touched
                          else "the Settings document")
                bits.append(f"edits {edited} with no change to send")
            what = "this PR " + "; ".join(bits)
    elif plan.changes:
        what = _does(plan, plan.changes)
    elif plan.verdict is Verdict.NO_CHANGES:
        what = "nothing to change: every service is proven converged on every expected cluster"
        if plan.drift:
            what += f" ({_n(len(plan.drift), 'drift finding')} below)"
    elif plan.converging:
        what = (f"nothing to send; {_n(len(plan.converging), 'service')} not proven "
                "converged (apply waits for them)")
    else:
        what = "nothing to send"
    if not plan.blockers:
        return what
    if review is None and plan.changes:
        return f"{_cause(plan)} · planned: {_does(plan, plan.changes, _TITLE_WORDS - 40)}"
    return f"{_cause(plan)} · {what}"


# -- the head: title, environment, counts ---------------------------------------------


def _risk_words(plan: Plan) -> str:
    """The first cause of risk of a GO plan (``Plan.risk_groups``: the PR's services
    first; its values as code spans) and how many more."""
    groups = plan.risk_groups()
    if not groups or plan.verdict is not Verdict.GO:
        return ""
    rest = len(groups) - 1
    more = f" (+{_n(rest, 'more risk')})" if rest else ""
    return f"⚠️ {groups[0].sentence(lambda v: code(v, 200), brief=True)}{more} · "


def _title(plan: Plan, part: str = "", approval: str | None = None) -> str:
    verdict = common.VERDICT_LINE[plan.verdict]
    # Where the desired state came from goes first when it is not a clean commit: a
    # preview, or edits the plan left out (never "no changes" beside an edited file).
    source = common.source_headline(plan)
    prefix = f"⚠️ {esc(source)} · " if source else ""
    if approval:  # a plan nobody reviewed yet says so before anything else
        prefix = f"⚠️ needs approval: {esc(approval, 200)} · " + prefix
    return (f"## {prefix}reconcile plan: **{verdict}** — {_risk_words(plan)}"
            f"{_title_words(plan)}{part}\n\n")


def _risks_section(plan: Plan) -> list[_Section]:
    if not plan.risks:
        return []
    # One bullet per cause, what the cluster said once (the sentence is brief).
    lines = [f"- ⚠️ {group.sentence(lambda v: code(v, 200), brief=True)}  \n"
             f"  {code(group.first.code)} · it said: {code(group.first.reason, 1000)}\n"
             for group in plan.risk_groups()]
    title = ("The writes are allowed, but apply's convergence gate will fail (exit 15) on "
             "these until the cluster recovers; the gate stops at once when the control "
             "plane reports the rollout failed or mismatched.\n\n")
    return [_Section("⚠️ Risks", title, [_Seg(lines)])]


def _environment(plan: Plan) -> str:
    clusters = _names(plan.expected_clusters, 20) or "none"
    bits = [f"control plane {code(_host(plan.control_plane_url), 120)}",
            f"gateway {code(plan.gateway, 120)}", f"clusters {clusters}"]
    review = plan.review
    if review is not None:
        base, head = (review.base_commit or "?")[:12], (review.head_commit or "?")[:12]
        # A base given as the commit itself (CI passes the PR's base SHA) is that commit,
        # already shown short: never 40 hex digits again.
        named = review.base_ref
        same = bool(re.fullmatch(r"[0-9a-fA-F]{7,64}", named)) and \
            (review.base_commit or "").lower().startswith(named.lower())
        bits.append(f"commits {code(base)}..{code(head)}"
                    + ("" if same else f" (base {code(named, 80)})"))
    else:
        bits.append(f"commit {code(plan.commit[:12])}" if plan.commit else "no commit")
    line = "**Where:** " + " · ".join(bits) + (" (dirty)" if plan.dirty else "") + "  \n"
    counts = plan.counts()
    line += "**Plan:** " + (f"{counts['create']} create · " if counts.get("create") else "")
    line += (f"{counts['promote']} promote · {counts['rollback']} rollback · "
             f"{counts['set_egress']} egress · {counts['set_grant']} grant · "
             + "".join(f"{kind.counts(counts)} {kind.counted_as} · "
                       for kind in common.counted_kinds(counts))
             + f"{counts['blockers']} blocker(s) · {counts['drift']} drift")
    if plan.converging:
        line += f" · {len(plan.converging):,} not proven converged"
    line += "\n\n"
    note = common.source_note(plan)
    if note is not None:
        line += f"⚠️ **{esc(note.split(':', 1)[0])}**:{esc(note.split(':', 1)[1], 2000)}\n\n"
    for note in plan.notes:
        line += f"ℹ️ {esc(note)}\n\n"
    return line


# -- sections --------------------------------------------------------------------------


@dataclass
class _Seg:
    """Entries that may be split between parts, wrapped by ``open`` and ``close``.

    Each entry is one or more whole lines ending in a newline (a list item, a table
    row). After a split the next part re-opens with ``reopen`` (the ``<details>`` and
    the table header again). ``too_large`` stands in for an entry no part can hold.
    """

    lines: list[str]
    open: str = ""
    close: str = "\n"
    reopen: str | None = None
    too_large: str = "- _(an entry of {size:,} characters is too large for one comment part " \
        "and is left out here; the saved JSON plan has it)_\n"

    def text(self) -> str:
        return self.open + "".join(self.lines) + self.close


@dataclass
class _Section:
    group: str  # the ### heading it sits under
    title: str = ""  # its own first line(s)
    segs: list[_Seg] = field(default_factory=list)
    again: str = ""  # its title when continued in a later part
    names: tuple[str, ...] = ()  # the services it shows in full

    def text(self) -> str:
        return self.title + "".join(s.text() for s in self.segs)


def _details(summary: str, lines: list[str], header: str = "") -> _Seg:
    """A collapsed block; ``summary`` is this module's words only (HTML is not escaped)."""
    return _Seg(lines=lines, open=f"<details><summary>{summary}</summary>\n\n{header}",
                close="\n</details>\n\n",
                reopen=f"<details><summary>{summary} (continued)</summary>\n\n{header}")


def _evidence(ev: ServiceEvidence) -> _Seg:
    rows = common.evidence_rows(ev)
    answered = sum(1 for r in rows if r.status != "SILENT")
    # status and replicas are this program's words and numbers (common.EvidenceRows).
    lines = [f"| {cell(r.cluster)} | {cell(r.address)} | {esc(r.status)} | {cell(r.runs)} | "
             f"{cell(r.state)} | {esc(r.replicas)} | {cell(r.note)} |\n" for r in rows]
    seg = _details(f"Evidence: {answered}/{len(rows)} clusters answered", lines,
                   _EVIDENCE_HEADER)
    seg.too_large = ("| _(a row of {size:,} characters is too large for one comment part "
                     "and is left out here; the saved JSON plan has it)_ | | | | | | |\n")
    return seg


def _code64(text: str) -> str:
    return code(text, 200)


def _blocker_item(blocker: Blocker) -> str:
    """A service's blocker; a preflight blocker by the control plane's code, verbatim in a
    code span, with reconcile's code after it."""
    if blocker.upstream_code:
        return (f"- ❌ {code(common.blocker_code(blocker))} "
                f"{code(common.blocker_text(blocker), 1000)} ({code(blocker.code)})\n")
    return f"- ❌ {code(blocker.code)} {code(blocker.message, 1000)}\n"


_WHO = {greenfield.Origin.LOCAL: "_checked locally, nothing sent_",
        greenfield.Origin.CONTROL_PLANE: "_the control plane's_"}
_PREFLIGHT_TITLE = {"create": "Preflight report", "promotion": "Release evidence (policy: "
                    "every promotion)"}


def _preflight(pre: ServicePreflight) -> _Seg:
    """One service's preflight, collapsed: reconcile's decision and the facts of the
    report, then every blocker it names (the control plane's codes verbatim) and the
    request it answered. The ``<summary>`` holds only this module's words and numbers."""
    report = pre.report
    facts = common.preflight_facts(pre, _code64)
    lines = [f"- {'✅' if f.ok else '❌' if f.ok is False else '·'} **{f.label}:** {f.text}\n"
             for f in facts]
    named = [*(report.blockers if report is not None else ()), *pre.local_blockers]
    lines.extend(f"- ❌ {code(b.code, 100)} {code(b.message, 1000)} · {_WHO[b.origin]}\n"
                 for b in named)
    if pre.request_id:
        lines.append(f"- _request:_ {code(pre.request_id, 120)}"
                     + (f" · _intent:_ {code(pre.intent_digest, 100)}" if pre.intent_digest
                        else "")
                     + (f" · _configuration:_ {code(report.configuration_digest, 100)}"
                        if report is not None else "") + "\n")
    words = [pre.decision.value]
    if named:
        words.append(_n(len(named), "blocker"))
    if report is not None:
        words.append(_n(len(report.platforms), "platform"))
    elif pre.status.value != "local_only":
        words.append(f"no report ({pre.status.value.replace('_', ' ')})")
    title = _PREFLIGHT_TITLE.get(pre.purpose, "Preflight")  # vocabulary, never a plan string
    return _details(f"{title}: {' · '.join(words)}", lines)


def _agreement(ev: ServiceEvidence | None) -> str:
    return "no evidence" if ev is None else common.agreement(ev, code)


def _change_item(change: Change, review: Review | None) -> str:
    origin = ""
    modified = None
    if review is not None:
        origin = _ORIGIN_WORDS[review.origin(change.idempotency_key)]
        modified = review.modification(change.idempotency_key)
    lines = [kindviews.view_of(change).item_head(change, origin, _WORDS)]
    if modified is not None:
        lines.append(f"  ✏️ **this PR:** {common.modified_phrase(modified, _md_code, ' ⚠️')}")
        for detail in common.modified_detail(modified, _md_code):
            label, _, rest = detail.partition(":")  # the label is common's words
            lines.append(f"  ↳ _{esc(label)}:_{rest}")
    taken = destructive(change)
    if taken:
        lines.append(f"  ⚠️ **destructive:** {taken}")
    lines.append(f"  _reason:_ {_reason(change.reason)}")
    lines.extend(kindviews.view_of(change).item_detail(change, _WORDS))
    lines.append(f"  _planned against:_ {code(kindviews.preconditions_text(change))}")
    return "  \n".join(lines) + "\n"


@dataclass
class _Index:
    """The plan grouped by service, once (a 10,000-service plan is rendered in one pass)."""

    plan: Plan
    changes: dict[str, list[Change]] = field(default_factory=dict)
    blockers: dict[str, list[Blocker]] = field(default_factory=dict)
    causes: dict[str, list[Blocker]] = field(default_factory=dict)
    drift: dict[str, list[str]] = field(default_factory=dict)
    evidence: dict[str, ServiceEvidence] = field(default_factory=dict)
    converging: set[str] = field(default_factory=set)
    proofs: dict[str, ServiceProof] = field(default_factory=dict)
    preflights: dict[str, list[ServicePreflight]] = field(default_factory=dict)
    checks: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        plan = self.plan
        self.checks = common.check_lines(plan)
        self.proofs = {p.service: p for p in plan.proofs}
        for pre in plan.preflights:
            self.preflights.setdefault(pre.service, []).append(pre)
        for change in plan.changes:
            self.changes.setdefault(change.service, []).append(change)
        for blocker in plan.blockers:
            if blocker.service:
                self.blockers.setdefault(blocker.service, []).append(blocker)
            for name in blocker.services:
                self.causes.setdefault(name, []).append(blocker)
        for item in plan.drift:
            if item.service:
                self.drift.setdefault(item.service, []).append(
                    f"⚠️ drift {code(item.code)} {code(item.message, 1000)}")
        self.evidence = {e.service: e for e in plan.evidence}
        self.converging = set(plan.converging)

    def loud(self, name: str) -> bool:
        return bool(name in self.changes or name in self.blockers or name in self.causes
                    or name in self.drift or name in self.converging)


def _service(index: _Index, name: str, group: str) -> _Section:
    review = index.plan.review
    changes = index.changes.get(name, [])
    blockers = index.blockers.get(name, [])
    causes = index.causes.get(name, [])
    drift = index.drift.get(name, [])
    taking = sum(1 for c in changes if destructive(c))
    mark = "❌" if blockers or causes else "🔁" if changes else \
        "⚠️" if drift or name in index.converging else "✅"
    bits = [_n(len(changes), "change")] if changes else []
    if taking:
        bits.append(f"{taking} destructive ⚠️")
    if blockers or causes:
        bits.append("blocked")
    elif name in index.converging:
        bits.append("not proven converged")
    if drift:
        bits.append(_n(len(drift), "drift finding"))
    label = f"**{mark} {code(name, 120)}**"
    items = [_change_item(c, review) for c in changes]
    items.extend(f"- ⛔ blocked by {_blocker_name(b)} (root cause, above)\n" for b in causes)
    shown, left_out = common.bounded_blockers(blockers)
    items.extend(_blocker_item(b) for b in shown)
    items.extend(f"- ❌ … and {n:,} more {code(c)} blockers — the JSON plan lists every one "
                 "(`reconcile plan --format json`)\n" for c, n in left_out)
    proof = index.proofs.get(name)
    if name in index.converging and proof is not None:
        # One entry per reason: a service unproven on hundreds of clusters still splits.
        items.append("- **not proven converged** — nothing to send; apply gates it until "
                     "every cluster proves it:\n")
        items.extend(f"  - {code(r)}\n" for r in proof.reasons())
    items.extend(f"- {line}\n" for line in drift)
    if not items:
        items.append("- no changes\n")
    segs = [_Seg(items)]
    segs.extend(_preflight(p) for p in index.preflights.get(name, []))
    ev = index.evidence.get(name)
    if ev is not None:
        segs.append(_evidence(ev))
    held = index.checks.get(name)
    if held:
        segs.append(_details(f"Checks: {len(held)}, on every cluster, for the pinned digest",
                             [f"- {code(line, 1000)}\n" for line in held]))
    title = label + (" · " + " · ".join(bits) if bits else "") + "\n\n"
    return _Section(group, title, segs, again=f"{label} (continued)\n\n", names=(name,))


def _one_line(index: _Index, name: str) -> str:
    """A service collapsed to one line: what the judge says, and any drift."""
    bits = [_agreement(index.evidence.get(name))]
    proof = index.proofs.get(name)
    mark = "✅"
    if name in index.converging and proof is not None:
        mark = "⚠️"
        bits.append("not proven converged: " + "; ".join(code(r, 200) for r in proof.reasons()))
    if name in index.drift:
        mark = "⚠️"
        bits.extend(index.drift[name])
    return f"- {mark} {code(name, 120)} — " + " · ".join(bits) + "\n"


def _why_no_go(index: _Index) -> list[_Section]:
    plan = index.plan
    if not plan.blockers:
        return []
    lines = []
    for blocker in plan.blockers:
        if not blocker.services:
            continue
        message = blocker.message
        listed = f" ({', '.join(blocker.services)})"
        if message.endswith(listed):
            message = message[:-len(listed)]
        lines.append(f"- **{_blocker_name(blocker)}** — {code(message, 600)}  \n"
                     f"  blocks {_n(len(blocker.services), 'service')}: "
                     f"{_names(blocker.services, where=' (each marked ⛔ below)')}\n")
    lines.extend(f"- ❌ {_blocker_name(b)}: {code(common.blocker_text(b), 1000)}\n"
                 for b in plan.blockers if not b.services and not b.service)
    own = sorted(index.blockers)
    count = sum(len(v) for v in index.blockers.values())
    if own and count <= _LIST_MAX:
        lines.extend(f"- ❌ {_blocker_name(b)}: {code(common.blocker_text(b), 1000)}\n"
                     for n in own for b in index.blockers[n])
    elif own:
        shown = ", ".join(f"{code(n, 64)} ("
                          + ", ".join(code(c) + (f" ×{k:,}" if k > 1 else "")
                                      for c, k in common.codes_counted(index.blockers[n]))
                          + ")" for n in own[:_LIST_MAX])
        more = f" and {len(own) - _LIST_MAX:,} more" if len(own) > _LIST_MAX else ""
        lines.append(f"- {_n(len(own), 'service')} blocked on {'its' if len(own) == 1 else 'their'}"
                     f" own: {shown}{more} — the messages are in their sections (❌)\n")
    return [_Section("❌ Why NO-GO", segs=[_Seg(lines)])]


def _this_pr(index: _Index) -> list[_Section]:
    plan, review = index.plan, index.plan.review
    if review is None:
        return []
    introduced = _introduced(plan, review)
    pending = len(plan.changes) - len(introduced) - len(review.modified)
    if review.changes_nothing_managed:
        title = ("This PR changes nothing reconcile manages"
                 + (f"; the {_n(pending, 'change')} below were already pending on the base "
                    "and apply makes them too" if pending else "") + ".\n\n")
    else:
        bits = [f"introduces {_n(len(introduced), 'change')}"] \
            if introduced or not review.modified else []
        if review.modified:
            bits.append(f"modifies {_n(len(review.modified), 'change')} pending on the base")
        bits[0] = bits[0][0].upper() + bits[0][1:]
        if pending:
            bits.append(f"{pending:,} already pending on the base (apply makes them too)")
        if review.removed:
            bits.append(f"removes {_n(len(review.removed), 'change')} pending on the base")
        if review.touched:
            bits.append(f"edits {_n(len(review.touched), 'service')}")
        title = " · ".join(bits)
        if review.base_verdict != plan.verdict.value:
            base = _VERDICT_WORDS.get(review.base_verdict) or code(review.base_verdict, 40)
            title += (f" · verdict on the base: {base} → with this PR: "
                      f"**{common.VERDICT_LINE[plan.verdict]}**")
        title += ".\n\n"
    lines = [f"- ✏️ {common.modified_phrase(m, _md_code, ' ⚠️')}\n"
             for m in review.modified[:_LIST_MAX]]
    if len(review.modified) > _LIST_MAX:
        lines.append(f"- … and {len(review.modified) - _LIST_MAX:,} more modified changes, "
                     "each in its service's section\n")
    lines.extend(f"- ❌ adds blocker {code(b.upstream_code or b.code)} {code(b.message, 1000)}\n"
                 for b in review.blockers_introduced)
    lines.extend(f"- ✅ clears blocker {code(b.upstream_code or b.code)} "
                 f"{code(b.message, 1000)}\n" for b in review.blockers_cleared)
    if review.settings_changed:
        lines.append("- edits the Settings document (it may change every service's plan)\n")
    return [_Section("This PR", title, [_Seg(lines)] if lines else [])]


def _destructive_section(index: _Index) -> list[_Section]:
    plan, review = index.plan, index.plan.review
    flagged = [(c, t) for c in plan.changes if (t := destructive(c))]
    if not flagged:
        return []
    if review is not None:  # what the PR introduces first
        flagged.sort(key=lambda ct: review.origin(ct[0].idempotency_key) is Origin.PENDING)
    lines = []
    for change, taken in flagged[:_LIST_MAX]:
        origin = ""
        if review is not None:
            origin = _ORIGIN_WORDS[review.origin(change.idempotency_key)]
        lines.append(f"- ⚠️ {code(change.service, 120)} — {taken}{origin}\n")
    if len(flagged) > _LIST_MAX:
        lines.append(f"- … and {len(flagged) - _LIST_MAX:,} more, each flagged ⚠️ "
                     "**destructive** in its section\n")
    return [_Section("⚠️ Destructive changes", segs=[_Seg(lines)])]


def _delivered(plan: Plan, delivery: Delivery, digest: str | None) -> list[str]:
    """"What next" once CI saved the plan: where it is (the run, the artifact) and how it
    is applied after the merge; never a path on the runner that made it."""
    run = (f"[workflow run {esc(delivery.run_id or '')}]({delivery.run_url})"
           if delivery.run_url else "this workflow run")
    name = delivery.plan_name
    lines = []
    if delivery.artifact:
        artifact = (f"[{code(delivery.artifact, 128)}]({delivery.artifact_url})"
                    if delivery.artifact_url else code(delivery.artifact, 128))
        lines.append(f"- Saved plan: {code(name)} in the artifact {artifact} of {run}"
                     + (f", digest {code(digest, 100)}" if digest else "") + ".\n")
    else:
        lines.append(f"- Made by {run}.\n")
    if plan.verdict is Verdict.NO_GO:
        lines.append("- ⛔ Nothing to apply: `reconcile apply` refuses a NO-GO plan. Clear the "
                     "causes above and push; this comment then shows the new plan.\n")
        return lines
    if plan.verdict is Verdict.NO_CHANGES:
        lines.append("- Nothing to apply.\n")
        return lines
    if plan.worktree:  # apply refuses a preview: no workflow will apply it
        lines.append("- ⛔ A preview of uncommitted changes (`plan --worktree`): it is never "
                     "applied. Commit and push; the plan of that commit is the one applied "
                     "after the merge.\n")
        return lines
    if delivery.approval:
        # Never applied silently: the one action that applies exactly this saved plan.
        lines.append(f"- ⚠️ **Needs approval:** {esc(delivery.approval, 300)}. Nothing was "
                     "applied; this is the plan of the merged commit.\n")
        lines.append("- To apply exactly this plan, approve it with "
                     + (f"{code(delivery.approve, 600)}" if delivery.approve else
                        "the apply workflow's manual run for this commit")
                     + "; apply refuses it if the desired state moved since.\n")
        return lines
    download = delivery.download_command()
    # Runnable as printed: apply binds a saved plan to the checkout it runs in.
    lines.append("- After the merge, the apply-on-merge workflow applies exactly this plan"
                 + (f"; by hand, in a checkout of the merged commit: {code(download)}, then "
                    f"{code('reconcile apply ' + name)}" if download else
                    "; by hand, download it into a checkout of the merged commit and run "
                    f"{code('reconcile apply ' + name)}")
                 + ".\n")
    lines.append("- Apply refuses a plan whose desired state is not the one merged (or a file "
                 "edited after it was saved): then plan again and review that plan.\n")
    return lines


def _apply_section(plan: Plan, plan_file: str | None, digest: str | None,
                   delivery: Delivery | None = None) -> _Section:
    if delivery is not None and delivery.known:
        lines = _delivered(plan, delivery, digest)
        if plan.verdict is Verdict.GO:
            lines.extend(_go_notes(plan))
        return _Section("What next", segs=[_Seg(lines)])
    lines = []
    command = f"reconcile apply {shlex.quote(plan_file)}" if plan_file else None
    if plan.verdict is Verdict.NO_GO:
        lines.append("- ⛔ Nothing to apply: `reconcile apply` refuses a NO-GO plan. Clear the "
                     "causes above and plan again.\n")
    elif plan.verdict is Verdict.NO_CHANGES:
        lines.append("- Nothing to apply.\n")
    elif plan.worktree:
        lines.append("- ⛔ A preview of uncommitted changes (`plan --worktree`): `reconcile "
                     "apply` refuses it. Commit, then plan again and apply that plan.\n")
    elif command:
        lines.append(f"- Apply exactly this plan: {code(command, 600)}\n")
    else:
        lines.append("- Save it with `reconcile plan --out plan.json`, then apply it with "
                     "`reconcile apply plan.json`.\n")
    if digest:
        lines.append(f"- Saved plan: {code(plan_file, 300) if plan_file else 'content'} "
                     f"digest {code(digest, 100)}; apply refuses a file edited after it was "
                     "saved.\n")
    if plan.verdict is Verdict.GO:
        lines.extend(_go_notes(plan))
    return _Section("Apply", segs=[_Seg(lines)])


def _go_notes(plan: Plan) -> list[str]:
    lines = []
    if plan.review is not None and plan.changes:
        introduced = len(_introduced(plan, plan.review))
        modified = len(plan.review.modified)
        pending = len(plan.changes) - introduced - modified
        said = [f"the {introduced:,} introduced by this PR"] \
            if introduced or not modified else []
        said += [f"the {modified:,} it modifies"] if modified else []
        said += [f"the {pending:,} already pending on the base"] if pending else []
        lines.append("- Apply makes every change of this plan: "
                     + (", ".join(said[:-1]) + " and " if len(said) > 1 else "")
                     + said[-1] + ".\n")
    lines.append("- Apply re-checks every precondition against the live world before the "
                 "first write and refuses if anything moved"
                 + (f"; it then waits until every cluster proves "
                    f"{_n(len(plan.converging), 'service')} with nothing to send"
                    if plan.converging else "") + ".\n")
    return lines


def _general_drift(plan: Plan) -> list[_Section]:
    lines = [f"- ⚠️ {code(d.code)} {code(d.message, 1000)}\n"
             for d in plan.drift if d.service is None]
    return [_Section("⚠️ Drift", segs=[_Seg(lines)])] if lines else []


def _services(index: _Index) -> list[_Section]:
    plan, review = index.plan, index.plan.review
    names = plan.services()
    if review is None:
        sections = [_service(index, n, "Services") for n in names if index.loud(n)]
        quiet = [_one_line(index, n) for n in names if not index.loud(n)]
        if quiet:
            sections.append(_Section("Services", segs=[_details(
                f"✅ {_n(len(quiet), 'service')} with no changes, each proven converged on "
                "every expected cluster (one line each)", quiet)], names=()))
        return sections
    introduced = {c.service for c in _introduced(plan, review)}
    modified = {m.service for m in review.modified} - introduced
    touched = set(review.touched) | introduced | modified
    sections = [_service(index, n, "Introduced by this PR") for n in names
                if n in touched and n not in modified]
    sections += [_service(index, n, "Modified by this PR") for n in names if n in modified]
    sections += [_service(index, n, "Blocked, not touched by this PR") for n in names
                 if n not in touched and n in index.blockers]
    if review.removed:
        lines = []
        for removed in review.removed:
            verb = f"**{VERBS[Action(removed.action)]}**" if removed.action in _ACTIONS \
                else code(removed.action, 40)
            lines.append(f"- ↩️ {verb} {code(removed.service, 120)} — "
                         f"{code(removed.summary)} · pending on the base, no longer with this "
                         "PR\n")
        sections.append(_Section("Removed by this PR", segs=[_Seg(lines)]))
    rest = [n for n in names if n not in touched and n not in index.blockers]
    pending = [n for n in rest if n in index.changes]
    if pending:
        lines = []
        for name in pending:
            changes = index.changes[name]
            flag = " ⚠️" if any(destructive(c) for c in changes) else ""
            lines.append(f"- 🔁 {code(name, 120)}{flag} — "
                         + "; ".join(code(c.summary, 200) for c in changes) + "\n")
        count = sum(len(index.changes[n]) for n in pending)
        sections.append(_Section("Already pending on the base", segs=[_details(
            f"{_n(count, 'change')} in {_n(len(pending), 'service')} this PR does not touch "
            "(apply makes them anyway; one line per service)", lines)]))
    untouched = [_one_line(index, n) for n in rest if n not in index.changes]
    if untouched:
        sections.append(_Section("Not touched by this PR", segs=[_details(
            f"{_n(len(untouched), 'service')} with no change (one line each)", untouched)]))
    return sections


def _footer(plan: Plan) -> str:
    return (f"<sub>{esc(common.summary_line(plan))} · "
            f"fingerprint {code(plan.fingerprint[:16])}</sub>\n")


# -- parts -----------------------------------------------------------------------------


@dataclass
class _Layout:
    title: str  # without the part marker
    environment: str
    sections: list[_Section]
    footer: str
    services: list[str]
    verdict: str


def _layout(plan: Plan, plan_file: str | None, content_digest: str | None,
            delivery: Delivery | None = None) -> _Layout:
    if content_digest is None and plan_file is not None:
        content_digest = str(jsonplan.to_wire(plan)["content_digest"])
    safe_plan = common.untrusted(plan)
    index = _Index(safe_plan)
    sections = [*_why_no_go(index), *_risks_section(safe_plan), *_general_drift(safe_plan),
                *_this_pr(index),
                *_destructive_section(index),
                _apply_section(safe_plan, plan_file, content_digest, delivery), *_services(index)]
    approval = delivery.approval if delivery is not None else None
    return _Layout(_title(safe_plan, approval=approval).removesuffix("\n\n"),
                   _environment(safe_plan), sections,
                   _footer(safe_plan), safe_plan.services(),
                   common.VERDICT_LINE[safe_plan.verdict])


@dataclass
class _Part:
    chunks: list[str] = field(default_factory=list)
    size: int = 0
    complete: set[str] = field(default_factory=set)  # services whose section is whole here

    def add(self, text: str) -> None:
        self.chunks.append(text)
        self.size += len(text)


def _heading(group: str, seen: set[str]) -> str:
    return f"### {group}" + (" (continued)" if group in seen else "") + "\n\n"


def _pack(sections: list[_Section], first: int, rest: int) -> list[_Part]:
    """Sections into parts of at most ``first`` (part 1) and ``rest`` characters."""
    parts = [_Part()]
    limit = first
    group: str | None = None
    seen: set[str] = set()  # groups opened in an earlier part

    def new_part() -> None:
        nonlocal limit, group
        parts.append(_Part())
        limit = rest
        if group is not None:
            seen.add(group)
        group = None

    def open_group(name: str) -> None:
        nonlocal group
        if group != name:
            parts[-1].add(_heading(name, seen))
            group = name

    for section in sections:
        whole = section.text()
        heading = len(_heading(section.group, seen)) if group != section.group else 0
        if parts[-1].size + heading + len(whole) > limit and parts[-1].chunks \
                and len(_heading(section.group, seen | {section.group})) + len(whole) <= rest:
            new_part()
        heading = len(_heading(section.group, seen)) if group != section.group else 0
        if parts[-1].size + heading + len(whole) <= limit:
            open_group(section.group)
            parts[-1].add(whole)
            parts[-1].complete.update(section.names)
            continue
        # Larger than a whole part: split between entries, re-opening what was open.
        if parts[-1].chunks and limit - parts[-1].size < 2_000:
            new_part()
        open_group(section.group)
        parts[-1].add(section.title)
        for seg in section.segs:
            opener, started = seg.open, False
            again = len(_heading(section.group, {section.group})) + len(section.again)
            room_for_one = rest - again - len(seg.reopen or seg.open) - len(seg.close)
            for entry in seg.lines:
                if len(entry) > room_for_one:
                    entry = seg.too_large.format(size=len(entry))
                need = (0 if started else len(opener)) + len(entry) + len(seg.close)
                if parts[-1].size + need > limit:
                    if started:
                        parts[-1].add(seg.close)
                    new_part()
                    open_group(section.group)
                    parts[-1].add(section.again)
                    opener, started = seg.reopen or seg.open, False
                if not started:
                    parts[-1].add(opener)
                    started = True
                parts[-1].add(entry)
            if started:
                parts[-1].add(seg.close)
    return parts


def _paginate(layout: _Layout, budget: int) -> tuple[list[str], list[_Part]]:
    if budget < MIN_BUDGET:
        raise ValueError(f"a comment budget under {MIN_BUDGET:,} characters cannot hold a part")
    head = layout.title + "\n\n" + layout.environment
    groups: set[str] = set()
    body = []
    for section in layout.sections:
        if section.group not in groups:
            body.append(_heading(section.group, set()))
            groups.add(section.group)
        body.append(section.text())
    whole = head + "".join(body) + layout.footer
    if len(whole) <= budget:
        single = _Part(chunks=[whole], size=len(whole), complete=set(layout.services))
        return [whole], [single]
    # The last part ends with the footer, the others with "continued"; ``render`` ends
    # part 1 with the truncation note (up to ten names) and the footer.
    tail = len(layout.footer) + len(_truncated(layout, [], budget, _WORST_PART)) + 10 * 80
    first_head = layout.title + _part_marker(_WORST_PART, _WORST_PART) + "\n\n" \
        + layout.environment
    later_head = _later_heading(layout, _WORST_PART, _WORST_PART)
    parts = _pack(layout.sections, budget - len(first_head) - tail,
                  budget - len(later_head) - tail)
    total = str(len(parts))
    texts = []
    for number, part in enumerate(parts, start=1):
        if number == 1:
            text = layout.title + _part_marker("1", total) + "\n\n" + layout.environment
        else:
            text = _later_heading(layout, str(number), total)
        text += "".join(part.chunks)
        text += layout.footer if number == len(parts) else _continued(str(number + 1), total)
        texts.append(text)
    return texts, parts


def _part_marker(number: str, total: str) -> str:
    return f" · part {number}/{total}"


def _later_heading(layout: _Layout, number: str, total: str) -> str:
    return (f"## reconcile plan · part {number}/{total}: **{layout.verdict}** — continued\n\n"
            f"<sub>One plan in {total} comments; part 1 has the verdict, the root causes and "
            "the apply command.</sub>\n\n")


def _continued(number: str, total: str) -> str:
    return f"_Continued in part {number}/{total}._\n"


def _truncated(layout: _Layout, left_out: list[str], budget: int, total: str) -> str:
    shown = _names(left_out, 10)
    return (f"> **Truncated:** {len(left_out):,} of {len(layout.services):,} service "
            f"section(s) left out of this comment to stay under GitHub's {budget:,}-character "
            f"limit: {shown}. They are in parts 2–{total} of the comment `reconcile comment` "
            "posts; the counts above cover the whole plan; the saved JSON plan has every "
            "section.\n\n")


def render_parts(plan: Plan, *, budget: int = BUDGET, plan_file: str | None = None,
                 content_digest: str | None = None,
                 delivery: Delivery | None = None) -> list[str]:
    """The comment as parts of at most ``budget`` characters each (one part when it fits).

    ``plan_file``: the saved plan's path as the reviewer should type it (the apply command
    names it). ``content_digest``: the saved plan's ``content_digest``; computed from the
    plan when ``plan_file`` is given without it. ``delivery``: where CI keeps the saved
    plan (the run, the artifact); then "What next" names those, not ``plan_file``.
    """
    texts, _ = _paginate(_layout(plan, plan_file, content_digest, delivery), budget)
    return texts


def render(plan: Plan, *, budget: int = BUDGET, plan_file: str | None = None,
           content_digest: str | None = None) -> str:
    """The whole comment when it fits ``budget``; else part 1 with a note naming the
    service sections left out (they are in ``render_parts``' later parts)."""
    layout = _layout(plan, plan_file, content_digest)
    texts, parts = _paginate(layout, budget)
    if len(texts) == 1:
        return texts[0]
    first = texts[0].removesuffix(_continued("2", str(len(texts))))
    left_out = [n for n in layout.services if n not in parts[0].complete]
    return first + _truncated(layout, left_out, budget, str(len(texts))) + layout.footer
