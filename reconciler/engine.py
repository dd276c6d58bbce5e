"""The engine: the one place that sequences load → observe → plan (→ apply).

Also the sequence of the two preflights of each creation (after the snapshot, before
planning, at the commit being planned: the probe without evidence, then the request bound
to the configuration digest it reported), of the watcher's steps, and of ``reconcile pin``
(working tree → releases → resolve → rewrite → the plan of that service), and of
``watch --promote-from``'s proposals (``Proposer``: gate → pin → plan → commit beside the
checkout → branch and pull request → journal).

Owns the order of operations and the translation of shell failures into
``EngineError``s that carry an exit code and a sentence. It decides nothing about what
to change (``core.planning`` does) and prints nothing (commands render; progress goes
through the ``Progress`` hook).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import os
import threading
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from reconciler.core import (
    binding,
    comments,
    evidence,
    freshness,
    holds,
    lastproven,
    promotion,
    proposals,
    reverts,
    review,
    sharding,
    staleness,
)
from reconciler.core import pinning as pin_rules
from reconciler.core import policy as policies
from reconciler.core import status as service_status
from reconciler.core.codes import SILENT_CLUSTER_CODES, BlockerCode
from reconciler.core.comments import Comment, Owned
from reconciler.core.cpcodes import ControlPlaneCode
from reconciler.core.desired import DesiredState, Service, Settings
from reconciler.core.diagnostics import Diagnostic
from reconciler.core.events import (
    ApplyStarted,
    Event,
    Finished,
    GatePolled,
    GateStarted,
    Hook,
    JournalRepaired,
    NothingToDo,
)
from reconciler.core.evidence import ServiceProof
from reconciler.core.kinds import ChangeBase
from reconciler.core.live import (
    ImageRelease,
    LiveService,
    LiveSnapshot,
    Observation,
    ObservationKind,
    ReadFailure,
)
from reconciler.core.notifying import WayBack
from reconciler.core.outcomes import EXPIRED, ApplyReport, ChangeResult, GateReport, Outcome
from reconciler.core.pipeline import Environment, Freeze
from reconciler.core.planning import (
    Provenance,
    absent,
    bound_requests,
    creation_requests,
    target_of,
)
from reconciler.core.planning import plan as _plan
from reconciler.core.plans import Change, Plan, Verdict, restrict
from reconciler.core.preflight import Greenfield
from reconciler.core.results import PlanResult, ResultKind
from reconciler.core.sanitize import redact, safe
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError
from reconciler.shell import (
    applying,
    committed,
    connectadvice,
    environments,
    gitrepo,
    greenfield,
    heap,
    landing,
    loading,
    observing,
    tracing,
    validating,
)
from reconciler.shell import journal as journal_mod
from reconciler.shell import pinning as pin_files
from reconciler.shell import reverting as revert_git
from reconciler.shell.controlplane import (
    ControlPlaneClient,
    ControlPlaneError,
    fleet,
    parse_service,
    token_from_env,
)
from reconciler.shell.endpoints import ConfigError, Connection, Effective, Overrides
from reconciler.shell.journal import Journal, JournalError
from reconciler.shell.progress import NullProgress, Progress

T = TypeVar("T")

if TYPE_CHECKING:  # the GitHub client (githubkit) loads only when a comment is written
    from reconciler.shell import coordination as coordination_types
    from reconciler.shell.github import CommentsClient
    from reconciler.shell.notifying import Counter, Notifier
    from reconciler.shell.pullrequests import PullRequest



def make_plan(desired: DesiredState, live: LiveSnapshot,
              provenance: Provenance,
              greenfield_answers: Greenfield | None = None) -> Plan:
    """``core.planning.plan`` with the cyclic collector paused (``shell.heap``: a
    10,000-service plan allocates hundreds of thousands of models, none of them garbage;
    kept, so frozen out of the collections while it is rendered)."""
    with heap.bulk(keep=True):
        return _plan(desired, live, provenance, greenfield_answers)


def read_commit(root: Path, cache: validating.BlobCache | None = None, *,
                worktree: bool = False) -> tuple[validating.LoadResult, Provenance]:
    """The desired state as the commit holds it (tracked files only, read from the
    commit's tree, so an ignored or untracked file can never reach a plan), and the
    provenance: commit, its tree, dirty tracked files, untracked YAML, where the repo is.
    Outside git: the directory as it is on disk, with no commit (plan works; apply
    refuses). ``worktree``: the working tree as it is instead (``plan --worktree``, a
    preview apply refuses)."""
    if not root.is_dir():
        raise EngineError(f"{root}: not a directory")
    try:
        loaded = committed.load_worktree(root) if worktree else committed.load(root, cache=cache)
        git_root = gitrepo.toplevel(root) if loaded.in_git else None
    except gitrepo.GitError as exc:
        raise EngineError(str(exc)) from exc
    return loaded.result, dataclasses.replace(
        loaded.provenance, untracked=loaded.untracked,
        path=str(root.resolve()), root=str(git_root) if git_root else None)


def load_consistent(root: Path, *, worktree: bool = False,
                    ) -> tuple[DesiredState, Provenance]:
    """``read_commit``, refusing an invalid desired state with every problem."""
    result, provenance = read_commit(root, worktree=worktree)
    if result.state is None:
        raise EngineError(
            f"{root}: the desired state is invalid ({len(result.diagnostics)} problem(s))",
            Exit.ERROR, result.diagnostics)
    return result.state, provenance


def connect(desired: DesiredState, root: Path, overrides: Overrides) -> Connection:
    try:
        return Connection.build(desired.settings, repo_root=root, overrides=overrides)
    except ConfigError as exc:
        raise EngineError(f"settings: {exc}") from exc


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


# -- apply ------------------------------------------------------------------------------

#: Blocker codes that mean "an expected cluster gave no evidence" (core.codes: one list,
#: the watcher's silent-cluster metric reads the same).
EVIDENCE_BLOCKERS = SILENT_CLUSTER_CODES


def state_dir(desired: DesiredState, root: Path, env: Mapping[str, str],
              environment: str | None = None) -> Path:
    """Where the journal lives: env > settings (relative to the repo) > the user's state.
    In an environment of a pipeline, ``RECONCILE_STATE_DIR`` holds one directory per
    environment: two control planes' applies never share a journal."""
    return state_dir_of(desired.settings, root, env, environment)


def state_dir_of(settings: Settings, root: Path, env: Mapping[str, str],
                 environment: str | None = None) -> Path:
    """``state_dir`` from the Settings document alone (``reconcile config`` shows it)."""
    if env.get("RECONCILE_STATE_DIR"):
        base_dir = Path(env["RECONCILE_STATE_DIR"]).expanduser()
        return base_dir / environment if environment else base_dir
    if settings.state_dir:
        return (root / settings.state_dir).resolve()
    base = Path(env.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    tag = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
    return base / "reconcile" / tag


def notifier(desired: DesiredState, root: Path, env: Mapping[str, str], gateway: str, *,
             applying: bool = False, count: Counter | None = None,
             environment: str | None = None) -> Notifier | None:
    """The repo's notifications (``settings.notifications``), remembered in the state
    directory (the environment's, in a pipeline); None when it names none (the delivery
    stack is not even loaded)."""
    if desired.settings.notifications is None:
        return None
    from reconciler.shell.notifying import Notifier

    return Notifier.build(desired.settings, state_dir(desired, root, env, environment), env,
                          gateway=gateway, applying=applying, count=count)


def refuse_no_go(plan_value: Plan) -> None:
    """Raise the refusal a NO-GO plan earns, the most specific first."""
    if not plan_value.blockers:
        return
    codes = {b.code for b in plan_value.blockers}
    # A saved plan's strings are untrusted (its content digest is no signature).
    lines = "\n".join(f"  ✗ {b.code.value}: {safe(b.message)}" for b in plan_value.blockers)
    if BlockerCode.REPO_DIRTY in codes:
        raise EngineError(f"refusing to apply: the config repo has uncommitted changes\n{lines}",
                          Exit.REFUSED_COMMIT)
    if codes & EVIDENCE_BLOCKERS:
        silent = sorted({safe(b.cluster or "?") for b in plan_value.blockers
                         if b.code in EVIDENCE_BLOCKERS})
        raise EngineError(f"refusing to apply: evidence incomplete, no answer from "
                          f"{', '.join(silent)}; nothing was sent\n{lines}",
                          Exit.REFUSED_EVIDENCE)
    raise EngineError(f"refusing to apply: the plan is NO-GO; nothing was sent\n{lines}",
                      Exit.REFUSED_NO_GO)


def _where(connection: Connection, provenance: Provenance) -> binding.Where:
    # Redacted as the plan holds it (observing): a query's token is never compared or shown.
    return binding.Where(control_plane_url=redact(connection.control_plane_url),
                         gateway=connection.gateway, repo_root=provenance.root,
                         repo_path=provenance.path, commit=provenance.commit,
                         tree=provenance.tree, files=dict(provenance.files))


def _refuse_mismatch(what: str, diffs: list[str]) -> None:
    if diffs:
        raise EngineError(f"refusing to apply the saved plan: {what}; nothing was sent\n"
                          + "\n".join(f"  ✗ {safe(d, 2000)}" for d in diffs)
                          + "\nplan again against this environment and review that plan",
                          Exit.REFUSED_MISMATCH)


@dataclass(frozen=True)
class Deadline:
    """``apply --timeout``: when the whole run must end (``time.monotonic()``), and the
    bound as given, for the messages."""

    at: float
    seconds: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(at=time.monotonic() + seconds, seconds=seconds)


def _left(deadline: Deadline | None) -> float | None:
    """Seconds left before ``deadline`` (None: unbounded), for ``asyncio.timeout``."""
    return None if deadline is None else max(0.0, deadline.at - time.monotonic())


@dataclass(frozen=True)
class ApplyRun:
    plan: Plan
    report: ApplyReport
    #: ``--on-gate-failure revert``: the revert made after the gate failed, or why none
    reverted: RevertRun | None = None
    revert_error: str | None = None

    def revert_proposed(self) -> bool:
        """The revert is a pull request, not yet merged: the failed commit is still the
        branch's head and nothing was rolled back. Applying that commit again would send
        the release the clusters just refused; a watcher waits for a newer commit."""
        return self.reverted is not None and self.reverted.pull is not None

    def revert_story(self) -> list[str]:
        """How the way back ended, in one sentence (empty: no revert was asked for or
        needed). Whether the rollback is proven is the gate's word -- the one judge's.
        A sharded watcher that reverted some services and left others (their shards
        are no longer its own) says both."""
        told = self._revert_told()
        if self.reverted is not None and self.revert_error:
            told.append(f"not reverted by this watcher: {self.revert_error}")
        return told

    def _revert_told(self) -> list[str]:
        done = self.reverted
        if done is None:
            return [f"release failed; no revert: {self.revert_error}"] \
                if self.revert_error else []
        back = ", ".join(f"{i.service} {i.to_tag} ({i.to[:19]})" for i in done.items)
        rolled = done.rollback
        if done.pull is not None:
            return [f"release failed; the revert to {back} is proposed in pull request "
                    f"#{done.pull.number} ({done.pull.url}) because {done.why_pr}; nothing "
                    "rolled back until it is merged"]
        landed = [f"landed: {done.how}"] if done.how else []
        if rolled is None:
            return [f"release failed; reverted in git to {back}; the rollback was not "
                    "applied", *landed]
        if reverts.rollback_proven(rolled.plan, rolled.report):
            return [f"release failed, rolled back to {back} and proven on every cluster",
                    *landed]
        pending = reverts.unproven_lines(rolled.report)
        return [f"release failed, reverted in git to {back}; the rollback is NOT proven: "
                f"{' | '.join(pending) or 'no gate ran'}", *landed]


async def ask_preflights(client: ControlPlaneClient,
                         sides: list[tuple[DesiredState, Provenance]],
                         snapshot: LiveSnapshot) -> Greenfield:
    """The two preflight rounds of every creation (issue 24), in order: first each
    request without release evidence (the probe: read-only, it tells the configuration
    digest the control plane computes), then the same request with the evidence bound to
    that digest, whose report decides. Two ``getDeploymentPreflight`` per creation (one
    when the probe gives no valid report), and one ``getCapabilities`` per plan."""
    probes = {a.request_id: a for desired, provenance in sides
              for a in creation_requests(desired, snapshot, provenance)}
    creating = any(absent(desired, snapshot) for desired, _ in sides)
    first = await greenfield.read(client, list(probes.values()), creating=creating)
    bound = {a.request_id: a for desired, provenance in sides
             for a in bound_requests(desired, snapshot, provenance, first)}
    return await greenfield.ask(client, list(bound.values()), first)


class Reconciler:
    """One config repo wired to the live world: the client and the prober, held for one
    apply or for a watcher's whole life (the gateway is resolved once per prober, and the
    expected clusters can only grow). Every step is here, in order; the shell only reads,
    writes and waits, the core only decides."""

    def __init__(self, root: Path, desired: DesiredState, *, overrides: Overrides,
                 env: Mapping[str, str], stage: environments.Selected | None = None,
                 scope: Callable[[DesiredState], DesiredState] | None = None) -> None:
        self.root = root
        #: The part of a desired state ``plan`` observes and plans (None: all of it). A
        #: sharded member's: its own shards' services, so every plan made through it --
        #: the apply's, and the revert's and its rollback's, which load the whole commit
        #: -- reads and judges no other member's services.
        self.scope = scope
        self.overrides = overrides
        self.env = env
        self.settings = desired.settings
        #: the environment of a pipeline this repo root is (None: a single-root repo)
        self.stage = stage
        self.connection = connect(desired, root, overrides)
        try:
            token = token_from_env(self.connection, env)
            signer = observing.signer_key_path(self.connection, env)
            # Both load what they were given here (a CA bundle, the signer key): a file
            # that is not what it should be is a clear error naming it, never a traceback.
            # Traced: a span per control-plane call and per cluster of each pass, when
            # tracing is on (shell.tracing; nothing is imported or done otherwise).
            tracing.setup(desired.settings, env)
            self.prober = tracing.TracedProber(self.connection, signer_key=signer)
            self.client = tracing.TracedClient(self.connection, token=token)
        except (ConfigError, tracing.TracingError) as exc:  # nothing opened: clients dial lazily
            raise EngineError(str(exc)) from exc
        #: The control plane's last clean read, for a conditional re-read (the prober
        #: keeps the clusters' ETags): lives as long as this reconciler, so a watcher's.
        self.memory = observing.Memory()

    async def __aenter__(self) -> Reconciler:
        return self

    def explained(self) -> Mapping[str, Effective]:
        """Each connection value with where it was set (for the advice after an error)."""
        return Connection.explain(self.settings, repo_root=self.root,
                                  overrides=self.overrides).values

    async def __aexit__(self, *exc: object) -> None:
        await self.prober.aclose()
        await self.client.aclose()

    @tracing.traced_observe
    async def observe(self, desired: DesiredState,
                      progress: Progress | None = None) -> LiveSnapshot:
        try:
            return await observing.observe_async(desired, self.connection, env=self.env,
                                                 prober=self.prober, client=self.client,
                                                 progress=progress, memory=self.memory)
        except ControlPlaneError as exc:
            raise EngineError(f"control plane {self.connection.control_plane_url}: {exc}",
                              hint=_next_step(exc, self.connection, self.explained())) from exc
        except ConfigError as exc:
            raise EngineError(str(exc)) from exc

    @tracing.traced_plan
    async def plan(self, desired: DesiredState, provenance: Provenance,
                   progress: Progress | None = None) -> tuple[Plan, LiveSnapshot]:
        if self.scope is not None:
            desired = self.scope(desired)
        snapshot = await self.observe(desired, progress)
        answers = await self.preflights([(desired, provenance)], snapshot)
        made = make_plan(desired, snapshot, provenance, answers)
        return await self.with_rules(made, desired), snapshot

    async def with_rules(self, made: Plan, desired: DesiredState) -> Plan:
        """Issue 19: in an environment of a pipeline, the plan with its promotion rules
        (soak proven upstream, windows, freezes, policies) as blockers; the previous
        environment is read only when the plan promotes something."""
        if self.stage is None:
            return made
        names = {c.service for c in made.changes if c.action in promotion.PROMOTING}
        upstream = await self.read_upstream(names) if names and self.stage.upstream else None
        return environment_rules(self.stage, made, desired, upstream)

    async def read_upstream(self, names: set[str]) -> promotion.Upstream | None:
        """The previous environment's evidence about ``names``: its own desired state
        (committed), its own control plane and clusters (its settings only: this run's
        connection overrides are the target's), judged per service by ``core.promotion``.
        What cannot be read is said in the ``Upstream``, never raised."""
        stage = self.stage
        if stage is None or stage.upstream is None or stage.upstream_root is None:
            return None
        return await read_upstream(stage.upstream.name, stage.upstream_root, names, self.env)

    async def preflights(self, sides: list[tuple[DesiredState, Provenance]],
                         snapshot: LiveSnapshot) -> Greenfield:
        """Issue 12: after the snapshot, before planning -- the preflight of every
        creation the plan will hold, at the commit being planned (``sourceRevision``) and
        its dirty state, and whether the control plane executes creations. Reads only;
        the planner judges the answers (planning stays pure)."""
        return await ask_preflights(self.client, sides, snapshot)

    @tracing.traced_apply
    async def apply(self, desired: DesiredState, provenance: Provenance, *, hook: Hook,
                    saved: Plan | None = None, only: frozenset[str] = frozenset(),
                    confirm: Callable[[Plan], bool] | None = None,
                    progress: Progress | None = None,
                    deadline: Deadline | None = None,
                    fence: applying.Fence | None = None,
                    notify: Notifier | None = None) -> ApplyRun:
        """Observe, plan fresh, bind a saved plan to it, refuse what must be refused, send,
        and gate on what the fresh judge does not prove.

        ``deadline`` (``apply --timeout``) bounds all of it: reading the live world (expiry
        there: nothing sent, exit 15), starting writes (none starts after it; one in
        flight ends by its own call deadline) and the gate (it stops, and the judge's
        word at the last finished poll names what is still unproven).

        ``notify``: told the outcome (a NO-GO refused, nothing to do, what was done); it
        decides what is new and delivers it off this path (``shell.notifying``)."""
        where = _where(self.connection, provenance)
        unbound = binding.source(saved, where) if saved is not None else None
        if unbound is not None and unbound.kind is binding.Unbound.PREVIEW:
            raise EngineError(f"refusing to apply: {unbound.message}; nothing was sent",
                              Exit.REFUSED_COMMIT)
        if provenance.commit is None:
            raise EngineError(f"refusing to apply: {self.root} is not a git repository, so "
                              "there is no commit to bind the change to; commit the desired "
                              "state and apply from the clone", Exit.REFUSED_COMMIT)
        if provenance.dirty:
            raise EngineError(f"refusing to apply: {self.root} has uncommitted changes; "
                              "nothing was sent", Exit.REFUSED_COMMIT)
        if saved is not None:
            # Bound to the desired-state tree, not the commit: the plan reviewed on a merge
            # preview applies after the merge when the merged tree is the same one.
            if unbound is not None and unbound.kind is binding.Unbound.TREE:
                _refuse_mismatch("the desired state is not the one reviewed", [unbound.message])
            if unbound is not None:
                raise EngineError(f"refusing to apply: {safe(unbound.message, 2000)}; nothing "
                                  "was sent", Exit.REFUSED_COMMIT)
            _refuse_mismatch("it was made for another environment",
                             binding.environment(saved, where))
        directory = state_dir(desired, self.root, self.env,
                              self.stage.name if self.stage is not None else None)
        if gitrepo.state_dir_inside_repo(self.root, directory) \
                and not gitrepo.ignored(self.root, directory):
            raise EngineError(f"refusing to apply: the state directory {directory} is inside "
                              "the config repo and not ignored by git; the journal would be "
                              "committed with the desired state. Set stateDir (or "
                              "RECONCILE_STATE_DIR) outside it, or ignore it in .gitignore",
                              Exit.ERROR)
        try:
            journal = Journal.open(directory / "journal.jsonl")
        except JournalError as exc:
            raise EngineError(str(exc)) from exc
        if journal.repaired is not None:
            hook(JournalRepaired(path=str(journal.path), line=journal.repaired.line,
                                 message=journal.repaired.describe()))
        try:
            async with asyncio.timeout(_left(deadline)):
                fresh_all, snapshot = await self.plan(desired, provenance, progress)
        except TimeoutError:
            assert deadline is not None
            names = sorted(s.name for s in desired.services
                           if not only or s.name in only)
            raise EngineError(
                f"--timeout {deadline.seconds:g}s expired while reading the live world (the "
                f"control plane {self.connection.control_plane_url} and the clusters of "
                f"{self.connection.gateway}); nothing was sent; still unproven: "
                f"{', '.join(names) or 'every service'} (nothing was judged)",
                Exit.NOT_CONVERGED) from None
        fresh = restrict(fresh_all, only)
        tracing.note_plan(fresh)  # the verdict on the apply's root span
        try:
            # Before any refusal, so `reconcile history` lists refused applies too.
            # with what ran proven before this apply replaced it (issue 20, lastproven)
            run = journal.run_started(fresh, saved=saved, proven=lastproven.running_before(
                desired, fresh, snapshot))
        except JournalError as exc:
            raise EngineError(f"{exc}; nothing was sent") from exc
        if notify is not None and fresh.verdict is Verdict.NO_GO:
            notify.outcome(fresh)
        refuse_no_go(fresh)
        sending = fresh.changes
        if saved is not None:
            saved = restrict(saved, only)
            refuse_no_go(saved)
            _refuse_mismatch("the clusters it was reviewed for are not the clusters now",
                             binding.clusters(saved, fresh))
            saved_checks = [staleness.check(c, snapshot,
                                            journaled=journal.in_doubt(c.idempotency_key))
                            for c in saved.changes]
            stale = [c for c in saved_checks if c.freshness is staleness.Freshness.STALE]
            if stale:
                raise EngineError(
                    "refusing to apply: the plan is stale, live state moved since it was made; "
                    "nothing was sent\n" + "\n".join(f"  ✗ {safe(c.detail)}" for c in stale),
                    Exit.REFUSED_STALE)
            fresh_keys = {c.idempotency_key for c in fresh.changes}
            # A saved change the fresh plan no longer holds is acceptable only when its
            # result is already live (a rerun after a crash): then nothing is sent for it.
            # Its key being in the journal proves nothing about its content.
            settled = {c.change.idempotency_key for c in saved_checks
                       if c.change.idempotency_key not in fresh_keys
                       and c.freshness is staleness.Freshness.ALREADY_LIVE}
            _refuse_mismatch("it is not what a fresh plan says now",
                             binding.changes(saved, fresh, settled,
                                             same_tree=saved.desired_tree is not None))
            # The reviewed changes, each still the fresh plan's (or settled by a rerun), in
            # the fresh plan's words: equal to the reviewed ones, but for a creation whose
            # preflight was asked again at this commit -- its new revision is what is sent.
            fresh_by_key = {c.idempotency_key: c for c in fresh.changes}
            sending = tuple(fresh_by_key.get(c.idempotency_key, c) for c in saved.changes
                            if c.idempotency_key in fresh_keys or c.idempotency_key in settled)
        checks = [staleness.check(c, snapshot, journaled=journal.in_doubt(c.idempotency_key))
                  for c in sending]
        if not checks and fresh.verdict is Verdict.NO_CHANGES:
            hook(NothingToDo(services=tuple(p.service for p in fresh.proofs),
                             selected=bool(only)))
            with contextlib.suppress(JournalError):  # nothing was sent: nothing at risk
                journal.run_finished(run, ApplyReport(results=()))
            if notify is not None:
                notify.outcome(fresh, ApplyReport(results=()))
            return ApplyRun(fresh, ApplyReport(results=()))
        if confirm is not None and not confirm(fresh):
            raise EngineError("apply cancelled; nothing was sent", Exit.DECLINED)
        hook(ApplyStarted(changes=len(checks)))
        try:
            results = await applying.execute(checks, client=self.client, journal=journal,
                                             hook=hook, concurrency=self.connection.concurrency,
                                             deadline=deadline.at if deadline else None,
                                             fence=fence)
        except JournalError as exc:
            # The journal is what makes a rerun safe: without it, stop sending at once,
            # and say what was sent, as a crash would leave it (never "Apply complete").
            sent = journal.sent_lines()
            said = ("sent before it failed (a rerun replays these exact keys; `reconcile "
                    "history` shows this run as interrupted):\n" + "\n".join(sent)) if sent \
                else "nothing was sent"
            raise EngineError(f"{exc}; stopped sending, the apply did not complete; {said}",
                              Exit.APPLY_FAILED) from exc
        report = ApplyReport(results=tuple(results),
                             timeout_seconds=deadline.seconds if deadline else None,
                             expired=any(r.outcome is Outcome.SKIPPED
                                         and r.detail.startswith(EXPIRED) for r in results))
        targets = self.gate_targets(desired, fresh, results)
        if targets:
            gate = await self.bounded_gate(desired, targets, hook, deadline,
                                           changes=fresh.changes)
            report = report.model_copy(update={"gate": gate,
                                               "expired": report.expired or gate.expired})
        try:
            journal.run_finished(run, report)
        except JournalError as exc:
            sent = journal.sent_lines()
            raise EngineError(f"{exc}; the apply cannot be recorded as complete (`reconcile "
                              "history` shows this run as interrupted); sent:\n"
                              + "\n".join(sent or ["  nothing"]), Exit.APPLY_FAILED) from exc
        hook(Finished(report=report))
        if notify is not None:
            notify.outcome(fresh, report)
        return ApplyRun(fresh, report)

    def gate_targets(self, desired: DesiredState, fresh: Plan,
                     results: list[ChangeResult]) -> dict[str, tuple[str, ...]]:
        """Service -> expected clusters: every service the fresh plan changes or does not
        prove converged, except those whose own write did not go through (they failed
        by name already; gating on a digest never sent would only wait)."""
        failed = {r.change.service for r in results
                  if r.outcome not in (Outcome.APPLIED, Outcome.ALREADY_APPLIED)}
        # Every change gates its service, egress- and grant-only ones too: the judge also
        # checks the pinned digest, so no apply can print success over a diverged cluster.
        names = {c.service for c in fresh.changes} | set(fresh.unconverged())
        expected = {e.service: e.expected_clusters for e in fresh.evidence}
        declared = {s.name for s in desired.services}
        return {n: expected.get(n, fresh.expected_clusters)
                for n in sorted(names - failed) if n in declared}

    async def bounded_gate(self, desired: DesiredState,
                           targets: Mapping[str, tuple[str, ...]], hook: Hook,
                           deadline: Deadline | None, *,
                           changes: Sequence[ChangeBase] = ()) -> GateReport:
        """``gate`` within what is left of ``deadline``. On expiry the polls stop; what is
        unproven is the judge's word at the last poll that finished (its ``GatePolled``),
        or, when none finished, the judge's word on services it was given no evidence for
        (every expected cluster silent: "not polled before --timeout expired")."""
        if deadline is None:
            return await self.gate(desired, targets, hook, changes=changes)
        polls: list[GatePolled] = []

        def seen(event: Event) -> None:
            if isinstance(event, GatePolled):
                polls.append(event)
            hook(event)

        started = time.monotonic()
        try:
            async with asyncio.timeout(_left(deadline)):
                return await self.gate(desired, targets, seen, changes=changes)
        except TimeoutError:
            pass
        if polls:
            proofs = polls[-1].proofs
        else:
            why = f"not polled before --timeout {deadline.seconds:g}s expired"
            proofs = tuple(
                evidence.judge(target_of(svc, None, desired, changes=changes),
                               ReadFailure(service_id=svc.service_id, reason=why),
                               targets[svc.name],
                               [Observation(cluster_id=c, kind=ObservationKind.SILENT,
                                            reason=why) for c in targets[svc.name]])
                for svc in sorted(desired.services, key=lambda s: s.name)
                if svc.name in targets)
        return GateReport(attempts=polls[-1].attempt if polls else 0,
                          waited_seconds=time.monotonic() - started, proofs=proofs,
                          expired=True)

    async def gate(self, desired: DesiredState, targets: Mapping[str, tuple[str, ...]],
                   hook: Hook, *, changes: Sequence[ChangeBase] = ()) -> GateReport:
        """Poll until the judge proves every target converged, or the budget is spent.
        The expected clusters of a service are what the plan saw joined with what the
        prober knows now: the set never shrinks. A service whose rollout the judge finds
        terminal (``ServiceProof.terminal``: the control plane reports it failed or
        mismatched) is not polled again -- no later poll can prove it -- and the gate ends
        as soon as every target is converged or terminal. ``changes``: those applied, so
        the judge also requires what they remove gone (``Kind.expect``)."""
        applying.crash_point("gate")
        policy = desired.settings.policy.convergence
        services = {s.name: s for s in desired.services if s.name in targets}
        started = time.monotonic()
        mesh_clusters = set((await self.prober.resolve()).expected_clusters)
        probe = mesh_clusters.union(*targets.values())
        hook(GateStarted(services=tuple(sorted(targets)), clusters=tuple(sorted(probe)),
                         attempts=policy.attempts, interval=policy.interval_seconds))
        proofs: tuple[ServiceProof, ...] = ()
        #: the judge's last word on each service whose rollout it found terminal
        settled: dict[str, ServiceProof] = {}
        attempt = 0
        for attempt in range(1, policy.attempts + 1):
            polling = {n: s for n, s in services.items() if n not in settled}
            observations, live = await asyncio.gather(
                self.prober.observe_apps([s.app_id for s in polling.values()],
                                         extra_expected=sorted(probe)),
                self._read_services([s.service_id for s in polling.values()]))
            # Each set only grows: what DNS named, and what the service's rollout targets
            # now (a target not probed in this poll is silent in it, never skipped).
            mesh_clusters.update((await self.prober.resolve()).expected_clusters)
            expected = {name: evidence.expected_clusters(
                targets[name], mesh_clusters, _targets(live[svc.service_id]))
                for name, svc in polling.items()}
            probe.update(*expected.values())
            fresh = {name: evidence.judge(target_of(svc, live[svc.service_id], desired,
                                                    changes=changes),
                                          live[svc.service_id], expected[name],
                                          observations.get(svc.app_id, ()))
                     for name, svc in polling.items()}
            settled.update((name, p) for name, p in fresh.items() if p.terminal)
            proofs = tuple(fresh[name] if name in fresh else settled[name]
                           for name in sorted(services))
            hook(GatePolled(attempt=attempt, attempts=policy.attempts, proofs=proofs))
            if all(p.converged or p.terminal for p in proofs):
                break
            if attempt < policy.attempts:
                await asyncio.sleep(policy.interval_seconds)
        return GateReport(attempts=attempt, waited_seconds=time.monotonic() - started,
                          proofs=proofs)

    async def _read_services(self, ids: list[str]) -> dict[str, LiveService | ReadFailure]:
        async def one(service_id: str) -> LiveService | ReadFailure:
            try:
                return parse_service(await self.client.get_service(service_id), [])
            except ControlPlaneError as exc:
                return ReadFailure(service_id=service_id, reason=exc.message)
        values = await asyncio.gather(*(one(i) for i in ids))
        return dict(zip(ids, values, strict=True))


def environment_rules(stage: environments.Selected, made: Plan, desired: DesiredState,
                      upstream: promotion.Upstream | None) -> Plan:
    """``made`` with the environment's promotion and policy blockers, at its own
    snapshot's time (``created_at``): a window that closed since the last plan no longer
    holds the next one."""
    blockers, notes = promotion.promotion_blockers(
        made, stage.environment, upstream, stage.rules.freezes, made.created_at,
        stage.override)
    denied = policies.policy_blockers(made, desired, stage.name, stage.rules.policies,
                                      upstream, stage.environment.soak_seconds,
                                      made.created_at)
    if not blockers and not denied and not notes:
        return made
    return made.model_copy(update={"blockers": made.blockers + blockers + denied,
                                   "notes": made.notes + notes})


async def read_upstream(name: str, root: Path, names: set[str],
                        env: Mapping[str, str]) -> promotion.Upstream:
    """One read of environment ``name`` (at ``root``) for the services ``names``."""
    try:
        desired, provenance = load_consistent(root)
    except EngineError as exc:
        return promotion.Upstream(name=name, error=str(exc).splitlines()[0])
    scoped = desired.model_copy(update={"services": tuple(
        s for s in desired.services if s.name in names)})
    if not scoped.services:
        return promotion.Upstream(name=name)
    try:
        async with Reconciler(root, scoped, overrides=Overrides(), env=env) as reconciler:
            snapshot = await reconciler.observe(scoped)
    except EngineError as exc:
        return promotion.Upstream(name=name, error=str(exc).splitlines()[0])
    read = make_plan(scoped, snapshot, provenance, None)
    facts: dict[str, promotion.UpstreamService] = {}
    for svc in scoped.services:
        live = snapshot.services.get(svc.service_id)
        seen = next((e for e in read.evidence if e.service == svc.name), None)
        facts[svc.name] = promotion.UpstreamService(
            app_id=svc.app_id, egress=target_of(svc, live).egress, live=live,
            expected=seen.expected_clusters if seen else read.expected_clusters,
            observations=seen.observations if seen else snapshot.observations.get(
                svc.app_id, ()),
            pinned=svc.release.digest, tag=svc.release.tag, version=svc.release.version)
    return promotion.Upstream(name=name, services=facts)


def _next_step(exc: ControlPlaneError, connection: Connection,
               values: Mapping[str, Effective] | None = None) -> str:
    """What to do about a control-plane failure, said where it is reported (the client's
    wording is shared with the prober, whose next steps differ): ``shell.connectadvice``,
    given each connection value's source."""
    return connectadvice.next_step(exc, connection, values)


def _targets(state: LiveService | ReadFailure) -> tuple[str, ...]:
    if isinstance(state, LiveService) and state.deployment is not None:
        return state.deployment.target_cluster_ids
    return ()


async def apply_async(
    root: Path,
    *,
    overrides: Overrides,
    env: Mapping[str, str],
    hook: Hook,
    saved: Plan | None = None,
    only: frozenset[str] = frozenset(),
    confirm: Callable[[Plan], bool] | None = None,
    progress: Progress | None = None,
    timeout: float | None = None,
    started: float | None = None,
    on_gate_failure: str = "stop",
    pull: PullTarget | None = None,
    stage: environments.Selected | None = None,
) -> ApplyRun:
    """Load the commit, then one ``Reconciler`` run: observe, plan, bind, send, gate;
    all of it within ``timeout`` seconds when given (``apply --timeout``), counted from
    ``started`` (``time.monotonic()``; the command passes its process's start, so
    loading the interpreter and the HTTP stack counts too) or from now."""
    deadline = None
    if timeout is not None:
        deadline = Deadline(at=(time.monotonic() if started is None else started) + timeout,
                            seconds=timeout)
    desired, provenance = load_consistent(root)
    unknown = sorted(only - {s.name for s in desired.services})
    if unknown:
        raise EngineError(f"--only names no service of this repo: {', '.join(unknown)}",
                          Exit.USAGE)
    async with Reconciler(root, desired, overrides=overrides, env=env,
                          stage=stage) as reconciler:
        # An --only apply proves a part of the commit: it says nothing about the commit.
        notify = None if only else notifier(desired, root, env, reconciler.connection.gateway,
                                            environment=stage.name if stage else None)
        try:
            run = await reconciler.apply(desired, provenance, hook=hook, saved=saved,
                                         only=only, confirm=confirm, progress=progress,
                                         deadline=deadline, notify=notify)
            return await revert_after(reconciler, root, run, on_gate_failure, pull, hook,
                                      progress, notify=notify)
        finally:
            if notify is not None:  # bounded: a receiver that is down costs drainSeconds
                await notify.drain()


async def revert_after(reconciler: Reconciler, root: Path, run: ApplyRun,
                       on_gate_failure: str, pull: PullTarget | None, hook: Hook,
                       progress: Progress | None = None,
                       fence: applying.Fence | None = None,
                       notify: Notifier | None = None) -> ApplyRun:
    """``--on-gate-failure revert`` (apply and watch): when the gate ended on a stated
    failure (``core.reverts.failed``; never a silent cluster), the revert and the
    rollback's apply; the run keeps its own report (the release failed).

    ``fence`` (a sharded watcher): asked for each failed service before anything is
    written -- a service whose shard this member no longer holds is not reverted here
    (its new owner plans it) -- and before each write of the rollback.

    ``notify``: told how the way back ended (``Notifier.way_back``: reverted, the
    rollback's proof, or no revert made), off this path."""
    done, tell = await _revert_after(reconciler, root, run, on_gate_failure, pull, hook,
                                     progress, fence)
    if notify is not None and tell:
        notify.way_back(run.plan, run.report.gate, way_back(done))
    return done


def way_back(run: ApplyRun) -> WayBack:
    """The run's way back as ``core.notifying`` reads it (a revert made, or why none)."""
    done = run.reverted
    failed = tuple(sorted((p.service, p.digest) for p in reverts.failed(run.report.gate).values()))
    if done is None:
        return WayBack(error=run.revert_error, failed=failed)
    rolled = done.rollback
    return WayBack(key=done.key, items=done.items, commit=done.commit,
                   landed=done.pull is None and done.commit is not None,
                   pull_url=done.pull.url if done.pull else None,
                   pull_number=done.pull.number if done.pull else None, why_pr=done.why_pr,
                   rollback=(rolled.plan, rolled.report) if rolled is not None else None,
                   error=run.revert_error, failed=failed)


async def _revert_after(reconciler: Reconciler, root: Path, run: ApplyRun,
                        on_gate_failure: str, pull: PullTarget | None, hook: Hook,
                        progress: Progress | None,
                        fence: applying.Fence | None) -> tuple[ApplyRun, bool]:
    """The way back, and whether it is this run's to tell (not when no revert was asked
    for or needed, nor when every failed service belongs to another member now)."""
    failed = reverts.failed(run.report.gate) if on_gate_failure == "revert" else {}
    if not failed:
        return run, False
    if fence is not None:
        failed, lost = await _still_fenced(run, failed, fence)
        if lost:
            run = dataclasses.replace(run, revert_error="; ".join(lost))
            if not failed:
                return run, False
    for attempt in range(3):
        try:  # issue 20: the way back, re-planned against the branch head
            done = await revert_with(reconciler, root, sorted(failed), failures=failed,
                                     pull=pull, hook=hook, rollback=True, progress=progress,
                                     fence=fence)
        except BranchMoved as exc:
            # Another writer of this checkout (a member of the same group reverting its
            # own shards) landed first: re-plan against the new head, a bounded number
            # of times.
            if attempt == 2:
                return dataclasses.replace(run, revert_error=str(exc)), True
            continue
        except EngineError as exc:
            return dataclasses.replace(run, revert_error=str(exc)), True
        return dataclasses.replace(run, reverted=done), True  # keeps what was left, if any
    raise AssertionError("unreachable")


async def _still_fenced(run: ApplyRun, failed: Mapping[str, ServiceProof],
                        fence: applying.Fence,
                        ) -> tuple[dict[str, ServiceProof], list[str]]:
    """The failed services this member may still revert: each one's sent change asked
    of the fence again (one etcd transaction on its shard's owner key), and why each
    other one is left alone."""
    sent = {r.change.service: r.change for r in run.report.results}
    kept: dict[str, ServiceProof] = {}
    lost: list[str] = []
    for name, proof in failed.items():
        change = sent.get(name)
        if change is None:
            lost.append(f"{name}: no change of it was sent by this member")
            continue
        try:
            await fence(change)
        except applying.Fenced as exc:
            lost.append(f"{name}: {exc}")
            continue
        kept[name] = proof
    return kept, lost


# -- the watcher's steps ------------------------------------------------------------------

@dataclass(frozen=True)
class Loaded:
    """One read of the repo for the watcher: the state (None when invalid), the problems
    as printed, and the git state it was read at."""

    state: DesiredState | None
    problems: tuple[str, ...]
    provenance: Provenance


class WatchSteps:
    """What the watcher does at each moment it chooses (``shell.watching`` owns *when*):
    read the commit, observe, plan, apply -- all sequenced here, like plan and apply.
    Keeps one ``Reconciler`` while the settings stay the same, so the DNS answer and the
    per-cluster tokens survive between resyncs."""

    def __init__(self, root: Path, *, overrides: Overrides, env: Mapping[str, str],
                 only: frozenset[str] = frozenset(),
                 clock: Callable[[], float] = time.time,
                 timeout: float | None = None, applying: bool = False,
                 on_gate_failure: str = "stop", pull: PullTarget | None = None,
                 stage: environments.Selected | None = None,
                 propose: ProposalTarget | None = None) -> None:
        self.root = root
        #: watch --promote-from (issue 19): promotions into ``stage`` proposed as pull
        #: requests after each observation (``propose``)
        self.proposer = Proposer(propose, env) if propose is not None else None
        self._observed: DesiredState | None = None
        #: ms: when a promotion the last plan holds becomes eligible (None: none is held
        #: with a time); the watcher observes again then, not only at its next resync
        self.eligible_at: int | None = None
        self.applying = applying  # watch --apply: a GO plan is not "waiting" for anyone
        #: the notifications of the repo's settings (built with the Reconciler), and what
        #: counts their deliveries (the metrics, when served)
        self.notify: Notifier | None = None
        self.count_notifications: Counter | None = None
        self.on_gate_failure = on_gate_failure  # issue 20: watch --apply --on-gate-failure
        self.pull = pull
        #: the environment this checkout's root is (issue 19); its rules are read again
        #: at every observation, so a freeze committed while watching counts
        self.stage = stage
        self._upstream: promotion.Upstream | None = None
        self.overrides = overrides
        self.env = env
        self.only = only
        self.timeout = timeout  # watch --timeout: bounds each apply as apply --timeout does
        self.clock = clock  # wall-clock seconds: how old a snapshot's observations are
        self.cache = validating.BlobCache()
        self._live: Reconciler | None = None
        self._settings: object = None
        #: the preflight answers read with the last snapshot (at the commit HEAD was at),
        #: asked again at a new commit by ``load``; and that snapshot
        self._greenfield: Greenfield | None = None
        self._snapshot: LiveSnapshot | None = None

    def head(self) -> Provenance:
        try:
            return gitrepo.provenance(self.root)
        except gitrepo.GitError:
            return Provenance()

    def load(self) -> Loaded:
        """Read the commit (the watcher calls this in a worker thread when HEAD or the
        dirty state moved). A plan of the new commit needs its creations' preflights at
        that commit: they are asked again here, against the last snapshot, with a client
        of this thread's own loop (the shared one belongs to the watcher's loop)."""
        try:
            result, provenance = read_commit(self.root, self.cache)
        except EngineError as exc:
            return Loaded(None, (str(exc),), Provenance())
        if result.state is not None and self._live is not None and self._snapshot is not None \
                and absent(result.state, self._snapshot):
            self._greenfield = asyncio.run(self._ask_again(result.state, provenance))
        return Loaded(result.state, tuple(d.render() for d in result.diagnostics), provenance)

    async def _ask_again(self, desired: DesiredState, provenance: Provenance,
                         ) -> Greenfield | None:
        assert self._live is not None and self._snapshot is not None
        try:
            token = token_from_env(self._live.connection, self.env)
        except ConfigError:
            return None  # planned as "not asked": the next resync says why
        async with ControlPlaneClient(self._live.connection, token=token) as client:
            return await ask_preflights(client, [(desired, provenance)], self._snapshot)

    @tracing.watch_cycle
    async def observe(self, desired: DesiredState) -> LiveSnapshot:
        if self._live is None or self._settings != desired.settings:
            await self.close()
            self._live = Reconciler(self.root, desired, overrides=self.overrides, env=self.env,
                                    stage=self.stage)
            self._settings = desired.settings
            self.notify = None if self.only else notifier(
                desired, self.root, self.env, self._live.connection.gateway,
                applying=self.applying, count=self.count_notifications,
                environment=self.stage.name if self.stage is not None else None)
        # Every resync is a new pass: DNS and the clusters' health are asked again (a
        # cluster that appeared, or came back, must be seen); tokens are kept.
        self._live.prober.forget_mesh()
        snapshot = await self._live.observe(desired)
        # Creations are asked about at the commit HEAD is at now; when HEAD moves, ``load``
        # asks again at the new commit (a plan for a commit nobody asked about says so:
        # preflight_not_asked, never a creation planned unchecked).
        provenance = await asyncio.to_thread(self.head)
        self._greenfield = await self._live.preflights([(desired, provenance)], snapshot)
        self._snapshot = snapshot
        self._observed = desired
        if self.stage is not None:
            self.stage = await asyncio.to_thread(environments.refresh, self.stage)
            self._live.stage = self.stage
            self._upstream = await self._live.read_upstream({s.name for s in desired.services})
        return snapshot

    def revert_pending(self, commit: str) -> str | None:
        """The pull request the revert of ``commit``'s failed release waits in, per this
        environment's journal (None: none, or nothing observed yet to find the journal)."""
        if self._observed is None:
            return None
        return revert_pending(state_dir(self._observed, self.root, self.env,
                                        self.stage.name if self.stage is not None else None)
                              / journal_mod.JOURNAL_FILE, commit)

    @tracing.watch_plan
    def plan(self, desired: DesiredState, snapshot: LiveSnapshot,
             provenance: Provenance, *, max_age: float | None = None) -> Plan:
        """The plan from ``snapshot``; with ``max_age`` (seconds; the watcher's is two
        resyncs) every observation older than that is silent first (``core.freshness``)."""
        if max_age is not None:
            snapshot = freshness.expire(
                snapshot, now_ms=int(self.clock() * 1000), max_age_ms=int(max_age * 1000),
                horizon="two resyncs")
        made = make_plan(desired, snapshot, provenance, self._greenfield)
        if self.stage is not None:
            made = environment_rules(self.stage, made, desired, self._upstream)
        made = restrict(made, self.only)
        if self.stage is not None:  # when a promotion held now may go: the watcher wakes
            self.eligible_at = promotion.next_eligible(
                made, self.stage.environment, self._upstream, self.stage.rules.freezes,
                made.created_at, self.stage.override)
        if self.notify is not None:
            self.notify.outcome(made)
        return made

    async def propose(self) -> tuple[Proposal, ...]:
        """``watch --promote-from``: after an observation, each promotion into this
        environment that its rules allow now proposed as a pull request (once per
        environment, service and digest), the others said with when they become
        eligible. Never applies anything; () when not asked to propose."""
        if self.proposer is None or self.stage is None or self._observed is None \
                or self._snapshot is None:
            return ()
        provenance = await asyncio.to_thread(self.head)
        return await asyncio.to_thread(
            self.proposer.run, self.stage, self._observed, self._snapshot, provenance,
            self._greenfield, self._upstream, self.only, int(self.clock() * 1000))

    async def apply(self, hook: Hook) -> ApplyRun:
        """Apply the commit HEAD is at now: read again, observe fresh, judge, gate."""
        desired, provenance = load_consistent(self.root)
        async with Reconciler(self.root, desired, overrides=self.overrides,
                              env=self.env, stage=self.stage) as reconciler:
            run = await reconciler.apply(
                desired, provenance, hook=hook, only=self.only,
                deadline=Deadline.after(self.timeout) if self.timeout is not None else None,
                notify=self.notify)
            return await revert_after(reconciler, self.root, run, self.on_gate_failure,
                                      self.pull, hook, notify=self.notify)

    async def close(self) -> None:
        if self.notify is not None:  # what is still being retried, briefly
            await self.notify.deliveries.drain(min(5.0, self.notify.config.delivery
                                                   .drain_seconds))
        if self._live is not None:
            await self._live.__aexit__()
            self._live = None



# -- sharded watching (issue 22) ----------------------------------------------------------

@dataclass(frozen=True)
class ShardRound:
    """One ownership round of a sharded watcher: what it owns now, what changed, what the
    group looks like, and which shards nobody reconciled for two resyncs. ``error``: etcd
    could not be reached (or the lease was lost); nothing is written meanwhile."""

    owned: frozenset[int] = frozenset()
    taken: tuple[int, ...] = ()
    released: tuple[int, ...] = ()
    lost: tuple[int, ...] = ()
    members: tuple[str, ...] = ()
    owners: tuple[tuple[int, str], ...] = ()
    ages: tuple[tuple[int, float | None], ...] = ()  # shard -> seconds since its last finish
    late: tuple[sharding.ShardAge, ...] = ()
    error: str | None = None
    fatal: bool = False  # the group refused this member (another shard count): stop


class ShardedWatchSteps(WatchSteps):
    """``WatchSteps`` for one member of a group of watchers sharing a desired-state root
    through etcd (``watch --coordinate``): the ownership round (renew the lease, read the
    group, decide with ``core.sharding``, take and release), the plan and apply narrowed
    to the owned shards' services, the fence before each write, and the per-shard status
    published after each finished reconcile. The etcd calls are ``shell.coordination``;
    when to run a round is ``shell.sharded``."""

    def __init__(self, root: Path, *, overrides: Overrides, env: Mapping[str, str],
                 target: str, shards: int, timing: sharding.LeaseTiming, resync: float,
                 member: str | None = None, timeout: float | None = None,
                 clock: Callable[[], float] = time.time, applying: bool = False,
                 on_gate_failure: str = "stop", pull: PullTarget | None = None,
                 stage: environments.Selected | None = None) -> None:
        # Everything ``WatchSteps`` takes but ``only`` (the shards decide who plans what):
        # the environment's rules are applied to each member's narrowed plan, so a member's
        # plan carries the blockers of its own services only.
        super().__init__(root, overrides=overrides, env=env, timeout=timeout, clock=clock,
                         applying=applying, on_gate_failure=on_gate_failure, pull=pull,
                         stage=stage)
        from reconciler.shell import coordination  # loads gRPC only when coordinating

        self.coordination = coordination
        self.target = coordination.parse_target(target)
        self.wanted_shards = shards
        self.count = shards
        self.timing = timing
        self.resync = resync
        self.member = member or f"{os.uname().nodename}-{os.getpid()}-{os.urandom(3).hex()}"
        self.group: str | None = self.target.group
        self.etcd: coordination.Etcd | None = None
        self.lease: int | None = None
        self.held: dict[int, int] = {}  # shard -> the owner key's revision when taken
        self.renewed_at: float | None = None  # monotonic time of the last renewal
        self.since = clock()  # unreconciled shards count from here at the latest
        self.fresh: set[int] = set()  # taken since the last plan: resync now
        self.planned: frozenset[int] = frozenset()  # the shards the last plan covered
        self.observed: frozenset[int] = frozenset()  # the shards the last snapshot read
        self.ids: dict[str, str] = {}  # name -> serviceId of the last desired state
        self.dropped: set[int] = set()  # dropped by a fence or a deadline, not yet reported
        # The coordination thread (``start``): its loop, the rounds' results not yet read
        # by the watcher, and a lock for what both threads touch (``held`` and the sets).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._rounds: concurrent.futures.Future[None] | None = None
        self._lock = threading.RLock()
        self._results: list[ShardRound] = []
        self._last: ShardRound | None = None
        self._ready = asyncio.Event()

    # -- joining and the ownership round ------------------------------------------------

    def _group_of(self, desired: DesiredState) -> str:
        """The URL's group, else one derived from the control plane and where the root
        sits in its repo: every clone of the same root, on any machine, joins one group."""
        if self.group is not None:
            return self.group
        url = connect(desired, self.root, self.overrides).control_plane_url
        try:
            top = gitrepo.toplevel(self.root)
            where = str(self.root.resolve().relative_to(top.resolve())) if top else "."
        except (gitrepo.GitError, ValueError):
            where = "."
        return "r-" + hashlib.sha256(f"{url}|{where}".encode()).hexdigest()[:16]

    async def _join(self) -> coordination_types.Etcd:
        if self.etcd is None:
            if self.group is None:  # named by ``start`` or ``observe``, on their thread
                raise self.coordination.CoordinationError(
                    "no valid desired state to name the group by yet")
            self.etcd = self.coordination.Etcd(
                self.target, self.group, self.member,
                timeout=max(1.0, min(3.0, self.timing.retry)))
        if self.lease is None:
            self.count = await self.etcd.shard_count(self.wanted_shards)
            if self.count != self.wanted_shards:
                raise EngineError(
                    f"the group {self.group} at {self.target.describe()} has "
                    f"{self.count} shards, this watcher was started with "
                    f"{self.wanted_shards}: start it with --shards {self.count} (the count "
                    "is fixed for the life of a group)", Exit.USAGE)
            self.lease = await self.etcd.grant(self.timing.ttl)
            self.renewed_at = time.monotonic()
            await self.etcd.register(self.lease, {"member": self.member, "pid": os.getpid(),
                                                  "host": os.uname().nodename,
                                                  "since": self.clock()})
        return self.etcd

    def _drop(self) -> tuple[int, ...]:
        """Forget every shard (the next round reports them lost)."""
        with self._lock:
            lost = tuple(sorted(self.held))
            self.dropped.update(lost)
            self.held = {}
            self.fresh.clear()
        return lost

    def _held_now(self) -> dict[int, int]:
        with self._lock:
            return dict(self.held)

    # -- the coordination thread ------------------------------------------------------
    #
    # The lease must be renewed while the watcher plans: a plan of thousands of services
    # holds the watcher's event loop for seconds (more on a loaded machine), which would
    # let the lease expire under a healthy member. So every etcd call and the round's
    # timer run on a thread of their own, with their own event loop; the watcher's loop
    # only reads the rounds' results and asks the fence (both through that loop).

    def start(self) -> None:
        """Name the group (from the desired state, on the caller's thread) and start
        the rounds on the coordination thread."""
        if self._loop is not None:
            return
        if self.group is None:
            loaded = self.load()
            if loaded.state is not None:
                self.group = self._group_of(loaded.state)
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="coordination",
                                        daemon=True)
        self._thread.start()
        self._rounds = asyncio.run_coroutine_threadsafe(self._run_rounds(), loop)

    async def _on_loop(self, coro: Coroutine[object, object, T]) -> T:
        """Run ``coro`` on the coordination loop and wait for it from this one."""
        assert self._loop is not None
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    async def _run_rounds(self) -> None:
        while True:
            try:
                got = await self._round()
            except EngineError as exc:  # refused to join (another shard count): final
                got = ShardRound(error=str(exc), fatal=True)
            with self._lock:
                self._results.append(got)
            self._ready.set()
            if got.fatal:
                return
            await asyncio.sleep(self.timing.retry)

    async def round(self) -> ShardRound:
        """The rounds finished since the last call, merged (the first call waits for the
        first round): what is owned now, and every shard taken, released or lost since."""
        if self._loop is None:
            self.start()
        await self._on_loop(self._ready_wait())
        with self._lock:
            results, self._results = self._results, []
            last = results[-1] if results else self._last
            self._last = last
        if last is None:
            return ShardRound(error="no round yet")
        if not results:
            return dataclasses.replace(last, taken=(), released=(), lost=())
        return dataclasses.replace(
            last, taken=tuple(s for r in results for s in r.taken),
            released=tuple(s for r in results for s in r.released),
            lost=tuple(sorted({s for r in results for s in r.lost})))

    async def _ready_wait(self) -> None:
        await self._ready.wait()

    async def _round(self) -> ShardRound:
        """Renew, read the group, decide, take and release, and read every shard's age.
        A member that cannot renew for ``renew_deadline`` seconds drops its shards (one
        retry before the lease itself may expire and another member take them)."""
        unreachable = self.coordination.CoordinationError
        try:
            lost: tuple[int, ...] = ()
            if self.lease is not None and self.etcd is not None:
                left = await self.etcd.keepalive(self.lease)
                if left <= 0:  # expired while we were paused or cut off: start again
                    lost = self._drop()
                    self.lease = None
                else:
                    self.renewed_at = time.monotonic()
            etcd = await self._join()
            assert self.lease is not None
            members = await etcd.members()
            owners = await etcd.owners()
            # What etcd says we hold (this lease's keys); a shard we thought ours and is
            # not is lost (taken over after our lease expired).
            ours = {s: o.revision for s, o in owners.items()
                    if o.member == self.member and o.lease == self.lease}
            with self._lock:
                lost += tuple(s for s in self.held if s not in ours)
                lost += tuple(s for s in self.dropped if s not in ours)
                self.dropped.clear()
                self.held = ours
            decision = sharding.decide(self.member, sorted(members),
                                       {s: o.member for s, o in owners.items()}, self.count)
            released = []
            for shard in decision.release:
                with self._lock:  # no write is fenced on it from here on
                    revision = self.held.pop(shard)
                if await etcd.release(shard, revision):
                    released.append(shard)
                owners.pop(shard, None)
            taken = []
            for shard in decision.take:
                got = await etcd.take(shard, self.lease)
                if got is not None:
                    with self._lock:
                        self.held[shard] = got
                        self.fresh.add(shard)
                    taken.append(shard)
            owner_of = {s: o.member for s, o in owners.items()}
            owner_of.update({s: self.member for s in self._held_now()})
            statuses = await etcd.statuses()
        except unreachable as exc:
            if self.held and (self.renewed_at is None or time.monotonic() - self.renewed_at
                              >= self.timing.renew_deadline):
                self._drop()
            with self._lock:
                lost, self.dropped = tuple(sorted(self.dropped)), set()
            return ShardRound(owned=frozenset(self._held_now()), lost=lost, error=str(exc))
        finished = {s: float(v["finishedAt"]) for s, v in statuses.items()
                    if isinstance(v.get("finishedAt"), int | float)}
        now = self.clock()
        late = sharding.unreconciled(self.count, finished, owner_of, now=now,
                                     since=self.since, interval=self.resync)
        return ShardRound(
            owned=frozenset(self._held_now()), taken=tuple(taken), released=tuple(released),
            lost=tuple(sorted(set(lost))), members=tuple(sorted(members)),
            owners=tuple(sorted(owner_of.items())),
            ages=tuple((s, now - finished[s] if s in finished else None)
                       for s in range(self.count)),
            late=tuple(late))

    async def leave(self) -> None:
        """A clean stop: revoke the lease, so the others take the shards at once; then
        stop the coordination thread."""
        if self._loop is None:
            return
        if self._rounds is not None:
            self._rounds.cancel()
        with contextlib.suppress(Exception):  # leaving must not fail the stop
            await self._on_loop(self._leave())
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 10)
        self._loop = None

    async def _leave(self) -> None:
        with self._lock:
            self.held = {}
        if self.etcd is None:
            return
        with contextlib.suppress(self.coordination.CoordinationError):
            if self.lease is not None:
                await self.etcd.revoke(self.lease)
        self.lease = None
        await self.etcd.close()

    # -- the owned part of the fleet ---------------------------------------------------

    def owned_names(self, desired: DesiredState) -> frozenset[str]:
        """The services of the shards this member holds now (a name no service has when it
        holds none: ``restrict`` keeps everything for an empty set)."""
        self.ids = {s.name: s.service_id for s in desired.services}
        names = sharding.services_in(self._held_now(), self.ids, self.count)
        return names or NOTHING

    def _own_part(self, desired: DesiredState) -> DesiredState:
        """``desired`` narrowed to the services of the shards held now: the scope of every
        plan this member's apply makes, its revert's and rollback's included."""
        return sharding.narrow(desired, self.owned_names(desired))

    def _names(self, desired: DesiredState, shards: frozenset[int]) -> frozenset[str]:
        self.ids = {s.name: s.service_id for s in desired.services}
        return sharding.services_in(shards, self.ids, self.count)

    async def observe(self, desired: DesiredState) -> LiveSnapshot:
        """Read only the owned shards' services (the control plane's releases and the
        clusters' apps for them), not the fleet."""
        if self.group is None:  # the first valid desired state names the group
            self.group = self._group_of(desired)
        with self._lock:
            self.fresh.clear()
            self.observed = frozenset(self.held)
        return await super().observe(
            sharding.narrow(desired, self._names(desired, self.observed)))

    async def _ask_again(self, desired: DesiredState, provenance: Provenance,
                         ) -> Greenfield | None:
        narrowed = sharding.narrow(desired, self._names(desired, self.observed))
        return await super()._ask_again(narrowed, provenance)

    def plan(self, desired: DesiredState, snapshot: LiveSnapshot,
             provenance: Provenance, *, max_age: float | None = None) -> Plan:
        """The plan of the shards both observed and still held (a shard taken since is
        planned at the resync its taking triggers)."""
        self.planned = self.observed & frozenset(self._held_now())
        names = self._names(desired, self.planned)
        self.only = names or NOTHING
        return super().plan(sharding.narrow(desired, names), snapshot, provenance,
                            max_age=max_age)

    async def apply(self, hook: Hook) -> ApplyRun:
        """Apply the owned services at the commit HEAD is at, each write fenced, under
        the environment's rules; with ``--on-gate-failure revert``, revert the failed
        services whose shards this member still holds (asked of the fence first), and
        fence the rollback's writes too. Every plan made here, the revert's and the
        rollback's included, reads only the owned shards' services (the scope)."""
        desired, provenance = load_consistent(self.root)
        only = self.owned_names(desired)
        desired = sharding.narrow(desired, only)
        async with Reconciler(self.root, desired, overrides=self.overrides,
                              env=self.env, stage=self.stage,
                              scope=self._own_part) as reconciler:
            run = await reconciler.apply(
                desired, provenance, hook=hook, only=only, fence=self.fence,
                deadline=Deadline.after(self.timeout) if self.timeout is not None else None,
                notify=self.notify)
            return await revert_after(reconciler, self.root, run, self.on_gate_failure,
                                      self.pull, hook, fence=self.fence, notify=self.notify)

    async def fence(self, change: Change) -> dict[str, object]:
        """Just before a write: this member still holds the change's shard, checked in one
        etcd transaction on the owner key's revision; else ``applying.Fenced`` (and the
        shard is dropped). The token goes into the journal with the intent."""
        if self._loop is None:
            raise applying.Fenced("this watcher has not joined its group")
        return await self._on_loop(self._fence(change))

    async def _fence(self, change: Change) -> dict[str, object]:
        shard = sharding.shard_of(change.service_id, self.count)
        revision = self._held_now().get(shard)
        if revision is None or self.etcd is None or self.lease is None:
            raise applying.Fenced(f"shard {shard} of {change.service} is not ours")
        if self.renewed_at is None or \
                time.monotonic() - self.renewed_at >= self.timing.renew_deadline:
            self._drop()
            raise applying.Fenced(f"our lease was not renewed within "
                                  f"{self.timing.renew_deadline:g}s; shard {shard} dropped")
        try:
            checked = await self.etcd.fence(shard, revision)
        except self.coordination.CoordinationError as exc:
            raise applying.Fenced(f"etcd unreachable, cannot prove shard {shard} is "
                                  f"ours ({safe(exc, 200)})") from exc
        if checked is None:
            with self._lock:
                self.held.pop(shard, None)
                self.dropped.add(shard)
            raise applying.Fenced(f"shard {shard} of {change.service} is no longer ours "
                                  "(taken over, or our lease expired); dropped")
        return {"member": self.member, "group": self.group, "shard": shard,
                "ownerRevision": revision, "lease": self.lease, "checkedAt": checked}

    async def publish(self, commit: str | None) -> None:
        """After a finished reconcile: each shard it covered and still holds, now."""
        if self._loop is not None:
            await self._on_loop(self._publish(commit, self.planned))

    async def _publish(self, commit: str | None, planned: frozenset[int]) -> None:
        if self.etcd is None or self.lease is None:
            return
        now = self.clock()
        shards = {s: (rev, {"owner": self.member, "finishedAt": now, "commit": commit,
                            "lease": self.lease, "ownerRevision": rev})
                  for s, rev in self._held_now().items() if s in planned}
        with contextlib.suppress(self.coordination.CoordinationError):
            await self.etcd.publish(shards)


