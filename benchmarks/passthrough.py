"""Passthrough cost of the proxy hop: loadTable directly against a catalog and through icegov.

Starts the embedded catalog standalone (``icegov catalog``, its own process and loopback port),
seeds a table with a few snapshots, then, for each *variant* of the proxy (how icegov reaches the
backing and how it is served), starts a governed icegov forwarding to that catalog and measures
loadTable both ways in the same run:

* clients = 1: sequential requests on one keep-alive connection, direct and proxied interleaved
  request by request (order flipped each round), so both see the same machine state;
* clients = 16, 64, 256 (and 1): N concurrent keep-alive clients for a fixed time, direct and
  proxied rounds alternating; latency percentiles over every request of the rounds, requests per
  second, and requests per CPU-second of the serving processes (read from ``/proc``), which is
  the throughput per core.

A variant is ``TRANSPORT/HTTP/LOOP/wN``: the httpx transport to the backing (``aiohttp``:
``benchmarks/aiohttp_transport.py``; ``httptools``:
``proxy.backing.httptools_transport.HttptoolsTransport``; ``httpx``: httpx's own pooled
``AsyncHTTPTransport`` over httpcore; ``httpx-aiohttp``: the PyPI package of that name, if
installed; ``bare`` / ``bare-httptools``: not icegov but a bare relay over the aiohttp /
httptools transport, the floor of a Python hop), uvicorn's HTTP parser (``httptools`` or
``h11``), its event loop (``uvloop`` or ``asyncio``) and N uvicorn workers (started here with a
factory). ``cli`` is ``icegov serve`` itself and ``cli/wN`` is ``icegov serve --workers N``.
``caddy`` is not Python at all: Caddy's ``reverse_proxy`` (Debian's ``caddy`` package, when
installed), the reference the hop target was set against, measured on the same machine in the
same run.
Every variant but the bare relays runs the same governed app (``create_app``): bearer token for
the demo ``admin``, the policy in ``policies/``, audit to a file. The direct catalog receives
the same header and ignores it.

Run: ``python benchmarks/passthrough.py`` (``--quick`` for a seconds-long smoke run).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
from pyiceberg.catalog.rest import RestCatalog

ICEGOV = [sys.executable, "-c", "from proxy.cli import main; main()"]
REPO = Path(__file__).resolve().parents[1]
TRANSPORT_ENV = "ICEGOV_BENCH_TRANSPORT"
DEFAULT_VARIANTS = (*(("caddy",) if shutil.which("caddy") else ()), "cli", "cli/w2",
                    "aiohttp/httptools/uvloop/w1", "httptools/httptools/uvloop/w1",
                    "bare/httptools/uvloop/w1",
                    "bare-httptools/httptools/uvloop/w1")
GOVERNED = {
    "ICEGOV__IDENTITY__SIGNING_KEY": "benchmark-signing-key-of-at-least-32-bytes",
    "ICEGOV__IDENTITY__PRINCIPALS_FILE": str(REPO / "policies" / "principals.yaml"),
    "ICEGOV__POLICY__MODEL_PATH": str(REPO / "policies" / "model.conf"),
    "ICEGOV__POLICY__POLICY_PATH": str(REPO / "policies" / "policy.csv"),
    "ICEGOV__AUDIT__STDOUT": "false",
}


def proxy_app() -> Any:
    """uvicorn factory: the governed icegov app from ``ICEGOV__*`` settings, reaching the
    backing through the transport named by ``ICEGOV_BENCH_TRANSPORT``."""
    from proxy.app import Backing, create_app
    from proxy.settings import load_settings

    settings = load_settings()
    assert settings.catalog_uri is not None
    kind = os.environ.get(TRANSPORT_ENV, "aiohttp")
    if kind.startswith("bare"):
        return bare_hop(settings.catalog_uri, transport_for(kind.partition("-")[2] or "aiohttp",
                                                            settings.max_connections))
    transport = transport_for(kind, settings.max_connections)
    return create_app(settings, Backing(transport, settings.catalog_uri, [transport.aclose]))


def transport_for(kind: str, max_connections: int) -> httpx.AsyncBaseTransport:
    """The httpx transport a variant forwards with."""
    from benchmarks.aiohttp_transport import AiohttpTransport
    from proxy.backing.httptools_transport import HttptoolsTransport

    if kind == "aiohttp":
        return AiohttpTransport(max_connections)
    if kind == "httptools":
        return HttptoolsTransport(max_connections)
    if kind == "httpx-aiohttp":
        from httpx_aiohttp import AiohttpTransport as PackagedTransport

        return PackagedTransport(limits=httpx.Limits(max_connections=max_connections))
    limits = httpx.Limits(max_connections=max_connections,
                          max_keepalive_connections=max_connections)
    return httpx.AsyncHTTPTransport(limits=limits, retries=0)


def bare_hop(backing: str, transport: httpx.AsyncBaseTransport) -> Any:
    """The floor: an ASGI app that only relays GETs to ``backing`` over ``transport`` (no
    routing, authentication, policy, audit, metrics or middleware)."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        query = scope["query_string"]
        target = scope["raw_path"] + (b"?" + query if query else b"")
        request = httpx.Request(scope["method"], backing + target.decode("latin-1"),
                                headers=[h for h in scope["headers"] if h[0] != b"host"])
        response = await transport.handle_async_request(request)
        body = await response.aread()
        await response.aclose()
        await send({"type": "http.response.start", "status": response.status_code,
                    "headers": [(k.lower(), v) for k, v in response.headers.raw]})
        await send({"type": "http.response.body", "body": body})

    return app


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    url: str
    pid: int


