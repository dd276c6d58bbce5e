"""Start, attach to, drive and stop a sandbox: the supervisor of its processes.

Owns the state directory layout (``sandbox.json`` describes a running sandbox), the choice
of ports (free ones by default: the launcher binds the listening sockets itself and hands
them to the children, so there is no window for another process to take them), the
process lifecycle (children exit when the launcher's pipe closes, unless detached), and
the ``Sandbox`` handle the tests, the CLI and ``make demo`` use: client environment,
settings document, faults, registry pushes, audit and cluster records, kill and restart.

Children never see the caller's working directory on ``sys.path``: they run as
``python -P -m ...`` (no script or working directory prepended), from the state
directory, with a ``PYTHONPATH`` stripped of empty and relative entries (an empty entry
means "the working directory"). So a ``secrets.py`` or ``typing.py`` lying where the user
typed ``reconcile sandbox up`` is never imported by a sandbox process.

Must not implement server behaviour: ``controlplane`` and ``cluster`` do, in their own
processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import reconciler.sandbox as sandbox_package
from reconciler.sandbox import (
    apps,
    controlplane,
    faults,
    pki,
    registry,
    rollouts,
    seeding,
    serving,
    store,
)
from reconciler.sandbox import cluster as cluster_mod

GATEWAY = "gateway.sandbox.test"
WALLET = "rReconcileDeployBot"
AUTH_APP_ID = "reconcile"
DEFAULT_PORT = sandbox_package.DEFAULT_PORT
DEFAULT_MESH_PORT = sandbox_package.DEFAULT_MESH_PORT
CONTROL_PLANE = faults.CONTROL_PLANE
DESCRIPTOR = "sandbox.json"
READY_TIMEOUT_S = 15.0
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


class SandboxError(RuntimeError):
    """The sandbox could not be started, attached to or driven."""


def cluster_ids(count: int) -> list[str]:
    return [f"sn{i + 1}" for i in range(count)]


def _addresses(count: int) -> dict[str, str]:
    return {cid: f"127.0.0.{i + 2}" for i, cid in enumerate(cluster_ids(count))}


def _mesh_sockets(addresses: list[str], port: int | None) -> tuple[int, list[socket.socket]]:
    """One listening socket per address, all on the same port (free on every address)."""
    for _ in range(50):
        socks: list[socket.socket] = []
        try:
            first = serving.listen_socket(addresses[0], port or 0)
            socks.append(first)
            chosen = int(first.getsockname()[1])
            for address in addresses[1:]:
                socks.append(serving.listen_socket(address, chosen))
            return chosen, socks
        except OSError as exc:
            for sock in socks:
                sock.close()
            if port:
                raise SandboxError(f"mesh port {port} is taken on one of {addresses}") from exc
    raise SandboxError("no port free on every cluster address")


@dataclass
class Sandbox:
    """A running sandbox: where it is, and how to drive it."""

    state_dir: Path
    control_plane_url: str
    gateway: str
    mesh_port: int
    addresses: dict[str, str]
    ca_file: Path
    token: str
    token_file: Path
    signer_key_file: Path
    wallet_address: str = WALLET
    auth_app_id: str = AUTH_APP_ID
    deploy_bot_token_file: Path | None = None
    #: [ext] batch reads served (docs/extensions.md); False = per-item only, like upstream.
    batch_reads: bool = True
    #: [ext] greenfield creation offered (docs/extensions.md); False = like upstream.
    greenfield: bool = True
    _procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)
    _argv: dict[str, list[str]] = field(default_factory=dict, repr=False)
    _pids: dict[str, int] = field(default_factory=dict, repr=False)
    #: what each started process was (``process_identity``), to tell it from a later
    #: process that reused its pid before anything signals it
    _identities: dict[str, str] = field(default_factory=dict, repr=False)
    _parent_fds: tuple[int, int] | None = field(default=None, repr=False)
    _detached: bool = field(default=False, repr=False)
    #: attached to a sandbox that runs in the foreground of another ``sandbox up``
    foreground: bool = field(default=False, repr=False)

    # -- what a client needs ---------------------------------------------------------

    @property
    def control_plane_port(self) -> int:
        return int(self.control_plane_url.rsplit(":", 1)[1])

    @property
    def clusters(self) -> list[str]:
        return list(self.addresses)

    @property
    def metrics_token_file(self) -> Path:
        """The Bearer token every cluster's ``/metrics`` wants (``sandbox.apps``)."""
        return self.state_dir / apps.METRICS_TOKEN_FILE

    def app_url(self, cluster: str, app: str, path: str = "/") -> str:
        """The direct address of ``app`` through ``cluster`` (``sandbox.apps``): send it
        with SNI and ``Host`` the gateway hostname."""
        return (f"https://{self.addresses[cluster]}:{self.mesh_port}"
                f"{apps.DIRECT_PREFIX}{app}{path if path != '/' else ''}")

    def advertised(self) -> dict[str, str]:
        """The gateway's A records: every cluster without a ``dns-missing`` fault."""
        current = faults.read_all(self.state_dir)
        return {cid: addr for cid, addr in self.addresses.items()
                if "dns-missing" not in current.get(cid, {})}

    def resolve_arg(self) -> str:
        return f"{self.gateway}:{self.mesh_port}:{','.join(self.advertised().values())}"

    def env(self) -> dict[str, str]:
        return {
            "RECONCILE_TOKEN": self.token,
            "RECONCILE_SIGNER_KEY": str(self.signer_key_file),
            "RECONCILE_CONTROL_PLANE_URL": self.control_plane_url,
            "RECONCILE_CA_FILE": str(self.ca_file),
            "RECONCILE_GATEWAY": self.gateway,
            "RECONCILE_RESOLVE": self.resolve_arg(),
        }

    def settings_yaml(self, **policy: Any) -> str:
        """A ``Settings`` document for this sandbox (absolute ``caFile``).

        ``policy`` keys: ``interval_seconds`` / ``intervalSeconds``, ``attempts``, ``prune``,
        or a whole ``convergence`` mapping.
        """
        convergence = dict(policy.pop("convergence", {}))
        convergence.setdefault(
            "intervalSeconds",
            policy.pop("interval_seconds", policy.pop("intervalSeconds", 0.2)))
        convergence.setdefault("attempts", policy.pop("attempts", 50))
        doc: dict[str, Any] = {
            "apiVersion": "reconcile/v1",
            "kind": "Settings",
            "controlPlane": {"url": self.control_plane_url, "caFile": str(self.ca_file),
                             "tokenEnv": "RECONCILE_TOKEN"},
            "mesh": {"gateway": self.gateway, "port": self.mesh_port,
                     "caFile": str(self.ca_file),
                     "resolve": list(self.advertised().values()),
                     "clusters": self.clusters,
                     "signer": {"walletAddress": self.wallet_address, "appId": self.auth_app_id,
                                "keyFileEnv": "RECONCILE_SIGNER_KEY"}},
            "policy": {"convergence": convergence, **policy},
        }
        # JSON is YAML: no emitter needed, and no quoting surprises.
        return json.dumps(doc, indent=2) + "\n"

    # -- driving it --------------------------------------------------------------------

    def fault(self, target: str, kind: str, *, on: bool = True, **params: Any) -> None:
        if target != CONTROL_PLANE and target not in self.addresses:
            raise SandboxError(f"unknown fault target {target!r}")
        was_down = self._down_clusters()
        try:
            faults.set_fault(self.state_dir, target, kind, on=on, params=params)
        except ValueError as exc:
            raise SandboxError(str(exc)) from exc
        now_down = self._down_clusters()
        self._wait_listening(was_down - now_down)
        self._wait_listening(now_down - was_down, listening=False)

    def clear_faults(self) -> None:
        was_down = self._down_clusters()
        faults.clear(self.state_dir)
        self._wait_listening(was_down)

    def _down_clusters(self) -> set[str]:
        current = faults.read_all(self.state_dir)
        return {cid for cid in self.addresses if "down" in current.get(cid, {})}

    def _wait_listening(self, clusters: set[str], *, listening: bool = True,
                        timeout: float = 10.0) -> None:
        """A cluster closes or reopens its socket asynchronously when ``down`` changes;
        return once it has (connections accepted again, or refused), so the next request
        does not race the transition."""
        deadline = time.monotonic() + timeout
        for cid in sorted(clusters):
            while True:
                try:
                    socket.create_connection((self.addresses[cid], self.mesh_port),
                                             timeout=1.0).close()
                    accepted = True
                except OSError:
                    accepted = False
                if accepted == listening:
                    break
                if time.monotonic() > deadline:
                    state = "listen again" if listening else "stop listening"
                    raise SandboxError(f"{cid} did not {state} after 'down' changed")
                time.sleep(0.05)

    def set_egress_allowlist(self, cluster_id: str, entries: list[str] | None) -> None:
        """The cluster operator's egress allow-list (``host`` or ``host:port``); None = all."""
        if entries is None:
            self.fault(cluster_id, "egress-allow", on=False)
        else:
            self.fault(cluster_id, "egress-allow", hosts=",".join(entries))

    def push(self, service_name: str, tag: str, *, repository: str | None = None,
             platforms: tuple[str, ...] | list[str] | None = None,
             missing_manifests: tuple[str, ...] | list[str] = (),
             evidence: str | tuple[str, ...] | list[str] = "complete",
             evidence_subject: str | None = None) -> str:
        """The registry receives a new OCI index under ``tag``; returns its digest.

        ``repository`` is needed for a service the control plane does not have (the index
        is only in the registry then); a service it has observes the push as a new
        release. ``platforms`` default to linux/amd64 + linux/arm64; ``missing_manifests``
        lists platforms whose manifest is absent; ``evidence`` is ``complete``, ``none``
        or the kinds published; ``evidence_subject`` binds that evidence to another digest.
        """
        conn = store.connect(self.state_dir)
        try:
            with store.transaction(conn):
                try:
                    publication = registry.Publication(
                        platforms=tuple(platforms or registry.DEFAULT_PLATFORMS),
                        missing_manifests=tuple(missing_manifests),
                        evidence=registry.parse_evidence(evidence),
                        evidence_subject=evidence_subject)
                    index, release = registry.push(conn, service_name, tag,
                                                   repository=repository,
                                                   publication=publication)
                except registry.RegistryError as exc:
                    raise SandboxError(str(exc)) from exc
                store.audit(conn, "registry", "push",
                            {"service": service_name, "tag": tag,
                             "repository": index["repository"], "digest": index["digest"],
                             "releaseId": release["id"] if release else None}, "ok")
        finally:
            conn.close()
        return str(index["digest"])

    def registry_index(self, digest: str) -> dict[str, Any] | None:
        """What the registry holds for ``digest`` (platforms, attestations), or None."""
        conn = store.connect(self.state_dir)
        try:
            return registry.find(conn, digest)
        finally:
            conn.close()

    def release_yaml(self, digest: str, tag: str) -> str:
        """The ``release:`` block (with ``evidence:``) for the index ``digest`` under ``tag``."""
        index = self.registry_index(digest)
        if index is None:
            raise SandboxError(f"the registry holds no index {digest}")
        return registry.release_yaml(index, tag)

    def seed(self, seed: dict[str, Any]) -> None:
        """Replace services, releases and grants (clusters follow after their delay)."""
        conn = store.connect(self.state_dir)
        try:
            with store.transaction(conn):
                seeding.apply_seed(conn, seed)
        finally:
            conn.close()

    def audit(self, source: str = CONTROL_PLANE) -> list[dict[str, Any]]:
        if source in (CONTROL_PLANE, "registry"):
            return store.read_audit(self.state_dir, source)
        if source not in self.addresses:
            raise SandboxError(f"unknown audit source {source!r}")
        return cluster_mod.read_audit(self.state_dir, source)

    def cluster_status(self) -> dict[str, dict[str, Any]]:
        """Cluster id -> app id -> the runtime record that cluster keeps (no faults applied)."""
        out: dict[str, dict[str, Any]] = {}
        for cid in self.addresses:
            apps = cluster_mod.read_runtime(self.state_dir, cid)
            out[cid] = {app: {k: v for k, v in rec.items() if not k.startswith("_")}
                        for app, rec in apps.items()}
        return out

    def rollout_statuses(self) -> dict[str, dict[str, Any]]:
        """Service id -> the aggregate ``IImageRolloutStatus`` the control plane reports."""
        conn = store.connect(self.state_dir)
        try:
            out = {}
            for service in store.all_services(conn):
                plan = service["data"].get("imageDeployment")
                if plan:
                    out[service["id"]] = rollouts.aggregate(
                        plan, store.load_reports(conn, service["id"]))
            return out
        finally:
            conn.close()

    def wait_settled(self, timeout: float = 15.0) -> dict[str, dict[str, Any]]:
        """Wait until no rollout is pending/deploying and every running cluster has acted
        on the faults set so far (an egress allow-list, a stuck or refused digest are
        applied by its loop a convergence delay later); returns the statuses."""
        deadline = time.monotonic() + timeout
        while True:
            statuses = self.rollout_statuses()
            moving = [sid for sid, s in statuses.items() if s["status"] in
                      ("pending", "deploying", "verifying", "rolling-back")]
            unsettled = self._unsettled_clusters()
            if not moving and not unsettled:
                return statuses
            if time.monotonic() > deadline:
                if moving:
                    raise SandboxError(f"rollouts still in flight: {statuses}")
                raise SandboxError("clusters have not caught up with the control plane's "
                                   f"revision and the faults set: {unsettled}")
            time.sleep(0.05)

    def _unsettled_clusters(self) -> list[str]:
        """Running clusters whose last converge saw an older control-plane revision or
        faults file, or left an app or a route swap due. A cluster that is down, stopped
        or not this process's to watch is skipped, and all of them while the control
        plane is not running (a cluster's loop acts after its sync with the control
        plane)."""
        plane = self._procs.get(CONTROL_PLANE)
        if plane is None or plane.poll() is not None:
            return []
        current = faults.stamp(self.state_dir)
        conn = store.connect(self.state_dir)
        try:
            version = int(store.get_meta(conn, "version", "0") or 0)
        finally:
            conn.close()
        down = self._down_clusters()
        out = []
        for cid in self.addresses:
            proc = self._procs.get(cid)
            if cid in down or proc is None or proc.poll() is not None:
                continue
            mark = cluster_mod.read_settled(self.state_dir, cid)
            if mark.get("version") != version or mark.get("faults") != current \
                    or mark.get("pending"):
                out.append(cid)
        return out

    # -- processes ---------------------------------------------------------------------

    def pid(self, component: str) -> int | None:
        proc = self._procs.get(component)
        return proc.pid if proc is not None else self._pids.get(component)

    def owns(self, component: str) -> tuple[bool, str]:
        """Whether ``component``'s recorded pid is still the process this sandbox started
        (its start time, or for a descriptor that has none, its command line), and if
        not, why -- checked before anything is signalled: a pid reused by another
        process is never signalled."""
        proc = self._procs.get(component)
        if proc is not None:
            return (proc.poll() is None, "" if proc.poll() is None else "it has exited")
        pid = self._pids.get(component)
        if pid is None:
            return False, "it is not running (no pid recorded)"
        current = process_identity(pid)
        if current is None:
            return False, f"pid {pid} has exited"
        recorded = self._identities.get(component)
        if recorded:
            if current == recorded:
                return True, ""
            return False, (f"pid {pid} is another process now (it started at another "
                           "time than the one the sandbox started); not signalled")
        if _command_line_is(pid, self._argv.get(component), self.state_dir):
            return True, ""
        return False, (f"pid {pid} is not the sandbox's {component} (its command line "
                       "differs); not signalled")

    def stop_component(self, component: str, timeout: float = 5.0) -> None:
        """Stop one component (an outage to rehearse), verified first (``owns``);
        ``SandboxError`` when it is unknown or not this sandbox's running process."""
        if component not in self._argv:
            raise SandboxError(f"unknown component {component!r}; one of: "
                               f"{', '.join(self._argv)}")
        ours, why = self.owns(component)
        if not ours:
            raise SandboxError(f"{component} is not running as this sandbox's process: {why}")
        pid = self.pid(component)
        assert pid is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while process_identity(pid) is not None and time.monotonic() < deadline:
            proc = self._procs.get(component)
            if proc is not None and proc.poll() is not None:
                break
            time.sleep(0.05)
        if process_identity(pid) is not None and self.owns(component)[0]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._procs.pop(component, None)
        self._pids.pop(component, None)
        self._identities.pop(component, None)
        _write_descriptor(self)

    def start_component(self, component: str) -> None:
        """Start a stopped component again on its own address and port (detached: it
        outlives this process, like the rest of a detached sandbox)."""
        if component not in self._argv:
            raise SandboxError(f"unknown component {component!r}; one of: "
                               f"{', '.join(self._argv)}")
        if self.owns(component)[0]:
            raise SandboxError(f"{component} is already running (pid {self.pid(component)})")
        proc = self._launch(component)
        if self._detached:
            self._pids[component] = proc.pid  # attached: recorded, not waited for
        else:
            self._procs[component] = proc
        self._identities[component] = process_identity(proc.pid) or ""
        _write_descriptor(self)

    def _launch(self, component: str) -> subprocess.Popen[bytes]:
        """Spawn ``component`` on its own address and port and wait until it is ready
        (``start`` after ``stop``, and ``restart``)."""
        if component == CONTROL_PLANE:
            sock = serving.listen_socket("127.0.0.1", self.control_plane_port)
        else:
            sock = serving.listen_socket(self.addresses[component], self.mesh_port)
        try:
            proc = _spawn(self, component, sock, adopt=False)
        finally:
            sock.close()
        _wait_ready({component: proc}, self.state_dir)
        return proc

    def kill(self, component: str, sig: int = signal.SIGKILL) -> None:
        pid = self.pid(component)
        if pid is None:
            raise SandboxError(f"unknown component {component!r}")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        proc = self._procs.get(component)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)

    def restart(self, component: str) -> None:
        """Start ``component`` again (after ``kill``), on the same address and port."""
        if component not in self._argv:
            raise SandboxError(f"unknown component {component!r}")
        self.kill(component, signal.SIGTERM)
        proc = self._launch(component)
        self._procs[component] = proc
        self._identities[component] = process_identity(proc.pid) or ""
        _write_descriptor(self)

    def stop(self) -> list[str]:
        """Stop every process; a recorded pid that is no longer this sandbox's process
        (``owns``) is not signalled: what was skipped, and why, is returned."""
        components = list(self._procs) or list(self._pids)
        skipped: list[str] = []
        signalled: list[int] = []
        for component in components:
            with contextlib.suppress(ProcessLookupError, TypeError):
                pid = self.pid(component)
                if pid is None:
                    continue
                ours, why = self.owns(component)
                if not ours:
                    if process_identity(pid) is not None:
                        skipped.append(f"{component}: {why}")
                    continue
                os.kill(pid, signal.SIGTERM)
                if component not in self._procs:
                    signalled.append(pid)
        deadline = time.monotonic() + 3
        # A detached sandbox's processes are not our children: ``down`` returns once they
        # are gone (or killed at the deadline), not merely signalled.
        for pid in signalled:
            while alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for component in components:
            proc = self._procs.get(component)
            if proc is None:
                continue
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
            if proc.stdout is not None:
                proc.stdout.close()
        if self._parent_fds is not None:
            for fd in self._parent_fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._parent_fds = None
        self._procs.clear()
        self._pids.clear()
        self._identities.clear()
        with contextlib.suppress(FileNotFoundError):
            descriptor = json.loads((self.state_dir / DESCRIPTOR).read_text())
            descriptor["pids"] = {}
            descriptor["identities"] = {}
            (self.state_dir / DESCRIPTOR).write_text(json.dumps(descriptor, indent=2))
        return skipped

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _child_pythonpath(inherited: str | None) -> str:
    """The package root, then the inherited entries that are absolute paths: no empty
    entry (Python reads it as the working directory), no relative one, no duplicates."""
    entries = [_PACKAGE_ROOT]
    for entry in (inherited or "").split(os.pathsep):
        if entry and os.path.isabs(entry) and entry not in entries:
            entries.append(entry)
    return os.pathsep.join(entries)


