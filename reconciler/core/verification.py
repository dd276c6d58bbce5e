"""Per-cluster verification (issue 34): the values of a check's result and the rules that
turn measurements into evidence for the one judge.

Owns:

- ``Condition``: a success condition (``result < 0.01``, ``result >= 1 and result <= 5``)
  parsed once, evaluated on a number; ``parse_condition`` refuses anything else with a
  sentence (checked when the repo is validated, so a typo is a file:line, never a pass);
- the query template (``{{cluster}}``, ``{{service}}``, ``{{app}}``, ``{{digest}}``):
  ``template_problems`` (unknown placeholders) and ``render_query``;
- ``Outcome`` and ``Measurement`` (one request's verdict), ``CheckResult`` (one check on
  one cluster, bound to the digest and rollout generation it was taken for) and
  ``combine``: ``count`` measurements, more than ``failureLimit`` failures is a failure,
  any measurement that could not be read leaves the check unknown, else it passes;
- ``judge_checks``: what a cluster's results prove for a digest and generation -- the
  judge (``core.evidence``) asks it for every cluster whose release is otherwise proven.

The rule that matters: **unknown is never a pass.** A result that is missing, unknown,
taken for another digest or another rollout generation proves nothing (the cluster is
unproven, like a silent one); a failing result is the cluster's stated failure, naming
the check and the value.

Must not: do I/O, look at the clock, or render; the shell (``shell.verifying``) takes the
measurements.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar

from pydantic import ConfigDict

from reconciler.core.lean import LeanModel
from reconciler.core.sanitize import safe
from reconciler.core.values import LeanValue, lean_config

#: The placeholders a Prometheus query may hold, filled per cluster and service.
PLACEHOLDERS = ("cluster", "service", "app", "digest")
_PLACEHOLDER = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")

_OPERATORS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le, ">=": operator.ge, "==": operator.eq, "!=": operator.ne,
    "<": operator.lt, ">": operator.gt,
}
_COMPARISON = re.compile(
    r"\s*result\s*(<=|>=|==|!=|<|>)\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*")
_JOIN = re.compile(r"\s+(?:and|&&)\s+")


@dataclass(frozen=True, slots=True)
class Condition:
    """A success condition: every comparison of ``result`` must hold (``and``)."""

    text: str
    terms: tuple[tuple[str, float], ...]

    def holds(self, value: float) -> bool:
        """Whether ``value`` passes. NaN passes nothing (it is no measurement)."""
        if math.isnan(value):
            return False
        return all(_OPERATORS[op](value, bound) for op, bound in self.terms)


def parse_condition(text: str) -> Condition:
    """``text`` as a ``Condition``; ValueError with a sentence when it is not one."""
    terms: list[tuple[str, float]] = []
    for part in _JOIN.split(text.strip()):
        found = _COMPARISON.fullmatch(part)
        if found is None:
            raise ValueError(
                f"cannot read {part.strip()!r} as a comparison: write `result OP NUMBER` "
                "(OP one of <, <=, >, >=, ==, !=), several joined by `and`, e.g. "
                "`result < 0.01` or `result >= 1 and result <= 5`")
        bound = float(found.group(2))
        if not math.isfinite(bound):
            raise ValueError(f"{found.group(2)!r} is not a finite number")
        terms.append((found.group(1), bound))
    return Condition(text=text.strip(), terms=tuple(terms))


def template_problems(query: str) -> list[str]:
    """What is wrong with ``query``'s placeholders (empty: nothing)."""
    problems = [f"unknown placeholder {{{{{name}}}}}: one of "
                f"{', '.join('{{' + p + '}}' for p in PLACEHOLDERS)}"
                for name in _PLACEHOLDER.findall(query) if name not in PLACEHOLDERS]
    rest = _PLACEHOLDER.sub("", query)
    if "{{" in rest or "}}" in rest:
        problems.append("an unclosed `{{` or a stray `}}`: placeholders are written "
                        "{{cluster}}, {{service}}, {{app}} or {{digest}}")
    return problems


def per_cluster(query: str) -> bool:
    """Whether the query names its cluster (``{{cluster}}``): asked once per cluster;
    else asked once and its samples told apart by their ``cluster`` label."""
    return any(name == "cluster" for name in _PLACEHOLDER.findall(query))


def render_query(query: str, *, cluster: str, service: str, app: str, digest: str) -> str:
    """The query with its placeholders filled (values are ids and digests: no quoting is
    needed inside a PromQL string, and none can hold a quote -- see ``core.names``)."""
    values = {"cluster": cluster, "service": service, "app": app, "digest": digest}
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), query)


