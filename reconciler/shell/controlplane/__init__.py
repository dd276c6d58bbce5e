"""The control-plane client: TypedRequest over HTTPS, exactly as CONTRACT.md §1 says.

A package of modules that each do one thing; this ``__init__`` re-exports the public
names, so ``from reconciler.shell.controlplane import X`` is the one import callers use:

- ``errors``: the exception tree and the single mapping of httpx failures, HTTP
  statuses and ``error.data.code`` onto it (originals chained, text redacted);
- ``envelope``: the TypedRequest envelope, built and read (pure);
- ``identity``: the machine token from the environment and the identity it buys;
- ``session``: transport, identity injection, ``retry`` replies, transient re-sends,
  the per-call deadline;
- ``client``: ``ControlPlaneClient``, the typed methods and ``capabilities()``;
- ``wire``: replies -> ``core.live`` models (pure);
- ``fleet``: the control plane's half of a snapshot (services, releases in [ext] pages
  or one by one, grants).

Layering inside the package (enforced by import-linter): fleet > client > session >
envelope, identity, wire > errors.

It must not print, log, or put the machine token (or the identity's jwt) in any string
it produces; it never follows redirects, never reads proxy or ``SSL_CERT_*`` variables
and never turns a failure into an empty answer.
"""

from reconciler.shell.controlplane.client import SERVICES_RELEASES, ControlPlaneClient
from reconciler.shell.controlplane.envelope import MAX_RETRY_WAIT_SECONDS, new_correlation_id
from reconciler.shell.controlplane.errors import (
    UNKNOWN_METHOD_TEXT,
    CasMismatch,
    ControlPlaneError,
    DomainError,
    Forbidden,
    IdempotencyKeyReused,
    InvalidRequest,
    NotFound,
    ProtocolError,
    RollbackTargetNotAccepted,
    TransportError,
    Unauthorized,
    UnknownMethod,
    describe_transport_error,
)
from reconciler.shell.controlplane.identity import IDENTITY_SKEW_MS, token_from_env
from reconciler.shell.controlplane.session import (
    CONNECT_EVENT,
    MAX_RETRY_REPLIES,
    MAX_TRANSIENT_ATTEMPTS,
    TRANSIENT_BACKOFF_SECONDS,
)
from reconciler.shell.controlplane.wire import (
    Grants,
    ReleasesPage,
    Services,
    Written,
    parse_client_route,
    parse_client_routes,
    parse_egress,
    parse_grants,
    parse_service,
)

__all__ = [
    "CONNECT_EVENT",
    "IDENTITY_SKEW_MS",
    "MAX_RETRY_REPLIES",
    "MAX_RETRY_WAIT_SECONDS",
    "MAX_TRANSIENT_ATTEMPTS",
    "SERVICES_RELEASES",
    "TRANSIENT_BACKOFF_SECONDS",
    "UNKNOWN_METHOD_TEXT",
    "CasMismatch",
    "ControlPlaneClient",
    "ControlPlaneError",
    "DomainError",
    "Forbidden",
    "Grants",
    "IdempotencyKeyReused",
    "InvalidRequest",
    "NotFound",
    "ProtocolError",
    "ReleasesPage",
    "RollbackTargetNotAccepted",
    "Services",
    "TransportError",
    "Unauthorized",
    "UnknownMethod",
    "Written",
    "describe_transport_error",
    "new_correlation_id",
    "parse_client_route",
    "parse_client_routes",
    "parse_egress",
    "parse_grants",
    "parse_service",
    "token_from_env",
]