@dataclass(frozen=True)
class ShardReport:
    """``reconcile watch-status --shards``: the group as etcd holds it now."""

    group: str
    target: str
    count: int
    members: tuple[str, ...]
    #: shard, owner (None: nobody), seconds since its last finished reconcile (None:
    #: never), the commit it reconciled
    rows: tuple[tuple[int, str | None, float | None, str | None], ...]
    late: tuple[sharding.ShardAge, ...]

    @property
    def healthy(self) -> bool:
        return not self.late and all(owner is not None for _, owner, _, _ in self.rows)


async def shard_report(root: Path, *, overrides: Overrides, env: Mapping[str, str],
                       target: str, resync: float) -> ShardReport:
    """Read the group (members, owners, each shard's last finished reconcile) without
    joining it, and judge which shards are late with ``core.sharding``."""
    steps = ShardedWatchSteps(root, overrides=overrides, env=env, target=target, shards=1,
                              timing=sharding.LeaseTiming(), resync=resync,
                              member="status-reader")
    loaded = steps.load()
    if loaded.state is None:
        raise EngineError(f"{root}: the desired state is invalid, so its group cannot be "
                          "named", Exit.ERROR)
    group = steps._group_of(loaded.state)
    etcd = steps.coordination.Etcd(steps.target, group, "status-reader")
    try:
        count = await etcd.configured()
        if count is None:
            raise EngineError(f"no group {group} at {steps.target.describe()}: no watcher "
                              "of this root ever joined it", Exit.ERROR)
        members = await etcd.members()
        owners = {s: o.member for s, o in (await etcd.owners()).items()}
        statuses = await etcd.statuses()
    except steps.coordination.CoordinationError as exc:
        raise EngineError(str(exc)) from exc
    finally:
        await etcd.close()
    now = time.time()
    finished = {s: float(v["finishedAt"]) for s, v in statuses.items()
                if isinstance(v.get("finishedAt"), int | float)}
    starts = [float(m["since"]) for m in members.values()
              if isinstance(m.get("since"), int | float)]
    late = sharding.unreconciled(count, finished, owners, now=now,
                                 since=min(starts) if starts else 0.0, interval=resync)
    rows = tuple((s, owners.get(s), now - finished[s] if s in finished else None,
                  str(statuses[s].get("commit")) if s in statuses else None)
                 for s in range(count))
    return ShardReport(group, steps.target.describe(), count, tuple(sorted(members)),
                       rows, tuple(late))


