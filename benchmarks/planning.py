"""Server-side scan planning (issue 8): icegov's plan against pyiceberg's local ``plan_files``.

Builds (once, cached in ``--workdir``) a table in the embedded catalog's warehouse with
``--manifests`` manifests of ``--entries`` data-file entries each (default 200 x 1,000 = 200,000
files), partitioned by ``identity(region)`` over 50 regions, every manifest holding files of every
region (as streaming appends write them), each entry with realistic statistics (column sizes,
value, null and NaN counts, lower and upper bounds of all eight columns). The manifests and the
manifest list are written with pyiceberg's writers, and the snapshot is committed straight into
the SqlCatalog before icegov starts. The data files do not exist: planning reads only metadata.

Then, for each scan (a full scan, and ``region = 'region-07'``: 2 % of the files) and each of
``--runs`` rounds, in this order so that all three see the same machine state:

* **(L) local**: pyiceberg's ``table.scan(row_filter).plan_files()`` on a freshly loaded table (new
  ``Table`` and ``FileIO``, pyiceberg's manifest-file cache cleared), list materialised;
* **(C) icegov cold**: a fresh ``icegov serve`` process (empty manifest and plan caches; it is
  started, signed into and sent one loadTable before the clock starts): ``POST .../plan`` plus
  every plan task it hands out, fetched in parallel (``--fetchers``) like Java does, until all
  file-scan-task bytes are received. The client is a thin httpx client: it parses the plan
  response (for its plan tasks) but not the task responses while timing (pyiceberg's pydantic
  parsing would cost more than the plan); they are parsed afterwards, to check that icegov
  returned exactly the files local planning did;
* **(W) icegov warm**: the same request again, to the same process.

For the full scan, the same process then plans the region scan (**subset**: its filter implies the
cached full plan's, seed 000's reuse of a cached plan for a narrower scan).

Reported: p50 over the runs, entries/s (manifest entries the planner considered / time), and the
ratios C/L and W/L against the targets C/L <= 1.0 and W/L <= 0.1.

Run: ``python benchmarks/planning.py`` (``--quick``: a 2,000-file table, seconds).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import AlwaysTrue, BooleanExpression, EqualTo
from pyiceberg.manifest import (
    clear_manifest_cache,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from commit import governed_env
from passthrough import REPO, free_port

sys.path.insert(0, str(REPO))

from planning_table import (
    SCHEMA,
    SELECTED_REGION,
    TableShape,
    ensure_table,
    warehouse_catalog,
)

# -- scans -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scan:
    """A scan both sides plan: pyiceberg's filter, and the same filter in the REST legacy form."""

    name: str
    row_filter: BooleanExpression
    rest_filter: dict[str, Any] | None


SCANS = {
    "full": Scan("full", AlwaysTrue(), None),
    "region": Scan("region", EqualTo("region", SELECTED_REGION),
                   {"type": "eq", "term": "region", "value": SELECTED_REGION}),
}


@dataclass
class Planned:
    """One timed planning: seconds, and the data files it returned."""

    seconds: float
    paths: set[str] = field(default_factory=set)
    responses: int = 0  # through icegov: the plan response and one per plan task
    body_bytes: int = 0


def plan_locally(catalog: SqlCatalog, identifier: str, scan: Scan,
                 collector: bool = True) -> Planned:
    """(L): pyiceberg's local planning on a freshly loaded table, nothing cached; with
    ``collector=False`` Python's cyclic garbage collector is paused while it plans."""
    clear_manifest_cache()
    table = catalog.load_table(identifier)
    paused = not collector and gc.isenabled()
    if paused:
        gc.disable()
    try:
        started = time.perf_counter()
        tasks = list(table.scan(row_filter=scan.row_filter).plan_files())
        seconds = time.perf_counter() - started
    finally:
        if paused:
            gc.enable()
    return Planned(seconds, {task.file.file_path for task in tasks})


# -- icegov ----------------------------------------------------------------------------------


