"""Do an added Parquet file's columns make it the kind of content file it claims to be, of this
table? Checked from the footer's schema (its Iceberg field ids, or the table's name mapping when
the file has none, as readers resolve it; a file with ids on some columns only is refused: Java
reads it by id, pyiceberg by the name mapping, and the two read different columns; so is one
that gives an id to several columns):

* data files and equality delete files: every field id is a column of the table (the newest of
  its schemas that has it) and its type reads as that column's type (equal, or an Iceberg type
  promotion); an equality delete file also holds every column of its ``equality-ids``;
* position delete files: ``file_path`` (2147483546, string) and ``pos`` (2147483545, long), and
  at most the optional ``row`` struct (2147483544) of table columns besides;
* a format 3 table's data files may also hold the row lineage columns ``_row_id`` and
  ``_last_updated_sequence_number`` (long), which writers keep for updated rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

import pyarrow as pa
from pyiceberg.exceptions import ResolveError
from pyiceberg.io.pyarrow import pyarrow_to_schema
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema, index_by_id, promote
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.name_mapping import NameMapping, parse_mapping_from_json
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
ROW_LINEAGE_IDS = frozenset({2147483540, 2147483539})
"""``_row_id`` and ``_last_updated_sequence_number``: format 3 writers keep them in the data files
of updated rows (both long)."""


_NAME_MAPPING = "schema.name-mapping.default"


@dataclass(frozen=True)
class FileRules:
    """What a table lets its files hold: every column id of its schemas (as the newest schema
    that has it defines it), the name mapping that resolves files without field ids, and the
    format version (which types exist)."""

    columns: Mapping[int, NestedField]
    name_mapping: NameMapping | None
    format_version: int
    specs: Mapping[int, PartitionSpec] = dataclass_field(default_factory=dict)
    added_spec: PartitionSpec | None = None  # the last ``add-spec`` of the commit, if any

    @classmethod
    def of(cls, metadata: TableMetadata) -> FileRules:
        """The rules of a table as ``metadata`` describes it."""
        return cls(table_columns(metadata), metadata.name_mapping(), metadata.format_version,
                   metadata.specs())

    def spec_of(self, spec_id: int | None) -> PartitionSpec | None:
        """The partition spec ``spec_id`` names: the table's, or one the commit adds (a spec
        id the commit's ``add-spec`` left to the catalog is taken as the one it adds)."""
        found = self.specs.get(spec_id) if spec_id is not None else None
        if found is None and self.added_spec is not None:
            return self.added_spec
        return found

    @classmethod
    def after(cls, base: TableMetadata | None, updates: Iterable[Any]) -> FileRules:
        """The rules once ``updates`` (a commit's, already shape-checked) apply to ``base``
        (None: a create): their ``add-schema`` columns, ``set-properties`` name mapping and
        ``upgrade-format-version`` count (a file may hold a column added by the same commit)."""
        schemas = list(base.schemas) if base is not None else []
        properties = dict(base.properties) if base is not None else {}
        version = base.format_version if base is not None else 1
        specs = dict(base.specs()) if base is not None else {}
        added = None
        for update in updates:
            action = update.get("action") if isinstance(update, dict) else None
            if action == "add-spec":
                added = _spec(update.get("spec"), specs)
                specs.setdefault(added.spec_id, added)
            elif action == "add-schema":
                schemas.append(_schema(update.get("schema")))
            elif action == "set-properties" and isinstance(update.get("updates"), dict):
                properties.update(update["updates"])
            elif action == "upgrade-format-version" and type(update.get("format-version")) \
                    is int:
                version = max(version, update["format-version"])
        if not specs:  # a create naming no spec: catalogs give it the unpartitioned one
            specs[UNPARTITIONED_PARTITION_SPEC.spec_id] = UNPARTITIONED_PARTITION_SPEC
        return cls(_columns(schemas), _mapping(properties.get(_NAME_MAPPING)), version, specs,
                   added)


def _spec(raw: Any, known: Mapping[int, PartitionSpec]) -> PartitionSpec:
    """An ``add-spec`` update's spec (no ``spec-id``: the next id, as catalogs assign it)."""
    if isinstance(raw, dict) and "spec-id" not in raw:
        raw = {**raw, "spec-id": max(known, default=-1) + 1}
    try:
        return PartitionSpec.model_validate(raw)
    except Exception as exc:  # pydantic's message would echo the input
        raise UnverifiableCommit("cannot verify the commit: an add-spec update has a "
                                 "malformed spec") from exc


