"""``Reconciler``: one config repo wired to the live world (the client and the prober),
held for one apply or for a watcher's whole life -- observe, the two preflights of each
creation (``ask_preflights``), plan, and apply behind the one gate -- and the rules of an
environment of a pipeline (``environment_rules``, ``read_upstream``).

Every operation that touches the live world goes through it; it imports only
``engine.wiring`` of the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from reconciler.core import (
    binding,
    evidence,
    lastproven,
    promotion,
    staleness,
)
from reconciler.core import policy as policies
from reconciler.core.desired import DesiredState
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
    LiveService,
    LiveSnapshot,
    Observation,
    ObservationKind,
    ReadFailure,
)
from reconciler.core.outcomes import EXPIRED, ApplyReport, ChangeResult, GateReport, Outcome
from reconciler.core.planning import (
    Provenance,
    absent,
    bound_requests,
    creation_requests,
    target_of,
)
from reconciler.core.plans import Plan, Verdict, restrict
from reconciler.core.preflight import Greenfield
from reconciler.core.sanitize import redact, safe
from reconciler.engine.wiring import (
    ApplyRun,
    Deadline,
    connect,
    load_consistent,
    make_plan,
    refuse_no_go,
    state_dir,
)
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError
from reconciler.shell import (
    applying,
    connectadvice,
    environments,
    gitrepo,
    greenfield,
    observing,
    tracing,
    verifying,
)
from reconciler.shell.controlplane import (
    ControlPlaneClient,
    ControlPlaneError,
    parse_service,
    token_from_env,
)
from reconciler.shell.endpoints import ConfigError, Connection, Effective, Overrides
from reconciler.shell.journal import Journal, JournalError
from reconciler.shell.progress import Progress

if TYPE_CHECKING:  # for annotations only: these load where they are used
    from reconciler.shell.notifying import Notifier


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


def _left(deadline: Deadline | None) -> float | None:
    """Seconds left before ``deadline`` (None: unbounded), for ``asyncio.timeout``."""
    return None if deadline is None else max(0.0, deadline.at - time.monotonic())


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
            # Issue 34: the checks services are held to, measured per cluster (nothing is
            # dialled unless a Verification document holds a service to a check).
            self.verifier = verifying.Verifier(
                self.connection, desired.settings.verification.prometheus
                if desired.settings.verification is not None else None)
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
        await self.verifier.aclose()
        await self.prober.aclose()
        await self.client.aclose()

    @tracing.traced_observe
    async def observe(self, desired: DesiredState,
                      progress: Progress | None = None) -> LiveSnapshot:
        try:
            return await observing.observe_async(desired, self.connection, env=self.env,
                                                 prober=self.prober, client=self.client,
                                                 progress=progress, memory=self.memory,
                                                 verifier=self.verifier)
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
        # Issue 34: a query Prometheus itself cannot parse is bad input, named file:line,
        # before anything is observed (never an unknown check forever).
        problems = await verifying.query_problems(desired, self.connection)
        if problems:
            raise EngineError(f"{len(problems)} Verification quer"
                              f"{'y' if len(problems) == 1 else 'ies'} Prometheus cannot "
                              "parse", Exit.ERROR, tuple(problems))
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
            mesh = await self.prober.resolve()
            mesh_clusters.update(mesh.expected_clusters)
            # Issue 34: the checks, on the clusters this poll shows running the digest.
            seen = await self.verifier.verify_observations(desired, observations, live, mesh)
            expected = {name: evidence.expected_clusters(
                targets[name], mesh_clusters, _targets(live[svc.service_id]))
                for name, svc in polling.items()}
            probe.update(*expected.values())
            fresh = {name: evidence.judge(target_of(svc, live[svc.service_id], desired,
                                                    changes=changes),
                                          live[svc.service_id], expected[name],
                                          seen.get(svc.app_id, ()))
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
            pinned=svc.release.digest, tag=svc.release.tag, version=svc.release.version,
            checks=tuple(name for name, _ in scoped.checks_for(svc.name)))
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
