"""httpx's transport API over asyncio connections parsed by httptools, with a keep-alive pool.

``HttptoolsTransport`` sends each request as httpx built it (the target byte for byte, only the
given headers, no cookie jar, no redirects, no decompression) over a pooled HTTP/1.1 connection
(``proxy.backing.h1_connection``). The pool holds at most ``max_connections`` connections in
all; a request that finds none free waits for one (httpx's ``pool`` timeout). Timeouts map as
httpx's own: ``connect`` to ``ConnectTimeout``, ``read`` (waiting for the head, then for each
piece of the body) to ``ReadTimeout``, ``pool`` to ``PoolTimeout``.

A kept-alive connection the backing closed while idle is retried once on a fresh connection
for safe methods (GET, HEAD, OPTIONS); any other request fails with ``ReadError`` (a commit
that may or may not have been seen is never sent twice). Connections idle for longer than
``STALE_AFTER_SECONDS`` are not used for such requests at all, which keeps that race away from
backings whose keep-alive timeout is a few seconds (uvicorn's is 5).

Requests that find the pool full wait in line: a connection that comes free is handed to the
first one waiting for its origin, so a newcomer never overtakes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections import deque
from collections.abc import AsyncIterator

import httpx

from proxy.backing.h1_connection import H1Connection, Origin, StaleConnection, request_head

STALE_AFTER_SECONDS = 2.0
_RETRYABLE = frozenset({"GET", "HEAD", "OPTIONS"})
_DEFAULT_PORTS = {b"http": 80, b"https": 443}


class HttptoolsTransport(httpx.AsyncBaseTransport):
    """A pooled HTTP/1.1 transport on httptools' parser (see the module docstring)."""

    def __init__(self, max_connections: int) -> None:
        self._limit = max_connections
        self._connections: set[H1Connection] = set()
        self._idle: dict[Origin, list[H1Connection]] = {}
        self._connecting = 0
        self._waiters: deque[tuple[Origin, asyncio.Future[H1Connection | None]]] = deque()
        self._tls: ssl.SSLContext | None = None
        self._closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request``; the answer's body streams until the response is closed."""
        timeouts = request.extensions.get("timeout", {})
        payload = request_head(request, body := await request.aread()) + body
        origin = _origin(request.url)
        retryable = request.method in _RETRYABLE
        head_only = request.method == "HEAD"
        connection = await self._acquire(origin, timeouts, fresh=False, retryable=retryable)
        try:
            status, headers = await self._exchange(connection, payload, head_only, timeouts)
        except StaleConnection:
            if not retryable:
                raise httpx.ReadError("the backing closed a kept-alive connection") from None
            connection = await self._acquire(origin, timeouts, fresh=True, retryable=True)
            status, headers = await self._exchange(connection, payload, head_only, timeouts)
        return httpx.Response(status, headers=headers, request=request,
                              stream=_Body(self, connection, timeouts.get("read")))

    async def aclose(self) -> None:
        """Close every connection; waiting and later requests fail."""
        self._closed = True
        for connection in list(self._connections):
            connection.abort()
        self._connections.clear()
        self._idle.clear()
        while self._waiters:
            _, waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    async def _exchange(self, connection: H1Connection, payload: bytes, head_only: bool,
                        timeouts: dict[str, float | None]) -> tuple[int, list[tuple[bytes, bytes]]]:
        connection.send(payload, head_only)
        try:
            return await connection.receive_head(timeouts.get("read"))
        except BaseException:
            self._drop(connection)
            raise

    # -- the pool -------------------------------------------------------------------------

    async def _acquire(self, origin: Origin, timeouts: dict[str, float | None], fresh: bool,
                       retryable: bool) -> H1Connection:
        """A connection to ``origin``: an idle one (unless ``fresh``), a new one within the
        limit, or the first to come free within the pool timeout."""
        loop = asyncio.get_running_loop()
        pool_timeout = timeouts.get("pool")
        deadline = None if pool_timeout is None else loop.time() + pool_timeout
        while True:
            if self._closed:
                raise httpx.ConnectError("the transport is closed")
            if not fresh and (idle := self._take_idle(origin, retryable)) is not None:
                return idle
            if len(self._connections) + self._connecting < self._limit:
                return await self._connect(origin, timeouts.get("connect"))
            if not self._close_an_idle_connection():
                handed = await self._wait_for_a_slot(origin, deadline)
                if handed is not None:
                    if not fresh and not handed.closed:
                        return handed
                    self._drop(handed)

    def _take_idle(self, origin: Origin, retryable: bool) -> H1Connection | None:
        idle = self._idle.get(origin)
        while idle:
            connection = idle.pop()
            if connection.closed:
                continue
            if retryable or connection.idle_for() < STALE_AFTER_SECONDS:
                return connection
            self._drop(connection)  # too old to trust with a request that cannot be retried
        return None

    def _close_an_idle_connection(self) -> bool:
        for idle in self._idle.values():
            if idle:
                self._drop(idle.pop(0))
                return True
        return False

    async def _wait_for_a_slot(self, origin: Origin,
                               deadline: float | None) -> H1Connection | None:
        """Wait in line: a connection to ``origin`` handed over as it comes free, or None when
        a slot (or another origin's idle connection) came free."""
        waiter: asyncio.Future[H1Connection | None] = asyncio.get_running_loop().create_future()
        entry = (origin, waiter)
        self._waiters.append(entry)
        try:
            async with asyncio.timeout_at(deadline):
                return await waiter
        except BaseException as exc:
            if waiter.done() and not waiter.cancelled():  # served, but leaving: pass it on
                handed = waiter.result()
                if handed is None:
                    self._wake_one()
                else:
                    self._offer(handed)
            with contextlib.suppress(ValueError):
                self._waiters.remove(entry)
            if isinstance(exc, TimeoutError):
                raise httpx.PoolTimeout("no connection to the backing came free in time") from None
            raise

    def _offer(self, connection: H1Connection) -> None:
        """A reusable connection: to the first request waiting for its origin, else idle."""
        while self._waiters and self._waiters[0][1].done():
            self._waiters.popleft()
        for entry in self._waiters:
            if entry[0] == connection.origin and not entry[1].done():
                self._waiters.remove(entry)
                entry[1].set_result(connection)
                return
        self._idle.setdefault(connection.origin, []).append(connection)
        self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            _, waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def _connect(self, origin: Origin, timeout: float | None) -> H1Connection:
        scheme, host, port = origin
        tls = self._tls_context() if scheme == b"https" else None
        loop = asyncio.get_running_loop()
        self._connecting += 1
        try:
            async with asyncio.timeout(timeout):
                _, connection = await loop.create_connection(
                    lambda: H1Connection(origin, self._forget), host, port, ssl=tls,
                    server_hostname=host if tls is not None else None)
        except BaseException as exc:
            self._connecting -= 1
            self._wake_one()  # the slot this attempt held is free again
            if isinstance(exc, TimeoutError):
                raise httpx.ConnectTimeout("the backing did not accept in time") from None
            if isinstance(exc, OSError):
                raise httpx.ConnectError("the backing could not be connected to") from None
            raise
        self._connecting -= 1
        if self._closed:
            connection.abort()
            raise httpx.ConnectError("the transport is closed")
        self._connections.add(connection)
        return connection

    def _tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls

    def release(self, connection: H1Connection) -> None:
        """An exchange's response was closed: keep the connection if it can serve another."""
        if connection.reusable() and not self._closed:
            connection.finish()
            self._offer(connection)
        else:
            self._drop(connection)

    def _drop(self, connection: H1Connection) -> None:
        connection.abort()
        self._forget(connection)

    def _forget(self, connection: H1Connection) -> None:
        """``connection`` is closed: it no longer counts toward the limit."""
        if connection in self._connections:
            self._connections.discard(connection)
            idle = self._idle.get(connection.origin)
            if idle and connection in idle:
                idle.remove(connection)
            self._wake_one()


class _Body(httpx.AsyncByteStream):
    """An answer's body as httpx's stream; closing it returns the connection to the pool."""

    def __init__(self, pool: HttptoolsTransport, connection: H1Connection,
                 read_timeout: float | None) -> None:
        self._pool = pool
        self._connection = connection
        self._read_timeout = read_timeout
        self._released = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while chunk := await self._connection.receive_body(self._read_timeout):
            yield chunk

    async def aclose(self) -> None:
        if not self._released:
            self._released = True
            self._pool.release(self._connection)


def _origin(url: httpx.URL) -> Origin:
    scheme = url.raw_scheme
    if scheme not in _DEFAULT_PORTS:
        raise httpx.UnsupportedProtocol("only http and https backings are supported")
    return scheme, url.host, url.port or _DEFAULT_PORTS[scheme]
