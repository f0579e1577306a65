"""Passthrough cost of the proxy: the same requests directly against a catalog and through icegov.

Starts the embedded catalog standalone (``icegov catalog``) and an icegov proxy forwarding to it
(``icegov serve --catalog-uri``), each in its own process on a loopback port, seeds a table with a
few snapshots, then measures ``GET /v1/config`` and loadTable both ways:

* latency: sequential requests on one keep-alive connection, direct and proxied interleaved
  request by request, so both see the same machine state;
* throughput: N concurrent keep-alive clients for a fixed time, direct and proxied alternating.

The proxy runs with governance on (the default): every request carries a bearer token for the
demo ``admin`` principal, which icegov verifies, and every request is decided by the policy in
``policies/`` and written to the audit stream (to a file here). The direct catalog receives the
same header and ignores it.

Prints one table with ratios (proxy / direct). Run: ``python benchmarks/passthrough.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pyarrow as pa
from pyiceberg.catalog.rest import RestCatalog

ICEGOV = [sys.executable, "-c", "from proxy.cli import main; main()"]
REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def server(args: list[str], port: int, env: dict[str, str] | None = None) -> Iterator[str]:
    """Run an ``icegov`` subcommand on ``port`` until the block ends; yields its URL."""
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen([*ICEGOV, *args, "--port", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               env={**os.environ, **(env or {})})
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"{args[0]} exited: {process.stderr.read().decode()}")  # type: ignore[union-attr]
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/healthz", timeout=1).status_code in (200, 404):
                    break
        else:
            raise RuntimeError(f"{args[0]} did not start on {url}")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def seed(catalog_url: str, snapshots: int) -> str:
    """A table with ``snapshots`` appends; returns its loadTable path."""
    catalog = RestCatalog("bench", uri=catalog_url)
    catalog.create_namespace("bench")
    rows = pa.table({"id": pa.array(range(100), pa.int64()), "name": [str(i) for i in range(100)]})
    table = catalog.create_table("bench.events", rows.schema)
    for _ in range(snapshots):
        table.append(rows)
    return "/v1/namespaces/bench/tables/events"


@dataclass
class Latency:
    p50_ms: float
    p99_ms: float


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def admin_headers(proxied: str) -> dict[str, str]:
    response = httpx.post(f"{proxied}/v1/oauth/tokens", data={
        "grant_type": "client_credentials", "client_id": "admin", "client_secret": "admin-secret"})
    response.raise_for_status()
    return {"authorization": f"Bearer {response.json()['access_token']}"}


def interleaved_latency(direct: str, proxied: str, path: str, n: int,
                        headers: dict[str, str]) -> tuple[Latency, Latency]:
    """Alternate direct and proxied requests (order flipped each round) on warm connections."""
    times: dict[str, list[float]] = {direct: [], proxied: []}
    with httpx.Client(base_url=direct, headers=headers) as a, \
            httpx.Client(base_url=proxied, headers=headers) as b:
        clients = {direct: a, proxied: b}
        for client in clients.values():
            for _ in range(50):
                client.get(path).raise_for_status()
        for i in range(n):
            order = (direct, proxied) if i % 2 == 0 else (proxied, direct)
            for url in order:
                start = time.perf_counter()
                response = clients[url].get(path)
                times[url].append((time.perf_counter() - start) * 1000)
                assert response.status_code == 200, response.text
    return tuple(  # type: ignore[return-value]
        Latency(statistics.median(times[u]), percentile(times[u], 0.99)) for u in (direct, proxied))


async def _throughput(url: str, path: str, concurrency: int, seconds: float,
                      headers: dict[str, str]) -> float:
    done = 0
    deadline = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, headers=headers) as client:
        async def worker() -> None:
            nonlocal done
            while time.monotonic() < deadline:
                response = await client.get(path)
                assert response.status_code == 200
                done += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done / seconds


def throughput(direct: str, proxied: str, path: str, rounds: int, seconds: float,
               concurrency: int, headers: dict[str, str]) -> tuple[float, float]:
    """Requests/second each way, alternating direct and proxied rounds; the median round."""
    results: dict[str, list[float]] = {direct: [], proxied: []}
    for i in range(rounds):
        for url in ((direct, proxied) if i % 2 == 0 else (proxied, direct)):
            results[url].append(
                asyncio.run(_throughput(url, path, concurrency, seconds, headers)))
    return statistics.median(results[direct]), statistics.median(results[proxied])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000, help="latency samples per side")
    parser.add_argument("--snapshots", type=int, default=20, help="snapshots in the seeded table")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp, \
            server(["catalog", "--warehouse", str(Path(tmp) / "wh")], free_port()) as direct:
        table_path = seed(direct, args.snapshots)
        governed = {
            "ICEGOV__IDENTITY__SIGNING_KEY": "benchmark-signing-key-of-at-least-32-bytes",
            "ICEGOV__IDENTITY__PRINCIPALS_FILE": str(REPO / "policies" / "principals.yaml"),
            "ICEGOV__POLICY__MODEL_PATH": str(REPO / "policies" / "model.conf"),
            "ICEGOV__POLICY__POLICY_PATH": str(REPO / "policies" / "policy.csv"),
            "ICEGOV__AUDIT__STDOUT": "false",
            "ICEGOV__AUDIT__FILE": str(Path(tmp) / "audit.log"),
        }
        with server(["serve", "--catalog-uri", direct], free_port(), governed) as proxied:
            headers = admin_headers(proxied)
            print(f"# passthrough: {args.requests} interleaved requests per side, "
                  f"throughput {args.rounds}x{args.seconds:.0f}s "
                  f"at concurrency {args.concurrency}, "
                  f"table with {args.snapshots} snapshots, {os.cpu_count()} cores")
            print("| endpoint | direct p50 ms | proxy p50 ms | p50 ratio | added p50 ms "
                  "| direct p99 ms | proxy p99 ms | p99 ratio | direct req/s | proxy req/s "
                  "| throughput ratio |")
            print("|---|---|---|---|---|---|---|---|---|---|---|")
            for name, path in (("GET /v1/config", "/v1/config"), ("loadTable", table_path)):
                d, p = interleaved_latency(direct, proxied, path, args.requests, headers)
                d_rps, p_rps = throughput(direct, proxied, path, args.rounds, args.seconds,
                                          args.concurrency, headers)
                print(f"| {name} | {d.p50_ms:.3f} | {p.p50_ms:.3f} | {p.p50_ms / d.p50_ms:.2f} "
                      f"| {p.p50_ms - d.p50_ms:.3f} | {d.p99_ms:.3f} | {p.p99_ms:.3f} "
                      f"| {p.p99_ms / d.p99_ms:.2f} | {d_rps:.0f} | {p_rps:.0f} "
                      f"| {p_rps / d_rps:.2f} |", flush=True)


if __name__ == "__main__":
    main()
