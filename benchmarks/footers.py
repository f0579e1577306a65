"""Cost of checking added files' footers: a commit adding 200 Parquet files, direct and via icegov.

A Spark INSERT writes one file per task (200 with the default shuffle partitions) and commits
them in one snapshot; this drives the same commit with pyiceberg, whose client is scriptable
here: ``--files`` honest Parquet files (``--rows`` rows of long, string, double and timestamp
columns each, with the metrics pyiceberg measures from their footers) are written under the
table, then one ``fast_append`` commits them. Like ``commit.py`` it starts the embedded catalog
(``icegov catalog``) and two governed icegovs in front of it (``icegov serve --catalog-uri``) on
loopback ports, one of them with the footer checks switched off (``classify.check_commit_files``
replaced by a no-op in that process only: there is no setting for it). Three tables are
committed to the same way, one directly and one through each icegov as the demo ``writer``,
rotating which goes first. Every round adds new files, so icegov reads every footer cold.

Reported: the commit POST (as the client timed it) and the whole INSERT (write the files, then
commit) of each arm, with ratios to direct and of checked to unchecked icegov; then, in-process
on the same commit body and base,
``classify_commit`` with the footer checks and with them switched off, and the footer check
alone (``footers.check_added_files``; nothing is cached across checks).

With ``--spark``, real Spark (3.5, Iceberg 1.10) INSERTs follow on the same three endpoints:
``INSERT INTO ... SELECT /*+ REPARTITION(200) */ ...`` writes and commits 200 files per statement
(Spark's own writer and metrics); each statement is timed whole, rotating the arms.

Run: ``python benchmarks/footers.py`` (``--quick`` for a smoke run; ``--spark`` adds Spark).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.io.pyarrow import parquet_file_to_data_file, schema_to_pyarrow
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from commit import CommitTimer, catalog, governed_env
from passthrough import free_port, icegov_server, server

UNCHECKED_ICEGOV = [sys.executable, "-c", "import proxy.commits.classify as c; "
                    "c.check_commit_files = lambda *_, **__: None; "
                    "from proxy.cli import main; main()"]

NAMESPACE = "demo"  # the demo policy grants writer INSERT on icegov.demo.*


def batch(rows: int, seed: int) -> pa.Table:
    ids = pa.array(range(seed * rows, (seed + 1) * rows), pa.int64())
    return pa.table({
        "id": ids,
        "name": pa.array([f"event-{(i * 7919) % 100_003}" for i in range(rows)]),
        "amount": pa.array([(i % 1000) / 7 for i in range(rows)], pa.float64()),
        "ts": pa.array([1_700_000_000_000_000 + i * 1_000 for i in range(rows)],
                       pa.timestamp("us")),
    })


def write_files(table: Table, files: int, rows: int) -> list[DataFile]:
    """``files`` Parquet files under the table, measured as pyiceberg measures them."""
    arrow = schema_to_pyarrow(table.schema())
    written = []
    for index in range(files):
        path = f"{table.location()}/data/insert-{uuid.uuid4().hex}.parquet"
        with table.io.new_output(path).create() as out:
            pq.write_table(batch(rows, index).cast(arrow), out)
        written.append(parquet_file_to_data_file(table.io, table.metadata, path))
    return written


@dataclass
class Arm:
    name: str
    table: Table
    timer: CommitTimer
    insert_ms: list[float] = field(default_factory=list)
    last_base: Any = None  # the table's metadata before the last INSERT's commit
    last_files: list[DataFile] = field(default_factory=list)

    def insert(self, files: int, rows: int, record: bool) -> None:
        start = time.perf_counter()
        data_files = write_files(self.table, files, rows)
        self.last_base, self.last_files = self.table.metadata, data_files
        with self.table.transaction() as transaction, \
                transaction.update_snapshot().fast_append() as snapshot:
            for data_file in data_files:
                snapshot.append_data_file(data_file)
        if record:
            self.insert_ms.append((time.perf_counter() - start) * 1000)
        else:
            self.timer.millis.pop()


def run_inserts(admin: RestCatalog, urls: dict[str, str],
                args: argparse.Namespace) -> list[Arm]:
    """One arm per URL (``direct`` is the catalog itself), each with its own table."""
    arms = []
    for name, url in urls.items():
        table = f"{NAMESPACE}.insert_{name.replace(' ', '_')}"
        admin.create_table(table, batch(1, 0).schema)
        timer = CommitTimer()
        client = catalog(url) if name == "direct" else catalog(url, "writer")
        arms.append(Arm(name, timer.attach(client).load_table(table), timer))
    for i in range(args.warmup + args.rounds):
        shift = i % len(arms)
        for arm in arms[shift:] + arms[:shift]:
            arm.insert(args.files, args.rows, record=i >= args.warmup)
    return arms


def in_process(arm: Arm, repeats: int) -> dict[str, float]:
    """Median ms of ``classify_commit`` with and without the footer checks, and of the footer
    check alone (its cache cleared before every run, as for new files)."""
    from proxy.commits import classify, footers
    from proxy.commits.columns import FileRules
    from proxy.commits.limits import CommitLimits

    assert arm.timer.last_body is not None
    parsed, base, io = json.loads(arm.timer.last_body), arm.last_base, arm.table.io
    original = classify.check_commit_files

    def timed(run: Any) -> float:
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            run()
            samples.append((time.perf_counter() - start) * 1000)
        return statistics.median(samples)

    with_checks = timed(lambda: classify.classify_commit(parsed, base, io))
    classify.check_commit_files = lambda *_, **__: None  # type: ignore[assignment]
    try:
        without = timed(lambda: classify.classify_commit(parsed, base, io))
    finally:
        classify.check_commit_files = original
    alone = timed(lambda: footers.check_added_files(
        arm.last_files, FileRules.of(base), io, table_uuid="bench", limits=CommitLimits()))
    return {"with": with_checks, "without": without, "alone": alone,
            "files": len(arm.last_files)}


def row(label: str, samples: list[list[float]]) -> str:
    direct, unchecked, checked = (statistics.median(s) for s in samples)
    return (f"| {label} | {direct:.1f} | {unchecked:.1f} | {checked:.1f} "
            f"| {unchecked / direct:.2f} | {checked / direct:.2f} | {checked / unchecked:.2f} "
            f"| {checked - unchecked:+.1f} |")


def report(arms: list[Arm], checks: dict[str, float], args: argparse.Namespace) -> None:
    direct = arms[0]
    print(f"# INSERT of {args.files} Parquet files x {args.rows} rows, {args.rounds} rounds per "
          f"arm after {args.warmup} warm-up, rotating arms; p50 ms; {os.cpu_count()} cores")
    print("| measure | direct | icegov, no footer checks | icegov | unchecked / direct "
          "| icegov / direct | icegov / unchecked | footer checks add |")
    print("|---|---|---|---|---|---|---|---|")
    print(row("whole INSERT (write files + commit)", [a.insert_ms for a in arms]))
    print(row("commit POST", [a.timer.millis for a in arms]))
    share = checks["with"] - checks["without"]
    print(f"\nin-process, the last icegov commit ({checks['files']:.0f} added files), median of "
          f"{args.repeats}: classify_commit {checks['with']:.1f} ms with footer checks, "
          f"{checks['without']:.1f} ms without ({share:+.1f} ms); footer check alone "
          f"{checks['alone']:.1f} ms ({checks['alone'] / checks['files']:.2f} ms per file)")
    print(f"footer checks as a share of the direct whole INSERT p50: "
          f"{share / statistics.median(direct.insert_ms) * 100:.1f} %; of the direct commit POST "
          f"p50: {share / statistics.median(direct.timer.millis) * 100:.0f} %", flush=True)


def run_spark(urls: dict[str, str], args: argparse.Namespace) -> dict[str, list[float]]:
    """Whole Spark INSERTs of ``args.files`` files per arm and round (ms), rotating arms."""
    from tests.support.spark import add_rest_catalog, start_spark

    spark = start_spark()
    try:
        arms = list(urls)
        for name, url in urls.items():
            options = {} if name == "direct" else {"credential": "writer:writer-secret"}
            add_rest_catalog(spark, f"bench_{name}", url, **options)
            spark.sql(f"CREATE TABLE bench_direct.{NAMESPACE}.spark_{name} (id bigint, name "
                      "string, amount double, ts timestamp) USING iceberg")  # writer: INSERT
        timings: dict[str, list[float]] = {name: [] for name in arms}
        for i in range(args.warmup + args.rounds):
            shift = i % len(arms)
            for name in arms[shift:] + arms[:shift]:
                start = time.perf_counter()
                spark.sql(
                    f"INSERT INTO bench_{name}.{NAMESPACE}.spark_{name} "
                    f"SELECT /*+ REPARTITION({args.files}) */ id, concat('event-', id % 100003), "
                    "(id % 1000) / 7.0, timestamp_micros(1700000000000000 + id * 1000) "
                    f"FROM range({i * args.files * args.rows}, "
                    f"{(i + 1) * args.files * args.rows})")
                if i >= args.warmup:
                    timings[name].append((time.perf_counter() - start) * 1000)
        added = spark.sql(f"SELECT summary['added-data-files'] FROM bench_icegov.{NAMESPACE}."
                          "spark_icegov.snapshots ORDER BY committed_at DESC LIMIT 1").first()[0]
        print(f"\n# Spark INSERT of {added} files x {args.rows} rows (real Spark writer), "
              f"{args.rounds} rounds per arm after {args.warmup} warm-up, rotating arms; p50 ms")
        print("| measure | direct | icegov, no footer checks | icegov | unchecked / direct "
              "| icegov / direct | icegov / unchecked | footer checks add |")
        print("|---|---|---|---|---|---|---|---|")
        print(row("Spark INSERT statement", [timings[name] for name in arms]), flush=True)
        return timings
    finally:
        spark.stop()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--files", type=int, default=200, help="Parquet files per INSERT")
    parser.add_argument("--rows", type=int, default=1000, help="rows per file")
    parser.add_argument("--rounds", type=int, default=8, help="recorded INSERTs per arm")
    parser.add_argument("--warmup", type=int, default=2, help="unrecorded INSERTs per arm")
    parser.add_argument("--repeats", type=int, default=5, help="in-process timings")
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--spark", action="store_true", help="also real Spark INSERTs")
    args = parser.parse_args()
    if args.quick:
        args.files, args.rounds, args.warmup, args.repeats = 20, 2, 1, 2
    return args


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        with icegov_server(["catalog", "--warehouse", str(tmp / "wh")], free_port()) as direct, \
                icegov_server(["serve", "--catalog-uri", direct], free_port(),
                              governed_env(tmp)) as checked:
            port = free_port()
            (tmp / "unchecked").mkdir()
            with server([*UNCHECKED_ICEGOV, "serve", "--catalog-uri", direct, "--port",
                         str(port)], port, governed_env(tmp / "unchecked")) as unchecked:
                admin = catalog(direct)
                admin.create_namespace(NAMESPACE)
                urls = {"direct": direct, "unchecked": unchecked.url, "icegov": checked}
                arms = run_inserts(admin, urls, args)
                report(arms, in_process(arms[2], args.repeats), args)
                if args.spark:
                    run_spark(urls, args)
    print(f"\n(total {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
