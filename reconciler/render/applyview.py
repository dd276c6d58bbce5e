"""Views of a running apply: each typed event as terminal text or as one JSON line.

Owns the words and layout of apply's progress and its final verdict (the gate's, from
the judge's proofs: every cluster that did not converge is named with both digests).
A gate that stopped on a rollout the control plane reports failed or mismatched says so
first, then names each cluster that said why, with the digest it was asked to run and the
one it runs -- each in full once -- and what it said (digests in it shortened).
Pure: returns strings; the command writes them. Every string from the live world or a
plan file goes through ``safe``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from reconciler.core.events import (
    ApplyStarted,
    Event,
    Finished,
    GatePolled,
    GateStarted,
    JournalRepaired,
    NothingToDo,
    PostApply,
    PreApply,
)
from reconciler.core.evidence import Proof, ServiceProof, Why
from reconciler.core.outcomes import EXPIRED, ApplyReport, Outcome
from reconciler.core.plans import Action, Change
from reconciler.core.sanitize import safe
from reconciler.render import common, jsonplan, kindviews

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_MARK = {Outcome.APPLIED: "✓", Outcome.ALREADY_APPLIED: "=", Outcome.REFUSED: "✗",
         Outcome.FAILED: "✗", Outcome.IN_DOUBT: "?", Outcome.SKIPPED: "-"}


def _label(change: Change) -> str:
    return kindviews.view_of(change).label(change)


def _short(text: str) -> str:
    return _DIGEST.sub(lambda m: m.group()[:19], text)


def _pending(proofs: tuple[ServiceProof, ...]) -> list[str]:
    out = []
    for proof in proofs:
        if proof.rollout_why is not None:
            out.append(f"{safe(proof.service)}: {safe(proof.rollout_detail)}")
        out.extend(f"{safe(proof.service)}@{safe(c.cluster)} "
                   f"{'unproven' if c.proof is Proof.UNPROVEN else 'not converged'}: "
                   f"{safe(c.detail)}" for c in proof.pending())
    return out


def _stopped(proof: ServiceProof) -> list[str]:
    """The clusters of a service whose rollout the control plane reports failed: those
    that said why first (the digests in full, once), then the others, briefly."""
    service = safe(proof.service)
    lines = []
    for c in proof.stated():
        said = _short(safe(c.stated or ""))
        if c.running is not None and c.running != proof.digest:
            lines.append(f"  ✗ {service} on {safe(c.cluster)}: DIVERGED: runs "
                         f"{safe(c.running)}, refused {safe(proof.digest)}: {said}")
        else:
            lines.append(f"  ✗ {service} on {safe(c.cluster)}: FAILING at "
                         f"{safe(proof.digest)}: {said}")
    if not lines:
        lines.append(f"  ✗ {service}: no cluster said why; the rollout was to "
                     f"{safe(proof.digest)}")
    # The others said nothing: most are still catching up. Named once, briefly: the gate
    # did not wait for them, so they are not proven either.
    said_by = {c.cluster for c in proof.stated()}
    quiet = [safe(c.cluster) for c in proof.pending() if c.cluster not in said_by]
    if quiet:
        lines.append(f"  ? {service}: also not proven when the gate stopped (said nothing, "
                     f"not polled again): {', '.join(quiet)}")
    return lines


def warnings(event: Event) -> list[str]:
    """The lines a terminal shows for ``event`` on stderr (a warning, not progress)."""
    if isinstance(event, JournalRepaired):
        return [f"warning: {safe(event.message, 1000)}"]
    return []


def text(event: Event) -> list[str]:
    """The lines a terminal shows for ``event`` (stdout)."""
    if isinstance(event, NothingToDo):
        if event.selected:
            return [f"No changes. Every expected cluster proves the selected service(s) "
                    f"({', '.join(safe(n) for n in event.services)}) converged; services "
                    "outside --only were not judged."]
        return ["No changes. Every expected cluster proves every service converged."]
    if isinstance(event, ApplyStarted):
        return [f"Applying {event.changes} change(s):"] if event.changes else \
            ["Nothing to send; gating what is not proven converged:"]
    if isinstance(event, PreApply):
        return []
    if isinstance(event, PostApply):
        r = event.result
        if r.outcome is Outcome.APPLIED:
            return [f"  ✓ {_label(r.change)}" + (f" ({safe(r.detail)})" if r.detail else "")]
        if r.outcome is Outcome.ALREADY_APPLIED:
            return [f"  = {_label(r.change)}: {safe(r.detail) or 'already applied'}"]
        if r.outcome is Outcome.IN_DOUBT:  # the detail says "in doubt — a rerun replays ..."
            return [f"  {_MARK[r.outcome]} {_label(r.change)}: {safe(r.detail)}"]
        return [f"  {_MARK[r.outcome]} {_label(r.change)}: {r.outcome.value}: {safe(r.detail)}"]
    if isinstance(event, GateStarted):
        return [f"Convergence gate: {len(event.services)} service(s) × {len(event.clusters)} "
                f"cluster(s) ({', '.join(safe(c) for c in event.clusters)}), up to "
                f"{event.attempts} polls {event.interval:g}s apart"]
    if isinstance(event, GatePolled):
        pending = _pending(event.proofs)
        stopped = [p for p in event.proofs if p.terminal]
        if stopped:
            names = ", ".join(safe(p.service) for p in stopped)
            return [f"  gate {event.attempt}/{event.attempts}: stopped polling {names}: the "
                    "control plane reports the rollout failed or mismatched; "
                    + "; ".join(_short(x) for x in pending[:3])
                    + (f" (+{len(pending) - 3} more)" if len(pending) > 3 else "")]
        if not pending:
            checks = sum(len(p.clusters) for p in event.proofs)
            return [f"  gate {event.attempt}/{event.attempts}: every cluster converged "
                    f"({checks} service×cluster checks)"]
        more = f" (+{len(pending) - 3} more)" if len(pending) > 3 else ""
        return [f"  gate {event.attempt}/{event.attempts}: waiting on {len(pending)}: "
                + "; ".join(_short(p) for p in pending[:3]) + more]
    return []


def summary(report: ApplyReport) -> tuple[list[str], list[str]]:
    """(stdout lines, stderr lines) of the end of an apply."""
    out: list[str] = []
    err: list[str] = []
    counts = ", ".join(f"{report.count(o)} {o.value.replace('_', ' ')}" for o in Outcome
                       if report.count(o))
    if report.results:
        out.append(f"Changes: {counts}")
    for r in report.results:
        if r.outcome not in (Outcome.APPLIED, Outcome.ALREADY_APPLIED):
            err.append(f"  {r.outcome.value.replace('_', ' ')}: {_label(r.change)}: "
                       f"{safe(r.detail)}")
    gate = report.gate
    if report.expired and report.timeout_seconds is not None:
        not_sent = [r for r in report.results
                    if r.outcome is Outcome.SKIPPED and r.detail.startswith(EXPIRED)]
        err.append(f"error: --timeout {report.timeout_seconds:g}s expired"
                   + (f"; {len(not_sent)} change(s) not sent" if not_sent else "")
                   + ("; the convergence gate stopped" if gate is not None and gate.expired
                      else "")
                   + (": still unproven below" if gate is not None and not gate.converged
                      else ""))
    if gate is not None and gate.stopped():
        # No later poll can prove these: said once, not once per poll.
        err.append(f"error: convergence gate stopped after {gate.attempts} poll(s) "
                   f"({gate.waited_seconds:.1f}s): the control plane reports "
                   + "; ".join(f"{safe(p.service)}'s {safe(p.rollout_detail)}"
                               for p in gate.stopped())
                   + " -- waiting cannot prove it")
        for proof in gate.stopped():
            err.extend(_stopped(proof))
    if gate is not None and not gate.converged:
        if not gate.stopped():
            err.append(f"error: convergence gate "
                       f"{'stopped by --timeout' if gate.expired else 'failed'}"
                       f" after {gate.attempts} poll(s) ({gate.waited_seconds:.1f}s):")
        for proof in gate.pending():
            if proof.terminal:
                continue
            if proof.rollout_why is not None:
                err.append(f"  ✗ {safe(proof.service)}: {safe(proof.rollout_detail)}")
            for c in proof.pending():
                last = f"; lastError: {safe(c.last_error)}" if c.last_error else ""
                if c.why is Why.CHECK_FAILED:
                    # Issue 34: it runs the release, and the release fails its checks there.
                    err.append(f"  ✗ {safe(proof.service)} on {safe(c.cluster)}: FAILING "
                               f"CHECK: runs the pinned {safe(proof.digest)}, but "
                               f"{safe(c.detail)}")
                elif c.proof is Proof.NOT_CONVERGED and c.running == proof.digest:
                    # The digest is right; something else (a route, egress, replicas) is
                    # not: one digest said once, and what is wrong.
                    err.append(f"  ✗ {safe(proof.service)} on {safe(c.cluster)}: DIVERGED: "
                               f"runs the pinned {safe(proof.digest)}, but "
                               f"{safe(c.detail)}{last}")
                elif c.proof is Proof.NOT_CONVERGED:
                    err.append(f"  ✗ {safe(proof.service)} on {safe(c.cluster)}: DIVERGED: "
                               f"runs {safe(c.running or '<none>')}, should run "
                               f"{safe(proof.digest)} ({safe(c.detail)}){last}")
                else:
                    err.append(f"  ? {safe(proof.service)} on {safe(c.cluster)}: UNVERIFIED: "
                               f"{safe(c.detail)}; should run {safe(proof.digest)} — a cluster "
                               "that gives no proof is one this apply cannot vouch for")
    elif gate is not None:
        clusters = ", ".join(safe(c) for c in sorted({c.cluster for p in gate.proofs
                                                      for c in p.clusters}))
        left_out = sorted({safe(r.change.service) for r in report.results
                           if r.outcome not in (Outcome.APPLIED, Outcome.ALREADY_APPLIED)})
        if left_out:
            # Not "Converged": services whose own write did not go through were not gated.
            out.append(f"Gate: the {len(gate.proofs)} gated service(s) converged on every "
                       f"expected cluster ({clusters}) after {gate.attempts} poll(s); not "
                       f"gated, because their change was not applied: {', '.join(left_out)}.")
        else:
            # Say what was proven: a route change is proven by the routes each cluster
            # serves (with the digest and egress, which the judge always asks).
            routes = any(r.change.action in (Action.SYNC_ROUTE, Action.DELETE_ROUTE)
                         for r in report.results)
            proven = "digests, egress and gateway routes" if routes else "digests and egress"
            out.append(f"Converged: every expected cluster ({clusters}) proves the pinned "
                       f"{proven} of {len(gate.proofs)} service(s) after "
                       f"{gate.attempts} poll(s), {gate.waited_seconds:.1f}s.")
    return out, err


def json_line(event: Event) -> str:
    """One JSON object per event (``apply --format json``), for machines."""
    data: dict[str, Any]
    if isinstance(event, NothingToDo):
        data = {"event": "no_changes", "services": list(event.services),
                "selected": event.selected}
    elif isinstance(event, ApplyStarted):
        data = {"event": "apply_started", "changes": event.changes}
    elif isinstance(event, PreApply):
        data = {"event": "pre_apply", "key": event.change.idempotency_key,
                "action": event.change.action.value, "service": event.change.service,
                "replay": event.replay}
    elif isinstance(event, PostApply):
        data = {"event": "post_apply", "key": event.result.change.idempotency_key,
                "action": event.result.change.action.value,
                "service": event.result.change.service, "outcome": event.result.outcome.value,
                "detail": event.result.detail, "code": event.result.code}
    elif isinstance(event, GateStarted):
        data = {"event": "gate_started", "services": list(event.services),
                "clusters": list(event.clusters), "attempts": event.attempts,
                "interval_seconds": event.interval}
    elif isinstance(event, GatePolled):
        data = {"event": "gate_polled", "attempt": event.attempt, "attempts": event.attempts,
                "proofs": [p.model_dump(mode="json") for p in event.proofs]}
    elif isinstance(event, JournalRepaired):
        data = {"event": "journal_repaired", "path": event.path, "line": event.line,
                "message": event.message}
    else:
        assert isinstance(event, Finished)
        gate = event.report.gate
        report = event.report.model_dump(mode="json")
        for dumped, result in zip(report["results"], event.report.results, strict=True):
            dumped["change"] = jsonplan.change_fields(result.change)  # the plan's shape
        data = {"event": "finished", "report": report,
                "converged": gate.converged and event.report.writes_ok if gate else None,
                "stopped": [p.service for p in gate.stopped()] if gate else []}
    # Redacted and control-free like every other view (``common.terminal_json``).
    return common.terminal_json(json.dumps(data, sort_keys=True, ensure_ascii=False))


def lines(event: Event, fmt: str) -> tuple[list[str], list[str]]:
    """One event as ``apply --format FMT`` shows it: (stdout lines, stderr lines) -- one
    JSON object per event, or its text with its warnings on stderr."""
    if fmt == "json":
        return [json_line(event)], []
    return text(event), warnings(event)
