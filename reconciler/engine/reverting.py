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
)
from reconciler.core.sanitize import safe
from reconciler.engine.reconciling import Reconciler
from reconciler.engine.wayback import revert_with
from reconciler.engine.wiring import PullTarget, RevertRun, load_consistent
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError
from reconciler.shell import (
    loading,
)
from reconciler.shell import reverting as revert_git
from reconciler.shell.endpoints import Overrides
from reconciler.shell.progress import Progress


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
