"""A table with real data and delete files, and governed copy jobs over it (test-only)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.expressions import BooleanExpression
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

from proxy.commits.rowfiles import RowFile
from proxy.governed.copies import CopyJob, Reading, row_filter_json
from tests.support.row_files import RowTable

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "name", StringType()),
    NestedField(3, "email", StringType()),
    NestedField(4, "region", StringType()),
    NestedField(5, "ts", TimestamptzType()),
)
UTC = dt.UTC
ROWS = pa.table({
    "id": pa.array(range(6), pa.int64()),
    "name": ["ann", "bob", "cyd", "dan", "eve", "fay"],
    "email": ["ann@x.io", "bob@y.io", None, "dan@z.io", "eve@x.io", "fay@y.io"],
    "region": ["EU", "US", "EU", "EU", None, "EU"],
    "ts": pa.array([dt.datetime(2024, 7, 15, 10, tzinfo=UTC)] * 6, pa.timestamp("us", "UTC")),
}).cast(schema_to_pyarrow(SCHEMA, include_field_ids=False))


def table(folder: Path, format_version: int = 2) -> RowTable:
    folder.mkdir(parents=True, exist_ok=True)
    return RowTable.create(folder, SCHEMA, [ROWS], format_version=format_version)


def row_file(file: DataFile, sequence: int) -> RowFile:
    """The ``RowFile`` a manifest entry of ``file`` would give."""
    def optional(position: int) -> Any:  # v3 fields pyiceberg 0.12 holds but does not name
        return file[position] if len(file) > position else None
    return RowFile(
        path=file.file_path, content=file.content, file_format=file.file_format,
        records=file.record_count, size=file.file_size_in_bytes, sequence=sequence,
        spec_id=0, partition=tuple(file.partition),
        equality_ids=tuple(file.equality_ids or ()), offset=optional(18),
        length=optional(19), referenced=optional(17), referenced_field=optional(17))


def job(rt: RowTable, out: str, *, deletes: tuple[RowFile, ...] = (),
        keep: tuple[int, ...] = (1, 2, 3, 4, 5), row_filter: BooleanExpression | None = None,
        masks: tuple[tuple[int, str, str | None], ...] = (), max_bytes: int = 10**8,
        data: RowFile | None = None, **extra: Any) -> CopyJob:
    """A copy job of the table's first data file."""
    file, sequence = rt.data_files()[0]
    metadata = rt.table.metadata
    return CopyJob(
        data=data or row_file(file, sequence), deletes=deletes,
        schema_json=metadata.schema().model_dump_json(), keep_field_ids=keep,
        row_filter_json=None if row_filter is None else row_filter_json(row_filter),
        masks=masks, out_path=out, io_properties=tuple(rt.table.io.properties.items()),
        max_bytes=max_bytes, reading=Reading.of(metadata, 0), **extra)
