"""``reconcile promote``: the digest the previous environment proves, per service,
checked against the environment's rules and (with ``--write``) pinned.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Callable, Mapping, Sequence

from reconciler.core import promotion, writegate
from reconciler.core.desired import DesiredState, Service
from reconciler.core.planning import (
    Provenance,
)
from reconciler.core.plans import Plan
from reconciler.core.promoted import PromoteRun, Promotion
from reconciler.engine.reconciling import Reconciler, read_upstream
from reconciler.engine.wiring import _candidate, _evidence_line, load_worktree
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError
from reconciler.shell import (
    environments,
)
from reconciler.shell import pinning as pin_files
from reconciler.shell.endpoints import Overrides
from reconciler.shell.progress import Progress


def promote(stage: environments.Selected, services: Sequence[str] | None, *, write: bool,
            commit: bool, overrides: Overrides, env: Mapping[str, str] | None = None,
            progress: Progress | None = None,
            clock: Callable[[], float] = time.time) -> PromoteRun:
    """``reconcile promote``: read the previous environment (its commit, control plane and
    clusters), take the digest it proves for each service, splice the pin into this
    environment's file in memory (``pin``'s byte-preserving rewrite), plan this
    environment with the rewritten services (soak, windows, freezes, holds, policies:
    the environment's rules), ask the one gate (``core.writegate``) -- and only for what
    it allows, write the file (``write``) and commit it with the evidence (``commit``).
    A service the gate refuses is named with its blockers; nothing of it is written."""
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
    files: dict[str, pin_files.FileRead] = {}
    for name in names:
        digest, tag, gate, refused = _candidate(stage, upstream, name, now_ms)
        rel = desired.sources[f"Service/{name}"].path
        if services is None and refused is not None and digest is None:
            continue  # --all: a service the previous environment does not have stays
        item = Promotion(service=name, digest=digest, tag=tag, gate=gate, refused=refused,
                         path=rel)
        if refused is None:
            item, spliced = _splice(stage, upstream, item)
            if spliced is not None:
                models[name], files[name] = spliced
        done.append(item)
    preview: Plan | None = None
    preview_error: str | None = None
    if models:
        # Plan first, with the rewritten services in memory, then judge, then write.
        preview, preview_error = _plan_scoped(stage, desired, models, overrides, env,
                                              progress)
        found = writegate.verdict(preview, writegate.Write.PROMOTION, models,
                                  override=stage.override, unknown=preview_error)
        done = [_gated(item, found, files, write=write) if item.service in models else item
                for item in done]
    done = [dataclasses.replace(p, evidence=_evidence_line(stage, up.name, p)) for p in done]
    run = PromoteRun(environment=stage.name, upstream=up.name, promotions=tuple(done),
                     preview=preview, preview_error=preview_error)
    if commit and any(p.written for p in done):
        made = _commit(stage, up.name, [p for p in done if p.written])
        # The plan was made of exactly the bytes now committed: it is that commit's.
        run = dataclasses.replace(run, commit=made, preview=preview.model_copy(
            update={"commit": made}) if preview is not None else None)
    elif preview is not None and any(p.written for p in done):
        run = dataclasses.replace(run, preview=preview.model_copy(update={
            "worktree": True,
            "uncommitted": tuple(sorted(p.path or "" for p in done if p.written))}))
    return run


def _splice(stage: environments.Selected, upstream: promotion.Upstream, item: Promotion,
            ) -> tuple[Promotion, tuple[Service, pin_files.FileRead] | None]:
    """The pin of ``item`` (not refused yet: its digest and tag are known) spliced into
    this environment's service file in memory, with the same byte-preserving rewrite as
    ``pin``: the item with the file's bytes before and after, and the rewritten service
    and the file read (None, and the item refused, when the rewrite does not load)."""
    name, rel, digest, tag = item.service, item.path or "", item.digest, item.tag
    assert digest is not None and tag is not None
    facts = upstream.services[name]
    # The upstream's version belongs to the digest it pins, not to another one.
    version = facts.version if facts.pinned == digest else None
    try:
        file = pin_files.read(stage.root, rel)
        after = pin_files.rewrite(file.data, rel, name, pin_files.Values(
            digest=digest, tag=tag, version=version))
        model, problems = pin_files.candidate(rel, after, name)
    except pin_files.PinFileError as exc:
        return dataclasses.replace(item, refused=str(exc)), None
    if problems or model is None:
        return dataclasses.replace(item, refused="; ".join(
            p.render() for p in problems) or "the rewritten file does not load"), None
    return dataclasses.replace(item, before=file.data, after=after), (model, file)


def _gated(item: Promotion, found: writegate.WriteVerdict,
           files: Mapping[str, pin_files.FileRead], *, write: bool) -> Promotion:
    """One spliced service after the one gate: refused with its blockers (all of them
    when the gate could not judge: no plan, no partial trust), else written (``write``)
    when it changes the file."""
    said = found.lines() if found.unknown is not None else found.lines(item.service)
    if said:
        return dataclasses.replace(item, refused="; ".join(said))
    if not (write and item.changes):
        return item
    try:
        pin_files.write(files[item.service], item.after)
    except pin_files.PinFileError as exc:
        return dataclasses.replace(item, refused=str(exc))
    return dataclasses.replace(item, written=True)


def _commit(stage: environments.Selected, upstream: str, written: Sequence[Promotion]) -> str:
    """Commit the written files, the evidence of each promotion in the message."""
    title = (f"promote {', '.join(p.service for p in written)} to {stage.name} "
             f"from {upstream}")
    body = "\n".join(p.evidence for p in written)
    if stage.override:  # the exception the gate applied, recorded with the write
        body += f"\noverride-window: {stage.override}"
    try:
        return environments.commit_files(stage.root, [p.path or "" for p in written],
                                          f"{title}\n\n{body}\n")
    except environments.PipelineError as exc:
        raise EngineError(f"{exc}; the files are written, not committed") from exc


def _plan_scoped(stage: environments.Selected, desired: DesiredState,
                 models: Mapping[str, Service], overrides: Overrides, env: Mapping[str, str],
                 progress: Progress | None) -> tuple[Plan | None, str | None]:
    """This environment's plan of ``models`` (the rewritten services, in memory) with its
    rules, or why none could be made."""
    scoped = desired.model_copy(update={"services": tuple(
        models[s.name] for s in desired.services if s.name in models)})
    provenance = Provenance(path=str(stage.root.resolve()))

    async def planned() -> Plan:
        async with Reconciler(stage.root, scoped, overrides=overrides, env=env,
                              stage=stage) as reconciler:
            made, _ = await reconciler.plan(scoped, provenance, progress)
            return made

    try:
        return asyncio.run(planned()), None
    except EngineError as exc:
        return None, str(exc).splitlines()[0]
