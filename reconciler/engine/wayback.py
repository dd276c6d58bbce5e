"""The way back from a failed release (issue 20): ``revert_with`` (re-plan against the
branch head, revert in git, land or propose, roll back), ``revert_after`` (apply's and the
watcher's ``--on-gate-failure revert``), ``way_back`` (the run's way back as
``core.notifying`` reads it) and the journal of reverts proposed (``revert_pending``).

Shared by ``apply``, ``revert`` and the watcher, so it sits below them.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from reconciler.core import (
    holds,
    lastproven,
    reverts,
    writegate,
)
from reconciler.core import pinning as pin_rules
from reconciler.core.desired import Service
from reconciler.core.events import (
    Event,
    GateStarted,
    Hook,
)
from reconciler.core.evidence import ServiceProof
from reconciler.core.live import (
    LiveService,
)
from reconciler.core.notifying import WayBack
from reconciler.core.sanitize import safe
from reconciler.engine.reconciling import Reconciler
from reconciler.engine.wiring import (
    ApplyRun,
    PullTarget,
    RevertRun,
    _declared,
    _pinned,
    load_consistent,
    make_plan,
    refuse_write,
    state_dir,
)
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError
from reconciler.shell import (
    applying,
    landing,
)
from reconciler.shell import journal as journal_mod
from reconciler.shell import pinning as pin_files
from reconciler.shell import reverting as revert_git
from reconciler.shell.journal import Journal, JournalError
from reconciler.shell.progress import Progress

if TYPE_CHECKING:  # for annotations only: these load where they are used
    from reconciler.shell.notifying import Notifier
    from reconciler.shell.pullrequests import PullRequest


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
    return revert_way(done, error=run.revert_error, failed=failed)


def revert_way(done: RevertRun, *, error: str | None = None,
               failed: tuple[tuple[str, str], ...] = (), by_hand: bool = False) -> WayBack:
    """A revert made (or found made) as ``core.notifying`` reads it; ``by_hand``: asked
    for by ``reconcile revert``, not after a gate."""
    rolled = done.rollback
    return WayBack(key=done.key, items=done.items, commit=done.commit,
                   landed=done.pull is None and done.commit is not None,
                   pull_url=done.pull.url if done.pull else None,
                   pull_number=done.pull.number if done.pull else None, why_pr=done.why_pr,
                   rollback=(rolled.plan, rolled.report) if rolled is not None else None,
                   error=error, failed=failed, by_hand=by_hand)


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
    reverted: dict[str, Service] = {}
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
        chosen = _pin_of(svc, found)
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
        data, after, model = _pinned_back(root, head, rel, name, chosen)
        files[rel] = after
        reverted[name] = model
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
    # The one gate, before anything is written: the plan of the reverted services (this
    # snapshot, the environment's rules) judged as a rollback (core.writegate). A
    # rollback is no promotion, so soak, windows, freezes and policies hold none of it
    # (core.promotion.PROMOTING); a hold on the digest it goes back to refuses it.
    scoped = desired.model_copy(update={"services": tuple(
        reverted[s.name] for s in desired.services if s.name in reverted)})
    judged = await reconciler.with_rules(make_plan(scoped, snapshot, provenance, None), scoped)
    gate = writegate.verdict(judged, writegate.Write.ROLLBACK, reverted,
                             override=reconciler.stage.override
                             if reconciler.stage is not None else None)
    refuse_write(gate, "revert")
    key = reverts.key(items)
    # What the gate let through (its notes; none for a plain rollback) is in the commit.
    message = reverts.message(items, key, newer=newer, through=gate.notes())
    done = revert_git.find_keyed(root, key)
    if done is not None:
        made_before = await _rolled_back(reconciler, root, RevertRun(
            key, tuple(items), done, already=True), rollback, hook, progress, fence)
        return dataclasses.replace(made_before, plan=made)
    try:
        commit = revert_git.make_commit(root, head, files, message,
                                        date=f"@{(since_ms or snapshot.taken_at) // 1000} +0000")
    except revert_git.RevertGitError as exc:
        raise EngineError(f"{exc}; nothing written") from exc
    applying.crash_point("revert-before-commit")
    run = RevertRun(key, tuple(items), commit)
    landed = await _land(reconciler, root, run, head=head, message=message, newer=newer,
                         journal=path, pull=pull, rollback=rollback, hook=hook,
                         progress=progress, fence=fence)
    return dataclasses.replace(landed, plan=made)


def _pin_of(svc: Service, found: lastproven.LastProven) -> pin_rules.Pin:
    """The pin of ``svc`` back to its last proven release, resolved as ``pin`` resolves a
    tag: a release without a tag cannot be pinned back (a file names a tag)."""
    pinned = _pinned(svc)
    chosen = pin_rules.resolve(pinned, [found.release],
                               pin_rules.tag_of(found.release, pinned)) \
        if found.release.tags else None
    if not isinstance(chosen, pin_rules.Pin):
        why = chosen.message if chosen is not None else "the release carries no tag"
        raise EngineError(f"{svc.name}: cannot pin {found.digest} back: {why}; nothing "
                          "written", Exit.ERROR)
    return chosen


def _pinned_back(root: Path, head: str, rel: str, name: str,
                 chosen: pin_rules.Pin) -> tuple[bytes, bytes, Service]:
    """The service's file as ``head`` holds it, that file with ``chosen`` spliced in
    (every other byte kept), and the service it loads as -- or why not, nothing written."""
    data = revert_git.blob(root, head, rel)
    if data is None:
        raise EngineError(f"{name}: {rel} is not in commit {head[:12]}; nothing written")
    try:
        after = pin_files.rewrite(data, rel, name, pin_files.Values(
            digest=chosen.digest, tag=chosen.tag, version=chosen.version))
        model, problems = pin_files.candidate(rel, after, name)
    except pin_files.PinFileError as exc:
        raise EngineError(f"{exc}") from exc
    if problems:
        raise EngineError(f"{name}: the reverted {rel} would not validate: "
                          f"{problems[0]}; nothing written", Exit.ERROR)
    if model is None:  # nothing to judge is nothing the gate could let through
        raise EngineError(f"{name}: the reverted {rel} does not load as the service; "
                          "nothing written", Exit.ERROR)
    return data, after, model


async def _land(reconciler: Reconciler, root: Path, run: RevertRun, *, head: str,
                message: str, newer: Mapping[str, str], journal: Path,
                pull: PullTarget | None, rollback: bool, hook: Hook | None,
                progress: Progress | None, fence: applying.Fence | None) -> RevertRun:
    """The revert commit ``run.commit`` (made on ``head``, not yet on the branch) landed:
    pushed first where the branch tracks a remote (a refusal makes it a pull request and
    leaves the checkout as it was), proposed when it must not land on the branch, else
    fast-forwarded -- and, landed, journaled and rolled back (``rollback``). A branch
    that moved meanwhile is a revert another writer made (found by its key) or
    ``BranchMoved``."""
    key, items, commit = run.key, run.items, run.commit
    assert commit is not None
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
            return await _rolled_back(reconciler, root,
                                      RevertRun(key, items, done, already=True), rollback,
                                      hook, progress, fence)
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
        _journal_revert(journal, key, commit, items, proposed={
            "failed_commit": head, "pull": opened.number, "url": opened.url})
        return RevertRun(key, items, commit, pull=opened, why_pr=instead)
    try:
        landed = revert_git.fast_forward(root, commit)
    except revert_git.RevertGitError as exc:  # a lock held too long: said, never raised
        raise EngineError(f"{exc}; nothing rolled back") from exc
    if not landed:
        done = revert_git.find_keyed(root, key)
        if done is None:
            raise BranchMoved("the branch moved while the revert was being made; nothing "
                              "written: run it again (it is re-planned against the new head)")
        return await _rolled_back(reconciler, root,
                                  RevertRun(key, items, done, already=True, how=how),
                                  rollback, hook, progress, fence)
    _journal_revert(journal, key, commit, items)
    applying.crash_point("revert-after-commit")
    return await _rolled_back(reconciler, root, RevertRun(key, items, commit, how=how),
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