#: ``restrict`` keeps the whole plan for an empty selection: a member holding no shard
#: restricts to a name no service can have (names are identifiers, never empty).
NOTHING = frozenset({""})

# -- pin ----------------------------------------------------------------------------------

#: The exit code of each refusal of ``reconcile pin`` (docs/pin.md).
PIN_REFUSAL_EXIT = {
    pin_rules.Refusal.UNOBSERVED: Exit.PIN_UNOBSERVED,
    pin_rules.Refusal.AMBIGUOUS: Exit.PIN_AMBIGUOUS,
    pin_rules.Refusal.MOVED: Exit.PIN_MOVED,
    pin_rules.Refusal.ELSEWHERE: Exit.ERROR,
    pin_rules.Refusal.UNUSABLE: Exit.ERROR,
    pin_rules.Refusal.VERSION: Exit.ERROR,
}


@dataclass(frozen=True)
class PinRun:
    """What ``reconcile pin`` did to one service's file. ``before``/``after`` are the file's
    bytes (equal when it already pinned this); ``problems``: what the rewritten document
    fails (evidence still bound to the old digest); ``preview``: the plan for that service
    over the working tree as if it were committed, or why there is none."""

    service: str
    path: str
    pinned: pin_rules.Pinned
    pin: pin_rules.Pin
    before: bytes
    after: bytes
    written: bool
    problems: tuple[Diagnostic, ...] = ()
    stale_comments: tuple[int, ...] = ()
    preview: Plan | None = None
    preview_error: str | None = None


