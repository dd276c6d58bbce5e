"""What every operation of the engine shares: reading the repo (``read_commit``,
``load_consistent``, ``load_worktree``), reaching the control plane (``connect``), where a
checkout's state lives (``state_dir``), the notifier, the run's deadline, the NO-GO
refusal, and the plain typed values the operations hand back and take in (``ApplyRun``,
``RevertRun``, ``PullTarget``, ``ProposalTarget``; ``Promotion`` is ``core.promoted``'s,
re-exported here) with the small promotion
and pin helpers more than one operation asks.

The bottom of ``reconciler.engine``: it imports no other module of the engine.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from reconciler.core import pinning as pin_rules
from reconciler.core import (
    promotion,
    reverts,
    writegate,
)
from reconciler.core.codes import SILENT_CLUSTER_CODES, BlockerCode
from reconciler.core.desired import DesiredState, Service, Settings
from reconciler.core.live import (
    LiveService,
    LiveSnapshot,
)
from reconciler.core.outcomes import ApplyReport
from reconciler.core.planning import (
    Provenance,
)
from reconciler.core.planning import plan as _plan
from reconciler.core.plans import Plan
from reconciler.core.preflight import Greenfield
from reconciler.core.promoted import Promotion
from reconciler.core.sanitize import safe
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError
from reconciler.shell import (
    committed,
    environments,
    gitrepo,
    heap,
    validating,
)
from reconciler.shell.endpoints import ConfigError, Connection, Overrides

if TYPE_CHECKING:  # for annotations only: these load where they are used
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


def refuse_write(found: writegate.WriteVerdict, what: str) -> None:
    """The one gate before every write into git (``core.writegate``): raise its refusal
    -- each blocker with when it may go, nothing written -- when the verdict on the
    change about to be written is not GO."""
    if found.go:
        return
    lines = "\n".join(f"  ✗ {line}" for line in found.lines())
    raise EngineError(f"refusing to {what}: the change is NO-GO; nothing written\n{lines}",
                      Exit.REFUSED_NO_GO)


@dataclass(frozen=True)
class Deadline:
    """``apply --timeout``: when the whole run must end (``time.monotonic()``), and the
    bound as given, for the messages."""

    at: float
    seconds: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(at=time.monotonic() + seconds, seconds=seconds)


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
        """How the way back ended, as ``render.revertview.way_back`` words it (empty: no
        revert was asked for or needed)."""
        from reconciler.render import revertview  # the view, for callers holding the run

        return revertview.way_back(self.reverted, self.revert_error)


#: ``restrict`` keeps the whole plan for an empty selection: a member holding no shard
#: restricts to a name no service can have (names are identifiers, never empty).
NOTHING = frozenset({""})


def load_worktree(root: Path) -> DesiredState:
    """The desired state as the working tree holds it (``pin`` edits the working tree),
    refused with every problem when invalid."""
    result = validating.load_repo(root)
    if result.state is None:
        raise EngineError(f"{root}: the desired state in the working tree is invalid "
                          f"({len(result.diagnostics)} problem(s)); fix it first "
                          "(reconcile validate)", Exit.ERROR, result.diagnostics)
    return result.state


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
    #: the plan of the branch head the revert was judged from: the commit whose release
    #: it reverts, as a notification names it (``engine.wayback.revert_way``)
    plan: Plan | None = None


# -- promote (issue 19) -------------------------------------------------------------------

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
    """The sentence a promotion's commit message and pull request carry: where the digest
    is proven, and since when without a gap *on whose word* (``promotion.soak_clock``:
    the clusters' healthySince or the control plane's rollout success). Without a known
    time it says none, rather than one it cannot stand behind."""
    gate = p.gate
    if gate is None or gate.proof is None or p.digest is None:
        return ""
    clusters = ", ".join(c.cluster for c in gate.proof.clusters)
    since = "" if gate.since is None else \
        f" since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(gate.since / 1000))}" \
        + (f" {gate.source}" if gate.source else "")
    soak = f" (soak {stage.environment.soak})" if stage.environment.soak else ""
    return (f"{p.service}: {p.digest} ({p.tag}) proven on {upstream} clusters {clusters}"
            f"{since}{soak}")


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
