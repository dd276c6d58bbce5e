"""The live snapshot: one concurrent pass over the control plane and every cluster.

Owns the sequencing of a read: the control plane's side (``controlplane.fleet``: the
services, the releases of every managed service, the grants, and -- when the repo has
routes to reconcile -- the gateway routes) and every expected
cluster's status for every managed service's ``appId`` (``probing``) -- both in flight
together -- folded into one immutable ``core.live.LiveSnapshot``. Expected clusters =
the settings' list ∪ the clusters DNS advertised ∪ every managed service's current
rollout targets, fixed for the run.

Failure policy (unknown is never absent): a control-plane failure for one service is a
``ReadFailure`` in the snapshot; unreadable grants are ``grants=None`` with the reason;
a silent cluster is an observation with its reason. Only a *total* control-plane
failure -- unreachable, unauthorized, or ``getServices`` itself failing -- raises
``ControlPlaneError``, because a snapshot without any service in it would read as
"nothing exists".

Conditional resync [ext]: with a ``Memory`` (the control plane's last clean read and
its etag) and a prober kept from the last snapshot (each cluster's last complete batch
listing and its ETag), an unchanged fleet costs one control-plane request and, per
cluster, its health request and one batch request answered ``304``. Every cluster
observation carries the time it was made (``Observation.observed_at``; a ``304`` is a
fresh confirmation), which ``core.freshness`` holds against a maximum age.

Issue 34: for a repo whose services are held to checks (``kind: Verification``), the
snapshot's observations then carry the checks' results (``shell.verifying``), taken on
the clusters that prove the pinned digest; a repo without checks pays nothing for it.

It must not print (progress goes through ``shell.progress``), decide anything about
plans, or read the token anywhere but ``controlplane.token_from_env``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from pathlib import Path

from reconciler.core import attribution
from reconciler.core.desired import DesiredState
from reconciler.core.kinds import route as route_kind
from reconciler.core.live import LiveService, LiveSnapshot
from reconciler.core.routing import GatewayRoute
from reconciler.core.sanitize import redact
from reconciler.shell import heap, verifying
from reconciler.shell.controlplane import (
    ControlPlaneClient,
    ControlPlaneError,
    UnknownMethod,
    fleet,
    token_from_env,
)
from reconciler.shell.controlplane.fleet import Memory as Memory
from reconciler.shell.endpoints import ConfigError, Connection, required_variable, ssl_context
from reconciler.shell.keys import load_signer_key
from reconciler.shell.probing import Prober
from reconciler.shell.progress import NullProgress, Progress


def signer_key_path(conn: Connection, env: Mapping[str, str]) -> Path:
    """The signer key file named by the variable the settings name."""
    value = required_variable(env, conn.signer_key_env, what="the cluster signer key",
                              setting="mesh.signer.keyFileEnv",
                              set_to="the path of the cluster signer key")
    path = Path(value).expanduser()
    if not path.is_file():
        # Never echo the value: it may be the key itself (a hex seed pasted by mistake).
        raise ConfigError(
            f"{conn.signer_key_env} names no existing file ({len(value)} characters; the "
            "value is not shown): it must be the PATH of the signer key file, not the key")
    return path


def credential_problems(conn: Connection, env: Mapping[str, str]) -> list[str]:
    """What plan, apply and watch would stop on before sending anything, found by doing
    what they do -- the token read, the signer key file loaded and parsed, each CA bundle
    loaded -- so ``reconcile config`` vouches only for what loads. Keeps nothing it read
    (the key object is dropped at once) and never puts a secret in a message."""
    problems: list[str] = []
    try:
        token_from_env(conn, env)
    except ConfigError as exc:
        problems.append(str(exc))
    try:
        load_signer_key(signer_key_path(conn, env))
    except ConfigError as exc:
        problems.append(f"{conn.signer_key_env}: {exc}")
    for ca, what in ((conn.control_plane_ca, "controlPlane CA"), (conn.mesh_ca, "mesh CA")):
        if ca is not None:
            try:
                ssl_context(ca)
            except ConfigError as exc:
                problems.append(f"{what}: {exc}")
    return problems


async def read_routes(client: ControlPlaneClient
                      ) -> tuple[tuple[GatewayRoute, ...] | None, str | None]:
    """Issue 21: ``getGatewayClientRoutes`` -- ours, then other clients' -- or None and
    why not. Read only when the repo has routes to reconcile (``route_kind.relevant``): a
    failure is a ``routes_unreadable`` blocker, never "no routes"."""
    try:
        ours, theirs = await client.get_gateway_client_routes()
    except UnknownMethod:
        return None, "the control plane does not offer getGatewayClientRoutes"
    except ControlPlaneError as exc:
        return None, redact(exc.message)
    return (*ours, *theirs), None


def observe(
    desired: DesiredState,
    conn: Connection,
    *,
    env: Mapping[str, str],
    progress: Progress | None = None,
) -> LiveSnapshot:
    """Synchronous entry point: ``observe_async`` in a fresh event loop."""
    return asyncio.run(observe_async(desired, conn, env=env, progress=progress))


async def observe_async(
    desired: DesiredState,
    conn: Connection,
    *,
    env: Mapping[str, str],
    progress: Progress | None = None,
    prober: Prober | None = None,
    client: ControlPlaneClient | None = None,
    memory: Memory | None = None,
    verifier: verifying.Verifier | None = None,
) -> LiveSnapshot:
    """One snapshot. ``prober``/``client`` may be shared by a caller already in a loop
    (apply, watch: the DNS answer, the per-cluster tokens and the clusters' ETags then
    survive between snapshots); when omitted they are created and closed here.
    ``memory`` keeps the control plane's last clean read for a conditional re-read
    (the watcher keeps one across resyncs; a one-shot plan has none)."""
    # Millions of live objects built, little garbage: no cyclic collection inside (see
    # ``shell.heap``; every reply's response is released once read, so none waits for it).
    try:
        with heap.bulk():
            snapshot = await _observe(desired, conn, env=env, progress=progress,
                                      prober=prober, client=client, memory=memory)
    finally:
        # What the pass left in cycles (a request cancelled at its deadline: its
        # connection) is collected now, while the event loop still runs, not at exit;
        # then what the pass freed goes back to the system (``heap.trim``).
        heap.sweep()
        heap.trim()
    if not verifying.held(desired):
        return snapshot  # no service is held to checks: nothing more is asked
    # Issue 34: the checks, on the clusters this snapshot shows running each pinned
    # digest; their results ride on the observations, where the judge reads them.
    own = verifier is None
    if verifier is None:
        verifier = verifying.Verifier(conn, desired.settings.verification.prometheus
                                      if desired.settings.verification else None)
    try:
        return await verifier.verify(desired, snapshot)
    finally:
        if own:
            await verifier.aclose()


async def _observe(
    desired: DesiredState,
    conn: Connection,
    *,
    env: Mapping[str, str],
    progress: Progress | None,
    prober: Prober | None,
    client: ControlPlaneClient | None,
    memory: Memory | None,
) -> LiveSnapshot:
    progress = progress or NullProgress()
    taken_at = int(time.time() * 1000)
    own_client = client is None
    own_prober = prober is None
    if client is None:
        client = ControlPlaneClient(conn, token=token_from_env(conn, env))
    try:
        if prober is None:
            prober = Prober(conn, signer_key=signer_key_path(conn, env))
        try:
            app_ids = list(dict.fromkeys(s.app_id for s in desired.services))
            probe_task = asyncio.create_task(prober.observe_apps(app_ids, progress=progress))
            wants_routes = route_kind.relevant(desired)
            # With a memory, the routes are read after the fleet (see ``Memory.routes``).
            routes_task = asyncio.create_task(read_routes(client)) \
                if wants_routes and memory is None else None
            # What the memory held before this read: ``fleet.read`` returns that same
            # object only when the control plane said {notModified}.
            before = memory.fleet if memory is not None else None
            try:
                read = await fleet.read(
                    client, list(dict.fromkeys(s.service_id for s in desired.services)),
                    progress, memory)
            except BaseException:
                # A total control-plane failure ends the snapshot; stop probing too.
                probe_task.cancel()
                if routes_task is not None:
                    routes_task.cancel()
                await asyncio.gather(probe_task, *([routes_task] if routes_task else []),
                                     return_exceptions=True)
                raise
            routes, routes_error = await routes_task if routes_task is not None \
                else (None, None)
            if wants_routes and memory is not None:
                if before is not None and read is before and memory.routes is not None:
                    routes = memory.routes  # nothing changed since they were read
                else:
                    routes, routes_error = await read_routes(client)
                memory.routes = routes if memory.fleet is read else None
            observations = await probe_task
            heap.trim()  # the clusters' pages and texts, freed between what is kept
            mesh = await prober.resolve()
        finally:
            if own_prober:
                await prober.aclose()
    finally:
        if own_client:
            await client.aclose()
        progress.close()

    # Rollout targets join the expected set; a target no address named needs no I/O to
    # be known silent, so the rows are completed here rather than probed again.
    targets = [
        cluster
        for service in read.services.values() if isinstance(service, LiveService)
        and service.deployment is not None
        for cluster in service.deployment.target_cluster_ids
    ]
    mesh, observations = attribution.with_targets(mesh, observations, targets)

    return LiveSnapshot(
        taken_at=taken_at,
        control_plane_url=redact(conn.control_plane_url),  # a query may hold a token
        services=read.services,
        grants=read.grants,
        grants_error=read.grants_error,
        routes=routes,
        routes_error=routes_error,
        app_ids=read.app_ids,
        mesh=mesh,
        observations=observations,
    )
