"""Governed snapshots at scale: first builds, a refresh, a partition-aligned filter, warm loads.

A table of ``--files`` Parquet files, ``--mb`` MiB in all (default 200 files, 2 GiB: issue 21's
size), partitioned by ``shard`` (10 values, one per file) and not by ``pick`` (uniform 0..99 in
every file). Four principals read it: ``bench-pick`` (``filter:pick < 10``: ~10% of the rows of
every file, so every file is copied), ``bench-shard`` (``filter:shard = 3``: partition-aligned,
so no file is copied), ``bench-columns`` (one column denied: restricted, not governed) and
``bench-reader`` (no restriction); warm loadTables of the last two and ``bench-pick`` alternate.

The embedded catalog runs standalone (``icegov catalog``, its own process) and two icegovs run in
this process in front of it (``create_app`` served by ``tests/support/servers.serve``), each with
its own governed root: one builds in process (``ICEGOV__GOVERNED__SPARK_ABOVE_BYTES`` = 2**62),
the other on PySpark (``SPARK_ABOVE_BYTES`` = 0), on this process's Spark session (``--master``,
``local[*]`` by default), which also runs the baseline: ``CREATE TABLE ... AS SELECT * ... WHERE
pick < 10`` straight against the catalog, the same rows produced by hand. The table is written
and appended to with pyiceberg, directly against the catalog (no ``landed`` hook fires: each
build starts when a restricted principal asks).

**Build time** is the wall time of a restricted loadTable (``GET .../tables/events``) that waits
for its governed build (``WAIT_SECONDS`` = 3600) and returns a snapshot whose
``icegov.governed.served-snapshot-id`` is the base's current one. **Bytes** are the icegov's
``icegov_governed_build_bytes_total{io}`` (scraped from ``/metrics`` before and after): base data
and delete files handed to the copies, governed files written. For the in-process arm the
process's own ``/proc/self/io`` ``rchar``/``wchar`` (every read and write, metadata and sockets
included) are shown beside them. Every file is read once before timing (page cache warm for every
arm) and Spark runs a small CTAS first (JIT warm).

Run: ``python benchmarks/governed.py`` (the issue's size: ~2 min on 2 cores, ~3 GB of disk in
the temporary directory), or ``--files 20 --mb 50`` for a smoke run (~30 s).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml
from prometheus_client.parser import text_string_to_metric_families
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.io.pyarrow import parquet_file_to_data_file, schema_to_pyarrow
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DoubleType, IntegerType, LongType, NestedField

sys.path.insert(0, str(Path(__file__).resolve().parent))
from passthrough import REPO, free_port, icegov_server

sys.path.insert(0, str(REPO))  # tests.support: the in-process servers

SHARDS, PICK_BELOW, SHARD_PICKED = 10, 10, 3
BYTES_PER_ROW = 53  # id, shard, pick and five random doubles, as Parquet writes them
TABLE = "demo.events"
SECRET = "bench-secret"
RULES = f"""
g, bench-pick, demo-reader
p, bench-pick, icegov.demo.events, SELECT, filter:pick < {PICK_BELOW}
g, bench-shard, demo-reader
p, bench-shard, icegov.demo.events, SELECT, filter:shard = {SHARD_PICKED}
g, bench-reader, demo-reader
g, bench-columns, demo-reader
p, bench-columns, icegov.demo.events.v5, SELECT, deny
"""
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "shard", IntegerType(), required=False),
    NestedField(3, "pick", IntegerType(), required=False),
    *(NestedField(3 + i, f"v{i}", DoubleType(), required=False) for i in range(1, 6)),
)
SPEC = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "shard"))


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- the table ---------------------------------------------------------------------------------


def rows_of(index: int, rows: int) -> pa.Table:
    """File ``index``'s rows: one shard, ``pick`` uniform over 0..99, random doubles."""
    columns: dict[str, pa.Array] = {
        "id": pa.array(range(index * rows, (index + 1) * rows), pa.int64()),
        "shard": pa.array([index % SHARDS] * rows, pa.int32()),
        "pick": pc.cast(pc.floor(pc.multiply(pc.random(rows, initializer=index), 100)),
                        pa.int32()),
    }
    for i in range(1, 6):
        columns[f"v{i}"] = pc.random(rows, initializer=index * 10 + i + 1_000_000)
    return pa.table(columns)


