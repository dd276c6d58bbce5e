"""The sandbox's simulated OCI registry: which indexes each repository holds, under which
tags, and which evidence was published for each.

Owns the index record (digest, media type, platforms with a per-platform manifest digest,
``runnable`` and ``manifestPresent``, and the published attestations), its deterministic
defaults (``docs/sandbox-defaults.md``: examples pin them), a push (an index is published
under a tag, the tag moves to it, and a service the control plane has observes it as a new
``IImageRelease``), the ``IImageRelease`` record, and the ``release:`` YAML block a person
pastes into the desired state.

Deterministic defaults: the first index pushed as ``<name>:<tag>`` has the digest
``seeded_digest(name, tag)``; a later push of an already known digest gets
``seeded_digest(name, f"{tag}+push{n}")`` (a new manifest under a tag that moves). Platform
manifest digests are ``seeded_digest(name, f"{key}:{os}/{arch}")`` and each attestation's
statement digest ``seeded_digest(name, f"{key}:{kind}")``, with ``key`` the tag (or
``tag+pushN``), verifier ``sandbox-verifier``, verifiedAt ``1780000000000``.

Runs inside the caller's ``store`` transaction; must not talk HTTP.
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass
from typing import Any

from reconciler.sandbox import preflight, rollouts, store

JsonDict = dict[str, Any]

REGISTRY_HOST = "registry.sandbox.test"
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
DEFAULT_PLATFORMS = ("linux/amd64", "linux/arm64")
EVIDENCE_KINDS = preflight.REQUIRED_EVIDENCE_KINDS
VERIFIER = "sandbox-verifier"
VERIFIED_AT = 1_780_000_000_000

_PLATFORM = re.compile(r"[a-z0-9][a-z0-9_.-]*/[a-z0-9][a-z0-9_.-]*(?:/[a-z0-9][a-z0-9_.-]*)?")
_REPOSITORY = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)+")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


class RegistryError(ValueError):
    """A push or a seed entry the registry does not accept."""


@dataclass(frozen=True)
class Publication:
    """What a push publishes besides the digest: platforms, absent manifests, evidence."""

    platforms: tuple[str, ...] = DEFAULT_PLATFORMS
    missing_manifests: tuple[str, ...] = ()
    evidence: tuple[str, ...] = EVIDENCE_KINDS
    evidence_subject: str | None = None

    def checked(self) -> Publication:
        if not self.platforms:
            raise RegistryError("an index needs at least one platform")
        for platform in self.platforms:
            if not _PLATFORM.fullmatch(platform):
                raise RegistryError(f"platform {platform!r} is not os/arch[/variant]")
        if len(set(self.platforms)) != len(self.platforms):
            raise RegistryError("a platform is listed twice")
        for missing in self.missing_manifests:
            if missing not in self.platforms:
                raise RegistryError(f"missing manifest {missing!r} is not one of the platforms "
                                    f"({', '.join(self.platforms)})")
        for kind in self.evidence:
            if kind not in EVIDENCE_KINDS:
                raise RegistryError(f"evidence kind {kind!r} is not one of "
                                    f"{', '.join(EVIDENCE_KINDS)}")
        if self.evidence_subject is not None and not preflight.SHA256_DIGEST.fullmatch(
                self.evidence_subject):
            raise RegistryError(f"evidence subject {self.evidence_subject!r} is not "
                                "sha256:<64 lower-case hex>")
        return self


def parse_evidence(value: object) -> tuple[str, ...]:
    """``complete`` (every kind), ``none``, or a comma list (or list) of kinds."""
    if value == "complete":
        return EVIDENCE_KINDS
    if value == "none":
        return ()
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        raise RegistryError("evidence is complete, none, or a list of kinds")
    kinds = tuple(str(k).strip() for k in items if str(k).strip())
    if not kinds:
        raise RegistryError("evidence is complete, none, or a list of kinds")
    for kind in kinds:
        if kind not in EVIDENCE_KINDS:
            raise RegistryError(f"evidence kind {kind!r} is not one of "
                                f"{', '.join(EVIDENCE_KINDS)} (or complete, none)")
    return kinds


def publication_from_seed(entry: dict[str, Any]) -> Publication:
    """Seed keys ``platforms``, ``missingManifests``, ``evidence``, ``evidenceSubject``."""
    return Publication(
        platforms=tuple(str(p) for p in entry.get("platforms", DEFAULT_PLATFORMS)),
        missing_manifests=tuple(str(p) for p in entry.get("missingManifests", ())),
        evidence=parse_evidence(entry.get("evidence", "complete")),
        evidence_subject=(str(entry["evidenceSubject"]) if entry.get("evidenceSubject")
                          else None)).checked()


def index_record(*, name: str, repository: str, registry_host: str, digest: str, key: str,
                 publication: Publication, at: int) -> JsonDict:
    """The registry's view of one OCI index (see the module docstring for the digests)."""
    platforms = []
    for platform in publication.platforms:
        os_name, architecture, *variant = platform.split("/")
        present = platform not in publication.missing_manifests
        entry: JsonDict = {"os": os_name, "architecture": architecture,
                           "digest": rollouts.seeded_digest(name, f"{key}:{platform}"),
                           "mediaType": MANIFEST_MEDIA_TYPE,
                           # A platform whose manifest is absent cannot be pulled, so it
                           # cannot run either.
                           "runnable": present, "manifestPresent": present}
        if variant:
            entry["variant"] = variant[0]
        platforms.append(entry)
    subject = publication.evidence_subject or digest
    attestations = [{"kind": kind, "statementDigest": rollouts.seeded_digest(name, f"{key}:{kind}"),
                     "subjectDigest": subject, "verifier": VERIFIER, "verifiedAt": VERIFIED_AT}
                    for kind in EVIDENCE_KINDS if kind in publication.evidence]
    return {"name": name, "registryHost": registry_host, "repository": repository,
            "digest": digest, "mediaType": INDEX_MEDIA_TYPE, "platforms": platforms,
            "attestations": attestations, "pushedAt": at}