def _python_argv(module: str) -> list[str]:
    """``python -P -m module``: ``-P`` keeps the working directory off ``sys.path``."""
    return [sys.executable, "-P", "-m", module]


def _spawn(sandbox: Sandbox, component: str, sock: socket.socket, *,
           adopt: bool) -> subprocess.Popen[bytes]:
    argv = [*sandbox._argv[component], "--fd", str(sock.fileno())]
    pass_fds = [sock.fileno()]
    if sandbox._parent_fds is not None:
        argv += ["--parent-fd", str(sandbox._parent_fds[0])]
        pass_fds.append(sandbox._parent_fds[0])
    if adopt:
        argv.append("--adopt")
    env = {**os.environ, "PYTHONPATH": _child_pythonpath(os.environ.get("PYTHONPATH"))}
    log_dir = sandbox.state_dir / "logs"
    log_dir.mkdir(exist_ok=True)
    with open(log_dir / f"{component}.log", "ab") as log:
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
            pass_fds=pass_fds, env=env, cwd=sandbox.state_dir,
            start_new_session=sandbox._detached)


def _wait_ready(procs: dict[str, subprocess.Popen[bytes]], state_dir: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    waiting = {p.stdout.fileno(): (name, p) for name, p in procs.items() if p.stdout}
    while waiting:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise SandboxError(f"not ready in {READY_TIMEOUT_S}s: "
                               f"{sorted(n for n, _ in waiting.values())}")
        readable, _, _ = select.select(list(waiting), [], [], remaining)
        for fd in readable:
            name, proc = waiting.pop(fd)
            line = proc.stdout.readline() if proc.stdout else b""
            if not line.startswith(b"READY"):
                proc.wait(timeout=5)
                log = (state_dir / "logs" / f"{name}.log").read_text(errors="replace")
                raise SandboxError(f"{name} failed to start:\n{log[-2000:]}")


def _write_descriptor(sandbox: Sandbox, extra: dict[str, Any] | None = None) -> None:
    path = sandbox.state_dir / DESCRIPTOR
    try:
        descriptor = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        descriptor = {}
    descriptor.update(extra or {})
    descriptor.update({
        "controlPlaneUrl": sandbox.control_plane_url,
        "gateway": sandbox.gateway,
        "meshPort": sandbox.mesh_port,
        "addresses": sandbox.addresses,
        "detached": sandbox._detached,
        "argv": sandbox._argv,
        "pids": {name: sandbox.pid(name) for name in sandbox._argv},
        "identities": {name: sandbox._identities[name] for name in sandbox._argv
                       if sandbox.pid(name) is not None and name in sandbox._identities},
        "batchReads": sandbox.batch_reads,
        "greenfield": sandbox.greenfield,
    })
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(descriptor, indent=2))
    tmp.replace(path)


