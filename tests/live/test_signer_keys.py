"""The signer key in the formats people have, and a worded refusal for everything else."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from reconciler.shell.endpoints import ConfigError
from reconciler.shell.keys import KeyFormatError, load_signer_key

KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(7, 39)))  # fixed: stable test ids
SEED = KEY.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                         serialization.NoEncryption())
PUBLIC = KEY.public_key().public_bytes(serialization.Encoding.Raw,
                                       serialization.PublicFormat.Raw)
E = serialization.Encoding
F = serialization.PrivateFormat


def public_of(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(E.Raw, serialization.PublicFormat.Raw)


def write(tmp: Path, name: str, data: bytes) -> Path:
    path = tmp / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(("name", "data"), [
    ("openssh", KEY.private_bytes(E.PEM, F.OpenSSH, serialization.NoEncryption())),
    ("pkcs8.pem", KEY.private_bytes(E.PEM, F.PKCS8, serialization.NoEncryption())),
    ("pkcs8.der", KEY.private_bytes(E.DER, F.PKCS8, serialization.NoEncryption())),
    ("seed.raw", SEED),
    ("seed.hex", SEED.hex().encode() + b"\n"),
    ("seed-upper-spaced.hex", b"  " + b" ".join(
        SEED.hex().upper()[i:i + 8].encode() for i in range(0, 64, 8)) + b"\r\n"),
    ("nacl.raw", SEED + PUBLIC),
    ("nacl.hex", (SEED + PUBLIC).hex().encode() + b"\n"),
], ids=lambda value: value if isinstance(value, str) else "")
def test_each_format_is_accepted(tmp_path: Path, name: str, data: bytes) -> None:
    assert public_of(load_signer_key(write(tmp_path, name, data))) == PUBLIC
    assert public_of(load_signer_key(data)) == PUBLIC


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen not installed")
def test_a_key_straight_from_ssh_keygen(tmp_path: Path) -> None:
    path = tmp_path / "reconcile_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
                   check=True, capture_output=True)
    key = load_signer_key(path)
    blob = (tmp_path / "reconcile_ed25519.pub").read_text().split()[1]
    import base64
    assert base64.b64decode(blob)[-32:] == public_of(key)
    with pytest.raises(KeyFormatError, match="saw an OpenSSH public key"):
        load_signer_key(tmp_path / "reconcile_ed25519.pub")


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen not installed")
def test_a_passphrase_from_ssh_keygen_is_refused_as_encrypted(tmp_path: Path) -> None:
    path = tmp_path / "locked"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "hunter2", "-f", str(path)],
                   check=True, capture_output=True)
    with pytest.raises(KeyFormatError, match="saw an encrypted OpenSSH private key"):
        load_signer_key(path)


RSA = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC = ec.generate_private_key(ec.SECP256R1())
LOCK = serialization.BestAvailableEncryption(b"hunter2")


@pytest.mark.parametrize(("data", "message"), [
    (KEY.private_bytes(E.PEM, F.PKCS8, LOCK),
     r"saw an encrypted private key \(a PEM block labelled 'ENCRYPTED PRIVATE KEY'\)"),
    (RSA.private_bytes(E.PEM, F.OpenSSH, serialization.NoEncryption()),
     r"saw an OpenSSH private key holding an RSA key; the built-in signer is Ed25519"),
    (RSA.private_bytes(E.PEM, F.TraditionalOpenSSL, serialization.NoEncryption()),
     r"saw a PEM block labelled 'RSA PRIVATE KEY' holding an RSA key"),
    (EC.private_bytes(E.PEM, F.PKCS8, serialization.NoEncryption()),
     r"saw a PEM block labelled 'PRIVATE KEY' holding an ECDSA \(secp256r1\) key"),
    (KEY.public_key().public_bytes(E.PEM, serialization.PublicFormat.SubjectPublicKeyInfo),
     r"saw a public key \(a PEM block labelled 'PUBLIC KEY'\)"),
    (KEY.public_key().public_bytes(E.OpenSSH, serialization.PublicFormat.OpenSSH) + b" me@host",
     r"saw an OpenSSH public key"),
    (b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
     r"saw a PEM block labelled 'CERTIFICATE', which is not a private key"),
    (SEED.hex()[:-2].encode() + b"\n", r"saw 62 hexadecimal characters; a hex seed is 64"),
    (SEED[:31] + b"\xff\x00", r"saw 33 bytes of binary data; a raw seed is exactly 32 bytes"),
    (b"", r"saw an empty file"),
    (b"this is not a key, it is a sentence of prose\n",
     r"saw 45 bytes of text that is neither PEM, OpenSSH nor hex"),
    (SEED + bytes(32), r"saw a 64-byte raw key whose second half is not the public key"),
    (b"-----BEGIN PRIVATE KEY-----\nnot base64 at all\n-----END PRIVATE KEY-----\n",
     r"saw a PEM block labelled 'PRIVATE KEY' that cannot be read"),
], ids=lambda value: "" if isinstance(value, bytes) else value[4:40])
def test_each_refusal_says_what_it_saw(tmp_path: Path, data: bytes, message: str) -> None:
    path = write(tmp_path, "key", data)
    with pytest.raises(KeyFormatError, match=message) as info:
        load_signer_key(path)
    text = str(info.value)
    assert str(path) in text
    if b"PRIVATE KEY" in data or len(data) in (32, 33, 64):
        assert "accepted:" in text or "encrypted" in text
    # Never the content: no line of the file (a secret) appears in the message.
    for line in data.splitlines():
        chunk = line.strip()
        if len(chunk) >= 12 and not chunk.startswith(b"-----"):
            assert chunk.decode("latin-1") not in text


def test_an_unreadable_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot be read"):
        load_signer_key(tmp_path / "missing")
    with pytest.raises(ConfigError, match="cannot be read"):
        load_signer_key(tmp_path)  # a directory


def test_the_key_format_error_is_a_config_error() -> None:
    assert issubclass(KeyFormatError, ConfigError)
