"""The desired-state model: the document kinds a config repo holds.

Owns the pydantic models for ``Settings``, ``Service``, ``Grant`` and ``Hold`` documents and the
``DesiredState`` they assemble into. The published JSON Schema in ``schemas/`` is
generated from these models (``reconciler.schemagen``) and a test fails when the two
differ, so they cannot drift apart.

Pure: no file, network or YAML access here. The loader (``shell.loading``) turns files
into plain values with positions; ``shell.validating`` feeds them to these models and
maps errors back to file, line and column. Rules that span documents live in
``core.crosscheck``.
"""

from __future__ import annotations

import posixpath
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, Strict, field_validator, model_validator

from reconciler.core import names, routepaths, verification
from reconciler.core.lean import LeanModel
from reconciler.core.names import Capability, MediaType

API_VERSION = "reconcile/v1"

#: ``python-re`` so that the model and jsonschema (also Python ``re``) read every
#: pattern identically. Scalars are strict one by one (``Strict()`` below) so that
#: ``port: "443"``, ``port: true`` and ``port: 443.0`` are errors rather than coerced,
#: while sequences from the loader (lists) still fill tuple fields.
MODEL_CONFIG = ConfigDict(
    frozen=True,
    extra="forbid",
    regex_engine="python-re",
    populate_by_name=False,
)

Str = Annotated[str, Strict()]
Bool = Annotated[bool, Strict()]
Seconds = Annotated[float, Strict()]
Identifier = Annotated[str, Strict(), Field(pattern=names.IDENTIFIER)]
Digest = Annotated[
    str, Strict(), Field(pattern=names.DIGEST, description="sha256:<64 lower-case hex>")
]
EnvName = Annotated[str, Strict(), Field(pattern=names.ENV_NAME)]
RelPath = Annotated[
    str, Strict(), Field(min_length=1, max_length=4096, pattern=names.anchored(r"[^\x00-\x1f]+"))
]
Port = Annotated[int, Strict(), Field(ge=1, le=65535)]
Count = Annotated[int, Strict()]


class LocatedError(ValueError):
    """A model rule's failure that names the field at fault, relative to the model.

    Raised from ``model_validator``s so that ``shell.validating`` can point at the
    offending entry's line (``egress[3]``) instead of the whole document.
    """

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc


class LocatedErrors(LocatedError):
    """Several ``LocatedError``s from one rule (each entry of a list at fault): reported
    one by one, each at its own line."""

    def __init__(self, problems: list[tuple[tuple[str | int, ...], str]]) -> None:
        super().__init__(problems[0][0], problems[0][1])
        self.problems = tuple(problems)


class _Model(LeanModel):
    model_config = MODEL_CONFIG


class ControlPlane(_Model):
    """Where the control plane answers and which identity to use."""

    url: Annotated[str, Strict(), Field(pattern=names.anchored(r"https?://[^\s/]+(?:/[^\s]*)?"))]

    @field_validator("url", mode="before")
    @classmethod
    def _no_credentials(cls, value: object) -> object:
        # Checked before the pattern, whose message would echo the value -- and with it
        # the password. Secrets come from the environment (tokenEnv), never the repo.
        if isinstance(value, str) and "@" in value.split("://", 1)[-1].split("/", 1)[0]:
            raise LocatedError((), "must not carry credentials (user:password@host; the "
                               "value is not shown); the machine token comes from the "
                               "variable named by tokenEnv")
        return value
    ca_file: RelPath | None = Field(
        default=None,
        alias="caFile",
        description="PEM bundle to verify the control plane's TLS certificate "
        "(relative to the repo root); system trust store when omitted.",
    )
    token_env: EnvName = Field(
        alias="tokenEnv", description="Name of the environment variable holding the machine token."
    )
    timeout_seconds: Annotated[float, Strict(), Field(gt=0, le=600)] = Field(
        default=10.0,
        alias="timeoutSeconds",
        description="Total deadline for one call, retries included.",
    )


class Signer(_Model):
    """The built-in Ed25519 signer for the per-cluster challenge/verify handshake."""

    chain: Literal["ed25519"] = "ed25519"
    wallet_address: Annotated[str, Strict(), Field(min_length=1, max_length=256)] = Field(
        alias="walletAddress"
    )
    app_id: Identifier = Field(alias="appId", description="The auth app id sent in the challenge.")
    key_file_env: EnvName = Field(
        alias="keyFileEnv",
        description="Name of the environment variable holding the path of the Ed25519 private "
        "key: OpenSSH, PKCS#8 PEM, or a raw/hex seed (docs/cluster-auth.md).",
    )


class Mesh(_Model):
    """How to reach every cluster behind the round-robin gateway."""

    gateway: Annotated[str, Strict(), Field(pattern=names.EGRESS_HOST)]
    port: Port = 443
    ca_file: RelPath | None = Field(default=None, alias="caFile")
    resolve: (
        tuple[Annotated[str, Strict(), Field(pattern=names.anchored(r"[0-9a-fA-F:.]{2,45}"))], ...]
        | None
    ) = Field(
        default=None,
        description="Static addresses for the gateway; the system resolver is used when "
        "omitted. RECONCILE_RESOLVE= (empty) or --resolve none clears them.",
    )
    clusters: tuple[Identifier, ...] = Field(
        default=(), description="Cluster ids that must answer, whatever DNS says."
    )
    signer: Signer
    concurrency: Annotated[int, Strict(), Field(ge=1, le=256)] = 16
    timeout_seconds: Annotated[float, Strict(), Field(gt=0, le=600)] = Field(
        default=5.0, alias="timeoutSeconds"
    )


