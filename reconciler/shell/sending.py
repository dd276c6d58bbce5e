"""How each change kind is sent: one sender per kind behind one dispatch (``sender_of``),
so ``shell.applying`` (journal, fence, outcomes) holds no per-kind branches.

Owns ``Sender`` (what the applier asks of a kind: send the change, tell whether a
refused change already landed, word a refusal) and one sender per kind keyed by the kind
(``core.kinds``). A release is promoted or rolled back with its compare-and-swap
generation and rollout; egress is set against its revision; a grant is configured; a
route is synced (idempotent by content); a creation goes through ``shell.greenfield``.

Adding a kind: its sender class here and one entry in ``_SENDERS``.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from reconciler.core import routing, staleness
from reconciler.core.kinds import (
    ChangeBase,
    CreateChange,
    EgressChange,
    GrantChange,
    Kind,
    PromoteChange,
    RollbackChange,
    RouteChange,
    create,
    egress,
    grant,
    kind_of,
    release,
    route,
)
from reconciler.shell import greenfield
from reconciler.shell.controlplane import (
    ControlPlaneClient,
    ControlPlaneError,
    DomainError,
    parse_service,
)

C = TypeVar("C", bound=ChangeBase)


class Sender(Generic[C]):
    """How one kind's changes reach the control plane."""

    async def send(self, client: ControlPlaneClient, change: C) -> tuple[bool, str]:
        """Send one change, the request its kind is written with; True when the control
        plane says it replayed an earlier call with the same key and changed nothing now
        ([ext] ``idempotentReplay``), and what it said worth reporting (a creation's
        operation)."""
        raise NotImplementedError

    async def landed(self, client: ControlPlaneClient, change: C) -> bool:
        """After a CAS refusal of a change we sent before: is its result what is live now?
        (Only what the service's own state shows: ``Kind.shows``.)"""
        if not kind_of(change).waits_for_convergence:
            return False
        try:
            svc = parse_service(await client.get_service(change.service_id), [])
        except ControlPlaneError:
            return False
        return staleness.service_shows(change, svc)

    def made_elsewhere(self, exc: DomainError) -> bool:
        """Whether a domain refusal may mean someone else made this very change first
        (then ``landed`` decides)."""
        return False

    def refusal(self, exc: DomainError) -> str:
        """A domain refusal in words."""
        return str(exc)


class _CreateSender(Sender[CreateChange]):
    async def send(self, client: ControlPlaneClient, change: CreateChange) -> tuple[bool, str]:
        created = await greenfield.create(client, change)
        return created.replayed, f"operation {created.operation_id} {created.state}"

    def made_elsewhere(self, exc: DomainError) -> bool:
        # Another apply (another commit: same key, other payload; or another key) may
        # have created the very service first, rolled out to this digest.
        return exc.code in greenfield.CREATED_ELSEWHERE

    def refusal(self, exc: DomainError) -> str:
        return greenfield.refusal_detail(exc)


class _GrantSender(Sender[GrantChange]):
    async def send(self, client: ControlPlaneClient, change: GrantChange) -> tuple[bool, str]:
        await client.configure_grant(change.user_id, change.service_id,
                                     list(change.capabilities_after))
        return False, ""


class _EgressSender(Sender[EgressChange]):
    async def send(self, client: ControlPlaneClient, change: EgressChange) -> tuple[bool, str]:
        pre = change.preconditions
        assert pre.egress_revision is not None
        reply = await client.set_egress(
            change.service_id, [r.model_dump() for r in change.egress_after],
            idempotency_key=change.idempotency_key, expected_revision=pre.egress_revision)
        return reply.replayed, ""


class _RouteSender(Sender[RouteChange]):
    async def send(self, client: ControlPlaneClient, change: RouteChange) -> tuple[bool, str]:
        # Idempotent by content (seed 11.2): "changed nothing" is a replay's answer.
        target = change.route_after or change.route_before
        assert target is not None
        changed = await client.sync_gateway_client_route(
            routing.ownership_wire(target.ownership),
            routing.to_wire(change.route_after) if change.route_after else None)
        return not changed, ""

    async def landed(self, client: ControlPlaneClient, change: RouteChange) -> bool:
        # A route lives apart from the service: the routes listed show it.
        try:
            ours, _ = await client.get_gateway_client_routes()
        except ControlPlaneError:
            return False
        return route.shows(change.route_after, ours, change.route_key)


class _ReleaseSender(Sender[PromoteChange | RollbackChange]):
    async def send(self, client: ControlPlaneClient,
                   change: PromoteChange | RollbackChange) -> tuple[bool, str]:
        pre = change.preconditions
        assert change.release_after.release_id
        assert pre.rollout_generation is not None
        if isinstance(change, PromoteChange):
            reply = await client.promote(
                change.service_id, change.release_after.release_id,
                idempotency_key=change.idempotency_key,
                expected_generation=pre.rollout_generation, expected_rollout_id=pre.rollout_id)
            return reply.replayed, ""
        assert pre.rollout_id is not None
        reply = await client.rollback(
            change.service_id, change.release_after.release_id,
            idempotency_key=change.idempotency_key,
            expected_generation=pre.rollout_generation, expected_rollout_id=pre.rollout_id)
        return reply.replayed, ""


_SENDERS: dict[Kind[Any], Sender[Any]] = {
    create.KIND: _CreateSender(), grant.KIND: _GrantSender(), egress.KIND: _EgressSender(),
    route.KIND: _RouteSender(), release.KIND: _ReleaseSender(),
}


def sender_of(change: ChangeBase) -> Sender[Any]:
    """The sender of the kind a change belongs to."""
    return _SENDERS[kind_of(change)]
