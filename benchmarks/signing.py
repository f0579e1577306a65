"""S3 remote signing (issue 23): what one signature costs, and what signing does to a full scan.

The store is moto's S3 server behind the tests' signature-checking gateway
(``tests/support/s3_gateway.py``: every request's SigV4 signature is verified before moto sees
it), in a child process; icegov serves its embedded catalog on it with signing enabled
(``ICEGOV__SIGNING__ENABLED``), in another child process (``create_app`` on
``tests/support/servers.serve``). This process is the client.

**Signing cost** is the wall time of ``POST /v1/aws/s3/sign/<grant>`` for a ranged GET of one
data file, ``--signs`` times on one keep-alive connection, as the admin (the table's own
locations) and as ``eu-analyst`` (its governed snapshot's file list), beside ``GET /v1/config``
on the same connection (the proxy hop with no signing work), and the same sign request
through a keep-alive ``requests.Session`` (what pyiceberg's ``S3V4RestSigner`` posts with).
**Scan** is ``load_table(...).scan().to_arrow()`` of the whole table through pyiceberg's
fsspec FileIO (s3fs), signed (no storage credentials: every request signed by icegov; the time
spent in pyiceberg's signer hook is summed) and credentialed (the same table metadata read with
a FileIO holding the store's keys, signing locally), ``--scans`` times each, each arm first in
half the turns; medians. Both arms go through the same gateway, with fsspec's instance cache
off (``S3FileSystem.cachable = False``: pyiceberg's signer is not safe on a shared client).

Run: ``PYTHONPATH=$PWD:<s3fs site> python benchmarks/signing.py`` (defaults: 20 files of 100,000
rows, 500 signs, 5 scans each; ~1 min on 2 cores).
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.synchronize import Event
from pathlib import Path
from queue import Queue
from typing import Any

import httpx
import pyarrow as pa
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.io.fsspec import FsspecFileIO, S3V4RestSigner
from pyiceberg.table import Table

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # tests.support: the store, the gateway, the settings

from tests.support.http import as_principal  # noqa: E402
from tests.support.read_tables import EU_ANALYST  # noqa: E402
from tests.support.s3 import REGION, S3Store, embedded_on_s3  # noqa: E402
from tests.support.s3_gateway import gated_s3_server  # noqa: E402
from tests.support.settings import ADMIN  # noqa: E402

TABLE = "demo.orders"  # the eu-analyst reads its rows region = 'eu' (a governed snapshot)
SIGNED_IO = "pyiceberg.io.fsspec.FsspecFileIO"


def _run_store(urls: Queue[str], stop: Event) -> None:
    with gated_s3_server() as (store, _):
        urls.put(store.endpoint)
        stop.wait()


def _run_icegov(endpoint: str, workdir: str, urls: Queue[str], stop: Event) -> None:
    from proxy.app import create_app
    from tests.support.servers import serve
    from tests.support.settings import settings_for_tests

    store = S3Store(endpoint)
    settings = settings_for_tests(Path(workdir), **embedded_on_s3(store, Path(workdir)),
                                  signing={"enabled": True})
    with serve(create_app(settings)) as url:
        urls.put(url)
        stop.wait()


@contextmanager
def child(target: Callable[..., None], *args: Any) -> Iterator[str]:
    """Run ``target(*args, urls, stop)`` in a spawned process; yields the URL it reports."""
    context = multiprocessing.get_context("spawn")
    urls: Queue[str] = context.Queue()  # type: ignore[assignment]
    stop = context.Event()
    process = context.Process(target=target, args=(*args, urls, stop), daemon=True)
    process.start()
    try:
        yield urls.get(timeout=120)
    finally:
        stop.set()
        process.join(timeout=30)


def create_table(url: str, store: S3Store, files: int, rows: int) -> None:
    admin = RestCatalog("admin", uri=url, credential=ADMIN, **store.properties)
    admin.create_namespace_if_not_exists("demo")
    ids = pa.array(range(rows), pa.int64())
    batch = pa.table({"id": ids, "region": pa.array(["eu", "us"] * (rows // 2)),
                      "value": pa.array([float(i) for i in range(rows)])})
    table = admin.create_table(TABLE, batch.schema)
    for _ in range(files):
        table.append(batch)


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def sign_costs(url: str, store: S3Store, credential: str, count: int) -> dict[str, float]:
    """p50/p95 (ms) of signing one ranged GET of a data file, and of ``GET /v1/config``."""
    catalog = RestCatalog("c", uri=url, credential=credential,
                          **{"py-io-impl": SIGNED_IO, "s3.endpoint": store.endpoint,
                             "s3.region": REGION})
    path = next(iter(catalog.load_table(TABLE).scan().plan_files())).file.file_path
    with as_principal(url, credential) as http:
        http.timeout = httpx.Timeout(300)  # the eu-analyst's first loadTable waits for a build
        config = http.get(f"/v1/namespaces/demo/tables/{TABLE.split('.')[1]}").json()["config"]
        endpoint = "/" + config["s3.signer.endpoint"]
        body = {"region": REGION, "method": "GET", "headers": {"Range": ["bytes=0-1023"]},
                "uri": f"{store.endpoint}/{path.removeprefix('s3://')}"}
        signs = _timed(count, lambda: http.post(endpoint, json=body))
        configs = _timed(count, lambda: http.get("/v1/config"))
        with requests.Session() as session:  # what pyiceberg's S3V4RestSigner posts with
            session.headers["Authorization"] = http.headers["authorization"]
            posted = _timed(count, lambda: session.post(url + endpoint, json=body))
    return {"sign_p50": percentile(signs, 0.5), "sign_p95": percentile(signs, 0.95),
            "config_p50": percentile(configs, 0.5), "requests_p50": percentile(posted, 0.5)}


def _timed(count: int, call: Callable[[], Any]) -> list[float]:
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        response = call()
        samples.append((time.perf_counter() - start) * 1000)
        response.raise_for_status()
    return samples


def scans(url: str, store: S3Store, count: int) -> dict[str, Any]:
    """Median full-scan seconds, signed vs credentialed, alternating; signatures per scan."""
    signed_catalog = RestCatalog("s", uri=url, credential=ADMIN,
                                 **{"py-io-impl": SIGNED_IO, "s3.endpoint": store.endpoint,
                                    "s3.region": REGION})
    signatures, signing = [0], [0.0]
    original = S3V4RestSigner.__call__

    def counted(self: S3V4RestSigner, request: Any, **kwargs: Any) -> None:
        signatures[0] += 1
        start = time.perf_counter()
        original(self, request, **kwargs)
        signing[0] += time.perf_counter() - start

    S3V4RestSigner.__call__ = counted  # type: ignore[method-assign]
    timings: dict[str, list[float]] = {"signed": [], "credentialed": []}
    sent = {"signed": 0, "credentialed": 0}
    row_count = 0
    for turn in range(count):
        table = signed_catalog.load_table(TABLE)
        local = Table(table.name(), table.metadata, table.metadata_location,
                      FsspecFileIO(store.properties), signed_catalog)
        arms = [("signed", table), ("credentialed", local)]
        for arm, read in arms[::-1] if turn % 2 else arms:  # each goes first half the time
            before = _REQUESTS[0]
            start = time.perf_counter()
            row_count = read.scan().to_arrow().num_rows
            timings[arm].append(time.perf_counter() - start)
            sent[arm] += _REQUESTS[0] - before
    S3V4RestSigner.__call__ = original  # type: ignore[method-assign]
    signed, local_s = (statistics.median(timings[a]) for a in ("signed", "credentialed"))
    return {"signed_s": signed, "credentialed_s": local_s, "ratio": signed / local_s,
            "rows": row_count, "signatures_per_scan": signatures[0] / count,
            "in_signer_s": signing[0] / count,
            "signed_requests": sent["signed"] / count,
            "credentialed_requests": sent["credentialed"] / count}


_REQUESTS = [0]


def _count_s3_requests() -> None:
    """Count every request s3fs's S3 client sends (aiobotocore's HTTP session)."""
    from aiobotocore.httpsession import AIOHTTPSession

    send = AIOHTTPSession.send

    async def counted(self: AIOHTTPSession, request: Any) -> Any:
        _REQUESTS[0] += 1
        return await send(self, request)

    AIOHTTPSession.send = counted  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--signs", type=int, default=500)
    parser.add_argument("--scans", type=int, default=5)
    args = parser.parse_args()
    from s3fs import S3FileSystem
    S3FileSystem.cachable = False  # one S3 client per FileIO: pyiceberg's signer races otherwise
    _count_s3_requests()
    with tempfile.TemporaryDirectory() as workdir, child(_run_store) as endpoint, \
            child(_run_icegov, endpoint, workdir) as url:
        store = S3Store(endpoint)
        create_table(url, store, args.files, args.rows)
        admin = sign_costs(url, store, ADMIN, args.signs)
        governed = sign_costs(url, store, EU_ANALYST, args.signs)
        scan = scans(url, store, args.scans)
    print(f"files={args.files} rows/file={args.rows} signs={args.signs} scans={args.scans}")
    for who, costs in (("admin", admin), ("eu-analyst", governed)):
        print(f"sign ({who:10}) p50 {costs['sign_p50']:.2f} ms  p95 {costs['sign_p95']:.2f} ms"
              f"  via requests p50 {costs['requests_p50']:.2f} ms"
              f"  GET /v1/config p50 {costs['config_p50']:.2f} ms")
    print("scan signed {signed_s:.3f} s  credentialed {credentialed_s:.3f} s  ratio {ratio:.2f}"
          "  rows {rows}  signatures/scan {signatures_per_scan:.0f}"
          " ({in_signer_s:.3f} s in the signer)"
          "  S3 requests/scan signed "
          "{signed_requests:.0f} credentialed {credentialed_requests:.0f}".format(**scan))


if __name__ == "__main__":
    main()
