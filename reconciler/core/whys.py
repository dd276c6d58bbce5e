"""The judge's vocabulary: why a cluster (or the rollout) is not proven converged.

Owns ``Why`` (documented in docs/codes.md: the judge's own reasons there, each kind's in
its module, ``Kind.whys``), ``JUDGE_UNPROVEN`` and ``Assessment`` (what one cluster's
answer proves). Which of a kind's reasons are a gap in evidence the kind says
(``Kind.unproven``); ``core.kinds.UNPROVEN_WHYS`` is the union. ``core.evidence`` (the
judge) re-exports ``Why``; it lives apart so each change kind (``core.kinds``) can own its
part of the judge's proof without importing the judge.

Pure: no I/O imports.
"""

from __future__ import annotations

from enum import StrEnum


class Why(StrEnum):
    """Why a cluster (or the rollout) is not proven converged. Documented in docs/codes.md."""

    SILENT = "silent"
    NO_RECORD = "no_runtime_record"
    NO_DIGEST = "no_resolved_digest"
    OTHER_DIGEST = "runs_other_digest"
    NOT_RUNNING = "not_running"
    NO_REPLICA_COUNTS = "no_replica_counts"
    REPLICAS_SHORT = "replicas_not_ready"
    NO_EGRESS = "no_egress_report"
    EGRESS_DROPPED = "egress_dropped"
    EGRESS_DIFFERS = "egress_not_in_effect"
    NO_ROUTES = "no_route_view"
    ROUTE_NOT_IN_EFFECT = "route_not_in_effect"
    # the control plane's rollout, for the service as a whole
    SERVICE_UNREADABLE = "service_unreadable"
    NOT_ROLLED_OUT = "rollout_not_to_pinned_digest"
    ROLLOUT_STATUS_UNKNOWN = "rollout_status_unknown"
    ROLLOUT_IN_PROGRESS = "rollout_in_progress"
    ROLLOUT_FAILED = "rollout_failed"
    # issue 34: the checks the service is held to (``core.verification``), judged on a
    # cluster whose release is otherwise proven
    CHECK_FAILED = "check_failed"
    CHECK_UNKNOWN = "check_unknown"


#: The judge's own whys (silence, the rollout) that are a gap in evidence (unproven) rather
#: than evidence of something else; each kind adds its own (``Kind.unproven``).
JUDGE_UNPROVEN = frozenset({Why.SILENT, Why.SERVICE_UNREADABLE, Why.ROLLOUT_STATUS_UNKNOWN,
                            Why.CHECK_UNKNOWN})

#: What one cluster's answer proves, without the cluster's name: (why, detail, running,
#: last_error); ``why`` None means converged.
Assessment = tuple["Why | None", str, "str | None", "str | None"]