class Outcome(StrEnum):
    """A check's verdict. Only ``pass`` is ever a pass."""

    PASS = "pass"
    FAIL = "fail"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Measurement:
    """One request's verdict: its value (a number, a status, a latency) and why."""

    outcome: Outcome
    value: str = ""  # what was measured, as said to a reader ("0.52", "HTTP 500")
    why: str = ""  # for fail and unknown: one sentence


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckResult(LeanValue):
    """One check on one cluster for one service, bound to the digest and the rollout
    generation it was taken for (a result for another is not evidence)."""

    __pydantic_config__: ClassVar[ConfigDict] = lean_config(strict=False)

    check: str  # "<verification>/<check>"
    cluster: str
    service: str
    digest: str
    generation: int | None  # the control plane's rollout generation when measured
    outcome: Outcome
    value: str = ""
    why: str = ""
    measurements: int = 0  # how many were taken (requests for a per-cluster check)

    def sentence(self) -> str:
        """What a reader is told: ``check error-ratio failed: 0.52 (result < 0.01)``."""
        value = f": {self.value}" if self.value else ""
        why = f" ({self.why})" if self.why else ""
        verb = {Outcome.PASS: "passed", Outcome.FAIL: "failed",
                Outcome.UNKNOWN: "is unknown"}[self.outcome]
        return f"check {self.check} {verb}{value}{why}"


def combine(measurements: Sequence[Measurement], *, count: int,
            failure_limit: int) -> Measurement:
    """A series' verdict: more than ``failure_limit`` failures fail it (the last failing
    measurement is the one named); else any measurement not read, or fewer than
    ``count`` taken, leaves it unknown; else (``count`` taken, each passed or within the
    failure limit) it passes. The evaluator may stop a series as soon as it fails."""
    failures = [m for m in measurements if m.outcome is Outcome.FAIL]
    if len(failures) > failure_limit:
        last = failures[-1]
        return Measurement(Outcome.FAIL, last.value,
                           f"{len(failures)} of {len(measurements)} measurements failed; "
                           f"{last.why}" if len(measurements) > 1 else last.why)
    unknown = [m for m in measurements if m.outcome is Outcome.UNKNOWN]
    if unknown:
        return Measurement(Outcome.UNKNOWN, unknown[-1].value, unknown[-1].why)
    if len(measurements) < count:
        return Measurement(Outcome.UNKNOWN, "",
                           f"{len(measurements)} of {count} measurements taken")
    last = measurements[-1] if measurements else Measurement(Outcome.UNKNOWN)
    return Measurement(Outcome.PASS, last.value, "")


def series_done(measurements: Sequence[Measurement], *, count: int,
                failure_limit: int) -> bool:
    """Whether a series needs no more measurements: ``count`` taken, or already failed."""
    failures = sum(1 for m in measurements if m.outcome is Outcome.FAIL)
    return len(measurements) >= count or failures > failure_limit


@dataclass(frozen=True, slots=True)
class ChecksVerdict:
    """What one cluster's check results prove: ``None`` outcome when every check passed
    for the digest and generation; else ``fail`` (stated: the first failing check) or
    ``unknown`` (an evidence gap), with one sentence naming the check and value."""

    outcome: Outcome
    detail: str


def judge_checks(checks: Iterable[str], results: Iterable[CheckResult], *, digest: str,
                 generation: int | None) -> ChecksVerdict:
    """The rule for one cluster: every declared check needs a passing result taken for
    ``digest`` (and ``generation``, when both are known). A failing one is a stated
    failure; a missing, unknown or misbound one is unknown. Failure wins over unknown."""
    by_check: dict[str, CheckResult] = {}
    for given in results:
        by_check.setdefault(given.check, given)
    failed: list[str] = []
    unknown: list[str] = []
    for name in checks:
        result = by_check.get(name)
        if result is None:
            unknown.append(f"check {name} has no result")
        elif result.digest != digest:
            unknown.append(f"check {name}'s result was taken for {result.digest[:19]}, "
                           f"not {digest[:19]}")
        elif generation is not None and result.generation is not None \
                and result.generation != generation:
            unknown.append(f"check {name}'s result was taken for rollout generation "
                           f"{result.generation}, not {generation}")
        elif result.outcome is Outcome.FAIL:
            failed.append(safe(result.sentence()))
        elif result.outcome is not Outcome.PASS:
            unknown.append(safe(result.sentence()))
    if failed:
        return ChecksVerdict(Outcome.FAIL, "; ".join(failed))
    if unknown:
        return ChecksVerdict(Outcome.UNKNOWN, "; ".join(unknown))
    return ChecksVerdict(Outcome.PASS, "")


class PlannedCheck(LeanModel):
    """A check a plan holds a service to, as the plan shows it (text, JSON, Markdown)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str  # "<verification>/<check>"
    kind: str  # "http" | "prometheus"
    spec: str  # one line: what is asked and what passes
    count: int = 1
    interval_seconds: float = 0.0
    failure_limit: int = 0


class ServiceChecks(LeanModel):
    """Every check one service is held to on each expected cluster (issue 34)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    service: str
    checks: tuple[PlannedCheck, ...]
