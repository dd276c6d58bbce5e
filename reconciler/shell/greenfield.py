"""The greenfield calls: the preflight reads a plan needs, and the creation apply sends.

Owns two exchanges with the control plane, both through ``ControlPlaneClient``:

- ``read``: for the creations a plan holds, whether the control plane executes them at
  all (``createGreenfieldDeployment`` among its [ext] capabilities; the real upstream has
  none, so it never does) and, for each request ``core.planning.creation_requests``
  built, the ``getDeploymentPreflight`` answer -- the raw ``report`` value or why there is
  none. A failure is an answer (``core.preflight.Answer.error``), never an exception: the
  planner turns it into a blocker for that service and plans the rest.
- ``ask``: the same answers for a second round (the requests bound to the configuration
  digest the first round reported, ``core.planning.bound_requests``), added to a
  ``Greenfield`` already read. Which round comes when is the engine's to say.
- ``create``: ``createGreenfieldDeployment`` [ext] with the change's idempotency key,
  re-sent with the same key after a transient failure (the server replays; nothing is
  created twice).

Must not decide anything (the report is parsed and judged in ``core``), sequence anything
(the engine does) or print.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reconciler.core import cpcodes
from reconciler.core import preflight as pf
from reconciler.core.kinds import CreateChange
from reconciler.core.planning import PreflightAsk
from reconciler.core.sanitize import safe
from reconciler.shell.controlplane import (
    ControlPlaneClient,
    ControlPlaneError,
    DomainError,
    ProtocolError,
)

PREFLIGHT_METHOD = "getDeploymentPreflight"
#: Refusals of a creation that may mean "someone else created it first": the executor then
#: looks whether the service now runs the pinned digest before calling it refused.
CREATED_ELSEWHERE = cpcodes.CREATED_ELSEWHERE


async def read(client: ControlPlaneClient, asks: Sequence[PreflightAsk], *,
               creating: bool) -> pf.Greenfield:
    """What the plan needs to judge its creations. ``creating``: the plan holds at least
    one (even one whose local checks failed, so nothing is asked for it): only then is
    the control plane asked what it can execute."""
    if not creating:
        return pf.Greenfield(answers={})
    capabilities_error = None
    execution = False
    try:
        execution = pf.CREATE_METHOD in await client.capabilities()
    except ControlPlaneError as exc:
        capabilities_error = exc.message
    return pf.Greenfield(execution_available=execution, capabilities_error=capabilities_error,
                         answers=await _answers(client, asks))


async def ask(client: ControlPlaneClient, asks: Sequence[PreflightAsk],
              read_so_far: pf.Greenfield) -> pf.Greenfield:
    """``read_so_far`` with the answers to ``asks`` added (nothing asked when empty)."""
    if not asks:
        return read_so_far
    answers = {**(read_so_far.answers or {}), **await _answers(client, asks)}
    return dataclasses.replace(read_so_far, answers=answers)


async def _answers(client: ControlPlaneClient, asks: Sequence[PreflightAsk],
                   ) -> dict[str, pf.Answer]:
    slots = asyncio.Semaphore(max(1, client.concurrency))

    async def one(ask: PreflightAsk) -> pf.Answer:
        async with slots:
            try:
                response = await client.read(PREFLIGHT_METHOD, dict(ask.request))
            except DomainError as exc:
                return pf.Answer(request_id=ask.request_id, error=exc.message,
                                 code=safe(exc.code, 60) or None)
            except ControlPlaneError as exc:
                return pf.Answer(request_id=ask.request_id, error=exc.message)
            if "report" not in response:
                return pf.Answer(request_id=ask.request_id,
                                 error=f"{PREFLIGHT_METHOD}: the response has no report")
            return pf.Answer(request_id=ask.request_id, reply=response["report"])

    answers = await asyncio.gather(*(one(a) for a in asks))
    return {a.request_id: a for a in answers}


@dataclass(frozen=True)
class Created:
    """The control plane's answer to a creation: the operation (id, state), and whether
    it replayed an earlier call with the same key ([ext] ``idempotentReplay``)."""

    operation_id: str
    state: str
    replayed: bool


def _operation(response: dict[str, Any], method: str) -> tuple[str, str]:
    operation = response.get("operation")
    data = operation.get("data") if isinstance(operation, dict) else None
    if not isinstance(operation, dict) or not isinstance(data, dict) \
            or not isinstance(operation.get("id"), str) or not isinstance(data.get("state"), str):
        raise ProtocolError(f"{method}: response.operation is not an operation "
                            "({id, data: {state, ...}})")
    return safe(operation["id"], 120), safe(data["state"], 40)


async def create(client: ControlPlaneClient, change: CreateChange) -> Created:
    """Send one ``create`` change. Raises the client's errors (``DomainError`` with the
    control plane's code: ``PREFLIGHT_NO_GO``, ``FENCE_MISMATCH``,
    ``WOULD_REPLACE_EXISTING_STATE``, ``FORBIDDEN``, ...)."""
    response = await client.read(pf.CREATE_METHOD, change.creation.wire(change.idempotency_key))
    operation_id, state = _operation(response, pf.CREATE_METHOD)
    return Created(operation_id=operation_id, state=state,
                   replayed=response.get("idempotentReplay") is True)


def refusal_detail(exc: DomainError) -> str:
    """A creation's refusal as one sentence: the control plane's text, and for
    ``PREFLIGHT_NO_GO`` the upstream blocker codes it re-found (``data.blockers``)."""
    detail = f"{exc.message} ({safe(exc.code, 60)})"
    blockers = exc.data.get("blockers") if isinstance(exc.data, dict) else None
    if isinstance(blockers, list):
        codes = [safe(b.get("code"), 60) for b in blockers if isinstance(b, dict)]
        if codes:
            detail += ": " + ", ".join(codes)
    return detail
