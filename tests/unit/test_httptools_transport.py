"""HttptoolsTransport beyond the shared contract: what it refuses to send, answers it must never
mistake for the next one, interim answers, cancellation, flow control and stale connections."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import uvloop

from proxy.backing import httptools_transport
from proxy.backing.httptools_transport import HttptoolsTransport
from tests.unit.test_transport_contract import (
    OK,
    Answer,
    Hold,
    ScriptedBacking,
    fetch,
    run_with,
    scripted,
)

FORGED = b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nforged"


@pytest.mark.parametrize("headers", [
    [(b"x-a", b"1\r\nx-injected: 1")],
    [(b"x-a", b"1\nx-injected: 1")],
    [(b"x-a", b"nul\x00")],
    [(b"x a", b"1")],
    [(b"x-a:b", b"1")],
    [(b"", b"1")],
])
def test_headers_that_could_split_the_request_are_refused_before_sending(
        headers: list[tuple[bytes, bytes]]) -> None:
    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        with pytest.raises(httpx.LocalProtocolError):
            await fetch(transport, httpx.Request("GET", backing.url(), headers=headers))

    backing = run_with("httptools", (), steps)
    assert backing.requests == [] and backing.connections == 0


@pytest.mark.parametrize("method", ["GET /v1/x HTTP/1.1\r\nx-a:", "G\u00c9T", ""])
def test_methods_that_could_split_the_request_line_are_refused(method: str) -> None:
    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        with pytest.raises(httpx.LocalProtocolError):
            await fetch(transport, httpx.Request(method, backing.url()))

    assert run_with("httptools", (), steps).requests == []


@pytest.mark.parametrize("kind", ["aiohttp", "httptools"])
def test_a_second_answer_in_the_same_write_never_answers_the_next_request(kind: str) -> None:
    bodies: list[bytes] = []

    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        for _ in range(2):
            bodies.append((await fetch(transport, httpx.Request("GET", backing.url()))).content)

    backing = run_with(kind, (Answer(OK + FORGED),), steps)
    assert bodies == [b"ok", b"ok"]
    assert [number for number, _, _ in backing.requests] == [1, 2]


@pytest.mark.parametrize("kind", ["aiohttp", "httptools"])
def test_a_body_sent_with_an_answer_to_head_never_answers_the_next_request(kind: str) -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-length: " + str(len(FORGED)).encode() + b"\r\n\r\n"
    bodies: list[bytes] = []

    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        try:  # httptools answers the HEAD and drops the connection; aiohttp fails the HEAD
            bodies.append((await fetch(transport, httpx.Request("HEAD", backing.url()))).content)
        except httpx.TransportError:
            assert kind == "aiohttp"
        bodies.append((await fetch(transport, httpx.Request("GET", backing.url()))).content)

    run_with(kind, (Answer(head + FORGED),), steps)
    assert bodies == ([b"", b"ok"] if kind == "httptools" else [b"ok"])


def test_bytes_on_an_idle_connection_close_it() -> None:
    writers: list[asyncio.StreamWriter] = []

    async def main() -> tuple[bytes, int]:
        async with scripted() as backing:
            original = backing.handle

            async def keep_writer(reader: asyncio.StreamReader,
                                  writer: asyncio.StreamWriter) -> None:
                writers.append(writer)
                await original(reader, writer)

            listener = await asyncio.start_server(keep_writer, "127.0.0.1", 0)
            backing.port = listener.sockets[0].getsockname()[1]
            transport = HttptoolsTransport(4)
            await fetch(transport, httpx.Request("GET", backing.url()))
            writers[0].write(FORGED)  # an answer nobody asked for, while the connection idles
            while backing.open_now:  # the transport closes that connection
                await asyncio.sleep(0.005)
            body = (await fetch(transport, httpx.Request("GET", backing.url()))).content
            await transport.aclose()
            listener.close()
            return body, backing.connections

    assert asyncio.run(asyncio.wait_for(main(), 20)) == (b"ok", 2)


@pytest.mark.parametrize("kind", ["aiohttp", "httptools"])
def test_interim_answers_are_skipped(kind: str) -> None:
    interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n"
    seen: list[httpx.Response] = []

    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        seen.append(await fetch(transport, httpx.Request("GET", backing.url())))

    run_with(kind, (Answer(interim + OK),), steps)
    assert (seen[0].status_code, seen[0].content) == (200, b"ok")
    assert "link" not in seen[0].headers


def test_switching_protocols_is_refused() -> None:
    upgrade = b"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: x\r\n\r\nraw"

    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        with pytest.raises(httpx.RemoteProtocolError):
            await fetch(transport, httpx.Request("GET", backing.url()))

    run_with("httptools", (Answer(upgrade),), steps)


def test_requests_waiting_for_a_full_pool_are_served_in_turn() -> None:
    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        await asyncio.gather(*(fetch(transport, httpx.Request(
            "GET", backing.url(), headers=[(b"x-turn", b"%d" % turn)])) for turn in range(6)))

    backing = run_with("httptools", (), steps, max_connections=1)
    turns = [head.split(b"x-turn: ")[1].split(b"\r\n")[0] for _, head, _ in backing.requests]
    assert turns == [b"%d" % turn for turn in range(6)] and backing.connections == 1


def test_a_cancelled_exchange_frees_its_connection_and_slot() -> None:
    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        held = asyncio.ensure_future(fetch(transport, httpx.Request("GET", backing.url())))
        while not backing.requests:
            await asyncio.sleep(0.005)
        held.cancel()
        with pytest.raises(asyncio.CancelledError):
            await held
        assert (await fetch(transport, httpx.Request("GET", backing.url()))).content == b"ok"

    backing = run_with("httptools", (Hold(),), steps, max_connections=1)
    assert backing.connections == 2


def test_a_large_body_streams_under_flow_control_and_the_connection_is_kept() -> None:
    body = bytes(range(256)) * 8192  # 2 MiB: reading pauses and resumes several times
    big = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body) + body
    pieces: list[bytes] = []

    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        response = await transport.handle_async_request(httpx.Request("GET", backing.url()))
        async for piece in response.aiter_raw():
            pieces.append(piece)
            await asyncio.sleep(0)
        await response.aclose()
        await fetch(transport, httpx.Request("GET", backing.url()))

    backing = run_with("httptools", (Answer(big),), steps)
    assert b"".join(pieces) == body and backing.connections == 1


def test_an_old_idle_connection_is_not_trusted_with_a_post(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(httptools_transport, "STALE_AFTER_SECONDS", 0.0)

    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        await fetch(transport, httpx.Request("GET", backing.url()))
        await fetch(transport, httpx.Request("GET", backing.url()))  # reused: may be retried
        await fetch(transport, httpx.Request("POST", backing.url(), content=b"{}"))

    backing = run_with("httptools", (), steps)
    assert [number for number, _, _ in backing.requests] == [1, 1, 2]


def test_requests_after_close_fail_and_other_schemes_are_refused() -> None:
    async def steps(transport: httpx.AsyncBaseTransport, backing: ScriptedBacking) -> None:
        with pytest.raises(httpx.UnsupportedProtocol):
            await fetch(transport, httpx.Request("GET", "ftp://127.0.0.1/v1/config"))
        await transport.aclose()
        with pytest.raises(httpx.ConnectError):
            await fetch(transport, httpx.Request("GET", backing.url()))

    assert run_with("httptools", (), steps).requests == []


def test_it_runs_on_uvloop_as_icegov_serves() -> None:
    async def main() -> list[bytes]:
        async with scripted() as backing:
            transport = HttptoolsTransport(2)
            try:
                return [(await fetch(transport, httpx.Request("GET", backing.url()))).content
                        for _ in range(3)]
            finally:
                await transport.aclose()

    assert uvloop.run(main()) == [b"ok"] * 3
