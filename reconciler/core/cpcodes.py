"""The control plane's error codes (``error.data.code`` of a TypedRequest reply), typed.

Owns ``ControlPlaneCode`` (every code reconcile acts on; anything else stays the string
the control plane sent) and the sets that give them a meaning: ``CONFLICTS`` (another
writer moved what a change was planned against: apply exits 14) and
``CREATED_ELSEWHERE`` (a creation someone else made first). Code decides on these, never
on a suffix of the code or on the text of the message.

Pure: no I/O imports.
"""

from __future__ import annotations

from enum import StrEnum


class ControlPlaneCode(StrEnum):
    """A code the control plane answers a refusal with (CONTRACT §1.3, seeds 001-003)."""

    ROLLOUT_GENERATION_MISMATCH = "ROLLOUT_GENERATION_MISMATCH"
    ROLLOUT_ID_MISMATCH = "ROLLOUT_ID_MISMATCH"
    EGRESS_REVISION_MISMATCH = "EGRESS_REVISION_MISMATCH"
    FENCE_MISMATCH = "FENCE_MISMATCH"
    IDEMPOTENCY_KEY_REUSED = "IDEMPOTENCY_KEY_REUSED"
    SERVICE_NOT_FOUND = "SERVICE_NOT_FOUND"
    RELEASE_NOT_FOUND = "RELEASE_NOT_FOUND"
    UNAUTHORIZED = "UNAUTHORIZED"
    FORBIDDEN = "FORBIDDEN"
    ROLLBACK_TARGET_NOT_ACCEPTED = "ROLLBACK_TARGET_NOT_ACCEPTED"
    INVALID_REQUEST = "INVALID_REQUEST"
    WOULD_REPLACE_EXISTING_STATE = "WOULD_REPLACE_EXISTING_STATE"
    PREFLIGHT_NO_GO = "PREFLIGHT_NO_GO"
    #: not the control plane's: TypedRequest's own "no such method" reply carries no code,
    #: and the client names it this
    UNKNOWN_METHOD = "UNKNOWN_METHOD"


#: A compare-and-swap precondition did not hold (``CasMismatch``).
CAS_MISMATCHES = frozenset({ControlPlaneCode.ROLLOUT_GENERATION_MISMATCH,
                            ControlPlaneCode.ROLLOUT_ID_MISMATCH,
                            ControlPlaneCode.EGRESS_REVISION_MISMATCH})

#: Someone else changed what a change was planned against, mid-apply: the CAS
#: preconditions, and a creation's fence (the preflight report it was bound to moved).
CONFLICTS = CAS_MISMATCHES | {ControlPlaneCode.FENCE_MISMATCH}

#: A creation refused because the service exists now or the key was used with another
#: payload: someone else may have created it first (apply then checks what is live).
CREATED_ELSEWHERE = frozenset({ControlPlaneCode.WOULD_REPLACE_EXISTING_STATE,
                               ControlPlaneCode.IDEMPOTENCY_KEY_REUSED})


def is_conflict(code: str | None) -> bool:
    """Whether a refusal's code says another writer moved the planned-against state."""
    return code is not None and code in CONFLICTS  # a StrEnum hashes as its string