def load_seed(path: Path) -> dict[str, Any]:
    """A seed document from YAML or JSON."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        data = json.loads(text)
    else:
        from ruamel.yaml import YAML

        data = YAML(typ="safe").load(text)
    if not isinstance(data, dict):
        raise SandboxError(f"{path}: a seed is a mapping")
    return data


def prepare(state_dir: Path, *, clusters: list[str], seed: Path | None, gateway: str) -> None:
    """Key material, the database, users and the seed (the seed only on a fresh state)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    pki.ensure_all(state_dir, gateway=gateway)
    secret_file = state_dir / controlplane.SECRET_FILE
    if not secret_file.exists():
        secret_file.write_text(secrets.token_hex(24) + "\n")
        secret_file.chmod(0o600)
    # Prometheus reads it as a credentials file: its own secret, never the clusters' one.
    metrics_token = state_dir / apps.METRICS_TOKEN_FILE
    if not metrics_token.exists():
        metrics_token.touch(mode=0o600)
        metrics_token.write_text(secrets.token_hex(24) + "\n")
    fresh = not (state_dir / store.DB_FILE).exists()
    conn = store.connect(state_dir)
    try:
        store.initialise(conn)
        with store.transaction(conn):
            store.set_meta(conn, "clusters", json.dumps(clusters))
            if fresh:
                seeding.create_users(conn, state_dir)
                seeding.apply_seed(conn, load_seed(seed) if seed else seeding.DEFAULT_SEED)
    finally:
        conn.close()


