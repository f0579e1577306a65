"""Client secrets, stored only as salted scrypt hashes in a self-describing string.

Format: ``scrypt$<n>$<r>$<p>$<salt, base64>$<hash, base64>``. The cost parameters travel with the
hash, so they can be raised later without invalidating existing entries.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import threading
from dataclasses import dataclass

SCHEME = "scrypt"
DEFAULT_N = 2**14
DEFAULT_R = 8
DEFAULT_P = 1
SALT_BYTES = 16
HASH_BYTES = 32
_MAX_N = 2**20  # a hand-edited file must not make verification eat gigabytes
_MAX_R = 32
_MAX_P = 16


class SecretHashError(ValueError):
    """A ``secret_hash`` string that is not one icegov can verify against."""


@dataclass(frozen=True)
class SecretHash:
    """A parsed scrypt hash: cost parameters, salt and digest."""

    n: int
    r: int
    p: int
    salt: bytes
    digest: bytes

    def __str__(self) -> str:
        salt = base64.b64encode(self.salt).decode("ascii")
        digest = base64.b64encode(self.digest).decode("ascii")
        return f"{SCHEME}${self.n}${self.r}${self.p}${salt}${digest}"

    @classmethod
    def parse(cls, text: str) -> SecretHash:
        """Parse the stored form, refusing unknown schemes and unreasonable costs."""
        parts = text.split("$")
        if len(parts) != 6 or parts[0] != SCHEME:
            raise SecretHashError("expected 'scrypt$<n>$<r>$<p>$<salt>$<hash>'")
        try:
            n, r, p = (int(x) for x in parts[1:4])
            salt = base64.b64decode(parts[4], validate=True)
            digest = base64.b64decode(parts[5], validate=True)
        except (ValueError, binascii.Error) as exc:
            raise SecretHashError(f"unreadable scrypt parameters: {exc}") from None
        _check_costs(n, r, p)
        if len(salt) < 8 or len(digest) < 16:
            raise SecretHashError("scrypt salt or hash is too short")
        return cls(n, r, p, salt, digest)

    def matches(self, secret: str) -> bool:
        """True if ``secret`` hashes to this digest (compared in constant time)."""
        candidate = _scrypt(secret, self.salt, self.n, self.r, self.p, len(self.digest))
        return hmac.compare_digest(candidate, self.digest)


def hash_secret(secret: str) -> str:
    """A new salted hash of ``secret`` in the stored string form."""
    salt = secrets.token_bytes(SALT_BYTES)
    digest = _scrypt(secret, salt, DEFAULT_N, DEFAULT_R, DEFAULT_P, HASH_BYTES)
    return str(SecretHash(DEFAULT_N, DEFAULT_R, DEFAULT_P, salt, digest))


def verify_secret(secret: str, stored: str) -> bool:
    """True if ``secret`` matches the stored hash string (False for an unparseable one)."""
    try:
        return SecretHash.parse(stored).matches(secret)
    except SecretHashError:
        return False


def generate_secret() -> str:
    """A fresh random client secret (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def burn_time() -> None:
    """Spend what one default verification costs, so unknown clients are not told apart."""
    _scrypt("", b"\0" * SALT_BYTES, DEFAULT_N, DEFAULT_R, DEFAULT_P, HASH_BYTES)


def _check_costs(n: int, r: int, p: int) -> None:
    if n < 2 or n > _MAX_N or n & (n - 1):
        raise SecretHashError(f"scrypt n must be a power of two up to {_MAX_N}")
    if not 1 <= r <= _MAX_R or not 1 <= p <= _MAX_P:
        raise SecretHashError(f"scrypt r must be 1..{_MAX_R} and p 1..{_MAX_P}")


MAX_CONCURRENT_HASHES = 4
"""scrypt runs in worker threads, each taking ~16 MiB at the default cost: at most this many at
once, so a flood of token requests queues instead of taking the process's memory."""
_HASHING = threading.BoundedSemaphore(MAX_CONCURRENT_HASHES)


def _scrypt(secret: str, salt: bytes, n: int, r: int, p: int, length: int) -> bytes:
    maxmem = 128 * r * (n + p + 2) + 1024 * 1024
    with _HASHING:
        return hashlib.scrypt(secret.encode("utf-8"), salt=salt, n=n, r=r, p=p, maxmem=maxmem,
                              dklen=length)