class Convergence(_Model):
    """The convergence gate's bounded retry budget."""

    interval_seconds: Annotated[float, Strict(), Field(ge=0, le=3600)] = Field(
        default=2.0, alias="intervalSeconds"
    )
    attempts: Annotated[int, Strict(), Field(ge=1, le=10_000)] = 30


class ReleaseEvidencePolicy(StrEnum):
    """When a release's evidence (``release.evidence``) must be complete and bound to the
    pinned digest. A creation always needs it (the greenfield preflight fails closed);
    ``every-promotion`` asks the same of every promotion, checked by reconcile itself
    (the upstream preflight accepts greenfield requests only)."""

    CREATION = "creation"
    EVERY_PROMOTION = "every-promotion"


class RoutePolicy(_Model):
    """What reconcile may do to gateway routes the repo no longer declares."""

    prune: Bool = Field(default=False, description="Delete live routes this client owns "
                        "that no Route document declares (routes other clients own are "
                        "never touched).")


class Policy(_Model):
    convergence: Convergence = Convergence()
    prune: Bool = Field(default=False, description="Revoke live grants no Grant document declares.")
    routes: RoutePolicy = RoutePolicy()
    release_evidence: ReleaseEvidencePolicy = Field(
        default=ReleaseEvidencePolicy.CREATION, alias="releaseEvidence",
        description="creation: release evidence (all five kinds, bound to the pinned digest) "
        "is required to create a service. every-promotion: also for every promotion, checked "
        "locally before anything is sent (the control plane's preflight is greenfield-only).",
    )


class Coordination(_Model):
    """Sharded watchers (``reconcile watch --coordinate``; docs/scaling.md): the etcd that
    holds the group, how many shards the services are hashed into, and the lease timing
    (Flux's defaults: 35 s lease, 30 s renew deadline, 5 s retry)."""

    etcd: Str = Field(pattern=r"^etcd://[^/\s]+(/[A-Za-z0-9][A-Za-z0-9._-]{0,99})?$",
                      description="etcd://HOST:PORT[,HOST:PORT...][/GROUP] (RECONCILE_COORDINATE "
                      "and --coordinate win over it).")
    shards: Count = Field(default=16, ge=1, le=4096, description="Fixed for the life of a "
                          "group: several times the most watchers you expect.")
    lease_seconds: Count = Field(default=35, ge=2, le=3600, alias="leaseSeconds")
    renew_deadline_seconds: Seconds = Field(default=30.0, gt=0, alias="renewDeadlineSeconds")
    retry_seconds: Seconds = Field(default=5.0, gt=0, alias="retrySeconds")
#: Notification kinds a sink may subscribe to (``core.notifying.Kind``'s values).
NotificationKind = Literal["planned", "applied", "converged", "apply_failed", "gate_failed",
                           "no_go", "no_go_cleared", "held", "reverted", "rollback_proven",
                           "rollback_not_proven"]
#: A secret's file: an absolute path (``~`` expanded), never a file of the repo.
SecretFile = Annotated[str, Strict(), Field(min_length=1, max_length=4096,
                                            pattern=names.anchored(r"[/~][^\x00-\x1f]*"))]
HttpUrl = Annotated[str, Strict(), Field(max_length=2048,
                                         pattern=names.anchored(r"https?://[^\s/]+(?:/[^\s]*)?"))]


def _no_userinfo(value: object) -> object:
    if isinstance(value, str) and "@" in value.split("://", 1)[-1].split("/", 1)[0]:
        raise LocatedError((), "must not carry credentials (user:password@host; the value "
                           "is not shown): put the secret in a variable or a file")
    return value


class Webhook(_Model):
    """An HTTP endpoint that receives CDEvents (CloudEvents, HTTP binary mode). The URL is
    written here or, when it is itself a secret, read from ``urlEnv``/``urlFile``; a
    bearer token from ``tokenEnv``/``tokenFile``."""

    url: HttpUrl | None = None
    url_env: EnvName | None = Field(default=None, alias="urlEnv")
    url_file: SecretFile | None = Field(default=None, alias="urlFile")
    token_env: EnvName | None = Field(default=None, alias="tokenEnv")
    token_file: SecretFile | None = Field(default=None, alias="tokenFile")
    on: tuple[NotificationKind, ...] | None = Field(
        default=None, description="The kinds this sink receives (default: "
        "notifications.on).")

    @field_validator("url", mode="before")
    @classmethod
    def _url_given(cls, value: object) -> object:
        return _no_userinfo(value)

    @model_validator(mode="after")
    def _one_url(self) -> Webhook:
        given = [n for n, v in (("url", self.url), ("urlEnv", self.url_env),
                                ("urlFile", self.url_file)) if v is not None]
        if len(given) != 1:
            raise LocatedError((), "a webhook needs exactly one of url, urlEnv, urlFile"
                               + (f" (got {', '.join(given)})" if given else ""))
        if self.token_env is not None and self.token_file is not None:
            raise LocatedError(("tokenFile",), "give tokenEnv or tokenFile, not both")
        return self


