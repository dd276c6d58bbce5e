"""Shared vocabulary of the renderers: reason sentences, short digests, evidence rows.

Owns what the text and Markdown renderers must say identically, so the terminal and the
PR comment cannot disagree on a word, and the one place a plan's strings are made safe
to print: every renderer starts from ``untrusted(plan)``, a copy of the plan whose every
string (summaries, messages, reasons, cluster ids, names, tags, digests, lastError,
URLs...) has passed through ``safe``, so no control character, escape sequence, OSC-8
hyperlink or bidi override in a plan value (a server's reply, or a hand-edited saved
plan) can reach a terminal or a comment, whichever field a renderer reads. Length is
bounded there too; each embedding may bound it further. Pure; no styling here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from reconciler.core.live import EgressRule, Observation, ObservationKind
from reconciler.core.plans import Change, Plan, ReleaseRef, ServiceEvidence, Verdict
from reconciler.core.sanitize import safe, safe_json_text

#: The bound on any one string of a plan as rendered; fields shown in tables bound harder.
VALUE_LIMIT = 2_000

REASONS = {
    "pinned_release_never_accepted": "the pinned digest is an observed release never accepted",
    "pinned_release_newer_than_current": "the pinned digest is newer than the current release",
    "pinned_release_previously_accepted": "the pinned digest was accepted before and is older "
    "than the current release",
    "egress_differs": "the declared egress differs from the live declaration",
    "egress_revoke_all": "egress is declared empty ([]): every destination is revoked",
    "grant_differs": "the declared capabilities differ from the live grant",
    "grant_not_declared": "no Grant document declares this live grant and pruning is on",
}

VERDICT_LINE = {
    Verdict.GO: "GO",
    Verdict.NO_GO: "NO-GO",
    Verdict.NO_CHANGES: "no changes",
}


def _sanitize(value: Any) -> Any:
    """``value`` with every string made safe; the very same object when nothing changed
    (the models are frozen, so sharing an unchanged part is safe), which keeps a clean
    10,000-service plan from being copied model by model."""
    # Exact ``str`` only: enum members (codes, actions, kinds) are vocabulary, not data.
    if type(value) is str:
        made = safe(value, VALUE_LIMIT)
        return value if made == value else made
    if isinstance(value, tuple | list):
        items = [_sanitize(v) for v in value]
        if all(new is old for new, old in zip(items, value, strict=True)):
            return value
        return type(value)(items)
    if isinstance(value, dict):
        pairs = [(_sanitize(k), _sanitize(v)) for k, v in value.items()]
        if all(k2 is k and v2 is v for (k2, v2), (k, v) in zip(pairs, value.items(),
                                                               strict=True)):
            return value
        return dict(pairs)
    if isinstance(value, BaseModel):
        update = {}
        for name in type(value).model_fields:
            old = getattr(value, name)
            new = _sanitize(old)
            if new is not old:
                update[name] = new
        return value.model_copy(update=update) if update else value
    return value


def untrusted(plan: Plan) -> Plan:
    """The plan with every string field, at any depth, passed through ``safe``.

    What a renderer may print. Strings without controls and within the bound are
    unchanged, so codes still match (``REASONS``) and a well-formed plan renders
    exactly as before. A copy, not a re-validation: it cannot fail on a plan that loaded.
    """
    result: Plan = _sanitize(plan)
    return result


def terminal_json(text: str) -> str:
    """JSON text for a terminal: controls inside strings as ``\\u`` escapes (lossless)."""
    return safe_json_text(text)


def reason_text(code: str) -> str:
    return f"{code}: {REASONS[code]}" if code in REASONS else code


def short(digest: str | None) -> str:
    return digest[:19] if digest else "<none>"


def agreement(ev: ServiceEvidence, digest: Callable[[str], str] = lambda d: d) -> str:
    """"3/3 clusters run <digest>" when every expected cluster answered with the current
    digest, else "k/n clusters answered" (counts over *expected* clusters)."""
    answered = [o for o in ev.observations if o.kind is ObservationKind.ANSWERED and o.runtime]
    digests = {o.runtime.resolved_digest for o in answered if o.runtime}
    total = len(ev.expected_clusters)
    if len(answered) == total and digests == {ev.current_digest}:
        return f"{total}/{total} clusters run {digest(short(ev.current_digest))}"
    return f"{len(answered)}/{total} clusters answered"


def release_text(ref: ReleaseRef | None) -> str:
    if ref is None or ref.digest is None:
        return "<nothing deployed>"
    tags = ",".join(safe(t, 64) for t in ref.tags)
    return f"{tags} ({short(ref.digest)})" if tags else short(ref.digest)


def rules_text(rules: tuple[EgressRule, ...] | None) -> str:
    if rules is None:
        return "<undeclared>"
    if not rules:
        return "[] (none)"
    return ", ".join(f"{safe(r.host)}:{r.port}" for r in rules)


def caps_text(caps: tuple[str, ...] | None) -> str:
    if not caps:
        return "[] (none)"
    return ", ".join(caps)


def summary_line(plan: Plan) -> str:
    counts = plan.counts()
    parts = [
        f"{counts['promote']} to promote",
        f"{counts['rollback']} to roll back",
        f"{counts['set_egress']} egress",
        f"{counts['set_grant']} grant",
        f"{counts['blockers']} blocker(s)",
        f"{counts['drift']} drift",
    ]
    if plan.converging:
        parts.append(f"{len(plan.converging)} not proven converged (apply gates them)")
    verdict = VERDICT_LINE[plan.verdict]
    if plan.verdict is Verdict.NO_CHANGES and plan.drift:
        verdict += " to make; the drift above needs attention"
    return "Plan: " + ", ".join(parts) + f" → {verdict}"


def change_detail(change: Change) -> list[str]:
    """The before → after lines of a change, plain text."""
    if change.release_after is not None:
        return [f"release: {release_text(change.release_before)} → "
                f"{release_text(change.release_after)}"]
    if change.egress_after is not None:
        lines = [f"egress: {rules_text(change.egress_before)} → {rules_text(change.egress_after)}"]
        if change.egress_added:
            lines.append(f"  added: {rules_text(change.egress_added)}")
        if change.egress_removed:
            lines.append(f"  removed: {rules_text(change.egress_removed)}")
        return lines
    lines = [f"grant for {safe(change.user_id)}: {caps_text(change.capabilities_before)} → "
             f"{caps_text(change.capabilities_after)}"]
    if change.capabilities_added:
        lines.append(f"  added: {', '.join(change.capabilities_added)}")
    if change.capabilities_removed:
        lines.append(f"  removed: {', '.join(change.capabilities_removed)}")
    return lines


def preconditions_text(change: Change) -> str:
    pre = change.preconditions
    bits = []
    if pre.rollout_generation is not None:
        bits.append(f"generation {pre.rollout_generation}")
    if pre.rollout_id is not None:
        bits.append(f"rollout {safe(pre.rollout_id, 64)}")
    if pre.egress_revision is not None:
        bits.append(f"egress revision {pre.egress_revision}")
    if pre.capabilities is not None:
        bits.append(f"live grant [{', '.join(pre.capabilities)}]")
    return ", ".join(bits) or "none"


@dataclass(frozen=True)
class EvidenceRow:
    cluster: str
    address: str
    status: str
    runs: str
    state: str
    replicas: str
    note: str


def evidence_rows(ev: ServiceEvidence) -> list[EvidenceRow]:
    return [_row(obs) for obs in ev.observations]


def _row(obs: Observation) -> EvidenceRow:
    rt = obs.runtime
    address = obs.address or "-"
    if obs.kind is ObservationKind.SILENT:
        return EvidenceRow(safe(obs.cluster_id, 64), address, "SILENT", "?", "?", "?",
                           safe(obs.reason, 160))
    if obs.kind is ObservationKind.NO_RECORD or rt is None:
        return EvidenceRow(safe(obs.cluster_id, 64), address, "no record", "-", "-", "-", "")
    counts = rt.replica_counts
    replicas = (f"{counts.required}/{counts.observed}/{counts.healthy}/{counts.verified}/"
                f"{counts.failed}") if counts else "?"
    runs = short(rt.resolved_digest) if rt.resolved_digest else "<no digest>"
    note = safe(rt.last_error, 160) if rt.last_error else ""
    if rt.egress_dropped:
        dropped = ", ".join(f"{safe(r.host)}:{r.port}" for r in rt.egress_dropped)
        note = (note + "; " if note else "") + f"egress dropped: {dropped}"
    return EvidenceRow(safe(obs.cluster_id, 64), address, "answered", runs,
                       safe(rt.runtime_state or "?", 32), replicas, note)


EVIDENCE_HEADER = EvidenceRow("cluster", "address", "status", "runs", "state",
                              "replicas r/o/h/v/f", "note")
