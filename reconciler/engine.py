"""The engine: the one place that sequences load → observe → plan (→ apply).

Owns the order of operations and the translation of shell failures into
``EngineError``s that carry an exit code and a sentence. It decides nothing about what
to change (``core.planning`` does) and prints nothing (commands render; progress goes
through the ``Progress`` hook).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from reconciler.core import staleness
from reconciler.core.desired import DesiredState
from reconciler.core.outcomes import ApplyReport
from reconciler.core.planning import Provenance
from reconciler.core.planning import plan as make_plan
from reconciler.core.plans import Plan
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError
from reconciler.shell import applying, gitrepo, observing, validating
from reconciler.shell.controlplane import ControlPlaneClient, ControlPlaneError, token_from_env
from reconciler.shell.endpoints import ConfigError, Connection, Overrides
from reconciler.shell.journal import Journal, JournalError
from reconciler.shell.probing import Prober
from reconciler.shell.progress import Progress


def load_consistent(root: Path) -> tuple[DesiredState, Provenance]:
    """Validate the repo at ``root`` (every problem, or the desired state) and the commit
    it is at, proving the files read are that commit's: git is asked before and after,
    and a checkout caught half-way (HEAD or the tree moved while the files were read) is
    refused rather than mixed."""
    if not root.is_dir():
        raise EngineError(f"{root}: not a directory")
    try:
        before = gitrepo.provenance(root)
        result = validating.load_repo(root)
        after = gitrepo.provenance(root)
    except gitrepo.GitError as exc:
        raise EngineError(str(exc)) from exc
    if result.state is None:
        raise EngineError(
            f"{root}: the desired state is invalid ({len(result.diagnostics)} problem(s))",
            Exit.ERROR, result.diagnostics)
    if before != after:
        raise EngineError(f"{root} changed while it was being read (HEAD "
                          f"{(before.commit or '-')[:12]} → {(after.commit or '-')[:12]}); "
                          "read it again once it settles")
    return result.state, after


def connect(desired: DesiredState, root: Path, overrides: Overrides) -> Connection:
    try:
        return Connection.build(desired.settings, repo_root=root, overrides=overrides)
    except ConfigError as exc:
        raise EngineError(f"settings: {exc}") from exc


def plan(root: Path, *, overrides: Overrides, env: Mapping[str, str] | None = None,
         progress: Progress | None = None) -> Plan:
    """Load, observe every cluster and the control plane, and plan. Pure planning last."""
    env = os.environ if env is None else env
    desired, provenance = load_consistent(root)
    connection = connect(desired, root, overrides)
    try:
        snapshot = observing.observe(desired, connection, env=env, progress=progress)
    except ControlPlaneError as exc:
        raise EngineError(f"control plane {connection.control_plane_url}: {exc}") from exc
    except ConfigError as exc:
        raise EngineError(str(exc)) from exc
    return make_plan(desired, snapshot, provenance)


# -- apply ------------------------------------------------------------------------------

#: Blocker codes that mean "an expected cluster gave no evidence".
EVIDENCE_BLOCKERS = frozenset({
    "cluster_silent", "gateway_unresolved", "gateway_short_answer", "cluster_claimed_twice",
    "cluster_unnamed"})


def state_dir(desired: DesiredState, root: Path, env: Mapping[str, str]) -> Path:
    """Where the journal lives: env > settings (relative to the repo) > the user's state."""
    if env.get("RECONCILE_STATE_DIR"):
        return Path(env["RECONCILE_STATE_DIR"]).expanduser()
    if desired.settings.state_dir:
        return (root / desired.settings.state_dir).resolve()
    base = Path(env.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    tag = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
    return base / "reconcile" / tag


def refuse_no_go(plan_value: Plan) -> None:
    """Raise the refusal a NO-GO plan earns, the most specific first."""
    if not plan_value.blockers:
        return
    codes = {b.code for b in plan_value.blockers}
    lines = "\n".join(f"  ✗ {b.code}: {b.message}" for b in plan_value.blockers)
    if "repo_dirty" in codes:
        raise EngineError(f"refusing to apply: the config repo has uncommitted changes\n{lines}",
                          Exit.REFUSED_COMMIT)
    if codes & EVIDENCE_BLOCKERS:
        silent = sorted({b.cluster or "?" for b in plan_value.blockers
                         if b.code in EVIDENCE_BLOCKERS})
        raise EngineError(f"refusing to apply: evidence incomplete, no answer from "
                          f"{', '.join(silent)}; nothing was sent\n{lines}",
                          Exit.REFUSED_EVIDENCE)
    raise EngineError(f"refusing to apply: the plan is NO-GO; nothing was sent\n{lines}",
                      Exit.REFUSED_NO_GO)


def check_commit(plan_value: Plan, root: Path) -> None:
    """A saved plan applies only to the commit it was made from, on a clean tree."""
    try:
        now = gitrepo.provenance(root)
    except gitrepo.GitError as exc:
        raise EngineError(str(exc)) from exc
    if now.dirty:
        raise EngineError(f"refusing to apply: {root} has uncommitted changes; nothing was sent",
                          Exit.REFUSED_COMMIT)
    if now.commit != plan_value.commit:
        raise EngineError(
            f"refusing to apply: the plan was made from commit {plan_value.commit or '<none>'} "
            f"but {root} is at {now.commit or '<none>'}; plan again", Exit.REFUSED_COMMIT)


@dataclass(frozen=True)
class ApplyRun:
    plan: Plan
    report: ApplyReport


async def apply_async(
    root: Path,
    *,
    overrides: Overrides,
    env: Mapping[str, str],
    hook: applying.Hook,
    saved: Plan | None = None,
    only: frozenset[str] = frozenset(),
    confirm: Callable[[Plan], bool] | None = None,
    progress: Progress | None = None,
) -> ApplyRun:
    """Plan (or take a saved plan), refuse what must be refused, send, and gate.

    One prober serves the whole run, so the gateway is resolved once and the expected
    clusters can only grow.
    """
    desired, provenance = load_consistent(root)
    unknown = sorted(only - {s.name for s in desired.services})
    if unknown:
        raise EngineError(f"--only names no service of this repo: {', '.join(unknown)}",
                          Exit.USAGE)
    connection = connect(desired, root, overrides)
    if saved is not None:
        check_commit(saved, root)
    try:
        journal = Journal.open(state_dir(desired, root, env) / "journal.jsonl")
        token = token_from_env(connection, env)
        signer = observing.signer_key_path(connection, env)
    except (gitrepo.GitError, JournalError, ConfigError) as exc:
        raise EngineError(str(exc)) from exc
    async with ControlPlaneClient(connection, token=token) as client, \
            Prober(connection, signer_key=signer) as prober:
        try:
            snapshot = await observing.observe_async(desired, connection, env=env,
                                                     prober=prober, client=client,
                                                     progress=progress)
        except ControlPlaneError as exc:
            raise EngineError(f"control plane {connection.control_plane_url}: {exc}") from exc
        fresh = restrict(make_plan(desired, snapshot, provenance), only)
        plan_value = restrict(saved, only) if saved is not None else fresh
        refuse_no_go(plan_value)
        if saved is not None:
            # The world may have moved since the plan was saved: its evidence must hold now.
            refuse_no_go(fresh.model_copy(update={"blockers": tuple(
                b for b in fresh.blockers if b.code in EVIDENCE_BLOCKERS)}))
        checks = [staleness.check(c, snapshot, journaled=journal.in_doubt(c.idempotency_key))
                  for c in plan_value.changes]
        stale = [c for c in checks if c.freshness is staleness.Freshness.STALE]
        if stale:
            raise EngineError(
                "refusing to apply: the plan is stale, live state moved since it was made; "
                "nothing was sent\n" + "\n".join(f"  ✗ {c.detail}" for c in stale),
                Exit.REFUSED_STALE)
        if not plan_value.changes and not plan_value.unconverged():
            hook.line("No changes. The live world matches the desired state.")
            return ApplyRun(plan_value, ApplyReport(results=()))
        if confirm is not None and not confirm(plan_value):
            raise EngineError("apply cancelled; nothing was sent", Exit.DECLINED)
        hook.line(f"Applying {len(checks)} change(s):")
        results = await applying.execute(checks, client=client, journal=journal, hook=hook,
                                         concurrency=connection.concurrency)
        targets = applying.gate_targets(plan_value, results)
        gate_report = None
        if targets:
            policy = desired.settings.policy.convergence
            hook.line(f"Convergence gate: {len(targets)} service(s) × "
                      f"{len({c for t in targets for c in t.expected_clusters})} cluster(s), "
                      f"up to {policy.attempts} polls {policy.interval_seconds:g}s apart")
            gate_report = await applying.gate(targets, prober=prober, attempts=policy.attempts,
                                              interval=policy.interval_seconds, hook=hook)
        return ApplyRun(plan_value, ApplyReport(results=tuple(results), gate=gate_report))


def restrict(plan_value: Plan, only: frozenset[str]) -> Plan:
    """The part of a plan about ``only`` (all of it when empty); mesh-wide blockers stay."""
    if not only:
        return plan_value
    def keep(name: str | None) -> bool:
        return name is None or name in only

    return plan_value.model_copy(update={
        "changes": tuple(c for c in plan_value.changes if c.service in only),
        "blockers": tuple(b for b in plan_value.blockers if keep(b.service)),
        "drift": tuple(d for d in plan_value.drift if keep(d.service)),
        "evidence": tuple(e for e in plan_value.evidence if e.service in only),
        "converging": tuple(s for s in plan_value.converging if s in only),
    })