def publish(conn: sqlite3.Connection, index: JsonDict, tag: str | None) -> None:
    """Store ``index`` and move ``tag`` (when given) to it."""
    store.save_index(conn, index)
    if tag is not None:
        store.set_tag(conn, index["repository"], tag, index["digest"])


def find(conn: sqlite3.Connection, digest: str) -> JsonDict | None:
    """The index with ``digest`` in any repository (the first pushed), or None."""
    found = store.indexes_by_digest(conn, digest)
    return found[0] if found else None


def find_manifest(conn: sqlite3.Connection, digest: str) -> JsonDict | None:
    """A platform manifest with ``digest`` (present in its repository), as
    ``{registryHost, repository, digest, mediaType, platform}``, or None."""
    row = conn.execute(
        "SELECT r.data, p.value FROM registry_indexes r, "
        "json_each(json_extract(r.data, '$.platforms')) p "
        "WHERE json_extract(p.value, '$.digest') = ? "
        "AND json_extract(p.value, '$.manifestPresent') ORDER BY r.seq LIMIT 1",
        (digest,)).fetchone()
    if row is None:
        return None
    index, platform = json.loads(row[0]), json.loads(row[1])
    name = f"{platform['os']}/{platform['architecture']}" + (
        f"/{platform['variant']}" if platform.get("variant") else "")
    return {"registryHost": index["registryHost"], "repository": index["repository"],
            "digest": digest, "mediaType": platform.get("mediaType", MANIFEST_MEDIA_TYPE),
            "platform": name}


def known(conn: sqlite3.Connection, digest: str) -> bool:
    """Whether ``digest`` is already an index or a release anywhere."""
    if store.indexes_by_digest(conn, digest):
        return True
    row = conn.execute("SELECT 1 FROM releases WHERE json_extract(data, '$.registryRootDigest') "
                       "= ? LIMIT 1", (digest,)).fetchone()
    return row is not None


def release_record(*, service_id: str, name: str, repository: str, registry_host: str,
                   media_type: str, tag: str, digest: str, release_id: str,
                   at: int) -> JsonDict:
    """An ``IImageRelease`` (seed 003): the control plane observed ``digest`` under ``tag``."""
    return {
        "id": release_id,
        "data": {
            "serviceId": service_id,
            "imageId": f"img-{name}",
            "registryHost": registry_host,
            "repository": repository,
            "registryRootDigest": digest,
            "digestPinnedImageReference": f"{registry_host}/{repository}@{digest}",
            "manifestMediaType": media_type,
            "observedTags": [tag],
            "firstObservedAt": at,
            "lastObservedAt": at,
            "observationCount": 1,
        },
    }


def _find_service(conn: sqlite3.Connection, name: str) -> JsonDict | None:
    return next((s for s in store.all_services(conn)
                 if s["data"]["name"] == name or s["id"] == name), None)


