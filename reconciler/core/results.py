"""What one ``plan`` run came to: a plan, an invalid desired state, or an error.

Owns ``PlanResult``, the value a pull request's living comment describes. A run over a
commit always ends in exactly one of three outcomes, and the comment must say which for
the newest commit, never keep showing an older plan:

- ``plan``: a plan was made (GO, NO-GO or no changes: the plan's own verdict says which);
- ``invalid``: the desired state at that commit has problems (``diagnostics``, each with
  file:line), so no plan exists for it;
- ``error``: something could not be read (the control plane, a cluster, git, a file);
  ``error`` says what, in the engine's sentence; no plan exists for the commit.

Also owns how an error's advice reads on a pull request (``for_pull_request``: a CI
runner has no local sandbox to start).

Pure: a value and its predicates. The engine makes it (``engine.plan_result``), the
result file (``render.resultfile``) carries it to ``reconcile comment``, and the
renderers say it. Nothing here decides a verdict: a plan's verdict is the plan's
(``Plan.verdict``, the one judge).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from reconciler.core.diagnostics import Diagnostic
from reconciler.core.plans import Plan

#: What an unreachable control plane at a loopback address is told on a terminal
#: (``shell.connectadvice``): start the local sandbox.
LOCAL_SANDBOX_ADVICE = ("; is it running? start a local one with `reconcile sandbox up "
                        "--print-env`, or pass --control-plane URL")
#: The same failure told on a pull request: a CI runner has no sandbox to start; the
#: workflow reached for the loopback default because nothing set the real URL.
CI_LOOPBACK_ADVICE = ("; the control plane URL is a loopback address on the CI runner: set "
                      "the workflow's RECONCILE_CONTROL_PLANE_URL (or settings "
                      "controlPlane.url) to this environment's control plane")


def for_pull_request(error: str) -> str:
    """``error`` as a pull request's comment says it: advice meant for a terminal (start
    a local sandbox) becomes the advice for a CI run."""
    return error.replace(LOCAL_SANDBOX_ADVICE, CI_LOOPBACK_ADVICE)


class ResultKind(StrEnum):
    """The wire strings of the result file's ``outcome``."""

    PLAN = "plan"
    INVALID = "invalid"
    ERROR = "error"


@dataclass(frozen=True)
class PlanResult:
    """One run's outcome for one commit of one desired-state directory.

    ``commit`` is the commit the run read (None when it could not tell: outside git, or
    git itself failed); ``path``/``root`` the desired-state directory and its git work
    tree, as the plan's provenance records them. ``plan`` is set exactly for ``PLAN``;
    ``diagnostics`` (non-empty) exactly for ``INVALID``; ``error`` for ``INVALID`` (the
    summary sentence) and ``ERROR`` (what could not be read). ``exit_code`` is what the
    run exited with when no plan was made (1 unless the engine said otherwise).
    """

    outcome: ResultKind
    commit: str | None = None
    path: str | None = None
    root: str | None = None
    plan: Plan | None = None
    diagnostics: tuple[Diagnostic, ...] = ()
    error: str = ""
    exit_code: int = 0

    def __post_init__(self) -> None:
        if (self.plan is not None) != (self.outcome is ResultKind.PLAN):
            raise ValueError("a plan result carries a plan, and only a plan result does")
        if self.outcome is ResultKind.INVALID and not self.diagnostics:
            raise ValueError("an invalid result names at least one problem")

    @classmethod
    def of_plan(cls, plan: Plan) -> PlanResult:
        return cls(ResultKind.PLAN, commit=plan.commit, path=plan.repo_path, root=plan.repo_root,
                   plan=plan)

    @property
    def has_plan(self) -> bool:
        return self.plan is not None
