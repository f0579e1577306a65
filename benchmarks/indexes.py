"""Bloom-filter indexes (issue 22): point lookups planned with and without the index.

Builds (in ``--workdir``, a fresh SqlCatalog warehouse) a table of ``--files`` Parquet files
(one per ``shard`` partition, written by pyiceberg in appends of 100 files) of ``--rows`` rows
each, whose ``user_id`` values are drawn at random from 0..10⁹: every file's min/max spans nearly
the whole range, so neither partitions nor column metrics can prune a point lookup on
``user_id``. The table sets ``icegov.index.bloom-filter-columns=user_id``.

Then, in this order, in one process:

* **baseline**: icegov's planner (``proxy.planning.planner.Planner``, manifest cache warm) plans
  ``user_id = X`` for ``--lookups`` ids present in the table, without an index: files planned
  and plan time (p50);
* **backfill**: ``IndexService`` (icegov's index service, default settings: 2 threads, 1 %
  false-positive rate, in-process) builds every file's filter; wall time, and per GB of data;
* **indexed**: the same lookups planned with the index pruner (its creation included in the
  time): files planned and plan time, and the ratios to the baseline (targets: >= 10x fewer
  files, plan time <= 1.2x); every planned set must contain the files really holding the id;
* **append**: ``--append-files`` more files appended; the time from the commit to the new files'
  filters being in memory (``landed`` → idle), per GB appended.

Run: ``python benchmarks/indexes.py`` (``--quick``: 100 files, seconds).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import EqualTo
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proxy.commits.index_property import BLOOM_FILTER_COLUMNS
from proxy.indexes.service import IndexService
from proxy.indexes.settings import IndexSettings
from proxy.planning.manifest_cache import ManifestCache
from proxy.planning.planner import Planner
from proxy.planning.scope import ScanSpec

SCHEMA = Schema(NestedField(1, "shard", LongType(), required=False),
                NestedField(2, "user_id", LongType(), required=False),
                NestedField(3, "payload", StringType(), required=False))
SPEC = PartitionSpec(PartitionField(1, 1000, IdentityTransform(), "shard"))
BATCH = 100


def append(table: Any, shards: range, rows: int, rng: random.Random,
           where: dict[int, set[int]]) -> None:
    """Append one file per shard, ``rows`` random user ids each, noting where each id is."""
    for start in range(shards.start, shards.stop, BATCH):
        shard_col: list[int] = []
        users: list[int] = []
        for shard in range(start, min(start + BATCH, shards.stop)):
            ids = [rng.randrange(1_000_000_000) for _ in range(rows)]
            shard_col += [shard] * rows
            users += ids
            for user in ids:
                where[user].add(shard)
        table.append(pa.table({"shard": pa.array(shard_col, pa.int64()),
                               "user_id": pa.array(users, pa.int64()),
                               "payload": [f"payload-{u}" for u in users]}))


def data_bytes(planner: Planner, table: Any) -> int:
    return sum(t.file.file_size_in_bytes for t in planner.plan(table.metadata, table.io,
                                                              ScanSpec()).tasks)


def lookups(planner: Planner, table: Any, users: list[int], service: IndexService | None
            ) -> tuple[list[float], list[int], list[set[str]]]:
    """Plan ``user_id = u`` for each user: seconds, files planned, paths planned."""
    seconds, counts, planned = [], [], []
    for user in users:
        spec = ScanSpec(filter=EqualTo("user_id", user))
        started = time.perf_counter()
        index = (service.pruner(table.metadata, table.io, spec, frozenset())
                 if service is not None else None)
        plan = planner.plan(table.metadata, table.io, spec, index=index)
        seconds.append(time.perf_counter() - started)
        counts.append(len(plan.tasks))
        planned.append({t.file.file_path for t in plan.tasks})
    return seconds, counts, planned


def shard_of(path: str) -> int:
    return int(path.split("shard=")[1].split("/")[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=500)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--lookups", type=int, default=50)
    parser.add_argument("--append-files", type=int, default=50)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.files, args.rows, args.lookups, args.append_files = 100, 2_000, 20, 10
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="icegov-bench-indexes-"))
    rng = random.Random(22)
    catalog = SqlCatalog("bench", uri=f"sqlite:///{workdir}/catalog.db",
                         warehouse=workdir.as_uri())
    catalog.create_namespace("bench")
    table = catalog.create_table("bench.users", SCHEMA, partition_spec=SPEC,
                                 properties={BLOOM_FILTER_COLUMNS: "user_id"})
    where: dict[int, set[int]] = defaultdict(set)
    started = time.perf_counter()
    append(table, range(args.files), args.rows, rng, where)
    table = catalog.load_table("bench.users")
    print(f"table: {args.files} files x {args.rows} rows written in "
          f"{time.perf_counter() - started:.1f} s ({workdir})")

    planner = Planner(ManifestCache(10_000_000))
    size = data_bytes(planner, table)
    users = rng.sample(sorted(u for u in where if 100_000_000 < u < 900_000_000), args.lookups)
    lookups(planner, table, users[:3], None)  # warm the manifest cache
    base_s, base_n, _ = lookups(planner, table, users, None)

    service = IndexService(IndexSettings(), planner.manifests, {})
    started = time.perf_counter()
    service.want(table.metadata, table.io)
    assert service.wait_idle(3600)
    backfill = time.perf_counter() - started
    assert service.stats.built == args.files, service.stats

    lookups(planner, table, users[:3], service)
    idx_s, idx_n, idx_paths = lookups(planner, table, users, service)
    for user, paths in zip(users, idx_paths, strict=True):
        assert where[user] <= {shard_of(p) for p in paths}, "an index dropped a holding file"

    before = service.stats.built
    append(table, range(args.files, args.files + args.append_files), args.rows, rng, where)
    table = catalog.load_table("bench.users")
    appended = data_bytes(planner, table) - size
    started = time.perf_counter()
    service.landed(table.metadata)
    assert service.wait_idle(3600)
    incremental = time.perf_counter() - started
    assert service.stats.built - before == args.append_files
    service.close()
    planner.close()
    report(args, size, appended, base_s, base_n, idx_s, idx_n, backfill, incremental)


def report(args: Any, size: int, appended: int, base_s: list[float], base_n: list[int],
           idx_s: list[float], idx_n: list[int], backfill: float, incremental: float) -> None:
    p50 = statistics.median
    print(f"\n{args.lookups} point lookups on user_id, {args.files} files "
          f"({size / 1e6:.1f} MB of Parquet)\n")
    print(f"{'scenario':<16} {'files planned (mean)':>20} {'plan p50 ms':>12} "
          f"{'files ratio':>12} {'time ratio':>11}")
    base_files, idx_files = statistics.mean(base_n), statistics.mean(idx_n)
    print(f"{'no index':<16} {base_files:>20.1f} {p50(base_s) * 1e3:>12.2f} "
          f"{'1.00':>12} {'1.00':>11}")
    print(f"{'bloom index':<16} {idx_files:>20.1f} {p50(idx_s) * 1e3:>12.2f} "
          f"{idx_files / base_files:>12.3f} {p50(idx_s) / p50(base_s):>11.2f}")
    print(f"\nfewer files: {base_files / max(idx_files, 1e-9):.0f}x (target >= 10x); "
          f"plan time {p50(idx_s) / p50(base_s):.2f}x without (target <= 1.2x)")
    print(f"backfill: {args.files} files in {backfill:.2f} s = "
          f"{backfill / (size / 1e9):.1f} s per GB read")
    print(f"append:   {args.append_files} files indexed {incremental:.2f} s after the commit = "
          f"{incremental / (appended / 1e9):.1f} s per appended GB")


if __name__ == "__main__":
    main()
