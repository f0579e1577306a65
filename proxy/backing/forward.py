"""The one forwarding path to the backing catalog.

Requests go out through one pooled httpx transport (``HttptoolsTransport``, asyncio connections
parsed by httptools under httpx's transport API, for a remote catalog; an in-process
``ASGITransport`` for the embedded one). The transport is used directly, below httpx's
client layer, so no cookie jar is shared between callers, redirects are never followed and the
environment's proxy settings are ignored. The raw path and query string go out byte for byte;
responses stream back unchanged apart from hop-by-hop headers.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import AsyncIterator, Callable, Iterable

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
MAX_WHOLE_ANSWER_BYTES = 256 * 1024 * 1024
"""Answers icegov reads itself (table metadata, listings, commit answers) larger than this,
decoded, are refused (502): no catalog answer is near it, a hostile or broken backing's may be."""
URL_CACHE_ENTRIES = 4096
URL_CACHE_TARGET_BYTES = 512
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


FORWARDED_HEADERS = frozenset({
    # the Iceberg REST protocol's own, as Iceberg's Java client and PyIceberg send them
    b"accept", b"accept-encoding", b"accept-language", b"content-type",
    b"user-agent", b"x-client-version", b"x-client-git-commit-short",
    b"x-iceberg-access-delegation", b"if-none-match", b"if-match", b"authorization",
    # request tracing
    b"x-request-id", b"traceparent", b"tracestate",
})
"""Caller headers that reach the backing (``Settings.forward_headers`` adds others): nothing
else does. A header a backing or a gateway in front of it trusts — a session ``cookie``, a
realm or tenant selector, ``x-forwarded-user`` from an auth proxy — would otherwise let a caller
act there as someone, or somewhere, icegov never decided on. ``Content-Encoding`` is not among
them: icegov reads a request body as it is, and so does the backing."""
CONDITIONAL_HEADERS = frozenset({b"if-none-match", b"if-match"})
"""Never on icegov's own reads: their answers are what icegov decides with, whole (a 304 would
say nothing)."""


