"""The contract both backing transports keep (``AiohttpTransport``, ``HttptoolsTransport``).

Each test runs a transport against a scripted raw HTTP server (``ScriptedBacking``) in the same
event loop: the server records the bytes and connections it sees and answers each request with
the next scripted action (bytes to write, close without answering, or hold the answer).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import httpx
import pytest

from benchmarks.aiohttp_transport import AiohttpTransport
from proxy.backing.httptools_transport import HttptoolsTransport

TRANSPORTS: dict[str, Callable[[int], httpx.AsyncBaseTransport]] = {
    "aiohttp": AiohttpTransport, "httptools": HttptoolsTransport}
OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


@dataclass(frozen=True)
class Close:
    """Read the request, then close the connection without answering."""


@dataclass(frozen=True)
class Hold:
    """Read the request and never answer (until the server stops)."""


@dataclass(frozen=True)
class Answer:
    """Write ``data``; close the connection afterwards if ``close``."""

    data: bytes
    close: bool = False


Action = Answer | Close | Hold


@dataclass
class ScriptedBacking:
    """A raw HTTP/1.1 server answering request after request from ``script`` (OK when empty)."""

    script: list[Action] = field(default_factory=list)
    requests: list[tuple[int, bytes, bytes]] = field(default_factory=list)  # conn, head, body
    connections: int = 0
    open_now: int = 0
    most_open: int = 0
    port: int = 0
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number, self.open_now = self.connections, self.open_now + 1
        self.most_open = max(self.most_open, self.open_now)
        try:
            while await self._one(number, reader, writer):
                pass
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            self.open_now -= 1
            writer.close()

    async def _one(self, number: int, reader: asyncio.StreamReader,
                   writer: asyncio.StreamWriter) -> bool:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        self.requests.append((number, head, await reader.readexactly(length)))
        action = self.script.pop(0) if self.script else Answer(OK)
        if isinstance(action, Close):
            return False
        if isinstance(action, Hold):
            await self.stopping.wait()
            return False
        writer.write(action.data)
        await writer.drain()
        return not action.close

    def url(self, path: str = "/v1/config") -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@contextlib.asynccontextmanager
async def scripted(*script: Action) -> AsyncIterator[ScriptedBacking]:
    backing = ScriptedBacking(list(script))
    listener = await asyncio.start_server(backing.handle, "127.0.0.1", 0, limit=1 << 20)
    backing.port = listener.sockets[0].getsockname()[1]
    try:
        yield backing
    finally:
        backing.stopping.set()
        listener.close()


async def fetch(transport: httpx.AsyncBaseTransport, request: httpx.Request) -> httpx.Response:
    """Send ``request`` and read its whole answer (the connection goes back to the pool)."""
    response = await transport.handle_async_request(request)
    try:
        await response.aread()
    finally:
        await response.aclose()
    return response


def run_with(kind: str, script: tuple[Action, ...],
             steps: Callable[[httpx.AsyncBaseTransport, ScriptedBacking], object],
             max_connections: int = 4) -> ScriptedBacking:
    """Run ``await steps(transport, backing)`` against a backing following ``script``."""
    async def main() -> ScriptedBacking:
        async with scripted(*script) as backing:
            transport = TRANSPORTS[kind](max_connections)
            try:
                await steps(transport, backing)  # type: ignore[misc]
            finally:
                await transport.aclose()
            return backing

    return asyncio.run(asyncio.wait_for(main(), 20))  # a hang is a failure, not a stuck run


both = pytest.mark.parametrize("kind", sorted(TRANSPORTS))


@both
def test_sends_the_raw_path_and_only_the_given_headers(kind: str) -> None:
    answer = (b"HTTP/1.1 302 Found\r\nlocation: /elsewhere\r\nset-cookie: s=1\r\n"
              b"content-length: 2\r\n\r\nok")
    seen: list[httpx.Response] = []

    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        path = "/v1/namespaces/a%1Fb/tables/t%2Fx?x=%2F&y=1"
        seen.append(await fetch(transport, httpx.Request(
            "GET", backing.url(path), headers=[(b"authorization", b"Bearer t")])))

    backing = run_with(kind, (Answer(answer),), steps)
    head = backing.requests[0][1].split(b"\r\n")
    assert head[0] == b"GET /v1/namespaces/a%1Fb/tables/t%2Fx?x=%2F&y=1 HTTP/1.1"
    names = [line.split(b":")[0].lower() for line in head[1:] if line]
    assert b"authorization" in names and b"user-agent" not in names
    assert b"cookie" not in names and names.count(b"host") == 1
    assert seen[0].status_code == 302  # redirects are relayed, never followed
    assert seen[0].headers["set-cookie"] == "s=1"
    assert seen[0].content == b"ok"


@both
def test_a_post_body_goes_out_with_its_length(kind: str) -> None:
    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        await fetch(transport, httpx.Request("POST", backing.url(), content=b'{"a": 1}'))
        await fetch(transport, httpx.Request("POST", backing.url()))

    backing = run_with(kind, (), steps)
    (_, first, body), (_, second, empty) = backing.requests
    assert body == b'{"a": 1}' and b"content-length: 8" in first.lower()
    assert empty == b"" and b"content-length: 0" in second.lower()
    assert b"transfer-encoding" not in first.lower() + second.lower()


@both
def test_a_body_given_as_a_stream_goes_out_whole(kind: str) -> None:
    """The forwarder builds its requests over a byte stream (``stream=``), never ``content=``:
    every transport must send such a body, not only a pre-read one."""
    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        body = b'{"updates": []}'
        await fetch(transport, httpx.Request(
            "POST", backing.url(), headers=[(b"content-length", str(len(body)).encode())],
            stream=httpx.ByteStream(body)))

    backing = run_with(kind, (), steps)
    (_, head, body), = backing.requests
    assert body == b'{"updates": []}' and b"content-length: 15" in head.lower()


@both
def test_chunked_answers_are_read_and_connections_reused(kind: str) -> None:
    chunked = (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
               b"3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n")
    bodies: list[bytes] = []

    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        for _ in range(3):
            bodies.append((await fetch(transport, httpx.Request("GET", backing.url()))).content)

    backing = run_with(kind, (Answer(chunked), Answer(chunked)), steps)
    assert bodies == [b"abcdefg", b"abcdefg", b"ok"]
    assert backing.connections == 1


@both
def test_bodiless_answers_keep_the_connection_in_step(kind: str) -> None:
    script = (Answer(b"HTTP/1.1 204 No Content\r\n\r\n"),
              Answer(b"HTTP/1.1 304 Not Modified\r\ncontent-length: 9\r\n\r\n"),
              Answer(b"HTTP/1.1 204 No Content\r\n\r\n"))
    statuses: list[tuple[int, bytes]] = []

    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        for method in ("GET", "GET", "HEAD", "GET"):
            response = await fetch(transport, httpx.Request(method, backing.url()))
            statuses.append((response.status_code, response.content))

    backing = run_with(kind, script, steps)
    assert statuses == [(204, b""), (304, b""), (204, b""), (200, b"ok")]
    assert backing.connections == 1


@both
def test_an_answer_to_head_with_a_length_has_no_body(kind: str) -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"
    seen: list[httpx.Response] = []

    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        seen.append(await fetch(transport, httpx.Request("HEAD", backing.url())))
        seen.append(await fetch(transport, httpx.Request("GET", backing.url())))

    run_with(kind, (Answer(head),), steps)
    assert [(r.status_code, r.content) for r in seen] == [(200, b""), (200, b"ok")]


@both
def test_connection_close_answers_are_not_reused(kind: str) -> None:
    closing = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok"

    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        for _ in range(2):
            await fetch(transport, httpx.Request("GET", backing.url()))

    backing = run_with(kind, (Answer(closing, close=True),), steps)
    assert backing.connections == 2


@both
def test_an_answer_ended_by_closing_the_connection_is_read_whole(kind: str) -> None:
    seen: list[bytes] = []

    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        seen.append((await fetch(transport, httpx.Request("GET", backing.url()))).content)

    run_with(kind, (Answer(b"HTTP/1.1 200 OK\r\n\r\nuntil the end", close=True),), steps)
    assert seen == [b"until the end"]


@both
def test_a_backing_closing_mid_body_is_a_read_error(kind: str) -> None:
    cut = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly part"

    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        with pytest.raises(httpx.ReadError):
            await fetch(transport, httpx.Request("GET", backing.url()))
        assert (await fetch(transport, httpx.Request("GET", backing.url()))).content == b"ok"

    run_with(kind, (Answer(cut, close=True),), steps)


@both
def test_a_kept_alive_connection_dropped_by_the_backing_retries_a_get(kind: str) -> None:
    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        await fetch(transport, httpx.Request("GET", backing.url()))
        response = await fetch(transport, httpx.Request("GET", backing.url()))
        assert response.content == b"ok"

    backing = run_with(kind, (Answer(OK), Close()), steps)
    assert [number for number, _, _ in backing.requests] == [1, 1, 2]


@both
def test_a_kept_alive_connection_dropped_on_a_post_fails_without_a_resend(kind: str) -> None:
    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        await fetch(transport, httpx.Request("GET", backing.url()))
        with pytest.raises(httpx.TransportError):
            await fetch(transport, httpx.Request("POST", backing.url(), content=b"{}"))

    backing = run_with(kind, (Answer(OK), Close()), steps)
    assert [head.split(b" ")[0] for _, head, _ in backing.requests] == [b"GET", b"POST"]


@both
@pytest.mark.parametrize("answer", [
    pytest.param(b"not http at all\r\n\r\n", id="garbage"),
    pytest.param(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ntransfer-encoding: chunked\r\n\r\n"
                 b"2\r\nok\r\n0\r\n\r\n", id="length-and-chunked"),
    pytest.param(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 30\r\n\r\nok",
                 id="two-lengths"),
    pytest.param(b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * 100_000 + b"\r\n\r\n", id="huge-head"),
    pytest.param(b"HTTP/1.1 200 OK\r\nbad header\r\ncontent-length: 2\r\n\r\nok",
                 id="headerless-line"),
    pytest.param(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nok\r\n0\r\n\r\n",
                 id="bad-chunk"),
])
def test_malformed_or_smuggling_answers_are_transport_errors(kind: str, answer: bytes) -> None:
    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        with pytest.raises(httpx.TransportError):
            await fetch(transport, httpx.Request("GET", backing.url()))
        assert (await fetch(transport, httpx.Request("GET", backing.url()))).content == b"ok"

    run_with(kind, (Answer(answer),), steps)


@both
def test_a_silent_backing_is_a_read_timeout(kind: str) -> None:
    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        timeout = httpx.Timeout(5, read=0.2).as_dict()
        with pytest.raises(httpx.ReadTimeout):
            await fetch(transport, httpx.Request("GET", backing.url(),
                                                 extensions={"timeout": timeout}))

    run_with(kind, (Hold(),), steps)


@both
def test_a_refused_connection_is_a_connect_error_without_os_text(kind: str) -> None:
    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        listener = await asyncio.start_server(backing.handle, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        listener.close()
        await listener.wait_closed()  # nothing listens on that port any more
        with pytest.raises(httpx.ConnectError) as caught:
            await fetch(transport, httpx.Request("GET", f"http://127.0.0.1:{port}/v1/config"))
        assert "refused" not in str(caught.value).lower()
        assert "errno" not in str(caught.value).lower()

    run_with(kind, (), steps)


@both
def test_the_pool_limit_bounds_connections(kind: str) -> None:
    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        answers = await asyncio.gather(*(
            fetch(transport, httpx.Request("GET", backing.url())) for _ in range(12)))
        assert [r.content for r in answers] == [b"ok"] * 12

    backing = run_with(kind, (), steps, max_connections=2)
    assert backing.most_open <= 2 and len(backing.requests) == 12


@both
def test_waiting_for_a_busy_pool_times_out(kind: str) -> None:
    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        held = asyncio.ensure_future(
            transport.handle_async_request(httpx.Request("GET", backing.url())))
        while not backing.requests:  # the one connection is taken by the held request
            await asyncio.sleep(0.005)
        timeout = httpx.Timeout(5, pool=0.2).as_dict()
        with pytest.raises(httpx.TimeoutException):
            await fetch(transport, httpx.Request("GET", backing.url(),
                                                 extensions={"timeout": timeout}))
        held.cancel()
        with contextlib.suppress(asyncio.CancelledError, httpx.TransportError):
            await held

    run_with(kind, (Hold(),), steps, max_connections=1)


@both
def test_closing_the_transport_closes_its_connections(kind: str) -> None:
    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        await fetch(transport, httpx.Request("GET", backing.url()))
        assert backing.open_now == 1
        await transport.aclose()
        for _ in range(200):  # the server notices the close within its next reads
            if backing.open_now == 0:
                break
            await asyncio.sleep(0.005)
        assert backing.open_now == 0

    run_with(kind, (), steps)
