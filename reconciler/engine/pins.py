"""``reconcile pin``: working tree → releases → resolve → rewrite → the plan of that
service; and ``pin --check`` (``check_pins``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path

from reconciler.core import pinning as pin_rules
from reconciler.core.cpcodes import ControlPlaneCode
from reconciler.core.desired import DesiredState, Service
from reconciler.core.live import (
    ImageRelease,
    LiveService,
    ReadFailure,
)
from reconciler.core.pinning import PinCheck, PinRun
from reconciler.core.planning import (
    Provenance,
)
from reconciler.core.plans import Plan, restrict
from reconciler.core.sanitize import safe
from reconciler.engine.reconciling import Reconciler, _next_step
from reconciler.engine.wiring import _declared, _pinned, connect, load_worktree
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError
from reconciler.shell import (
    environments,
)
from reconciler.shell import pinning as pin_files
from reconciler.shell.controlplane import (
    ControlPlaneClient,
    ControlPlaneError,
    fleet,
    token_from_env,
)
from reconciler.shell.endpoints import ConfigError, Connection, Overrides
from reconciler.shell.progress import NullProgress, Progress

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
