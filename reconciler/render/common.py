"""Shared vocabulary of the renderers: reason sentences, short digests, evidence rows.

Owns what the text and Markdown renderers must say identically, so the terminal and the
PR comment cannot disagree on a word, and the one place a plan's strings are made safe
to print: every renderer starts from ``untrusted(plan)``, a copy of the plan whose every
string (summaries, messages, reasons, cluster ids, names, tags, digests, lastError,
URLs...) has passed through ``safe``, so no control character, escape sequence, OSC-8
hyperlink or bidi override in a plan value (a server's reply, or a hand-edited saved
plan) can reach a terminal or a comment, whichever field a renderer reads. Length is
bounded there too; each embedding may bound it further. ``safe`` also redacts (the secrets
registered for the run, URL query values: ``core.sanitize``), so the same walk keeps every
secret out of the text and Markdown plans. Pure; no styling here.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from pydantic import BaseModel

from reconciler.core.evidence import ClusterProof
from reconciler.core.kinds import KINDS, Kind
from reconciler.core.live import ClusterRuntime, EgressRule, Observation, ObservationKind
from reconciler.core.plans import (
    Action,
    Blocker,
    Plan,
    ReleaseRef,
    ServiceEvidence,
    Verdict,
)
from reconciler.core.preflight import CREATE_METHOD, ServicePreflight, Status
from reconciler.core.review import ModifiedChange, ReleaseAt, Target
from reconciler.core.sanitize import safe, safe_json_text, unchanged

#: The bound on any one string of a plan as rendered; fields shown in tables bound harder.
VALUE_LIMIT = 2_000

REASONS = {
    "pinned_release_never_accepted": "the pinned digest is an observed release never accepted",
    "pinned_release_newer_than_current": "the pinned digest is newer than the current release",
    "pinned_release_previously_accepted": "the pinned digest was accepted before and is older "
    "than the current release",
    "egress_differs": "the declared egress differs from the live declaration",
    "egress_revoke_all": "egress is declared empty ([]): every destination is revoked",
    "grant_differs": "the declared capabilities differ from the live grant",
    "grant_not_declared": "no Grant document declares this live grant and pruning is on",
    "service_not_on_control_plane": "the repo declares a service the control plane does not "
    "have",
    "route_missing": "the control plane holds no such route of this client at its owner key",
    "route_differs": "the live route at the owner key differs from the declared one",
    "route_not_declared": "no Route document declares this route of ours and pruning of "
    "routes is on",
}

VERDICT_LINE = {
    Verdict.GO: "GO",
    Verdict.NO_GO: "NO-GO",
    Verdict.NO_CHANGES: "no changes",
}


_UNSEEN: Any = object()

#: How the walk treats a value of each type (``_learn``): left as it is, a string made
#: safe, or an object whose values are walked (``_SHAPES`` says how it is read and copied).
_LEAVE, _STRING, _WALK = 0, 1, 2
_KINDS: dict[type, int] = {str: _STRING, type(None): _LEAVE, int: _LEAVE, bool: _LEAVE,
                           float: _LEAVE}

#: The forms of a walked object: a pydantic model (its ``__dict__`` is exactly its fields:
#: a plan's models forbid extras), a dataclass (slotted or not: its fields, read at once),
#: a tuple or list, a named tuple, a dict (keys and values), a set or frozenset.
_MODEL, _DATACLASS, _SEQUENCE, _NAMED, _MAPPING, _SET = range(6)


@dataclass(frozen=True, slots=True)
class _Shape:
    """How the walk reads one class: its form; for a dataclass, its field names and one
    getter of all their values (``operator.attrgetter``, a single C call); and ``alone``,
    the reference count (``sys.getrefcount``) of a value read from such an object that
    nothing else holds: the object's own reference, the walk's variable and the call's
    argument, plus the tuple a dataclass's getter or a dict's items hold it in. A value
    with more may be shared and is remembered by id; one with no more is met once and
    walked without being remembered (a 10,000 × 10 plan's 200,000 observations and
    proofs are each held once). A miscount costs time, never correctness: a shared value
    not remembered is walked again to the same answer."""

    form: int
    alone: int
    names: tuple[str, ...] = ()
    values: Callable[[Any], tuple[Any, ...]] = tuple


_SHAPES: dict[type, _Shape] = {}


def _fields_getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    if len(names) > 1:
        return operator.attrgetter(*names)
    if names:  # attrgetter of one name returns the value itself, not a 1-tuple
        name = names[0]
        return lambda value: (getattr(value, name),)
    return lambda value: ()


def _learn(kind: type) -> int:
    """How a value of ``kind`` is walked, learnt once per type. Exact ``str`` only is a
    string: enum members (codes, actions, kinds) are vocabulary, not data."""
    if issubclass(kind, BaseModel):
        shape = _Shape(_MODEL, 3)
    elif dataclasses.is_dataclass(kind):
        names = tuple(f.name for f in dataclasses.fields(kind))
        shape = _Shape(_DATACLASS, 4, names, _fields_getter(names))
    elif issubclass(kind, tuple) and hasattr(kind, "_make"):
        shape = _Shape(_NAMED, 3)
    elif issubclass(kind, tuple | list):
        shape = _Shape(_SEQUENCE, 3)
    elif issubclass(kind, dict):
        shape = _Shape(_MAPPING, 4)
    elif issubclass(kind, set | frozenset):
        shape = _Shape(_SET, 3)
    else:
        _KINDS[kind] = _LEAVE
        return _LEAVE
    _SHAPES[kind] = shape
    _KINDS[kind] = _WALK
    return _WALK


def _replaced(value: Any, names: tuple[str, ...], update: dict[str, Any]) -> Any:
    """A copy of the dataclass ``value`` with ``update``'s fields (``dataclasses.replace``;
    a field its ``__init__`` does not take is set on the copy as ``__init__`` would)."""
    init = {f.name for f in dataclasses.fields(value) if f.init}
    copy = dataclasses.replace(value, **{k: v for k, v in update.items() if k in init})
    for name, new in update.items():
        if name not in init:
            object.__setattr__(copy, name, new)
    return copy


def _clean_observation(value: Observation, strings: dict[str, str | None],
                       objects: dict[int, Any]) -> bool:
    """Whether an observation needs nothing, from what the walk already knows: its
    strings each seen and safe, its runtime already walked and unchanged, no check
    results. False is "not known", never "unsafe": the full walk then decides."""
    runtime, address, reason = value.runtime, value.address, value.reason
    return (strings.get(value.cluster_id, _UNSEEN) is None
            and (address is None or strings.get(address, _UNSEEN) is None)
            and (reason is None or strings.get(reason, _UNSEEN) is None)
            and (runtime is None or objects.get(id(runtime)) is runtime)
            and not value.checks)


def _clean_proof(value: ClusterProof, strings: dict[str, str | None],
                 objects: dict[int, Any]) -> bool:
    """``_clean_observation`` for a cluster's proof."""
    running, last_error = value.running, value.last_error
    return (strings.get(value.cluster, _UNSEEN) is None
            and strings.get(value.detail, _UNSEEN) is None
            and (running is None or strings.get(running, _UNSEEN) is None)
            and (last_error is None or strings.get(last_error, _UNSEEN) is None))