class Forwarder:
    """Sends inbound requests to the backing catalog and streams the answers back."""

    def __init__(
        self, transport: httpx.AsyncBaseTransport, base_url: str, auth: BackingAuth,
        timeout: httpx.Timeout, observe: Callable[[str, float], None] | None = None,
        answer_deadline: float = 120.0, forward_headers: Iterable[str] = (),
    ) -> None:
        """``observe(method, seconds)``: told how long each backing request took to answer;
        ``answer_deadline``: seconds an answer icegov reads whole may take, first byte to last
        (each read is also bounded by the timeout's ``read``); ``forward_headers``: caller
        headers to pass on besides ``FORWARDED_HEADERS`` (never a hop-by-hop one)."""
        self._passed = (FORWARDED_HEADERS | {h.lower().encode("latin-1")
                                             for h in forward_headers}) - HOP_BY_HOP
        self._observe = observe
        self._answer_deadline = answer_deadline
        self._transport = transport
        self._base = httpx.URL(base_url)
        self._base_path = self._base.raw_path.split(b"?")[0].rstrip(b"/")
        self._urls: dict[bytes, httpx.URL] = {}
        self._auth = auth
        self._timeout_extension = {"timeout": timeout.as_dict()}

    @property
    def speaks_for_itself(self) -> bool:
        """True when the backing sees icegov's own credential (or none), never a caller's: a
        401/403 to icegov's own request then means every request will be refused."""
        return self._auth.replaces_caller_credentials

    async def send(self, inbound: InboundRequest, body: bytes | None = None) -> httpx.Response:
        """Send the request upstream (with ``body`` in place of the caller's, if given); the
        caller must close the returned (streaming) response."""
        request = await self._request_for(inbound, body)
        return await self._send(request, commit=inbound.route.endpoint.commit)

    async def _request_for(self, inbound: InboundRequest, body: bytes | None) -> httpx.Request:
        content = inbound.body if body is None else body
        if inbound.method in _BODILESS:
            content = b""  # never hand a backing a body the route table does not expect
        return await self._build(
            inbound.method, inbound.raw_path, inbound.query_string, inbound.headers, content)

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
            raise server_failure(response.status_code, inbound.route.endpoint.name,
                                 commit=inbound.route.endpoint.commit)
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
        request = await self._request_for(inbound, body)
        return await self._whole(request, inbound.route.endpoint.commit)

    async def fetch(
        self, raw_path: bytes, query_string: bytes, caller_headers: tuple[tuple[bytes, bytes], ...]
    ) -> httpx.Response:
        """A read-only GET of a backing path with the caller's headers (not conditional ones),
        body read in full."""
        request = await self._build("GET", raw_path, query_string,
                                    _unconditional(caller_headers), b"")
        return await self._whole(request, commit=False)

    async def post_json(self, raw_path: bytes, body: bytes,
                        caller_headers: tuple[tuple[bytes, bytes], ...]) -> httpx.Response:
        """An icegov-made POST (e.g. a stage-create probe, which creates nothing), read in full."""
        headers = tuple(h for h in _unconditional(caller_headers)
                        if h[0].lower() != b"content-type")
        request = await self._build("POST", raw_path, b"",
                                    (*headers, (b"content-type", b"application/json")), body)
        return await self._whole(request, commit=False)

    async def _whole(self, request: httpx.Request, commit: bool) -> httpx.Response:
        """The answer to ``request``, read whole and decoded within the answer deadline and
        ``MAX_WHOLE_ANSWER_BYTES``; a failure while reading is what it would be while sending
        (for a commit: its outcome is unknown)."""
        try:
            async with asyncio.timeout(self._answer_deadline):
                response = await self._send(request, commit)
                try:
                    body = await _decoded_body(response)
                finally:
                    await response.aclose()
        except (TimeoutError, httpx.TimeoutException) as exc:
            message = "the backing catalog's answer did not arrive in time"
            raise (CommitTimeout if commit else BackingTimeout)(message) from exc
        except (httpx.TransportError, httpx.DecodingError) as exc:
            raise (CommitStateUnknown if commit else BackingUnavailable)(_describe(exc)) from exc
        except BackingFailed as exc:  # too large: a commit's answer unread, its outcome unknown
            if commit:
                raise CommitStateUnknown(exc.message) from exc
            raise
        headers = [h for h in response.headers.raw if h[0].lower() != b"content-encoding"]
        return httpx.Response(response.status_code, headers=headers, content=body,
                              request=request)

    async def _build(
        self, method: str, raw_path: bytes, query: bytes,
        caller_headers: tuple[tuple[bytes, bytes], ...], body: bytes,
    ) -> httpx.Request:
        target = self._base_path + raw_path + (b"?" + query if query else b"")
        headers = await self._headers(caller_headers)
        # the body as a ready stream: httpx adds no Host or Content-Length of its own (every
        # transport here frames the request itself), and skips its content encoding (~7 µs)
        return httpx.Request(
            method, self._url(target), headers=headers, stream=httpx.ByteStream(body),
            extensions=self._timeout_extension,
        )

    def _url(self, target: bytes) -> httpx.URL:
        """The backing URL for a raw path and query; short ones are remembered (parsing a URL
        was a quarter of icegov's own time per forwarded request), at most URL_CACHE_ENTRIES."""
        url = self._urls.get(target)
        if url is None:
            url = self._base.copy_with(raw_path=target)
            if len(target) <= URL_CACHE_TARGET_BYTES:
                if len(self._urls) >= URL_CACHE_ENTRIES:
                    self._urls.clear()
                self._urls[target] = url
        return url

    async def _headers(
        self, caller_headers: tuple[tuple[bytes, bytes], ...]
    ) -> list[tuple[bytes, bytes]]:
        own = await self._auth.authorization()
        drop_auth = own is not None or self._auth.replaces_caller_credentials
        passed = self._passed
        headers = [
            (k, v) for k, v in caller_headers
            if k.lower() in passed and not (drop_auth and k.lower() == b"authorization")
        ]
        if own is not None:
            headers.append((b"authorization", own.encode("latin-1")))
        return headers


def _unconditional(headers: tuple[tuple[bytes, bytes], ...]) -> tuple[tuple[bytes, bytes], ...]:
    return tuple(h for h in headers if h[0].lower() not in CONDITIONAL_HEADERS)