def write_files(table: Table, first: int, count: int, rows: int) -> list[DataFile]:
    """``count`` Parquet files under the table, measured as pyiceberg measures them."""
    arrow = schema_to_pyarrow(table.schema())
    written = []
    for index in range(first, first + count):
        path = f"{table.location()}/data/shard={index % SHARDS}/part-{index:05d}.parquet"
        with table.io.new_output(path).create() as out:
            pq.write_table(rows_of(index, rows).cast(arrow), out)
        written.append(parquet_file_to_data_file(table.io, table.metadata, path))
    return written


def append(table: Table, files: list[DataFile]) -> None:
    with table.transaction() as transaction, \
            transaction.update_snapshot().fast_append() as snapshot:
        for data_file in files:
            snapshot.append_data_file(data_file)


def warm_page_cache(files: list[DataFile]) -> None:
    for data_file in files:
        with open(data_file.file_path.removeprefix("file://"), "rb") as stream:
            while stream.read(1 << 24):
                pass


# -- icegov ------------------------------------------------------------------------------------


def policies(workdir: Path) -> dict[str, Any]:
    """A copy of ``policies/`` with the benchmark's three principals and their rules."""
    from proxy.identity.hashing import hash_secret

    target = workdir / "policies"
    shutil.copytree(REPO / "policies", target)
    with (target / "policy.csv").open("a") as rules:
        rules.write(RULES)
    principals = yaml.safe_load((target / "principals.yaml").read_text())
    for name in ("bench-pick", "bench-shard", "bench-reader", "bench-columns"):
        principals["principals"].append(
            {"name": name, "roles": [name], "secret_hash": hash_secret(SECRET)})
    (target / "principals.yaml").write_text(yaml.safe_dump(principals))
    return {"policy": {"model_path": target / "model.conf",
                       "policy_path": target / "policy.csv"},
            "identity": {"principals_file": target / "principals.yaml"}}


@contextmanager
def icegov(workdir: Path, catalog_uri: str, spark_above_bytes: int) -> Iterator[str]:
    """An icegov in this process in front of ``catalog_uri``, its own governed root."""
    from proxy.app import create_app
    from proxy.governed.settings import GovernedSettings
    from tests.support.servers import serve
    from tests.support.settings import settings_for_tests

    workdir.mkdir()
    governed = GovernedSettings(root=(workdir / "governed").as_uri(), wait_seconds=3600,
                                build_max_seconds=24 * 3600, spark_above_bytes=spark_above_bytes)
    settings = settings_for_tests(workdir, catalog_uri=catalog_uri, governed=governed,
                                  log_level="warning", **policies(workdir))
    with serve(create_app(settings)) as url:
        yield url


def token(url: str, principal: str) -> dict[str, str]:
    answer = httpx.post(f"{url}/v1/oauth/tokens", data={
        "grant_type": "client_credentials", "client_id": principal, "client_secret": SECRET})
    answer.raise_for_status()
    return {"authorization": f"Bearer {answer.json()['access_token']}"}


def governed_bytes(url: str) -> tuple[int, int]:
    """(read, written) of ``icegov_governed_build_bytes_total``."""
    found = {s.labels.get("io"): int(s.value)
             for family in text_string_to_metric_families(httpx.get(f"{url}/metrics").text)
             for s in family.samples if s.name == "icegov_governed_build_bytes_total"}
    return found["read"], found["written"]


