"""Do an added Parquet file's columns make it the kind of content file it claims to be, of this
table? Checked from the footer's schema (its Iceberg field ids, or the table's name mapping when
the file has none, as readers resolve it):

* data files and equality delete files: every field id is a column of the table (the newest of
  its schemas that has it) and its type reads as that column's type (equal, or an Iceberg type
  promotion); an equality delete file also holds every column of its ``equality-ids``;
* position delete files: ``file_path`` (2147483546, string) and ``pos`` (2147483545, long), and
  at most the optional ``row`` struct (2147483544) of table columns besides.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
from pyiceberg.exceptions import ResolveError
from pyiceberg.io.pyarrow import pyarrow_to_schema
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.schema import Schema, index_by_id, promote
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.types import (
    DecimalType,
    IcebergType,
    LongType,
    NestedField,
    PrimitiveType,
    StringType,
    StructType,
)

from proxy.commits.confine import shown_path
from proxy.commits.intent import UnverifiableCommit

_PATH, _POS, _ROW = 2147483546, 2147483545, 2147483544


def table_columns(metadata: TableMetadata) -> dict[int, NestedField]:
    """Every column id of the table's schemas, as the newest schema that has it defines it."""
    columns: dict[int, NestedField] = {}
    for schema in sorted(metadata.schemas, key=lambda s: s.schema_id):
        columns.update(index_by_id(schema))
    return columns


def check_columns(data_file: DataFile, file_schema: pa.Schema, metadata: TableMetadata,
                  columns: Mapping[int, NestedField]) -> None:
    """Refuse (400) ``data_file`` if its Parquet schema ``file_schema`` does not fit what it
    claims to be (``columns``: ``table_columns(metadata)``)."""
    shown = shown_path(data_file.file_path)
    converted = _file_schema(file_schema, metadata, shown)
    found = index_by_id(converted)
    table_fields = found
    if data_file.content == DataFileContent.POSITION_DELETES:
        _check_position_columns(converted, found, shown)
        table_fields = {i: f for i, f in found.items() if i not in (_PATH, _POS, _ROW)}
    for field_id, field in table_fields.items():
        column = columns.get(field_id)
        if column is None or not _reads_as(field.field_type, column.field_type):
            raise UnverifiableCommit(
                f"content file {shown} has a column that is not a column of the table"
                if column is None else
                f"content file {shown} holds column {column.name!r:.60} with a type that does "
                f"not read as the table's {column.field_type}")
    if data_file.content == DataFileContent.EQUALITY_DELETES:
        missing = [i for i in data_file.equality_ids or [] if i not in found]
        if missing:
            raise UnverifiableCommit(f"equality delete file {shown} lacks its equality-ids "
                                     f"column(s) {missing[:10]}")


def _file_schema(file_schema: pa.Schema, metadata: TableMetadata, shown: str) -> Schema:
    try:
        return pyarrow_to_schema(file_schema, name_mapping=metadata.name_mapping(),
                                 downcast_ns_timestamp_to_us=True,
                                 format_version=metadata.format_version)
    except Exception as exc:  # no field ids, unmapped names, types Iceberg cannot read
        raise UnverifiableCommit(
            f"content file {shown} has no Iceberg field ids (and the table's name mapping "
            "does not name its columns) or has columns of types Iceberg cannot read") from exc


def _check_position_columns(converted: Schema, found: Mapping[int, NestedField],
                            shown: str) -> None:
    path, pos, row = found.get(_PATH), found.get(_POS), found.get(_ROW)
    if path is None or pos is None or path.field_type != StringType() \
            or pos.field_type != LongType():
        raise UnverifiableCommit(f"position delete file {shown} needs the columns file_path "
                                 f"(field id {_PATH}, string) and pos (field id {_POS}, long)")
    if {f.field_id for f in converted.fields} - {_PATH, _POS, _ROW} or (
            row is not None and not isinstance(row.field_type, StructType)):
        raise UnverifiableCommit(f"position delete file {shown} has columns besides file_path, "
                                 "pos and the row struct")


def _reads_as(file_type: object, table_type: IcebergType) -> bool:
    """Does a column written as ``file_type`` read as ``table_type``?"""
    if not isinstance(file_type, IcebergType):
        return False  # e.g. a timestamp in a zone Iceberg has no type for
    if isinstance(table_type, PrimitiveType) or isinstance(file_type, PrimitiveType):
        if not (isinstance(table_type, PrimitiveType) and isinstance(file_type, PrimitiveType)):
            return False
        if file_type == table_type:
            return True
        if isinstance(file_type, DecimalType) and isinstance(table_type, DecimalType):
            return file_type.scale == table_type.scale \
                and file_type.precision <= table_type.precision
        try:
            promote(file_type, table_type)
        except ResolveError:
            return False
        return True
    return type(file_type) is type(table_type)  # struct, list, map: children checked by id

