"""Where the live world is: settings, environment and flags folded into one ``Connection``.

Owns the precedence rule, the ``--resolve`` syntax, the resolution of relative CA paths,
the TLS context every client of the live world uses, and the record of where each
effective value came from (``explain``, shown by ``reconcile config``). It is the only
module that reads the ``RECONCILE_*`` override variables.

Layers, lowest first: the settings document < the environment < flags. A layer that does
not mention a setting leaves the lower layer's value; a layer that gives it an *empty*
value (``RECONCILE_RESOLVE=``, ``--resolve ''``) or its "unset" keyword **unsets** it,
whatever the lower layers said, and the built-in default applies:

- control-plane URL: ``--control-plane`` / ``RECONCILE_CONTROL_PLANE_URL`` (no default:
  an empty value means "not given");
- control-plane CA: ``--control-plane-ca`` / ``RECONCILE_CONTROL_PLANE_CA``, mesh CA:
  ``--mesh-ca`` / ``RECONCILE_MESH_CA``, both: ``--ca-file`` / ``RECONCILE_CA_FILE``; a
  PEM path or ``system``; unset = ``system``, the system trust store;
- gateway: ``--gateway`` / ``RECONCILE_GATEWAY`` (no default: empty = "not given");
- mesh port: ``--mesh-port`` / ``RECONCILE_MESH_PORT``; unset (or ``default``) = 443;
- static addresses: ``--resolve`` / ``RECONCILE_RESOLVE``; unset (or ``none``) = DNS;
- plain ``http://`` to a host that is not loopback: ``--allow-insecure-http`` /
  ``RECONCILE_ALLOW_INSECURE_HTTP=1`` (``0``/``false``/empty: unset); unset = refused.

**Clear text.** Every control-plane call carries the machine token (and then the session
JWT it buys), so a control-plane URL of ``http://`` to anything but a loopback host
(``localhost``, ``127.0.0.0/8``, ``::1``) is a problem that stops the ``Connection`` being
built -- nothing is sent -- unless the user allowed it explicitly by the flag or the
variable (a trusted private network, a local proxy). It is deliberately not a settings
field: a repo cannot allow its own readers' tokens to travel in clear text. Loopback
``http://`` (the sandbox's, a port-forward) stays allowed without asking.

Within one layer the specific CA (``--control-plane-ca``/``--mesh-ca``) wins over the
"both" one (``--ca-file``); across layers the higher layer wins. An ``http://`` control
plane uses no CA, so none is looked for.

``--resolve HOST:PORT:ADDR[,ADDR...]``: HOST must be the gateway; ADDR are the addresses
dialled instead of asking DNS; PORT is the mesh port dialled -- unlike curl, where PORT
only selects which connections the entry applies to. So PORT counts as a mesh-port value
at the layer that gave ``--resolve``: a higher layer's ``--mesh-port`` wins over it, and
``--mesh-port`` and ``--resolve`` of the *same* layer must agree.

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
gate), ``reconcile config`` and the CLI commands that build a ``Connection`` once per run.
"""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from reconciler.core.desired import Settings
from reconciler.core.sanitize import safe

#: The TypedRequest route on the control plane (CONTRACT §1).
TYPEDREQUEST_PATH = "/typedrequest"

ENV_CONTROL_PLANE_URL = "RECONCILE_CONTROL_PLANE_URL"
ENV_CA_FILE = "RECONCILE_CA_FILE"
ENV_CONTROL_PLANE_CA = "RECONCILE_CONTROL_PLANE_CA"
ENV_MESH_CA = "RECONCILE_MESH_CA"
ENV_GATEWAY = "RECONCILE_GATEWAY"
ENV_MESH_PORT = "RECONCILE_MESH_PORT"
ENV_RESOLVE = "RECONCILE_RESOLVE"
ENV_ALLOW_INSECURE_HTTP = "RECONCILE_ALLOW_INSECURE_HTTP"

