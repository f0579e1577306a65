"""Listings filtered to what the caller can see: namespaces and table/view identifiers."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

import httpx
from starlette.responses import Response

from proxy.admission.admission import Admission
from proxy.admission.intent import MAX_PAGE_SIZE
from proxy.backing.forward import Forwarder, relayed_answer
from proxy.errors import BackingUnavailable, BadRequest
from proxy.gate.page_tokens import PageTokens
from proxy.governance import Authorizer, Principal
from proxy.inbound import InboundRequest
from proxy.resources import Resource


class ListingHandlers:
    """The backing's listing with only the entries the principal can see; its page tokens
    reach the caller sealed (``proxy.gate.page_tokens``), never as the backing wrote them."""

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
        start = self._start(inbound, binding)
        upstream = await self._page(inbound, start)
        if upstream.status_code != 200:
            return relayed_answer(upstream, upstream.content)
        body = _listing(upstream.content, key)
        page = _Page(start, _page_size(inbound) or max(len(body[key]), 1))
        visible = partial(self._visible, principal, admission.catalog, resource_of)
        read = _Read(start.token, body, READ_SIZE if _page_size(inbound) else None)
        if (failed := await self._read_into(inbound, page, read, key, visible)) is not None:
            return relayed_answer(failed, failed.content)
        if page.full and page.following is not None:  # a token must not tell that hidden
            probe = _Page(page.following, 1)            # entries follow: look for one more,
            failed = await self._read_into(                # with a page budget of its own
                inbound, probe, replace(read, pages=1), key, visible)
            if failed is None and not probe.full and probe.following is None:
                page.following = None
        answer = {**read.body, key: page.entries}
        if page.following is not None:
            answer["next-page-token"] = self._tokens.seal(page.following.sealed(), binding)
        elif "next-page-token" in answer:
            answer["next-page-token"] = None
        return relayed_answer(upstream, json.dumps(answer, separators=(",", ":")).encode())

    async def _read_into(self, inbound: InboundRequest, page: _Page, read: _Read, key: str,
                         visible: Callable[[Any], bool]) -> httpx.Response | None:
        """Take visible entries into ``page``, reading backing pages on from ``read`` (the last
        one read) until the page is full, the listing ends or ``MAX_PAGES_PER_ANSWER`` pages
        were read; the backing's answer when it failed, else None."""
        while page.following is not None:
            if page.following.token != read.token:
                if read.pages >= MAX_PAGES_PER_ANSWER:
                    return None
                upstream = await self._page(inbound, page.following)
                if upstream.status_code != 200:
                    return upstream
                read.token, read.body = page.following.token, _listing(upstream.content, key)
                read.pages += 1
            if page.take(read.body, key, visible, read.size):
                return None
        return None

    def _start(self, inbound: InboundRequest, binding: str) -> _Position:
        """Where the caller's page starts: its sealed token opened, else the first page."""
        sealed = inbound.query("pageToken")  # 400 when repeated: the backing reads one of them
        if not sealed:
            return _Position(None, 0, READ_SIZE if _page_size(inbound) else None)
        return _Position.opened(self._tokens.open(sealed, binding))

    async def _page(self, inbound: InboundRequest, at: _Position) -> httpx.Response:
        """The backing's page at ``at``, read at the position's own size (None: the caller's
        first page, unpaged, is its own request)."""
        paged = at.token is not None or bool(inbound.query("pageToken"))
        if not paged and at.size is None:
            return await self._forwarder.exchange(inbound)
        query = _backing_query(inbound.query_string, (at.token or "") if paged else None, at.size)
        return await self._forwarder.fetch(inbound.raw_path, query, inbound.headers)

    def _visible(self, principal: Principal, catalog: str, resource_of: Any,
                 entry: Any) -> bool:
        resource: Resource | None = resource_of(catalog, entry)
        return resource is not None and self._authorizer.can_see(principal, resource)


MAX_PAGES_PER_ANSWER = 50
"""Backing pages read to fill one answer (hidden entries are skipped, not counted) before
answering what was found so far."""

READ_SIZE = 1000
"""The pageSize icegov asks the backing for when the caller pages, whatever the caller's own:
a run of hidden entries costs a thousandth of a fetch each, so a page comes back short only
past ``MAX_PAGES_PER_ANSWER * READ_SIZE`` hidden entries in a row."""


@dataclass(frozen=True)
class _Position:
    """A place in the backing's listing: its page at ``token`` (None: the first page) read
    with ``size`` (None: the backing's own), past the first ``skip`` entries of that page.
    A position is always read again at its own size, so ``skip`` counts the same entries."""

    token: str | None
    skip: int
    size: int | None

    @classmethod
    def opened(cls, plain: str) -> _Position:
        """The position sealed in a page token (400 if it is not one: an older icegov's)."""
        try:
            token, skip, size = json.loads(plain)
        except (ValueError, TypeError) as exc:
            raise BadRequest("invalid pageToken") from exc
        if (not (token is None or isinstance(token, str)) or type(skip) is not int or skip < 0
                or not (size is None or (type(size) is int and 0 < size <= MAX_PAGE_SIZE))):
            raise BadRequest("invalid pageToken")
        return cls(token, skip, size)

    def sealed(self) -> str:
        return json.dumps([self.token, self.skip, self.size])


@dataclass
class _Read:
    """The backing page read last for one answer (``token``: where it was read), how many were
    read, and the size further pages are read at."""

    token: str | None
    body: dict[str, Any]
    size: int | None
    pages: int = 1


class _Page:
    """The caller's page being filled: ``size`` visible entries, or fewer only at the end, so
    a page's length never tells that hidden entries were left out."""

    def __init__(self, start: _Position, size: int) -> None:
        self.entries: list[Any] = []
        self.following: _Position | None = start
        self._size = size
        self._tokens_seen = {start.token}

    @property
    def full(self) -> bool:
        return len(self.entries) >= self._size

    def take(self, body: dict[str, Any], key: str, visible: Callable[[Any], bool],
             size: int | None) -> bool:
        """Take the visible entries of this backing page (``body``, at ``self.following``);
        True once the caller's page is full. ``following`` is then where the next one starts
        (a further backing page is read at ``size``)."""
        assert self.following is not None
        here, entries = self.following, body[key]
        for index in range(here.skip, len(entries)):
            if visible(entries[index]):
                self.entries.append(entries[index])
            if len(self.entries) >= self._size:
                self.following = (replace(here, skip=index + 1) if index + 1 < len(entries)
                                  else self._next_page(body, size))
                return True
        self.following = self._next_page(body, size)
        return False

    def _next_page(self, body: dict[str, Any], size: int | None) -> _Position | None:
        token = body.get("next-page-token")
        if token is None or token == "" or str(token) in self._tokens_seen:
            return None
        self._tokens_seen.add(str(token))
        return _Position(str(token), 0, size)


def _page_size(inbound: InboundRequest) -> int | None:
    """The caller's pageSize (the gate has checked it is 1 to ``MAX_PAGE_SIZE``)."""
    size = inbound.query("pageSize")
    return int(size) if size and size.isdigit() and 0 < int(size) <= MAX_PAGE_SIZE else None


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


def _backing_query(query: bytes, token: str | None, size: int | None) -> bytes:
    """The caller's query with icegov's own page token and size (each left out when None)."""
    pairs = [(k, v) for k, v in parse_qsl(query.decode("latin-1"), keep_blank_values=True)
             if k not in ("pageToken", "pageSize")]
    pairs += [("pageSize", str(size))] if size is not None else []
    pairs += [("pageToken", token)] if token is not None else []
    return urlencode(pairs, quote_via=quote).encode("ascii")


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