@contextlib.contextmanager
def icegov_server(args: list[str], port: int,
                  env: dict[str, str] | None = None) -> Iterator[str]:
    """Run an ``icegov`` subcommand on ``port`` until the block ends; yields its URL (what the
    commit benchmarks use)."""
    with server([*ICEGOV, *args, "--port", str(port)], port, env) as running:
        yield running.url


@contextlib.contextmanager
def server(command: list[str], port: int, env: dict[str, str] | None = None) -> Iterator[Server]:
    """Run a server command listening on ``port`` until the block ends."""
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               env={**os.environ, **(env or {})}, cwd=REPO)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"server exited: {process.stderr.read().decode()}")  # type: ignore[union-attr]
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/healthz", timeout=1).status_code in (200, 404):
                    break
            time.sleep(0.05)
        else:
            raise RuntimeError(f"server did not start on {url}")
        yield Server(url, process.pid)
    finally:
        process.terminate()
        process.wait(timeout=20)


def proxy_command(variant: str, port: int, backing: str = "",
                  workdir: Path | None = None) -> tuple[list[str], dict[str, str]]:
    """The command line and extra environment that serve icegov as ``variant`` (``caddy``:
    Caddy relaying to ``backing``, its config written in ``workdir``)."""
    if variant == "caddy":
        return caddy_command(port, backing, workdir or Path(tempfile.mkdtemp()))
    if variant == "cli" or variant.startswith("cli/w"):
        workers = variant.removeprefix("cli").removeprefix("/w") or "1"
        return [*ICEGOV, "serve", "--port", str(port), "--workers", workers], {}
    transport, http, loop, workers = variant.split("/")
    return [sys.executable, "-m", "uvicorn", f"{Path(__file__).stem}:proxy_app", "--factory",
            "--app-dir", str(Path(__file__).parent), "--port", str(port),
            "--workers", workers.removeprefix("w"), "--http", http, "--loop", loop,
            "--no-access-log", "--timeout-keep-alive", "75", "--log-level", "warning"], \
        {TRANSPORT_ENV: transport}


def caddy_command(port: int, backing: str,
                  workdir: Path) -> tuple[list[str], dict[str, str]]:
    """Caddy as a plain reverse proxy in front of ``backing`` on loopback ``port``: no admin
    endpoint, no TLS, no logs; its state under ``workdir``."""
    if shutil.which("caddy") is None:
        raise SystemExit("the caddy variant needs Caddy: apt-get install caddy")
    config = workdir / "Caddyfile"
    config.write_text("{\n\tadmin off\n\tauto_https off\n}\n"
                      f"http://127.0.0.1:{port} {{\n"
                      f"\treverse_proxy {backing.removeprefix('http://')}\n}}\n")
    return (["caddy", "run", "--config", str(config), "--adapter", "caddyfile"],
            {"XDG_DATA_HOME": str(workdir), "XDG_CONFIG_HOME": str(workdir)})