#: ``Overrides`` field -> (flag, environment variable).
OVERRIDE_NAMES: Mapping[str, tuple[str, str]] = {
    "control_plane_url": ("--control-plane", ENV_CONTROL_PLANE_URL),
    "ca_file": ("--ca-file", ENV_CA_FILE),
    "control_plane_ca": ("--control-plane-ca", ENV_CONTROL_PLANE_CA),
    "mesh_ca": ("--mesh-ca", ENV_MESH_CA),
    "gateway": ("--gateway", ENV_GATEWAY),
    "mesh_port": ("--mesh-port", ENV_MESH_PORT),
    "resolve": ("--resolve", ENV_RESOLVE),
    "allow_insecure_http": ("--allow-insecure-http", ENV_ALLOW_INSECURE_HTTP),
}

#: Values with no built-in default: an empty value means "not given" at that layer.
_REQUIRED = frozenset({"control_plane_url", "gateway"})

SYSTEM_CA = "system"
DNS = "none"
DEFAULT_PORT_WORD = "default"
DEFAULT_MESH_PORT = 443

#: Words ``RECONCILE_ALLOW_INSECURE_HTTP`` accepts (lower case): yes, and no (= unset).
_YES = frozenset({"1", "true", "yes", "on"})
_NO = frozenset({"", "0", "false", "no", "off"})


class ConfigError(ValueError):
    """The settings, flags or environment cannot describe a usable connection.

    The message names the setting or variable that is wrong (never a secret's value).
    """


def required_variable(env: Mapping[str, str], variable: str, *, what: str, setting: str,
                      set_to: str) -> str:
    """The value of ``variable`` (the one the settings field ``setting`` names), stripped;
    a ConfigError naming the variable, the field and what to set it to when it is unset
    or blank. The value itself is never in the message: it is a secret or points at one."""
    value = env.get(variable, "").strip()
    if not value:
        raise ConfigError(
            f"{what} is missing: environment variable {variable} is unset or empty "
            f"({setting} names it); set it to {set_to} "
            '(for the sandbox: eval "$(reconcile sandbox env)")')
    return value


SourceKind = Literal["flag", "env", "settings", "default"]
_RANK: Mapping[str, int] = {"default": -1, "settings": 0, "env": 1, "flag": 2}


@dataclass(frozen=True)
class Source:
    """Where one effective value came from: a flag, a variable, a settings field, or the
    built-in default. ``name`` is the flag, the variable, or the settings path
    (``mesh.port``); ``unset`` says the layer unset the value (empty or keyword)."""

    kind: SourceKind
    name: str = ""
    unset: bool = False

    @property
    def rank(self) -> int:
        return _RANK[self.kind]

    def __str__(self) -> str:
        where = {"flag": f"flag {self.name}", "env": f"env {self.name}",
                 "settings": f"settings {self.name}", "default": "built-in default"}[self.kind]
        if self.kind == "default" and self.name:
            where += f" ({self.name})"
        return where + (" (unset: the default applies)" if self.unset else "")


