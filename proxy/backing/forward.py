"""The one forwarding path to the backing catalog.

Requests go out through one pooled httpx transport (a real network pool for a remote catalog, an
in-process ``ASGITransport`` for the embedded one). The transport is used directly, below httpx's
client layer, so no cookie jar is shared between callers, redirects are never followed and the
environment's proxy settings are ignored. The raw path and query string go out byte for byte;
responses stream back unchanged apart from hop-by-hop headers.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable

import httpx
import structlog
from starlette.background import BackgroundTask
from starlette.responses import Response, StreamingResponse

from proxy.backing.auth import BackingAuth
from proxy.errors import (
    BackingFailed,
    BackingTimeout,
    BackingUnavailable,
    CommitStateUnknown,
    CommitTimeout,
)
from proxy.inbound import InboundRequest

log = structlog.get_logger("icegov")

WHOLE_BODY_LIMIT = 1024 * 1024
HOP_BY_HOP = frozenset({
    b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te",
    b"trailer", b"transfer-encoding", b"upgrade", b"host", b"content-length",
    # a backing (or a framework in front of it) that honours these would act on another
    # method than the one icegov authorized
    b"x-http-method-override", b"x-http-method", b"x-method-override",
    b"forwarded", b"x-forwarded-for", b"x-forwarded-host", b"x-forwarded-proto",
    b"x-original-url", b"x-rewrite-url",
    # icegov keeps the client's key itself (its own final answer); passed on, a backing that
    # honours it would replay its 409 to icegov's own retries of a rebased commit
    b"idempotency-key",
})


class Forwarder:
    """Sends inbound requests to the backing catalog and streams the answers back."""

    def __init__(
        self, transport: httpx.AsyncBaseTransport, base_url: str, auth: BackingAuth,
        timeout: httpx.Timeout, observe: Callable[[str, float], None] | None = None,
    ) -> None:
        """``observe(method, seconds)``: told how long each backing request took to answer."""
        self._observe = observe
        self._transport = transport
        self._base = httpx.URL(base_url)
        self._base_path = self._base.raw_path.split(b"?")[0].rstrip(b"/")
        self._auth = auth
        self._timeout_extension = {"timeout": timeout.as_dict()}

    async def send(self, inbound: InboundRequest, body: bytes | None = None) -> httpx.Response:
        """Send the request upstream (with ``body`` in place of the caller's, if given); the
        caller must close the returned (streaming) response."""
        content = inbound.body if body is None else body
        if inbound.method in _BODILESS:
            content = b""  # never hand a backing a body the route table does not expect
        request = await self._build(
            inbound.method, inbound.raw_path, inbound.query_string, inbound.headers, content)
        return await self._send(request, commit=inbound.route.endpoint.commit)

    async def _send(self, request: httpx.Request, commit: bool) -> httpx.Response:
        """The one place a request goes out: transport errors become ErrorModel exceptions."""
        started = time.perf_counter()
        try:
            response = await self._transport.handle_async_request(request)
        except httpx.TimeoutException as exc:
            raise (CommitTimeout if commit else BackingTimeout)(_describe(exc)) from exc
        except httpx.TransportError as exc:
            raise (CommitStateUnknown if commit else BackingUnavailable)(_describe(exc)) from exc
        finally:
            if self._observe is not None:
                self._observe(request.method, time.perf_counter() - started)
        if response.status_code == 401:
            self._auth.invalidate()
        return response

    async def forward(self, inbound: InboundRequest) -> Response:
        """Forward the request and pass the backing catalog's answer back unchanged.

        Bodies of known, modest length are relayed whole (cheaper than a streaming response);
        anything larger or of unknown length is streamed.
        """
        response = await self.send(inbound)
        if response.status_code >= 500:
            await response.aclose()
            log.warning("backing.server_error", status=response.status_code,
                        endpoint=inbound.route.endpoint.name)
            failure = CommitStateUnknown if inbound.route.endpoint.commit else BackingFailed
            raise failure(f"the backing catalog failed with {response.status_code}")
        if _relay_whole(response):
            try:
                body = b"".join([chunk async for chunk in _stream(response)])
            finally:
                await response.aclose()
            relayed = Response(body, status_code=response.status_code)
        else:
            relayed = StreamingResponse(
                _stream(response), status_code=response.status_code,
                background=BackgroundTask(response.aclose),
            )
        relayed.raw_headers = relayable_headers(response)
        return relayed

    async def exchange(self, inbound: InboundRequest, body: bytes | None = None) -> httpx.Response:
        """Send the request upstream (``body`` as in ``send``) and read the whole answer."""
        return await _read_whole(await self.send(inbound, body))

    async def fetch(
        self, raw_path: bytes, query_string: bytes, caller_headers: tuple[tuple[bytes, bytes], ...]
    ) -> httpx.Response:
        """A read-only GET of a backing path with the caller's headers, body read in full."""
        request = await self._build("GET", raw_path, query_string, caller_headers, b"")
        return await _read_whole(await self._send(request, commit=False))

    async def post_json(self, raw_path: bytes, body: bytes,
                        caller_headers: tuple[tuple[bytes, bytes], ...]) -> httpx.Response:
        """An icegov-made POST (e.g. a stage-create probe, which creates nothing), read in full."""
        headers = tuple(h for h in caller_headers if h[0].lower() != b"content-type")
        request = await self._build("POST", raw_path, b"",
                                    (*headers, (b"content-type", b"application/json")), body)
        return await _read_whole(await self._send(request, commit=False))

    async def _build(
        self, method: str, raw_path: bytes, query: bytes,
        caller_headers: tuple[tuple[bytes, bytes], ...], body: bytes,
    ) -> httpx.Request:
        target = self._base_path + raw_path + (b"?" + query if query else b"")
        headers = await self._headers(caller_headers)
        return httpx.Request(
            method, self._base.copy_with(raw_path=target), headers=headers, content=body,
            extensions=self._timeout_extension,
        )

    async def _headers(
        self, caller_headers: tuple[tuple[bytes, bytes], ...]
    ) -> list[tuple[bytes, bytes]]:
        own = await self._auth.authorization()
        drop_auth = own is not None or self._auth.replaces_caller_credentials
        headers = [
            (k, v) for k, v in caller_headers
            if k.lower() not in HOP_BY_HOP and not (drop_auth and k.lower() == b"authorization")
        ]
        if own is not None:
            headers.append((b"authorization", own.encode("latin-1")))
        return headers


async def _read_whole(response: httpx.Response) -> httpx.Response:
    try:
        await response.aread()
    finally:
        await response.aclose()
    return response


async def _stream(response: httpx.Response) -> AsyncIterator[bytes]:
    try:
        if response.is_stream_consumed:  # a transport that answered with a pre-read body
            yield response.content
            return
        async for chunk in response.aiter_raw():
            yield chunk
    finally:
        await response.aclose()


def _relay_whole(response: httpx.Response) -> bool:
    length = response.headers.get("content-length")
    return length is not None and length.isdigit() and int(length) <= WHOLE_BODY_LIMIT


def relayable_headers(response: httpx.Response) -> list[tuple[bytes, bytes]]:
    """Upstream headers minus hop-by-hop ones; Content-Length stays (the bytes are unchanged)."""
    return [
        (k.lower(), v) for k, v in response.headers.raw
        if k.lower() not in HOP_BY_HOP or k.lower() == b"content-length"
    ]


def relayed(upstream: httpx.Response, body: bytes) -> Response:
    """``body`` with the upstream status and headers (decoded, so no content-encoding)."""
    response = Response(body, status_code=upstream.status_code)
    response.raw_headers = [
        *(h for h in relayable_headers(upstream) if h[0] not in _RECOMPUTED),
        (b"content-length", str(len(body)).encode()),
    ]
    return response


_RECOMPUTED = frozenset({b"content-length", b"content-encoding"})
_BODILESS = frozenset({"GET", "HEAD", "DELETE"})


def _describe(exc: Exception) -> str:
    return f"backing catalog did not answer ({type(exc).__name__})"
