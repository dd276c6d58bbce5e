"""``reconcile watch``: follow a checked-out config repo and reconcile continuously.

Stops cleanly on SIGINT/SIGTERM (exit 0); an apply in flight is abandoned safely (its
sent keys are in the journal). Usage errors exit 64.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path

from reconciler.commands import options, output
from reconciler.core.plans import Plan
from reconciler.exitcodes import Exit


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "watch", help="re-plan on every edit and on drift; apply with --apply",
        description="Follow a checked-out config repo: re-validate and re-plan on each "
        "change, re-read the live side periodically, and (with --apply) apply GO plans "
        "from clean commits.")
    parser.add_argument("path", nargs="?", default=".")
    parser.add_argument("--apply", action="store_true",
                        help="apply GO plans, only from a clean committed revision")
    parser.add_argument("--resync", type=float, default=30.0, metavar="SECONDS",
                        help="re-read the live side this often (default 30)")
    parser.add_argument("--debounce", type=float, default=0.3, metavar="SECONDS",
                        help="quiet time that ends a burst of file events (default 0.3)")
    parser.add_argument("--format", choices=options.FORMATS, default="text",
                        help="how the first plan is shown in full (later: differences)")
    parser.add_argument("--log-format", choices=("text", "json"), default="text")
    parser.add_argument("--metrics-port", type=int, metavar="PORT",
                        help="serve Prometheus metrics on 127.0.0.1:PORT")
    options.add_connection_flags(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from reconciler.engine import WatchSteps
    from reconciler.shell.watching import Log, Metrics, Watcher

    root = Path(args.path)
    if not root.is_dir():
        print(f"error: {root}: not a directory", file=sys.stderr)
        return int(Exit.ERROR)
    if args.resync <= 0 or args.debounce < 0:
        print("error: --resync must be > 0 and --debounce >= 0", file=sys.stderr)
        return int(Exit.USAGE)
    try:
        metrics = Metrics(args.metrics_port) if args.metrics_port else None
    except OSError as exc:
        print(f"error: metrics port {args.metrics_port}: {exc.strerror}", file=sys.stderr)
        return int(Exit.ERROR)
    def render_first(plan: Plan) -> str:
        return output.render(plan, args.format, sys.stdout)

    steps = WatchSteps(root, overrides=options.overrides_from(args), env=os.environ)
    watcher = Watcher(root=root, steps=steps, log=Log(args.log_format), apply=args.apply,
                      resync=args.resync,
                      debounce=args.debounce, metrics=metrics,
                      render_first=render_first if args.log_format == "text" else None)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await watcher.run(stop)

    asyncio.run(main())
    return int(Exit.OK)
