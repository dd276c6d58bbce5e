"""Benchmark: the PR comment of a 10,000-service plan, split into parts.

Builds the plan in-process (no sandbox: the Markdown renderer is pure) for a fleet like
``benchmarks/fleet.py``'s: ``n`` services ``f0000…``, each running v1.0.0 on three
clusters with one egress destination, the repo pinning v1.1.0 (every service a
promotion), every cluster answering. Times ``markdown.render_parts`` (the parts
``reconcile comment`` posts, the saved plan's digest computed from the plan) over
``--runs`` runs and reports the median; checks every part is within GitHub's 65,536
characters and every service is named in exactly one part. Results go to
``benchmarks/out/comment.json``.

    .venv/bin/python -m benchmarks.comment_bench [--services 10000] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

from reconciler.core.desired import DesiredState, Service, Settings
from reconciler.core.live import EgressRule, LiveSnapshot, Observation, ObservationKind
from reconciler.core.planning import Provenance, plan
from reconciler.core.plans import Plan
from reconciler.render import jsonplan, markdown
from tests.plan import builders as b

OUT = Path(__file__).resolve().parent / "out" / "comment.json"


def name(i: int) -> str:
    return f"f{i:04d}"


def fleet_plan(n: int) -> Plan:
    """A GO plan promoting ``n`` services on sn1–sn3, built without I/O."""
    names = [name(i) for i in range(n)]
    desired = DesiredState(
        settings=Settings.model_validate(b.SETTINGS),
        services=tuple(Service.model_validate(b.service_doc(s, "v1.1.0",
                                                            [{"host": "api.example.net"}]))
                       for s in names),
        grants=())
    egress = (EgressRule(host="api.example.net", port=443),)
    live = b.reference_live().model_copy(update={
        "services": {f"svc-{s}": b.live_service(s, [("v1.0.0", 100, 110), ("v1.1.0", 200, None)],
                                                "v1.0.0", 1, [("api.example.net", 443)], 1)
                     for s in names},
        "grants": (),
        "observations": {s: tuple(Observation(cluster_id=c, address=b.ADDRESSES[c],
                                              kind=ObservationKind.ANSWERED,
                                              runtime=b.runtime(s, "v1.0.0", 1, egress=egress))
                                  for c in b.CLUSTERS) for s in names}})
    assert isinstance(live, LiveSnapshot)
    return plan(desired, live, Provenance(commit="f" * 40))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--services", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    t0 = time.perf_counter()
    fleet = fleet_plan(args.services)
    built = time.perf_counter() - t0
    assert len(fleet.changes) == args.services and not fleet.blockers
    # `reconcile comment` reads the digest from the saved plan file it posts.
    digest = str(jsonplan.to_wire(fleet)["content_digest"])
    timings: list[float] = []
    parts: list[str] = []
    for _ in range(args.runs):
        t1 = time.perf_counter()
        parts = markdown.render_parts(fleet, plan_file="plan.json", content_digest=digest)
        timings.append(time.perf_counter() - t1)
    sizes = [len(p) for p in parts]
    assert max(sizes) <= markdown.BUDGET, sizes
    seen = Counter(n for p in parts for n in set(re.findall(r"`(f\d{4})`", p)))
    missing = [s for s in (name(i) for i in range(args.services)) if seen[s] != 1]
    assert not missing, missing[:10]
    median = statistics.median(timings)
    print(f"comment: {args.services:,} services × 3 clusters (plan built in {built:.2f} s)")
    print(f"  render_parts median of {args.runs}: {median:.3f} s "
          f"(min {min(timings):.3f}, max {max(timings):.3f})")
    print(f"  {len(parts)} parts, largest {max(sizes):,} characters, "
          f"total {sum(sizes):,}")
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps({"services": args.services, "runs": timings,
                               "median_seconds": median, "parts": len(parts),
                               "part_sizes": sizes}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
