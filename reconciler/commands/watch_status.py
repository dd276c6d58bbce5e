"""``reconcile watch-status --shards``: who owns each shard of a group of sharded
watchers and how long ago each was last reconciled, read from etcd.

Exit 0 when every shard has an owner and each finished a reconcile within two resync
intervals; 1 otherwise (or when etcd or the group cannot be read), naming the shards.
``show_shards`` is the whole command for a caller that attaches it elsewhere (``status
--shards``). Reading and judging are the engine's (``engine.shard_report``, with
``core.sharding``), the words ``render.shardview``'s; this module parses flags and
chooses the view.
"""

from __future__ import annotations

import argparse
import os
import sys

from reconciler.commands import coordinate, options, selection
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "watch-status", help="show the shards of a group of watchers: owners and ages",
        description="Read a group of sharded watchers (watch --coordinate) from etcd: each "
        "shard's owner and its last finished reconcile. Exit 1 when a shard has no owner "
        "or was not reconciled for two resync intervals.")
    options.add_path_argument(parser, help="the config repo the watchers follow (default: .)")
    parser.add_argument("--shards", action="store_true", required=True,
                        help="show the shards (the only view so far)")
    parser.add_argument("--coordinate", metavar="etcd://HOST:PORT[,...][/GROUP]",
                        help="the group's etcd (env RECONCILE_COORDINATE; settings "
                        "coordination.etcd)")
    from reconciler.commands import durations  # the same DURATION as watch --resync

    parser.add_argument("--resync", type=durations.seconds, default=30.0, metavar="DURATION",
                        help="the watchers' --resync: a shard is late after two (default "
                        "30s)")
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="a table (default), or one JSON object")
    options.add_connection_flags(parser)
    parser.set_defaults(handler=show_shards)


def show_shards(args: argparse.Namespace) -> int:
    import asyncio  # when the command runs: not to build the parser

    from reconciler.engine import WatchSteps, shard_report

    if args.resync <= 0:
        print("error: --resync must be > 0", file=sys.stderr)
        return int(Exit.USAGE)
    try:
        root = selection.desired_root(args.path, command="watch-status")
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return int(exc.code)
    env, overrides = os.environ, options.overrides_from(args)
    state = WatchSteps(root, overrides=overrides, env=env).load().state
    block = state.settings.coordination if state is not None else None
    target = args.coordinate or env.get(coordinate.ENV_COORDINATE) or (
        block.etcd if block else None)
    if not target:
        print("error: which etcd? --coordinate etcd://HOST:PORT (or RECONCILE_COORDINATE, "
              "or settings coordination.etcd)", file=sys.stderr)
        return int(Exit.USAGE)
    try:
        report = asyncio.run(shard_report(root, overrides=overrides, env=env,
                                          target=target, resync=args.resync))
    except (EngineError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return int(exc.code) if isinstance(exc, EngineError) else int(Exit.USAGE)
    from reconciler.render import shardview

    sys.stdout.write(shardview.as_json(report) if args.format == "json"
                     else shardview.text(report))
    return int(Exit.OK if report.healthy else Exit.ERROR)
