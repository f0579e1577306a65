"""httpx's transport API over aiohttp's connection pool: the transport icegov shipped before
``proxy.backing.httptools_transport.HttptoolsTransport`` won the measurements. Not part of the
package: kept here as the alternative ``passthrough.py`` measures (variant ``aiohttp``), held to
the same contract (``tests/unit/test_transport_contract.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import httpx
import yarl


class AiohttpTransport(httpx.AsyncBaseTransport):
    """httpx's transport API over one aiohttp connection pool.

    Measured in benchmarks/README.md: httpcore 1.0's pool spends time per request that grows
    with the number of requests in flight (icegov collapsed to ~90 loadTables/s at 64 clients);
    aiohttp's pool does not, and its C parser makes each exchange cheaper. The request goes out
    as httpx built it: the URL byte for byte (never requoted), only the given headers (no
    User-Agent, Accept or cookie jar), no redirects followed, no decompression.
    """

    def __init__(self, max_connections: int) -> None:
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:  # created on first use, inside the serving event loop
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._max_connections),
                cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False,
                skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding"))
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request``; the answer's body streams until the response is closed."""
        limits = request.extensions.get("timeout", {})
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw
                   if k.lower() not in _SET_BY_AIOHTTP]
        timeout = aiohttp.ClientTimeout(total=None, connect=limits.get("pool"),
                                        sock_connect=limits.get("connect"),
                                        sock_read=limits.get("read"))
        try:
            answer = await self._client().request(
                request.method, yarl.URL(str(request.url), encoded=True), headers=headers,
                data=(await request.aread()) or None, allow_redirects=False, compress=False,
                timeout=timeout)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise _as_httpx_error(exc, request) from exc
        return httpx.Response(answer.status, headers=answer.raw_headers,
                              stream=_AiohttpBody(answer, request), request=request)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


class _AiohttpBody(httpx.AsyncByteStream):
    """An aiohttp answer's body as httpx's stream; closing it frees the connection."""

    def __init__(self, answer: aiohttp.ClientResponse, request: httpx.Request) -> None:
        self._answer = answer
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._answer.content.iter_chunked(64 * 1024):
                yield chunk
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise _as_httpx_error(exc, self._request) from exc

    async def aclose(self) -> None:
        self._answer.release()


_SET_BY_AIOHTTP = frozenset({b"host", b"content-length", b"transfer-encoding"})


def _as_httpx_error(exc: BaseException, request: httpx.Request) -> httpx.TransportError:
    """The httpx error for an aiohttp failure (the message names the kind, never OS text)."""
    kind = type(exc).__name__
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(kind, request=request)
    if isinstance(exc, TimeoutError):
        return httpx.ReadTimeout(kind, request=request)
    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx.ConnectError(kind, request=request)
    return httpx.ReadError(kind, request=request)