@dataclass(frozen=True)
class PinCheck:
    """``pin --check`` for one service: a ``Lag`` (lagging or current), a refusal (the
    newest is a tie, or live data is not canonical), a ``ReadFailure`` (the control plane
    has no such service), or None (it observed no tagged release)."""

    service: str
    outcome: pin_rules.Lag | pin_rules.Refused | ReadFailure | None


def load_worktree(root: Path) -> DesiredState:
    """The desired state as the working tree holds it (``pin`` edits the working tree),
    refused with every problem when invalid."""
    result = validating.load_repo(root)
    if result.state is None:
        raise EngineError(f"{root}: the desired state in the working tree is invalid "
                          f"({len(result.diagnostics)} problem(s)); fix it first "
                          "(reconcile validate)", Exit.ERROR, result.diagnostics)
    return result.state


def pin(root: Path, service: str, tag: str | None, *, write: bool, allow_moved: bool,
        preview: bool, overrides: Overrides, env: Mapping[str, str] | None = None,
        progress: Progress | None = None,
        stage: environments.Selected | None = None) -> PinRun:
    """Read the working tree, read the service's releases, resolve (``core.pinning``),
    rewrite its file (``shell.pinning``; only when ``write``), then plan that service --
    in an environment of a pipeline (``stage``) with its promotion rules, as ``plan
    --env`` would plan the commit (a pin before the soak is over is NO-GO there)."""
    env = os.environ if env is None else env
    desired = load_worktree(root)
    svc = _declared(desired, service)
    pinned = _pinned(svc)
    try:
        releases = asyncio.run(_releases(desired, root, overrides, env, (svc,)))[svc.name]
    except EngineError as exc:
        raise EngineError(f"{exc}; nothing written", exc.code, exc.diagnostics) from exc
    if isinstance(releases, ReadFailure):
        raise EngineError(f"{service}: the control plane has no service {svc.service_id} "
                          f"({safe(releases.reason)}): pin reads the releases it observed "
                          "for an existing service; a service still to be created is pinned "
                          "by hand")
    chosen = pin_rules.resolve(pinned, releases, tag, allow_moved=allow_moved)
    if isinstance(chosen, pin_rules.Refused):
        raise EngineError(chosen.message + "; nothing written", PIN_REFUSAL_EXIT[chosen.refusal])
    rel = desired.sources[f"Service/{service}"].path
    try:
        file = pin_files.read(root, rel)
        after = file.data if not chosen.changes(pinned) else pin_files.rewrite(
            file.data, rel, service,
            pin_files.Values(digest=chosen.digest, tag=chosen.tag, version=chosen.version))
        model, problems = pin_files.candidate(rel, after, service)
        if write and after != file.data:
            pin_files.write(file, after)
    except pin_files.PinFileError as exc:
        raise EngineError(str(exc)) from exc
    # Comments quoting the old tag or digest are left as written: say where they are.
    old = [pinned.digest] if pinned.digest != chosen.digest else []
    old += [pinned.tag] if pinned.tag is not None and pinned.tag != chosen.tag else []
    run = PinRun(service=service, path=rel, pinned=pinned, pin=chosen, before=file.data,
                 after=after, written=write and after != file.data, problems=problems,
                 stale_comments=tuple(pin_files.comment_mentions(after, old)))
    if not preview or model is None:
        return run
    # The working tree with this pin, limited to the service, planned as `plan` plans a
    # commit: no commit and not dirty, so the preview shows what the commit would do.
    scoped = desired.model_copy(update={"services": (model,)})
    provenance = Provenance(path=str(root.resolve()))

    async def planned() -> Plan:
        async with Reconciler(root, scoped, overrides=overrides, env=env,
                              stage=stage) as reconciler:
            made, _ = await reconciler.plan(scoped, provenance, progress)
            return made

    try:
        made = asyncio.run(planned())
    except EngineError as exc:
        return dataclasses.replace(run, preview_error=str(exc))
    return dataclasses.replace(run, preview=restrict(made, frozenset({service})))