#: The two values a 10,000 × 10 plan holds 100,000 of each, every one held once: a look
#: at the few fields that can hold a string or an object, before the walk reads every
#: value (``docs/scaling.md`` round 7). Each knows its class's fields as they are (the
#: names below); a class that gained a field is walked in full until its check learns it
#: (``_FAST``).
_FAST_FIELDS: dict[type, tuple[tuple[str, ...], Callable[[Any, dict[str, str | None],
                                                          dict[int, Any]], bool]]] = {
    Observation: (("cluster_id", "address", "kind", "runtime", "reason", "observed_at",
                   "healthy_since", "checks"), _clean_observation),
    ClusterProof: (("cluster", "proof", "why", "detail", "running", "last_error"),
                   _clean_proof),
}
_FAST = {kind: check for kind, (names, check) in _FAST_FIELDS.items()
         if tuple(f.name for f in dataclasses.fields(kind)) == names}


class _Sanitizer:
    """One plan's walk (``untrusted``): every string made safe, each distinct string
    checked once, and each object of the plan walked once however often it is shared
    (a 10,000 × 10 plan shares its clusters' runtimes, cluster ids and digests).

    A 10,000 × 10 plan holds about 330,000 objects and 2 million values, and a clean
    plan comes back unchanged: the walk reads an object's values at once (``_SHAPES``),
    looks at each value's type once (``_KINDS``) with the string and shared-object
    lookups inlined, and only when a value changes goes back to find its place and copy
    the object (``_copy``), so a value that needs nothing costs a dictionary lookup, and
    an object one call (``docs/scaling.md``)."""

    def __init__(self) -> None:
        #: string -> its safe form, or None when it is already safe
        self._strings: dict[str, str | None] = {}
        #: id of an object of the plan (alive for the whole walk) -> its sanitized form
        self._objects: dict[int, Any] = {}

    def __call__(self, value: Any) -> Any:
        """``value`` with every string made safe; the very same object when nothing
        changed (the models are frozen, so sharing an unchanged part is safe), which
        keeps a clean 10,000-service plan from being copied model by model."""
        kind = _KINDS.get(type(value))
        if kind is None:
            kind = _learn(type(value))
        if kind == _LEAVE:
            return value
        if kind == _STRING:
            made = self._strings.get(value, _UNSEEN)
            if made is _UNSEEN:
                made = self._check(value)
            return value if made is None else made
        made = self._objects.get(id(value), _UNSEEN)
        if made is _UNSEEN:
            made = self._objects[id(value)] = self._walk(value)
        return made

    def _check(self, value: str) -> str | None:
        if unchanged(value, VALUE_LIMIT):
            self._strings[value] = None
            return None
        safe_form = safe(value, VALUE_LIMIT)
        made = self._strings[value] = None if safe_form == value else safe_form
        return made

    def _walk(self, value: Any) -> Any:
        """``value`` (a walked object) unchanged, or its copy from the first value that
        changes on (``_copy``)."""
        cls = type(value)
        fast = _FAST.get(cls)
        if fast is not None and fast(value, self._strings, self._objects):
            return value
        shape = _SHAPES[cls]
        form = shape.form
        items: Any
        if form == _MODEL:
            items = value.__dict__.values()
        elif form == _DATACLASS:
            items = shape.values(value)
        elif form == _MAPPING:
            items = itertools.chain.from_iterable(value.items())
        else:
            items = value
        kinds, strings, objects, fasts = _KINDS, self._strings, self._objects, _FAST
        refs, alone = sys.getrefcount, shape.alone
        for old in items:
            kind = kinds.get(type(old))
            if kind == _LEAVE:
                continue
            if kind == _STRING:
                made = strings.get(old, _UNSEEN)
                if made is None:
                    continue
                if made is _UNSEEN:
                    made = self._check(old)
                    if made is None:
                        continue
            elif kind == _WALK:
                fast = fasts.get(type(old))
                if fast is not None and fast(old, strings, objects):
                    continue  # known to need nothing (``_FAST``)
                if refs(old) <= alone:  # held by this object alone: met once
                    made = self._walk(old)
                else:
                    made = objects.get(id(old), _UNSEEN)
                    if made is _UNSEEN:
                        made = objects[id(old)] = self._walk(old)
                if made is old:
                    continue
            else:  # the first value of its type
                made = self(old)
                if made is old:
                    continue
            return self._copy(value, shape, old, made)
        return value

    def _copy(self, value: Any, shape: _Shape, old: Any, new: Any) -> Any:
        """The copy of ``value`` whose first changed value is ``old`` (-> ``new``), with
        every value after it walked. Nothing before ``old`` changed, and a value equal by
        identity to ``old`` would have changed the same way, so ``old``'s place is the
        first that holds it."""
        form = shape.form
        if form == _MAPPING:
            return {self(k): self(v) for k, v in value.items()}
        if form == _SET:
            return type(value)(self(item) for item in value)
        if form == _MODEL:
            names = tuple(value.__dict__)
            items = list(value.__dict__.values())
        elif form == _DATACLASS:
            names = shape.names
            items = list(shape.values(value))
        else:
            names = ()
            items = list(value)
        first = next(index for index, item in enumerate(items) if item is old)
        olds = tuple(items)
        items[first] = new
        for index in range(first + 1, len(items)):
            items[index] = self(items[index])
        if form == _SEQUENCE:
            return type(value)(items)
        if form == _NAMED:
            return type(value)._make(items)
        update = {name: item for name, item, was in zip(names, items, olds, strict=True)
                  if item is not was}
        if form == _MODEL:
            return value.model_copy(update=update)
        return _replaced(value, names, update)