@dataclass(frozen=True)
class Overrides:
    """Values that replace the settings document's, from flags or the environment.

    ``None`` = this layer says nothing; ``""`` or the setting's keyword (``system``,
    ``none``, ``default``) = this layer unsets it. Precedence:
    ``flags.over(Overrides.from_env(os.environ))`` -- flags win over env, env wins over
    settings (applied in ``Connection.build``). ``sources`` remembers, per field, which
    flag or variable gave it (fields missing there count as flags).
    """

    control_plane_url: str | None = None
    ca_file: str | None = None  # the control plane AND the mesh, unless a specific one is set
    control_plane_ca: str | None = None
    mesh_ca: str | None = None
    gateway: str | None = None
    mesh_port: str | None = None
    resolve: str | None = None  # "HOST:PORT:ADDR[,ADDR...]" (PORT is dialled), or "none"
    allow_insecure_http: str | None = None  # "1"/"true"/... allows it; "0"/"false"/"" unsets
    sources: Mapping[str, Source] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Overrides:
        """Read the ``RECONCILE_*`` override variables.

        A variable that is set but empty unsets its setting (see the module docstring);
        for the control-plane URL and the gateway, which have no default, it is ignored.
        """
        values: dict[str, Any] = {}
        sources: dict[str, Source] = {}
        for name, (_, variable) in OVERRIDE_NAMES.items():
            raw = env.get(variable)
            if raw is None:
                continue
            value = raw.strip()
            if not value and name in _REQUIRED:
                continue
            values[name] = value
            sources[name] = Source("env", variable, unset=_is_unset(name, value))
        return cls(**values, sources=sources)

    @classmethod
    def from_flags(cls, **values: str | int | None) -> Overrides:
        """Flag values (``None`` = flag not given), remembering each flag's name."""
        given: dict[str, Any] = {}
        sources: dict[str, Source] = {}
        for name, value in values.items():
            if name not in OVERRIDE_NAMES:
                raise TypeError(f"unknown override {name!r}")
            if value is None:
                continue
            text = str(value).strip()
            if not text and name in _REQUIRED:
                continue
            given[name] = text
            sources[name] = Source("flag", OVERRIDE_NAMES[name][0],
                                   unset=_is_unset(name, text))
        return cls(**given, sources=sources)

    def source(self, name: str) -> Source:
        found = self.sources.get(name)
        if found is not None:
            return found
        value = getattr(self, name)
        return Source("flag", OVERRIDE_NAMES[name][0],
                      unset=value is not None and _is_unset(name, value))

    def over(self, lower: Overrides) -> Overrides:
        """A copy where this object's set fields win and ``lower`` fills the rest."""
        updates: dict[str, Any] = {}
        sources = dict(lower.sources)
        for f in fields(self):
            if f.name == "sources" or getattr(self, f.name) is None:
                continue
            updates[f.name] = getattr(self, f.name)
            sources[f.name] = self.source(f.name)
        return replace(lower, **updates, sources=sources)


def _is_unset(name: str, value: str) -> bool:
    word = value.strip().lower()
    if not word:
        return True
    if name in ("ca_file", "control_plane_ca", "mesh_ca"):
        return word == SYSTEM_CA
    if name == "resolve":
        return word == DNS
    if name == "mesh_port":
        return word == DEFAULT_PORT_WORD
    if name == "allow_insecure_http":
        return word in _NO
    return False


def is_loopback_host(host: str) -> bool:
    """``localhost`` (and ``*.localhost``, RFC 6761), ``127.0.0.0/8`` or ``::1``, by
    name only: nothing is resolved (a name that resolves to loopback is not trusted to)."""
    name = host.strip().lower().rstrip(".").removeprefix("[").removesuffix("]")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def url_host(url: str) -> str:
    """The host of ``url`` (no port, IPv6 brackets kept off), lower case."""
    hostport = _split_authority(url)[2]
    if hostport.startswith("["):
        return hostport[1:].partition("]")[0].lower()
    return hostport.rpartition(":")[0].lower() if hostport.count(":") == 1 \
        else hostport.lower()


@dataclass(frozen=True)
class ResolveEntry:
    """A parsed ``HOST:PORT:ADDR[,ADDR...]``."""

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
    """Parse ``HOST:PORT:ADDR[,ADDR...]``; IPv6 addresses may be bracketed (``[::1]``).

    The syntax is curl's, the meaning of PORT is not: here it is the mesh port dialled
    (curl only applies the entry to connections to that port). ``Connection.build``
    weighs it against ``--mesh-port`` by layer.
    """
    host, sep1, rest = text.strip().partition(":")
    port_text, sep2, addr_text = rest.partition(":")
    if not (sep1 and sep2 and host and port_text and addr_text):
        raise ConfigError(
            f"{source}: expected HOST:PORT:ADDR[,ADDR...] (or 'none' for DNS), "
            f"got {safe(text, 120)!r}")
    port = parse_port(port_text, source=source)
    addresses: list[str] = []
    for raw in addr_text.split(","):
        candidate = raw.strip().removeprefix("[").removesuffix("]")
        addresses.append(_check_address(candidate, source))
    return ResolveEntry(host=host.lower().rstrip("."), port=port, addresses=_dedupe(addresses))


