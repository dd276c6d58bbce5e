"""``reconcile watch``: follow a checked-out config repo and reconcile continuously.

Stops cleanly on SIGINT/SIGTERM (exit 0); an apply in flight is abandoned safely (its
sent keys are in the journal). Usage errors exit 64. With ``--metrics-port`` one
loopback port (``--metrics-addr`` to change) serves ``/metrics``, ``/healthz`` and
``/readyz``. ``--only a,b`` plans and applies only those services. ``--coordinate
etcd://...`` joins a group of watchers sharing the services by shard
(``commands.coordinate``, ``shell.sharded``, docs/scaling.md). With
``--control-token-file`` that port also takes ``POST /suspend``, ``/resume`` and
``/reconcile`` (``commands.watchcontrol``). ``--env ENV --promote-from PREV`` proposes
each promotion from PREV as a pull request once it is eligible (``commands.proposing``
for the flags; the engine's ``Proposer`` decides and opens).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import TYPE_CHECKING

from reconciler.commands import (
    apply,
    coordinate,
    durations,
    options,
    output,
    proposing,
    revert,
    selection,
    stages,
    watchcontrol,
)
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError

if TYPE_CHECKING:  # the planner loads when the command runs, not to build the parser
    from reconciler.core.plans import Plan
    from reconciler.shell.watching import Metrics, Watcher
    from reconciler.shell.webserve import WebView

LOG_LEVELS = ("debug", "info", "warning", "error")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "watch", help="re-plan on every edit and on drift; apply with --apply",
        description="Follow a checked-out config repo: re-validate and re-plan on each "
        "change, re-read the live side periodically, and (with --apply) apply GO plans "
        "from clean commits.")
    options.add_path_argument(parser, help="the checked-out config repo to follow (default: .)")
    parser.add_argument("--apply", action="store_true",
                        help="apply GO plans, only from a clean committed revision")
    parser.add_argument("--timeout", type=durations.seconds, metavar="DURATION",
                        help="with --apply: bound each apply, gate included, as `apply "
                        "--timeout` does (90s, 5m, 1h); an apply it cuts short is reported "
                        "not converged, naming what is still unproven")
    apply.add_gate_failure_flags(parser)
    proposing.add_flags(parser)
    parser.add_argument("--resync", type=durations.seconds, default=30.0, metavar="DURATION",
                        help="re-read the live side this often: seconds (20) or a duration "
                        "(20s, 5m, 1h; default 30s)")
    parser.add_argument("--debounce", type=float, default=0.3, metavar="SECONDS",
                        help="quiet time that ends a burst of file events (default 0.3)")
    parser.add_argument("--format", choices=options.FORMATS, default="text",
                        help="how the first plan is shown in full (later: differences)")
    selection.add_only_flag(parser, help_text="plan and apply only these services: a "
                            "comma-separated list of names, repeatable (--only checkout,search)"
                            "; a name no service has is a usage error (64) at start")
    parser.add_argument("--log-format", choices=("text", "json"), default="text",
                        help="one event per line: text, or JSON objects with ts (RFC 3339, "
                        "UTC), level, event and message")
    parser.add_argument("--log-level", choices=LOG_LEVELS, default="info",
                        help="write events of this level and above (default info)")
    parser.add_argument("--metrics-port", type=int, metavar="PORT",
                        help="serve /metrics (Prometheus), /healthz and /readyz on PORT "
                        "(0: any free port, named in the start event)")
    parser.add_argument("--metrics-addr", default="127.0.0.1", metavar="ADDR",
                        help="address the metrics port listens on (default 127.0.0.1, "
                        "loopback only; 0.0.0.0 or :: to expose it)")
    parser.add_argument("--view", action="store_true",
                        help="also serve the web view on the metrics port: / (fleet), "
                        "/pipeline, /service/NAME; read-only, updated after each read and "
                        "apply (docs/web-view.md)")
    parser.add_argument("--view-token-file", metavar="FILE",
                        default=os.environ.get("RECONCILE_VIEW_TOKEN_FILE") or None,
                        help="with --view: ask every page for the bearer token in FILE "
                        "(needed when --metrics-addr is not loopback; env "
                        "RECONCILE_VIEW_TOKEN_FILE)")
    parser.add_argument("--view-commit-url", metavar="TEMPLATE",
                        help="with --view: link commits in the history with this https "
                        "URL, {commit} replaced (https://github.com/ORG/REPO/commit/{commit})")
    parser.add_argument("--unready-after", type=int, default=2, metavar="N",
                        help="/readyz answers 503 once N observations of the live side in "
                        "a row have failed, i.e. within N resyncs (default 2)")
    parser.add_argument("--control-token-file", metavar="FILE",
                        default=os.environ.get("RECONCILE_CONTROL_TOKEN_FILE") or None,
                        help="accept POST /suspend, /resume and /reconcile on the metrics "
                        "port from callers with the bearer token in FILE (`reconcile "
                        "watch-ctl`); off without it (env RECONCILE_CONTROL_TOKEN_FILE)")
    parser.add_argument("--control-remote", action="store_true",
                        help="accept control requests from beyond loopback too (the port is "
                        "plain HTTP: put TLS in front of it)")
    stages.add_env_flag(parser, override=True)
    options.add_connection_flags(parser)
    coordinate.add_flags(parser)
    options.add_tracing_flag(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from reconciler.engine import ShardedWatchSteps, WatchSteps
    from reconciler.shell.health import Readiness
    from reconciler.shell.sharded import ShardedWatcher
    from reconciler.shell.watching import Log, Metrics, Watcher

    problem = _flag_problem(args)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return int(Exit.USAGE)
    # Usage first: a wrong command line is said before anything is searched or read.
    try:
        root, stage = stages.select(args, args.path, command="watch")
        propose = proposing.target(args, stage)  # watch --env ENV --promote-from UP
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return int(exc.code)

    def render_first(plan: Plan) -> str:
        return output.render(plan, args.format, sys.stdout)

    only = selection.only_from(args)
    overrides, env = options.overrides_from(args), os.environ
    pull = revert.pull_target(args) if args.on_gate_failure == "revert" else None
    steps = WatchSteps(root, overrides=overrides, env=env, only=only, timeout=args.timeout,
                       applying=args.apply, on_gate_failure=args.on_gate_failure,
                       pull=pull, stage=stage, propose=propose)
    # The loaded blobs are cached: the watcher's first read stays cheap.
    state = steps.load().state
    if only and state is not None:
        known = [s.name for s in state.services]
        unknown = selection.unknown_names(only, known)
        if unknown:
            print(f"error: {selection.unknown_message(unknown, known)}", file=sys.stderr)
            return int(Exit.USAGE)
    # Sharded watching (--coordinate, RECONCILE_COORDINATE or settings coordination).
    sharded = coordinate.resolve(args, env, state.settings if state is not None else None)
    if isinstance(sharded, str) or (sharded is not None and (only or propose)):
        said = sharded if isinstance(sharded, str) else \
            "--only and --coordinate do not mix: the shards decide who plans what" if only \
            else "--promote-from and --coordinate do not mix: one watcher proposes"
        print(f"error: {said}", file=sys.stderr)
        return int(Exit.USAGE)
    if sharded is not None:
        # Everything the plain watcher takes but --only: --apply (its notifications),
        # --on-gate-failure revert (fenced: a member reverts only its own shards' services)
        # and the environment --env selected (its rules, narrowed to the member's services).
        steps = ShardedWatchSteps(root, overrides=overrides, env=env, target=sharded.target,
                                  shards=sharded.shards, timing=sharded.timing,
                                  resync=args.resync, timeout=args.timeout,
                                  applying=args.apply, on_gate_failure=args.on_gate_failure,
                                  pull=pull, stage=stage)
    try:
        control = watchcontrol.control_for(args, steps, root, env)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return int(exc.code)
    try:
        web = _web_view(args, steps)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return int(exc.code)
    readiness = Readiness(window=args.unready_after)
    try:
        metrics = Metrics(args.metrics_port, addr=args.metrics_addr, readiness=readiness,
                          control=control, web=web) \
            if args.metrics_port is not None else None
    except OSError as exc:
        print(f"error: metrics address {args.metrics_addr}:{args.metrics_port}: "
              f"{exc.strerror or exc}", file=sys.stderr)
        return int(Exit.ERROR)
    if metrics is not None:  # notification deliveries, counted beside the other metrics
        from reconciler.shell.notifying import prometheus_counter

        steps.count_notifications = prometheus_counter(metrics.registry)
    watcher = (Watcher if sharded is None else ShardedWatcher)(
        root=root, steps=steps, log=Log(args.log_format, level=args.log_level),
        apply=args.apply, resync=args.resync, debounce=args.debounce,
        metrics=metrics, only=only, readiness=readiness, control=control, web=web,
        render_first=render_first if args.log_format == "text" else None)
    if isinstance(watcher, ShardedWatcher) and isinstance(steps, ShardedWatchSteps):
        watcher.shards = steps
    _serve(watcher, metrics)
    return int(Exit.OK)


def _flag_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the flags taken together, before anything is read."""
    if args.resync <= 0 or args.debounce < 0:
        return "--resync must be > 0 and --debounce >= 0"
    if args.on_gate_failure == "revert" and not args.apply:
        return "--on-gate-failure revert acts on an apply: it needs --apply"
    if args.timeout is not None and not args.apply:
        return "--timeout bounds each apply: it needs --apply"
    if args.unready_after < 1:
        return "--unready-after must be at least 1"
    return None