def _sanitize(value: Any) -> Any:
    """``value`` with every string made safe (see ``_Sanitizer``)."""
    return _Sanitizer()(value)


def untrusted(plan: Plan) -> Plan:
    """The plan with every string field, at any depth, passed through ``safe``.

    What a renderer may print. Strings without controls and within the bound are
    unchanged, so codes still match (``REASONS``) and a well-formed plan renders
    exactly as before. A copy, not a re-validation: it cannot fail on a plan that loaded.
    """
    result: Plan = _sanitize(plan)
    return result


def terminal_json(text: str) -> str:
    """JSON text for a terminal: controls inside strings as ``\\u`` escapes (lossless)."""
    return safe_json_text(text)


def check_lines(plan: Plan) -> dict[str, list[str]]:
    """Issue 34: per service, one line per check it is held to on every cluster."""
    out: dict[str, list[str]] = {}
    for held in plan.verifications:
        lines = out.setdefault(held.service, [])
        for check in held.checks:
            series = f"{check.count}× {check.interval_seconds:g}s apart" \
                if check.count > 1 else "once"
            limit = f", {check.failure_limit} failure(s) allowed" if check.failure_limit else ""
            lines.append(f"{safe(check.name, 200)} ({safe(check.kind, 20)}, {series}{limit}): "
                         f"{safe(check.spec, 600)}")
    return out


