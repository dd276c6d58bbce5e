"""The cluster-auth signer key: read the Ed25519 private key people actually have.

Accepted, recognised by content (never by file name):

- an OpenSSH private key (``ssh-keygen -t ed25519 -N ''``:
  ``-----BEGIN OPENSSH PRIVATE KEY-----``);
- a PKCS#8 PEM (``-----BEGIN PRIVATE KEY-----``, e.g. ``openssl genpkey -algorithm ed25519``)
  or the same key DER-encoded;
- a seed: exactly 32 raw bytes, or 64 hexadecimal characters (whitespace and a trailing
  newline ignored); also the 64-byte ``seed || public key`` form (raw or 128 hex
  characters) that NaCl/libsodium write, when its public half matches the seed.

Every refusal says which format it saw (an encrypted key, an RSA key, a public key, hex of
the wrong length, ...) and never echoes the file's content: it is a secret.

Callers: ``probing.Prober`` (via ``load_signer_key``). It must not print, and must not
keep the key's bytes anywhere but the returned key object.
"""

from __future__ import annotations

import re
import string
from pathlib import Path
from typing import Final

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from reconciler.shell.endpoints import ConfigError

ACCEPTED: Final = ("accepted: an OpenSSH ed25519 private key (ssh-keygen -t ed25519 -N ''), "
                   "a PKCS#8 PEM (BEGIN PRIVATE KEY), a raw 32-byte seed, or the seed as 64 "
                   "hex characters")

_PEM_LABEL = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----")
_HEX = frozenset(string.hexdigits)
_PUBLIC_SSH = (b"ssh-ed25519 ", b"ssh-rsa ", b"ecdsa-sha2-", b"sk-ssh-", b"ssh-dss ")


class KeyFormatError(ConfigError):
    """The signer key could not be used; the message names the format seen."""


def load_signer_key(source: bytes | Path) -> Ed25519PrivateKey:
    """An Ed25519 private key from a file (``Path``) or its bytes, in any accepted format."""
    where = f"signer key {str(source)!r}" if isinstance(source, Path) else "signer key"
    try:
        data = source.read_bytes() if isinstance(source, Path) else source
    except OSError as exc:
        raise ConfigError(f"{where} cannot be read: {exc.strerror}") from None
    return _parse(data, where)


def describe(data: bytes) -> str:
    """What the bytes look like, in words, without their content (for messages)."""
    stripped = data.strip()
    label = _PEM_LABEL.search(stripped)
    if not stripped:
        return "an empty file"
    if label is not None:
        return f"a PEM block labelled {label.group(1).decode('ascii')!r}"
    if stripped.startswith(_PUBLIC_SSH):
        return "an OpenSSH public key (one line, e.g. a .pub file)"
    text = _as_text(stripped)
    if text is not None:
        compact = "".join(text.split())
        if compact and set(compact) <= _HEX:
            return f"{len(compact)} hexadecimal characters"
        return f"{len(data)} bytes of text that is neither PEM, OpenSSH nor hex"
    return f"{len(data)} bytes of binary data"


def _parse(data: bytes, where: str) -> Ed25519PrivateKey:
    stripped = data.strip()
    label_match = _PEM_LABEL.search(stripped)
    if label_match is not None:
        label = label_match.group(1).decode("ascii")
        if label == "OPENSSH PRIVATE KEY":
            return _openssh(stripped, where)
        return _pem(stripped, label, where)
    if stripped.startswith(_PUBLIC_SSH):
        raise KeyFormatError(
            f"{where}: saw an OpenSSH public key (the .pub file); give the private key "
            f"(the file without .pub); {ACCEPTED}")
    if len(data) in (32, 64) and _as_text(data) is None:
        return _seed(data, where, "raw")
    text = _as_text(stripped)
    if text is not None:
        compact = "".join(text.split())
        if compact and set(compact) <= _HEX:
            if len(compact) in (64, 128):
                return _seed(bytes.fromhex(compact), where, "hex")
            raise KeyFormatError(
                f"{where}: saw {len(compact)} hexadecimal characters; a hex seed is 64 "
                f"characters (32 bytes); {ACCEPTED}")
        if len(data) in (32, 64):
            return _seed(data, where, "raw")
        raise KeyFormatError(f"{where}: saw {describe(data)}; {ACCEPTED}")
    if stripped[:1] == b"\x30":
        return _der(data, where)
    raise KeyFormatError(
        f"{where}: saw {len(data)} bytes of binary data; a raw seed is exactly 32 bytes; "
        f"{ACCEPTED}")


