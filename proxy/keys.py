"""Checks every secret key icegov is configured with must pass before it is used.

A key shorter than its MAC's digest is refused, and so is any key that was ever published:
values from this repository's deployment examples, which anyone can read and sign with. Also
the one form of the sealed tokens those keys sign: ``<version>.<b64url body>.<b64url mac>``,
the MAC an HMAC-SHA256 over a domain (one per kind of token) and the body (``seal_token`` /
``opened_token``), with one spelling per token (``b64url``/``unb64url``).
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import secrets

from pydantic import SecretStr

MIN_KEY_BYTES = 32  # HMAC-SHA256 wants a key at least as long as its digest (RFC 2104, 7518)

PUBLISHED_KEYS = frozenset({
    # deploy/compose.yaml fell back to these before it required the keys to be set
    "quickstart-only-signing-key-0123456789abcdef",
    "quickstart-only-plan-task-key-0123456789abcdef",
})


def check_key(value: str, what: str) -> None:
    """``ValueError`` naming ``what`` when the key is too short or was published."""
    if len(value.encode()) < MIN_KEY_BYTES:
        raise ValueError(f"{what} must be at least {MIN_KEY_BYTES} bytes")
    if value.strip() in PUBLISHED_KEYS:
        raise ValueError(f"{what} is a published example key: generate one "
                         "(e.g. `openssl rand -base64 48`)")


def key_or_process_key(secret: SecretStr | None, purpose: str) -> bytes:
    """The configured key, or a random key for ``purpose`` drawn once per process when none is
    set (fine for one process; replicas must share a configured key)."""
    return secret.get_secret_value().encode() if secret is not None else process_key(purpose)


@functools.cache
def process_key(purpose: str) -> bytes:
    """One random key per purpose and process (a key never serves two purposes)."""
    return secrets.token_bytes(2 * MIN_KEY_BYTES)


def b64url(data: bytes) -> str:
    """``data`` as unpadded URL-safe base64 (sealed tokens travel in URLs)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64url(text: str) -> bytes | None:
    """What ``b64url`` gave ``text`` for, None when ``text`` is not exactly such a spelling
    (one spelling per token: no padding, no stray bits)."""
    try:
        raw = text.encode("ascii")
        data = base64.b64decode(raw + b"=" * (-len(raw) % 4), altchars=b"-_", validate=True)
    except (UnicodeEncodeError, binascii.Error, ValueError):
        return None
    return data if b64url(data) == text else None


def seal_token(version: str, domain: bytes, body: bytes, key: bytes) -> str:
    """``body`` sealed under ``key`` for ``domain``: ``<version>.<body>.<mac>``."""
    return f"{version}.{b64url(body)}.{b64url(_token_mac(domain, body, key))}"


def opened_token(token: object, version: str, domain: bytes, key: bytes,
                 max_chars: int) -> bytes | None:
    """The body ``token`` seals, when ``seal_token`` made it with these ``version``, ``domain``
    and ``key`` (None for anything else: too long, malformed, another version, forged)."""
    if not isinstance(token, str) or len(token) > max_chars:
        return None
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != version:
        return None
    body, mac = unb64url(parts[1]), unb64url(parts[2])
    if body is None or mac is None \
            or not hmac.compare_digest(mac, _token_mac(domain, body, key)):
        return None
    return body


def _token_mac(domain: bytes, body: bytes, key: bytes) -> bytes:
    return hmac.new(key, domain + body, hashlib.sha256).digest()
