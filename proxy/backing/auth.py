"""How icegov authenticates itself to the backing catalog.

Three strategies behind one seam, ``BackingAuth.authorization``: none (the caller's own
``Authorization`` header passes through), a static bearer token, or OAuth2 client credentials that
icegov exchanges at the backing catalog's token endpoint and refreshes before they expire.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Protocol

import httpx

from proxy.errors import BackingUnavailable
from proxy.settings import Settings

REFRESH_MARGIN_SECONDS = 60.0
DEFAULT_TOKEN_LIFETIME_SECONDS = 3600.0


class BackingAuth(Protocol):
    """Supplies the ``Authorization`` header icegov sends to the backing catalog."""

    @property
    def replaces_caller_credentials(self) -> bool:
        """True if the caller's own ``Authorization`` header must not reach the backing."""

    async def authorization(self) -> str | None:
        """The header value, or None to send none of icegov's own."""

    def invalidate(self) -> None:
        """Forget a cached credential (the backing catalog answered 401)."""


@dataclass
class PassThroughAuth:
    """No credential of icegov's own; the caller's header is forwarded only if configured."""

    forward_caller_token: bool = False

    @property
    def replaces_caller_credentials(self) -> bool:
        return not self.forward_caller_token

    async def authorization(self) -> str | None:
        return None

    def invalidate(self) -> None:
        return None


@dataclass
class StaticTokenAuth:
    """A fixed bearer token from settings."""

    token: str

    @property
    def replaces_caller_credentials(self) -> bool:
        return True

    async def authorization(self) -> str | None:
        return f"Bearer {self.token}"

    def invalidate(self) -> None:
        return None


class ClientCredentialsAuth:
    """OAuth2 client credentials, exchanged once and refreshed shortly before expiry."""

    @property
    def replaces_caller_credentials(self) -> bool:
        return True

    def __init__(
        self, transport: httpx.AsyncBaseTransport, token_url: str, client_id: str,
        client_secret: str, scope: str, timeout: httpx.Timeout,
    ) -> None:
        self._client = httpx.AsyncClient(transport=transport, timeout=timeout, trust_env=False)
        self._token_url = token_url
        self._form = {"grant_type": "client_credentials", "client_id": client_id,
                      "client_secret": client_secret, "scope": scope}
        self._token: str | None = None
        self._expires_at = 0.0
        self._lock = asyncio.Lock()

    async def authorization(self) -> str | None:
        if self._token is None or time.monotonic() >= self._expires_at:
            async with self._lock:
                if self._token is None or time.monotonic() >= self._expires_at:
                    await self._exchange()
        return f"Bearer {self._token}"

    def invalidate(self) -> None:
        self._token = None

    async def _exchange(self) -> None:
        try:
            response = await self._client.post(self._token_url, data=self._form)
        except httpx.TransportError as exc:
            raise BackingUnavailable(
                f"backing catalog token endpoint unreachable ({type(exc).__name__})") from exc
        if response.status_code != 200:
            raise BackingUnavailable(
                f"backing catalog refused icegov's client credentials ({response.status_code})")
        try:
            body = response.json()
            lifetime = float(body.get("expires_in", DEFAULT_TOKEN_LIFETIME_SECONDS))
            token = body["access_token"]
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise BackingUnavailable("backing catalog token endpoint answered no token") from exc
        if not isinstance(token, str) or not token or lifetime != lifetime:
            raise BackingUnavailable("backing catalog token endpoint answered no token")
        self._token = token
        self._expires_at = time.monotonic() + max(lifetime - REFRESH_MARGIN_SECONDS, lifetime / 2)


def backing_auth_from_settings(
    settings: Settings, transport: httpx.AsyncBaseTransport, base_url: str, timeout: httpx.Timeout,
) -> BackingAuth:
    """The backing-catalog credential strategy the settings ask for."""
    if settings.catalog_token is not None:
        return StaticTokenAuth(settings.catalog_token.get_secret_value())
    if settings.catalog_credential is not None:
        client_id, _, secret = settings.catalog_credential.get_secret_value().partition(":")
        token_url = settings.catalog_oauth_uri or f"{base_url.rstrip('/')}/v1/oauth/tokens"
        return ClientCredentialsAuth(transport, token_url, client_id, secret,
                                     settings.catalog_oauth_scope, timeout)
    return PassThroughAuth(settings.identity.pass_through_caller_token)
