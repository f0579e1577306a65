"""Who is calling: the bearer token on a request, verified, as a governance ``Principal``.

Order: icegov's own tokens (HS256, our key) first, then the external OIDC issuer's (asymmetric
algorithms only, so one kind can never be passed off as the other). No token at all means the
anonymous principal when one is configured, else 401. Every refusal is ``NotAuthorized`` with a
short reason that never repeats the token.

Revocation: an icegov token proves only *who* it was issued to. With a principals store (as
``build_identity`` sets it up), every request is judged by the principals file in force: a
principal removed from it gets 401 and its roles are the file's, not the token's. OIDC principals
are the issuer's to revoke (their tokens stand until they expire); anonymous callers are unaffected.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable

import jwt
from anyio import to_thread

from proxy.errors import NotAuthorized
from proxy.governance import Principal
from proxy.identity.errors import TokenRejected
from proxy.identity.jwks import KeysStale
from proxy.identity.oidc import OidcTokens
from proxy.identity.store import PrincipalStore
from proxy.identity.tokens import ALGORITHM, IcegovTokens, VerifiedToken

Headers = tuple[tuple[bytes, bytes], ...]
MAX_TOKEN_BYTES = 16 * 1024


class Authenticator:
    """Turns a request's headers into the principal making it."""

    def __init__(
        self, tokens: IcegovTokens, oidc: OidcTokens | None = None, *,
        anonymous: Principal | None = None, cache_size: int = 4096, leeway_seconds: int = 0,
        clock: Callable[[], float] = time.time, principals: PrincipalStore | None = None,
    ) -> None:
        self._tokens = tokens
        self._principals = principals
        self._reserved: Callable[[str], bool] = lambda _: False
        self._oidc = oidc
        self._anonymous = anonymous
        self._cache = VerifiedTokenCache(cache_size, clock)
        self._leeway = leeway_seconds

    def authenticate(self, headers: Headers) -> Principal:
        """The caller's principal, or ``NotAuthorized`` (401) saying what is wrong; fetches
        the OIDC issuer's keys in this thread when they are due."""
        try:
            return self._authenticate(headers)
        except KeysStale as stale:
            stale.refresh()
        return self._after_refresh(headers)

    async def authenticate_async(self, headers: Headers) -> Principal:
        """``authenticate`` for the event loop: keys that are due are fetched in a worker
        thread, so a slow issuer (or tokens naming made-up keys) never stalls other requests."""
        try:
            return self._authenticate(headers)
        except KeysStale as stale:
            await to_thread.run_sync(stale.refresh)
        return self._after_refresh(headers)

    def _after_refresh(self, headers: Headers) -> Principal:
        try:
            return self._authenticate(headers)
        except KeysStale:  # refreshed an instant ago and due again: the issuer is not usable
            raise NotAuthorized("bearer token signing keys are unavailable") from None

    def _authenticate(self, headers: Headers) -> Principal:
        token = bearer_token(headers)
        if token is None:
            if self._anonymous is not None:
                return self._anonymous
            raise NotAuthorized("authentication required: send 'Authorization: Bearer <token>'")
        principal = self._cache.get(token)
        if principal is None:
            try:
                verified = self.verify(token)
            except TokenRejected as exc:
                raise NotAuthorized(f"bearer {exc.reason}") from None
            self._cache.put(token, verified.principal, verified.expires_at + self._leeway)
            principal = verified.principal
        return self._current(principal)

    def reserve(self, names: Callable[[str], bool]) -> None:
        """Names no OIDC user may take besides the principals file's (the policy's roles)."""
        self._reserved = names

    def _current(self, principal: Principal) -> Principal:
        """An icegov token's principal as the principals file says now (401 once removed);
        an OIDC token naming a principal or role of that file is 401: the issuer's names and
        icegov's share the policy's subjects, so an issuer user called ``admin`` is never
        icegov's, nor is one called like a ``reserve``d name (a role of the policy)."""
        if principal.source == "oidc":
            if self._reserved(principal.name) or (
                    self._principals is not None and self._principals.names(principal.name)):
                raise NotAuthorized("bearer token names a principal or role of icegov's own; "
                                    "the issuer's users must have other names")
            return principal
        if self._principals is None or principal.source == "anonymous":
            return principal
        current = self._principals.principal(principal.name)
        if current is None:
            raise NotAuthorized("bearer token's principal no longer exists")
        return current

    def verify(self, token: str) -> VerifiedToken:
        """Check one token (no cache), raising ``TokenRejected`` with a safe reason."""
        if len(token) > MAX_TOKEN_BYTES:
            raise TokenRejected("token is too large")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise TokenRejected("token is malformed") from None
        algorithm = header.get("alg")
        if algorithm == ALGORITHM:
            return self._tokens.verify(token)
        if self._oidc is not None and isinstance(algorithm, str) and self._oidc.accepts(algorithm):
            return self._oidc.verify(token, header)
        raise TokenRejected("token signing algorithm is not accepted")


def bearer_token(headers: Headers) -> str | None:
    """The bearer token in ``Authorization``; None without the header; 401 for anything else."""
    values = [value for key, value in headers if key.lower() == b"authorization"]
    if not values:
        return None
    if len(values) > 1:
        raise NotAuthorized("more than one Authorization header")
    scheme, _, token = values[0].decode("latin-1").strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer":
        raise NotAuthorized("Authorization must be a Bearer token")
    if token.split() != [token]:  # empty, or whitespace inside (str.split: any whitespace)
        raise NotAuthorized("bearer token is malformed")
    return token


class VerifiedTokenCache:
    """Tokens already verified, by SHA-256 of the token, until they expire (bounded, LRU)."""

    def __init__(self, size: int, clock: Callable[[], float] = time.time) -> None:
        self._size = size
        self._clock = clock
        self._entries: OrderedDict[bytes, tuple[Principal, float]] = OrderedDict()

    def get(self, token: str) -> Principal | None:
        """The principal of a still-valid cached token, else None."""
        key = _digest(token)
        entry = self._entries.get(key)
        if entry is None:
            return None
        principal, valid_until = entry
        if self._clock() >= valid_until:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return principal

    def put(self, token: str, principal: Principal, valid_until: float) -> None:
        """Remember a verified token until ``valid_until`` (epoch seconds)."""
        if self._size <= 0:
            return
        key = _digest(token)
        self._entries[key] = (principal, valid_until)
        self._entries.move_to_end(key)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
