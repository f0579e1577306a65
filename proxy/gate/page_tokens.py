"""Listing page tokens sealed by icegov, so a backing's token never reaches a client.

A backing catalog's ``next-page-token`` may say what the caller may not know: the embedded
catalog's is the last name of the page, hidden entries included; others count entries. icegov
hands the caller the backing's token encrypted and authenticated (AES-GCM) under a key derived
from the plan-task key (shared by replicas and workers), bound to the caller, the catalog and
the listing's path; it opens the token again on the next request. A token that does not open
(forged, edited, another caller's or another listing's) is 400.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from proxy.errors import BadRequest

PREFIX = "icg1."
MAX_TOKEN_CHARS = 16_384
_NONCE_BYTES = 12
_BLOCK = 256  # sealed tokens' plaintext is padded to a multiple of this: lengths tell nothing


class PageTokens:
    """Seals and opens page tokens under one key."""

    def __init__(self, secret: bytes) -> None:
        key = hmac.new(secret, b"icegov listing page tokens v1", hashlib.sha256).digest()
        self._aead = AESGCM(key)

    def seal(self, backing_token: str, binding: str) -> str:
        """The token to hand the caller for ``backing_token``, bound to ``binding``."""
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, _padded(backing_token.encode("utf-8")),
                                    binding.encode())
        return PREFIX + _encoded(nonce + sealed)

    def open(self, token: str, binding: str) -> str:
        """The backing's token inside ``token``; 400 when it was not sealed for ``binding``."""
        invalid = BadRequest("invalid pageToken")
        if not token.startswith(PREFIX) or len(token) > MAX_TOKEN_CHARS:
            raise invalid
        body = token[len(PREFIX):]
        try:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            if _encoded(raw) != body:  # one spelling per token: spare bits are not a second
                raise ValueError("not canonical")
            plain = self._aead.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], binding.encode())
            return _unpadded(plain).decode("utf-8")
        except (binascii.Error, ValueError, InvalidTag, UnicodeDecodeError) as exc:
            raise invalid from exc


def _encoded(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _padded(token: bytes) -> bytes:
    """``token`` behind its 2-byte length, zero-padded to a multiple of ``_BLOCK``."""
    if len(token) > 0xFFFF:
        raise BadRequest("the backing catalog's page token is too long")
    body = len(token).to_bytes(2, "big") + token
    return body + b"\0" * (-len(body) % _BLOCK)


def _unpadded(plain: bytes) -> bytes:
    size = int.from_bytes(plain[:2], "big")
    if len(plain) < 2 + size:
        raise ValueError("padding")
    return plain[2:2 + size]