def proc_io() -> tuple[int, int]:
    fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return int(fields["rchar"]), int(fields["wchar"])


@dataclass
class Build:
    """One governed build as a restricted loadTable saw it."""

    seconds: float
    read: int
    written: int
    files: int
    records: int
    rchar: int | None = None
    wchar: int | None = None


def timed_build(url: str, principal: str, expected_base: int, in_process: bool = True) -> Build:
    """Time a restricted loadTable that waits for the governed build of the current snapshot
    (``in_process``: this process's own I/O is the build's)."""
    headers = token(url, principal)
    read0, written0 = governed_bytes(url)
    rchar0, wchar0 = proc_io()
    started = time.perf_counter()
    answer = httpx.get(f"{url}/v1/namespaces/demo/tables/events", headers=headers,
                       timeout=24 * 3600)
    seconds = time.perf_counter() - started
    rchar1, wchar1 = proc_io()
    answer.raise_for_status()
    metadata = answer.json()["metadata"]
    properties = metadata["properties"]
    served = int(properties["icegov.governed.served-snapshot-id"])
    if served != expected_base or int(properties["icegov.governed.base-snapshot-id"]) != served:
        raise RuntimeError(f"the governed answer is not current: {properties}")
    [current] = [s for s in metadata["snapshots"] if s["snapshot-id"] == served]
    read1, written1 = governed_bytes(url)
    rchar, wchar = (rchar1 - rchar0, wchar1 - wchar0) if in_process else (None, None)
    return Build(seconds, read1 - read0, written1 - written0,
                 int(current["summary"]["total-data-files"]),
                 int(current["summary"]["total-records"]), rchar, wchar)


def check_rows(url: str, principal: str, records: int) -> None:
    """The governed snapshot read with pyiceberg holds exactly the permitted rows."""
    table = RestCatalog(f"check-{principal}", uri=url,
                        credential=f"{principal}:{SECRET}").load_table(TABLE)
    picks = table.scan(selected_fields=("pick",)).to_arrow().column("pick")
    if len(picks) != records or pc.max(picks).as_py() >= PICK_BELOW:
        raise RuntimeError(f"{principal} reads {len(picks)} rows, expected {records} all "
                           f"with pick < {PICK_BELOW}")


LOAD_SIDES = {"unrestricted": "bench-reader", "columns only": "bench-columns",
              "governed": "bench-pick"}


def warm_loads(url: str, count: int) -> dict[str, list[float]]:
    """Milliseconds per loadTable of each of ``LOAD_SIDES``, in turn on warm connections
    (order rotated each round)."""
    path = "/v1/namespaces/demo/tables/events"
    sides = {side: token(url, principal) for side, principal in LOAD_SIDES.items()}
    times: dict[str, list[float]] = {name: [] for name in sides}
    clients = {name: httpx.Client(base_url=url, headers=h) for name, h in sides.items()}
    try:
        for i in range(count + 20):
            order = list(sides)
            for name in order[i % len(order):] + order[:i % len(order)]:
                started = time.perf_counter()
                clients[name].get(path).raise_for_status()
                if i >= 20:
                    times[name].append((time.perf_counter() - started) * 1000)
    finally:
        for client in clients.values():
            client.close()
    return times


# -- Spark -------------------------------------------------------------------------------------


