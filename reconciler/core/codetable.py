"""``docs/codes.md``: every code with its sentence, one table per kind.

Owns ``table``. It reads the codes ``core.codes`` and ``core.whys`` document and those
each change kind documents (``core.kinds``: ``Kind.codes``, ``Kind.whys``), so it sits
above all three: ``core.codes`` stays pure constants the kinds can import.

Pure: no I/O imports (``python -m reconciler.core.codetable`` prints the table).
"""

from __future__ import annotations

from enum import StrEnum

from reconciler.core import kinds
from reconciler.core.codes import (
    DOCS,
    BlockerCode,
    DriftCode,
    ReasonCode,
    RiskCode,
    UpstreamBlockerCode,
)
from reconciler.core.whys import Why


def table() -> str:
    """``docs/codes.md``: every code with its sentence, one table per kind."""
    # The judge's reasons share the table; each kind's codes and reasons are documented
    # in its module (``core.kinds``), read here -- the members stay in ``core.codes``'
    # enums (one wire vocabulary, one order for this table and the plan's schema).
    docs = {**DOCS, **kinds.code_docs()}

    # The judge's reasons about a cluster, then each kind's in the judge's order, then the
    # judge's about the rollout, then the reasons of kinds added after the plan format was
    # fixed (``Kind.optional_actions``), so a new kind's rows are appended.
    cluster: dict[StrEnum, str] = {
        Why.SILENT: "The cluster gave no answer (unproven).",
        Why.NO_RECORD: "The cluster answered 404: no runtime record (not converged).",
    }
    rollout: dict[StrEnum, str] = {
        Why.SERVICE_UNREADABLE: "The control plane's state for the service is unknown "
        "(unproven).",
        Why.NOT_ROLLED_OUT: "The control plane's current rollout is not to the pinned digest "
        "(not converged).",
        Why.ROLLOUT_STATUS_UNKNOWN: "The rollout has no status, or one that is not "
        "`succeeded` and not known (unproven).",
        Why.ROLLOUT_IN_PROGRESS: "The rollout is still pending, deploying or verifying (not "
        "converged).",
        Why.ROLLOUT_FAILED: "The rollout failed or mismatched (not converged).",
    }
    # Issue 34: the checks a service is held to (``core.verification``), appended last.
    checks: dict[StrEnum, str] = {
        Why.CHECK_FAILED: "The cluster runs the pinned digest but fails a check it is held "
        "to (a Verification document); the check and the value are named (not converged: "
        "a stated failure, which `--on-gate-failure revert` reverts).",
        Why.CHECK_UNKNOWN: "A check the service is held to could not be read for this cluster "
        "(Prometheus unreachable, no samples, a timeout, a result for another digest or "
        "rollout generation): unproven, like a silent cluster -- never a pass.",
    }
    why_docs: dict[StrEnum, str] = {**cluster,
                **{w: t for k in kinds.PROVERS if not k.optional_actions
                   for w, t in k.whys.items()},
                **rollout,
                **{w: t for k in kinds.PROVERS if k.optional_actions
                   for w, t in k.whys.items()},
                **checks}
    sections: list[tuple[str, dict[StrEnum, str]]] = [
        ("Blockers (the plan is NO-GO)", {c: docs[c] for c in BlockerCode}),
        ("Drift (shown apart from changes)", {c: docs[c] for c in DriftCode}),
        ("Risks (the plan is GO; apply's gate will fail until the cluster recovers)",
         {c: docs[c] for c in RiskCode}),
        ("Reasons of changes", {c: docs[c] for c in ReasonCode}),
        ("Upstream preflight blockers (the control plane's codes, kept verbatim -- a code "
         "not listed here too; any makes the plan NO-GO)",
         {c: docs[c] for c in UpstreamBlockerCode}),
        ("Why the judge does not call a cluster converged", why_docs),
    ]
    out = ["# Codes", "",
           "Generated from `reconciler/core/codes.py`, `reconciler/core/whys.py` and the change "
           "kinds (`python -m reconciler.core.codetable > docs/codes.md`). Codes are stable: "
           "scripts may match on them.", ""]
    for title, rows in sections:
        out += [f"## {title}", "", "| code | meaning |", "|---|---|"]
        out += [f"| `{code.value}` | {text} |" for code, text in rows.items()]
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(table(), end="")
