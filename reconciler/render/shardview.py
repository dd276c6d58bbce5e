"""``reconcile watch-status --shards`` in words: each shard's owner, when it was last
reconciled and at which commit, then which shards have no owner or are late -- as a
table, or as one JSON object. Pure: the report is ``core.sharding.ShardReport``.
"""

from __future__ import annotations

import json

from reconciler.core.sharding import ShardReport


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    return f"{seconds:.0f}s ago" if seconds < 120 else f"{seconds / 60:.0f}m ago"


def text(report: ShardReport) -> str:
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


def as_json(report: ShardReport) -> str:
    # Ages rounded to the millisecond: a reader compares them, nobody needs the float noise.
    return json.dumps({
        "group": report.group, "etcd": report.target, "shards": report.count,
        "members": list(report.members), "healthy": report.healthy,
        "rows": [{"shard": s, "owner": o, "ageSeconds": None if a is None else round(a, 3),
                  "commit": c} for s, o, a, c in report.rows],
        "late": [{"shard": a.shard, "owner": a.owner, "ageSeconds": round(a.age, 3),
                  "never": a.never} for a in report.late],
    }, indent=2, sort_keys=True) + "\n"