async def _decoded_body(response: httpx.Response) -> bytes:
    """The whole body, decoded by icegov itself; ``BackingFailed`` past
    ``MAX_WHOLE_ANSWER_BYTES`` (a huge or highly compressed answer never fills icegov's memory),
    ``httpx.DecodingError`` for a coding icegov does not read or a compressed stream that does
    not end (an answer cut short must not pass for a whole one)."""
    if response.is_stream_consumed:  # a transport that answered with a body httpx decoded
        if len(response.content) > MAX_WHOLE_ANSWER_BYTES:
            raise BackingFailed("the backing catalog's answer is larger than icegov reads")
        return response.content
    raw = bytearray()
    async for chunk in response.aiter_raw():
        raw += chunk
        if len(raw) > MAX_WHOLE_ANSWER_BYTES:
            raise BackingFailed("the backing catalog's answer is larger than icegov reads")
    body = bytes(raw)
    for coding in reversed(_codings(response)):
        body = _decoded(body, coding)
    return body


def _codings(response: httpx.Response) -> list[str]:
    values = [v for k, v in response.headers.raw if k.lower() == b"content-encoding"]
    return [c.strip().lower() for v in values for c in v.decode("latin-1").split(",")
            if c.strip() and c.strip().lower() != "identity"]


def _decoded(body: bytes, coding: str) -> bytes:
    if coding in ("gzip", "x-gzip"):
        return _inflated(body, 31)
    if coding == "deflate":  # zlib-wrapped as the RFC says, or raw as some servers send it
        try:
            return _inflated(body, 15)
        except httpx.DecodingError:
            return _inflated(body, -15)
    raise httpx.DecodingError(f"the backing catalog's answer has content-encoding {coding!r}")


def _inflated(data: bytes, wbits: int) -> bytes:
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(data, MAX_WHOLE_ANSWER_BYTES + 1)
    except zlib.error as exc:
        raise httpx.DecodingError("the backing catalog's answer does not decode") from exc
    if len(out) > MAX_WHOLE_ANSWER_BYTES:
        raise BackingFailed("the backing catalog's answer is larger than icegov reads")
    if not inflater.eof or inflater.unused_data:
        raise httpx.DecodingError("the backing catalog's compressed answer is cut short")
    return out


async def _stream(response: httpx.Response) -> AsyncIterator[bytes]:
    """The answer's bytes as the backing sent them (not decoded: they are relayed with their
    own headers), read from the transport's stream itself (httpx's ``aiter_raw`` re-chunks)."""
    try:
        if response.is_stream_consumed:  # a transport that answered with a pre-read body
            yield response.content
            return
        if isinstance(response.stream, httpx.AsyncByteStream):
            async for chunk in response.stream:
                yield chunk
            return
        async for chunk in response.aiter_raw():
            yield chunk
    finally:
        await response.aclose()


def _relay_whole(response: httpx.Response) -> bool:
    """True for one Content-Length of at most ``WHOLE_BODY_LIMIT`` (read from the raw headers:
    httpx's ``Headers.get`` re-normalises every header on each lookup)."""
    lengths = [v for k, v in response.headers.raw if k.lower() == b"content-length"]
    return (len(lengths) == 1 and lengths[0].isdigit()
            and int(lengths[0]) <= WHOLE_BODY_LIMIT)


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


def relayed_answer(upstream: httpx.Response, body: bytes) -> Response:
    """``relayed`` for an answer icegov read itself (not a commit's): a backing's 5xx is never
    passed on (its text may name internals), it is a 502 like every forwarded one."""
    if upstream.status_code >= 500:
        raise server_failure(upstream.status_code)
    return relayed(upstream, body)


def server_failure(status: int, endpoint: str | None = None,
                   commit: bool = False) -> BackingFailed | CommitStateUnknown:
    """The error for a backing's 5xx (logged): never relayed, as its text may name internals;
    a commit's outcome is then unknown."""
    log.warning("backing.server_error", status=status, endpoint=endpoint)
    failure = CommitStateUnknown if commit else BackingFailed
    return failure(f"the backing catalog failed with {status}")


_RECOMPUTED = frozenset({b"content-length", b"content-encoding"})
_BODILESS = frozenset({"GET", "HEAD", "DELETE"})


def _describe(exc: Exception) -> str:
    return f"backing catalog did not answer ({type(exc).__name__})"
