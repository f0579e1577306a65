"""The planning benchmark's table (``benchmarks/planning.py``): 200 manifests x 1,000 data-file
entries by default, partitioned by ``identity(region)`` over 50 regions, each entry with realistic
statistics, written with pyiceberg's manifest writers and committed straight into the embedded
catalog's SqlCatalog (the data files do not exist: planning reads only metadata). Cached in the
benchmark's work directory."""

from __future__ import annotations

import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.conversions import to_bytes
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestEntry,
    ManifestFile,
    write_manifest,
    write_manifest_list,
)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update import AddSnapshotUpdate, AssertRefSnapshotId, SetSnapshotRefUpdate
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import (
    DoubleType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestamptzType,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from passthrough import REPO

sys.path.insert(0, str(REPO))
from proxy.catalog.store import open_catalog

NAMESPACE = "bench"
REGIONS = tuple(f"region-{i:02d}" for i in range(50))
SELECTED_REGION = "region-07"
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "region", StringType(), required=True),
    NestedField(3, "event_ts", TimestamptzType(), required=False),
    NestedField(4, "amount", DoubleType(), required=False),
    NestedField(5, "quantity", IntegerType(), required=False),
    NestedField(6, "customer", StringType(), required=False),
    NestedField(7, "status", StringType(), required=False),
    NestedField(8, "note", StringType(), required=False),
)
SPEC = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "region"))
BLOCK_ENTRIES = 500  # entries per Avro block (Java's writers block by size; pyiceberg's by entry)
EPOCH_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z in microseconds
BUILD_VERSION = "1"  # bump when the table layout changes: cached tables are rebuilt


# -- the table -------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableShape:
    """How many manifests, and data-file entries in each."""

    manifests: int
    entries: int

    @property
    def files(self) -> int:
        return self.manifests * self.entries

    @property
    def name(self) -> str:
        return f"files_{self.manifests}x{self.entries}"


def data_file(table_location: str, index: int) -> DataFile:
    """The ``index``-th data file: region ``index % 50``, ids and timestamps in disjoint ranges
    growing with ``index``, and stats for every column (bounds of strings cut to 16 chars)."""
    region = REGIONS[index % len(REGIONS)]
    rows = 20_000 + index * 7919 % 10_000
    first_id, start_us = index * 30_000, EPOCH_US + index * 60_000_000
    nulls = {3: 0, 4: rows // 100, 5: rows // 50, 6: 0, 7: 0, 8: rows // 3}
    bounds: dict[int, tuple[Any, Any]] = {
        1: (first_id, first_id + rows - 1),
        2: (region, region),
        3: (start_us, start_us + 59_999_999),
        4: (0.01 * (index % 97), 10_000.0 + index % 1013),
        5: (1, 100 + index % 50),
        6: (f"cust-{index % 9973:05d}", f"cust-{(index % 9973) + 500:05d}"),
        7: ("cancelled", "shipped"),
        8: ("a note about th", "zz note about t"),
    }
    sizes = {1: rows * 3, 2: 40, 3: rows * 4, 4: rows * 8, 5: rows * 2, 6: rows * 5, 7: 120,
             8: rows * 30}
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=f"{table_location}/data/region={region}/{index:07d}-{uuid.uuid4()}.parquet",
        file_format=FileFormat.PARQUET,
        partition=Record(region),
        record_count=rows,
        file_size_in_bytes=sum(sizes.values()) + 4096,
        column_sizes=sizes,
        value_counts={field_id: rows for field_id in sizes},
        null_value_counts=nulls | {1: 0, 2: 0},
        nan_value_counts={4: 0},
        lower_bounds={i: to_bytes(SCHEMA.find_type(i), lo) for i, (lo, _) in bounds.items()},
        upper_bounds={i: to_bytes(SCHEMA.find_type(i), hi) for i, (_, hi) in bounds.items()},
        key_metadata=None,
        split_offsets=[4],
        equality_ids=None,
        sort_order_id=None,
        spec_id=SPEC.spec_id,
    )