def icegov_app() -> Any:
    """The icegov app from ``ICEGOV__*`` settings: the factory uvicorn's workers import."""
    from proxy.app import create_app
    from proxy.settings import load_settings

    return create_app(load_settings())


def icegov_command(port: int, workers: int) -> list[str]:
    if workers == 1:
        return [sys.executable, "-c", "from proxy.cli import main; main()", "serve",
                "--port", str(port)]
    return [sys.executable, "-m", "uvicorn", "--app-dir", str(Path(__file__).parent),
            "--factory", "planning:icegov_app", "--port", str(port), "--workers", str(workers),
            "--log-level", "warning", "--no-access-log", "--timeout-keep-alive", "75"]


@contextlib.contextmanager
def icegov(workdir: Path, workers: int) -> Iterator[str]:
    """A fresh governed ``icegov serve`` on the warehouse in ``workdir`` (empty caches)."""
    port = free_port()
    env = {**os.environ, **governed_env(workdir), "ICEGOV__WAREHOUSE": str(workdir / "warehouse"),
           "ICEGOV__PLANNING__TASK_KEY": "benchmark-plan-task-key-of-at-least-32-bytes",
           "PYTHONPATH": str(REPO)}
    log = workdir / "icegov.log"  # a file, not a pipe nobody reads (a full pipe blocks icegov)
    with log.open("ab") as stderr:
        process = subprocess.Popen(icegov_command(port, workers), cwd=REPO, env=env,
                                   stdout=subprocess.DEVNULL, stderr=stderr)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while process.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/v1/config", timeout=1).status_code in (200, 401):
                    break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"icegov did not start on {url}; the end of {log}:\n"
                               + log.read_text(errors="replace")[-2000:])
        yield url
    finally:
        process.terminate()
        process.wait(timeout=20)