def push(conn: sqlite3.Connection, service_name: str, tag: str, *,
         repository: str | None = None,
         publication: Publication | None = None) -> tuple[JsonDict, JsonDict | None]:
    """The registry receives a new index under ``tag``; returns it, and the new release
    when the control plane has that service (it observes the push)."""
    publication = (publication or Publication()).checked()
    if not _TAG.fullmatch(tag):
        raise RegistryError(f"tag {tag!r} is not a valid OCI tag")
    service = _find_service(conn, service_name)
    existing = store.load_releases(conn, service["id"]) if service is not None else []
    if service is None:
        if repository is None:
            raise RegistryError(
                f"no service named {service_name!r}; to publish an image for a service the "
                "control plane does not have yet, pass its repository (--repository shop/NAME)")
        name, registry_host = service_name, REGISTRY_HOST
    else:
        name = str(service["data"]["name"])
        template = existing[-1]["data"] if existing else {
            "repository": f"shop/{name}", "registryHost": REGISTRY_HOST}
        if repository is not None and repository != template["repository"]:
            raise RegistryError(f"{name}'s images live in {template['repository']}, "
                                f"not {repository}")
        repository, registry_host = str(template["repository"]), str(template["registryHost"])
    if not _REPOSITORY.fullmatch(repository):
        raise RegistryError(f"repository {repository!r} is not a registry path like shop/name")
    counter = int(store.get_meta(conn, "push-counter", "0") or 0) + 1
    store.set_meta(conn, "push-counter", str(counter))
    key = tag
    if known(conn, rollouts.seeded_digest(name, tag)):
        key = f"{tag}+push{counter}"
    digest = rollouts.seeded_digest(name, key)
    now = store.now_ms()
    index = index_record(name=name, repository=repository, registry_host=registry_host,
                         digest=digest, key=key, publication=publication, at=now)
    publish(conn, index, tag)
    if service is None:
        return index, None
    release = release_record(
        service_id=service["id"], name=name, repository=repository,
        registry_host=registry_host, media_type=INDEX_MEDIA_TYPE, tag=tag, digest=digest,
        release_id=f"rel-{name}-{tag}-{counter}", at=now)
    # A tag moves to the newest manifest pushed under it (registry semantics).
    for old in existing:
        if tag in old["data"]["observedTags"]:
            old["data"]["observedTags"] = [t for t in old["data"]["observedTags"] if t != tag]
            store.save_release(conn, old)
    store.save_release(conn, release)
    store.bump_version(conn)
    return index, release


def version_of(tag: str) -> str | None:
    """The canonical semantic version a tag names (``v1.2.3`` → ``1.2.3``), or None."""
    candidate = tag[1:] if tag.startswith("v") else tag
    return candidate if preflight.SEMANTIC_VERSION.fullmatch(candidate) else None


_YAML_PLAIN = re.compile(r"[A-Za-z0-9/][A-Za-z0-9_./:+-]*")
_YAML_NUMBER = re.compile(r"[-+]?(?:[0-9][0-9_]*)?(?:\.[0-9_]*)?(?:[eE][-+]?[0-9]+)?")
_YAML_WORDS = frozenset({"true", "false", "yes", "no", "on", "off", "y", "n", "null", "~"})


def _scalar(value: str) -> str:
    """``value`` as a YAML string scalar: plain when it cannot read as anything else."""
    if (_YAML_PLAIN.fullmatch(value) and not _YAML_NUMBER.fullmatch(value)
            and value.lower() not in _YAML_WORDS):
        return value
    return json.dumps(value)


def release_yaml(index: JsonDict, tag: str) -> str:
    """The ``release:`` block for the desired state, evidence included (when published)."""
    lines = ["release:",
             f"  registryHost: {_scalar(index['registryHost'])}",
             f"  repository: {_scalar(index['repository'])}",
             f"  digest: {index['digest']}",
             f"  tag: {_scalar(tag)}"]
    version = version_of(tag)
    if version is not None:
        lines.append(f"  version: {_scalar(version)}")
    attestations: list[JsonDict] = index.get("attestations", [])
    if attestations:
        lines.append("  evidence:")
        for att in attestations:
            lines += [f"    - kind: {att['kind']}",
                      f"      statementDigest: {att['statementDigest']}",
                      f"      subjectDigest: {att['subjectDigest']}",
                      f"      verifier: {att['verifier']}",
                      f"      verifiedAt: {att['verifiedAt']}"]
    else:
        lines.append("  # no release evidence was published for this digest")
    return "\n".join(lines) + "\n"
