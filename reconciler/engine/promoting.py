"""``reconcile promote``: the digest the previous environment proves, per service,
checked against the environment's rules and (with ``--write``) pinned.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from reconciler.core.desired import Service
from reconciler.core.planning import (
    Provenance,
)
from reconciler.core.plans import Plan
from reconciler.engine.reconciling import Reconciler, read_upstream
from reconciler.engine.wiring import Promotion, _candidate, _evidence_line, load_worktree
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError
from reconciler.shell import (
    environments,
)
from reconciler.shell import pinning as pin_files
from reconciler.shell.endpoints import Overrides
from reconciler.shell.progress import Progress


@dataclass(frozen=True)
class PromoteRun:
    environment: str
    upstream: str
    promotions: tuple[Promotion, ...]
    preview: Plan | None = None
    preview_error: str | None = None
    commit: str | None = None


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