def start(state_dir: Path, *, clusters: int = 3, port: int | None = None,
          mesh_port: int | None = None, converge_delay_ms: int | dict[str, int] = 300,
          seed: Path | None = None, latency_ms: int = 0, detach: bool = False,
          identity_ttl_ms: int = 3_600_000, token_ttl_ms: int = 900_000,
          gateway: str = GATEWAY, batch_reads: bool = True,
          greenfield: bool = True) -> Sandbox:
    """Start a control plane and ``clusters`` clusters; returns once all of them serve.

    ``port``/``mesh_port`` None pick free ports. ``latency_ms`` switches the ``latency``
    fault on everywhere. Without ``detach`` the processes die with this one.
    ``batch_reads=False`` serves no [ext] batch reads (docs/extensions.md), like upstream.
    ``greenfield=False`` offers no [ext] greenfield creation: its two methods are unknown
    and the preflight says GREENFIELD_EXECUTION_UNAVAILABLE (docs/extensions.md).
    """
    if not 1 <= clusters <= 200:
        raise SandboxError("clusters must be between 1 and 200")
    state_dir = state_dir.resolve()
    ids = cluster_ids(clusters)
    addresses = _addresses(clusters)
    prepare(state_dir, clusters=ids, seed=seed, gateway=gateway)
    faults.clear(state_dir)
    cp_sock = serving.listen_socket("127.0.0.1", port if port is not None else 0)
    try:
        chosen_mesh, mesh_socks = _mesh_sockets(list(addresses.values()), mesh_port)
    except BaseException:
        cp_sock.close()
        raise
    cp_port = int(cp_sock.getsockname()[1])
    sandbox = Sandbox(
        state_dir=state_dir,
        control_plane_url=f"https://127.0.0.1:{cp_port}",
        gateway=gateway,
        mesh_port=chosen_mesh,
        addresses=addresses,
        ca_file=state_dir / pki.CA_FILE,
        token=(state_dir / "token").read_text().strip(),
        token_file=state_dir / "token",
        signer_key_file=state_dir / pki.SIGNER_KEY_FILE,
        deploy_bot_token_file=state_dir / "token-deploy-bot",
        batch_reads=batch_reads,
        greenfield=greenfield,
    )
    sandbox._detached = detach
    if not detach:
        read_end, write_end = os.pipe()
        sandbox._parent_fds = (read_end, write_end)
    sandbox._argv[CONTROL_PLANE] = [
        *_python_argv("reconciler.sandbox.controlplane"), "--state", str(state_dir),
        "--port", str(cp_port), "--identity-ttl-ms", str(identity_ttl_ms),
        *([] if batch_reads else ["--no-batch-reads"]),
        *([] if greenfield else ["--no-greenfield"])]
    for cid, address in addresses.items():
        delay = (converge_delay_ms.get(cid, 300) if isinstance(converge_delay_ms, dict)
                 else converge_delay_ms)
        sandbox._argv[cid] = [
            *_python_argv("reconciler.sandbox.cluster"), "--state", str(state_dir),
            "--id", cid, "--address", address, "--port", str(chosen_mesh),
            "--gateway", gateway, "--control-plane", f"127.0.0.1:{cp_port}",
            "--delay-ms", str(delay), "--token-ttl-ms", str(token_ttl_ms),
            "--wallet", WALLET, "--auth-app-id", AUTH_APP_ID,
            *([] if batch_reads else ["--no-batch-reads"])]
    if latency_ms:
        for target in [CONTROL_PLANE, *ids]:
            sandbox.fault(target, "latency", ms=latency_ms)
    socks = {CONTROL_PLANE: cp_sock, **dict(zip(ids, mesh_socks, strict=True))}
    try:
        for component, sock in socks.items():
            adopt = component != CONTROL_PLANE and not (
                cluster_mod.cluster_dir(state_dir, component) / "runtime.json").exists()
            sandbox._procs[component] = _spawn(sandbox, component, sock, adopt=adopt)
        for sock in socks.values():
            sock.close()
        _wait_ready(dict(sandbox._procs), state_dir)
        for component, proc in sandbox._procs.items():
            sandbox._identities[component] = process_identity(proc.pid) or ""
    except BaseException:
        for sock in socks.values():
            sock.close()
        sandbox.stop()
        raise
    _write_descriptor(sandbox)
    return sandbox


