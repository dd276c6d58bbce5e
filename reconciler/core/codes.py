"""Every stable code a plan carries: blockers, drift, risks, the reasons of changes, and
the control plane's preflight blocker codes.

Owns the enums and the sentence that documents each member the core at large emits
(``DOCS``); a change kind documents the codes it emits in its own module
(``core.kinds``: ``Kind.codes``, ``Kind.whys``). ``docs/codes.md`` is generated from
both (``core.codetable``, ``python -m reconciler.core.codetable``) and a test keeps the two
equal, so
the table users read cannot drift from the codes the planner emits. The per-cluster
reasons of the judge are ``core.evidence.Why``, documented in the same table.

Pure constants.
"""

from __future__ import annotations

from enum import StrEnum


class BlockerCode(StrEnum):
    """Why a plan is NO-GO. Any blocker refuses apply before a single write."""

    GATEWAY_UNRESOLVED = "gateway_unresolved"
    GATEWAY_SHORT_ANSWER = "gateway_short_answer"
    CLUSTER_UNREACHABLE = "cluster_unreachable"
    CLUSTER_CLAIMED_TWICE = "cluster_claimed_twice"
    CLUSTER_UNNAMED = "cluster_unnamed"
    CLUSTER_SILENT = "cluster_silent"
    SERVICE_NOT_FOUND = "service_not_found"
    SERVICE_UNREADABLE = "service_unreadable"
    RELEASE_NOT_OBSERVED = "release_not_observed"
    RELEASE_REPOSITORY_MISMATCH = "release_repository_mismatch"
    TAG_DIGEST_MISMATCH = "tag_digest_mismatch"
    MEDIA_TYPE_MISMATCH = "media_type_mismatch"
    CURRENT_RELEASE_UNLISTED = "current_release_unlisted"
    ROLLOUT_IN_PROGRESS = "rollout_in_progress"
    ROLLOUT_STATUS_UNKNOWN = "rollout_status_unknown"
    GRANTS_UNREADABLE = "grants_unreadable"
    REPO_DIRTY = "repo_dirty"
    PREFLIGHT_NO_GO = "preflight_no_go"
    PREFLIGHT_FAILED = "preflight_failed"
    PREFLIGHT_REPORT_INVALID = "preflight_report_invalid"
    PREFLIGHT_NOT_ASKED = "preflight_not_asked"
    PREFLIGHT_REPORTS_DISAGREE = "preflight_reports_disagree"
    APP_ID_IN_USE = "app_id_in_use"
    RELEASE_EVIDENCE_REQUIRED = "release_evidence_required"
    HELD = "held"
    # environments and promotion (core.promotion): each says when it can go
    NOT_SOAKED = "not_soaked"
    NOT_PROVEN_UPSTREAM = "not_proven_upstream"
    WINDOW_CLOSED = "window_closed"
    FROZEN = "frozen"
    POLICY_DENIED = "policy_denied"
    ROUTE_AMBIGUOUS = "route_ambiguous"
    ROUTE_SHADOWED = "route_shadowed"
    ROUTE_OWNED_BY_ANOTHER_CLIENT = "route_owned_by_another_client"
    ROUTES_UNREADABLE = "routes_unreadable"


#: The blockers that mean "an expected cluster gave no evidence" (a cluster is silent):
#: apply refuses on them with its own exit code (``engine.refuse_no_go``) and the watcher's
#: ``reconcile_silent_clusters`` counts the clusters they name. One list for both.
SILENT_CLUSTER_CODES = frozenset({
    BlockerCode.CLUSTER_SILENT, BlockerCode.CLUSTER_UNREACHABLE, BlockerCode.GATEWAY_UNRESOLVED,
    BlockerCode.GATEWAY_SHORT_ANSWER, BlockerCode.CLUSTER_CLAIMED_TWICE,
    BlockerCode.CLUSTER_UNNAMED})


class DriftCode(StrEnum):
    """Live state that differs from what the repo and the control plane intend."""

    CLUSTER_DIVERGED = "cluster_diverged"
    CLUSTER_LAGGING = "cluster_lagging"
    CLUSTER_MISSING_RUNTIME = "cluster_missing_runtime"
    CLUSTER_DIGEST_UNPROVEN = "cluster_digest_unproven"
    CLUSTER_UNHEALTHY = "cluster_unhealthy"
    EGRESS_DROPPED = "egress_dropped"
    EGRESS_NOT_IN_EFFECT = "egress_not_in_effect"
    ROLLOUT_FAILED = "rollout_failed"
    ROLLOUT_MISMATCHED = "rollout_mismatched"
    LIVE_CHANGED_OUTSIDE_REPO = "live_changed_outside_repo"
    IMMUTABLE_NOT_ENFORCED = "immutable_not_enforced"
    GRANT_NOT_DECLARED = "grant_not_declared"
    ROUTE_NOT_DECLARED = "route_not_declared"


