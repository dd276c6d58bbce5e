"""The engine: the one place that sequences load → observe → plan (→ apply).

One module per operation over shared wiring, as a tree (import-linter keeps it one):

- ``wiring``: reading the repo, connecting, state directories, the notifier, deadlines,
  refusals, and the typed values operations hand back;
- ``reconciling``: ``Reconciler``, the client and prober held for one run (observe,
  preflights, plan, apply behind the one gate);
- ``wayback``: the way back from a failed release (revert, land or propose, roll back);
- the operations, independent of each other: ``planning``, ``applying``, ``reverting``,
  ``pins``, ``commenting``, ``promoting``, ``proposer``, ``fleetstatus``;
- the watcher's steps over them: ``watchsteps``, then ``sharded``.

Owns the order of operations and the translation of shell failures into
``EngineError``s that carry an exit code and a sentence. It decides nothing about what
to change (``core.planning`` does) and prints nothing (commands render; progress goes
through the ``Progress`` hook). This package re-exports each operation's public names,
so ``from reconciler import engine; engine.plan(...)`` reads as before.
"""

from __future__ import annotations

from reconciler.core.pinning import PinCheck, PinRun
from reconciler.core.promoted import PromoteRun, Promotion
from reconciler.core.sharding import ShardReport
from reconciler.engine.applying import apply_async
from reconciler.engine.commenting import (
    Bodies,
    CommentRun,
    comment_listing,
    comment_ownership,
    sync_comment,
)
from reconciler.engine.fleetstatus import status
from reconciler.engine.pins import PIN_REFUSAL_EXIT, check_pins, pin
from reconciler.engine.planning import failed_result, plan, plan_result, plan_review
from reconciler.engine.promoting import promote
from reconciler.engine.proposer import Proposal, Proposer
from reconciler.engine.reconciling import (
    Reconciler,
    ask_preflights,
    environment_rules,
    read_upstream,
)
from reconciler.engine.reverting import release_hold, revert
from reconciler.engine.sharded import ShardedWatchSteps, ShardRound, shard_report
from reconciler.engine.watchsteps import Loaded, WatchSteps
from reconciler.engine.wayback import (
    BranchMoved,
    revert_after,
    revert_pending,
    revert_with,
    way_back,
)
from reconciler.engine.wiring import (
    EVIDENCE_BLOCKERS,
    NOTHING,
    ApplyRun,
    Deadline,
    ProposalTarget,
    PullTarget,
    RevertRun,
    connect,
    load_consistent,
    load_worktree,
    make_plan,
    notifier,
    read_commit,
    refuse_no_go,
    state_dir,
    state_dir_of,
)

__all__ = [
    "EVIDENCE_BLOCKERS",
    "NOTHING",
    "PIN_REFUSAL_EXIT",
    "ApplyRun",
    "Bodies",
    "BranchMoved",
    "CommentRun",
    "Deadline",
    "Loaded",
    "PinCheck",
    "PinRun",
    "PromoteRun",
    "Promotion",
    "Proposal",
    "ProposalTarget",
    "Proposer",
    "PullTarget",
    "Reconciler",
    "RevertRun",
    "ShardReport",
    "ShardRound",
    "ShardedWatchSteps",
    "WatchSteps",
    "apply_async",
    "ask_preflights",
    "check_pins",
    "comment_listing",
    "comment_ownership",
    "connect",
    "environment_rules",
    "failed_result",
    "load_consistent",
    "load_worktree",
    "make_plan",
    "notifier",
    "pin",
    "plan",
    "plan_result",
    "plan_review",
    "promote",
    "read_commit",
    "read_upstream",
    "refuse_no_go",
    "release_hold",
    "revert",
    "revert_after",
    "revert_pending",
    "revert_with",
    "shard_report",
    "state_dir",
    "state_dir_of",
    "status",
    "sync_comment",
    "way_back",
]
