"""The cluster prober: ask every cluster behind the gateway what it runs.

A package of modules that each do one thing; this ``__init__`` re-exports the public
names, so ``from reconciler.shell.probing import X`` is the one import callers use:

- ``dialing``: one bounded request to one address (SNI/Host pinned, per-address pools,
  failure streaks), httpx failures mapped to ``Silent`` reasons;
- ``resolving``: the gateway resolved once per pass, each address named by its health;
- ``authenticating``: the per-address challenge/verify handshake and bearer cache;
- ``reading``: an app's status at one address, as an ``Observation``;
- ``parsing``: the mesh's reply shapes -> sanitized values (pure);
- ``prober``: ``Prober``, one pass over every (app, cluster).

Which answer belongs to which cluster is pure and lives in ``core.attribution``.

Evidence rules it enforces (CONTRACT §3): an expected cluster no address named is silent;
a cluster named by two addresses is silent (the answers cannot be attributed); an
address whose health route failed is reported by address, silent; an empty DNS answer
is a ``resolve_error``, never "one cluster". It must not raise for a per-cluster
problem, must not print, and must not write anything to a cluster.
"""

from reconciler.shell.keys import load_signer_key
from reconciler.shell.probing.authenticating import CHALLENGE_PATH, VERIFY_PATH
from reconciler.shell.probing.dialing import DEFAULT_MAX_FAILURES
from reconciler.shell.probing.parsing import parse_runtime
from reconciler.shell.probing.prober import Prober
from reconciler.shell.probing.reading import STATUS_PATH
from reconciler.shell.probing.resolving import HEALTH_PATH, Resolver, system_resolver

__all__ = [
    "CHALLENGE_PATH",
    "DEFAULT_MAX_FAILURES",
    "HEALTH_PATH",
    "STATUS_PATH",
    "VERIFY_PATH",
    "Prober",
    "Resolver",
    "load_signer_key",
    "parse_runtime",
    "system_resolver",
]