class RiskCode(StrEnum):
    """What apply is already known to meet: the plan is GO (the writes are allowed), but a
    cluster has said why it will not converge, so the gate will fail (exit 15) until it
    recovers."""

    CLUSTER_REFUSED_RELEASE = "cluster_refused_release"
    CLUSTER_FAILING = "cluster_failing"
    CLUSTER_DROPPED_EGRESS = "cluster_dropped_egress"
    ROLLOUT_FAILED = "rollout_failed"


class ReasonCode(StrEnum):
    """Why a change is planned."""

    NEVER_ACCEPTED = "pinned_release_never_accepted"
    NEWER_THAN_CURRENT = "pinned_release_newer_than_current"
    PREVIOUSLY_ACCEPTED = "pinned_release_previously_accepted"
    EGRESS_DIFFERS = "egress_differs"
    EGRESS_REVOKE_ALL = "egress_revoke_all"
    GRANT_DIFFERS = "grant_differs"
    GRANT_NOT_DECLARED = "grant_not_declared"
    SERVICE_NOT_ON_CONTROL_PLANE = "service_not_on_control_plane"
    ROUTE_MISSING = "route_missing"
    ROUTE_DIFFERS = "route_differs"
    ROUTE_NOT_DECLARED = "route_not_declared"


class UpstreamBlockerCode(StrEnum):
    """The control plane's closed list of greenfield preflight blocker codes (seed 002
    ``TDeploymentPreflightBlockerCode``), verbatim: the value is the upstream string.

    A plan keeps an upstream blocker's code as a string (``core.greenfield.PreflightBlocker``)
    so that a code outside this list -- a newer control plane's -- is shown verbatim
    (sanitized) and still blocks, rather than being dropped or renamed; this enum names
    the ones this version knows, and ``core.greenfield`` raises the ones the repo alone
    can prove (before anything is sent) with the same codes.
    """

    INVALID_REQUEST = "INVALID_REQUEST"
    AUTHORIZATION_MISSING = "AUTHORIZATION_MISSING"
    SOURCE_REVISION_INVALID = "SOURCE_REVISION_INVALID"
    SOURCE_WORKTREE_DIRTY = "SOURCE_WORKTREE_DIRTY"
    VERSION_NOT_RESERVED = "VERSION_NOT_RESERVED"
    VERSION_COLLISION = "VERSION_COLLISION"
    NAMESPACE_NOT_RESERVED = "NAMESPACE_NOT_RESERVED"
    NAMESPACE_COLLISION = "NAMESPACE_COLLISION"
    NAMESPACE_NOT_PROVEN_BLANK = "NAMESPACE_NOT_PROVEN_BLANK"
    CONFIGURATION_DIGEST_INVALID = "CONFIGURATION_DIGEST_INVALID"
    INTENT_DIGEST_INVALID = "INTENT_DIGEST_INVALID"
    CURRENT_REFERENCE_MUTABLE = "CURRENT_REFERENCE_MUTABLE"
    CURRENT_RUNTIME_DIGEST_MISSING = "CURRENT_RUNTIME_DIGEST_MISSING"
    OCI_INDEX_DIGEST_REQUIRED = "OCI_INDEX_DIGEST_REQUIRED"
    OCI_INDEX_NOT_FOUND = "OCI_INDEX_NOT_FOUND"
    OCI_INDEX_MEDIA_TYPE_REQUIRED = "OCI_INDEX_MEDIA_TYPE_REQUIRED"
    OCI_PLATFORM_MISSING = "OCI_PLATFORM_MISSING"
    OCI_PLATFORM_MANIFEST_MISSING = "OCI_PLATFORM_MANIFEST_MISSING"
    IMMUTABLE_RELEASE_TAG_REQUIRED = "IMMUTABLE_RELEASE_TAG_REQUIRED"
    IMMUTABLE_RELEASE_TAG_NOT_RESERVED = "IMMUTABLE_RELEASE_TAG_NOT_RESERVED"
    RELEASE_EVIDENCE_MISSING = "RELEASE_EVIDENCE_MISSING"
    RELEASE_EVIDENCE_INVALID = "RELEASE_EVIDENCE_INVALID"
    RELEASE_NOT_AUTHORIZED = "RELEASE_NOT_AUTHORIZED"
    GREENFIELD_EXECUTION_UNAVAILABLE = "GREENFIELD_EXECUTION_UNAVAILABLE"
    ROUTE_PROMOTION_FENCE_UNAVAILABLE = "ROUTE_PROMOTION_FENCE_UNAVAILABLE"
    POST_DEPLOYMENT_VERIFICATION_UNAVAILABLE = "POST_DEPLOYMENT_VERIFICATION_UNAVAILABLE"
    WOULD_REPLACE_EXISTING_STATE = "WOULD_REPLACE_EXISTING_STATE"
    CORESTORE_INVENTORY_UNAVAILABLE = "CORESTORE_INVENTORY_UNAVAILABLE"
    RUNTIME_ATTESTATION_MISMATCH = "RUNTIME_ATTESTATION_MISMATCH"