def reason_text(code: str) -> str:
    return f"{code}: {REASONS[code]}" if code in REASONS else code


def short(digest: str | None) -> str:
    return digest[:19] if digest else "<none>"


def agreement(ev: ServiceEvidence, digest: Callable[[str], str] = lambda d: d) -> str:
    """"3/3 clusters run <digest>" when every expected cluster answered with the current
    digest, else "k/n clusters answered" (counts over *expected* clusters)."""
    answered = [o for o in ev.observations if o.kind is ObservationKind.ANSWERED and o.runtime]
    digests = {o.runtime.resolved_digest for o in answered if o.runtime}
    total = len(ev.expected_clusters)
    if len(answered) == total and digests == {ev.current_digest}:
        return f"{total}/{total} clusters run {digest(short(ev.current_digest))}"
    return f"{len(answered)}/{total} clusters answered"


def release_text(ref: ReleaseRef | None) -> str:
    if ref is None or ref.digest is None:
        return "<nothing deployed>"
    tags = ",".join(safe(t, 64) for t in ref.tags)
    return f"{tags} ({short(ref.digest)})" if tags else short(ref.digest)


def rules_text(rules: tuple[EgressRule, ...] | None) -> str:
    if rules is None:
        return "<undeclared>"
    if not rules:
        return "[] (none)"
    return ", ".join(f"{safe(r.host)}:{r.port}" for r in rules)


def caps_text(caps: tuple[str, ...] | None) -> str:
    if not caps:
        return "[] (none)"
    return ", ".join(caps)


def counted_kinds(counts: Mapping[str, int]) -> list[Kind[Any]]:
    """The kinds a plan's summary counts by their own label (``Kind.counted_as``): those
    the plan's ``counts`` hold."""
    return [k for k in KINDS if k.counted_as is not None
            and any(a.value in counts for a in k.actions)]


def summary_line(plan: Plan) -> str:
    counts = plan.counts()
    parts = [f"{counts['create']} to create"] if counts.get("create") else []
    parts += [
        f"{counts['promote']} to promote",
        f"{counts['rollback']} to roll back",
        f"{counts['set_egress']} egress",
        f"{counts['set_grant']} grant",
        *(f"{kind.counts(counts)} {kind.counted_as}(s)" for kind in counted_kinds(counts)),
        f"{counts['blockers']} blocker(s)",
        f"{counts['drift']} drift",
    ]
    if plan.converging:
        parts.append(f"{len(plan.converging)} not proven converged (apply gates them)")
    verdict = VERDICT_LINE[plan.verdict]
    if plan.risks:
        parts.append(f"{len(plan.risks)} risk(s)")
    if plan.verdict is Verdict.NO_CHANGES and plan.drift:
        verdict += " to make; the drift above needs attention"
    return "Plan: " + ", ".join(parts) + f" → {verdict}"




class EvidenceRow(NamedTuple):
    """One cluster's line of a service's evidence table (a named tuple: a 10,000 × 10
    plan has 100,000 of them)."""

    cluster: str
    address: str
    status: str
    runs: str
    state: str
    replicas: str
    note: str


def evidence_rows(ev: ServiceEvidence) -> list[EvidenceRow]:
    return EvidenceRows()(ev)