def check_pins(root: Path, service: str | None, *, overrides: Overrides,
               env: Mapping[str, str] | None = None) -> tuple[PinCheck, ...]:
    """``pin --check``: every service of the working tree (or ``service``) against the
    newest release the control plane observed for it. Writes nothing."""
    env = os.environ if env is None else env
    desired = load_worktree(root)
    services = desired.services if service is None else (_declared(desired, service),)
    releases = asyncio.run(_releases(desired, root, overrides, env, services))
    out = []
    for svc in sorted(services, key=lambda s: s.name):
        found = releases[svc.name]
        outcome = found if isinstance(found, ReadFailure) else pin_rules.lag(_pinned(svc), found)
        out.append(PinCheck(svc.name, outcome))
    return tuple(out)


def _declared(desired: DesiredState, service: str) -> Service:
    svc = desired.service_by_name(service)
    if svc is None:
        names = sorted(s.name for s in desired.services)
        raise EngineError(f"no service named {safe(service, 100)} in the working tree "
                          f"(services: {', '.join(names) or 'none'})", Exit.USAGE)
    return svc


def _pinned(svc: Service) -> pin_rules.Pinned:
    release = svc.release
    return pin_rules.Pinned(service=svc.name, registry_host=release.registry_host,
                            repository=release.repository, digest=release.digest,
                            tag=release.tag, version=release.version)