DOCS: dict[StrEnum, str] = {
    BlockerCode.GATEWAY_UNRESOLVED: "The gateway resolved to no address: no cluster can give "
    "evidence.",
    BlockerCode.GATEWAY_SHORT_ANSWER: "The gateway resolved to fewer addresses than the "
    "settings name clusters.",
    BlockerCode.CLUSTER_UNREACHABLE: "An expected cluster gave no evidence at all (down, "
    "refused, timed out, failed auth); said once, naming its address, the cause and the "
    "services it blocks.",
    BlockerCode.CLUSTER_CLAIMED_TWICE: "Two addresses named themselves as the same cluster: "
    "answers cannot be attributed.",
    BlockerCode.CLUSTER_UNNAMED: "An address answered but did not name its cluster.",
    BlockerCode.CLUSTER_SILENT: "One cluster gave no evidence about one service while it "
    "answered for others.",
    BlockerCode.SERVICE_NOT_FOUND: "The control plane has no such service.",
    BlockerCode.SERVICE_UNREADABLE: "The control plane gave no state for the service.",
    BlockerCode.REPO_DIRTY: "The config repo has uncommitted changes to tracked files.",
    BlockerCode.HELD: "The service pins a digest a `kind: Hold` document holds (written by "
    "`reconcile revert` when that release failed on a cluster); the message says why. "
    "Remove the hold by a commit (`reconcile release-hold SERVICE DIGEST`) or pin another "
    "digest.",
    BlockerCode.NOT_SOAKED: "A promotion into this environment: the previous environment "
    "proves the digest (its control plane's rollout to it succeeded, is still the current "
    "one, and the judge proves it on every expected cluster now), but for less than the "
    "pipeline's `soak`; the message says for how long and when it is eligible.",
    BlockerCode.NOT_PROVEN_UPSTREAM: "A promotion into this environment: the previous "
    "environment does not prove the digest now (never deployed there, rolled back, a newer "
    "rollout, a cluster on another digest or silent, the rollout not succeeded); names the "
    "cluster or the rollout at fault. A control plane saying `succeeded` is not enough.",
    BlockerCode.WINDOW_CLOSED: "A promotion outside the environment's windows: a deny window "
    "is open, or no allow window is; says until when (`--override-window REASON` for an "
    "emergency, recorded).",
    BlockerCode.FROZEN: "A `kind: Freeze` document covers this environment until a time, "
    "or until it is lifted when it has none (`reconcile unfreeze` ends it; "
    "`--override-window REASON` for an emergency, recorded).",
    BlockerCode.POLICY_DENIED: "A CEL rule of a `kind: Policy` document is false for this "
    "promotion, or could not be evaluated (an error, a rule that does not type-check, or "
    "one over the rule budget, never run); names the policy, the rule and its message.",
    DriftCode.CLUSTER_DIVERGED: "A cluster runs another digest than the current rollout.",
    DriftCode.CLUSTER_LAGGING: "Mid-rollout, a cluster still runs another digest.",
    DriftCode.CLUSTER_MISSING_RUNTIME: "A cluster has no runtime record for the app.",
    DriftCode.CLUSTER_DIGEST_UNPROVEN: "A cluster sent no resolvedDigest.",
    DriftCode.CLUSTER_UNHEALTHY: "A cluster runs the digest but is not RUNNING with every "
    "required replica observed, healthy and verified.",
    DriftCode.EGRESS_DROPPED: "A cluster's operator allow-list dropped a declared "
    "destination.",
    DriftCode.EGRESS_NOT_IN_EFFECT: "A cluster's effective egress is not the declared list.",
    DriftCode.ROLLOUT_FAILED: "The current rollout failed.",
    DriftCode.ROLLOUT_MISMATCHED: "The current rollout ended mismatched.",
    DriftCode.LIVE_CHANGED_OUTSIDE_REPO: "The current rollout was made automatically, not "
    "from the repo.",
    DriftCode.IMMUTABLE_NOT_ENFORCED: "The repo requires immutable deployment; the control "
    "plane's service does not (the next promotion sets it).",
    RiskCode.CLUSTER_REFUSED_RELEASE: "A cluster runs another digest than the control "
    "plane's current rollout and says why (its `lastError`): it refused the last digest.",
    RiskCode.CLUSTER_FAILING: "A cluster runs the current digest but is failing and says "
    "why (its `lastError`).",
    RiskCode.CLUSTER_DROPPED_EGRESS: "A cluster's operator allow-list dropped a declared "
    "destination: that egress is not in effect there.",
    RiskCode.ROLLOUT_FAILED: "The control plane reports the current rollout failed or "
    "mismatched, and no cluster says more.",
    UpstreamBlockerCode.INVALID_REQUEST: "The preflight request is malformed (request or "
    "service id, worktree state, Corestore resources).",
    UpstreamBlockerCode.AUTHORIZATION_MISSING: "The machine user lacks a deployment "
    "capability the preflight checks for this service.",
    UpstreamBlockerCode.SOURCE_REVISION_INVALID: "The source revision is not a full 40-hex "
    "lower-case Git commit (checked locally too).",
    UpstreamBlockerCode.SOURCE_WORKTREE_DIRTY: "The config repo has uncommitted changes "
    "(checked locally too).",
    UpstreamBlockerCode.VERSION_NOT_RESERVED: "No canonical semantic version (`release.version`) "
    "is declared or reserved (checked locally too).",
    UpstreamBlockerCode.VERSION_COLLISION: "The version is already taken by another release.",
    UpstreamBlockerCode.NAMESPACE_NOT_RESERVED: "No proposed namespace (`create.namespace`) is "
    "declared or it is malformed (checked locally too).",
    UpstreamBlockerCode.NAMESPACE_COLLISION: "The proposed namespace is already in use.",
    UpstreamBlockerCode.NAMESPACE_NOT_PROVEN_BLANK: "The control plane cannot prove the "
    "proposed namespace is empty.",
    UpstreamBlockerCode.CONFIGURATION_DIGEST_INVALID: "The configuration digest is not a "
    "canonical sha256 digest.",
    UpstreamBlockerCode.INTENT_DIGEST_INVALID: "The intent digest is not a canonical sha256 "
    "digest.",
    UpstreamBlockerCode.CURRENT_REFERENCE_MUTABLE: "The service's current image reference is "
    "a mutable tag, not a digest.",
    UpstreamBlockerCode.CURRENT_RUNTIME_DIGEST_MISSING: "The running tasks report no digest.",
    UpstreamBlockerCode.OCI_INDEX_DIGEST_REQUIRED: "The OCI index digest is missing or not a "
    "canonical sha256 digest (checked locally too).",
    UpstreamBlockerCode.OCI_INDEX_NOT_FOUND: "The registry has no OCI index with the pinned "
    "digest.",
    UpstreamBlockerCode.OCI_INDEX_MEDIA_TYPE_REQUIRED: "The pinned image is not an OCI index "
    "(or its media type is unknown).",
    UpstreamBlockerCode.OCI_PLATFORM_MISSING: "A required platform is absent from the OCI "
    "index.",
    UpstreamBlockerCode.OCI_PLATFORM_MANIFEST_MISSING: "A platform of the OCI index has no "
    "manifest in the registry.",
    UpstreamBlockerCode.IMMUTABLE_RELEASE_TAG_REQUIRED: "An immutable release tag is required.",
    UpstreamBlockerCode.IMMUTABLE_RELEASE_TAG_NOT_RESERVED: "The release tag is not reserved "
    "for this digest.",
    UpstreamBlockerCode.RELEASE_EVIDENCE_MISSING: "A required kind of release evidence "
    "(provenance, sbom, signature, vulnerability-policy, release-authorization) is missing; "
    "the message names the kind (checked locally too).",
    UpstreamBlockerCode.RELEASE_EVIDENCE_INVALID: "Release evidence is malformed or bound to "
    "another image, source, version or configuration (checked locally too).",
    UpstreamBlockerCode.RELEASE_NOT_AUTHORIZED: "No release-authorization evidence: the "
    "release is not authorized (checked locally too).",
    UpstreamBlockerCode.GREENFIELD_EXECUTION_UNAVAILABLE: "The control plane cannot execute "
    "a greenfield creation.",
    UpstreamBlockerCode.ROUTE_PROMOTION_FENCE_UNAVAILABLE: "The control plane cannot fence a "
    "route promotion.",
    UpstreamBlockerCode.POST_DEPLOYMENT_VERIFICATION_UNAVAILABLE: "The control plane cannot "
    "verify a deployment after it is made.",
    UpstreamBlockerCode.WOULD_REPLACE_EXISTING_STATE: "The creation would replace existing "
    "state (the service or its resources exist).",
    UpstreamBlockerCode.CORESTORE_INVENTORY_UNAVAILABLE: "The Corestore inventory could not be "
    "read, so the proposed resources cannot be checked.",
    UpstreamBlockerCode.RUNTIME_ATTESTATION_MISMATCH: "The running replicas do not attest the "
    "expected digest.",
}