def attach(state_dir: Path) -> Sandbox:
    """A handle on a sandbox started elsewhere (``reconcile sandbox up --detach``)."""
    state_dir = state_dir.resolve()
    try:
        descriptor = json.loads((state_dir / DESCRIPTOR).read_text())
    except FileNotFoundError as exc:
        raise SandboxError(f"no sandbox in {state_dir} (run: reconcile sandbox up)") from exc
    sandbox = Sandbox(
        state_dir=state_dir,
        control_plane_url=descriptor["controlPlaneUrl"],
        gateway=descriptor["gateway"],
        mesh_port=int(descriptor["meshPort"]),
        addresses=dict(descriptor["addresses"]),
        ca_file=state_dir / pki.CA_FILE,
        token=(state_dir / "token").read_text().strip(),
        token_file=state_dir / "token",
        signer_key_file=state_dir / pki.SIGNER_KEY_FILE,
        deploy_bot_token_file=state_dir / "token-deploy-bot",
        batch_reads=bool(descriptor.get("batchReads", True)),
        greenfield=bool(descriptor.get("greenfield", True)),
    )
    sandbox._argv = {k: list(v) for k, v in descriptor.get("argv", {}).items()}
    sandbox._pids = {k: int(v) for k, v in descriptor.get("pids", {}).items() if v}
    sandbox._identities = {k: str(v) for k, v in (descriptor.get("identities") or {}).items()
                           if v}
    sandbox._detached = True
    #: a foreground sandbox's launcher owns its children (they die with it)
    sandbox.foreground = not bool(descriptor.get("detached", True))
    return sandbox


