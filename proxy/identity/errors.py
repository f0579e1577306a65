"""Why a bearer token was refused, in words safe to send back (never the token itself)."""

from __future__ import annotations

import jwt


class TokenRejected(Exception):
    """A token that does not authenticate anyone; ``reason`` is short and safe to show."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


_REASONS: tuple[tuple[type[jwt.PyJWTError], str], ...] = (
    (jwt.ExpiredSignatureError, "token has expired"),
    (jwt.InvalidAudienceError, "token audience is not accepted"),
    (jwt.InvalidIssuerError, "token issuer is not accepted"),
    (jwt.InvalidSignatureError, "token signature is invalid"),
    (jwt.ImmatureSignatureError, "token is not valid yet"),
    (jwt.InvalidIssuedAtError, "token is not valid yet"),
    (jwt.InvalidAlgorithmError, "token signing algorithm is not accepted"),
    (jwt.DecodeError, "token is malformed"),
)


def rejection(exc: jwt.PyJWTError) -> TokenRejected:
    """The refusal for a PyJWT error, worded without echoing any part of the token."""
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return TokenRejected(f"token lacks the '{exc.claim}' claim")
    for kind, reason in _REASONS:
        if isinstance(exc, kind):
            return TokenRejected(reason)
    return TokenRejected("token is invalid")
