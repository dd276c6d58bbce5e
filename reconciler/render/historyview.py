"""The view of ``reconcile history``: past applies as terminal text or one JSON document.

Owns the words and layout of a run read back from the journal (its heading -- when it
began, how it ended in ``core.outcomes.WORDS``, the commit, the plan's digest and change
count, the control plane, the duration -- its blockers or changes, bounded, and the gate's
word; a revert told between the failed apply and the rollback's) and the JSON document
(``FORMAT_VERSION``). Pure: takes the runs as the journal gives them (``Run.to_json``),
returns strings; the command writes them. Every string from the journal goes through
``safe``: a journal is a file anyone with the state directory can edit.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from reconciler.core.outcomes import WORDS, gate_word
from reconciler.core.sanitize import safe, safe_json_text

#: Changes listed per run in the text view (JSON lists them all).
TEXT_CHANGES = 20
FORMAT_VERSION = 1

#: A run's status in words (``core.outcomes.WORDS``: written once, there).
STATUS_WORDS: dict[str, str] = {o.value: words for o, words in WORDS.items()}


def rfc3339(ms: int | None) -> str:
    if not ms:
        return "-"
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def document(journal: str, runs: Sequence[dict[str, Any]], total: int,
             reverts: Sequence[dict[str, Any]] = (),
             proposals: Sequence[dict[str, Any]] = ()) -> str:
    """``--format json``: every shown run, with how many the journal holds, and the
    reverts and the proposed promotions (``watch --promote-from``) the journal records."""
    return safe_json_text(json.dumps({
        "format_version": FORMAT_VERSION, "journal": journal, "total": total,
        "shown": len(runs), "runs": list(runs),
        "reverts": [revert_json(r) for r in reverts],
        "proposals": [proposal_json(p) for p in proposals]}, indent=2, sort_keys=True))


def text(journal: str, runs: Sequence[dict[str, Any]], total: int,
         reverts: Sequence[dict[str, Any]] = (),
         proposals: Sequence[dict[str, Any]] = ()) -> list[str]:
    """The text view: a heading, each shown run (newest first), and how many are left.
    A revert is told between the failed apply and the rollback's apply, so the failed
    release, the revert commit and the rollback's proof read as one story."""
    if not total and not proposals:
        return [f"no applies recorded in {journal}"]
    lines = [f"{journal}: {len(runs)} of {total} apply run(s), newest first"]
    oldest = int(runs[-1]["started_ms"] or 0) if runs and total > len(runs) else 0
    told = [(int(run["started_ms"] or 0), render_run(run)) for run in runs]
    told += [(int(r.get("ts") or 0), render_revert(revert_json(r))) for r in reverts
             if int(r.get("ts") or 0) >= oldest]
    told += [(int(p.get("ts") or 0), render_proposal(proposal_json(p))) for p in proposals
             if int(p.get("ts") or 0) >= oldest]
    for _at, said in sorted(told, key=lambda t: t[0], reverse=True):
        lines.append("")
        lines.extend(said)
    if total > len(runs):
        lines.append(f"\n… {total - len(runs)} older run(s); raise --limit to see them")
    return lines


