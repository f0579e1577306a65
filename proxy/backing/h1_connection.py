"""One HTTP/1.1 connection to the backing: a request head out, httptools' parser on the answer.

``H1Connection`` is an asyncio protocol that carries one exchange at a time. The answer is
parsed by httptools (llhttp, the parser uvicorn serves with), in its strict mode: an answer with
both Content-Length and Transfer-Encoding, a duplicate Content-Length, a malformed chunk or an
invalid header is refused, and so is a head over ``MAX_HEAD_BYTES``. A connection is only offered
for another exchange when its answer was complete, framed, asked to be kept alive and followed
by nothing: bytes nobody asked for (a backing answering twice, a HEAD answered with a body)
close it, so they can never be read as the answer to the next request.

Failures are httpx transport errors whose messages name what happened, never OS text.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import cast

import httptools
import httpx

MAX_HEAD_BYTES = 64 * 1024
PAUSE_READING_AT = 256 * 1024

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TARGET = re.compile(rb"/[!-~]*")
_NOT_IN_A_VALUE = re.compile(rb"[\x00\r\n]")
_SET_HERE = frozenset({b"host", b"content-length", b"transfer-encoding"})
_LENGTH_EVEN_IF_EMPTY = frozenset({b"POST", b"PUT", b"PATCH"})
_FRAMING = frozenset({b"content-length", b"transfer-encoding"})

Origin = tuple[bytes, str, int]  # scheme, host, port


class StaleConnection(httpx.ReadError):
    """A kept-alive connection closed before a byte of the answer arrived: the backing had
    dropped it while idle (or as the request went out), so the request may not have been seen."""


class _AnswerAfterAnswer(Exception):
    """Raised inside the parser when a second message starts after the final answer."""


class _Refused(Exception):
    """Raised inside the parser for an answer icegov will not read: a status outside 100-599,
    or a transfer coding other than a single ``chunked`` (a compressed body would be relayed
    as if it were plain, since the coding is hop-by-hop and never reaches the caller)."""


class _HeadTooLarge(Exception):
    """Raised inside the parser when an answer's headers pass ``MAX_HEAD_BYTES``."""


