"""``POST /v1/oauth/tokens``: icegov's token endpoint, as the Iceberg Java client uses it.

Two grants:

- ``client_credentials``: ``client_id``/``client_secret`` in the form (what Spark's
  ``credential=id:secret`` sends) or HTTP Basic, checked against the principals file.
- RFC 8693 token exchange with ``subject_token`` an icegov access token: a fresh token for the same
  principal, with its roles as the principals file says now (a principal removed from the file
  can no longer refresh). The Java client refreshes this way, sending its current token as
  Bearer; when that token has already expired it adds its credential as HTTP Basic, and then an
  expired subject token is accepted if it is otherwise genuine and names that client.

Tokens from an external OIDC issuer are not exchanged: they are refreshed at their issuer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import structlog
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, Response

from proxy.governance import Principal
from proxy.identity.errors import TokenRejected
from proxy.identity.hashing import burn_time
from proxy.identity.oauth_form import (
    NO_STORE,
    ClientCredentials,
    OAuthError,
    client_credentials,
    invalid_client,
    parse_form,
)
from proxy.identity.principals import PrincipalEntry
from proxy.identity.store import PrincipalStore
from proxy.identity.tokens import ACCESS_TOKEN_TYPE, IcegovTokens, IssuedToken
from proxy.inbound import InboundRequest

log = structlog.get_logger("icegov.identity")

CLIENT_CREDENTIALS = "client_credentials"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
JWT_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:jwt"
EXCHANGEABLE_TYPES = frozenset({ACCESS_TOKEN_TYPE, JWT_TOKEN_TYPE})


class TokenEndpoint:
    """The token endpoint handler: ``await endpoint(inbound) -> Response``."""

    def __init__(self, tokens: IcegovTokens, principals: PrincipalStore) -> None:
        self._tokens = tokens
        self._principals = principals
        self._issued: Callable[[str], None] | None = None

    def on_issued(self, observe: Callable[[str], None]) -> None:
        """Call ``observe(grant_type)`` for each token issued (metrics)."""
        self._issued = observe

    async def __call__(self, request: InboundRequest) -> Response:
        grant = "?"
        try:
            form = parse_form(request.body, request.header(b"content-type"))
            grant = form.get("grant_type", "?")
            principal = await self._grant(form, request.header(b"authorization"))
        except OAuthError as exc:
            log.info("token refused", grant=grant, error=exc.error, reason=exc.description)
            return exc.response()
        log.info("token issued", grant=grant, principal=principal.name, roles=principal.roles)
        if self._issued is not None:
            self._issued(grant)
        return token_response(self._tokens.issue(principal))

    async def _grant(self, form: Mapping[str, str], authorization: bytes | None) -> Principal:
        grant = form.get("grant_type")
        credentials = client_credentials(form, authorization)
        if grant == CLIENT_CREDENTIALS:
            if credentials is None:
                raise invalid_client("client authentication required")
            return (await self._client(credentials)).principal()
        if grant == TOKEN_EXCHANGE:
            return await self._exchange(form, credentials)
        if not grant:
            raise OAuthError("invalid_request", "grant_type is required")
        raise OAuthError("unsupported_grant_type",
                         f"supported grants: {CLIENT_CREDENTIALS}, {TOKEN_EXCHANGE}")

    async def _exchange(
        self, form: Mapping[str, str], credentials: ClientCredentials | None,
    ) -> Principal:
        subject = _subject_token(form)
        if credentials is None:
            return self._current(self._subject_name(subject, allow_expired=False)).principal()
        entry = await self._client(credentials)
        if self._subject_name(subject, allow_expired=True) != entry.name:
            raise OAuthError("invalid_grant", "subject token belongs to another client", 401)
        return entry.principal()

    def _subject_name(self, subject: str, *, allow_expired: bool) -> str:
        try:
            return self._tokens.verify(subject, allow_expired=allow_expired).principal.name
        except TokenRejected as exc:
            raise OAuthError("invalid_grant", f"subject {exc.reason}", 401) from None

    def _current(self, name: str) -> PrincipalEntry:
        entry = self._principals.get(name)
        if entry is None:
            raise OAuthError("invalid_grant", "the token's principal no longer exists", 401)
        return entry

    async def _client(self, credentials: ClientCredentials) -> PrincipalEntry:
        """The principal whose secret this is; scrypt runs off the event loop."""
        entry = self._principals.get(credentials.client_id)
        if entry is None:
            await run_in_threadpool(burn_time)
        elif await run_in_threadpool(entry.verify, credentials.secret):
            return entry
        raise invalid_client("unknown client or wrong secret")


def _subject_token(form: Mapping[str, str]) -> str:
    subject = form.get("subject_token")
    if not subject:
        raise OAuthError("invalid_request", "subject_token is required")
    if form.get("subject_token_type") not in EXCHANGEABLE_TYPES:
        raise OAuthError("invalid_request", f"subject_token_type must be {ACCESS_TOKEN_TYPE}")
    if form.get("actor_token"):
        raise OAuthError("invalid_request", "actor tokens (delegation) are not supported")
    requested = form.get("requested_token_type")
    if requested and requested != ACCESS_TOKEN_TYPE:
        raise OAuthError("invalid_request", f"only {ACCESS_TOKEN_TYPE} tokens are issued")
    return subject


def token_response(issued: IssuedToken) -> JSONResponse:
    """The OAuthTokenResponse for a freshly issued token."""
    body = {
        "access_token": issued.token, "token_type": "bearer", "expires_in": issued.expires_in,
        "issued_token_type": ACCESS_TOKEN_TYPE,
    }
    return JSONResponse(body, headers=NO_STORE)
