"""Shared types for the interop tests (imported by conftest and the test modules)."""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

if TYPE_CHECKING:
    from reconciler.sandbox.launcher import Sandbox

NODE_DIR = Path(__file__).resolve().parents[2] / "interop" / "node"


@dataclass(frozen=True)
class NodeServer:
    """A running ``interop/node/server.mjs``: a real TypedRouter behind node:http."""

    base: str  # http(s)://127.0.0.1:PORT
    token: str
    ca_file: Path | None = None  # set when it serves HTTPS

    @property
    def url(self) -> str:
        """The honest endpoint: ``JSON.stringify(await router.routeAndAddResponse(body))``."""
        return f"{self.base}/typedrequest"

    def fault_url(self, fault: str) -> str:
        """A fault path: ``strip-correlation``, ``http-500`` or ``http-400`` (see server.mjs)."""
        return f"{self.base}/{fault}/typedrequest"


@dataclass(frozen=True)
class NodeResult:
    """What client.mjs printed: ``ok`` plus ``response`` or the error's fields."""

    returncode: int
    out: dict[str, Any]
    stderr: str


RunNodeClient = Callable[..., NodeResult]


def make_loopback_pki(directory: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1/localhost: (ca, cert, key)."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "interop test CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
            encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = (directory / "ca.pem", directory / "server.pem", directory / "server-key.pem")
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return paths


def typedrequest_url(sandbox: Sandbox) -> str:
    """The sandbox control plane's TypedRequest endpoint, as the Node client is given it."""
    base = sandbox.control_plane_url.rstrip("/")
    return base if base.endswith("/typedrequest") else base + "/typedrequest"


def node_env(sandbox: Sandbox) -> dict[str, str]:
    """What the Node client needs to reach the sandbox: its CA and the token (never argv)."""
    return {"NODE_EXTRA_CA_CERTS": str(sandbox.ca_file), "RECONCILE_TOKEN": sandbox.token}
