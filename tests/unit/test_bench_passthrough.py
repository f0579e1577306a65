"""The passthrough benchmark (a smoke run of its sweep) and the Forwarder's URL cache (the
transports' contract is in test_transport_contract.py)."""

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
    variants = ["cli/w2", "httptools/httptools/uvloop/w2", "bare-httptools/h11/asyncio/w1"]
    bench.main(["--quick", "--variants", ",".join(variants)])
    rows = [line for line in capsys.readouterr().out.splitlines()
            if line.split(" | ")[0].lstrip("| ") in variants]
    assert [tuple(r.split(" | ")[:2]) for r in rows] == [
        (f"| {variant}", clients) for variant in variants for clients in ("1", "8")]
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
    assert command[command.index("--workers") + 1] == "1"
    command, env = bench.proxy_command("cli/w2", 9999)
    assert "serve" in command and command[command.index("--workers") + 1] == "2" and env == {}
    command, env = bench.proxy_command("bare-httptools/httptools/uvloop/w1", 9999)
    assert env == {bench.TRANSPORT_ENV: "bare-httptools"}


def test_caddy_variant_relays_to_the_catalog(tmp_path: Path) -> None:
    """The reference proxy: Caddy's reverse_proxy to the backing, no admin port, no TLS, its
    state kept in the run's directory (measured when Caddy is installed)."""
    if bench.shutil.which("caddy") is None:
        with pytest.raises(SystemExit, match="apt-get install caddy"):
            bench.proxy_command("caddy", 9999, "http://127.0.0.1:8181", tmp_path)
        return
    command, env = bench.proxy_command("caddy", 9999, "http://127.0.0.1:8181", tmp_path)
    assert command[:2] == ["caddy", "run"]
    config = (tmp_path / "Caddyfile").read_text()
    assert "admin off" in config and "http://127.0.0.1:9999 {" in config
    assert "reverse_proxy 127.0.0.1:8181" in config
    assert env == {"XDG_DATA_HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}


def test_variant_transports() -> None:
    from benchmarks.aiohttp_transport import AiohttpTransport
    from proxy.backing.httptools_transport import HttptoolsTransport

    assert isinstance(bench.transport_for("aiohttp", 4), AiohttpTransport)
    assert isinstance(bench.transport_for("httptools", 4), HttptoolsTransport)
    assert isinstance(bench.transport_for("httpx", 4), httpx.AsyncHTTPTransport)


def test_cpu_seconds_counts_this_process() -> None:
    before = bench.cpu_seconds(os.getpid())
    sum(i * i for i in range(2_000_000))
    assert bench.cpu_seconds(os.getpid()) > before


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
