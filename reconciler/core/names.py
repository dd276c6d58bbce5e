"""Canonical name patterns shared by the desired-state model and the live model.

Owns the regular expressions for digests, OCI names, egress hosts and the closed
capability set (all from the seeds). Pure: no I/O, no third-party imports.

Every pattern is written so that Python's ``re`` (used by jsonschema and by the
pydantic models, see ``desired.MODEL_CONFIG``) and ECMA-262 (used by editors reading
the published JSON Schema) agree on it: no ``\\Z``, and a leading ``(?!.*\\n)`` because
``$`` in Python also matches before a trailing newline -- a digest written as a YAML
``|`` block would otherwise slip through.
"""

from __future__ import annotations

import re
from enum import StrEnum

NO_NEWLINE = r"(?!.*\n)"


def anchored(body: str) -> str:
    """Wrap a pattern body so it matches a whole single-line string."""
    return f"^{NO_NEWLINE}{body}$"


#: ``sha256:<64 lower hex>`` (seed 003 ``sha256DigestRegex``).
DIGEST = anchored(r"sha256:[a-f0-9]{64}")

#: OCI registry host, optionally with a port (seed 003 ``registryHostRegex``).
REGISTRY_HOST = anchored(r"(?:localhost|[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?)(?::[1-9][0-9]{0,4})?")

#: OCI repository path (seed 003 ``repositoryRegex``).
REPOSITORY = anchored(r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*")

#: A bare lower-case DNS name (seed 000 ``EGRESS_HOST_REGEX``), tightened: the last
#: label must contain a letter, so no spelling of an IP address passes -- ``127.1``,
#: ``0177.0.0.1``, ``10.0.0.1`` and ``0x7f.1`` all end in a numeric label, and
#: ``2130706433`` or ``[::1]`` have no dot or carry brackets.
EGRESS_HOST = anchored(
    r"(?=.{1,253}$)"
    r"(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+"
    r"(?=[a-z0-9-]*[a-z])[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
)

#: OCI tag grammar (distribution spec).
TAG = anchored(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")

#: Identifiers we accept for names, service ids, app ids, user ids and cluster ids.
IDENTIFIER = anchored(r"[a-z0-9](?:[a-z0-9._-]{0,61}[a-z0-9])?")

#: Environment variable names (settings carry names, never secrets).
ENV_NAME = anchored(r"[A-Z_][A-Z0-9_]{0,127}")

DEFAULT_EGRESS_PORT = 443
MAX_EGRESS_ENTRIES = 50

_DIGEST_RE = re.compile(r"sha256:[a-f0-9]{64}")


def is_digest(value: str) -> bool:
    """True for a canonical ``sha256:`` digest (whole string, no trailing newline)."""
    return _DIGEST_RE.fullmatch(value) is not None


def digest_of_reference(reference: str) -> str | None:
    """The digest after the last ``@`` of an image reference, if canonical (seed 003)."""
    _, sep, tail = reference.rpartition("@")
    if not sep:
        return None
    candidate = tail.strip().lower()
    return candidate if is_digest(candidate) else None


class Capability(StrEnum):
    """The closed set of deployment capabilities (seed 003 ``TServiceDeploymentCapability``)."""

    PREFLIGHT = "deployment:preflight"
    CREATE_GREENFIELD = "deployment:create-greenfield"
    PROMOTE_ROUTE = "deployment:promote-route"
    ROLLBACK_ROUTE = "deployment:rollback-route"


class MediaType(StrEnum):
    """OCI manifest media types (seed 003 ``TOciManifestMediaType``)."""

    OCI_INDEX = "application/vnd.oci.image.index.v1+json"
    OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
    DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
    DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
