"""Where the live world is: settings, environment and flags folded into one ``Connection``.

Owns the precedence rule (flags win over the environment, the environment wins over the
settings document), the curl-style ``--resolve`` syntax, the resolution of relative CA
paths, and the TLS context every client of the live world uses. It is the only module
that reads the ``RECONCILE_*`` override variables.

It must not open a socket, read a secret, or print: the token and the signer key are
read by their users (``controlplane.token_from_env``, ``observing``) and never stored
here -- a ``Connection`` holds only the *names* of the variables that hold them, so it
can be logged, compared and put in a repr safely.

Credentials in the control-plane URL (``https://admin:PW@host``) are refused with a
``ConfigError``: the machine token named by ``controlPlane.tokenEnv`` is how ``reconcile``
authenticates, so userinfo would either be silently sent as basic auth or silently
ignored, and in both cases the URL would carry a secret into every message, plan header
and saved plan that shows it. A ``Connection`` therefore never holds userinfo (its
constructor checks too), and every message that shows a URL given by the user passes
``display_url``, which keeps the user name and masks the rest: ``https://admin:***@host``
(a lone user part, which may itself be a token, becomes ``***``).

Callers: ``observing`` (the snapshot), the apply engine (writes and the convergence
gate) and the CLI commands that build a ``Connection`` once per run.
"""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path

from reconciler.core.desired import Settings
from reconciler.core.sanitize import safe

#: The TypedRequest route on the control plane (CONTRACT §1).
TYPEDREQUEST_PATH = "/typedrequest"

ENV_CONTROL_PLANE_URL = "RECONCILE_CONTROL_PLANE_URL"
ENV_CA_FILE = "RECONCILE_CA_FILE"
ENV_GATEWAY = "RECONCILE_GATEWAY"
ENV_RESOLVE = "RECONCILE_RESOLVE"


class ConfigError(ValueError):
    """The settings, flags or environment cannot describe a usable connection.

    The message names the setting or variable that is wrong (never a secret's value).
    """


@dataclass(frozen=True)
class Overrides:
    """Values that replace the settings document's, from flags or the environment.

    Precedence: ``flags.over(Overrides.from_env(os.environ))`` -- flags win over env,
    env wins over settings (applied in ``Connection.build``).
    """

    control_plane_url: str | None = None
    ca_file: str | None = None  # applies to the control plane AND the mesh (one CA)
    gateway: str | None = None
    resolve: str | None = None  # curl style "HOST:PORT:ADDR[,ADDR...]"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Overrides:
        """Read the ``RECONCILE_*`` override variables; empty values count as unset."""

        def pick(name: str) -> str | None:
            value = env.get(name, "").strip()
            return value or None

        return cls(
            control_plane_url=pick(ENV_CONTROL_PLANE_URL),
            ca_file=pick(ENV_CA_FILE),
            gateway=pick(ENV_GATEWAY),
            resolve=pick(ENV_RESOLVE),
        )

    def over(self, lower: Overrides) -> Overrides:
        """A copy where this object's set fields win and ``lower`` fills the rest."""
        updates = {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if getattr(self, f.name) is not None
        }
        return replace(lower, **updates)


@dataclass(frozen=True)
class ResolveEntry:
    """A parsed ``HOST:PORT:ADDR[,ADDR...]`` (curl's ``--resolve``)."""

    host: str
    port: int
    addresses: tuple[str, ...]


def _split_authority(url: str) -> tuple[str, str, str, str]:
    """``(scheme://, userinfo@ or empty, host[:port], rest)``; tolerant of anything.

    Deliberately conservative: everything before the *last* ``@`` ahead of any ``?`` or
    ``#`` counts as userinfo, so a password holding an unencoded ``@`` or ``/`` is still
    masked whole (a control-plane base URL has no business with ``@`` in its path).
    """
    scheme, sep, rest = url.partition("://")
    prefix = scheme + sep if sep else ""
    if not sep:
        rest = url
    end = len(rest)
    for delimiter in "?#":
        at = rest.find(delimiter)
        if at != -1:
            end = min(end, at)
    userinfo, at_sign, after = rest[:end].rpartition("@")
    if not at_sign:
        userinfo, after = "", rest[:end]
    else:
        userinfo += "@"
    slash = after.find("/")
    hostport, path = (after, "") if slash == -1 else (after[:slash], after[slash:])
    return prefix, userinfo, hostport, path + rest[end:]


def has_userinfo(url: str) -> bool:
    """Whether ``url`` carries ``user[:password]@`` before its host."""
    return bool(_split_authority(url)[1])


def display_url(url: str, limit: int = 160) -> str:
    """``url`` safe to show: userinfo masked (``admin:***@``, a lone user as ``***@``)."""
    prefix, userinfo, hostport, tail = _split_authority(url)
    if userinfo:
        user, colon, _ = userinfo[:-1].partition(":")
        userinfo = f"{user}:***@" if colon else "***@"
    return safe(prefix + userinfo + hostport + tail, limit)


def parse_resolve(text: str, *, source: str = ENV_RESOLVE) -> ResolveEntry:
    """Parse curl's ``--resolve`` syntax; IPv6 addresses may be bracketed (``[::1]``).

    Unlike curl, where the port only selects which connections the entry applies to,
    here the port is also the port dialled: a user pointing ``reconcile`` at a sandbox
    on another port writes it once, in one place.
    """
    host, sep1, rest = text.strip().partition(":")
    port_text, sep2, addr_text = rest.partition(":")
    if not (sep1 and sep2 and host and port_text and addr_text):
        raise ConfigError(
            f"{source}: expected HOST:PORT:ADDR[,ADDR...], got {safe(text, 120)!r}")
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(f"{source}: port {safe(port_text, 20)!r} is not a number") from None
    if not 1 <= port <= 65535:
        raise ConfigError(f"{source}: port {port} is outside 1-65535")
    addresses: list[str] = []
    for raw in addr_text.split(","):
        candidate = raw.strip().removeprefix("[").removesuffix("]")
        addresses.append(_check_address(candidate, source))
    return ResolveEntry(host=host.lower(), port=port, addresses=_dedupe(addresses))


