"""The token endpoint's wire format: form-encoded requests, Basic client auth, OAuth errors.

Errors here use the REST spec's ``OAuthError`` shape ``{"error", "error_description"}``, not the
Iceberg ErrorModel: the Java client parses this form at the token endpoint and maps ``error``
(``invalid_client`` → NotAuthorizedException, the others → BadRequestException).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qsl

from starlette.responses import JSONResponse

ErrorCode = Literal[
    "invalid_request", "invalid_client", "invalid_grant", "unauthorized_client",
    "unsupported_grant_type", "invalid_scope",
]
NO_STORE = {"cache-control": "no-store", "pragma": "no-cache"}
FORM_TYPE = "application/x-www-form-urlencoded"
_MAX_FIELDS = 64


class OAuthError(Exception):
    """A refused token request, answered as an OAuthError body."""

    def __init__(self, error: ErrorCode, description: str, status: int = 400) -> None:
        super().__init__(f"{error}: {description}")
        self.error = error
        self.description = description
        self.status = status

    def response(self) -> JSONResponse:
        """The HTTP answer: OAuthError JSON, never cached; 401s name the Basic scheme."""
        headers = dict(NO_STORE)
        if self.status == 401:
            headers["www-authenticate"] = 'Basic realm="icegov"'
        body = {"error": self.error, "error_description": self.description}
        return JSONResponse(body, status_code=self.status, headers=headers)


def invalid_client(description: str) -> OAuthError:
    """Client authentication failed (401)."""
    return OAuthError("invalid_client", description, 401)


@dataclass(frozen=True)
class ClientCredentials:
    """A client id and secret, from the form or from HTTP Basic."""

    client_id: str
    secret: str


def parse_form(body: bytes, content_type: bytes | None) -> dict[str, str]:
    """The request's parameters; each may appear once (RFC 6749 3.2)."""
    media = (content_type or b"").split(b";")[0].strip().decode("latin-1").lower()
    if media != FORM_TYPE:
        raise OAuthError("invalid_request", f"token requests must be {FORM_TYPE}")
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True,
                          max_num_fields=_MAX_FIELDS, strict_parsing=False)
    except (UnicodeDecodeError, ValueError):
        raise OAuthError("invalid_request", "the form body cannot be parsed") from None
    form: dict[str, str] = {}
    for name, value in pairs:
        if name in form:
            raise OAuthError("invalid_request", f"parameter '{name}' appears more than once")
        form[name] = value
    return form


def client_credentials(
    form: Mapping[str, str], authorization: bytes | None,
) -> ClientCredentials | None:
    """The client's credentials from HTTP Basic or the form (agreeing, if both); None if none."""
    basic = _basic(authorization)
    posted = _posted(form)
    if basic is not None and posted is not None and basic != posted:
        raise OAuthError("invalid_request", "client credentials differ between Basic and form")
    return basic or posted


def _posted(form: Mapping[str, str]) -> ClientCredentials | None:
    secret = form.get("client_secret")
    if secret is None:
        return None
    client_id = form.get("client_id")
    if not client_id:
        raise invalid_client("client_id is required (use credential=<client_id>:<secret>)")
    return ClientCredentials(client_id, secret)


def _basic(authorization: bytes | None) -> ClientCredentials | None:
    if authorization is None:
        return None
    scheme, _, encoded = authorization.decode("latin-1").strip().partition(" ")
    if scheme.lower() != "basic":
        return None  # a Bearer header here is the client's current token, not client auth
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise invalid_client("Basic credentials are malformed") from None
    client_id, colon, secret = decoded.partition(":")
    if not colon or not client_id:
        raise invalid_client("Basic credentials must be <client_id>:<secret>")
    return ClientCredentials(client_id, secret)
