"""An OIDC issuer's public signing keys (JWKS), from a file or a URL, parsed once and cached.

A file is read at start-up. A URL is fetched on first use (or ``prefetch``), again after
``cache_seconds``, and when a token names an unknown ``kid`` — but at most once per
``MIN_REFETCH_SECONDS``, so tokens with made-up key ids cannot hammer the issuer. A failed fetch
keeps the keys already known. ``key_for`` never fetches: when it would have to, it raises
``KeysStale``, whose ``refresh`` the caller runs where blocking is harmless (the authenticator:
in a worker thread, never on the event loop) before asking again; refreshes are serialized, and
one that finds the keys already refreshed fetches nothing.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import jwt
import structlog

from proxy.identity.errors import TokenRejected
from proxy.identity.settings import IdentityConfigError

log = structlog.get_logger("icegov.identity")

MIN_REFETCH_SECONDS = 30.0
Fetch = Callable[[str, float], bytes]


def http_fetch(url: str, timeout: float) -> bytes:
    """GET ``url`` and return its body (no proxies from the environment, no redirects)."""
    with httpx.Client(timeout=timeout, trust_env=False) as client:
        response = client.get(url, headers={"accept": "application/json"})
        response.raise_for_status()
        return response.content


def parse_jwks(data: bytes | str) -> list[dict[str, Any]]:
    """The signing keys of a JWKS document (``ValueError``/``PyJWKSetError`` if none usable)."""
    document = json.loads(data)
    if not isinstance(document, dict):
        raise ValueError("a JWKS document is a JSON object with a 'keys' list")
    jwt.PyJWKSet.from_dict(document)  # PyJWKSetError when no key is usable
    return [k for k in document["keys"] if isinstance(k, dict) and k.get("use", "sig") == "sig"]


class KeysStale(Exception):
    """The keys must be fetched before this token can be checked: run ``refresh`` (blocking),
    then ask again."""

    def __init__(self, keys: JwksKeys, kid: str | None) -> None:
        super().__init__("the issuer's keys must be fetched first")
        self._keys = keys
        self._kid = kid

    def refresh(self) -> None:
        """Fetch the keys, unless another refresh made that unnecessary meanwhile."""
        self._keys.refresh_for(self._kid)


class JwksKeys:
    """Finds the public key that should have signed a token, by ``kid`` and algorithm."""

    def __init__(
        self, *, file: Path | None = None, url: str | None = None, cache_seconds: float = 300,
        timeout: float = 5.0, fetch: Fetch = http_fetch,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if (file is None) == (url is None):
            raise IdentityConfigError("JWKS needs exactly one of a file and a URL")
        self._url = url
        self._cache_seconds = cache_seconds
        self._timeout = timeout
        self._fetch = fetch
        self._clock = clock
        self._jwks: list[dict[str, Any]] = []
        self._loaded_at = float("-inf")
        self._attempted_at = float("-inf")
        self._parsed: dict[tuple[str | None, str], jwt.PyJWK] = {}
        self._refreshing = threading.Lock()
        if file is not None:
            self._jwks = _read_file(file)

    def prefetch(self) -> None:
        """Fetch the URL's keys now (at start-up), instead of on the first token."""
        if self._url is not None:
            self._refresh()

    def key_for(self, kid: str | None, algorithm: str) -> jwt.PyJWK:
        """The key for a token's ``kid`` and ``alg`` header, ``TokenRejected``, or
        ``KeysStale`` when the keys must be fetched first."""
        if self._due(kid):
            raise KeysStale(self, kid)
        data = self._find(kid)
        if data is None:
            raise TokenRejected("token signing key is not one of the issuer's keys")
        return self._parse(kid, algorithm, data)

    def refresh_for(self, kid: str | None) -> None:
        """Fetch the URL's keys if a token naming ``kid`` still needs them (blocking)."""
        with self._refreshing:
            if self._due(kid):
                self._refresh()

    def _due(self, kid: str | None) -> bool:
        """Whether the keys must be fetched before a token naming ``kid`` is checked."""
        if self._url is None:
            return False
        if self._clock() - self._loaded_at > self._cache_seconds:
            return True
        return self._find(kid) is None and self._may_refetch()

    def _find(self, kid: str | None) -> dict[str, Any] | None:
        if kid is None:
            return self._jwks[0] if len(self._jwks) == 1 else None
        return next((k for k in self._jwks if k.get("kid") == kid), None)

    def _parse(self, kid: str | None, algorithm: str, data: dict[str, Any]) -> jwt.PyJWK:
        cached = self._parsed.get((kid, algorithm))
        if cached is not None:
            return cached
        if data.get("alg", algorithm) != algorithm:
            raise TokenRejected("token signing algorithm does not match its key")
        try:
            key = jwt.PyJWK(data, algorithm=algorithm)
        except jwt.PyJWTError:
            raise TokenRejected("token signing key cannot be used with its algorithm") from None
        self._parsed[(kid, algorithm)] = key
        return key

    def _may_refetch(self) -> bool:
        return self._clock() - self._attempted_at >= MIN_REFETCH_SECONDS

    def _refresh(self) -> None:
        assert self._url is not None
        self._attempted_at = self._clock()
        try:
            jwks = parse_jwks(self._fetch(self._url, self._timeout))
        except (httpx.HTTPError, ValueError, jwt.PyJWTError) as exc:
            log.error("OIDC keys not fetched; keeping the known ones", url=self._url,
                      error=str(exc), known=len(self._jwks))
            self._loaded_at = self._attempted_at - self._cache_seconds + MIN_REFETCH_SECONDS
            return
        self._jwks, self._parsed = jwks, {}
        self._loaded_at = self._attempted_at


def _read_file(path: Path) -> list[dict[str, Any]]:
    try:
        return parse_jwks(path.read_bytes())
    except OSError as exc:
        raise IdentityConfigError(f"OIDC JWKS file {path} cannot be read: {exc}") from None
    except (ValueError, jwt.PyJWTError) as exc:
        raise IdentityConfigError(f"OIDC JWKS file {path} is not a usable JWKS: {exc}") from None
