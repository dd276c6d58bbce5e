"""Read what one cluster runs: an app's status at one address, as an ``Observation``.

Owns the status request (CONTRACT §2 step 3) with the address's bearer -- a reused
bearer refused with 401 is re-minted once, a fresh one refused is silent -- and the
mapping of every outcome onto the three kinds of evidence: answered (with the parsed
runtime), no record (404), or silent with the reason.

Must not raise for a cluster's failure (that is the observation) and must not print.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import quote

from reconciler.core.live import ClusterRuntime, Observation, ObservationKind
from reconciler.shell.probing.authenticating import Authenticator
from reconciler.shell.probing.dialing import Dialer, Silent, now_ms
from reconciler.shell.probing.parsing import Malformed, Shared, read_status_json

STATUS_PATH: Final = "/host/api/v3/baas/deployment/apps/{app_id}/status"


class Reader:
    """Status reads against the mesh's addresses, with their bearers."""

    def __init__(self, dialer: Dialer, auth: Authenticator) -> None:
        self._dialer = dialer
        self._auth = auth

    async def observe(self, app_id: str, cluster: str, address: str,
                      shared: Shared | None = None) -> Observation:
        """One app on one cluster: what it said, or why it said nothing (``shared``: the
        pass's parsed values, see ``parsing.Shared``)."""
        try:
            kind, runtime, since = await self._status(app_id, address, shared)
        except Silent as exc:
            return Observation(cluster_id=cluster, address=address,
                               kind=ObservationKind.SILENT, reason=exc.reason,
                               observed_at=now_ms())
        return Observation(cluster_id=cluster, address=address, kind=kind, runtime=runtime,
                           observed_at=now_ms(), healthy_since=since)

    async def _status(self, app_id: str, address: str, shared: Shared | None,
                      ) -> tuple[ObservationKind, ClusterRuntime | None, int | None]:
        path = STATUS_PATH.format(app_id=quote(app_id, safe=""))
        token, reused = await self._auth.token(address)
        response = await self._dialer.request(address, "GET", path, bearer=token)
        if response.status_code == 401 and reused:
            # A cached bearer can outlive its session: re-mint once (seed 000).
            token = await self._auth.remint(address, token)
            response = await self._dialer.request(address, "GET", path, bearer=token)
        if response.status_code == 401:
            raise Silent("auth: status read HTTP 401 with a freshly minted token")
        if response.status_code == 404:
            return ObservationKind.NO_RECORD, None, None
        if response.status_code != 200:
            raise Silent(f"status read HTTP {response.status_code}")
        try:
            runtime, since = read_status_json(app_id, response.content, shared)
            return ObservationKind.ANSWERED, runtime, since
        except Malformed as exc:
            raise Silent(exc.reason) from exc
