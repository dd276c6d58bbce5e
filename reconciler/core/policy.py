"""Policies as code: CEL rules evaluated against each promotion of a plan.

Owns the context a rule sees and what a rule's answer means. For each promotion (a
``promote`` or ``create`` change) into an environment a ``Policy`` covers, every rule's
``expression`` is evaluated with these variables::

    environment  "prod"
    service      "checkout"
    change       {action, digest, registryHost, repository, reference, tag}
    release      {evidence: [kinds], evidenceComplete: bool, version}
    upstream     {name, proven: bool, provenSeconds: int (-1 unknown)}
    soak         {requiredSeconds: int}
    now          timestamp (the snapshot's time, UTC)
    local        {weekday (0 = Sunday), hour, minute, date "YYYY-MM-DD"} in the
                 policy's ``timezone``

``true`` lets the promotion go; ``false`` is a ``policy_denied`` blocker naming the
policy, the rule and its message; an error while evaluating (a missing key, a type
error, a non-bool answer) is the same blocker saying so: a rule that cannot answer never
lets a promotion through. A rule that does not compile or does not type-check against
these variables (``core.celcheck``) is a validation error with file:line
(``shell.environments``), found before any plan; a rule whose cost bound is over the
budget is one too, and a plan that meets it anyway never runs it: ``policy_denied …
could not be evaluated (budget exceeded: …)``.

The CEL engine is ``common-expression-language`` (Rust ``cel`` crate bindings), measured
against ``cel-python`` here: compiling a three-clause rule 2 ms vs 42 ms (810 ms the
first time), evaluating it 0.12 ms vs 5-10 ms, three nested ``.all`` over ten items
0.9 ms vs 2.1 s; neither type-checks nor bounds cost, so ``core.celcheck`` does both for
either (numbers in docs/promotion.md). Its package ``__init__`` also imports its
command-line tool (typer, rich, prompt_toolkit: ~1-2 s here), so the compiled extension
is loaded on its own (50 ms).

Pure: no I/O (the engine is loaded from the installed package like any import).
"""

from __future__ import annotations

import glob
import importlib.machinery
import importlib.util
import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from functools import cache
from typing import Any

from reconciler.core import celcheck
from reconciler.core.codes import BlockerCode
from reconciler.core.desired import DesiredState, EvidenceKind
from reconciler.core.evidence import Proof, Target, judge
from reconciler.core.kinds.release import PromoteChange, RollbackChange
from reconciler.core.pipeline import Policy, zone
from reconciler.core.plans import Blocker, Plan
from reconciler.core.promotion import PROMOTING, Upstream, soak_clock
from reconciler.core.sanitize import safe


@cache
def _engine() -> Any:
    """The ``cel`` extension module, without the package's CLI imports."""
    spec = importlib.util.find_spec("cel")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the CEL engine (common-expression-language) is not installed")
    found = glob.glob(os.path.join(next(iter(spec.submodule_search_locations)), "cel.*.so"))
    if not found:  # pragma: no cover - another packaging: fall back to the package
        import cel
        return cel
    loader = importlib.machinery.ExtensionFileLoader("cel.cel", found[0])
    module_spec = importlib.util.spec_from_loader("cel.cel", loader)
    assert module_spec is not None
    module = importlib.util.module_from_spec(module_spec)
    loader.exec_module(module)
    return module


def compile_error(expression: str) -> str | None:
    """Why ``expression`` does not compile as CEL, or None."""
    try:
        _engine().compile(expression)
    except Exception as exc:  # the engine raises ValueError and kin
        return safe(" ".join(str(exc).split()), 600)
    return None


def check_error(expression: str) -> str | None:
    """Why a compiling ``expression`` cannot be trusted to answer true or false against
    the documented variables (``core.celcheck``: an unknown variable, field or function,
    a type error, a non-boolean answer), or None. The budget is ``budget_error``'s."""
    try:
        celcheck.check(expression)
    except (celcheck.CelSyntaxError, celcheck.CelTypeError) as exc:
        return safe(f"{exc} (column {exc.column})", 600)
    except RecursionError:
        return "it is nested too deeply to read"
    return None


def budget_error(expression: str) -> str | None:
    """``budget exceeded: …`` when the rule's cost bound is over ``celcheck.BUDGET``;
    None when it is within (or cannot be read: ``check_error`` says why)."""
    try:
        cost = celcheck.check(expression).cost
    except (celcheck.CelSyntaxError, celcheck.CelTypeError, RecursionError):
        return None
    return celcheck.over_budget(cost) if cost > celcheck.BUDGET else None


