"""``reconcile revert`` (the way back asked by hand, ``engine.wayback``) and
``reconcile revert --release-hold`` (``release_hold``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from reconciler.core import (
    holds,
    writegate,
)
from reconciler.core.desired import DesiredState
from reconciler.core.plans import Plan
from reconciler.core.sanitize import safe
from reconciler.engine.reconciling import Reconciler
from reconciler.engine.wayback import revert_way, revert_with
from reconciler.engine.wiring import (
    PullTarget,
    RevertRun,
    load_consistent,
    notifier,
    refuse_write,
)
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError
from reconciler.shell import (
    environments,
    loading,
)
from reconciler.shell import reverting as revert_git
from reconciler.shell.endpoints import Overrides
from reconciler.shell.progress import Progress


def revert(root: Path, services: Sequence[str], *, overrides: Overrides,
           env: Mapping[str, str], pull: PullTarget | None = None,
           progress: Progress | None = None,
           stage: environments.Selected | None = None) -> RevertRun:
    """``reconcile revert``: the pinned release of each service, which the judge does not
    prove, back to its last proven release, with a hold on the failed one; committed, or
    proposed as a pull request. Does not apply (``reconcile apply`` rolls back).
    ``stage``: the environment of a pipeline ``root`` is (its journal, its rules).

    The repo's notifications are told of the revert (``reverted``, on the commit whose
    release it reverts), once per revert however often it is asked for; the rollback's
    outcome is the next apply's to tell."""
    desired, _ = load_consistent(root)

    async def run() -> RevertRun:
        async with Reconciler(root, desired, overrides=overrides, env=env,
                              stage=stage) as reconciler:
            notify = notifier(desired, root, env, reconciler.connection.gateway,
                              environment=stage.name if stage else None)
            try:
                done = await revert_with(reconciler, root, services, failures=None,
                                         pull=pull, hook=None, rollback=False,
                                         progress=progress)
                if notify is not None and done.items and done.plan is not None:
                    notify.way_back(done.plan, None, revert_way(done, by_hand=True))
                return done
            finally:
                if notify is not None:  # bounded: a receiver that is down costs drainSeconds
                    await notify.drain()

    return asyncio.run(run())


def _held_digest(desired: DesiredState, service: str, given: str) -> str:
    """The held digest of ``service`` that ``given`` names: the digest itself, or a
    prefix of it (with or without ``sha256:``) that no other hold of the service shares,
    as messages and hold file names show it."""
    digests = sorted({h.digest for h in desired.holds if h.service == service})
    if given in digests:
        return given
    bare = given.removeprefix("sha256:").lower()
    matching = [d for d in digests if bare and d.removeprefix("sha256:").startswith(bare)]
    if len(matching) > 1:
        raise EngineError(f"{safe(given, 80)} names more than one hold on "
                          f"{safe(service, 100)} ({', '.join(matching)}): give more of the "
                          "digest; nothing written", Exit.USAGE)
    return matching[0] if matching else given


def release_hold(root: Path, service: str, digest: str, *, overrides: Overrides,
                 env: Mapping[str, str],
                 stage: environments.Selected | None = None) -> tuple[str, str]:
    """``reconcile release-hold``: remove the Hold on ``service``'s ``digest`` (or a
    unique prefix of it) by a commit (the file holding it, when that is all it holds),
    landed by fast-forward. Asks the one gate first: when ``service`` pins the held
    digest, releasing it lets that pin go, so the plan of the service without the hold
    is judged as a promotion (``core.writegate``). Returns the commit and the file
    removed (relative to ``root``, the environment's directory in a pipeline)."""
    desired, provenance = load_consistent(root)
    if provenance.commit is None or provenance.dirty:
        raise EngineError(f"refusing to release a hold: {root} has no commit or has "
                          "uncommitted changes; nothing written", Exit.REFUSED_COMMIT)
    digest = _held_digest(desired, service, digest)
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
    svc = desired.service_by_name(service)
    if svc is not None and svc.release.digest == digest:
        released = desired.model_copy(update={
            "services": (svc,), "holds": tuple(h for h in desired.holds if h is not hold)})

        async def planned() -> Plan:
            async with Reconciler(root, released, overrides=overrides, env=env,
                                  stage=stage) as reconciler:
                made, _ = await reconciler.plan(released, provenance)
                return made

        try:
            judged, unknown = asyncio.run(planned()), None
        except EngineError as exc:
            judged, unknown = None, str(exc).splitlines()[0]
        refuse_write(writegate.verdict(judged, writegate.Write.RELEASE_HOLD, {service},
                                       override=stage.override if stage else None,
                                       unknown=unknown), "release the hold")
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
