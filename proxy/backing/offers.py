"""What the backing catalog offers: its advertised endpoints and its default ``{prefix}``.

Read from the backing's ``GET /v1/config`` (its ``endpoints``; the REST spec's default set when
it lists none) and re-read every ``refresh_seconds``. icegov forwards an endpoint only if the
backing advertises it: a catalog that routes loosely must never receive a request it did not
promise to understand (a ``POST .../plan`` executed as a table update, say).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx

from proxy.errors import BackingUnavailable

DEFAULT_ENDPOINTS: frozenset[str] = frozenset({
    "GET /v1/{prefix}/namespaces",
    "POST /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "DELETE /v1/{prefix}/namespaces/{namespace}",
    "POST /v1/{prefix}/namespaces/{namespace}/properties",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "POST /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/tables/rename",
    "POST /v1/{prefix}/namespaces/{namespace}/register",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/metrics",
    "POST /v1/{prefix}/transactions/commit",
})
"""What a client may assume of a catalog whose config lists no ``endpoints`` (the Java client's
defaults: namespaces, tables, metrics and transactions; no HEAD, views or planning)."""

CONFIG_PATH = b"/v1/config"

Fetch = Callable[[bytes, bytes, tuple[tuple[bytes, bytes], ...]], Awaitable[httpx.Response]]


@dataclass(frozen=True)
class Offer:
    """The backing's endpoints (as ``"METHOD /v1/{prefix}/..."``) and its default prefix."""

    endpoints: frozenset[str]
    prefix: str | None
    fetched_at: float

    def serves(self, spec: str) -> bool:
        return spec in self.endpoints


def parse_offer(config: object, now: float) -> Offer:
    """The offer in a ``ConfigResponse`` body (malformed parts count as absent)."""
    if not isinstance(config, dict):
        raise BackingUnavailable("backing catalog config is not a JSON object")
    listed = config.get("endpoints")
    endpoints = (frozenset(e for e in listed if isinstance(e, str))
                 if isinstance(listed, list) else DEFAULT_ENDPOINTS)
    prefix = None
    for part in ("defaults", "overrides"):
        section = config.get(part)
        if isinstance(section, dict) and isinstance(section.get("prefix"), str):
            prefix = section["prefix"]
    return Offer(endpoints, prefix, now)


def config_in(response: httpx.Response) -> object:
    """The parsed body of the backing's config answer; ``BackingUnavailable`` unless it is a
    200 with JSON (``parse_offer`` then requires an object)."""
    if response.status_code != 200:
        raise BackingUnavailable(f"backing catalog config answered {response.status_code}; "
                                 "its endpoints are unknown")
    try:
        return json.loads(response.content)
    except (ValueError, RecursionError) as exc:
        raise BackingUnavailable("backing catalog config is not JSON") from exc


class BackingOffers:
    """The backing's current offer, fetched on first use and refreshed periodically."""

    def __init__(self, fetch: Fetch, refresh_seconds: float) -> None:
        self._fetch = fetch
        self._refresh = refresh_seconds
        self._offer: Offer | None = None

    @property
    def known(self) -> Offer | None:
        """The last offer read, if any (no I/O)."""
        return self._offer

    async def current(self, headers: tuple[tuple[bytes, bytes], ...]) -> Offer:
        """The offer, re-read when older than the refresh interval (failures are not cached)."""
        now = time.monotonic()
        offer = self._offer
        if offer is not None and now - offer.fetched_at < self._refresh:
            return offer
        response = await self._fetch(CONFIG_PATH, b"", headers)
        if response.status_code != 200 and offer is not None:
            return offer
        return self.learn(config_in(response))

    @staticmethod
    def parse(config: object) -> Offer:
        """The offer in a config body, without recording it (a config for another catalog)."""
        return parse_offer(config, time.monotonic())

    def learn(self, config: object) -> Offer:
        """Record the offer in a (parsed) config icegov has just read, e.g. for a caller."""
        self._offer = parse_offer(config, time.monotonic())
        return self._offer