class _BlockedWrites:
    """Wraps a manifest writer's Avro file so entries go out ``BLOCK_ENTRIES`` to a block, as in
    Java-written manifests (pyiceberg's writer makes one block per entry)."""

    def __init__(self, avro_file: Any) -> None:
        self._file, self._pending = avro_file, []  # type: ignore[var-annotated]

    def write_block(self, objects: list[Any]) -> None:
        self._pending.extend(objects)
        if len(self._pending) >= BLOCK_ENTRIES:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            self._file.write_block(self._pending)
            self._pending = []

    def __exit__(self, *exc: Any) -> None:
        self._flush()
        self._file.__exit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


def write_one_manifest(table: Table, snapshot_id: int, first_index: int,
                       entries: int) -> ManifestFile:
    """One manifest of ``entries`` added data files, numbered from ``first_index``."""
    path = f"{table.location()}/metadata/{uuid.uuid4()}-m{first_index // entries}.avro"
    writer = write_manifest(2, SPEC, SCHEMA, table.io.new_output(path), snapshot_id, "deflate")
    with writer:
        writer._writer = _BlockedWrites(writer._writer)  # type: ignore[assignment]
        for index in range(first_index, first_index + entries):
            writer.add(ManifestEntry.from_args(snapshot_id=snapshot_id,
                                               data_file=data_file(table.location(), index)))
    return writer.to_manifest_file()


def commit_snapshot(catalog: SqlCatalog, table: Table, shape: TableShape) -> None:
    """Write the manifests and a manifest list over them; commit them as the table's first
    snapshot on ``main``."""
    snapshot_id = table.metadata.new_snapshot_id()
    manifests = [write_one_manifest(table, snapshot_id, m * shape.entries, shape.entries)
                 for m in range(shape.manifests)]
    list_path = f"{table.location()}/metadata/snap-{snapshot_id}-1-{uuid.uuid4()}.avro"
    with write_manifest_list(2, table.io.new_output(list_path), snapshot_id, None, 1,
                             "deflate") as writer:
        writer.add_manifests(manifests)
    records = sum(m.added_rows_count or 0 for m in manifests)
    summary = Summary(Operation.APPEND, **{
        "added-data-files": str(shape.files), "added-records": str(records),
        "total-data-files": str(shape.files), "total-records": str(records),
        "total-delete-files": "0", "total-position-deletes": "0",
        "total-equality-deletes": "0"})
    snapshot = Snapshot(snapshot_id=snapshot_id, parent_snapshot_id=None, sequence_number=1,
                        timestamp_ms=int(time.time() * 1000), manifest_list=list_path,
                        summary=summary, schema_id=table.schema().schema_id)
    catalog.commit_table(table, (AssertRefSnapshotId(ref="main", snapshot_id=None),),
                         (AddSnapshotUpdate(snapshot=snapshot),
                          SetSnapshotRefUpdate(ref_name="main", type="branch",
                                               snapshot_id=snapshot_id)))


def warehouse_catalog(workdir: Path) -> SqlCatalog:
    """The embedded catalog's SqlCatalog, where ``icegov serve --warehouse`` will find it."""
    warehouse = workdir / "warehouse"
    return open_catalog(f"sqlite:///{warehouse.resolve() / 'catalog.db'}", warehouse)


def ensure_table(workdir: Path, shape: TableShape) -> str:
    """The benchmark table of ``shape`` in ``workdir``, built unless a finished build is there;
    returns its identifier."""
    catalog = warehouse_catalog(workdir)
    identifier = f"{NAMESPACE}.{shape.name}"
    marker = workdir / f"{shape.name}.built"
    if marker.exists() and marker.read_text() == BUILD_VERSION and catalog.table_exists(identifier):
        return identifier
    catalog.create_namespace_if_not_exists(NAMESPACE)
    if catalog.table_exists(identifier):
        catalog.drop_table(identifier)
    started = time.perf_counter()
    table = catalog.create_table(identifier, SCHEMA, partition_spec=SPEC,
                                 properties={"format-version": "2"})
    commit_snapshot(catalog, table, shape)
    marker.write_text(BUILD_VERSION)
    print(f"# built {identifier}: {shape.files:,} entries in {shape.manifests} manifests "
          f"({time.perf_counter() - started:.0f} s)", flush=True)
    return identifier