def start_spark(master: str, catalog_uri: str) -> Any:
    from pyspark.sql import SparkSession

    from tests.support.jars import iceberg_runtime_jar
    from tests.support.spark import EXTENSIONS

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(  # executors import proxy
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    spark = (SparkSession.builder.master(master).appName("icegov-governed-bench")
             .config("spark.jars", str(iceberg_runtime_jar()))
             .config("spark.sql.extensions", EXTENSIONS)
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "2g")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.catalog.direct", "org.apache.iceberg.spark.SparkCatalog")
             .config("spark.sql.catalog.direct.type", "rest")
             .config("spark.sql.catalog.direct.uri", catalog_uri)
             .config("spark.sql.catalog.direct.cache-enabled", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@dataclass
class Ctas:
    seconds: float
    records: int
    files: int
    written: int


def ctas(spark: Any, name: str, where: str) -> Ctas:
    started = time.perf_counter()
    spark.sql(f"CREATE TABLE direct.demo.{name} USING iceberg AS "
              f"SELECT * FROM direct.{TABLE} WHERE {where}")
    seconds = time.perf_counter() - started
    summary = spark.sql(f"SELECT summary FROM direct.demo.{name}.snapshots").first()[0]
    return Ctas(seconds, int(summary["total-records"]), int(summary["total-data-files"]),
                int(summary["total-files-size"]))


# -- the run -----------------------------------------------------------------------------------


def mb(size: int | None) -> str:
    return "—" if size is None else f"{size / 2**20:,.1f}"


def report(args: argparse.Namespace, base: dict[str, Any], hand: Ctas,
           builds: dict[str, Build], loads: dict[str, list[float]]) -> None:
    full_in, full_spark = builds["first, in process"], builds["first, PySpark"]
    print(f"# governed snapshots: {base['files']} files, {mb(base['bytes'])} MB, "
          f"{base['records']:,} rows; filter pick < {PICK_BELOW} (every file mixes); "
          f"{os.cpu_count()} cores, Spark {args.master}; load average at the start "
          f"{base['load']:.1f}, at the end {os.getloadavg()[0]:.1f}")
    print("| build | seconds | vs CTAS | base MB read (copies) | governed MB written "
          "| rchar MB | wchar MB | files | rows |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(f"| Spark CTAS ... WHERE (baseline) | {hand.seconds:.1f} | 1.00 | {mb(base['bytes'])} "
          f"| {mb(hand.written)} | — | — | {hand.files} | {hand.records:,} |")
    for name, build in builds.items():
        print(f"| {name} | {build.seconds:.2f} | {build.seconds / hand.seconds:.2f} "
              f"| {mb(build.read)} | {mb(build.written)} | {mb(build.rchar)} "
              f"| {mb(build.wchar)} | {build.files} | {build.records:,} |")
    appended = base["appended_bytes"]
    print(f"\n1% append: {base['appended_files']} files, {mb(appended)} MB")
    for arm, full in (("in process", full_in), ("PySpark", full_spark)):
        refresh = builds[f"refresh, {arm}"]
        print(f"- refresh {arm}: read {refresh.read / appended:.2f}x the appended bytes "
              f"(target <= 2), {refresh.seconds / full.seconds * 100:.1f}% of its first build's "
              f"time (target <= 10%)")
    aligned = builds["partition-aligned (shard = 3), in process"]
    print(f"- partition-aligned filter: {aligned.written} bytes of data written (target 0)")
    p50 = {side: statistics.median(times) for side, times in loads.items()}
    p90 = {side: statistics.quantiles(times, n=10)[-1] for side, times in loads.items()}
    print(f"- warm loadTable, {args.loads} per side, p50 (p90) ms: " + ", ".join(
        f"{side} {p50[side]:.3f} ({p90[side]:.3f})" for side in loads))
    print(f"  governed / unrestricted {p50['governed'] / p50['unrestricted']:.2f}x (target "
          f"<= 1.2); columns only / unrestricted "
          f"{p50['columns only'] / p50['unrestricted']:.2f}x; governed / columns only "
          f"{p50['governed'] / p50['columns only']:.2f}x")
    print(f"- first builds vs CTAS: in process {full_in.seconds / hand.seconds:.2f}x, PySpark "
          f"{full_spark.seconds / hand.seconds:.2f}x (target <= 1.5)", flush=True)


def seed(catalog_uri: str, args: argparse.Namespace, rows: int) -> tuple[Table, dict[str, Any]]:
    """The table, written and committed in one append, its files read once (page cache)."""
    admin = RestCatalog("bench-admin", uri=catalog_uri)
    admin.create_namespace("demo")
    table = admin.create_table(TABLE, SCHEMA, partition_spec=SPEC)
    log(f"writing {args.files} files of {rows:,} rows")
    files = write_files(table, 0, args.files, rows)
    append(table, files)
    warm_page_cache(files)
    return table, {"files": len(files), "bytes": sum(f.file_size_in_bytes for f in files),
                   "records": sum(f.record_count for f in files)}


def first_builds(local: str, on_spark: str, current: int, hand: Ctas) -> dict[str, Build]:
    """Both arms' first builds; each must hold exactly the CTAS's rows."""
    builds: dict[str, Build] = {}
    for name, url in (("first, in process", local), ("first, PySpark", on_spark)):
        log(name)
        builds[name] = timed_build(url, "bench-pick", current, url == local)
        if builds[name].records != hand.records:
            raise RuntimeError(f"{name}: {builds[name].records} rows, CTAS {hand.records}")
    check_rows(local, "bench-pick", hand.records)
    return builds


def refreshes(table: Table, local: str, on_spark: str, args: argparse.Namespace, rows: int,
              base: dict[str, Any]) -> dict[str, Build]:
    """Append ``--append-pct`` % more files, then each arm's refresh; then the
    partition-aligned principal's first build (in process)."""
    count = max(1, round(args.files * args.append_pct / 100))
    added = write_files(table, args.files, count, rows)
    append(table, added)
    warm_page_cache(added)
    base.update(appended_files=len(added),
                appended_bytes=sum(f.file_size_in_bytes for f in added))
    current = table.refresh().metadata.current_snapshot_id
    assert current is not None
    builds: dict[str, Build] = {}
    for arm, url in (("in process", local), ("PySpark", on_spark)):
        log(f"refresh, {arm}")
        builds[f"refresh, {arm}"] = timed_build(url, "bench-pick", current, url == local)
    log("partition-aligned")
    builds["partition-aligned (shard = 3), in process"] = timed_build(
        local, "bench-shard", current)
    return builds


def run(args: argparse.Namespace, tmp: Path) -> None:
    rows = max(1, args.mb * 2**20 // args.files // BYTES_PER_ROW)
    load = os.getloadavg()[0]
    with icegov_server(["catalog", "--warehouse", str(tmp / "wh")], free_port()) as catalog_uri, \
            icegov(tmp / "in-process", catalog_uri, 2**62) as local, \
            icegov(tmp / "pyspark", catalog_uri, 0) as on_spark:
        table, base = seed(catalog_uri, args, rows)
        base["load"] = load
        started = time.perf_counter()
        spark = start_spark(args.master, catalog_uri)
        log(f"Spark started in {time.perf_counter() - started:.1f} s; warm-up CTAS")
        ctas(spark, "warmup", f"shard = 0 AND pick < {PICK_BELOW}")
        log("CTAS")
        hand = ctas(spark, "by_hand", f"pick < {PICK_BELOW}")
        current = table.refresh().metadata.current_snapshot_id
        assert current is not None
        builds = first_builds(local, on_spark, current, hand)
        builds.update(refreshes(table, local, on_spark, args, rows, base))
        log("warm loadTables")
        loads = warm_loads(local, args.loads)
        spark.stop()
        report(args, base, hand, builds, loads)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--files", type=int, default=200, help="data files in the table")
    parser.add_argument("--mb", type=int, default=2048, help="the table's size in MiB")
    parser.add_argument("--append-pct", type=float, default=1.0,
                        help="the refresh's append, in percent of the table's files")
    parser.add_argument("--loads", type=int, default=300, help="warm loadTables per side")
    parser.add_argument("--master", default="local[*]", help="Spark master")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="icegov-governed-bench-") as tmp:
        run(args, Path(tmp))


if __name__ == "__main__":
    main()