async def _releases(desired: DesiredState, root: Path, overrides: Overrides,
                    env: Mapping[str, str], services: tuple[Service, ...],
                    ) -> dict[str, tuple[ImageRelease, ...] | ReadFailure]:
    """Each service's observed releases, read as a snapshot reads them (``fleet.read``: in
    pages where the control plane offers them); a service the control plane does not have
    is a ``ReadFailure``; any other failure ends the run (unknown is not "no release")."""
    connection = connect(desired, root, overrides)
    try:
        client = ControlPlaneClient(connection, token=token_from_env(connection, env))
    except ConfigError as exc:
        raise EngineError(str(exc)) from exc
    try:
        found = await fleet.read(client, [s.service_id for s in services], NullProgress())
    except ControlPlaneError as exc:
        raise EngineError(f"control plane {connection.control_plane_url}: {exc}",
                          hint=_next_step(exc, connection, Connection.explain(
                              desired.settings, repo_root=root, overrides=overrides).values)
                          ) from exc
    finally:
        await client.aclose()
    out: dict[str, tuple[ImageRelease, ...] | ReadFailure] = {}
    for svc in services:
        state = found.services[svc.service_id]
        if isinstance(state, ReadFailure) and state.code != ControlPlaneCode.SERVICE_NOT_FOUND:
            raise EngineError(f"control plane {connection.control_plane_url}: "
                              f"{svc.service_id}: {safe(state.reason)}")
        out[svc.name] = state.releases if isinstance(state, LiveService) else state
    return out


# -- the pull-request comment ---------------------------------------------------------------

#: The comment bodies, given our comments there now and a size limit (renders, sends nothing).
Bodies = Callable[[Sequence[Owned], int], list[str]]


@dataclass(frozen=True)
class CommentRun:
    """What ``sync_comment`` left on the pull request."""

    parts: int
    url: str  # the first part's, "" when GitHub named none


def comment_ownership(client: CommentsClient | None, author: str | None,
                      ) -> tuple[Callable[[Comment], bool], str]:
    """Which comments count as ours, and how that was decided: ``--author``, else the
    token's login, else (an installation token, which ``GET /user`` refuses) any bot."""
    token = client is not None and client.authenticated
    if author:
        wanted = author.lower()
        return (lambda c: c.author.lower() == wanted), f"comments by {author}"
    login = client.identity() if client is not None and token else None
    if login:
        mine = login.lower()
        return (lambda c: c.author.lower() == mine), f"comments by {login}"
    if token:
        return (lambda c: c.author_is_bot), "comments by a bot account (installation token)"
    return (lambda c: True), "comments by anyone (no token to tell whose)"


def comment_listing(client: CommentsClient, pr: int, marker_key: str, author: str | None,
                    ) -> tuple[list[Owned], list[Comment], str]:
    """Our parts for the key now, the marker comments by others, and whose count as ours."""
    is_ours, whose = comment_ownership(client, author)
    ours, foreign = comments.owned(client.list_comments(pr), marker_key, is_ours)
    return ours, foreign, whose


def sync_comment(client: CommentsClient, pr: int, marker_key: str, bodies: Bodies,
                 author: str | None, *, limit: int, say: Callable[[str], None],
                 warn: Callable[[str], None]) -> CommentRun:
    """Make the key's comment set on ``pr`` exactly ``bodies``: edit in place, post what
    is new, delete what is left over; after posting, re-list and sweep the copies a
    concurrent run made (``core.comments``). A part GitHub finds too long (it counts
    differently) is split smaller and the whole set written again, at most four times."""
    from reconciler.shell.github import GitHubError

    is_ours, _ = comment_ownership(client, author)
    for attempt in range(4):
        try:
            return _write_comment(client, pr, marker_key, bodies, limit, is_ours, say, warn)
        except GitHubError as exc:
            if not exc.body_too_long or attempt == 3:
                if exc.body_too_long:
                    raise GitHubError(f"{exc} (a part was up to {limit:,} characters;"
                                      " GitHub would not take it)", exc.status) from None
                raise
            limit = int(limit * 0.7)  # GitHub counted more than we did: split smaller
            warn(f"github: a part was too long for GitHub; splitting within {limit:,}")
    raise AssertionError("unreachable")  # pragma: no cover


def _write_comment(client: CommentsClient, pr: int, marker_key: str, make: Bodies, limit: int,
                   is_ours: Callable[[Comment], bool], say: Callable[[str], None],
                   warn: Callable[[str], None]) -> CommentRun:
    from reconciler.shell.github import GitHubError

    ours, foreign = comments.owned(client.list_comments(pr), marker_key, is_ours)
    bodies = make(ours, limit)
    if foreign:
        warn(f"note: {len(foreign)} comment(s) carry this marker but are not ours; "
             "left alone")
    steps = comments.plan_sync(ours, bodies)
    urls = {item.comment.id: item.comment.url for item in ours}
    posted = False
    first_url = ""
    for step in steps:
        if step.verb == "keep":
            first_url = first_url or urls.get(step.comment_id or 0, "")
            say(f"unchanged part {step.part}/{step.total}: comment {step.comment_id}")
        elif step.verb == "edit":
            assert step.comment_id is not None
            try:
                reply = client.update(step.comment_id, step.body)
                say(f"edited part {step.part}/{step.total}: comment {reply.id}")
            except GitHubError as exc:
                if exc.status != 404:
                    raise
                reply = client.create(pr, step.body)  # deleted meanwhile (a concurrent sweep)
                posted = True
                say(f"posted part {step.part}/{step.total}: comment {reply.id}")
            first_url = first_url or reply.url
        elif step.verb == "post":
            reply = client.create(pr, step.body)
            posted = True
            first_url = first_url or reply.url
            say(f"posted part {step.part}/{step.total}: comment {reply.id}")
    for step in steps:
        if step.verb == "delete" and step.comment_id is not None:
            client.delete(step.comment_id)
            say(f"deleted comment {step.comment_id} ({step.why})")
    if posted:
        ours_now, _ = comments.owned(client.list_comments(pr), marker_key, is_ours)
        for step in comments.sweep_steps(ours_now, len(bodies)):
            if step.comment_id is not None and client.delete(step.comment_id):
                say(f"deleted comment {step.comment_id} ({step.why})")
    return CommentRun(parts=len(bodies), url=first_url)


# -- issue 20: the way back from a failed release -------------------------------------------

@dataclass(frozen=True)
class PullTarget:
    """Where ``--pr`` opens the pull request (GitHub, as ``reconcile comment`` reaches it)
    and which git remote receives the branch. ``requested``: ``--pr`` was given (else a
    pull request is opened only when the revert must not land on the branch)."""

    api_url: str
    repo: str | None
    token: str | None
    remote: str = "origin"
    requested: bool = False


@dataclass(frozen=True)
class RevertRun:
    """One revert: its key, the services, the commit (on the branch, or on the pull
    request's branch), whether it was found already made (a rerun, a racing watcher), the
    pull request and why one was opened, and the rollback's apply when one was run."""

    key: str
    items: tuple[reverts.Item, ...]
    commit: str | None
    already: bool = False
    pull: PullRequest | None = None
    why_pr: str | None = None
    rollback: ApplyRun | None = None
    #: how a committed revert landed (the branch, whether GitHub was asked about its
    #: protection and what it said, the upstream it was pushed to)
    how: str | None = None


def revert(root: Path, services: Sequence[str], *, overrides: Overrides,
           env: Mapping[str, str], pull: PullTarget | None = None,
           progress: Progress | None = None) -> RevertRun:
    """``reconcile revert``: the pinned release of each service, which the judge does not
    prove, back to its last proven release, with a hold on the failed one; committed, or
    proposed as a pull request. Does not apply (``reconcile apply`` rolls back)."""
    desired, _ = load_consistent(root)

    async def run() -> RevertRun:
        async with Reconciler(root, desired, overrides=overrides, env=env) as reconciler:
            return await revert_with(reconciler, root, services, failures=None, pull=pull,
                                     hook=None, rollback=False, progress=progress)

    return asyncio.run(run())


async def revert_with(reconciler: Reconciler, root: Path, services: Sequence[str], *,
                      failures: Mapping[str, ServiceProof] | None, pull: PullTarget | None,
                      hook: Hook | None, rollback: bool,
                      progress: Progress | None = None,
                      fence: applying.Fence | None = None) -> RevertRun:
    """The revert, in order: read the branch head (the failed apply's pin may have been
    replaced there since: then a pull request, never an overwrite); the judge's word on
    each service (``failures``: the gate's, else a fresh plan's); the last proven release
    (``core.lastproven``: journal ∧ control plane); the key; a commit already carrying it
    ends here; else the commit (pin splice + hold), landed by fast-forward or proposed;
    then, when ``rollback``, the apply of the reverted commit (the control plane's CAS
    rollback with its idempotency key) and its gate, each write asked of ``fence`` (a
    sharded watcher's) first."""
    desired, provenance = load_consistent(root)
    if provenance.commit is None or provenance.dirty:
        raise EngineError(f"refusing to revert: {root} has no commit or has uncommitted "
                          "changes; nothing written", Exit.REFUSED_COMMIT)
    head = provenance.commit
    made, snapshot = await reconciler.plan(desired, provenance, progress)
    proofs = {p.service: p for p in made.proofs}
    path = state_dir(desired, root, reconciler.env, reconciler.stage.name
                     if reconciler.stage is not None else None) / "journal.jsonl"
    try:
        facts = journal_mod.proven_facts(path, on_torn=lambda _torn: None)
    except JournalError as exc:
        raise EngineError(f"{exc}; nothing written") from exc
    items: list[reverts.Item] = []
    files: dict[str, bytes | None] = {}
    newer: dict[str, str] = {}
    already: list[tuple[str, str]] = []
    since_ms = 0
    for name in services:
        svc = _declared(desired, name)
        rel = desired.sources[f"Service/{name}"].path
        live = snapshot.services.get(svc.service_id)
        if failures is not None:
            proof: ServiceProof | None = failures[name]
            assert proof is not None
            failed = proof.digest
        else:
            touched = revert_git.last_touch(root, rel)
            if touched is not None and f"\n{reverts.TRAILER}: " in "\n" + touched[1]:
                already.append((name, touched[0]))
                continue
            proof, failed = proofs.get(name), svc.release.digest
            if proof is not None and proof.converged:
                raise EngineError(f"{name}: the judge proves its pinned release {failed} "
                                  "converged on every expected cluster: nothing to revert; "
                                  "nothing written", Exit.ERROR)
        if svc.release.digest != failed:
            newer[name] = (f"{rel} now pins {svc.release.digest} (commit {head[:12]}: "
                           f"{safe(revert_git.subject_of(root, head), 200)})")
        held = {h.digest for h in desired.holds if h.service == name}
        found = lastproven.last_proven(name, failed, facts, live, held)
        if isinstance(found, lastproven.NotProven):
            raise EngineError(f"{found.reason}; nothing written", Exit.ERROR)
        pinned = _pinned(svc)
        chosen = pin_rules.resolve(pinned, [found.release],
                                   pin_rules.tag_of(found.release, pinned)) \
            if found.release.tags else None
        if not isinstance(chosen, pin_rules.Pin):
            why = chosen.message if chosen is not None else "the release carries no tag"
            raise EngineError(f"{name}: cannot pin {found.digest} back: {why}; nothing written",
                              Exit.ERROR)
        failed_release = live.release_by_digest(failed) if isinstance(live, LiveService) \
            else None
        if isinstance(live, LiveService) and live.deployment is not None \
                and live.current_digest == failed:
            since_ms = max(since_ms, live.deployment.created_at)
        item = reverts.Item(
            service=name, failed=failed,
            failed_tag=failed_release.tags[0] if failed_release and failed_release.tags
            else None, to=found.digest, to_tag=chosen.tag,
            evidence=tuple(reverts.evidence_lines(proof)) if proof is not None else (),
            sources=found.sources, path=rel, hold_path=holds.file_name(name, failed))
        items.append(item)
        data = revert_git.blob(root, head, rel)
        if data is None:
            raise EngineError(f"{name}: {rel} is not in commit {head[:12]}; nothing written")
        try:
            after = pin_files.rewrite(data, rel, name, pin_files.Values(
                digest=chosen.digest, tag=chosen.tag, version=chosen.version))
            _model, problems = pin_files.candidate(rel, after, name)
        except pin_files.PinFileError as exc:
            raise EngineError(f"{exc}") from exc
        if problems:
            raise EngineError(f"{name}: the reverted {rel} would not validate: "
                              f"{problems[0]}; nothing written", Exit.ERROR)
        files[rel] = after
        if holds.held(desired, name, failed) is None:
            first = data.split(b"\n", 1)[0].decode("utf-8", "replace")
            schema = first.split("$schema=", 1)[1].strip() \
                if first.startswith("# yaml-language-server: $schema=") else None
            files[item.hold_path] = holds.document(
                name, failed, reverts.reason(item), item.evidence,
                pin_rules.when(since_ms or snapshot.taken_at), schema).encode()
    if not items:
        names = ", ".join(f"{n} (commit {c[:12]})" for n, c in already)
        return RevertRun(key="", items=(), commit=already[0][1] if already else None,
                         already=True, why_pr=f"already reverted: {names}")
    key = reverts.key(items)
    message = reverts.message(items, key, newer=newer)
    done = revert_git.find_keyed(root, key)
    if done is not None:
        return await _rolled_back(reconciler, root, RevertRun(key, tuple(items), done,
                                                              already=True), rollback, hook,
                                  progress, fence)
    try:
        commit = revert_git.make_commit(root, head, files, message,
                                        date=f"@{(since_ms or snapshot.taken_at) // 1000} +0000")
    except revert_git.RevertGitError as exc:
        raise EngineError(f"{exc}; nothing written") from exc
    applying.crash_point("revert-before-commit")
    instead, how, target = _where_to_land(root, pull, newer)
    if instead is None and target is not None:
        # Pushed before it lands here: a refusal (a protected branch, a branch that
        # moved) leaves the checkout as it was, and the revert becomes a pull request.
        pushed = landing.push(root, target, commit)
        if not pushed.ok and revert_git.head(root) != head:
            # Another writer of this checkout (a member of the same group) landed and
            # pushed first: as when the fast-forward finds the branch moved, below.
            done = revert_git.find_keyed(root, key)
            if done is None:
                raise BranchMoved("the branch moved while the revert was being made; "
                                  "nothing written: run it again (it is re-planned against "
                                  "the new head)")
            return await _rolled_back(reconciler, root, RevertRun(
                key, tuple(items), done, already=True), rollback, hook, progress, fence)
        if pushed.ok:
            how = f"{how}; pushed to {target}"
        elif pushed.refused and pull is not None and pull.repo:
            instead = pushed.said
        else:  # no answer, or no pull request to open: the rollback must not wait on it
            how = f"{how}; NOT pushed ({pushed.said})"
    if instead is not None:
        opened = _propose(root, commit, key, items, message, instead, pull,
                          base=target.branch if target is not None else None)
        # Journaled with the failed commit: a watcher started again later finds that this
        # commit's way back waits on review, and does not send its release again.
        _journal_revert(path, key, commit, items, proposed={
            "failed_commit": head, "pull": opened.number, "url": opened.url})
        return RevertRun(key, tuple(items), commit, pull=opened, why_pr=instead)
    try:
        landed = revert_git.fast_forward(root, commit)
    except revert_git.RevertGitError as exc:  # a lock held too long: said, never raised
        raise EngineError(f"{exc}; nothing rolled back") from exc
    if not landed:
        done = revert_git.find_keyed(root, key)
        if done is None:
            raise BranchMoved("the branch moved while the revert was being made; nothing "
                              "written: run it again (it is re-planned against the new head)")
        return await _rolled_back(reconciler, root, RevertRun(key, tuple(items), done,
                                                              already=True, how=how), rollback,
                                  hook, progress, fence)
    _journal_revert(path, key, commit, items)
    applying.crash_point("revert-after-commit")
    return await _rolled_back(reconciler, root, RevertRun(key, tuple(items), commit, how=how),
                              rollback, hook, progress, fence)


