"""The watcher's steps (``WatchSteps``): what ``shell.watching`` asks on each commit --
load the repo, plan, apply behind the gate, take the way back, propose promotions
(``engine.proposer``) -- with the reconciler held for the watcher's whole life.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from reconciler.core import (
    freshness,
    promotion,
)
from reconciler.core.desired import DesiredState
from reconciler.core.events import (
    Hook,
)
from reconciler.core.live import (
    LiveSnapshot,
)
from reconciler.core.planning import (
    Provenance,
    absent,
)
from reconciler.core.plans import Plan, restrict
from reconciler.core.preflight import Greenfield
from reconciler.engine.proposer import Proposal, Proposer
from reconciler.engine.reconciling import Reconciler, ask_preflights, environment_rules
from reconciler.engine.wayback import revert_after, revert_pending
from reconciler.engine.wiring import (
    ApplyRun,
    Deadline,
    ProposalTarget,
    PullTarget,
    load_consistent,
    make_plan,
    notifier,
    read_commit,
    state_dir,
)
from reconciler.failures import EngineError
from reconciler.shell import (
    environments,
    gitrepo,
    tracing,
    validating,
)
from reconciler.shell import journal as journal_mod
from reconciler.shell.controlplane import (
    ControlPlaneClient,
    token_from_env,
)
from reconciler.shell.endpoints import ConfigError, Overrides

if TYPE_CHECKING:  # for annotations only: these load where they are used
    from reconciler.shell.notifying import Counter, Notifier


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

    @property
    def upstream(self) -> promotion.Upstream | None:
        """``watch --env``: the previous environment as last read (None: none)."""
        return self._upstream

    def journal(self) -> Path | None:
        """This environment's journal (None: nothing observed yet to find it)."""
        if self._observed is None:
            return None
        return state_dir(self._observed, self.root, self.env,
                         self.stage.name if self.stage is not None else None) \
            / journal_mod.JOURNAL_FILE

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
