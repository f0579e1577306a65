"""What proving an added file's partition values costs a commit (``proxy/commits/partition_proof``).

A real partitioned table (pyiceberg, local SQLite catalog) and one added Parquet data file per
row: its rows in one partition, of ``--rows`` rows (id, region, at, payload). Each row times
``footers.check_added_files`` on that file — what every commit path runs before forwarding —
with the partition proof (the source columns read) and without it (the footer checks alone,
the baseline, in the same run), best of ``--repeat``; the ratio is the proof's cost.

Run: ``python benchmarks/partition_proof.py [--rows 1000000] [--repeat 5]``. Prints a markdown
table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform, Transform
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

sys.path.insert(0, str(Path(__file__).resolve().parent))

from policy_tools import timed

from proxy.commits import footers
from proxy.commits.columns import FileRules
from proxy.commits.limits import CommitLimits

SCHEMA = Schema(NestedField(1, "id", LongType(), required=True),
                NestedField(2, "region", StringType()),
                NestedField(3, "at", TimestamptzType()),
                NestedField(4, "payload", StringType()))
DAY = dt.datetime(2026, 11, 28, tzinfo=dt.UTC)
CASES: list[tuple[str, int, Transform[Any, Any]]] = [
    ("identity(region)", 2, IdentityTransform()),
    ("day(at)", 3, DayTransform()),
    ("bucket 16 of id: every id read", 1, BucketTransform(16)),
]


def rows(count: int, bucket_of: Callable[[int], int] | None) -> pa.Table:
    """``count`` rows of one region and day; for a bucket case, ids of one bucket only."""
    ids = [i for i in range(count * 20) if bucket_of(i) == 0][:count] if bucket_of else \
        list(range(count))
    moments = [DAY + dt.timedelta(seconds=i % 86_000) for i in range(count)]
    data = {"id": ids, "region": ["eu"] * count, "at": moments,
            "payload": [f"order {i} of a customer" for i in range(count)]}
    return pa.table(data, schema=schema_to_pyarrow(SCHEMA))


def one_case(folder: Path, name: str, source: int, transform: Transform[Any, Any],
             count: int, repeat: int) -> tuple[str, str, float, float]:
    catalog = SqlCatalog("bench", uri=f"sqlite:///{folder}/c.db", warehouse=folder.as_uri())
    catalog.create_namespace("db")
    spec = PartitionSpec(PartitionField(source, 1000, transform, "p"))
    table = catalog.create_table("db.t", SCHEMA, partition_spec=spec)
    source_type = SCHEMA.find_field(source).field_type
    apply = transform.transform(source_type)
    bucket = isinstance(transform, BucketTransform)
    data = rows(count, (lambda i: int(apply(i))) if bucket else None)
    path = f"{table.location()}/data/added.parquet"
    with table.io.new_output(path).create() as out:
        pq.write_table(data, out)
    first = data.column(SCHEMA.find_field(source).name)[0].as_py()
    value = apply(_internal(first))
    data_file = DataFile.from_args(content=DataFileContent.DATA, file_path=path,
                                   file_format=FileFormat.PARQUET, partition=Record(value),
                                   record_count=count,
                                   file_size_in_bytes=len(table.io.new_input(path)))
    data_file.spec_id = spec.spec_id
    rules = FileRules.of(table.metadata)

    def check() -> None:
        footers.check_added_files([data_file], rules, table.io,
                                  table_uuid=str(table.metadata.table_uuid),
                                  limits=CommitLimits())

    proved, _ = timed(check, repeat)
    real = footers.partition_problem
    footers.partition_problem = lambda *_: None  # type: ignore[assignment]
    try:
        baseline, _ = timed(check, repeat)
    finally:
        footers.partition_problem = real
    size = f"{count:,} rows, {len(table.io.new_input(path)) / 1e6:.1f} MB"
    return name, size, baseline * 1000, proved * 1000


def _internal(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return int((value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)).total_seconds() * 1e6)
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print("| partition | added file | footer checks (ms) | + partition proof (ms) | ratio |")
    print("|---|---|---|---|---|")
    for count in (1_000, args.rows):
        for name, source, transform in CASES:
            with tempfile.TemporaryDirectory(prefix="icegov-partition-proof-") as tmp:
                case, size, base, proved = one_case(Path(tmp), name, source, transform, count,
                                                    args.repeat)
            print(f"| {case} | {size} | {base:.2f} | {proved:.2f} | {proved / base:.2f}x |")


if __name__ == "__main__":
    main()