def _check_address(candidate: str, source: str) -> str:
    try:
        return str(ipaddress.ip_address(candidate))
    except ValueError:
        raise ConfigError(
            f"{source}: {safe(candidate, 60)!r} is not an IP address") from None


def _dedupe(items: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


@dataclass(frozen=True)
class Connection:
    """Everything needed to talk to the live world, resolved from settings + overrides.

    Holds no secret: ``token_env`` and ``signer_key_env`` are variable *names*.
    ``static_addresses`` is ``None`` when the system resolver must be asked (once per run).
    """

    control_plane_url: str
    control_plane_ca: Path | None
    token_env: str
    call_timeout: float
    gateway: str
    mesh_port: int
    mesh_ca: Path | None
    static_addresses: tuple[str, ...] | None
    settings_clusters: tuple[str, ...]
    concurrency: int
    probe_timeout: float
    wallet_address: str
    auth_app_id: str
    signer_key_env: str

    def __post_init__(self) -> None:
        if has_userinfo(self.control_plane_url):
            raise ConfigError(_userinfo_refusal(self.control_plane_url, "the connection"))

    @property
    def typedrequest_url(self) -> str:
        """``{controlPlaneUrl}/typedrequest``; a URL already ending in it is kept as is."""
        base = self.control_plane_url.rstrip("/")
        return base if base.endswith(TYPEDREQUEST_PATH) else base + TYPEDREQUEST_PATH

    @classmethod
    def build(cls, settings: Settings, *, repo_root: Path, overrides: Overrides) -> Connection:
        """Fold ``overrides`` over ``settings``; relative CA paths in the settings resolve
        against ``repo_root``, relative override paths against the working directory."""
        cp = settings.control_plane
        mesh = settings.mesh

        url = overrides.control_plane_url or cp.url
        source = (f"{ENV_CONTROL_PLANE_URL} or --control-plane"
                  if overrides.control_plane_url else "controlPlane.url")
        if not url.startswith(("https://", "http://")):
            raise ConfigError(
                f"control plane URL must start with https:// or http://, got "
                f"{display_url(url, 120)!r} (from {source})")
        if has_userinfo(url):
            raise ConfigError(_userinfo_refusal(url, source))

        if overrides.ca_file:
            override_ca = _existing(Path(overrides.ca_file), f"{ENV_CA_FILE} / --ca-file")
            cp_ca: Path | None = override_ca
            mesh_ca: Path | None = override_ca
        else:
            cp_ca = _ca_from_settings(cp.ca_file, repo_root, "controlPlane.caFile")
            mesh_ca = _ca_from_settings(mesh.ca_file, repo_root, "mesh.caFile")

        gateway = (overrides.gateway or mesh.gateway).strip().lower().rstrip(".")
        if not gateway:
            raise ConfigError("mesh gateway hostname is empty")

        port = mesh.port
        static: tuple[str, ...] | None = None
        if overrides.resolve:
            entry = parse_resolve(overrides.resolve)
            if entry.host != gateway:
                raise ConfigError(
                    f"{ENV_RESOLVE} / --resolve names host {safe(entry.host, 100)!r}, "
                    f"but the gateway is {gateway!r}")
            port, static = entry.port, entry.addresses
        elif mesh.resolve is not None:
            static = _dedupe([_check_address(a, "mesh.resolve") for a in mesh.resolve])

        return cls(
            control_plane_url=url,
            control_plane_ca=cp_ca,
            token_env=cp.token_env,
            call_timeout=cp.timeout_seconds,
            gateway=gateway,
            mesh_port=port,
            mesh_ca=mesh_ca,
            static_addresses=static,
            settings_clusters=tuple(mesh.clusters),
            concurrency=mesh.concurrency,
            probe_timeout=mesh.timeout_seconds,
            wallet_address=mesh.signer.wallet_address,
            auth_app_id=mesh.signer.app_id,
            signer_key_env=mesh.signer.key_file_env,
        )


def _userinfo_refusal(url: str, source: str) -> str:
    return (f"control plane URL {display_url(url, 120)!r} (from {source}) carries "
            "credentials (user:password@); remove them: reconcile authenticates with the "
            "machine token in the variable controlPlane.tokenEnv names, never with "
            "credentials in the URL")


def _ca_from_settings(value: str | None, repo_root: Path, field: str) -> Path | None:
    if value is None:
        return None
    path = Path(value)
    if not path.is_absolute():
        path = repo_root / path
    return _existing(path, field)


def _existing(path: Path, what: str) -> Path:
    resolved = path.expanduser().resolve()
    if not resolved.is_file():
        raise ConfigError(f"{what}: CA file {str(resolved)!r} does not exist")
    return resolved


def ssl_context(ca_file: Path | None) -> ssl.SSLContext:
    """Verification always on: the given CA bundle only, or the system/certifi default.

    Built explicitly so that ``SSL_CERT_FILE``/``SSL_CERT_DIR`` are not silently
    applied (httpx would read them when ``trust_env`` is true; it is false everywhere).
    """
    if ca_file is None:
        try:
            import certifi

            return ssl.create_default_context(cafile=certifi.where())
        except ImportError:  # pragma: no cover - certifi ships with httpx
            return ssl.create_default_context()
    try:
        return ssl.create_default_context(cafile=str(ca_file))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"CA file {str(ca_file)!r} cannot be loaded: {safe(exc, 200)}") from None