@cache
def _program(expression: str) -> Any:
    return _engine().compile(expression)


def _local(now: datetime, timezone: str) -> dict[str, Any]:
    at = now.astimezone(zone(timezone))
    return {"weekday": (at.isoweekday() % 7), "hour": at.hour, "minute": at.minute,
            "date": f"{at:%Y-%m-%d}"}


def context(plan: Plan, desired: DesiredState, environment: str, service: str,
            upstream: Upstream | None, soak_seconds: int, now_ms: int,
            timezone: str) -> dict[str, Any]:
    """The variables a rule sees for ``service``'s promotion in ``plan``."""
    change = next(c for c in plan.changes if c.service == service and c.action in PROMOTING)
    declared = desired.service_by_name(service)
    release = declared.release if declared else None
    kinds = sorted({a.kind.value for a in release.evidence}) if release else []
    digest = change.release_after.digest if isinstance(
        change, PromoteChange | RollbackChange) else None
    proven = -1
    if upstream is not None and digest and service in upstream.services:
        # The judge first, then the soak's own clock (continuous proof, sources checked):
        # a rule reading proven/provenSeconds never counts time the soak would not.
        facts = upstream.services[service]
        proof = judge(Target(service=service, app_id=facts.app_id, digest=digest,
                             egress=facts.egress), facts.live, facts.expected,
                      facts.observations)
        since = soak_clock(facts.live, digest, facts.expected, facts.observations,
                           now_ms).since if proof.proof is Proof.CONVERGED else None
        proven = -1 if since is None else max(0, (now_ms - since) // 1000)
    now = datetime.fromtimestamp(now_ms / 1000, UTC)
    return {
        "environment": environment,
        "service": service,
        "change": {"action": change.action.value, "digest": digest or "",
                   "registryHost": release.registry_host if release else "",
                   "repository": release.repository if release else "",
                   "reference": release.reference if release else "",
                   "tag": (release.tag or "") if release else ""},
        "release": {"evidence": kinds,
                    "evidenceComplete": set(kinds) >= {k.value for k in EvidenceKind},
                    "version": (release.version or "") if release else ""},
        "upstream": {"name": upstream.name if upstream else "", "proven": proven >= 0,
                     "provenSeconds": proven},
        "soak": {"requiredSeconds": soak_seconds},
        "now": now,
        "local": _local(now, timezone),
    }


def evaluate(expression: str, variables: Mapping[str, Any]) -> tuple[bool, str | None]:
    """(passed, why not): an error or a non-bool answer never passes, and neither does a
    rule the static check refuses (``core.celcheck``) -- it is never run, so a rule over
    the budget answers in the time it takes to read it, whoever asks."""
    refused = check_error(expression) or budget_error(expression)
    if refused is not None:
        return False, f"could not be evaluated ({refused})"
    try:
        answer = _program(expression).execute(dict(variables))
    except Exception as exc:  # KeyError, RuntimeError, TypeError...
        return False, f"could not be evaluated ({type(exc).__name__}: {safe(str(exc), 300)})"
    if answer is True:
        return True, None
    if answer is False:
        return False, None
    return False, f"answered {safe(repr(answer), 100)}, not true or false"


def policy_blockers(plan: Plan, desired: DesiredState, environment: str,
                    policies: Sequence[tuple[Policy, str, int]], upstream: Upstream | None,
                    soak_seconds: int, now_ms: int) -> tuple[Blocker, ...]:
    """Every rule that is not true for a promotion of ``plan``, as a blocker."""
    covering = [(p, path) for p, path, _line in policies if p.covers(environment)]
    if not covering:
        return ()
    out: list[Blocker] = []
    for name in sorted({c.service for c in plan.changes if c.action in PROMOTING}):
        for policy, path in covering:
            variables = context(plan, desired, environment, name, upstream, soak_seconds,
                                now_ms, policy.timezone)
            for rule in policy.rules:
                passed, why = evaluate(rule.expression, variables)
                if passed:
                    continue
                said = safe(rule.message) + (f" (the rule {why})" if why else "")
                out.append(Blocker(code=BlockerCode.POLICY_DENIED, service=name,
                                   message=f'{name}: policy "{policy.name}" rule '
                                   f'"{rule.name}" ({safe(path)}): {said}'))
    return tuple(out)