def parse_port(text: str, *, source: str) -> int:
    try:
        port = int(text.strip())
    except ValueError:
        raise ConfigError(f"{source}: port {safe(text, 20)!r} is not a number") from None
    if not 1 <= port <= 65535:
        raise ConfigError(f"{source}: port {port} is outside 1-65535")
    return port


def _check_address(candidate: str, source: str) -> str:
    try:
        return str(ipaddress.ip_address(candidate))
    except ValueError:
        raise ConfigError(
            f"{source}: {safe(candidate, 60)!r} is not an IP address") from None


def _dedupe(items: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


@dataclass(frozen=True)
class Effective:
    """One effective connection value, where it came from, and a note (e.g. "not used")."""

    value: object
    source: Source
    note: str = ""


@dataclass(frozen=True)
class Explanation:
    """``Connection.explain``: every effective value with its source, and the problems
    that stop a ``Connection`` being built (empty when ``connection`` is not None)."""

    values: Mapping[str, Effective]
    problems: tuple[str, ...]
    connection: Connection | None


@dataclass(frozen=True)
class Connection:
    """Everything needed to talk to the live world, resolved from settings + overrides.

    Holds no secret: ``token_env`` and ``signer_key_env`` are variable *names*.
    ``static_addresses`` is ``None`` when the system resolver must be asked (once per run).
    A CA of ``None`` means the system trust store (``ssl_context``).
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
        against ``repo_root``, relative override paths against the working directory.
        Every problem found is in the one ``ConfigError``."""
        explained = cls.explain(settings, repo_root=repo_root, overrides=overrides)
        if explained.connection is None:
            raise ConfigError("; ".join(explained.problems))
        return explained.connection

    @classmethod
    def explain(cls, settings: Settings, *, repo_root: Path,
                overrides: Overrides) -> Explanation:
        """Every effective value and where it came from; never raises for bad values."""
        return _Folder(settings, repo_root, overrides).fold()


class _Folder:
    """The one implementation of the precedence rule (``Connection.explain``)."""

    def __init__(self, settings: Settings, repo_root: Path, overrides: Overrides) -> None:
        self.settings = settings
        self.repo_root = repo_root
        self.ov = overrides
        self.values: dict[str, Effective] = {}
        self.problems: list[str] = []
        self._resolve_port: tuple[int, Source] | None = None

    def given(self, name: str) -> tuple[str, Source] | None:
        value = getattr(self.ov, name)
        return None if value is None else (value, self.ov.source(name))

    def fold(self) -> Explanation:
        cp = self.settings.control_plane
        mesh = self.settings.mesh
        url = self.url()
        plain_http = url.startswith("http://")
        cp_ca = self.ca("control_plane_ca", cp.ca_file, "controlPlane.caFile",
                        unused="not used: the control plane URL is http://" if plain_http
                        else "")
        mesh_ca = self.ca("mesh_ca", mesh.ca_file, "mesh.caFile")
        gateway = self.gateway()
        static = self.addresses(gateway)
        port = self.port()

        def from_settings(name: str, value: object, path: str) -> None:
            self.values[name] = Effective(value, Source("settings", path))

        from_settings("token_env", cp.token_env, "controlPlane.tokenEnv")
        from_settings("call_timeout", cp.timeout_seconds, "controlPlane.timeoutSeconds")
        from_settings("settings_clusters", tuple(mesh.clusters), "mesh.clusters")
        from_settings("concurrency", mesh.concurrency, "mesh.concurrency")
        from_settings("probe_timeout", mesh.timeout_seconds, "mesh.timeoutSeconds")
        from_settings("wallet_address", mesh.signer.wallet_address, "mesh.signer.walletAddress")
        from_settings("auth_app_id", mesh.signer.app_id, "mesh.signer.appId")
        from_settings("signer_key_env", mesh.signer.key_file_env, "mesh.signer.keyFileEnv")

        connection: Connection | None = None
        if not self.problems:
            connection = Connection(
                control_plane_url=url,
                control_plane_ca=None if plain_http else cp_ca,
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
        return Explanation(self.values, tuple(self.problems), connection)

    def url(self) -> str:
        given = self.given("control_plane_url")
        if given is not None:
            url, source = given
        else:
            url, source = self.settings.control_plane.url, Source("settings", "controlPlane.url")
        self.values["control_plane_url"] = Effective(display_url(url, 200), source)
        if not url.startswith(("https://", "http://")):
            self.problems.append(
                f"control plane URL must start with https:// or http://, got "
                f"{display_url(url, 120)!r} (from {source})")
        elif has_userinfo(url):
            self.problems.append(_userinfo_refusal(url, str(source)))
        self.insecure_http(url, source)
        return url

    def insecure_http(self, url: str, url_source: Source) -> None:
        """Plain http:// beyond loopback is refused unless the flag or variable allows it
        (see "Clear text" in the module docstring); the value and its source are shown."""
        given = self.given("allow_insecure_http")
        allowed, source = False, Source("default", "refused beyond loopback")
        if given is not None:
            text, source = given
            word = text.strip().lower()
            if word in _YES or (source.kind == "flag" and word not in _NO):
                allowed = True
            elif word not in _NO:
                self.problems.append(
                    f"{source.name}: expected 1, true or yes (allow) or 0, false or empty "
                    f"(refuse), got {safe(text, 20)!r}")
        plain = url.startswith("http://")
        host = url_host(url) if plain else ""
        note = ""
        if plain and not is_loopback_host(host):
            note = ("ALLOWED: the token crosses the network in clear text" if allowed
                    else "refused: http:// to a host that is not loopback")
            if not allowed:
                self.problems.append(
                    f"control plane URL {display_url(url, 120)!r} (from {url_source}) is "
                    f"plain http:// to {safe(host, 80)!r}, which is not a loopback host: "
                    "the machine token would cross the network in clear text. Use "
                    "https://, or allow it explicitly with --allow-insecure-http or "
                    f"{ENV_ALLOW_INSECURE_HTTP}=1 (only on a network you trust); nothing "
                    "was sent")
        self.values["allow_insecure_http"] = Effective(allowed, source, note)

    def ca(self, specific: str, setting: str | None, path: str, *, unused: str = "") -> Path | None:
        """The CA for one side: the highest layer wins; within a layer, the specific
        variable/flag wins over the "both" one; then the settings; then the system."""
        candidates = [(source.rank, 1, value, source)
                      for value, source in filter(None, [self.given(specific)])]
        candidates += [(source.rank, 0, value, source)
                       for value, source in filter(None, [self.given("ca_file")])]
        if candidates:
            _, _, text, source = max(candidates, key=lambda c: (c[0], c[1]))
            base = Path.cwd()
        elif setting is not None:
            text, source, base = setting, Source("settings", path), self.repo_root
        else:
            text, source, base = "", Source("default", "system trust store"), self.repo_root
        if unused:
            self.values[specific] = Effective(None, source, unused)
            return None
        if text.strip() == "" or text.strip().lower() == SYSTEM_CA:
            self.values[specific] = Effective(SYSTEM_CA, source, "the system trust store")
            return None
        candidate = Path(text).expanduser()
        if not candidate.is_absolute():
            candidate = base / candidate
        resolved = candidate.resolve()
        self.values[specific] = Effective(str(resolved), source)
        if not resolved.is_file():
            what = path if source.kind == "settings" else source.name
            self.problems.append(
                f"{what}: CA file {str(resolved)!r} does not exist (give a PEM bundle, or "
                f"'{SYSTEM_CA}' for the system trust store)")
        return resolved

    def gateway(self) -> str:
        given = self.given("gateway")
        if given is not None:
            raw, source = given
        else:
            raw, source = self.settings.mesh.gateway, Source("settings", "mesh.gateway")
        gateway = raw.strip().lower().rstrip(".")
        self.values["gateway"] = Effective(gateway, source)
        if not gateway:
            self.problems.append(f"mesh gateway hostname is empty (from {source})")
        return gateway

    def addresses(self, gateway: str) -> tuple[str, ...] | None:
        given = self.given("resolve")
        if given is not None:
            text, source = given
            if source.unset:
                self.values["static_addresses"] = Effective(None, source, "DNS (system resolver)")
                return None
            try:
                entry = parse_resolve(text, source=source.name)
            except ConfigError as exc:
                self.values["static_addresses"] = Effective(None, source, "invalid")
                self.problems.append(str(exc))
                return None
            if entry.host != gateway:
                self.problems.append(
                    f"{source.name} names host {safe(entry.host, 100)!r}, but the gateway "
                    f"is {gateway!r} (from {self.values['gateway'].source})")
            self._resolve_port = (entry.port, source)
            self.values["static_addresses"] = Effective(entry.addresses, source)
            return entry.addresses
        resolve = self.settings.mesh.resolve
        if resolve is None:
            self.values["static_addresses"] = Effective(
                None, Source("default", "mesh.resolve omitted"), "DNS (system resolver)")
            return None
        try:
            static = _dedupe([_check_address(a, "mesh.resolve") for a in resolve])
        except ConfigError as exc:
            self.problems.append(str(exc))
            static = ()
        self.values["static_addresses"] = Effective(static, Source("settings", "mesh.resolve"))
        return static

    def port(self) -> int:
        """The highest layer that names a port wins: ``--mesh-port``, or ``--resolve``'s
        PORT; the two of one layer must agree; else the settings' ``mesh.port``."""
        candidates: list[tuple[int, Source]] = []
        given = self.given("mesh_port")
        if given is not None:
            text, source = given
            if source.unset:
                candidates.append((DEFAULT_MESH_PORT, source))
            else:
                try:
                    candidates.append((parse_port(text, source=source.name), source))
                except ConfigError as exc:
                    self.problems.append(str(exc))
        if self._resolve_port is not None:
            candidates.append(self._resolve_port)
        if not candidates:
            self.values["mesh_port"] = Effective(self.settings.mesh.port,
                                                 Source("settings", "mesh.port"))
            return self.settings.mesh.port
        top = max(source.rank for _, source in candidates)
        best = [(port, source) for port, source in candidates if source.rank == top]
        if len({port for port, _ in best}) > 1:
            self.problems.append(
                " and ".join(f"{source.name} says port {port}" for port, source in best)
                + ": the mesh port must be the same in both (--resolve's PORT is the port "
                "dialled)")
        port, source = best[0]
        note = f"from the PORT of {source.name}" if source.name in (
            "--resolve", ENV_RESOLVE) else ""
        self.values["mesh_port"] = Effective(port, source, note)
        return port


def _userinfo_refusal(url: str, source: str) -> str:
    return (f"control plane URL {display_url(url, 120)!r} (from {source}) carries "
            "credentials (user:password@); remove them: reconcile authenticates with the "
            "machine token in the variable controlPlane.tokenEnv names, never with "
            "credentials in the URL")


def ssl_context(ca_file: Path | None) -> ssl.SSLContext:
    """Verification always on: the given CA bundle only, or the system trust store.

    The system trust store is OpenSSL's default verify paths (``ssl.create_default_context``;
    OpenSSL's own ``SSL_CERT_FILE``/``SSL_CERT_DIR`` apply there, as for any OpenSSL
    client); on a system with no trust store at all, certifi's bundle stands in. httpx's
    own environment handling stays off (``trust_env`` is false everywhere).
    """
    if ca_file is None:
        paths = ssl.get_default_verify_paths()
        if paths.cafile is None and paths.capath is None:
            try:
                import certifi

                return ssl.create_default_context(cafile=certifi.where())
            except ImportError:  # pragma: no cover - certifi ships with httpx
                pass
        return ssl.create_default_context()
    try:
        return ssl.create_default_context(cafile=str(ca_file))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"CA file {str(ca_file)!r} cannot be loaded: {safe(exc, 200)}") from None
