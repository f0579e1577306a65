"""Bearer tokens from an external OIDC issuer, checked against its published keys."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jwt

from proxy.governance import Principal
from proxy.identity.errors import TokenRejected, rejection
from proxy.identity.jwks import JwksKeys
from proxy.identity.tokens import VerifiedToken

MAX_PRINCIPAL_CHARS = 256
"""The longest principal name a token may carry (stores keep names in bounded columns)."""


class OidcTokens:
    """Verifies an OIDC issuer's JWTs: signature, ``iss``, ``aud``, ``exp``; maps claims.

    The principal's name comes from ``name_claim`` and its roles from ``groups_claim`` (a list
    of names, or one space-separated string). Either claim may be a dotted path into nested
    objects (``realm_access.roles``) when no top-level claim has that exact name.
    """

    def __init__(
        self, keys: JwksKeys, *, issuer: str, audience: str, algorithms: Sequence[str],
        name_claim: str = "sub", groups_claim: str = "groups", leeway_seconds: int = 0,
    ) -> None:
        self._keys = keys
        self._issuer = issuer
        self._audience = audience
        self._algorithms = tuple(algorithms)
        self._name_claim = name_claim
        self._groups_claim = groups_claim
        self._leeway = leeway_seconds

    def accepts(self, algorithm: str) -> bool:
        """True if tokens signed with ``algorithm`` are this issuer's to check."""
        return algorithm in self._algorithms

    def verify(self, token: str, header: dict[str, Any]) -> VerifiedToken:
        """The principal an OIDC token names, or ``TokenRejected`` saying why not."""
        algorithm = header.get("alg")
        if not isinstance(algorithm, str) or not self.accepts(algorithm):
            raise TokenRejected("token signing algorithm is not accepted")
        kid = header.get("kid")
        key = self._keys.key_for(kid if isinstance(kid, str) else None, algorithm)
        try:
            claims = jwt.decode(
                token, key, algorithms=[algorithm], audience=self._audience, issuer=self._issuer,
                leeway=self._leeway, options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.PyJWTError as exc:
            raise rejection(exc) from None
        principal = Principal(self._name(claims), self._groups(claims), source="oidc")
        return VerifiedToken(principal, float(claims["exp"]))

    def _name(self, claims: dict[str, Any]) -> str:
        name = claim(claims, self._name_claim)
        if not isinstance(name, str) or not name:
            raise TokenRejected(f"token lacks the '{self._name_claim}' claim")
        if len(name) > MAX_PRINCIPAL_CHARS:
            raise TokenRejected(f"token '{self._name_claim}' claim is longer than "
                                f"{MAX_PRINCIPAL_CHARS} characters")
        return name

    def _groups(self, claims: dict[str, Any]) -> tuple[str, ...]:
        groups = claim(claims, self._groups_claim)
        if groups is None:
            return ()
        if isinstance(groups, str):
            return tuple(groups.split())
        if isinstance(groups, list) and all(isinstance(g, str) for g in groups):
            return tuple(groups)
        raise TokenRejected(f"token '{self._groups_claim}' claim is not a list of names")


def claim(claims: dict[str, Any], name: str) -> Any:
    """A claim by exact name, else by dotted path through nested objects; None if absent."""
    if name in claims:
        return claims[name]
    value: Any = claims
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value