class EvidenceRows:
    """The evidence rows of one rendering, with what repeats across rows worked out
    once: a cluster's cell, and the cells of a runtime (the clusters that run one app
    and sent the same bytes share one ``ClusterRuntime``). Keeps each runtime it has
    seen alive, so its id cannot name another while it is used."""

    def __init__(self) -> None:
        self._clusters: dict[str, str] = {}
        self._runtimes: dict[int, tuple[ClusterRuntime, tuple[str, str, str, str]]] = {}

    def __call__(self, ev: ServiceEvidence) -> list[EvidenceRow]:
        return [self.row(obs) for obs in ev.observations]

    def row(self, obs: Observation) -> EvidenceRow:
        cluster = self._clusters.get(obs.cluster_id)
        if cluster is None:
            cluster = self._clusters[obs.cluster_id] = safe(obs.cluster_id, 64)
        address = obs.address or "-"
        rt = obs.runtime
        if obs.kind is ObservationKind.SILENT:
            return EvidenceRow(cluster, address, "SILENT", "?", "?", "?", safe(obs.reason, 160))
        if obs.kind is ObservationKind.NO_RECORD or rt is None:
            return EvidenceRow(cluster, address, "no record", "-", "-", "-", "")
        known = self._runtimes.get(id(rt))
        if known is None or known[0] is not rt:
            known = self._runtimes[id(rt)] = (rt, _runtime_cells(rt))
        runs, state, replicas, note = known[1]
        return EvidenceRow(cluster, address, "answered", runs, state, replicas, note)


def _runtime_cells(rt: ClusterRuntime) -> tuple[str, str, str, str]:
    """What an answered row says of the cluster's runtime: runs, state, replicas, note."""
    counts = rt.replica_counts
    replicas = (f"{counts.required}/{counts.observed}/{counts.healthy}/{counts.verified}/"
                f"{counts.failed}") if counts else "?"
    runs = short(rt.resolved_digest) if rt.resolved_digest else "<no digest>"
    note = safe(rt.last_error, 160) if rt.last_error else ""
    if rt.egress_dropped:
        dropped = ", ".join(f"{safe(r.host)}:{r.port}" for r in rt.egress_dropped)
        note = (note + "; " if note else "") + f"egress dropped: {dropped}"
    return runs, safe(rt.runtime_state or "?", 32), replicas, note


EVIDENCE_HEADER = EvidenceRow("cluster", "address", "status", "runs", "state",
                              "replicas r/o/h/v/f", "note")


# -- creations and their preflight ------------------------------------------------------

#: How many platforms, capabilities or attestations a compact line names before "N more".
FACT_LIST_MAX = 8
#: The upstream code whose presence in a report means the namespace is someone else's.
_COLLISION = "NAMESPACE_COLLISION"


def _plain(text: str) -> str:
    return text


def _mark(value: bool | str) -> str:
    """✓ yes, ✗ no, ? unknown (the report's tri-state ``"unknown"``)."""
    if value == "unknown":
        return "?"
    return "✓" if value is True else "✗"


def _field(data: Mapping[str, Any] | None, *keys: str) -> Any:
    """``data[k1][k2]...`` of a wire value, or None where any step is missing."""
    value: Any = data
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _more(count: int, shown: int = FACT_LIST_MAX) -> str:
    return f" and {count - shown} more" if count > shown else ""


def blocker_code(blocker: Blocker) -> str:
    """The code a blocker is shown by: the control plane's own, verbatim, when it has one
    (``upstream_code``, already sanitized), else reconcile's."""
    return blocker.upstream_code or blocker.code.value


#: How many blockers of one code a service's list shows before "and N more": two routes
#: per pair make ``route_ambiguous`` quadratic (40 routes of one priority on one host are
#: 780 pairs); the JSON plan keeps every one.
SAME_CODE_MAX = 10


def bounded_blockers(blockers: Sequence[Blocker], limit: int = SAME_CODE_MAX
                     ) -> tuple[list[Blocker], list[tuple[str, int]]]:
    """(the blockers shown, in their order: the first ``limit`` of each code; and each
    code with how many of it are left out, in the order codes first appear)."""
    seen: dict[str, int] = {}
    shown: list[Blocker] = []
    for blocker in blockers:
        key = blocker_code(blocker)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] <= limit:
            shown.append(blocker)
    return shown, [(key, n - limit) for key, n in seen.items() if n > limit]


