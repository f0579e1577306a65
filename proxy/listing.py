"""Listings filtered to what the caller can see: namespaces and table/view identifiers."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

import httpx
from starlette.responses import Response

from proxy.admission import Admission
from proxy.backing.forward import Forwarder, relayed_answer
from proxy.errors import BackingUnavailable
from proxy.governance import Authorizer, Principal
from proxy.inbound import InboundRequest
from proxy.page_tokens import PageTokens
from proxy.resources import Resource


class ListingHandlers:
    """The backing's listing with only the entries the principal can see; its page tokens
    reach the caller sealed (``proxy.page_tokens``), never as the backing wrote them."""

    def __init__(self, forwarder: Forwarder, authorizer: Authorizer,
                 tokens: PageTokens) -> None:
        self._forwarder = forwarder
        self._authorizer = authorizer
        self._tokens = tokens

    async def list_namespaces(self, inbound: InboundRequest, admission: Admission) -> Response:
        return await self._filtered(inbound, admission, "namespaces", _namespace)

    async def list_tables(self, inbound: InboundRequest, admission: Admission) -> Response:
        return await self._filtered(inbound, admission, "identifiers", _table)

    list_views = list_tables

    async def _filtered(self, inbound: InboundRequest, admission: Admission, key: str,
                        resource_of: Any) -> Response:
        principal = admission.principal
        if principal is None:  # listings need a caller; nothing to filter without one
            upstream = await self._forwarder.exchange(inbound)
            return relayed_answer(upstream, upstream.content)
        binding = _binding(principal, admission.catalog, inbound)
        upstream, body = await self._first_page(inbound, binding, key)
        if body is None:
            return relayed_answer(upstream, upstream.content)
        visible = self._visible_entries(principal, admission.catalog, body[key], resource_of)
        pages, tokens = 1, {inbound.query("pageToken")}
        while (body[key] and not visible and body.get("next-page-token")
               and str(body["next-page-token"]) not in tokens and pages < MAX_HIDDEN_PAGES):
            # a page of nothing but hidden entries would tell that they exist: skip past it
            tokens.add(str(body["next-page-token"]))
            query = _with_page_token(inbound.query_string, str(body["next-page-token"]))
            following = await self._forwarder.fetch(inbound.raw_path, query, inbound.headers)
            if following.status_code != 200:
                return relayed_answer(following, following.content)
            body, pages = _listing(following.content, key), pages + 1
            visible = self._visible_entries(principal, admission.catalog, body[key], resource_of)
        body[key] = visible
        if body.get("next-page-token"):
            body["next-page-token"] = self._tokens.seal(str(body["next-page-token"]), binding)
        return relayed_answer(upstream, json.dumps(body, separators=(",", ":")).encode())

    async def _first_page(self, inbound: InboundRequest, binding: str, key: str
                          ) -> tuple[httpx.Response, dict[str, Any] | None]:
        """The backing's answer to the caller's request, its sealed page token opened; and
        its listing when it is one (200)."""
        sealed = inbound.query("pageToken")  # 400 when repeated: the backing reads one of them
        if sealed:
            query = _with_page_token(inbound.query_string, self._tokens.open(sealed, binding))
            upstream = await self._forwarder.fetch(inbound.raw_path, query, inbound.headers)
        else:
            upstream = await self._forwarder.exchange(inbound)
        if upstream.status_code != 200:
            return upstream, None
        return upstream, _listing(upstream.content, key)

    def _visible_entries(self, principal: Principal, catalog: str, entries: list[Any],
                         resource_of: Any) -> list[Any]:
        return [e for e in entries if self._visible(principal, resource_of(catalog, e))]

    def _visible(self, principal: Principal, resource: Resource | None) -> bool:
        return resource is not None and self._authorizer.can_see(principal, resource)


MAX_HIDDEN_PAGES = 50
"""Pages of only hidden entries skipped in one listing call before answering an empty page."""


def _listing(content: bytes, key: str) -> dict[str, Any]:
    try:
        body = json.loads(content)
        entries = body[key]
    except (ValueError, TypeError, KeyError) as exc:
        raise BackingUnavailable("the backing catalog's listing is unreadable") from exc
    if not isinstance(entries, list):
        raise BackingUnavailable("the backing catalog's listing is unreadable")
    return dict(body)


def _binding(principal: Principal, catalog: str, inbound: InboundRequest) -> str:
    """What a page token is sealed to: the caller, the catalog and the listing (its path and
    every query parameter but the page's own)."""
    listing = sorted((k, v) for k, v in parse_qsl(inbound.query_string.decode("latin-1"),
                                                  keep_blank_values=True)
                     if k not in ("pageToken", "pageSize"))
    return json.dumps([principal.name, catalog, inbound.raw_path.decode("latin-1"), listing])


def _with_page_token(query: bytes, token: str) -> bytes:
    pairs = [(k, v) for k, v in parse_qsl(query.decode("latin-1"), keep_blank_values=True)
             if k != "pageToken"]
    return urlencode([*pairs, ("pageToken", token)], quote_via=quote).encode("ascii")


def _namespace(catalog: str, entry: Any) -> Resource | None:
    if not isinstance(entry, list) or not entry or not all(isinstance(x, str) for x in entry):
        return None
    return Resource(catalog, tuple(entry))


def _table(catalog: str, entry: Any) -> Resource | None:
    if not isinstance(entry, dict):
        return None
    namespace = _namespace(catalog, entry.get("namespace"))
    name = entry.get("name")
    if namespace is None or not isinstance(name, str):
        return None
    return namespace.table_named(name)