def render_run(run_json: dict[str, Any]) -> list[str]:
    """The text of one run: a heading, its blockers or changes (bounded), the gate."""
    head = [rfc3339(run_json["started_ms"]), STATUS_WORDS.get(run_json["status"],
                                                             run_json["status"])]
    if run_json.get("commit"):
        head.append(f"commit {safe(run_json['commit'], 40)[:12]}")
    if run_json.get("plan_digest"):
        count = int(run_json.get("change_count") or 0)
        head.append(f"plan {safe(run_json['plan_digest'], 80)[:19]} "
                    f"({count} change{'' if count == 1 else 's'})")
    if run_json.get("control_plane_url"):
        head.append(f"→ {safe(run_json['control_plane_url'], 200)}")
    if run_json.get("saved_plan"):
        reviewed = run_json.get("reviewed_commit")
        head.append(f"(saved plan, reviewed at {safe(reviewed, 40)[:12]})"
                    if reviewed and reviewed != run_json.get("commit") else "(saved plan)")
    if run_json.get("duration_seconds") is not None:
        head.append(f"{run_json['duration_seconds']:.1f}s")
    lines = ["  ".join(head)]
    # an emergency override of a window or freeze (plan/apply --override-window REASON)
    lines.extend(f"  ! {safe(str(o), 400)}" for o in run_json.get("overrides") or [])
    blockers = run_json.get("blockers") or []
    for blocker in blockers[:10]:
        lines.append(f"  ✗ {safe(str(blocker.get('code')), 60)}: "
                     f"{safe(str(blocker.get('message')), 200)}")
    if len(blockers) > 10:
        lines.append(f"  … {len(blockers) - 10} more blocker(s)")
    changes = run_json.get("changes") or []
    for change in changes[:TEXT_CHANGES]:
        detail = safe(str(change.get("detail") or ""), 120)
        lines.append(f"  {change.get('outcome')!s:<16} {safe(str(change.get('action')), 20)} "
                     f"{safe(str(change.get('service')), 80)}" + (f" — {detail}" if detail
                                                                 else ""))
    if len(changes) > TEXT_CHANGES:
        lines.append(f"  … {len(changes) - TEXT_CHANGES} more change(s) (--format json "
                     "lists them all)")
    gate = run_json.get("gate")
    if gate:
        word = WORDS[gate_word(bool(gate.get("converged")))]
        lines.append(f"  gate: {word} after {gate.get('attempts')} poll(s), "
                     f"{float(gate.get('waited_seconds') or 0):.1f}s")
        for pending in (gate.get("pending") or [])[:5]:
            for reason in (pending.get("reasons") or [])[:3]:
                lines.append(f"    {safe(str(pending.get('service')), 80)}: "
                             f"{safe(str(reason), 200)}")
    return lines


def revert_json(record: dict[str, Any]) -> dict[str, Any]:
    """A revert as ``history --format json`` shows it; one proposed as a pull request
    (not landed) also has ``pull``, ``url`` and the ``failed_commit`` it is for."""
    told = {"key": record.get("key"), "at_ms": record.get("ts"), "commit": record.get("commit"),
            "services": list(record.get("services") or [])}
    if record.get("pull") is not None:
        told.update({k: record.get(k) for k in ("pull", "url", "failed_commit")})
    return told


def render_revert(revert: dict[str, Any]) -> list[str]:
    """A revert (``apply --on-gate-failure revert``, ``reconcile revert``): which release
    failed, what it went back to, the commit and the key."""
    where = (f"REVERT PROPOSED in pull request #{safe(str(revert['pull']), 20)}  "
             f"{safe(str(revert.get('url') or ''), 300)}  commit") \
        if revert.get("pull") is not None else "REVERTED in git  commit"
    lines = [f"{rfc3339(revert.get('at_ms'))}  {where} "
             f"{safe(str(revert.get('commit')), 40)[:12]}  key {safe(str(revert.get('key')), 40)}"]
    back = "to be held and pinned back" if revert.get("pull") is not None \
        else "held; pinned back"
    for item in revert.get("services") or []:
        lines.append(f"  {safe(str(item.get('service')), 80)}: release "
                     f"{safe(str(item.get('failed')), 80)} failed, {back} to "
                     f"{safe(str(item.get('to_tag')), 130)} ({safe(str(item.get('to')), 80)})")
        for said in (item.get("evidence") or [])[:3]:
            lines.append(f"    {safe(str(said), 200)}")
    return lines


def proposal_json(record: dict[str, Any]) -> dict[str, Any]:
    return {key: record.get(key) for key in (
        "environment", "upstream", "service", "digest", "tag", "branch", "base", "commit",
        "pull", "url", "created", "evidence", "supersedes")} | {"at_ms": record.get("ts")}


def render_proposal(proposal: dict[str, Any]) -> list[str]:
    """A promotion ``watch --promote-from`` proposed: the pull request, and the evidence."""
    lines = [f"{rfc3339(proposal.get('at_ms'))}  PROPOSED {safe(str(proposal.get('service')), 80)}"
             f" {safe(str(proposal.get('digest')), 80)} → "
             f"{safe(str(proposal.get('environment')), 80)}  pull request "
             f"#{safe(str(proposal.get('pull')), 20)} {safe(str(proposal.get('url') or ''), 300)}"]
    if proposal.get("evidence"):
        lines.append(f"  {safe(str(proposal['evidence']), 400)}")
    if proposal.get("supersedes"):
        lines.append(f"  supersedes the proposal of {safe(str(proposal['supersedes']), 80)}")
    return lines
