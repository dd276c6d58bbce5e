"""``reconcile plan``: load → observe → plan, for a commit, a pull request's two sides
(``plan_review``), or as the result the command renders (``plan_result``,
``failed_result``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path

from reconciler.core import (
    review,
)
from reconciler.core.plans import Plan
from reconciler.core.results import PlanResult, ResultKind
from reconciler.engine.reconciling import Reconciler
from reconciler.engine.wiring import load_consistent, make_plan, read_commit
from reconciler.failures import EngineError
from reconciler.shell import (
    committed,
    environments,
    gitrepo,
)
from reconciler.shell.endpoints import Overrides
from reconciler.shell.progress import Progress


def plan(root: Path, *, overrides: Overrides, env: Mapping[str, str] | None = None,
         progress: Progress | None = None, worktree: bool = False,
         stage: environments.Selected | None = None) -> Plan:
    """Load the commit (``worktree``: the working tree, a preview), observe every cluster
    and the control plane, and plan; in an environment of a pipeline (``stage``), with
    its promotion rules."""
    env = os.environ if env is None else env
    desired, provenance = load_consistent(root, worktree=worktree)

    async def run() -> Plan:
        async with Reconciler(root, desired, overrides=overrides, env=env,
                              stage=stage) as reconciler:
            made, _ = await reconciler.plan(desired, provenance, progress)
            return made

    return asyncio.run(run())


def plan_review(root: Path, base_ref: str, *, overrides: Overrides,
                env: Mapping[str, str] | None = None,
                progress: Progress | None = None, worktree: bool = False,
                stage: environments.Selected | None = None) -> Plan:
    """``plan --base REF``: the desired state at ``REF`` and at HEAD (``worktree``: the
    working tree, a preview), planned against ONE observation of the live side; the
    head's plan, carrying the review (what the PR introduces, what was already pending,
    what it removes)."""
    env = os.environ if env is None else env
    head, provenance = load_consistent(root, worktree=worktree)
    try:
        base_result, base_commit = committed.load_at(root, base_ref)
    except gitrepo.GitError as exc:
        raise EngineError(f"--base {base_ref}: {exc}") from exc
    base = base_result.state
    # One snapshot must cover both sides: a service the PR deletes is still read.
    known = {s.service_id for s in head.services}
    extra = tuple(s for s in (base.services if base else ()) if s.service_id not in known)
    observed = head.model_copy(update={"services": head.services + extra})

    async def run() -> Plan:
        base_provenance = dataclasses.replace(provenance, commit=base_commit, dirty=False,
                                              untracked=(), tree=None, files=(),
                                              uncommitted=(), worktree=False)
        async with Reconciler(root, head, overrides=overrides, env=env,
                              stage=stage) as reconciler:
            snapshot = await reconciler.observe(observed, progress)
            # Each side's creations are asked about at its own commit (sourceRevision).
            sides = [(head, provenance)] + ([(base, base_provenance)] if base else [])
            answers = await reconciler.preflights(sides, snapshot)
            head_plan = await reconciler.with_rules(make_plan(head, snapshot, provenance,
                                                              answers), head)
        base_plan = None if base is None else make_plan(base, snapshot, base_provenance,
                                                        answers)
        return head_plan.model_copy(update={"review": review.review(
            base_ref=base_ref, base_commit=base_commit, head_commit=provenance.commit,
            base_plan=base_plan, head_plan=head_plan, base=base, head=head)})

    return asyncio.run(run())


def plan_result(root: Path, base_ref: str | None, *, overrides: Overrides,
                env: Mapping[str, str] | None = None,
                progress: Progress | None = None, worktree: bool = False,
                stage: environments.Selected | None = None) -> PlanResult:
    """``plan`` (or ``plan_review`` with ``base_ref``) as an outcome that is never lost:
    the plan, or why no plan exists for this commit (the desired state's problems, or
    what could not be read). Whatever happens, the result names the commit it is for,
    so a PR comment describes the newest commit, never an older plan."""
    try:
        made = (plan_review(root, base_ref, overrides=overrides, env=env, progress=progress,
                            worktree=worktree, stage=stage)
                if base_ref else plan(root, overrides=overrides, env=env, progress=progress,
                                      worktree=worktree, stage=stage))
    except EngineError as exc:
        return failed_result(root, exc)
    return PlanResult.of_plan(made)


def failed_result(root: Path | None, exc: EngineError) -> PlanResult:
    """The result of a run that made no plan: invalid when the failure carries the desired
    state's problems, else an error; the commit is read again, best effort (a repo that
    git cannot read has none to name)."""
    commit = path = top = None
    if root is not None:
        with contextlib.suppress(EngineError, OSError):
            _, provenance = read_commit(root)
            commit, path, top = provenance.commit, provenance.path, provenance.root
    outcome = ResultKind.INVALID if exc.diagnostics else ResultKind.ERROR
    return PlanResult(outcome, commit=commit, path=path, root=top,
                      diagnostics=tuple(exc.diagnostics), error=str(exc),
                      exit_code=int(exc.code))