def cpu_seconds(root: int) -> float:
    """User + system CPU seconds of ``root`` and its live descendants."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                parents[int(entry)] = int(fields[1])
                times[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        tree.update(children)
        frontier.extend(children)
    return sum(times.get(pid, 0.0) for pid in tree)


def seed(catalog_url: str, snapshots: int) -> str:
    """A table with ``snapshots`` appends; returns its loadTable path."""
    catalog = RestCatalog("bench", uri=catalog_url)
    catalog.create_namespace("bench")
    rows = pa.table({"id": pa.array(range(100), pa.int64()), "name": [str(i) for i in range(100)]})
    table = catalog.create_table("bench.events", rows.schema)
    for _ in range(snapshots):
        table.append(rows)
    return "/v1/namespaces/bench/tables/events"


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def admin_headers(proxied: str) -> dict[str, str]:
    response = httpx.post(f"{proxied}/v1/oauth/tokens", data={
        "grant_type": "client_credentials", "client_id": "admin", "client_secret": "admin-secret"})
    response.raise_for_status()
    return {"authorization": f"Bearer {response.json()['access_token']}"}


def interleaved_latency(direct: str, proxied: str, path: str, n: int,
                        headers: dict[str, str]) -> dict[str, list[float]]:
    """Milliseconds per request each way, alternating request by request on warm connections."""
    times: dict[str, list[float]] = {direct: [], proxied: []}
    with httpx.Client(base_url=direct, headers=headers) as a, \
            httpx.Client(base_url=proxied, headers=headers) as b:
        clients = {direct: a, proxied: b}
        for client in clients.values():
            for _ in range(min(n, 50)):
                client.get(path).raise_for_status()
        for i in range(n):
            for url in ((direct, proxied) if i % 2 == 0 else (proxied, direct)):
                start = time.perf_counter()
                response = clients[url].get(path)
                times[url].append((time.perf_counter() - start) * 1000)
                assert response.status_code == 200, response.text
    return times


async def _load(url: str, path: str, clients: int, seconds: float,
                headers: dict[str, str]) -> list[float]:
    """``clients`` closed-loop clients for ``seconds``; each request's milliseconds.

    Each client has its own single-connection httpx client: one shared pool of N connections
    costs httpcore time that grows with N per request, which at 64+ clients measured the
    load generator instead of the servers."""
    latencies: list[float] = []
    async with contextlib.AsyncExitStack() as stack:
        pool = [await stack.enter_async_context(httpx.AsyncClient(
            base_url=url, headers=headers, timeout=60, limits=httpx.Limits(max_connections=1)))
            for _ in range(clients)]
        await asyncio.gather(*(client.get(path) for client in pool))  # open the connections
        deadline = time.monotonic() + seconds

        async def worker(client: httpx.AsyncClient) -> None:
            while time.monotonic() < deadline:
                start = time.perf_counter()
                response = await client.get(path)
                latencies.append((time.perf_counter() - start) * 1000)
                assert response.status_code == 200, response.text

        await asyncio.gather(*(worker(client) for client in pool))
    return latencies


@dataclass
class Side:
    """One side's measure at one client count."""

    latencies: list[float]
    requests_per_second: float
    requests_per_cpu_second: float

    @property
    def p50(self) -> float:
        return statistics.median(self.latencies)

    @property
    def p99(self) -> float:
        return percentile(self.latencies, 0.99)


def load(sides: dict[str, Server], path: str, clients: int, rounds: int, seconds: float,
         headers: dict[str, str]) -> dict[str, Side]:
    """Alternating rounds of closed-loop load on each side; median round's rate."""
    latencies: dict[str, list[float]] = {name: [] for name in sides}
    rates: dict[str, list[float]] = {name: [] for name in sides}
    per_cpu: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    for i in range(rounds):
        for name in (names if i % 2 == 0 else names[::-1]):
            cpu = cpu_seconds(sides[name].pid)
            started = time.perf_counter()
            done = asyncio.run(_load(sides[name].url, path, clients, seconds, headers))
            elapsed = time.perf_counter() - started
            cpu = cpu_seconds(sides[name].pid) - cpu
            latencies[name].extend(done)
            rates[name].append(len(done) / elapsed)
            per_cpu[name].append((len(done) + clients) / cpu if cpu > 0 else float("nan"))
    return {name: Side(latencies[name], statistics.median(rates[name]),
                       statistics.median(per_cpu[name])) for name in sides}


