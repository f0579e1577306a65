"""Governed copies of data files: one base data file in, one governed Parquet file out.

``copy_governed(job)`` reads the base file's **live** rows (the delete files that apply to it
applied: position deletes and deletion vectors by position, equality deletes by value), in the
table's schema by field id, through ``proxy.commits.rowfiles.ContentReader`` within a byte
budget. It then keeps the rows the row filter says TRUE for (NULL is not permitted: pyarrow's
Kleene logic never says TRUE where Iceberg's evaluator says FALSE), masks the masked columns
(``masks``: row filter first, on unmasked values, then masks), keeps the permitted top-level
columns and writes them as Parquet with Iceberg field ids (``outfiles``).

``CopyJob`` and ``CopiedFile`` are plain picklable values: they cross to Spark executors
(``spark_copies``). Names are content-addressed (``layout``), so a job whose ``out_path`` exists
reuses that file. A job with no permitted row writes nothing and answers ``path=""``.

Failures: a budget exhausted, an unreadable, encrypted or malformed file, rows their manifest
entry does not describe, a filter that does not round-trip exactly are ``CopyFailed`` with a
message of our own; a mask the column cannot take is ``masks.MaskUnsupported`` (the caller
refuses the read, 403).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.io.pyarrow import expression_to_pyarrow
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata, TableMetadataV2, TableMetadataV3
from pyiceberg.table.name_mapping import NameMapping
from pyiceberg.types import NestedField

from proxy.commits.confine import canonical_location
from proxy.commits.rowfiles import ContentReader, RowBudget, RowCheckFailed, RowFile
from proxy.commits.rowkeys import RowKeyError, rows_deleted_by
from proxy.commits.rowstats import partition_problem
from proxy.errors import BadRequest
from proxy.governed.masks import MaskUnsupported, mask_column
from proxy.governed.outfiles import ColumnStats, OutputFailed, existing_facts, write_rows
from proxy.planning.expressions import parse_filter_detailed
from proxy.planning.filter_json import bind_filter, filter_to_json
from proxy.reads.restrictions_json import mask_applies
from proxy.restrictions import Mask, MaskAction

_NAME_MAPPING = "schema.name-mapping.default"

__all__ = ["ColumnStats", "CopiedFile", "CopyFailed", "CopyJob", "MaskUnsupported",
           "Reading", "copy_governed", "row_filter_json"]


class CopyFailed(Exception):
    """A governed copy could not be made; the message is ours (no file content, no OS text)."""


@dataclass(frozen=True)
class Reading:
    """What reading a base file the way Iceberg readers do needs beyond its schema: its
    partition spec (identity partition values fill columns the file lacks), the table's name
    mapping (files without field ids) and format version."""

    spec_json: str | None = None
    name_mapping_json: str | None = None
    format_version: int = 2

    @classmethod
    def of(cls, metadata: TableMetadata, spec_id: int) -> Reading:
        """The reading of a file written with spec ``spec_id`` of the table ``metadata``."""
        spec = metadata.specs().get(spec_id)
        return cls(spec_json=None if spec is None else spec.model_dump_json(),
                   name_mapping_json=metadata.properties.get(_NAME_MAPPING),
                   format_version=metadata.format_version)


@dataclass(frozen=True)
class CopyJob:
    """One base data file to copy, governed (see the module docstring).

    ``masks``: (top-level field id, ``MaskAction`` value, mask value); ``row_filter_json``: the
    unbound row filter as ``row_filter_json`` writes it, None for every row;
    ``keep_field_ids``: the top-level fields written (denied ones absent); ``io_properties``:
    pyiceberg FileIO properties; ``max_bytes``: what reading may cost (``RowBudget``).
    """

    data: RowFile
    deletes: tuple[RowFile, ...]
    schema_json: str
    keep_field_ids: tuple[int, ...]
    row_filter_json: str | None
    masks: tuple[tuple[int, str, str | None], ...]
    out_path: str
    io_properties: tuple[tuple[str, str], ...]
    max_bytes: int
    reading: Reading = field(default_factory=Reading)


@dataclass(frozen=True)
class CopiedFile:
    """The governed file written (or found) for a job: ``path`` is "" when no row was
    permitted (nothing written). ``stats`` cover the kept, unmasked columns only."""

    path: str
    record_count: int
    file_size_in_bytes: int
    stats: ColumnStats = field(default_factory=ColumnStats)
    split_offsets: tuple[int, ...] | None = None


def row_filter_json(expression: BooleanExpression) -> str | None:
    """An unbound row filter as ``CopyJob.row_filter_json`` (None for ``AlwaysTrue``);
    ``ValueError`` when it has no wire form."""
    if isinstance(expression, AlwaysTrue):
        return None
    return json.dumps(filter_to_json(expression), sort_keys=True)


def copy_governed(job: CopyJob) -> CopiedFile:
    """Write the governed copy of ``job.data`` to ``job.out_path`` (or reuse the file there)."""
    schema = _schema(job)
    kept = _kept_schema(schema, job.keep_field_ids)
    masks = _masks(schema, job.masks)  # before any reuse: a refused mask is refused always
    masked_ids = {target.field_id for target, _ in masks}
    row_filter = _row_filter(job, schema)
    io = load_file_io(dict(job.io_properties), location=job.out_path)
    try:
        found = existing_facts(io, job.out_path, kept, masked_ids)
        if found is not None:
            return _copied(job.out_path, found)
        rows = _permitted(_live_rows(job, schema, io), row_filter)
        if rows.num_rows == 0:
            return CopiedFile("", 0, 0)
        rows = _masked(rows, masks)
        table = rows.select([f.name for f in kept.fields])
        return _copied(job.out_path, write_rows(io, job.out_path, table, kept, masked_ids))
    except RowCheckFailed as failed:
        raise CopyFailed(f"governed copy of {job.data.path}: {failed}") from failed
    except RowKeyError as failed:
        raise CopyFailed(f"governed copy of {job.data.path}: equality deletes do not match "
                         "the column types") from failed
    except OutputFailed as failed:
        raise CopyFailed(f"governed copy of {job.data.path}: {failed}") from failed
    except (CopyFailed, MaskUnsupported):
        raise
    except Exception as exc:  # whatever the reason, only that it failed is reported
        raise CopyFailed(f"governed copy of {job.data.path} failed") from exc


def _copied(path: str, facts: tuple[int, int, ColumnStats, tuple[int, ...] | None]
            ) -> CopiedFile:
    records, size, stats, offsets = facts
    return CopiedFile(path, records, size, stats, offsets)


def _schema(job: CopyJob) -> Schema:
    try:
        return Schema.model_validate_json(job.schema_json)
    except ValueError as exc:
        raise CopyFailed("the schema of a governed copy does not parse") from exc


def _kept_schema(schema: Schema, keep: tuple[int, ...]) -> Schema:
    top = {f.field_id for f in schema.fields}
    unknown = sorted(set(keep) - top)
    if unknown:
        raise CopyFailed(f"kept field ids {unknown} are not top-level columns of the schema")
    return Schema(*(f for f in schema.fields if f.field_id in set(keep)),
                  schema_id=schema.schema_id)


# ---- live rows ----------------------------------------------------------------------------


def _live_rows(job: CopyJob, schema: Schema, io: FileIO) -> pa.Table:
    """The rows of ``job.data`` that its delete files leave, in ``schema``."""
    metadata = _metadata(schema, job.reading, job.data.spec_id)
    content = ContentReader(io, metadata, RowBudget(job.max_bytes))
    rows = content.data_rows(job.data, schema)
    _check_partition(job, metadata, schema, rows)
    location = canonical_location(job.data.path)
    dead: list[pa.Array] = []
    for delete in job.deletes:
        if delete.positional:  # every spelling of the file: over-applying hides, never shows
            dead += [positions for path, positions in content.positions(delete).items()
                     if canonical_location(path) == location]
        elif delete.equality:
            ids = _id_schema(schema, delete.equality_ids)
            values = content.equality_values(delete, ids)
            dead.append(rows_deleted_by(rows, ids.column_names, values))
        else:
            raise CopyFailed(f"{delete.path} is not a delete file")
    if not dead:
        return rows
    everything = pa.array(range(rows.num_rows), pa.int64())
    return rows.filter(pc.invert(pc.is_in(everything, value_set=pa.concat_arrays(dead))))


def _check_partition(job: CopyJob, metadata: TableMetadata, schema: Schema,
                     rows: pa.Table) -> None:
    """Java readers take identity partition columns from the entry, pyarrow from the file:
    copy only a file whose rows its partition describes."""
    if job.reading.spec_json is None:
        return
    spec = metadata.specs().get(job.data.spec_id)
    problem = partition_problem(spec, schema, job.data.partition, rows)
    if problem is not None:
        raise CopyFailed(f"the manifest entry of data file {job.data.path} does not describe "
                         f"its rows: {problem}")


def _metadata(schema: Schema, reading: Reading, spec_id: int) -> TableMetadata:
    """A minimal table metadata for pyiceberg's reader: the schema, the file's spec and the
    name mapping."""
    try:
        specs = [] if reading.spec_json is None else [
            PartitionSpec.model_validate_json(reading.spec_json)]
        if reading.name_mapping_json is not None:
            NameMapping.model_validate_json(reading.name_mapping_json)
    except ValueError as exc:
        raise CopyFailed("the partition spec or name mapping of a governed copy does not "
                         "parse") from exc
    if specs and specs[0].spec_id != spec_id:
        raise CopyFailed(f"the partition spec given is not spec {spec_id} of the data file")
    properties = {} if reading.name_mapping_json is None else {
        _NAME_MAPPING: reading.name_mapping_json}
    fields: dict[str, Any] = {
        "location": "", "last_column_id": schema.highest_field_id, "schemas": [schema],
        "current_schema_id": schema.schema_id, "partition_specs": specs,
        "default_spec_id": specs[0].spec_id if specs else 0,
        "last_partition_id": max((f.field_id for s in specs for f in s.fields), default=999),
        "properties": properties}
    if reading.format_version >= 3:
        return TableMetadataV3(**fields)
    return TableMetadataV2(**fields)


def _id_schema(schema: Schema, ids: tuple[int, ...]) -> Schema:
    top = {f.field_id: f for f in schema.fields}
    wanted = sorted(set(ids))
    if not wanted or any(i not in top for i in wanted):
        raise CopyFailed(f"equality ids {wanted} are not top-level columns of the schema")
    return Schema(*(top[i] for i in wanted))


# ---- row filter and masks -----------------------------------------------------------------


def _row_filter(job: CopyJob, schema: Schema) -> pc.Expression | None:
    """The row filter as a pyarrow expression over ``schema``'s columns, None for none; one
    that does not round-trip exactly or does not bind to ``schema`` fails the copy."""
    if job.row_filter_json is None:
        return None
    try:
        parsed = parse_filter_detailed(json.loads(job.row_filter_json))
        if not parsed.exact:
            raise CopyFailed("the row filter does not translate exactly")
        bound = bind_filter(parsed.expression, schema, case_sensitive=True)
        return expression_to_pyarrow(bound, schema)
    except (BadRequest, ValueError, TypeError, pa.ArrowException) as exc:
        raise CopyFailed(f"the row filter does not apply to the schema of {job.data.path}"
                         ) from exc


def _permitted(rows: pa.Table, row_filter: pc.Expression | None) -> pa.Table:
    """The rows the row filter is TRUE for (NULL and FALSE are dropped)."""
    if row_filter is None or rows.num_rows == 0:
        return rows
    return rows.filter(row_filter)


def _masks(schema: Schema, masks: tuple[tuple[int, str, str | None], ...]
           ) -> list[tuple[NestedField, Mask]]:
    """The job's masks with their top-level fields; ``MaskUnsupported`` for one that names no
    top-level column, an unknown action, or an action the column's type does not take."""
    top = {f.field_id: f for f in schema.fields}
    checked: list[tuple[NestedField, Mask]] = []
    for field_id, action, value in masks:
        target = top.get(field_id)
        if target is None:
            raise MaskUnsupported(f"field {field_id} is not a top-level column")
        try:
            mask = Mask(MaskAction(action), value)
        except ValueError as exc:
            raise MaskUnsupported(f"mask action {action[:40]!r} is not known") from exc
        if not mask_applies(mask, target):
            raise MaskUnsupported(f"{mask.action.value} does not apply to column {target.name} "
                                  f"of type {target.field_type}")
        checked.append((target, mask))
    return checked


def _masked(rows: pa.Table, masks: list[tuple[NestedField, Mask]]) -> pa.Table:
    for target, mask in masks:
        index = rows.schema.get_field_index(target.name)
        rows = rows.set_column(index, rows.schema.field(index),
                               mask_column(mask, rows.column(index), target))
    return rows