def _as_text(data: bytes) -> str | None:
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        return None
    return text if all(c.isprintable() or c in "\r\n\t " for c in text) else None


def _seed(data: bytes, where: str, form: str) -> Ed25519PrivateKey:
    key = Ed25519PrivateKey.from_private_bytes(data[:32])
    if len(data) == 64:
        public = key.public_key().public_bytes(serialization.Encoding.Raw,
                                               serialization.PublicFormat.Raw)
        if data[32:] != public:
            raise KeyFormatError(
                f"{where}: saw a 64-byte {form} key whose second half is not the public key "
                f"of its first (not a seed || public-key pair); {ACCEPTED}")
    return key


def _check_ed25519(key: object, where: str, seen: str) -> Ed25519PrivateKey:
    if isinstance(key, Ed25519PrivateKey):
        return key
    raise KeyFormatError(
        f"{where}: saw {seen} holding {_kind(key)} key; the built-in signer is Ed25519 "
        f"(ssh-keygen -t ed25519 -N ''); {ACCEPTED}")


def _kind(key: object) -> str:
    if isinstance(key, rsa.RSAPrivateKey):
        return "an RSA"
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return f"an ECDSA ({key.curve.name})"
    if isinstance(key, ed448.Ed448PrivateKey):
        return "an Ed448"
    if isinstance(key, dsa.DSAPrivateKey):
        return "a DSA"
    return "another kind of"


def _openssh(data: bytes, where: str) -> Ed25519PrivateKey:
    seen = "an OpenSSH private key"
    try:
        key = serialization.load_ssh_private_key(data, password=None)
    except TypeError:
        raise KeyFormatError(
            f"{where}: saw an encrypted OpenSSH private key (it has a passphrase); reconcile "
            "cannot prompt for it: remove it with `ssh-keygen -p -N '' -f FILE` on a copy "
            "kept as safely as the original") from None
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise KeyFormatError(
            f"{where}: saw {seen} that cannot be read ({_reason(exc)}); {ACCEPTED}") from None
    return _check_ed25519(key, where, seen)


def _pem(data: bytes, label: str, where: str) -> Ed25519PrivateKey:
    seen = f"a PEM block labelled {label!r}"
    if label == "ENCRYPTED PRIVATE KEY" or b"Proc-Type: 4,ENCRYPTED" in data:
        raise KeyFormatError(
            f"{where}: saw an encrypted private key ({seen}); reconcile cannot prompt for a "
            "passphrase: export it unencrypted (`openssl pkey -in KEY -out PLAIN`) and keep "
            "that file as safely as the original")
    if "PUBLIC KEY" in label:
        raise KeyFormatError(f"{where}: saw a public key ({seen}); give the private key; "
                             f"{ACCEPTED}")
    if "PRIVATE KEY" not in label:
        raise KeyFormatError(f"{where}: saw {seen}, which is not a private key; {ACCEPTED}")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise KeyFormatError(
            f"{where}: saw an encrypted private key ({seen}); export it unencrypted") from None
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise KeyFormatError(
            f"{where}: saw {seen} that cannot be read ({_reason(exc)}); {ACCEPTED}") from None
    return _check_ed25519(key, where, seen)


def _der(data: bytes, where: str) -> Ed25519PrivateKey:
    seen = "DER-encoded data"
    try:
        key = serialization.load_der_private_key(data, password=None)
    except TypeError:
        raise KeyFormatError(f"{where}: saw an encrypted DER private key; export it "
                             "unencrypted") from None
    except (ValueError, UnsupportedAlgorithm):
        raise KeyFormatError(
            f"{where}: saw {len(data)} bytes of binary data that is not a DER private key "
            f"nor a raw 32-byte seed; {ACCEPTED}") from None
    return _check_ed25519(key, where, seen)


def _reason(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:120]