HEADER = ("| variant | clients | direct p50 ms | icegov p50 ms | added p50 ms | direct p99 ms "
          "| icegov p99 ms | added p99 ms | direct req/s | icegov req/s | catalog req/CPU-s "
          "| icegov req/CPU-s |\n|---|---|---|---|---|---|---|---|---|---|---|---|")


def row(variant: str, clients: int, direct: Side, proxied: Side) -> str:
    return (f"| {variant} | {clients} | {direct.p50:.3f} | {proxied.p50:.3f} "
            f"| {proxied.p50 - direct.p50:+.3f} | {direct.p99:.3f} | {proxied.p99:.3f} "
            f"| {proxied.p99 - direct.p99:+.3f} | {direct.requests_per_second:.0f} "
            f"| {proxied.requests_per_second:.0f} | {direct.requests_per_cpu_second:.0f} "
            f"| {proxied.requests_per_cpu_second:.0f} |")


def sweep(variant: str, catalog: Server, path: str, args: argparse.Namespace,
          audit_file: Path) -> Iterator[str]:
    """Rows for one proxy variant at every client count."""
    command, extra = proxy_command(variant, port := free_port(), catalog.url, audit_file.parent)
    env = {**GOVERNED, "ICEGOV__AUDIT__FILE": str(audit_file),
           "ICEGOV__CATALOG_URI": catalog.url, **extra}
    with server(command, port, env) as proxy:
        bare = variant.startswith(("bare", "caddy"))  # relays the token request: no icegov token
        headers = {"authorization": "Bearer bare"} if bare else admin_headers(proxy.url)
        sides = {"direct": catalog, "icegov": proxy}
        for clients in args.clients:
            measured = load(sides, path, clients, args.rounds, args.seconds, headers)
            if clients == 1:  # the tighter, request-by-request interleaved latency
                times = interleaved_latency(catalog.url, proxy.url, path, args.requests, headers)
                measured["direct"].latencies = times[catalog.url]
                measured["icegov"].latencies = times[proxy.url]
            yield row(variant, clients, measured["direct"], measured["icegov"])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000,
                        help="interleaved latency samples per side at 1 client")
    parser.add_argument("--snapshots", type=int, default=20, help="snapshots in the seeded table")
    parser.add_argument("--rounds", type=int, default=2, help="load rounds per side")
    parser.add_argument("--seconds", type=float, default=2.0, help="length of one load round")
    parser.add_argument("--clients", type=lambda s: [int(c) for c in s.split(",")],
                        default=[1, 16, 64, 256], help="comma-separated client counts")
    parser.add_argument("--variants", type=lambda s: s.split(","), default=list(DEFAULT_VARIANTS),
                        help="comma-separated: cli or TRANSPORT/HTTP/LOOP/wN")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 100 requests, 1 round of 0.3 s at 1 and 8 clients")
    args = parser.parse_args(argv)
    if args.quick:
        args.requests, args.rounds, args.seconds, args.clients = 100, 1, 0.3, [1, 8]
        args.snapshots = 2
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, \
            server([*ICEGOV, "catalog", "--warehouse", str(Path(tmp) / "wh"), "--port",
                    str(port := free_port())], port) as catalog:
        path = seed(catalog.url, args.snapshots)
        load_average = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"# loadTable passthrough: table with {args.snapshots} snapshots, "
              f"{args.requests} interleaved requests per side at 1 client, "
              f"{args.rounds}x{args.seconds:g}s load rounds per side, {os.cpu_count()} cores, "
              f"load average before {load_average}")
        print(HEADER, flush=True)
        for index, variant in enumerate(args.variants):
            for line in sweep(variant, catalog, path, args, Path(tmp) / f"audit-{index}.log"):
                print(line, flush=True)


if __name__ == "__main__":
    main()
