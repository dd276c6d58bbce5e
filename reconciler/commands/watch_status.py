"""``reconcile watch-status --shards``: who owns each shard of a group of sharded
watchers and how long ago each was last reconciled, read from etcd.

Exit 0 when every shard has an owner and each finished a reconcile within two resync
intervals; 1 otherwise (or when etcd or the group cannot be read), naming the shards.
``show_shards`` is the whole command for a caller that attaches it elsewhere (``status
--shards``). Reading and judging are the engine's (``engine.shard_report``, with
``core.sharding``); this module parses flags and renders.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING

from reconciler.commands import coordinate, options, selection
from reconciler.exitcodes import Exit
from reconciler.failures import EngineError

if TYPE_CHECKING:
    from reconciler.engine import ShardReport


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "watch-status", help="show the shards of a group of watchers: owners and ages",
        description="Read a group of sharded watchers (watch --coordinate) from etcd: each "
        "shard's owner and its last finished reconcile. Exit 1 when a shard has no owner "
        "or was not reconciled for two resync intervals.")
    parser.add_argument("path", nargs="?", default=".", metavar="PATH",
                        help="the config repo the watchers follow (default: .)")
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
    sys.stdout.write(render_json(report) if args.format == "json" else render_text(report))
    return int(Exit.OK if report.healthy else Exit.ERROR)


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    return f"{seconds:.0f}s ago" if seconds < 120 else f"{seconds / 60:.0f}m ago"


def render_text(report: ShardReport) -> str:
    lines = [f"group {report.group} at {report.target}: {len(report.members)} member(s), "
             f"{report.count} shard(s)", "SHARD  OWNER                          "
             "LAST RECONCILE  COMMIT"]
    for shard, owner, age, commit in report.rows:
        lines.append(f"{shard:<6} {owner or '(none)':<30} {_age(age):<15} "
                     f"{(commit or '-')[:12]}")
    unowned = [s for s, owner, _, _ in report.rows if owner is None]
    if unowned:
        lines.append(f"{len(unowned)} shard(s) without an owner: "
                     + ", ".join(map(str, unowned)))
    if report.late:
        lines.append(f"{len(report.late)} shard(s) not reconciled for two resync intervals:")
        lines += [f"  {a.describe()}" for a in report.late]
    else:
        lines.append("every shard was reconciled within two resync intervals")
    return "\n".join(lines) + "\n"


def render_json(report: ShardReport) -> str:
    return json.dumps({
        "group": report.group, "etcd": report.target, "shards": report.count,
        "members": list(report.members), "healthy": report.healthy,
        "rows": [{"shard": s, "owner": o, "ageSeconds": None if a is None else round(a, 3),
                  "commit": c} for s, o, a, c in report.rows],
        "late": [{"shard": a.shard, "owner": a.owner, "ageSeconds": round(a.age, 3),
                  "never": a.never} for a in report.late],
    }, indent=2, sort_keys=True) + "\n"