def _journal_revert(path: Path, key: str, commit: str, items: Sequence[reverts.Item],
                    proposed: Mapping[str, object] | None = None) -> None:
    """Tell the journal of a revert: landed (git holds it; the journal tells it) or
    ``proposed`` as a pull request (which one, and the failed commit it is for)."""
    with contextlib.suppress(JournalError):
        Journal.open(path).reverted(key, {"commit": commit, "services": [
            {"service": i.service, "failed": i.failed, "to": i.to, "to_tag": i.to_tag,
             "evidence": list(i.evidence)[:10]} for i in items], **(proposed or {})})


def revert_pending(path: Path, commit: str) -> str | None:
    """The pull request a revert of ``commit`` (a failed release) was proposed in, as the
    journal at ``path`` records it (None: none was)."""
    try:
        records = journal_mod.reverts(path, on_torn=lambda _torn: None)
    except JournalError:
        return None
    for record in reversed(records):
        if record.get("failed_commit") == commit and isinstance(record.get("pull"), int):
            return f"pull request #{record['pull']} ({safe(str(record.get('url') or ''), 300)})"
    return None


def _where_to_land(root: Path, pull: PullTarget | None, newer: Mapping[str, str],
                   ) -> tuple[str | None, str, landing.Upstream | None]:
    """Before a revert commit lands: why it must be a pull request instead (None: it may
    be committed), how it lands (said in the output), and the upstream it is pushed to
    first. A pull request when the service's file changed on the branch since the failed
    apply, when ``--pr`` asks, or when GitHub says the branch is protected (asked only
    when a repository is known: ``GITHUB_REPOSITORY`` or ``--github-repo``); the push's
    own refusal is the caller's next question (``shell.landing``)."""
    if newer:
        return ("the service's file changed on the branch since the failed apply: "
                + "; ".join(newer.values())), "", None
    if pull is not None and pull.requested:
        return "--pr", "", None
    local = revert_git.branch(root)
    target = landing.upstream(root, local) if local is not None else None
    branch = target.branch if target is not None else local
    if pull is None or not pull.repo or branch is None:
        return None, (f"committed to {local or 'HEAD'} (branch protection not asked: no "
                      "GitHub repository given)"), target
    asked = landing.protection(pull.api_url, pull.repo, pull.token, branch)
    if asked.protected:
        return f"{asked.said}: a pull request instead of a commit", "", target
    return None, f"committed to {local} ({asked.said})", target


class BranchMoved(EngineError):
    """The revert's fast-forward found the branch moved and no commit carrying its key:
    nothing was written; re-planned against the new head, it may land."""


async def _rolled_back(reconciler: Reconciler, root: Path, done: RevertRun, rollback: bool,
                       hook: Hook | None, progress: Progress | None,
                       fence: applying.Fence | None = None) -> RevertRun:
    """The apply of the reverted commit: the rollback (planned as any change: its key from
    what it was planned against, so a rerun replays it) and its gate."""
    if not rollback or hook is None:
        return done

    def watched(event: Event) -> None:
        if isinstance(event, GateStarted):
            applying.crash_point("revert-gate")
        hook(event)

    desired, provenance = load_consistent(root)
    run = await reconciler.apply(desired, provenance, hook=watched,
                                 only=frozenset(i.service for i in done.items),
                                 progress=progress, fence=fence)
    return dataclasses.replace(done, rollback=run)


def _propose(root: Path, commit: str, key: str, items: Sequence[reverts.Item], message: str,
             why: str, pull: PullTarget | None, *, base: str | None = None) -> PullRequest:
    from reconciler.shell import pullrequests  # githubkit loads only for a pull request

    if pull is None or not pull.repo:
        raise EngineError(f"the revert must be proposed as a pull request ({why}), but no "
                          "GitHub repository is known: set GITHUB_REPOSITORY or --repo "
                          f"OWNER/NAME; the revert commit {commit[:12]} was not landed",
                          Exit.ERROR)
    base = base or revert_git.branch(root)
    if base is None:
        raise EngineError("the revert must be proposed as a pull request, but HEAD is "
                          "detached: no base branch to propose it to", Exit.ERROR)
    title, _, body = message.partition("\n")
    try:
        _pushed, opened = pullrequests.open_pull_request(
            root, api_url=pull.api_url, repo=pull.repo, token=pull.token,
            branch=f"reconcile/{key}", base=base, title=title,
            body=f"Proposed instead of committed: {why}\n{body}", commit=commit,
            remote=pull.remote)
    except pullrequests.PullRequestError as exc:
        raise EngineError(f"the revert could not be proposed: {exc}", Exit.ERROR) from exc
    return opened


def release_hold(root: Path, service: str, digest: str) -> tuple[str, str]:
    """``reconcile release-hold``: remove the Hold on ``service``'s ``digest`` by a commit
    (the file holding it, when that is all it holds), landed by fast-forward. Returns the
    commit and the file removed."""
    desired, provenance = load_consistent(root)
    if provenance.commit is None or provenance.dirty:
        raise EngineError(f"refusing to release a hold: {root} has no commit or has "
                          "uncommitted changes; nothing written", Exit.REFUSED_COMMIT)
    hold = holds.held(desired, service, digest)
    source = desired.sources.get(f"Hold/{service}/{digest}")
    if hold is None or source is None:
        listed = ", ".join(f"{h.service} {h.digest}" for h in desired.holds) or "none"
        raise EngineError(f"no hold on {safe(service, 100)} {safe(digest, 80)} in commit "
                          f"{provenance.commit[:12]} (holds: {listed}); nothing written")
    data = revert_git.blob(root, provenance.commit, source.path) or b""
    loaded = loading.load_bytes(source.path, data)
    if len(loaded.documents) != 1:
        raise EngineError(f"{source.path} holds {len(loaded.documents)} documents, not just "
                          "the hold: remove the Hold document by hand and commit; nothing "
                          "written")
    message = (f"release the hold on {service} {digest}\n\n{service}'s release {digest} may "
               f"be pinned again (held since {hold.since}: {hold.reason})\n")
    try:
        commit = revert_git.make_commit(root, provenance.commit, {source.path: None}, message,
                                        date=f"@{int(time.time())} +0000")
        if not revert_git.fast_forward(root, commit):
            raise EngineError("the branch moved meanwhile; nothing written: run it again")
    except revert_git.RevertGitError as exc:
        raise EngineError(f"{exc}; nothing written") from exc
    return commit, source.path
# -- promote (issue 19) -------------------------------------------------------------------

@dataclass(frozen=True)
class Promotion:
    """One service of ``reconcile promote``: the digest the previous environment proves,
    the gate it met (soak, windows, freezes), and what was written (or why not)."""

    service: str
    digest: str | None = None
    tag: str | None = None
    gate: promotion.Gate | None = None
    refused: str | None = None
    path: str | None = None
    before: bytes = b""
    after: bytes = b""
    written: bool = False
    evidence: str = ""

    @property
    def changes(self) -> bool:
        return self.before != self.after


@dataclass(frozen=True)
class PromoteRun:
    environment: str
    upstream: str
    promotions: tuple[Promotion, ...]
    preview: Plan | None = None
    preview_error: str | None = None
    commit: str | None = None


def _candidate(stage: environments.Selected, upstream: promotion.Upstream, name: str,
               now_ms: int) -> tuple[str | None, str | None, promotion.Gate | None, str | None]:
    """(digest, tag, gate, refusal) for promoting ``name`` from the previous environment:
    the digest its control plane's current rollout is to, judged there now."""
    if upstream.error is not None:
        return None, None, None, f"{upstream.name} could not be read ({upstream.error})"
    facts = upstream.services.get(name)
    if facts is None:
        return None, None, None, f"{upstream.name} declares no service {name!r}"
    live = facts.live
    digest = live.current_digest if isinstance(live, LiveService) else None
    if digest is None:
        return None, None, None, f"{upstream.name} has no rollout of {name}"
    found = promotion.gate(name, digest, stage.environment, upstream, stage.rules.freezes,
                           now_ms)
    blockers = [b for b in found.blockers
                if not (stage.override and b.code in promotion.OVERRIDABLE)]
    tag = facts.tag if facts.pinned == digest else None
    release = live.release_by_digest(digest) if isinstance(live, LiveService) else None
    if tag is None and release is not None and release.tags:
        tag = release.tags[0]
    if blockers:
        return digest, tag, found, "; ".join(f"{b.code.value}: {safe(b.message)}"
                                             for b in blockers)
    if tag is None:
        return digest, tag, found, f"{upstream.name}'s control plane observed {digest} " \
            "under no tag; pin it by hand"
    return digest, tag, found, None


def _evidence_line(stage: environments.Selected, upstream: str, p: Promotion) -> str:
    gate = p.gate
    if gate is None or gate.proof is None or p.digest is None:
        return ""
    clusters = ", ".join(c.cluster for c in gate.proof.clusters)
    since = "" if gate.since is None else \
        f" since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(gate.since / 1000))}"
    soak = f" (soak {stage.environment.soak})" if stage.environment.soak else ""
    return (f"{p.service}: {p.digest} ({p.tag}) proven on {upstream} clusters {clusters}"
            f"{since}{soak}")


