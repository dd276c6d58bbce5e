"""``watch --coordinate``: the flags of sharded watching and how they meet the settings.

Each value comes from the flag, else its ``RECONCILE_*`` variable, else the Settings
document's ``coordination`` block, else the default (docs/scaling.md). Owns only that
resolution and its usage errors; the group itself is ``engine.ShardedWatchSteps`` and
``shell.sharded``.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from reconciler.core.sharding import DEFAULT_SHARDS, MAX_SHARDS, LeaseTiming

if TYPE_CHECKING:
    from reconciler.core.desired import Settings

ENV_COORDINATE = "RECONCILE_COORDINATE"
ENV_SHARDS = "RECONCILE_SHARDS"


def add_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("sharded watching (docs/scaling.md)")
    group.add_argument("--coordinate", metavar="etcd://HOST:PORT[,...][/GROUP]",
                       help="join the group of watchers of this desired-state root in etcd: "
                       "services are hashed into shards, each owned by one watcher through "
                       "a lease, every write fenced (env RECONCILE_COORDINATE; settings "
                       "coordination.etcd)")
    group.add_argument("--shards", type=int, metavar="N",
                       help=f"shards of the group, fixed for its life (default "
                       f"{DEFAULT_SHARDS}; env RECONCILE_SHARDS; settings coordination.shards)")
    group.add_argument("--lease-seconds", type=int, metavar="SECONDS",
                       help="the member's etcd lease TTL (default 35)")
    group.add_argument("--renew-deadline", type=float, metavar="SECONDS",
                       help="stop writing and drop the shards when the lease could not be "
                       "renewed for this long (default 30)")
    group.add_argument("--retry-period", type=float, metavar="SECONDS",
                       help="how often the ownership round runs: renew, rebalance, look for "
                       "shards nobody reconciled (default 5)")


@dataclass(frozen=True)
class Coordinate:
    target: str
    shards: int
    timing: LeaseTiming


def given(args: argparse.Namespace, env: Mapping[str, str]) -> bool:
    """Whether coordination was asked for before the settings are read."""
    return bool(args.coordinate or env.get(ENV_COORDINATE))


def resolve(args: argparse.Namespace, env: Mapping[str, str],
            settings: Settings | None) -> Coordinate | str | None:
    """The coordination to use, None for none, or a usage error to print."""
    block = settings.coordination if settings is not None else None
    target = args.coordinate or env.get(ENV_COORDINATE) or (block.etcd if block else None)
    if not target:
        if args.shards is not None or args.lease_seconds is not None \
                or args.renew_deadline is not None or args.retry_period is not None:
            return "--shards and the lease flags need --coordinate (or RECONCILE_COORDINATE)"
        return None
    shards: int = DEFAULT_SHARDS if block is None else block.shards
    raw = env.get(ENV_SHARDS)
    if args.shards is not None:
        shards = args.shards
    elif raw:
        if not raw.isdigit():
            return f"RECONCILE_SHARDS={raw!r}: a whole number of shards"
        shards = int(raw)
    if not 1 <= shards <= MAX_SHARDS:
        return f"--shards must be between 1 and {MAX_SHARDS} (got {shards})"
    base = LeaseTiming() if block is None else LeaseTiming(
        block.lease_seconds, block.renew_deadline_seconds, block.retry_seconds)
    timing = LeaseTiming(
        args.lease_seconds if args.lease_seconds is not None else base.ttl,
        args.renew_deadline if args.renew_deadline is not None else base.renew_deadline,
        args.retry_period if args.retry_period is not None else base.retry)
    problems = timing.problems()
    if problems:
        return "; ".join(problems)
    from reconciler.shell.coordination import parse_target  # gRPC loads only when used

    try:
        parse_target(target)
    except ValueError as exc:
        return str(exc)
    return Coordinate(target, shards, timing)
