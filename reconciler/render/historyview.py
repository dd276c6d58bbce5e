"""The view of ``reconcile history``: past applies as terminal text or one JSON document.

Owns the words and layout of a run read back from the journal (its heading -- when it
began, how it ended in ``core.outcomes.WORDS``, the commit, the plan's fingerprint, the
duration -- its blockers or changes, bounded, and the gate's word) and the JSON document
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


def document(journal: str, runs: Sequence[dict[str, Any]], total: int) -> str:
    """``--format json``: every shown run, with how many the journal holds."""
    return safe_json_text(json.dumps({
        "format_version": FORMAT_VERSION, "journal": journal, "total": total,
        "shown": len(runs), "runs": list(runs)}, indent=2, sort_keys=True))


def text(journal: str, runs: Sequence[dict[str, Any]], total: int) -> list[str]:
    """The text view: a heading, each shown run (newest first), and how many are left."""
    if not total:
        return [f"no applies recorded in {journal}"]
    lines = [f"{journal}: {len(runs)} of {total} apply run(s), newest first"]
    for run in runs:
        lines.append("")
        lines.extend(render_run(run))
    if total > len(runs):
        lines.append(f"\n… {total - len(runs)} older run(s); raise --limit to see them")
    return lines


def render_run(run_json: dict[str, Any]) -> list[str]:
    """The text of one run: a heading, its blockers or changes (bounded), the gate."""
    head = [rfc3339(run_json["started_ms"]), STATUS_WORDS.get(run_json["status"],
                                                             run_json["status"])]
    if run_json.get("commit"):
        head.append(f"commit {safe(run_json['commit'], 40)[:12]}")
    if run_json.get("plan_fingerprint"):
        head.append(f"plan {safe(run_json['plan_fingerprint'], 80)[:19]}")
    if run_json.get("saved_plan"):
        reviewed = run_json.get("reviewed_commit")
        head.append(f"(saved plan, reviewed at {safe(reviewed, 40)[:12]})"
                    if reviewed and reviewed != run_json.get("commit") else "(saved plan)")
    if run_json.get("duration_seconds") is not None:
        head.append(f"{run_json['duration_seconds']:.1f}s")
    lines = ["  ".join(head)]
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
