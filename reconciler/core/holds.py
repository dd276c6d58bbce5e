"""Held releases (issue 20): which pins a ``kind: Hold`` document makes NO-GO, and what a
hold document says.

Owns the plan-time rule -- a Service that pins a digest a Hold holds for it is NO-GO
``held``, naming the reason and where the hold was written, however the pin got there
(a promotion, ``reconcile pin``, a merge of an old branch) -- and the text of a Hold
document ``reconcile revert`` writes (``document``), so the writer and the reader agree
on its fields. ``core.planning`` calls ``blockers`` once per plan; nothing else here
knows about plans.

Must not: do I/O, look at the clock (``since`` is given), or decide what to revert
(``core.lastproven`` and the engine do).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from reconciler.core.codes import BlockerCode
from reconciler.core.desired import DesiredState, Hold
from reconciler.core.plans import Blocker
from reconciler.core.sanitize import safe

#: Where ``reconcile revert`` writes a hold, relative to the desired-state directory.
HOLDS_DIR = "holds"


def held(desired: DesiredState, service: str, digest: str) -> Hold | None:
    """The hold on ``service``'s release ``digest``, if the desired state has one."""
    return next((h for h in desired.holds if h.service == service and h.digest == digest),
                None)


def blockers(desired: DesiredState) -> list[Blocker]:
    """One ``held`` blocker per service whose pinned digest is held."""
    out: list[Blocker] = []
    for svc in sorted(desired.services, key=lambda s: s.name):
        hold = held(desired, svc.name, svc.release.digest)
        if hold is None:
            continue
        source = desired.sources.get(f"Hold/{hold.service}/{hold.digest}")
        where = f" ({source.path}:{source.line})" if source is not None else ""
        out.append(Blocker(
            code=BlockerCode.HELD, service=svc.name,
            message=f"{svc.name}: the pinned release {hold.digest} is held since "
            f"{safe(hold.since, 64)}{where}: {safe(hold.reason, 500)}; release the hold "
            f"by a commit (reconcile release-hold {svc.name} {hold.digest}) or pin "
            "another digest"))
    return out


def file_name(service: str, digest: str) -> str:
    """The repo-relative file (under the desired-state directory) of a revert's hold."""
    return f"{HOLDS_DIR}/{service}-{digest.removeprefix('sha256:')[:12]}.yaml"


def document(service: str, digest: str, reason: str, evidence: Sequence[str], since: str,
             schema: str | None = None) -> str:
    """A Hold document as ``reconcile revert`` writes it: YAML whose scalars are JSON
    strings (valid YAML, no quoting rules to get wrong for a reason quoting a cluster)."""
    lines = []
    if schema is not None:
        lines.append(f"# yaml-language-server: $schema={schema}")
    lines += ["apiVersion: reconcile/v1", "kind: Hold", f"service: {service}",
              f"digest: {json.dumps(digest)}", f"reason: {json.dumps(safe(reason, 1900))}"]
    if evidence:
        lines.append("evidence:")
        lines += [f"  - {json.dumps(safe(line, 1900))}" for line in list(evidence)[:50]]
    lines.append(f"since: {json.dumps(since)}")
    return "\n".join(lines) + "\n"