def promote(stage: environments.Selected, services: Sequence[str] | None, *, write: bool,
            commit: bool, overrides: Overrides, env: Mapping[str, str] | None = None,
            preview: bool = True, progress: Progress | None = None,
            clock: Callable[[], float] = time.time) -> PromoteRun:
    """``reconcile promote``: read the previous environment (its commit, control plane and
    clusters), take the digest it proves for each service, gate it (soak, windows,
    freezes: ``core.promotion``), splice the pin into this environment's file (``pin``'s
    byte-preserving rewrite; only when ``write`` and nothing refused), plan this
    environment as the working tree now says (policies included), and commit the files
    with the evidence (``commit``)."""
    env = os.environ if env is None else env
    up = stage.upstream
    if up is None or stage.upstream_root is None:
        raise EngineError(f"{stage.name} is the first environment of the pipeline: there is "
                          "nothing to promote from", Exit.USAGE)
    desired = load_worktree(stage.root)
    names = list(services) if services is not None else [s.name for s in desired.services]
    unknown = [n for n in names if desired.service_by_name(n) is None]
    if unknown:
        raise EngineError(f"{stage.name} declares no service {', '.join(unknown)}", Exit.USAGE)
    upstream = asyncio.run(read_upstream(up.name, stage.upstream_root, set(names), env))
    now_ms = int(clock() * 1000)
    done: list[Promotion] = []
    models: dict[str, Service] = {}
    for name in names:
        digest, tag, gate, refused = _candidate(stage, upstream, name, now_ms)
        rel = desired.sources[f"Service/{name}"].path
        if services is None and refused is not None and digest is None:
            continue  # --all: a service the previous environment does not have stays
        item = Promotion(service=name, digest=digest, tag=tag, gate=gate, refused=refused,
                         path=rel)
        if refused is None:
            assert digest is not None and tag is not None
            facts = upstream.services[name]
            version = facts.version if facts.pinned == digest else None
            try:
                file = pin_files.read(stage.root, rel)
                after = pin_files.rewrite(file.data, rel, name, pin_files.Values(
                    digest=digest, tag=tag, version=version))
                model, problems = pin_files.candidate(rel, after, name)
                if problems or model is None:
                    item = dataclasses.replace(item, refused="; ".join(
                        p.render() for p in problems) or "the rewritten file does not load")
                else:
                    models[name] = model
                    if write and after != file.data:
                        pin_files.write(file, after)
                    item = dataclasses.replace(item, before=file.data, after=after,
                                               written=write and after != file.data)
            except pin_files.PinFileError as exc:
                item = dataclasses.replace(item, refused=str(exc))
        done.append(dataclasses.replace(item, evidence=_evidence_line(stage, up.name, item)))
    run = PromoteRun(environment=stage.name, upstream=up.name, promotions=tuple(done))
    if commit and any(p.written for p in done):
        written = [p for p in done if p.written]
        title = (f"promote {', '.join(p.service for p in written)} to {stage.name} "
                 f"from {up.name}")
        body = "\n".join(p.evidence for p in written)
        try:
            made = environments.commit_files(stage.root, [p.path or "" for p in written],
                                             f"{title}\n\n{body}\n")
        except environments.PipelineError as exc:
            raise EngineError(f"{exc}; the files are written, not committed") from exc
        run = dataclasses.replace(run, commit=made)
    if not preview or not models:
        return run
    scoped = desired.model_copy(update={"services": tuple(
        models.get(s.name, s) for s in desired.services if s.name in models)})
    provenance = Provenance(path=str(stage.root.resolve()))

    async def planned() -> Plan:
        async with Reconciler(stage.root, scoped, overrides=overrides, env=env,
                              stage=stage) as reconciler:
            made, _ = await reconciler.plan(scoped, provenance, progress)
            return made

    try:
        return dataclasses.replace(run, preview=asyncio.run(planned()))
    except EngineError as exc:
        return dataclasses.replace(run, preview_error=str(exc))


# -- watch --env ENV --promote-from UP (issue 19) ------------------------------------------

@dataclass(frozen=True)
class ProposalTarget:
    """Where ``watch --promote-from`` proposes promotions: the GitHub repository and the
    git remote (``PullTarget``, as ``promote --pr`` reaches them), the base branch (None:
    the branch the checkout is on), and how a plan becomes the pull request's body (the
    command's Markdown renderer: the engine renders nothing)."""

    pull: PullTarget
    base: str | None
    body: Callable[[Plan], str]


@dataclass(frozen=True)
class Proposal:
    """One service at one observation: the decision (``core.proposals``), the pull request
    opened or found open, what failed (git, GitHub, the journal), and whether it is news
    (not said before: a soak's eligible time is said once, not at every resync)."""

    decision: proposals.Decision
    pull: PullRequest | None = None
    error: str | None = None
    news: bool = True
    note: str | None = None
    #: the superseded proposal's pull request, closed by this one (None: none was open)
    closed: int | None = None


class Proposer:
    """``watch --promote-from``'s memory across cycles: the proposals made (the journal's,
    read once, then kept here), what was said, and the failures counted. Each ``run`` is
    one pass over ENV's services after an observation; it never writes the checkout (the
    commit is built beside it, ``shell.reverting.make_commit``) and never applies."""

    def __init__(self, target: ProposalTarget, env: Mapping[str, str]) -> None:
        self.target = target
        self.env = env
        self.earlier: list[proposals.Earlier] | None = None
        self.said: set[str] = set()
        self.failures = 0

    def _journal(self, stage: environments.Selected, desired: DesiredState) -> Path:
        return state_dir(desired, stage.root, self.env, stage.name) / journal_mod.JOURNAL_FILE

    def _recorded(self, stage: environments.Selected, path: Path) -> list[proposals.Earlier]:
        if self.earlier is None:
            try:
                records = journal_mod.proposals(path, on_torn=lambda _torn: None)
            except JournalError:
                records = []  # GitHub still finds an open pull request of the same branch
            self.earlier = [proposals.Earlier(
                service=str(r.get("service")), digest=str(r.get("digest")),
                branch=str(r.get("branch")), number=r.get("pull") if isinstance(
                    r.get("pull"), int) else None, url=str(r.get("url") or ""))
                for r in records if r.get("environment") == stage.name]
        return self.earlier

    def run(self, stage: environments.Selected, desired: DesiredState, snapshot: LiveSnapshot,
            provenance: Provenance, greenfield: Greenfield | None,
            upstream: promotion.Upstream | None, only: frozenset[str],
            now_ms: int) -> tuple[Proposal, ...]:
        if stage.upstream is None or upstream is None:
            return ()
        path = self._journal(stage, desired)
        earlier = self._recorded(stage, path)
        out: list[Proposal] = []
        for svc in desired.services:
            if only and svc.name not in only:
                continue
            decision, made = self._decide(stage, desired, svc, snapshot, provenance,
                                          greenfield, upstream, earlier, now_ms)
            if decision.step is proposals.Step.PROPOSE and made is not None:
                out.append(self._open(stage, desired, svc, decision, made, provenance, path,
                                      now_ms))
                continue
            news = decision.key not in self.said
            self.said.add(decision.key)
            out.append(Proposal(decision, news=news))
        return tuple(out)

    def _decide(self, stage: environments.Selected, desired: DesiredState, svc: Service,
                snapshot: LiveSnapshot, provenance: Provenance, greenfield: Greenfield | None,
                upstream: promotion.Upstream, earlier: list[proposals.Earlier],
                now_ms: int) -> tuple[proposals.Decision,
                                      tuple[Plan, bytes, promotion.Gate] | None]:
        """The decision for ``svc``: the gate of ``engine.promote`` (the digest the
        previous environment proves, soak, windows, freezes), then -- when that allows
        it -- ENV's plan with the pin (policies: ``environment_rules``, the same rules
        ``plan --env`` applies). Returns the plan and the rewritten file to propose."""
        name = svc.name
        digest, tag, gate, refused = _candidate(stage, upstream, name, now_ms)
        if digest is None:
            problem = refused if upstream.error is not None else None
            return proposals.decide(stage.name, proposals.Candidate(
                name, None, None, svc.release.digest, problem=problem), earlier), None
        assert gate is not None
        held = tuple(b for b in gate.blockers
                     if not (stage.override and b.code in promotion.OVERRIDABLE))
        candidate = proposals.Candidate(name, digest, tag, svc.release.digest, held,
                                        gate.eligible_at,
                                        problem=None if held else refused or
                                        proposals.older_than_pinned(
                                            stage.name, snapshot.services.get(svc.service_id),
                                            svc.release.digest, digest))
        decision = proposals.decide(stage.name, candidate, earlier)
        if decision.step is not proposals.Step.PROPOSE:
            return decision, None
        assert tag is not None
        rel = desired.sources[f"Service/{name}"].path
        facts = upstream.services[name]
        try:
            if provenance.commit is None:
                raise pin_files.PinFileError(f"{stage.root} has no commit to propose on")
            data = revert_git.blob(stage.root, provenance.commit, rel)
            if data is None:
                raise pin_files.PinFileError(f"{rel} is not in commit {provenance.commit[:12]}")
            after = pin_files.rewrite(data, rel, name, pin_files.Values(
                digest=digest, tag=tag,
                version=facts.version if facts.pinned == digest else None))
            model, problems = pin_files.candidate(rel, after, name)
            if problems or model is None:
                raise pin_files.PinFileError("; ".join(p.render() for p in problems)
                                             or f"{rel}: the rewritten file does not load")
        except (pin_files.PinFileError, revert_git.RevertGitError) as exc:
            return proposals.decide(stage.name, dataclasses.replace(
                candidate, problem=str(exc)), earlier), None
        scoped = desired.model_copy(update={"services": (model,)})
        made = restrict(environment_rules(stage, make_plan(scoped, snapshot, provenance,
                                                           greenfield), scoped, upstream),
                        frozenset({name}))
        if not any(c.service == name and c.action in promotion.PROMOTING
                   for c in made.changes):
            # Going back to a release ENV accepted before (staging rolled back after ENV
            # took the newer one) is a rollback, not a promotion: never proposed here.
            return proposals.Decision(name, proposals.Step.NOTHING, digest=digest, tag=tag,
                                      reason=f"{stage.name} accepted it before: a rollback, "
                                      "not a promotion"), None
        rules = proposals.rule_blockers(made.blockers, name)
        if rules:  # a policy denies it (the gate above already allowed soak and holds)
            return proposals.decide(stage.name, dataclasses.replace(
                candidate, blockers=rules), earlier), None
        return decision, (made, after, gate)

    def _open(self, stage: environments.Selected, desired: DesiredState, svc: Service,
              decision: proposals.Decision, made: tuple[Plan, bytes, promotion.Gate],
              provenance: Provenance, path: Path, now_ms: int) -> Proposal:
        """Build the commit (HEAD with the pin; the checkout untouched), push the branch,
        open the pull request -- or find the one already open -- and journal it."""
        from reconciler.shell import pullrequests  # githubkit loads only for a proposal

        plan_value, after, gate = made
        assert decision.branch is not None and decision.digest is not None
        assert provenance.commit is not None and stage.upstream is not None
        up = stage.upstream.name
        evidence = _evidence_line(stage, up, Promotion(
            service=svc.name, digest=decision.digest, tag=decision.tag, gate=gate))
        title = f"Promote {svc.name} to {stage.name} from {up}"
        superseded = decision.supersedes
        said = (f"supersedes the proposal of {superseded.digest}"
                + (f" (#{superseded.number})" if superseded.number else "")) \
            if superseded else ""
        message = (f"promote {svc.name} to {stage.name} from {up}\n\n{evidence}\n"
                   + (f"{said}\n" if said else ""))
        rel = desired.sources[f"Service/{svc.name}"].path
        pull = self.target.pull
        if not pull.repo:
            self.failures += 1
            return Proposal(decision, error="no GitHub repository (--repo or "
                            "GITHUB_REPOSITORY)")
        try:
            since = gate.since or now_ms  # the same promotion is the same commit
            commit = revert_git.make_commit(stage.root, provenance.commit, {rel: after},
                                            message, date=f"@{since // 1000} +0000")
            base = self.target.base or revert_git.branch(stage.root) or "main"
            body = "\n".join(x for x in (f"- {evidence}", f"- {said}" if said else "") if x)
            _pushed, opened = pullrequests.open_pull_request(
                stage.root, api_url=pull.api_url, repo=pull.repo, token=pull.token,
                branch=decision.branch, base=base, title=title,
                body=body + "\n\n" + self.target.body(plan_value), commit=commit,
                remote=pull.remote, keep_existing=True)
        except (pullrequests.PullRequestError, revert_git.RevertGitError) as exc:
            self.failures += 1
            return Proposal(decision, error=str(exc))
        assert self.earlier is not None
        self.earlier.append(proposals.Earlier(svc.name, decision.digest, decision.branch,
                                              opened.number, opened.url))
        self.said.add(decision.key)
        note = None
        try:
            Journal.open(path).proposed(decision.branch, {
                "environment": stage.name, "upstream": up, "service": svc.name,
                "digest": decision.digest, "tag": decision.tag, "branch": decision.branch,
                "base": base, "commit": commit, "pull": opened.number, "url": opened.url,
                "created": opened.created, "evidence": evidence,
                "supersedes": superseded.digest if superseded else None})
        except JournalError as exc:  # the pull request is open: GitHub finds it again
            note = f"not journaled: {exc}"
        closed: int | None = None
        if superseded is not None and superseded.number is not None \
                and superseded.branch != decision.branch:
            # The older proposal would pin a digest this one replaces: merged after it,
            # it would take ENV back. Closed with a comment naming the newer one; one a
            # person merged or closed is left as it is (``close_superseded``).
            comment = (f"Superseded by #{opened.number} ({opened.url}): {up} now proves "
                       f"{svc.name} {decision.digest}"
                       + (f" ({decision.tag})" if decision.tag else "")
                       + f". Closed by reconcile watch --env {stage.name} --promote-from "
                       f"{up}; this branch is left as it is.")
            try:
                if pullrequests.close_superseded(
                        api_url=pull.api_url, repo=pull.repo, token=pull.token,
                        number=superseded.number, branch=superseded.branch,
                        comment=comment):
                    closed = superseded.number
            except pullrequests.PullRequestError as exc:
                note = "; ".join(x for x in (note, f"the superseded pull request "
                                             f"#{superseded.number} is still open: {exc}")
                                 if x)
        return Proposal(decision, pull=opened, note=note, closed=closed)


# -- status (issues 19 and 23) ---------------------------------------------------------------

def status(roots: Sequence[tuple[str, Path, Environment | None]], *, overrides: Overrides,
           freezes: Sequence[tuple[Freeze, str]] = (), env: Mapping[str, str] | None = None,
           clock: Callable[[], float] = time.time) -> service_status.Status:
    """``reconcile status``: one snapshot per environment, in pipeline order (the batch
    reads a plan makes, no preflight, no plan), judged per service (``core.status``); an
    environment's snapshot is also the upstream evidence of the next one. ``overrides``
    apply to a repo without environments only: each environment's Settings say where it
    is. What cannot be read is reported per environment, never raised."""
    env = os.environ if env is None else env
    single = len(roots) == 1 and roots[0][2] is None

    async def run() -> service_status.Status:
        per: dict[str, tuple[service_status.ServiceRow, ...]] = {}
        errors: list[tuple[str, str]] = []
        previous: promotion.Upstream | None = None
        for name, root, environment in roots:
            try:
                desired, _ = load_consistent(root)
                async with Reconciler(root, desired, overrides=overrides if single
                                      else Overrides(), env=env) as reconciler:
                    snapshot = await reconciler.observe(desired)
            except EngineError as exc:
                errors.append((name, str(exc).splitlines()[0]))
                previous = promotion.Upstream(name=name, error=str(exc).splitlines()[0])
                continue
            per[name] = service_status.rows(
                name, desired, snapshot, environment=environment, upstream=previous,
                freezes=freezes, now_ms=int(clock() * 1000))
            previous = service_status.upstream_facts(name, desired, snapshot)
        return service_status.assemble(int(clock() * 1000), [n for n, _, _ in roots], per,
                                       errors)

    return asyncio.run(run())
