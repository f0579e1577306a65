"""Writing governed Parquet files, and the facts a manifest entry states about them.

``write_rows`` writes a table as Parquet with Iceberg field ids (pyiceberg's
``schema_to_pyarrow``), so that no reader sees a half file at the final location: a local
file is written beside it and renamed into place; on an object store the object appears whole
when its upload completes. ``existing_facts`` answers for a file already at the location (names
are content-addressed, so it holds what would be written), read from its footer.

The facts: record count, size, split offsets and the column statistics pyiceberg derives from
the footer (``data_file_statistics_from_parquet_metadata``, default metrics mode), without
those of masked columns (their nested fields included): bounds and counts of a masked column
would describe the values it hides.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Set
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import (
    PyArrowFileIO,
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
    schema_to_pyarrow,
)
from pyiceberg.schema import Schema

_FIELD_ID = b"PARQUET:field_id"
_LOCAL = ("", "file")

Facts = tuple[int, int, "ColumnStats", tuple[int, ...] | None]
"""(record count, size in bytes, column statistics, split offsets)."""


class OutputFailed(Exception):
    """A governed file could not be written or read back; the message is ours."""


@dataclass(frozen=True)
class ColumnStats:
    """A data file's column metrics by field id, as a manifest entry states them (bounds in
    Iceberg's single-value binary form)."""

    value_counts: dict[int, int] = field(default_factory=dict)
    null_value_counts: dict[int, int] = field(default_factory=dict)
    nan_value_counts: dict[int, int] = field(default_factory=dict)
    lower_bounds: dict[int, bytes] = field(default_factory=dict)
    upper_bounds: dict[int, bytes] = field(default_factory=dict)
    column_sizes: dict[int, int] = field(default_factory=dict)


def write_rows(io: FileIO, path: str, rows: pa.Table, schema: Schema,
               masked: Set[int]) -> Facts:
    """Write ``rows`` (columns named as ``schema``'s) at ``path``; the facts of the file."""
    arrow_schema = schema_to_pyarrow(schema)
    table = rows.cast(arrow_schema)
    scheme = PyArrowFileIO.parse_location(path)[0]
    target = _local_path(path) if scheme in _LOCAL else None
    written = f"{path}.{uuid.uuid4().hex}.tmp" if target is not None else path
    try:
        if target is not None:
            os.makedirs(os.path.dirname(target), exist_ok=True)
        with io.new_output(written).create(overwrite=True) as stream, \
                pq.ParquetWriter(stream, arrow_schema, compression="zstd",
                                 store_decimal_as_integer=True) as writer:
            writer.write_table(table)
        if target is not None:
            os.replace(_local_path(written), target)
        size = len(io.new_input(path))
        footer = _footer(io, path)
    except Exception as exc:
        if target is not None:
            _remove(_local_path(written))
        raise OutputFailed("the governed file could not be written") from exc
    return _facts(footer, size, schema, masked)


def existing_facts(io: FileIO, path: str, schema: Schema, masked: Set[int]) -> Facts | None:
    """The facts of the file already at ``path``, None when there is none. A file there that
    does not hold ``schema``'s top-level field ids is refused."""
    try:
        if not io.new_input(path).exists():
            return None
        metadata = _footer(io, path)
        size = len(io.new_input(path))
    except Exception as exc:
        raise OutputFailed("the governed file already written could not be read") from exc
    ids = [(f.metadata or {}).get(_FIELD_ID) for f in metadata.schema.to_arrow_schema()]
    if ids != [str(f.field_id).encode() for f in schema.fields]:
        raise OutputFailed("the governed file already written holds other columns")
    return _facts(metadata, size, schema, masked)


def _facts(metadata: pq.FileMetaData, size: int, schema: Schema, masked: Set[int]) -> Facts:
    stats = data_file_statistics_from_parquet_metadata(
        parquet_metadata=metadata, stats_columns=compute_statistics_plan(schema, {}),
        parquet_column_mapping=parquet_path_to_id_mapping(schema))
    hidden = _hidden_ids(schema, masked)
    serialized = stats.to_serialized_dict()

    def shown(name: str) -> dict[int, Any]:
        return {k: v for k, v in serialized[name].items() if k not in hidden}

    column_stats = ColumnStats(
        value_counts=shown("value_counts"), null_value_counts=shown("null_value_counts"),
        nan_value_counts=shown("nan_value_counts"), lower_bounds=shown("lower_bounds"),
        upper_bounds=shown("upper_bounds"), column_sizes=shown("column_sizes"))
    offsets = tuple(stats.split_offsets) or None
    return stats.record_count, size, column_stats, offsets


def _hidden_ids(schema: Schema, masked: Set[int]) -> set[int]:
    """The masked top-level fields' ids and their nested fields' ids."""
    hidden: set[int] = set()
    for top in schema.fields:
        if top.field_id in masked:
            hidden |= Schema(top).field_ids
    return hidden


def _footer(io: FileIO, path: str) -> pq.FileMetaData:
    with io.new_input(path).open() as stream:
        return pq.ParquetFile(stream).metadata


def _local_path(location: str) -> str:
    return PyArrowFileIO.parse_location(location)[2]


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)