def request_head(request: httpx.Request, body: bytes) -> bytes:
    """The request line and headers for ``request``: the target byte for byte, the given headers
    in order (Host, Content-Length and Transfer-Encoding are set here), Content-Length for
    ``body``. A method, target or header that could split the request is refused."""
    method = request.method.encode("ascii", "replace")
    target = request.url.raw_path
    if not _TOKEN.fullmatch(method) or not _TARGET.fullmatch(target):
        raise httpx.LocalProtocolError("refused to send a malformed request line")
    parts = [method, b" ", target, b" HTTP/1.1\r\nhost: ", request.url.netloc, b"\r\n"]
    for name, value in request.headers.raw:
        if name.lower() in _SET_HERE:
            continue
        if not _TOKEN.fullmatch(name) or _NOT_IN_A_VALUE.search(value):
            raise httpx.LocalProtocolError("refused to send a malformed header")
        parts += (name, b": ", value, b"\r\n")
    if body or method in _LENGTH_EVEN_IF_EMPTY:
        parts += (b"content-length: ", b"%d" % len(body), b"\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)


class H1Connection(asyncio.Protocol):
    """A keep-alive HTTP/1.1 client connection to ``origin``; ``on_lost(self)`` is called once
    it closes."""

    def __init__(self, origin: Origin, on_lost: Callable[[H1Connection], None]) -> None:
        self.origin = origin
        self._on_lost = on_lost
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.answers = 0  # complete exchanges so far: 0 means a fresh connection
        self.idle_since = 0.0
        self._parser_spent = False  # a HEAD answer's head left it expecting a body
        self._aborted = False
        self._active = False
        self._start(head_only=False)

    def _start(self, head_only: bool) -> None:
        self._head_only = head_only
        self._status = 0
        self._headers: list[tuple[bytes, bytes]] = []
        self._head_bytes = 0
        self._framed = False
        self._fed = 0
        self._head_done = False
        self._complete = False
        self._keep_alive = False
        self._after_answer = False
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._paused = False
        self._error: tuple[type[httpx.TransportError], str] | None = None
        self._waiter: asyncio.Future[None] | None = None

    # -- one exchange ---------------------------------------------------------------------

    def send(self, payload: bytes, head_only: bool) -> None:
        """Start an exchange: write the request (head and body); ``head_only`` for HEAD."""
        assert self._transport is not None and not self._active
        if self._parser_spent:
            self._parser, self._parser_spent = httptools.HttpResponseParser(self), False
        self._start(head_only)
        self._active = True
        self._transport.write(payload)

    async def receive_head(self, timeout: float | None) -> tuple[int, list[tuple[bytes, bytes]]]:
        """The final answer's status and raw headers (interim 1xx answers are skipped)."""
        while not self._head_done:
            await self._wait(timeout)
        return self._status, self._headers

    async def receive_body(self, timeout: float | None) -> bytes:
        """The body received since the last call (waiting for some); ``b""`` at its end."""
        while True:
            if self._chunks:
                chunks, self._chunks, self._buffered = self._chunks, [], 0
                if self._paused and self._transport is not None:
                    self._paused = False
                    self._transport.resume_reading()
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
            if self._complete:
                return b""
            await self._wait(timeout)

    def reusable(self) -> bool:
        """Whether the answer is complete and the connection may carry another exchange."""
        return (self._complete and self._keep_alive and not self._after_answer
                and not self.closed and self._error is None)

    def idle_for(self) -> float:
        """Seconds since the last exchange ended."""
        return self._loop.time() - self.idle_since

    def finish(self) -> None:
        """End the exchange on a reusable connection (it goes back to the pool)."""
        self._active = False
        self._chunks = []
        self.answers += 1
        self.idle_since = self._loop.time()

    def abort(self) -> None:
        """Close at once (the exchange, if any, fails)."""
        self._aborted = True
        self.closed = True
        if self._transport is not None:
            self._transport.abort()

    async def _wait(self, timeout: float | None) -> None:
        if self._error is None:
            waiter = self._waiter = self._loop.create_future()
            timer = None if timeout is None else self._loop.call_later(timeout, self._time_out)
            try:
                await waiter
            except BaseException:  # cancelled mid-exchange: the rest of the answer is unread
                self.abort()
                raise
            finally:
                self._waiter = None
                if timer is not None:
                    timer.cancel()
        if self._error is not None:
            kind, message = self._error
            raise kind(message)

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _fail(self, kind: type[httpx.TransportError], message: str) -> None:
        if self._error is None and not self._complete:
            self._error = (kind, message)
        self._wake()
        self.abort()

    def _time_out(self) -> None:
        self._fail(httpx.ReadTimeout, "the backing did not answer in time")

    # -- asyncio protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._active and not self._complete and self._error is None:
            if self._head_done and not self._framed and exc is None and not self._aborted:
                self._complete = True  # an answer delimited by the end of the connection
            elif self._fed == 0 and self.answers > 0:
                self._error = (StaleConnection, "the backing closed a kept-alive connection")
            else:
                self._error = (httpx.ReadError, "the backing closed the connection mid-answer")
        self._wake()
        self._on_lost(self)

    def data_received(self, data: bytes) -> None:
        if not self._active or self._complete:
            self._after_answer = True  # bytes nobody asked for: never reuse this connection
            self.abort()
            return
        self._fed += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(httpx.RemoteProtocolError, "the backing switched protocols")
        except httptools.HttpParserError:
            if self._head_bytes > MAX_HEAD_BYTES:
                self._fail(httpx.RemoteProtocolError, "the backing's answer head is too large")
            elif self._after_answer:  # the answer itself was whole; what followed is dropped
                self.abort()
            else:
                self._fail(httpx.RemoteProtocolError, "the backing sent a malformed answer")
        else:
            if not self._head_done and self._fed > MAX_HEAD_BYTES:
                self._fail(httpx.RemoteProtocolError, "the backing's answer head is too large")

    # -- httptools callbacks --------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._complete:
            self._after_answer = True
            raise _AnswerAfterAnswer

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value) + 4
        if self._head_bytes > MAX_HEAD_BYTES:
            raise _HeadTooLarge
        lowered = name.lower()
        if lowered == b"transfer-encoding" and (
                value.strip().lower() != b"chunked" or any(
                    n.lower() == lowered for n, _ in self._headers)):
            raise _Refused
        self._headers.append((name, value))
        if lowered in _FRAMING:
            self._framed = True

    def on_headers_complete(self) -> None:
        self._status = self._parser.get_status_code()
        if not 100 <= self._status <= 599:
            raise _Refused
        if self._status < 200:
            return  # an interim answer: its message ends here, the final one follows
        self._head_done = True
        if self._head_only:
            # an answer to HEAD has no body, whatever it declares; the parser does not know
            # that (httptools is never told the method), so the next exchange gets a new one
            self._complete = True
            self._keep_alive = self._parser.should_keep_alive()
            self._parser_spent = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        if self._complete:  # a body on an answer to HEAD
            self._after_answer = True
            return
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > PAUSE_READING_AT and not self._paused and self._transport:
            self._paused = True
            self._transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self._status < 200:
            self._headers, self._framed = [], False
            return
        # for HEAD this only happens when the parser itself saw no body (a 204, a zero length):
        # the connection is then at a message boundary and may be kept
        self._complete = True
        self._keep_alive = self._parser.should_keep_alive()
        self._wake()