def codes_counted(blockers: Sequence[Blocker]) -> list[tuple[str, int]]:
    """Each code of ``blockers`` once, with how many there are, in the order first seen."""
    seen: dict[str, int] = {}
    for blocker in blockers:
        key = blocker_code(blocker)
        seen[key] = seen.get(key, 0) + 1
    return list(seen.items())


def blocker_text(blocker: Blocker) -> str:
    """A blocker's sentence without the ``service: CODE: `` lead the planner writes into
    upstream blockers' messages (the renderers show service and code already). Any other
    message is returned whole: nothing is cut that was not repeated."""
    if blocker.upstream_code and blocker.service:
        lead = f"{blocker.service}: {blocker.upstream_code}: "
        if blocker.message.startswith(lead):
            return blocker.message[len(lead):]
    return blocker.message


def when(epoch_ms: int) -> str:
    """An upstream timestamp (ms since epoch) as UTC; an impossible one as its number."""
    try:
        return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return f"{epoch_ms} ms"


@dataclass(frozen=True)
class Fact:
    """One line of a preflight as every renderer says it: ``label`` and ``text`` are this
    module's words with each plan string passed through the renderer's ``wrap``; ``ok``
    says how to style it (True fine, False blocks, None neutral)."""

    label: str
    text: str
    ok: bool | None = None


def preflight_facts(pre: ServicePreflight, wrap: Callable[[str], str] = _plain) -> list[Fact]:
    """The preflight of one service, compact: reconcile's decision and why, the source
    revision and its dirty state, the authorization checks, the requested platforms,
    the proposed namespace and version, and whether the control plane executes
    creations. The blockers themselves are the plan's (shown where blockers are)."""
    report = pre.report
    facts: list[Fact] = []
    if report is not None:
        said = f"the control plane's report says {report.decision.value}"
        if pre.blocked and report.decision.value == "GO":
            said += "; reconcile blocks it (below)"
        elif report.blockers:
            said += f" ({len(report.blockers)} blocker(s), below)"
        said += f" · generated {when(report.generated_at)}"
    elif pre.problem:
        said = wrap(pre.problem)
    else:
        said = pre.status.value.replace("_", " ")
    label = "release evidence" if pre.status is Status.LOCAL_ONLY else "preflight"
    facts.append(Fact(label, f"{pre.decision.value} — {said}", not pre.blocked))
    if pre.purpose == "create":
        if pre.source_revision:
            facts.append(Fact("source", f"{wrap(pre.source_revision[:12])} "
                              + ("dirty ✗" if pre.source_dirty else "clean ✓")
                              + (f" · intent {wrap(short(pre.intent_digest))}…"
                                 if pre.intent_digest else "")
                              + (f" · configuration {wrap(short(pre.configuration_digest))}…"
                                 if pre.configuration_digest else ""), not pre.source_dirty))
        else:
            facts.append(Fact("source", "no commit ✗ (a creation is bound to one)", False))
    if report is not None:
        checks = report.authorization_checks
        facts.append(Fact("authorization", " · ".join(
            f"{_mark(c.granted)} {wrap(c.capability)}" for c in checks[:FACT_LIST_MAX])
            + _more(len(checks)) if checks else "none reported ✗",
            bool(checks) and all(c.granted for c in checks)))
        platforms = report.platforms
        index = f"index {wrap(short(report.requested_digest))}…: " \
            if report.requested_digest else "no index digest ✗: "
        facts.append(Fact("platforms", index + (" · ".join(
            f"{wrap(p.os + '/' + p.architecture)} runnable {_mark(p.runnable)} manifest "
            f"{_mark(p.manifest_present)}" for p in platforms[:FACT_LIST_MAX])
            + _more(len(platforms)) if platforms else "none listed ✗"),
            bool(platforms) and report.requested_digest is not None
            and all(p.runnable and p.manifest_present for p in platforms)))
        collided = any(b.code == _COLLISION for b in report.blockers) \
            or report.would_replace_existing_state is True
        collision = "collision ✗" if collided else (
            "collision ?" if report.would_replace_existing_state == "unknown"
            else "no collision ✓")
        facts.append(Fact("namespace", f"{wrap(report.namespace)}: reserved "
                          f"{_mark(report.namespace_reserved)} · blank "
                          f"{_mark(report.namespace_blank)} · {collision}"
                          + ("" if report.inventory_complete else " · inventory incomplete ✗"),
                          report.namespace_reserved and report.namespace_blank is True
                          and not collided and report.inventory_complete))
        facts.append(Fact("version", f"{wrap(report.version)} reserved "
                          f"{_mark(report.version_reserved)}"
                          + (f" · tag {wrap(report.release_tag)} reserved "
                             f"{_mark(report.tag_reserved)}" if report.release_tag else ""),
                          report.version_reserved
                          and (report.release_tag is None or report.tag_reserved)))
    if pre.purpose == "create" and pre.execution_available is not None:
        facts.append(Fact("execution", f"{wrap(CREATE_METHOD)} "
                          + ("offered ✓" if pre.execution_available else "not offered ✗"),
                          pre.execution_available))
    return facts


