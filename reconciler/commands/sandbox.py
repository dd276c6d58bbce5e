"""``reconcile sandbox``: run the local control plane and cluster mesh, and drive it.

Owns the command line of the sandbox (``up``, ``down``, ``stop``/``start COMPONENT``,
``status``, ``fault``, ``push``, ``seed``) and what ``up`` prints for clients. Must not
implement any server behaviour: everything goes through ``reconciler.sandbox.launcher``.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reconciler.core.sanitize import safe
from reconciler.exitcodes import Exit
from reconciler.sandbox import DEFAULT_MESH_PORT, DEFAULT_PORT, faults

if TYPE_CHECKING:  # the servers' code (TLS included) loads when an action runs
    from reconciler.sandbox import launcher

DEFAULT_STATE = Path(".sandbox")


#: Every action takes --state and --name after it too (``reconcile sandbox up --name
#: prod``); SUPPRESS keeps the value given before ACTION when they are not repeated.
STATE_HELP = "state directory (default: .sandbox; also accepted before ACTION)"
NAME_HELP = "a named sandbox: STATE/NAME (see `reconcile sandbox --help`)"


def _action(sub: Any, name: str, **kwargs: Any) -> argparse.ArgumentParser:
    """One ``reconcile sandbox ACTION`` parser, with --state and --name."""
    parser: argparse.ArgumentParser = sub.add_parser(name, **kwargs)
    parser.add_argument("--state", type=Path, default=argparse.SUPPRESS, help=STATE_HELP)
    parser.add_argument("--name", default=argparse.SUPPRESS, metavar="NAME", help=NAME_HELP)
    return parser


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "sandbox", help="run a local control plane and cluster mesh (for trying reconcile)",
        description="A real control plane and cluster mesh on loopback, with faults.")
    parser.add_argument("--state", type=Path, default=DEFAULT_STATE,
                        help="state directory (default: .sandbox)")
    sub = parser.add_subparsers(dest="sandbox_command", metavar="ACTION", required=True,
                                help="what to do with the sandbox")

    parser.add_argument("--name", default=None, metavar="NAME",
                        help="a named sandbox (an environment: staging, prod): its state is "
                        "STATE/NAME and it listens on free ports, so several run side by "
                        "side; also accepted after ACTION")
    _add_up(sub)

    env = _action(sub, "env", help="print `export` lines for a running sandbox (for eval)",
                  description="Print only `export` lines for the sandbox in --state, so "
                  "`eval \"$(reconcile sandbox env)\"` points clients at it.")
    env.set_defaults(handler=_named(cmd_env))

    down = _action(sub, "down", help="stop a detached sandbox")
    down.set_defaults(handler=_named(cmd_down))

    for action, text in (("stop", "stop one component (the control plane or a cluster) "
                          "to rehearse an outage; its pid is verified first"),
                         ("start", "start a stopped component again, on its own address "
                          "and port")):
        component = _action(sub, action, help=text, description=text[0].upper() + text[1:]
                                   + ". COMPONENT: control-plane or a cluster id (sn1, ...).")
        component.add_argument("component", metavar="COMPONENT",
                               help="control-plane, or a cluster id such as sn1")
        component.set_defaults(handler=_named(cmd_component), component_action=action)

    status = _action(sub, "status", help="what each cluster runs, per app")
    status.set_defaults(handler=_named(cmd_status))

    _add_fault(sub)
    _add_push(sub)

    seed = _action(sub, "seed", help="replace services, releases and grants from a file")
    seed.add_argument("file", type=Path, metavar="FILE", help="the seed file (YAML or JSON)")
    seed.set_defaults(handler=_named(cmd_seed))


def _add_up(sub: Any) -> None:
    up = _action(sub, "up", help="start the sandbox",
                 description="Start a control plane and CLUSTERS clusters on loopback and "
                 "print what a client needs. With --print-env, stdout carries only `export` "
                 "lines (everything else goes to stderr) and the sandbox detaches, so "
                 "`eval \"$(reconcile sandbox up --print-env)\"` works.")
    up.add_argument("--clusters", type=int, default=3, metavar="N",
                    help="how many clusters to start, 1 to 200 (default 3)")
    up.add_argument("--detach", action="store_true",
                    help="return once started; stop it with `reconcile sandbox down`")
    up.add_argument("--print-env", action="store_true",
                    help="print only `export` lines on stdout, for eval (implies --detach)")
    up.add_argument("--port", type=int, default=DEFAULT_PORT,
                    help=f"control-plane port on 127.0.0.1, 0 for a free one "
                    f"(default {DEFAULT_PORT})")
    up.add_argument("--mesh-port", type=int, default=DEFAULT_MESH_PORT,
                    help=f"the clusters' port, one address each on 127.0.0.x, 0 for a free "
                    f"one (default {DEFAULT_MESH_PORT})")
    up.add_argument("--converge-delay-ms", type=int, default=1000, metavar="MS",
                    help="how long a cluster takes to roll out a new digest (default 1000)")
    up.add_argument("--seed", type=Path, default=None, metavar="FILE",
                    help="seed file (services, releases, grants) for a fresh state "
                    "(default: the built-in seed)")
    up.add_argument("--no-greenfield", dest="greenfield", action="store_false",
                    help="offer no [ext] greenfield creation (createGreenfieldDeployment), "
                    "like the real upstream: the preflight then says "
                    "GREENFIELD_EXECUTION_UNAVAILABLE (docs/extensions.md)")
    up.add_argument("--no-batch-reads", dest="batch_reads", action="store_false",
                    help="serve no [ext] batch reads (cluster batch status route, "
                    "getServicesReleases, etags), like the real upstream "
                    "(docs/extensions.md)")
    up.set_defaults(handler=_named(cmd_up))


def _add_fault(sub: Any) -> None:
    kinds = "; ".join(f"{k}: {v}" for k, v in faults.CLUSTER_KINDS.items())
    fault = _action(sub, "fault", help="switch a fault on or off",
                    description=f"Cluster faults — {kinds}. Control plane "
                    "(target control-plane): " + ", ".join(faults.CONTROL_PLANE_KINDS))
    fault.add_argument("target", metavar="CLUSTER", help="a cluster id or control-plane")
    fault.add_argument("kind", metavar="KIND", help="the fault (listed above)")
    fault.add_argument("--off", action="store_true", help="switch the fault off")
    fault.add_argument("--param", action="append", default=[], metavar="K=V",
                       help="a fault parameter (e.g. ms=500 for latency), repeatable")
    fault.set_defaults(handler=_named(cmd_fault))


def _add_push(sub: Any) -> None:
    push = _action(
        sub, "push", help="the registry observes a new digest under a tag",
        description="Publish a new OCI index under TAG in the simulated registry and print "
        "its digest and the `release:` block (with `evidence:`) to paste into the desired "
        "state. A service the control plane has observes it as a new release; for one it "
        "does not have yet (a greenfield service), name the repository.")
    push.add_argument("service", metavar="SERVICE", help="the service (its repository)")
    push.add_argument("tag", metavar="TAG", help="the tag the new digest is observed under")
    push.add_argument("--repository", metavar="REPO", default=None,
                      help="the repository, e.g. shop/ledger (needed for a service the "
                      "control plane does not have)")
    push.add_argument("--platform", action="append", default=None, metavar="OS/ARCH",
                      help="a platform of the index, repeatable (default linux/amd64 and "
                      "linux/arm64)")
    push.add_argument("--missing-manifest", action="append", default=[], metavar="OS/ARCH",
                      help="a platform whose manifest is absent from the registry, repeatable")
    push.add_argument("--evidence", default="complete", metavar="WHICH",
                      help="release evidence published: complete (default), none, or a comma "
                      "list of kinds (provenance,sbom,signature,vulnerability-policy,"
                      "release-authorization)")
    push.add_argument("--evidence-subject", default=None, metavar="DIGEST",
                      help="bind the published evidence to this other digest (sha256:...)")
    push.set_defaults(handler=_named(cmd_push))


def describe(sb: launcher.Sandbox) -> str:
    """What a client needs, including ``export`` lines (the token itself is not printed)."""
    return "\n".join([*human_lines(sb), "", "# for clients:", *export_lines(sb)])


def human_lines(sb: launcher.Sandbox) -> list[str]:
    """Where everything is, for a person to read."""
    return [
        f"control plane   {sb.control_plane_url}/typedrequest",
        f"gateway         {sb.gateway} port {sb.mesh_port}",
        f"--resolve       {sb.resolve_arg()}",
        *(f"  {cid:<13} {addr}" for cid, addr in sb.addresses.items()),
        f"CA file         {sb.ca_file}",
        f"token file      {sb.token_file}  (admin)",
        f"deploy-bot      {sb.deploy_bot_token_file}  (non-admin)",
        f"signer key      {sb.signer_key_file}  (wallet {sb.wallet_address}, "
        f"appId {sb.auth_app_id})",
        f"batch reads     {'on' if sb.batch_reads else 'off (per-item only, like upstream)'}",
        f"greenfield      {'on' if sb.greenfield else 'off (no creation, like upstream)'}",
    ]


def export_lines(sb: launcher.Sandbox) -> list[str]:
    """Only what ``eval`` takes: ``export NAME=VALUE`` lines, shell-quoted; the token is
    read from its file when evaluated, so it is never printed."""
    lines = [f"export RECONCILE_TOKEN=\"$(cat {shlex.quote(str(sb.token_file))})\""]
    for name, value in sb.env().items():
        if name != "RECONCILE_TOKEN":
            lines.append(f"export {name}={shlex.quote(value)}")
    return lines


def _named(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """``--name NAME``: the sandbox in STATE/NAME (issue 19: one per environment)."""

    def run(args: argparse.Namespace) -> int:
        name = getattr(args, "name", None)
        if name is not None:
            if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,30}", name):
                print(f"reconcile sandbox: --name {name!r}: a-z, 0-9 and '-'", file=sys.stderr)
                return Exit.USAGE
            args.state = Path(args.state) / name
        return handler(args)

    return run


def named_settings(sb: launcher.Sandbox, name: str) -> str:
    """A Settings document for the named sandbox: its own token and signer-key variables
    (``RECONCILE_TOKEN_<NAME>``), so two environments' sandboxes are used side by side
    with no connection override (which would apply to both)."""
    doc = json.loads(sb.settings_yaml())
    suffix = "_" + name.upper().replace("-", "_")
    doc["controlPlane"]["tokenEnv"] = "RECONCILE_TOKEN" + suffix
    doc["mesh"]["signer"]["keyFileEnv"] = "RECONCILE_SIGNER_KEY" + suffix
    return json.dumps(doc, indent=2) + "\n"


def named_exports(sb: launcher.Sandbox, name: str) -> list[str]:
    suffix = "_" + name.upper().replace("-", "_")
    return [f"export RECONCILE_TOKEN{suffix}=\"$(cat {shlex.quote(str(sb.token_file))})\"",
            f"export RECONCILE_SIGNER_KEY{suffix}={shlex.quote(str(sb.signer_key_file))}"]


def cmd_up(args: argparse.Namespace) -> int:
    from reconciler.sandbox import launcher

    detach = args.detach or args.print_env
    name = getattr(args, "name", None)
    if name is not None:  # side by side: free ports unless given
        args.port = 0 if args.port == DEFAULT_PORT else args.port
        args.mesh_port = 0 if args.mesh_port == DEFAULT_MESH_PORT else args.mesh_port
    try:
        existing = launcher.attach(args.state)
        if any(existing.owns(c)[0] for c in existing._pids):
            print(f"a sandbox is already running in {args.state} "
                  "(reconcile sandbox down; or print its settings: reconcile sandbox env)",
                  file=sys.stderr)
            return Exit.ERROR
    except launcher.SandboxError:
        pass
    try:
        sb = launcher.start(args.state, clusters=args.clusters, port=args.port,
                            mesh_port=args.mesh_port, converge_delay_ms=args.converge_delay_ms,
                            seed=args.seed, detach=detach, batch_reads=args.batch_reads,
                            greenfield=args.greenfield)
    except (launcher.SandboxError, OSError) as exc:
        print(f"reconcile sandbox up: {safe(exc, 2000)}", file=sys.stderr)
        return Exit.ERROR
    stop_hint = f"stop it with: reconcile sandbox down --state {shlex.quote(str(args.state))}"
    if name is not None:
        settings = Path(args.state) / "settings.yaml"
        settings.write_text(named_settings(sb, name), encoding="utf-8")
        print(f"{name}: a Settings document for it is in {settings}", file=sys.stderr)
        if args.print_env:
            print(stop_hint, file=sys.stderr)
            print("\n".join(named_exports(sb, name)), flush=True)
            return Exit.OK
    if args.print_env:
        print("\n".join(human_lines(sb)), file=sys.stderr)
        print(stop_hint, file=sys.stderr)
        print("\n".join(export_lines(sb)), flush=True)
        return Exit.OK
    print(describe(sb))
    if detach:
        print(f"\n{stop_hint}")
        return Exit.OK
    print("\nrunning; Ctrl-C stops it")
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    try:
        while not stop:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        sb.stop()
    return Exit.OK


def cmd_env(args: argparse.Namespace) -> int:
    from reconciler.sandbox import launcher

    try:
        sb = launcher.attach(args.state)
    except (launcher.SandboxError, OSError, ValueError, KeyError) as exc:
        print(f"reconcile sandbox env: {safe(exc, 2000)}", file=sys.stderr)
        return Exit.ERROR
    if not any(sb.owns(c)[0] for c in sb._pids):
        print(f"reconcile sandbox env: the sandbox in {args.state} is not running "
              "(start one with: reconcile sandbox up --print-env)", file=sys.stderr)
        return Exit.ERROR
    print("\n".join(export_lines(sb)))
    return Exit.OK


def _attached(state: Path) -> launcher.Sandbox | None:
    """The sandbox in ``state``, or None when there is none (said on stderr)."""
    from reconciler.sandbox import launcher

    try:
        return launcher.attach(state)
    except launcher.SandboxError as exc:
        print(str(exc), file=sys.stderr)
        return None


def cmd_down(args: argparse.Namespace) -> int:
    from reconciler.sandbox import launcher

    sb = _attached(args.state)
    if sb is None:
        return Exit.ERROR
    ours = {c: pid for c, pid in sb._pids.items() if sb.owns(c)[0]}
    skipped = sb.stop()
    deadline = time.monotonic() + 5
    while any(launcher.process_identity(p) is not None for p in ours.values()) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    print(f"stopped {len(ours)} processes")
    for line in skipped:  # a pid reused by another process since: never signalled
        print(f"not signalled: {line}", file=sys.stderr)
    return Exit.OK


def cmd_component(args: argparse.Namespace) -> int:
    """``sandbox stop|start COMPONENT``: one component down or up again."""
    from reconciler.sandbox import launcher

    action = args.component_action
    try:
        sb = launcher.attach(args.state)
        if action == "stop":
            pid = sb.pid(args.component)
            sb.stop_component(args.component)
            print(f"stopped {args.component} (pid {pid}); start it again with: reconcile "
                  f"sandbox start {args.component} --state {shlex.quote(str(args.state))}")
            return Exit.OK
        if sb.foreground:
            print(f"reconcile sandbox start: the sandbox in {args.state} runs in the "
                  "foreground of `reconcile sandbox up`, whose components die with it; "
                  "start components again only in a detached sandbox (up --detach)",
                  file=sys.stderr)
            return Exit.ERROR
        sb.start_component(args.component)
        print(f"started {args.component} (pid {sb.pid(args.component)})")
        return Exit.OK
    except (launcher.SandboxError, OSError) as exc:
        print(f"reconcile sandbox {action}: {safe(exc, 2000)}", file=sys.stderr)
        return Exit.ERROR


def cmd_status(args: argparse.Namespace) -> int:
    sb = _attached(args.state)
    if sb is None:
        return Exit.ERROR
    records = sb.cluster_status()
    apps = sorted({app for per in records.values() for app in per})
    rows = [("CLUSTER", "APP", "DIGEST", "STATE", "REPLICAS", "GEN", "LAST ERROR")]
    for cid in sb.clusters:
        alive = sb.owns(cid)[0]
        for app in apps:
            rec = records[cid].get(app)
            if rec is None:
                rows.append((cid, app, "-", "no record", "-", "-", ""))
                continue
            digest = str(rec.get("resolvedDigest") or "")
            counts = rec.get("replicaCounts", {})
            rows.append((
                cid if alive else f"{cid} (stopped)", app, digest[7:19],
                str(rec.get("runtimeState")),
                f"{counts.get('verified', 0)}/{counts.get('required', 0)}",
                str(rec.get("rolloutGeneration")), safe(rec.get("lastError") or "", 60)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
    statuses = sb.rollout_statuses()
    print()
    for service_id, status in sorted(statuses.items()):
        print(f"{service_id:<20} generation {status['rolloutGeneration']:<3} {status['status']}")
    active = faults.read_all(sb.state_dir)
    for target, kinds in sorted(active.items()):
        print(f"fault {target}: {', '.join(sorted(kinds))}")
    return Exit.OK


def _params(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--param wants K=V, got {pair!r}")
        out[key] = value
    return out


def cmd_fault(args: argparse.Namespace) -> int:
    from reconciler.sandbox import launcher

    try:
        sb = launcher.attach(args.state)
        sb.fault(args.target, args.kind, on=not args.off, **_params(args.param))
    except (launcher.SandboxError, ValueError) as exc:
        print(f"reconcile sandbox fault: {exc}", file=sys.stderr)
        return Exit.USAGE
    print(f"{args.kind} {'off' if args.off else 'on'} for {args.target}")
    return Exit.OK


def cmd_push(args: argparse.Namespace) -> int:
    from reconciler.sandbox import launcher

    try:
        sb = launcher.attach(args.state)
        digest = sb.push(args.service, args.tag, repository=args.repository,
                         platforms=args.platform, missing_manifests=args.missing_manifest,
                         evidence=args.evidence, evidence_subject=args.evidence_subject)
        block = sb.release_yaml(digest, args.tag)
    except launcher.SandboxError as exc:
        print(f"reconcile sandbox push: {safe(exc, 2000)}", file=sys.stderr)
        return Exit.ERROR
    print(f"{args.service}:{args.tag} -> {digest}")
    print()
    print("# paste into the service's document:")
    print(block, end="")
    return Exit.OK


def cmd_seed(args: argparse.Namespace) -> int:
    from reconciler.sandbox import launcher, seeding, store

    try:
        sb = launcher.attach(args.state)
        sb.seed(launcher.load_seed(args.file))
    except (launcher.SandboxError, seeding.SeedError, OSError, ValueError) as exc:
        print(f"reconcile sandbox seed: {safe(exc)}", file=sys.stderr)
        return Exit.ERROR
    conn = store.connect(sb.state_dir)
    try:
        count = len(store.all_services(conn))
    finally:
        conn.close()
    print(f"seeded {count} services from {args.file}")
    return Exit.OK
