"""Ed25519 keys for signed audit digests: make a pair, load either half, sign and check.

The private key (PKCS#8 PEM, unencrypted) stays with icegov (``ICEGOV__AUDIT__SIGNING_KEY``);
the public key (SubjectPublicKeyInfo PEM) is all ``icegov audit verify --public-key`` needs.
A key of any other type is refused.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from proxy.audit.files import read_only


class BadKey(ValueError):
    """A key file that is not an Ed25519 key in PEM."""


def generate(private_path: Path, public_path: Path) -> str:
    """Write a new key pair (the private file mode 0600, never over an existing file); returns
    the public key's id."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    descriptor = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(private)
    with public_path.open("xb") as handle:
        handle.write(public)
    return key_id(key.public_key())


def load_private(path: Path) -> Ed25519PrivateKey:
    """The Ed25519 private key in ``path``; ``BadKey`` (or OSError) when it is not one."""
    return _private(_pem(path), path)


def load_public(path: Path) -> Ed25519PublicKey:
    """The Ed25519 public key in ``path`` (a private key file gives its public half)."""
    data = _pem(path)
    if b"PRIVATE KEY" in data:
        return _private(data, path).public_key()
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise BadKey(f"{path}: not a public key in PEM") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise BadKey(f"{path}: not an Ed25519 key")
    return key


def _pem(path: Path) -> bytes:
    """The key file's bytes, read once (a FIFO or device is refused, never waited on)."""
    with read_only(path) as handle:
        return handle.read()


def _private(data: bytes, path: Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise BadKey(f"{path}: not an unencrypted private key in PEM") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise BadKey(f"{path}: not an Ed25519 key")
    return key


def key_id(key: Ed25519PublicKey) -> str:
    """A short name for a public key: the first 16 hex digits of SHA-256 over its raw bytes."""
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def sign(key: Ed25519PrivateKey, data: bytes) -> str:
    """The signature of ``data`` in hex."""
    return key.sign(data).hex()


def signed_by(key: Ed25519PublicKey, data: bytes, signature: object) -> bool:
    """Whether ``signature`` (hex) is ``key``'s signature of ``data``."""
    if not isinstance(signature, str) or len(signature) != 128:
        return False
    try:
        key.verify(bytes.fromhex(signature), data)
    except (ValueError, InvalidSignature):
        return False
    return True