# -- a change this PR modifies (plan --base) ---------------------------------------------


def _dests(rules: tuple[EgressRule, ...], wrap: Callable[[str], str]) -> str:
    return ", ".join(wrap(f"{r.host}:{r.port}") for r in rules)


def _at(ref: ReleaseAt | None, other: ReleaseAt | None, wrap: Callable[[str], str]) -> str:
    """A release by its tag, or by its digest when there is none or both sides share it."""
    if ref is None or ref.digest is None:
        return wrap("<nothing>")
    if ref.tags and (other is None or other.tags[:1] != ref.tags[:1]):
        return wrap(ref.tags[0])
    return wrap(short(ref.digest)) + (f" ({wrap(ref.tags[0])})" if ref.tags else "")


def modified_phrase(m: ModifiedChange, wrap: Callable[[str], str] = _plain,
                    warn: str = " (destructive)") -> str:
    """What a PR changes inside a change pending on the base, in words: "adds
    api.sendgrid.com:443 to checkout's egress (api.paypal.com:443 already pending)".
    ``wrap`` embeds each plan string; ``warn`` marks what takes something away."""
    svc = wrap(m.service)
    if m.target is Target.EGRESS:
        added_live = {(r.host, r.port) for r in m.egress_added_vs_live}
        removed_live = {(r.host, r.port) for r in m.egress_removed_vs_live}
        opens = tuple(r for r in m.egress_added_vs_base if (r.host, r.port) in added_live)
        keeps = tuple(r for r in m.egress_added_vs_base if (r.host, r.port) not in added_live)
        revokes = tuple(r for r in m.egress_dropped_vs_base if (r.host, r.port) in removed_live)
        withdraws = tuple(r for r in m.egress_dropped_vs_base
                          if (r.host, r.port) not in removed_live)
        clauses = []
        if opens:
            clauses.append(f"adds {_dests(opens, wrap)} to {svc}'s egress")
        if keeps:
            clauses.append(f"keeps {_dests(keeps, wrap)} in {svc}'s egress (the base revokes "
                           f"{'it' if len(keeps) == 1 else 'them'})")
        if withdraws:
            clauses.append(f"no longer opens {_dests(withdraws, wrap)} for {svc}")
        if revokes:
            clauses.append(f"revokes {_dests(revokes, wrap)} from {svc}'s egress{warn}")
        said = "; ".join(clauses) or f"changes {svc}'s egress pending on the base"
        if m.egress_pending_on_base:
            said += f" ({_dests(m.egress_pending_on_base, wrap)} already pending)"
        return said
    if m.target is Target.RELEASE:
        head = _at(m.release_head, m.release_base, wrap)
        base = _at(m.release_base, m.release_head, wrap)
        if m.action == Action.ROLLBACK.value:
            return f"rolls {svc} back to {head} instead of {base} (pending on the base){warn}"
        return f"promotes {svc} to {head} instead of {base} (pending on the base)"
    if m.target is Target.GRANT:
        user = wrap(m.user_id or "?")
        clauses = []
        if m.capabilities_added_vs_base:
            clauses.append("adds " + ", ".join(wrap(c) for c in m.capabilities_added_vs_base))
        if m.capabilities_dropped_vs_base:
            clauses.append("drops " + ", ".join(wrap(c)
                                                for c in m.capabilities_dropped_vs_base))
        if not clauses:
            return f"changes {user}'s grant on {svc} pending on the base"
        return (f"{' and '.join(clauses)} in {user}'s grant on {svc} (pending on the base)"
                + (warn if m.capabilities_dropped_vs_base else ""))
    if m.target is Target.ROUTE:
        return f"changes a route of {svc} pending on the base: {wrap(m.summary)}"
    if m.fields and len(m.fields) <= 2:
        return (f"changes {svc}'s pending creation: "
                + ", ".join(f"{f.field} {wrap(f.base or '<none>')} → {wrap(f.head or '<none>')}"
                            for f in m.fields))
    if m.fields:
        return (f"changes {len(m.fields)} fields of {svc}'s pending creation ("
                + ", ".join(f.field for f in m.fields) + ")")
    return f"changes {svc}'s pending creation"