class Slack(_Model):
    """A Slack incoming webhook: its URL is the secret, so it is read from a variable
    or a file, never written in the repo."""

    url_env: EnvName | None = Field(default=None, alias="urlEnv")
    url_file: SecretFile | None = Field(default=None, alias="urlFile")
    on: tuple[NotificationKind, ...] | None = None

    @model_validator(mode="after")
    def _one_url(self) -> Slack:
        if (self.url_env is None) == (self.url_file is None):
            raise LocatedError((), "a Slack webhook needs exactly one of urlEnv, urlFile "
                               "(its URL is a secret: never written in the repo)")
        return self


class GitHubStatuses(_Model):
    """GitHub commit statuses (and, with ``deployments``, deployment statuses) on the
    commit each notification is about."""

    repository: Annotated[str, Strict(), Field(pattern=names.anchored(
        r"[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}"))]
    api_url: HttpUrl = Field(default="https://api.github.com", alias="apiUrl")
    token_env: EnvName | None = Field(default=None, alias="tokenEnv",
                                      description="default GITHUB_TOKEN")
    token_file: SecretFile | None = Field(default=None, alias="tokenFile")
    context: Annotated[str, Strict(), Field(min_length=1, max_length=100)] | None = Field(
        default=None, description="The status's context (default reconcile/<environment>).")
    deployments: Bool = Field(default=False, description="Also create a deployment per "
                              "commit and environment, and its deployment statuses.")
    target_url: HttpUrl | None = Field(default=None, alias="targetUrl")
    on: tuple[NotificationKind, ...] | None = None

    @field_validator("api_url", mode="before")
    @classmethod
    def _api_url(cls, value: object) -> object:
        return _no_userinfo(value)

    @model_validator(mode="after")
    def _one_token(self) -> GitHubStatuses:
        if self.token_env is not None and self.token_file is not None:
            raise LocatedError(("tokenFile",), "give tokenEnv or tokenFile, not both")
        return self


class Delivery(_Model):
    """How hard a notification is pushed: never at the cost of an apply."""

    attempts: Annotated[int, Strict(), Field(ge=1, le=10)] = 4
    backoff_seconds: Annotated[float, Strict(), Field(ge=0, le=60)] = Field(
        default=1.0, alias="backoffSeconds", description="The first wait; doubled after "
        "each failed attempt.")
    timeout_seconds: Annotated[float, Strict(), Field(gt=0, le=60)] = Field(
        default=5.0, alias="timeoutSeconds", description="One request's deadline.")
    drain_seconds: Annotated[float, Strict(), Field(ge=0, le=300)] = Field(
        default=15.0, alias="drainSeconds", description="How long apply waits, after it "
        "is done, for deliveries still being retried; then it gives them up.")


EnvironmentName = Annotated[str, Strict(), Field(min_length=1, max_length=100,
                                                 pattern=names.anchored(r"[^\x00-\x1f]+"))]


class Notifications(_Model):
    """Who is told about plans and applies (docs/notifications.md)."""

    environment: EnvironmentName | None = Field(
        default=None, description="The environment's name in every notification (default: "
        "the mesh gateway).")
    on: tuple[NotificationKind, ...] | None = Field(
        default=None, description="The kinds sent (default: all).")
    webhooks: tuple[Webhook, ...] = ()
    slack: tuple[Slack, ...] = ()
    github: GitHubStatuses | None = None
    delivery: Delivery = Delivery()


class Tracing(_Model):
    """OpenTelemetry traces of plan, apply and watch (docs/tracing.md); off unless an
    OTLP endpoint is given here, by ``--otlp-endpoint`` or ``RECONCILE_OTLP_ENDPOINT``."""

    otlp_endpoint: HttpUrl | None = Field(default=None, alias="otlpEndpoint")
    service_name: Annotated[str, Strict(), Field(min_length=1, max_length=100)] = Field(
        default="reconcile", alias="serviceName")


class PrometheusSource(_Model):
    """The Prometheus a ``prometheus`` check asks (issue 34; docs/verification.md)."""

    url: HttpUrl = Field(description="Its base URL, e.g. http://127.0.0.1:9090 (the "
                         "query API is /api/v1/query under it).")
    timeout_seconds: Annotated[float, Strict(), Field(gt=0, le=120)] = Field(
        default=5.0, alias="timeoutSeconds",
        description="One query's bound; a reply not in time is unknown, never a pass.")


class VerificationSettings(_Model):
    """Where per-cluster verification reads its metrics (docs/verification.md)."""

    prometheus: PrometheusSource | None = None