class PlanClient:
    """A thin REST planning client (httpx, JSON bytes): what a Java-like engine does on the wire,
    without any model parsing of the file-scan tasks."""

    def __init__(self, url: str, identifier: str, fetchers: int,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.http = httpx.Client(base_url=url, timeout=600, transport=transport,
                                 limits=httpx.Limits(max_connections=fetchers + 1))
        token = self.http.post("/v1/oauth/tokens", data={
            "grant_type": "client_credentials", "client_id": "admin",
            "client_secret": "admin-secret"})
        token.raise_for_status()
        self.http.headers["authorization"] = f"Bearer {token.json()['access_token']}"
        namespace, table = identifier.split(".")
        prefix = self.http.get("/v1/config").json().get("overrides", {}).get("prefix")
        root = f"/v1/{prefix}" if prefix else "/v1"
        self.table_path = f"{root}/namespaces/{namespace}/tables/{table}"
        self.pool = ThreadPoolExecutor(fetchers)

    def load_table(self) -> None:
        self.http.get(self.table_path).raise_for_status()

    def plan(self, scan: Scan) -> tuple[float, list[bytes]]:
        """Plan ``scan`` and fetch every plan task; the seconds until the last byte, and every
        response body (the plan's first)."""
        body: dict[str, Any] = {"select": [f.name for f in SCHEMA.fields], "case-sensitive": True}
        if scan.rest_filter is not None:
            body["filter"] = scan.rest_filter
        started = time.perf_counter()
        first = self._completed(self._ok(self.http.post(f"{self.table_path}/plan", json=body)))
        bodies = [first.content]
        pending = list(first.json().get("plan-tasks") or [])
        while pending:
            fetched = list(self.pool.map(self._fetch_task, pending))
            bodies.extend(fetched)
            pending = [t for b in fetched if b'"plan-tasks"' in b
                       for t in json.loads(b).get("plan-tasks") or []]
        seconds = time.perf_counter() - started
        if plan_id := first.json().get("plan-id"):
            self.http.delete(f"{self.table_path}/plan/{plan_id}")
        return seconds, bodies

    def _fetch_task(self, task: str) -> bytes:
        response = self.http.post(f"{self.table_path}/tasks", json={"plan-task": task})
        return self._ok(response).content

    def _completed(self, response: httpx.Response) -> httpx.Response:
        """Poll a ``submitted`` plan until it is no longer submitted."""
        while response.json().get("status") == "submitted":
            plan_id = response.json()["plan-id"]
            response = self._ok(self.http.get(f"{self.table_path}/plan/{plan_id}"))
        if response.json().get("status") != "completed":
            raise RuntimeError(f"plan not completed: {response.text[:500]}")
        return response

    @staticmethod
    def _ok(response: httpx.Response) -> httpx.Response:
        if response.status_code != 200:
            raise RuntimeError(f"{response.request.method} {response.request.url.path}: "
                               f"{response.status_code} {response.text[:500]}")
        return response

    def close(self) -> None:
        self.pool.shutdown()
        self.http.close()


def scan_task_paths(bodies: list[bytes]) -> set[str]:
    """The data files of every file-scan task in the plan and task responses."""
    return {task["data-file"]["file-path"] for body in bodies
            for task in json.loads(body).get("file-scan-tasks") or []}


def plan_through(client: PlanClient, scan: Scan) -> Planned:
    seconds, bodies = client.plan(scan)
    return Planned(seconds, scan_task_paths(bodies), len(bodies), sum(map(len, bodies)))


# -- one run ---------------------------------------------------------------------------------

ARMS = ("L", "C", "W", "S", "G")
"""local, icegov cold, icegov warm, icegov subset of a cached plan, local with the collector
paused"""


@dataclass
class Results:
    """Seconds per scan and arm, and what differed from local planning."""

    seconds: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    expected: dict[str, set[str]] = field(default_factory=dict)
    wire: dict[str, str] = field(default_factory=dict)  # per scan: responses and bytes
    problems: list[str] = field(default_factory=list)

    def record(self, scan: str, arm: str, planned: Planned) -> None:
        self.seconds.setdefault(scan, {}).setdefault(arm, []).append(planned.seconds)
        if arm in ("L", "G"):
            self.expected.setdefault(scan, planned.paths)
        if arm == "C":
            self.wire[scan] = (f"{planned.responses} responses, "
                               f"{planned.body_bytes / 1e6:.1f} MB of JSON")
        expected = self.expected.get(scan)
        if expected is not None and planned.paths != expected:
            self.problems.append(f"{scan} ({arm}): {len(planned.paths):,} files, "
                                 f"{len(planned.paths - expected):,} not planned locally, "
                                 f"{len(expected - planned.paths):,} missing")

    def p50(self, scan: str, arm: str) -> float | None:
        samples = self.seconds.get(scan, {}).get(arm)
        return statistics.median(samples) if samples else None


@dataclass(frozen=True)
class Setup:
    workdir: Path
    identifier: str
    shape: TableShape
    workers: int
    fetchers: int
    gc_off_baseline: bool = False


def run_round(setup: Setup, scans: list[Scan], results: Results) -> None:
    """One round: for each scan, local planning, then a fresh icegov cold, warm (and, after a
    full scan, the narrower region scan from the cached plan)."""
    catalog = warehouse_catalog(setup.workdir)
    for scan in scans:
        results.record(scan.name, "L", plan_locally(catalog, setup.identifier, scan))
        if setup.gc_off_baseline:
            results.record(scan.name, "G", plan_locally(catalog, setup.identifier, scan, False))
        with icegov(setup.workdir, setup.workers) as url:
            client = PlanClient(url, setup.identifier, setup.fetchers)
            try:
                client.load_table()
                results.record(scan.name, "C", plan_through(client, scan))
                results.record(scan.name, "W", plan_through(client, scan))
                if scan.name == "full":
                    results.record("region", "S", plan_through(client, SCANS["region"]))
            finally:
                client.close()


# -- report ----------------------------------------------------------------------------------


def ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:,.0f}"


def rate(entries: int, seconds: float | None) -> str:
    return "-" if not seconds else f"{entries / seconds:,.0f}"


def ratio(seconds: float | None, baseline: float | None, target: float | None = None) -> str:
    if seconds is None or not baseline:
        return "-"
    value = seconds / baseline
    verdict = "" if target is None else (" met" if value <= target else " **not met**")
    return f"{value:.2f}{verdict}"


