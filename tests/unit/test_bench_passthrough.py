"""The passthrough benchmark (a smoke run of its sweep) and the aiohttp transport icegov ships."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import sys
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from proxy.backing.forward import AiohttpTransport

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "passthrough.py"


def load_benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_passthrough", BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_passthrough"] = module
    spec.loader.exec_module(module)
    return module


bench = load_benchmark()
NUMBER = r"[-+]?\d+\.\d+|[-+]?\d+|nan"


def test_quick_sweep_prints_a_row_per_variant_and_client_count(
        capsys: pytest.CaptureFixture[str]) -> None:
    bench.main(["--quick", "--variants", "cli,httpx/httptools/uvloop/w2"])
    rows = [line for line in capsys.readouterr().out.splitlines()
            if line.startswith("| cli |") or line.startswith("| httpx/")]
    assert [tuple(r.split(" | ")[:2]) for r in rows] == [
        ("| cli", "1"), ("| cli", "8"),
        ("| httpx/httptools/uvloop/w2", "1"), ("| httpx/httptools/uvloop/w2", "8")]
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")][2:]
        assert len(cells) == 10 and all(re.fullmatch(NUMBER, c) for c in cells), line
        direct_p50, icegov_p50 = float(cells[0]), float(cells[1])
        assert direct_p50 > 0 and icegov_p50 > 0
        assert float(cells[7]) > 0  # icegov served requests: its req/s is not zero


def test_variant_command_lines() -> None:
    command, env = bench.proxy_command("aiohttp/h11/asyncio/w3", 9999)
    assert command[command.index("--workers") + 1] == "3"
    assert command[command.index("--http") + 1] == "h11"
    assert command[command.index("--loop") + 1] == "asyncio"
    assert env == {bench.TRANSPORT_ENV: "aiohttp"}
    command, env = bench.proxy_command("cli", 9999)
    assert "serve" in command and env == {}


def test_cpu_seconds_counts_this_process() -> None:
    before = bench.cpu_seconds(os.getpid())
    sum(i * i for i in range(2_000_000))
    assert bench.cpu_seconds(os.getpid()) > before


async def _exchange(request: httpx.Request, answer: bytes | None) -> tuple[bytes, httpx.Response]:
    """Send ``request`` (its URL's port replaced) through AiohttpTransport to a raw server that
    records the bytes it receives and answers ``answer`` (None: never answers)."""
    received = bytearray()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.extend(await reader.readuntil(b"\r\n\r\n"))
        if answer is None:
            await asyncio.sleep(5)
        else:
            writer.write(answer)
            await writer.drain()
        writer.close()

    listener = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    request.url = request.url.copy_with(port=port)
    transport = AiohttpTransport(max_connections=4)
    try:
        response = await transport.handle_async_request(request)
        await response.aread()
    finally:
        await transport.aclose()
        listener.close()
    return bytes(received), response


def test_aiohttp_transport_sends_the_raw_path_and_only_the_given_headers() -> None:
    url = httpx.URL("http://127.0.0.1/v1/namespaces/a%1Fb/tables/t%2Fx?x=%2F&y=1")
    request = httpx.Request("GET", url, headers=[(b"authorization", b"Bearer t")])
    received, response = asyncio.run(_exchange(request, (
        b"HTTP/1.1 302 Found\r\nlocation: /elsewhere\r\nset-cookie: s=1\r\n"
        b"content-length: 2\r\n\r\nok")))
    head = received.split(b"\r\n")
    assert head[0] == b"GET /v1/namespaces/a%1Fb/tables/t%2Fx?x=%2F&y=1 HTTP/1.1"
    names = {line.split(b":")[0].lower() for line in head[1:] if line}
    assert b"authorization" in names and b"user-agent" not in names
    assert b"cookie" not in names
    assert response.status_code == 302  # redirects are relayed, never followed
    assert response.headers["set-cookie"] == "s=1"
    assert response.content == b"ok"


def test_aiohttp_transport_failures_are_httpx_transport_errors() -> None:
    request = httpx.Request("GET", "http://127.0.0.1/v1/config")
    with pytest.raises(httpx.TransportError):
        asyncio.run(_exchange(request, b"not http at all\r\n\r\n"))


def test_aiohttp_transport_read_timeout_is_an_httpx_timeout() -> None:
    request = httpx.Request("GET", "http://127.0.0.1/v1/config",
                            extensions={"timeout": httpx.Timeout(5, read=0.2).as_dict()})
    with pytest.raises(httpx.ReadTimeout):
        asyncio.run(_exchange(request, None))


def test_aiohttp_transport_refused_connection_is_an_httpx_connect_error() -> None:
    port = bench.free_port()  # nothing listens there

    async def send() -> None:
        transport = AiohttpTransport(max_connections=1)
        try:
            await transport.handle_async_request(
                httpx.Request("GET", f"http://127.0.0.1:{port}/v1/config"))
        finally:
            await transport.aclose()

    with pytest.raises(httpx.ConnectError) as caught:
        asyncio.run(send())
    assert "refused" not in str(caught.value).lower()  # names the kind, never the OS text


def test_forwarder_url_cache_is_bounded_and_keeps_raw_targets() -> None:
    from proxy.backing import forward
    from proxy.backing.auth import PassThroughAuth

    seen: list[bytes] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.raw_path)
        return httpx.Response(200)

    forwarder = forward.Forwarder(httpx.MockTransport(answer), "http://up/catalog",
                                  PassThroughAuth(), httpx.Timeout(5))
    long_path = b"/v1/namespaces/" + b"n" * forward.URL_CACHE_TARGET_BYTES

    async def fetch_all() -> None:
        for i in range(forward.URL_CACHE_ENTRIES + 10):
            await forwarder.fetch(b"/v1/namespaces/n%1F" + str(i).encode(), b"a=%2F", ())
        await forwarder.fetch(b"/v1/namespaces/n%1F0", b"a=%2F", ())  # again, after a clear
        await forwarder.fetch(long_path, b"", ())

    asyncio.run(fetch_all())
    assert seen[0] == seen[-2] == b"/catalog/v1/namespaces/n%1F0?a=%2F"
    assert seen[-1] == b"/catalog" + long_path
    assert len(forwarder._urls) <= forward.URL_CACHE_ENTRIES
    assert all(len(target) <= forward.URL_CACHE_TARGET_BYTES for target in forwarder._urls)