class Settings(_Model):
    """One per repo: where the live world is and how to treat it. Holds no secrets."""

    api_version: Literal["reconcile/v1"] = Field(alias="apiVersion")
    kind: Literal["Settings"]
    control_plane: ControlPlane = Field(alias="controlPlane")
    mesh: Mesh
    policy: Policy = Policy()
    state_dir: RelPath | None = Field(
        default=None,
        alias="stateDir",
        description="Where apply keeps its journal; outside the repo by default "
        "(RECONCILE_STATE_DIR, else ~/.local/state/reconcile/<repo>).",
    )
    coordination: Coordination | None = Field(
        default=None, description="Share the fleet between watchers through etcd "
        "(reconcile watch --coordinate).")
    notifications: Notifications | None = None
    tracing: Tracing | None = None
    verification: VerificationSettings | None = None

    @model_validator(mode="after")
    def _state_dir_outside_the_repo(self) -> Settings:
        # Relative to the repo root: a path that does not climb out with `..` is inside
        # it, and the journal apply writes there would make the repo dirty, so every
        # later plan would be NO-GO (repo_dirty). Absolute paths and `..` paths that land
        # inside the repo through links are judged on disk (gitrepo.state_dir_inside_repo).
        if self.state_dir is not None and state_dir_is_inside(self.state_dir):
            raise LocatedError(("stateDir",), state_dir_message(self.state_dir))
        return self


def state_dir_is_inside(state_dir: str) -> bool:
    """Whether ``state_dir``, read relative to the repo root, names a place inside it."""
    if state_dir.startswith("/"):
        return False
    normal = posixpath.normpath(state_dir)
    return normal != ".." and not normal.startswith("../")


def state_dir_message(state_dir: str) -> str:
    return (f"{state_dir!r} is inside the config repo; apply writes its journal there, which "
            "would leave the repo dirty and every later plan NO-GO (repo_dirty): use a "
            "directory outside the repo (an absolute path, or ../something), or leave "
            "stateDir out for ~/.local/state/reconcile/<repo>")


