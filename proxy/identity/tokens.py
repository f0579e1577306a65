"""icegov's own access tokens: short-lived HS256 JWTs it issues and verifies itself.

Claims: ``sub`` (principal name), ``roles``, ``iss``, ``aud``, ``iat``, ``exp``, ``jti``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jwt

from proxy.governance import Principal
from proxy.identity.errors import TokenRejected, rejection

ALGORITHM = "HS256"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
_REQUIRED = ["sub", "iss", "aud", "iat", "exp"]


@dataclass(frozen=True)
class IssuedToken:
    """A freshly signed token and its lifetime in seconds."""

    token: str
    expires_in: int


@dataclass(frozen=True)
class VerifiedToken:
    """Whom a valid token names, and when it stops being valid (epoch seconds)."""

    principal: Principal
    expires_at: float


class IcegovTokens:
    """Signs and verifies icegov-issued tokens with one HS256 key; ``clock`` (epoch seconds)
    is the time tokens are issued at and expire by (PyJWT still checks ``iat`` on the wall
    clock)."""

    def __init__(
        self, key: bytes, *, issuer: str, audience: str, lifetime_seconds: int,
        leeway_seconds: int = 0, clock: Callable[[], float] = time.time,
    ) -> None:
        self._key = key
        self._issuer = issuer
        self._audience = audience
        self._lifetime = lifetime_seconds
        self._leeway = leeway_seconds
        self._clock = clock

    def issue(self, principal: Principal) -> IssuedToken:
        """A new token for ``principal``, valid for the configured lifetime."""
        now = int(self._clock())
        claims = {
            "sub": principal.name, "roles": list(principal.roles), "iss": self._issuer,
            "aud": self._audience, "iat": now, "exp": now + self._lifetime,
            "jti": uuid.uuid4().hex,
        }
        return IssuedToken(jwt.encode(claims, self._key, algorithm=ALGORITHM), self._lifetime)

    def verify(self, token: str, *, allow_expired: bool = False) -> VerifiedToken:
        """The principal a token names, or ``TokenRejected`` saying why not.

        ``allow_expired`` skips only the expiry check (the token exchange uses it when the
        client also proves itself with its secret); signature, issuer and audience still count.
        """
        try:
            claims = jwt.decode(
                token, self._key, algorithms=[ALGORITHM], audience=self._audience,
                issuer=self._issuer, leeway=self._leeway,
                options={"require": _REQUIRED, "verify_exp": False},  # on our clock, below
            )
        except jwt.PyJWTError as exc:
            raise rejection(exc) from None
        expires_at = _expiry(claims)
        if not allow_expired and expires_at <= self._clock() - self._leeway:
            raise TokenRejected("token has expired")
        return VerifiedToken(Principal(claims["sub"], _roles(claims), source="token"),
                             expires_at)


def _expiry(claims: dict[str, Any]) -> float:
    """The ``exp`` claim (present: ``decode`` requires it), read as PyJWT reads it."""
    try:
        return float(int(claims["exp"]))
    except (ValueError, TypeError, OverflowError):
        raise TokenRejected("token is malformed") from None


def _roles(claims: dict[str, Any]) -> tuple[str, ...]:
    roles = claims.get("roles", [])
    if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
        raise TokenRejected("token 'roles' claim is not a list of names")
    return tuple(roles)