def _serve(watcher: Watcher, metrics: Metrics | None) -> None:
    """Run the watcher until SIGINT or SIGTERM, then close the metrics endpoint."""
    import asyncio

    from reconciler.shell.watching import logging_to

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await watcher.run(stop)

    try:
        # Notification deliveries log through ``logging``: said as the watcher's events,
        # in its format (one JSON object per line with --log-format json).
        with logging_to(watcher.log):
            asyncio.run(main())
    finally:
        if metrics is not None:
            metrics.close()


def _web_view(args: argparse.Namespace, steps: object) -> WebView | None:
    """``--view``: the web view's pages (None without it). Safe by default: on the
    metrics port only, so loopback unless ``--metrics-addr`` says otherwise, and then only
    with a token. ``EngineError`` for a usage mistake (64) or an unreadable token (1)."""
    from pathlib import Path

    from reconciler.shell import control as control_mod
    from reconciler.shell.endpoints import is_loopback_host
    from reconciler.shell.webserve import WebView

    if not args.view:
        return None
    if args.metrics_port is None:
        raise EngineError("--view needs --metrics-port: the pages are served on that port",
                          code=Exit.USAGE)
    if args.view_commit_url and not (args.view_commit_url.startswith("https://")
                                     and "{commit}" in args.view_commit_url):
        raise EngineError("--view-commit-url must be an https:// URL with {commit} in it",
                          code=Exit.USAGE)
    token = None
    if args.view_token_file:
        try:
            token = control_mod.read_token(Path(args.view_token_file).expanduser())
        except control_mod.ControlError as exc:
            raise EngineError(str(exc).replace("control token", "view token")) from exc
    elif not is_loopback_host(args.metrics_addr):
        raise EngineError(f"--view on {args.metrics_addr} (not loopback) needs "
                          "--view-token-file FILE: the pages show the fleet to whoever "
                          "reaches the port", code=Exit.USAGE)
    journal = getattr(steps, "journal", None)
    return WebView(token=token, journal=journal if callable(journal) else None,
                   commit_url=args.view_commit_url)