#: A proposed namespace or Corestore resource name (seed 002 ``namespaceRegex``): a DNS
#: label, 1 to 63 characters.
NAMESPACE = names.anchored(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")

#: A canonical semantic version (seed 002 ``semanticVersionRegex``, semver.org 2.0.0), at
#: most ``MAX_VERSION_LENGTH`` characters like the seed's request check.
SEMVER = names.anchored(
    r"(?:0|[1-9][0-9]*)\.(?:0|[1-9][0-9]*)\.(?:0|[1-9][0-9]*)"
    r"(?:-(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
    r"(?:\.(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*))*)?"
    r"(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?"
)
MAX_VERSION_LENGTH = 100

#: At most this many proposed Corestore resources (seed 002 request check).
MAX_CORESTORE_RESOURCES = 8

#: JavaScript's ``Number.MAX_SAFE_INTEGER``: ``verifiedAt`` must be a safe integer.
MAX_SAFE_INTEGER = 2**53 - 1


class EvidenceKind(StrEnum):
    """The five release-evidence kinds a greenfield preflight requires (seed 002
    ``requiredEvidenceKinds``); the order is the seed's and the order of messages."""

    PROVENANCE = "provenance"
    SBOM = "sbom"
    SIGNATURE = "signature"
    VULNERABILITY_POLICY = "vulnerability-policy"
    RELEASE_AUTHORIZATION = "release-authorization"


class CorestoreCapability(StrEnum):
    """What a proposed Corestore resource provides (seed 002)."""

    DATABASE = "database"
    OBJECTSTORAGE = "objectstorage"


Version = Annotated[
    str, Strict(), Field(pattern=SEMVER, max_length=MAX_VERSION_LENGTH,
                         description="A canonical semantic version like 1.0.0 or 2.1.0-rc.1.")
]
Namespace = Annotated[
    str, Strict(), Field(pattern=NAMESPACE,
                         description="A DNS label: a-z, 0-9 and '-', 1 to 63 characters, "
                         "starting and ending with a letter or digit.")
]


class Attestation(_Model):
    """A reference to one verified release attestation, bound to the pinned digest
    (seed 002 ``IDeploymentReleaseEvidenceReference``). Descriptive input: the control
    plane's verifier decides whether it holds; the repo only promises what it names."""

    kind: EvidenceKind
    statement_digest: Digest = Field(alias="statementDigest")
    subject_digest: Digest = Field(
        alias="subjectDigest", description="The image the statement is about: must equal "
        "release.digest."
    )
    verifier: Annotated[
        str, Strict(), Field(min_length=1, max_length=256,
                             pattern=names.anchored(r"(?=.*\S)[^\x00-\x1f\x7f]+"))
    ] = Field(description="Who verified the statement; not blank, one line.")
    verified_at: Annotated[int, Strict(), Field(ge=1, le=MAX_SAFE_INTEGER)] = Field(
        alias="verifiedAt", description="When it was verified, epoch milliseconds."
    )


class Release(_Model):
    """A digest-pinned release: what the service must run."""

    registry_host: Annotated[str, Strict(), Field(pattern=names.REGISTRY_HOST)] = Field(
        alias="registryHost"
    )
    repository: Annotated[str, Strict(), Field(pattern=names.REPOSITORY, max_length=255)]
    digest: Digest
    tag: Annotated[str, Strict(), Field(pattern=names.TAG)] | None = Field(
        default=None, description="Human tag; must be one the release was observed under."
    )
    media_type: MediaType | None = Field(default=None, alias="mediaType")
    version: Version | None = Field(
        default=None, description="The release's canonical semantic version, sent as the "
        "preflight's version (a creation needs it)."
    )
    evidence: tuple[Attestation, ...] = Field(
        default=(), description="Attestation references bound to `digest`, at most one per "
        "kind; a creation needs all five kinds."
    )

    @property
    def reference(self) -> str:
        return f"{self.registry_host}/{self.repository}@{self.digest}"

    @model_validator(mode="after")
    def _evidence_rules(self) -> Release:
        # Seed 002 validateDeploymentReleaseEvidence: an attestation whose subject is
        # another image proves nothing about this one. Caught here, before anything is
        # sent, with both digests named so the copy-paste mistake is visible. The seed
        # counts kinds into a set; two of one kind would let one of them be the one nobody
        # checked. Every entry at fault is named, not only the first: five entries pasted
        # from another release are five problems.
        problems: list[tuple[tuple[str | int, ...], str]] = []
        seen: dict[EvidenceKind, int] = {}
        for index, attestation in enumerate(self.evidence):
            if attestation.subject_digest != self.digest:
                problems.append((
                    ("evidence", index, "subjectDigest"),
                    f"{attestation.kind.value} evidence is bound to "
                    f"{attestation.subject_digest} but the release pins {self.digest}"))
            if attestation.kind in seen:
                problems.append((
                    ("evidence", index, "kind"),
                    f"{attestation.kind.value} evidence is listed twice (also "
                    f"evidence[{seen[attestation.kind]}])"))
            else:
                seen[attestation.kind] = index
        if problems:
            raise LocatedErrors(problems)
        return self


class CorestoreResource(_Model):
    """A Corestore resource the new service asks for (seed 002
    ``IDeploymentPreflightProposedCorestoreResource``)."""

    capability: CorestoreCapability
    resource_name: Namespace = Field(alias="resourceName")


class Creation(_Model):
    """How a service the control plane does not have yet comes into being: what the
    greenfield preflight proposes (namespace, Corestore resources)."""

    namespace: Namespace = Field(description="The namespace to reserve for the new service.")
    corestore: tuple[CorestoreResource, ...] = Field(
        default=(), max_length=MAX_CORESTORE_RESOURCES,
        description="Corestore resources to provision, unique by (capability, resourceName).",
    )

    @model_validator(mode="after")
    def _unique_resources(self) -> Creation:
        seen: dict[tuple[CorestoreCapability, str], int] = {}
        for index, resource in enumerate(self.corestore):
            key = (resource.capability, resource.resource_name)
            if key in seen:
                raise LocatedError(
                    ("corestore", index),
                    f"duplicates corestore[{seen[key]}] ({resource.capability.value} "
                    f"{resource.resource_name})",
                )
            seen[key] = index
        return self


class Destination(_Model):
    """One egress destination. ``port`` defaults to 443 (seed 000)."""

    host: Annotated[str, Strict(), Field(pattern=names.EGRESS_HOST, max_length=253)]
    port: Port = names.DEFAULT_EGRESS_PORT


class Service(_Model):
    """A managed service: its pinned release and its egress."""

    api_version: Literal["reconcile/v1"] = Field(alias="apiVersion")
    kind: Literal["Service"]
    name: Identifier
    service_id: Identifier = Field(alias="serviceId")
    app_id: Identifier = Field(alias="appId")
    release: Release
    immutable: Bool = Field(
        default=True, description="Require fail-closed immutable (digest-pinned) deployment. "
        "Only true is accepted; a live service that does not require it shows as drift "
        "(immutable_not_enforced) until the next promotion sets it."
    )
    egress: tuple[Destination, ...] | None = Field(
        default=None,
        max_length=names.MAX_EGRESS_ENTRIES,
        description="Omitted: leave the live declaration alone. []: revoke all.",
    )
    create: Creation | None = Field(
        default=None, description="How to create the service when the control plane does "
        "not have it (a greenfield deployment); ignored while it exists."
    )

    @model_validator(mode="after")
    def _immutable_only(self) -> Service:
        # The contract promotes only with enableImmutableImage: true, so `false` could
        # never be honoured; a field that changes nothing would be a lie in the repo.
        if not self.immutable:
            raise LocatedError(("immutable",), "false cannot be honoured: every promotion "
                               "is immutable (digest-pinned, enableImmutableImage: true); "
                               "remove the field or set it to true")
        return self

    @model_validator(mode="after")
    def _no_duplicate_destinations(self) -> Service:
        # Duplicates are judged after the default port is applied (seed 000): `api.x.com`
        # and `{host: api.x.com, port: 443}` are the same destination.
        seen: dict[tuple[str, int], int] = {}
        for index, dest in enumerate(self.egress or ()):
            key = (dest.host, dest.port)
            if key in seen:
                raise LocatedError(
                    ("egress", index),
                    f"duplicates egress[{seen[key]}] ({dest.host}:{dest.port}, "
                    "after the default port 443 is applied)",
                )
            seen[key] = index
        return self


class ServiceGrant(_Model):
    service: Identifier = Field(description="The name of a Service document in this repo.")
    capabilities: tuple[Capability, ...] = Field(
        description="The full list for this service; [] removes the grant."
    )

    @model_validator(mode="after")
    def _no_duplicate_capabilities(self) -> ServiceGrant:
        seen: set[Capability] = set()
        for index, capability in enumerate(self.capabilities):
            if capability in seen:
                raise LocatedError(("capabilities", index), f"{capability.value} is listed twice")
            seen.add(capability)
        return self


class Grant(_Model):
    """A machine user's deployment capabilities, per service."""

    api_version: Literal["reconcile/v1"] = Field(alias="apiVersion")
    kind: Literal["Grant"]
    user_id: Identifier = Field(alias="userId")
    services: tuple[ServiceGrant, ...]

    @model_validator(mode="after")
    def _one_entry_per_service(self) -> Grant:
        seen: set[str] = set()
        for index, entry in enumerate(self.services):
            if entry.service in seen:
                raise LocatedError(
                    ("services", index, "service"), f"service {entry.service!r} is listed twice"
                )
            seen.add(entry.service)
        return self


class Hold(_Model):
    """A release that must not be pinned again (issue 20): written by ``reconcile revert``
    when the one judge saw the release fail, removed only by a commit (``reconcile
    release-hold SERVICE DIGEST``). A plan that pins a held digest is NO-GO ``held``
    (``core.holds``)."""

    api_version: Literal["reconcile/v1"] = Field(alias="apiVersion")
    kind: Literal["Hold"]
    service: Identifier = Field(description="The name of a Service document in this repo.")
    digest: Digest = Field(description="The held release's digest.")
    reason: Str = Field(min_length=1, max_length=2000,
                        description="Why it is held, in one sentence.")
    evidence: tuple[Annotated[str, Strict(), Field(max_length=2000)], ...] = Field(
        default=(), max_length=50,
        description="What the clusters and the control plane said (one line each).")
    since: Str = Field(min_length=1, max_length=64,
                       description="When the hold was placed (RFC 3339, UTC).")


RequestPath = Annotated[str, Strict(), Field(
    min_length=1, max_length=2048, pattern=names.anchored(r"/[^\x00-\x20#]*"))]


class HttpCheck(_Model):
    """A request to the service through each cluster separately (docs/verification.md)."""

    path: RequestPath = Field(description="The request path (and query), e.g. /healthz; "
                              "{{service}} and {{app}} are filled in.")
    host: Annotated[str, Strict(), Field(pattern=names.EGRESS_HOST, max_length=253)] | None = \
        Field(default=None, description="The Host header (the service's public hostname); "
              "default: the mesh's gateway hostname. TLS is verified against the gateway's "
              "name, as the probes do.")
    status: Annotated[int, Strict(), Field(ge=100, le=599)] = Field(
        default=200, description="The status every answer must have.")
    body: Annotated[str, Strict(), Field(min_length=1, max_length=1000)] | None = Field(
        default=None, description="Text the answer's body must contain.")
    max_latency_seconds: Annotated[float, Strict(), Field(gt=0, le=120)] | None = Field(
        default=None, alias="maxLatencySeconds",
        description="An answer slower than this fails the measurement.")

    @field_validator("path")
    @classmethod
    def _path_placeholders(cls, value: str) -> str:
        return _templated(value)


def _templated(value: str) -> str:
    """A check's text whose ``{{…}}`` placeholders are all known (``ValueError`` naming
    the others)."""
    problems = verification.template_problems(value)
    if problems:
        raise ValueError("; ".join(problems))
    return value


class PrometheusCheck(_Model):
    """A PromQL query evaluated per cluster (docs/verification.md)."""

    query: Annotated[str, Strict(), Field(min_length=1, max_length=10_000)] = Field(
        description="An instant query. {{cluster}}, {{service}}, {{app}} and {{digest}} are "
        "filled per cluster; without {{cluster}} it is asked once and its samples are told "
        "apart by their `cluster` label.")
    success_condition: Annotated[str, Strict(), Field(min_length=1, max_length=500)] = Field(
        alias="successCondition",
        description="`result OP NUMBER` (OP <, <=, >, >=, ==, !=), several joined by `and`.")

    @field_validator("query")
    @classmethod
    def _placeholders(cls, value: str) -> str:
        return _templated(value)

    @field_validator("success_condition")
    @classmethod
    def _condition(cls, value: str) -> str:
        verification.parse_condition(value)  # ValueError says what is wrong
        return value


class VerificationCheck(_Model):
    """One check: an ``http`` or a ``prometheus`` measurement, taken ``count`` times
    ``intervalSeconds`` apart; more than ``failureLimit`` failures fail it."""

    name: Identifier
    http: HttpCheck | None = None
    prometheus: PrometheusCheck | None = None
    count: Annotated[int, Strict(), Field(ge=1, le=100)] = 1
    interval_seconds: Annotated[float, Strict(), Field(ge=0, le=600)] = Field(
        default=1.0, alias="intervalSeconds")
    failure_limit: Annotated[int, Strict(), Field(ge=0, le=99)] = Field(
        default=0, alias="failureLimit")
    timeout_seconds: Annotated[float, Strict(), Field(gt=0, le=120)] = Field(
        default=5.0, alias="timeoutSeconds")

    @model_validator(mode="after")
    def _one_measurement(self) -> VerificationCheck:
        if (self.http is None) == (self.prometheus is None):
            raise LocatedError((), "a check is exactly one of `http` or `prometheus`")
        if self.failure_limit >= self.count:
            raise LocatedError(("failureLimit",), f"must be less than count ({self.count}): "
                               "a check that may fail every measurement proves nothing")
        return self


class VerificationScope(_Model):
    services: tuple[Identifier, ...] | Literal["all"] = Field(
        description="The services held to these checks (Service names), or `all`.")


class Verification(_Model):
    """Checks a service must pass on every cluster before it is proven there (issue 34):
    the judge counts a cluster converged only when it runs the pinned digest AND passes
    them. Scoped to the environment whose desired-state root holds the document."""

    api_version: Literal["reconcile/v1"] = Field(alias="apiVersion")
    kind: Literal["Verification"]
    name: Identifier
    scope: VerificationScope
    checks: tuple[VerificationCheck, ...] = Field(min_length=1, max_length=20)

    @model_validator(mode="after")
    def _unique_checks(self) -> Verification:
        seen: dict[str, int] = {}
        for index, check in enumerate(self.checks):
            if check.name in seen:
                raise LocatedError(("checks", index, "name"), f"check {check.name!r} is "
                                   f"also checks[{seen[check.name]}]")
            seen[check.name] = index
        return self

    def applies_to(self, service: str) -> bool:
        return self.scope.services == "all" or service in self.scope.services


#: Seed 11.2 ``TManagedRouteKind``: the canonical gateway-managed route purposes.
class ManagedRouteKind(StrEnum):
    LETSENCRYPT_HTTP01_FORWARD = "letsencrypt-http01-forward"


#: Where an ACME HTTP-01 challenge is answered (RFC 8555 §8.3): a
#: ``letsencrypt-http01-forward`` route must be specific to this path.
ACME_CHALLENGE_PATH = "/.well-known/acme-challenge/"

#: What a gateway assumes for a field a route leaves out ([ext], docs/extensions.md §5).
#: Written explicitly on the wire, and filled in on what is read, so a default never
#: shows as drift.
DEFAULT_ROUTE_PORTS = (443,)
DEFAULT_ROUTE_PATH = "/"
DEFAULT_ROUTE_TRANSPORT = "tcp"

#: A route's hostname: a lower-case DNS name, or ``*.`` and one (a wildcard for one label).
ROUTE_HOSTNAME = names.anchored(
    r"(?=.{1,253}$)(?:\*\.)?"
    r"(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+"
    r"(?=[a-z0-9-]*[a-z])[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
)
RouteHostname = Annotated[str, Strict(), Field(pattern=ROUTE_HOSTNAME, max_length=253)]
#: An absolute request-path prefix without query, fragment, whitespace or control characters.
RoutePath = Annotated[
    str, Strict(), Field(pattern=names.anchored(r"/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*"),
                         max_length=1024)
]


class RouteOwner(_Model):
    """Who owns the route (seed 11.2 ``IGatewayClientOwnership``): the service's
    ``appId`` plus ``hostname``, ``routeRef``, or both -- so a normal route and a
    path-specific managed route for one hostname reconcile independently."""

    service: Identifier = Field(description="The name of a Service document in this repo; "
                                "its appId owns the route.")
    hostname: RouteHostname | None = Field(default=None, description="Hostname ownership "
                                           "for a domain route.")
    route_ref: Identifier | None = Field(default=None, alias="routeRef", description="A "
                                         "stable route key; with hostname it tells several "
                                         "routes of one hostname apart.")

    @model_validator(mode="after")
    def _some_key(self) -> RouteOwner:
        if self.hostname is None and self.route_ref is None:
            raise LocatedError((), "needs hostname, routeRef, or both: the service alone "
                               "does not say which of its routes this is")
        return self


class Transport(StrEnum):
    TCP = "tcp"
    UDP = "udp"
    ALL = "all"


class RouteMatch(_Model):
    """Which requests the route takes ([ext] match fields; ``domains`` and ``transport``
    are the seed's names). Omitted fields are the gateway's defaults, written out."""

    domains: tuple[RouteHostname, ...] | None = Field(
        default=None, max_length=100, description="Hostnames matched (`*.` for one label); "
        "default: [owner.hostname].")
    ports: tuple[Port, ...] = Field(default=DEFAULT_ROUTE_PORTS, min_length=1, max_length=64,
                                    description="Listening ports matched; default [443].")
    path: RoutePath = Field(default=DEFAULT_ROUTE_PATH, description="Request-path prefix "
                            "matched in whole segments (/api takes /api and /api/v1, not "
                            "/apix; a trailing slash is ignored); default /.")
    transport: Transport = Field(default=Transport.TCP, description="default tcp.")

    @model_validator(mode="after")
    def _unique(self) -> RouteMatch:
        for field, values in (("domains", self.domains or ()), ("ports", self.ports)):
            seen: dict[object, int] = {}
            for index, value in enumerate(values):
                if value in seen:
                    raise LocatedError((field, index), f"duplicates {field}[{seen[value]}] "
                                       f"({value})")
                seen[value] = index
        return self


class RouteAction(_Model):
    """What the route does with a request: forward it to the owner service's target."""

    type: Literal["forward"] = "forward"
    port: Port = Field(description="The owner service's target port.")


class RemoteIngress(_Model):
    """Seed 11.2 ``IGatewayRouteConfig.remoteIngress``."""

    enabled: Bool
    edge_filter: tuple[Annotated[str, Strict(), Field(min_length=1, max_length=253)], ...] = (
        Field(default=(), alias="edgeFilter"))


class Route(_Model):
    """A gateway route this repo owns (seed 11.2 ``IGatewayRouteConfig`` with its owner)."""

    api_version: Literal["reconcile/v1"] = Field(alias="apiVersion")
    kind: Literal["Route"]
    name: Identifier = Field(description="The route's name (IGatewayRouteConfig.name); "
                             "unique in the repo.")
    owner: RouteOwner
    match: RouteMatch = RouteMatch()
    action: RouteAction
    priority: Annotated[int, Strict(), Field(ge=-1_000_000, le=1_000_000)] = Field(
        description="Higher values are matched first by the gateway. Required: the Gateway "
        "API's tie-break by age is exactly what an explicit priority avoids.")
    managed_route_kind: ManagedRouteKind | None = Field(default=None, alias="managedRouteKind")
    remote_ingress: RemoteIngress | None = Field(default=None, alias="remoteIngress")

    @property
    def domains(self) -> tuple[str, ...]:
        """``match.domains`` as the gateway gets it: the owner's hostname by default."""
        if self.match.domains is not None:
            return self.match.domains
        return (self.owner.hostname,) if self.owner.hostname is not None else ()

    @model_validator(mode="after")
    def _rules(self) -> Route:
        problems: list[tuple[tuple[str | int, ...], str]] = []
        hostname = self.owner.hostname
        if hostname is not None and self.match.domains is not None \
                and hostname not in self.match.domains:
            problems.append((("match", "domains"), f"does not hold owner.hostname {hostname}: "
                             "a route owned by a hostname matches that hostname"))
        if self.managed_route_kind is ManagedRouteKind.LETSENCRYPT_HTTP01_FORWARD:
            if not routepaths.path_covers(ACME_CHALLENGE_PATH, self.match.path):
                problems.append((("match", "path"), f"a letsencrypt-http01-forward route "
                                 f"must be path-specific to {ACME_CHALLENGE_PATH} (it is "
                                 f"{self.match.path!r}), or it takes the hostname's normal "
                                 "traffic"))
            if not self.domains:
                problems.append((("owner", "hostname"), "a letsencrypt-http01-forward route "
                                 "answers challenges for a hostname: set owner.hostname"))
        if problems:
            raise LocatedErrors(problems)
        return self

    @property
    def owner_key(self) -> tuple[str, str | None, str | None]:
        """(service name, hostname, routeRef): one route per key."""
        return (self.owner.service, self.owner.hostname, self.owner.route_ref)


Document = Settings | Service | Grant | Hold | Route | Verification
DOCUMENT_KINDS: dict[str, type[Settings] | type[Service] | type[Grant] | type[Hold]
                    | type[Route] | type[Verification]] = {
    "Settings": Settings,
    "Service": Service,
    "Grant": Grant,
    "Hold": Hold,
    "Route": Route,
    "Verification": Verification,
}


class SourceRef(_Model):
    """Where a document came from: the repo-relative path and the line it starts on."""

    path: Str
    line: Count


class DesiredState(_Model):
    """Every document of a repo, validated and cross-checked."""

    settings: Settings
    services: tuple[Service, ...]
    grants: tuple[Grant, ...]
    holds: tuple[Hold, ...] = ()
    routes: tuple[Route, ...] = ()
    verifications: tuple[Verification, ...] = ()
    sources: dict[str, SourceRef] = Field(
        default_factory=dict, description="'Kind/name' -> where it was declared."
    )

    def service_by_name(self, name: str) -> Service | None:
        return next((s for s in self.services if s.name == name), None)

    def checks_for(self, service: str) -> tuple[tuple[str, VerificationCheck], ...]:
        """Issue 34: the checks ``service`` is held to, each named
        ``<verification>/<check>``, in document order (empty: none)."""
        return tuple((f"{v.name}/{c.name}", c) for v in self.verifications
                     if v.applies_to(service) for c in v.checks)

    def desired_grants(self) -> dict[tuple[str, str], frozenset[Capability]]:
        """(userId, serviceId) -> capabilities, resolving service names to ids."""
        by_name = {s.name: s.service_id for s in self.services}
        result: dict[tuple[str, str], frozenset[Capability]] = {}
        for grant in self.grants:
            for entry in grant.services:
                service_id = by_name.get(entry.service)
                if service_id is not None:
                    result[(grant.user_id, service_id)] = frozenset(entry.capabilities)
        return result
