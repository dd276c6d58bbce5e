"""Exit codes: one table, so every command and every script reads the same numbers.

Pure constants. 2 is reserved for "changes present" (``plan --detailed-exitcode``),
so usage errors use 64 (``EX_USAGE`` from sysexits.h), not argparse's default 2.
"""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    OK = 0
    ERROR = 1  # invalid desired state, unreachable control plane, bad input
    CHANGES = 2  # plan --detailed-exitcode: changes and GO
    CHANGES_NO_GO = 3  # plan --detailed-exitcode: changes but NO-GO
    REFUSED_NO_GO = 10  # apply: the plan has blockers
    REFUSED_STALE = 11  # apply: live preconditions moved since the plan was made
    REFUSED_COMMIT = 12  # apply: the repo is dirty or not in git, the saved plan is a
    #                      worktree preview, or a plan older than format 2.3 (bound to its
    #                      commit) was made at another commit
    REFUSED_EVIDENCE = 13  # apply: an expected cluster gave no evidence
    CONFLICT = 14  # apply: someone else changed a service mid-apply (CAS mismatch)
    NOT_CONVERGED = 15  # apply: the convergence gate failed or could not verify
    DECLINED = 16  # apply: the operator answered no, or no terminal and no --auto-approve
    APPLY_FAILED = 17  # apply: a change failed for another reason
    REFUSED_MISMATCH = 18  # apply: a saved plan is not what apply re-derives (desired-state
    #                        tree, environment, content digest, or changes), so it is not
    #                        what was reviewed
    PIN_LAGS = 20  # pin --check: a pin lags the newest release the control plane observed
    PIN_UNOBSERVED = 21  # pin: the control plane observed no release under that tag
    PIN_AMBIGUOUS = 22  # pin: the tag names several digests (or the newest is a tie)
    PIN_MOVED = 23  # pin: the repo pins that tag to another digest (--allow-moved to accept)
    USAGE = 64
    INTERRUPTED = 130
