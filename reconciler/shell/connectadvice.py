"""What to do about a control-plane failure: the next step said after the error.

Owns the wording of that advice, from the failure's kind and the connection's effective
values *with their sources* (``Connection.explain``): a certificate that does not verify
names the CA file in use (or the system trust store) and where it was set; an
``http://`` URL to a server that speaks TLS says to use ``https://`` and where the URL
was set; an unreachable control plane suggests the local sandbox only when the URL is a
loopback one (a remote URL gets "check the URL", never a sandbox).

The advice is returned apart from the message (``EngineError.hint``), so a place that
wants only what happened -- the daemon's ``/readyz`` body -- leaves it out. Must not do
I/O nor decide anything else.
"""

from __future__ import annotations

from collections.abc import Mapping

from reconciler.core.results import LOCAL_SANDBOX_ADVICE
from reconciler.shell.controlplane import ControlPlaneError
from reconciler.shell.controlplane.errors import SchemeMismatch, TlsVerificationFailed
from reconciler.shell.endpoints import Connection, Effective, is_loopback_host, url_host


def _source(values: Mapping[str, Effective] | None, name: str) -> str:
    if values is None or name not in values:
        return ""
    source = values[name].source
    if source.kind == "default":
        return " (the built-in default: nothing set it)"
    where = {"flag": "flag", "env": "env", "settings": "settings"}[source.kind]
    return f" (set by {where} {source.name}" + (", unset to its default)" if source.unset
                                                  else ")")


def next_step(exc: ControlPlaneError, connection: Connection,
              values: Mapping[str, Effective] | None = None) -> str:
    """``"; <what to do>"`` for ``exc``, or "" when there is nothing useful to say."""
    text = str(exc)
    url_source = _source(values, "control_plane_url")
    host = url_host(connection.control_plane_url)
    if isinstance(exc, SchemeMismatch):
        https = "https://" + connection.control_plane_url.split("://", 1)[-1]
        return (f"; use {https} as the control plane URL: it is "
                f"{connection.control_plane_url}{url_source}")
    if isinstance(exc, TlsVerificationFailed):
        if exc.hostname_mismatch:
            return (f"; the certificate does not name {host}: use a URL with a host name "
                    f"it holds (the URL{url_source}), not another name or address")
        ca_source = _source(values, "control_plane_ca")
        trusted = (f"the CA in {connection.control_plane_ca}{ca_source}"
                   if connection.control_plane_ca is not None
                   else f"the system trust store{ca_source}")
        return (f"; its certificate is not signed by {trusted}: pass --control-plane-ca "
                "PATH (env RECONCILE_CONTROL_PLANE_CA, or settings controlPlane.caFile) with "
                "the CA that signed it; retrying cannot help")
    if "unreachable" in text:
        if is_loopback_host(host):
            return LOCAL_SANDBOX_ADVICE  # a pull request's comment says another thing
        return (f"; is it running and reachable from here? check the control plane URL "
                f"{connection.control_plane_url}{url_source}")
    if "TLS:" in text:
        return ("; pass --control-plane-ca PATH (or --ca-file) with the CA that signed its "
                "certificate, or 'system'")
    if "nauthorized" in text or "UNAUTHORIZED" in text:
        return f"; the token in {connection.token_env} was refused: set it to a valid one"
    return ""