def _schema(raw: Any) -> Schema:
    try:
        return Schema.model_validate(raw)
    except Exception as exc:  # pydantic's message would echo the input
        raise UnverifiableCommit("cannot verify the commit: an add-schema update has a "
                                 "malformed schema") from exc


def _mapping(raw: Any) -> NameMapping | None:
    if raw is None:
        return None
    try:
        return parse_mapping_from_json(str(raw))
    except Exception as exc:
        raise UnverifiableCommit("cannot verify the commit: the table's name mapping "
                                 "(schema.name-mapping.default) is malformed") from exc


def table_columns(metadata: TableMetadata) -> dict[int, NestedField]:
    """Every column id of the table's schemas, as the newest schema that has it defines it."""
    return _columns(metadata.schemas)


def _columns(schemas: Iterable[Schema]) -> dict[int, NestedField]:
    columns: dict[int, NestedField] = {}
    for schema in sorted(schemas, key=lambda s: s.schema_id):
        columns.update(index_by_id(schema))
    return columns


def file_schema(data_file: DataFile, arrow: pa.Schema, rules: FileRules) -> Schema:
    """The Iceberg schema of a Parquet file (its field ids, else the table's name mapping);
    400 if it has neither or holds types Iceberg cannot read."""
    return _file_schema(arrow, rules, shown_path(data_file.file_path))


def check_columns(data_file: DataFile, converted: Schema, rules: FileRules) -> None:
    """Refuse (400) ``data_file`` if its schema ``converted`` (``file_schema``) does not fit
    what it claims to be under ``rules``."""
    shown = shown_path(data_file.file_path)
    columns = rules.columns
    found = index_by_id(converted)
    table_fields = found
    if data_file.content == DataFileContent.POSITION_DELETES:
        _check_position_columns(converted, found, shown)
        table_fields = {i: f for i, f in found.items() if i not in (_PATH, _POS, _ROW)}
    elif data_file.content == DataFileContent.DATA and rules.format_version >= 3:
        lineage = {i: f for i, f in found.items() if i in ROW_LINEAGE_IDS}
        if any(f.field_type != LongType() for f in lineage.values()):
            raise UnverifiableCommit(f"data file {shown} has a row lineage column that is not "
                                     "a long")
        table_fields = {i: f for i, f in found.items() if i not in lineage}
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


def id_problem(arrow: pa.Schema) -> str | None:
    """Why readers could read a file schema's columns differently, or None: some fields carry
    an Iceberg field id and some do not (Java reads such a file by id, ignoring the others;
    pyiceberg applies the table's name mapping to it, by name), or two fields carry the same
    id (which one is read is the reader's choice)."""
    fields = _all_fields(arrow)
    if {_has_id(f) for f in fields} == {True, False}:
        return "gives Iceberg field ids to some of its columns only"
    ids = [(f.metadata or {}).get(_FIELD_ID) for f in fields if _has_id(f)]
    if len(ids) != len(set(ids)):
        return "gives one Iceberg field id to several columns"
    return None


_FIELD_ID = b"PARQUET:field_id"


def _has_id(field: pa.Field) -> bool:
    return _FIELD_ID in (field.metadata or {})


def _all_fields(arrow: pa.Schema) -> list[pa.Field]:
    pending, fields = list(arrow), []
    while pending:
        current = pending.pop()
        fields.append(current)
        kind = current.type
        if pa.types.is_struct(kind):
            pending += [kind.field(i) for i in range(kind.num_fields)]
        elif pa.types.is_map(kind):
            pending += [kind.key_field, kind.item_field]
        elif pa.types.is_list(kind) or pa.types.is_large_list(kind) \
                or pa.types.is_fixed_size_list(kind):
            pending.append(kind.value_field)
    return fields


def _file_schema(arrow: pa.Schema, rules: FileRules, shown: str) -> Schema:
    problem = id_problem(arrow)
    if problem is not None:
        raise UnverifiableCommit(f"content file {shown} {problem}: readers disagree which "
                                 "columns it holds")
    try:
        return pyarrow_to_schema(arrow, name_mapping=rules.name_mapping,
                                 downcast_ns_timestamp_to_us=True,
                                 format_version=rules.format_version)  # type: ignore[arg-type]
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