def process_identity(pid: int) -> str | None:
    """What tells process ``pid`` from a later one that reuses the number: on Linux the
    boot id and the start time in clock ticks (``/proc/PID/stat`` field 22), elsewhere
    ``ps -o lstart=``; None when no such process exists."""
    stat_file = Path(f"/proc/{pid}/stat")
    try:
        raw = stat_file.read_bytes()
    except FileNotFoundError:
        return None
    except OSError:
        raw = b""
    if raw:
        fields = raw[raw.rfind(b")") + 2:].split()
        boot = ""
        with contextlib.suppress(OSError):
            boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        # fields[0] is field 3 (state); a zombie has exited as far as we are concerned
        if fields and fields[0] == b"Z":
            return None
        return f"linux:{boot}:{fields[19].decode()}" if len(fields) > 19 else None
    try:
        done = subprocess.run(["ps", "-o", "lstart=", "-p", str(pid)], capture_output=True,
                              text=True, timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return f"ps:{done.stdout.strip()}" if done.returncode == 0 and done.stdout.strip() \
        else None


def _command_line_is(pid: int, argv: list[str] | None, state_dir: Path) -> bool:
    """For a descriptor written before identities were recorded: whether ``pid`` runs
    the component's module for this state directory."""
    if not argv:
        return False
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    said = [w.decode(errors="replace") for w in words]
    module = argv[argv.index("-m") + 1] if "-m" in argv else None
    return module is not None and module in said and str(state_dir) in said


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