def table_lines(results: Results, shape: TableShape) -> list[str]:
    """The markdown table: one line per scan."""
    lines = ["| scan | files planned | L p50 ms | C p50 ms | W p50 ms | C/L (<= 1.0) "
             "| W/L (<= 0.1) | L entries/s | C entries/s | W entries/s | subset p50 ms "
             "| subset/L | L gc-off p50 ms | C/L gc-off |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for scan, arms in results.seconds.items():
        local, cold, warm, subset, gc_off = (results.p50(scan, arm) for arm in ARMS)
        files = len(results.expected.get(scan, ()))
        lines.append(
            f"| {scan} | {files:,} | {ms(local)} | {ms(cold)} | {ms(warm)} "
            f"| {ratio(cold, local, 1.0)} | {ratio(warm, local, 0.1)} "
            f"| {rate(shape.files, local)} | {rate(shape.files, cold)} "
            f"| {rate(shape.files, warm)} | {ms(subset)} | {ratio(subset, local)} "
            f"| {ms(gc_off)} | {ratio(cold, gc_off)} |")
        del arms
    return lines


def report(results: Results, setup: Setup, runs: int) -> None:
    print(f"\n# planning: {setup.shape.files:,} entries in {setup.shape.manifests} manifests, "
          f"p50 of {runs} run(s), icegov workers {setup.workers}, {setup.fetchers} task "
          f"fetchers, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    print("\n".join(table_lines(results, setup.shape)))
    print("\nall samples (ms): " + "; ".join(
        f"{scan} {arm} " + "/".join(ms(s) for s in samples)
        for scan, arms in results.seconds.items() for arm, samples in arms.items()))
    print("through icegov: " + "; ".join(f"{scan} {wire}" for scan, wire in results.wire.items()))
    print("files: " + ("every icegov plan returned exactly the files of local planning"
                       if not results.problems else "MISMATCH: " + "; ".join(results.problems)))
    sys.stdout.flush()


# -- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where the table is built and kept (default: a temporary dir)")
    parser.add_argument("--manifests", type=int, default=200)
    parser.add_argument("--entries", type=int, default=1000, help="data files per manifest")
    parser.add_argument("--runs", type=int, default=3, help="rounds; p50 over them")
    parser.add_argument("--scans", default="full,region", help="of: full, region")
    parser.add_argument("--workers", type=int, default=1, help="icegov worker processes")
    parser.add_argument("--fetchers", type=int, default=4, help="plan tasks fetched in parallel")
    parser.add_argument("--gc-off-baseline", action="store_true",
                        help="also time local planning with the garbage collector paused")
    parser.add_argument("--quick", action="store_true", help="8 x 250 entries, 2 runs")
    args = parser.parse_args(argv)
    if args.quick:
        args.manifests, args.entries, args.runs = 8, 250, 2
    unknown = set(args.scans.split(",")) - set(SCANS)
    if unknown or args.runs < 1 or args.manifests < 1 or args.entries < 1:
        parser.error(f"bad arguments (unknown scans: {sorted(unknown)})")
    return args


def run(args: argparse.Namespace, workdir: Path) -> Results:
    shape = TableShape(args.manifests, args.entries)
    setup = Setup(workdir, ensure_table(workdir, shape), shape, args.workers, args.fetchers,
                  args.gc_off_baseline)
    scans = [SCANS[name] for name in args.scans.split(",")]
    for scan in scans:  # warm-up: imports and the OS page cache, recorded nowhere
        plan_locally(warehouse_catalog(workdir), setup.identifier, scan)
    results = Results()
    for number in range(args.runs):
        run_round(setup, scans, results)
        print(f"# round {number + 1}/{args.runs} done", flush=True)
    report(results, setup, args.runs)
    return results


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        workdir = args.workdir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        workdir.mkdir(parents=True, exist_ok=True)
        run(args, workdir.resolve())
    print(f"\n(total {time.perf_counter() - started:.0f} s, "
          f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC)")


if __name__ == "__main__":
    main()
