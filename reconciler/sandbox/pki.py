"""Key material for the sandbox: a CA, server certificates and the deploy signer's key.

Owns the files ``ca.pem``/``ca-key.pem``, ``control-plane.pem``/``-key.pem`` (SAN IP
127.0.0.1 + DNS localhost), ``gateway.pem``/``-key.pem`` (SAN DNS = the gateway hostname),
``signer.pem`` (Ed25519, PKCS#8) and ``signer.pub`` (raw public key, hex) in a state
directory. Existing files are reused, so a restarted sandbox keeps its trust roots.

Must not be used for anything but the sandbox: the CA is self-signed with a local key.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_FILE = "ca.pem"
CA_KEY_FILE = "ca-key.pem"
CONTROL_PLANE_CERT = "control-plane.pem"
CONTROL_PLANE_KEY = "control-plane-key.pem"
GATEWAY_CERT = "gateway.pem"
GATEWAY_KEY = "gateway-key.pem"
SIGNER_KEY_FILE = "signer.pem"
SIGNER_PUB_FILE = "signer.pub"

_VALIDITY = dt.timedelta(days=825)


def _write_private(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    tmp.chmod(0o600)
    tmp.replace(path)


def _key_pem(key: ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _load_ec_key(path: Path) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{path} is not an EC private key")
    return key


def ensure_ca(state_dir: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """Load the sandbox CA, creating it on first use."""
    cert_path, key_path = state_dir / CA_FILE, state_dir / CA_KEY_FILE
    if cert_path.exists() and key_path.exists():
        return x509.load_pem_x509_certificate(cert_path.read_bytes()), _load_ec_key(key_path)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "reconcile sandbox CA")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False),
            critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_private(key_path, _key_pem(key))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def ensure_server_cert(
    state_dir: Path, cert_name: str, key_name: str, *, dns: list[str], ips: list[str],
) -> tuple[Path, Path]:
    """Issue (once) a server certificate from the sandbox CA with the given SANs."""
    cert_path, key_path = state_dir / cert_name, state_dir / key_name
    if cert_path.exists() and key_path.exists():
        existing = x509.load_pem_x509_certificate(cert_path.read_bytes())
        san = existing.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        if sorted(san.get_values_for_type(x509.DNSName)) == sorted(dns):
            return cert_path, key_path
    ca_cert, ca_key = ensure_ca(state_dir)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    alt_names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns]
    alt_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, (dns or ips)[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    _write_private(key_path, _key_pem(key))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


def ensure_signer(state_dir: Path) -> tuple[Path, str]:
    """The deploy signer's Ed25519 key (PKCS#8 PEM) and its raw public key as hex."""
    key_path, pub_path = state_dir / SIGNER_KEY_FILE, state_dir / SIGNER_PUB_FILE
    if key_path.exists() and pub_path.exists():
        return key_path, pub_path.read_text(encoding="ascii").strip()
    key = ed25519.Ed25519PrivateKey.generate()
    public_hex = key.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()
    _write_private(key_path, _key_pem(key))
    pub_path.write_text(public_hex + "\n", encoding="ascii")
    return key_path, public_hex


def ensure_all(state_dir: Path, *, gateway: str) -> None:
    """Everything a sandbox needs before its processes start."""
    ensure_ca(state_dir)
    ensure_server_cert(state_dir, CONTROL_PLANE_CERT, CONTROL_PLANE_KEY,
                       dns=["localhost"], ips=["127.0.0.1"])
    ensure_server_cert(state_dir, GATEWAY_CERT, GATEWAY_KEY, dns=[gateway], ips=[])
    ensure_signer(state_dir)