def modified_detail(m: ModifiedChange, wrap: Callable[[str], str] = _plain) -> list[str]:
    """The lines under a modified change: against the base's pending change, then
    against live (egress), or base → head (release, grant, creation)."""
    def rules(items: tuple[EgressRule, ...]) -> str:
        return _dests(items, wrap) or "nothing"

    if m.target is Target.EGRESS:
        return [f"vs the base's pending change: added {rules(m.egress_added_vs_base)}; "
                f"dropped {rules(m.egress_dropped_vs_base)}",
                f"vs live: added {rules(m.egress_added_vs_live)}; "
                f"removed {rules(m.egress_removed_vs_live)}"]
    if m.target is Target.RELEASE:
        def full(ref: ReleaseAt | None) -> str:
            if ref is None or ref.digest is None:
                return wrap("<nothing>")
            tags = ",".join(ref.tags)
            return wrap(short(ref.digest)) + (f" ({wrap(tags)})" if tags else "")
        return [f"release: base {m.base_action} {full(m.release_base)} → this PR "
                f"{m.action} {full(m.release_head)}"]
    if m.target is Target.GRANT:
        def caps(items: tuple[str, ...]) -> str:
            return ", ".join(wrap(c) for c in items) or "nothing"
        return [f"vs the base's pending grant: added {caps(m.capabilities_added_vs_base)}; "
                f"dropped {caps(m.capabilities_dropped_vs_base)}"]
    return [f"{f.field}: base {wrap(f.base or '<none>')} → this PR {wrap(f.head or '<none>')}"
            for f in m.fields] or [f"was: {wrap(m.base_summary)}"]


#: How many files a source note names before it counts the rest.
SOURCE_FILES_NAMED = 10


def _files(names: tuple[str, ...] | list[str]) -> str:
    shown = ", ".join(safe(n, 200) for n in names[:SOURCE_FILES_NAMED])
    more = len(names) - SOURCE_FILES_NAMED
    return shown + (f" and {more} more" if more > 0 else "")


def source_headline(plan: Plan) -> str | None:
    """What a reader must know before anything else about where the plan's desired state
    came from, in a few words (a Markdown title's prefix); None for a clean commit."""
    if plan.worktree:
        return "preview of uncommitted changes (never applied)"
    if plan.dirty or plan.uncommitted or plan.untracked:
        return "uncommitted edits are not included"
    return None


def source_note(plan: Plan) -> str | None:
    """The same, as the sentence the first line of every view says (text, Markdown, JSON
    ``source_note``): a worktree preview, or a plan of a commit beside edits it left out
    (instead of "no changes" next to an edited file). None for a clean commit."""
    at = f"commit {plan.commit[:12]}" if plan.commit else "no commit"
    if plan.worktree and not plan.commit and not plan.repo_root:
        return ("preview of uncommitted changes: a directory outside git, as it is on disk; it "
                "can be shown and commented, never applied: commit it to a git repository, "
                "then plan again")
    if plan.worktree:
        edits = [*(f"{p} (modified)" for p in plan.uncommitted),
                 *(f"{p} (untracked)" for p in plan.untracked)]
        return ("preview of uncommitted changes: the working tree as it is ("
                + (f"{at} plus {_files(edits)}" if edits else f"{at}, no edits")
                + "); it can be shown and commented, never applied: commit, then plan again")
    if plan.dirty or plan.uncommitted or plan.untracked:
        left = [*(f"{p} (modified)" for p in plan.uncommitted),
                *(f"{p} (untracked)" for p in plan.untracked)]
        return (f"uncommitted edits are not included: this plan reads {at} and leaves out "
                + (_files(left) if left else "the edits to tracked files")
                + "; commit them, or preview them with: reconcile plan --worktree")
    return None
