"""Do the column metrics a manifest entry declares agree with its Parquet footer? (``footers``)

Readers skip files, and apply or skip delete files, by an entry's ``value_counts``,
``null_value_counts``, ``nan_value_counts`` and ``lower_bounds`` / ``upper_bounds`` without
opening the file. Writers (Iceberg Java, pyiceberg) take these from the footer's column chunk
statistics, so the footer can prove them, and a claim it cannot prove is refused:

* a metric for a field id that is no primitive column of the file is refused;
* ``value_counts`` must equal the footer's value count (summed over row groups), and
  ``null_value_counts`` its null count (refused where a row group does not say). A column
  inside a struct, list or map is counted by writers only where its parents are present (the
  footer counts the levels where they are null too): neither count may exceed the footer's,
  and the non-null values they leave (values - nulls) must be exactly the footer's;
* ``nan_value_counts`` (Parquet statistics do not count NaN): only a float or double column may
  claim NaN, at most as many as its non-null values. A claim of *no* NaN cannot be disproved
  from a footer: a file that hides NaN values this way escapes ``isNaN`` filters only;
* a bound must enclose what the footer says: lower <= the least min, upper >= the greatest max,
  over every row group. A column whose values are all null needs no bounds proof (no value
  could match a bound). Otherwise every row group that may hold a non-null value must carry a
  min and a max (NaN does not count as one): a bound the footer cannot prove is **refused**,
  never taken on trust, so a file cannot hide rows from pruning by leaving its statistics out.
  Writers derive bounds from the same statistics, so an honest file without them declares no
  bounds. (Iceberg Java takes float and double bounds from its writer, not the footer, and
  parquet-mr writes no min/max for a row group holding NaN: for such a float or double column
  outside lists and maps, ``with_float_spans`` reads its values to prove the bounds.)

Values are compared in one domain per type: integers (booleans as 0/1, decimals unscaled,
times and timestamps in nanoseconds, from the footer's unit), floats (``-0.0 == 0.0``: the
Parquet spec makes writers record a zero min as ``-0.0``), and bytes (strings as UTF-8, which
orders as code points; UUIDs and fixed as stored). A type with no such domain (INT96,
``variant``, ``geometry``...) cannot prove a bound. Non-Parquet files cannot prove anything but
value counts (which prune nothing alone), so they may declare no other metric.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any
from uuid import UUID

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.conversions import from_bytes
from pyiceberg.io.pyarrow import parquet_path_to_id_mapping
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema, index_by_id
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    NestedField,
    PrimitiveType,
    StringType,
    TimestampNanoType,
    TimestampType,
    TimestamptzNanoType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from proxy.commits.columns import FileRules
from proxy.commits.manifests import CommitTooLarge

MAX_CHUNKS = 1_000_000  # row groups x columns of one footer looked at
_NANOS = {"milliseconds": 1_000_000, "microseconds": 1_000, "nanoseconds": 1,
          "TIMESTAMP_MILLIS": 1_000_000, "TIMESTAMP_MICROS": 1_000, "TIME_MILLIS": 1_000_000,
          "TIME_MICROS": 1_000}
_MICROS_TYPES = (TimeType, TimestampType, TimestamptzType)
_NANOS_TYPES = (TimestampNanoType, TimestamptzNanoType)
_INTEGRAL = (BooleanType, IntegerType, LongType, DateType)
_BYTES = (StringType, BinaryType, FixedType, UUIDType)


@dataclass(frozen=True)
class LeafStats:
    """One Parquet leaf column, over all row groups: value and null counts, and the least min
    and greatest max in the comparison domain (``proven``: every row group that may hold a
    non-null value gave both)."""

    values: int
    nulls: int | None  # None: some row group does not say
    least: Any = None
    greatest: Any = None
    proven: bool = True


FooterStats = Mapping[str, LeafStats]
"""Leaf statistics by Parquet column path (``a.b``, ``l.list.element``)."""


class _Unprovable(Exception):
    """A value outside every comparison domain."""


def footer_stats(metadata: pq.FileMetaData) -> dict[str, LeafStats]:
    """Every leaf column's statistics from a Parquet footer."""
    if metadata.num_row_groups * metadata.num_columns > MAX_CHUNKS:
        raise CommitTooLarge(f"a Parquet footer has more than {MAX_CHUNKS} column chunks")
    return {metadata.schema.column(i).path: _leaf(metadata, i)
            for i in range(metadata.num_columns)}


def with_float_spans(parquet: pq.ParquetFile, stats: FooterStats,
                     charge: Callable[[int], None]) -> FooterStats:
    """``stats`` with each float or double column whose footer cannot prove a span (a row
    group holding NaN has no min/max) proven from its values instead: read (``charge``d at its
    chunks' compressed size), NaN and nulls left out. A column inside a list or map, or one
    whose path cannot be followed, stays unproven."""
    metadata = parquet.metadata
    wanted: dict[str, int] = {}
    for position in range(metadata.num_columns):
        column = metadata.schema.column(position)
        leaf = stats.get(column.path)
        if leaf is not None and not leaf.proven and column.max_repetition_level == 0 \
                and column.physical_type in ("FLOAT", "DOUBLE"):
            wanted[column.path] = position
    if not wanted:
        return stats
    charge(sum(metadata.row_group(g).column(p).total_compressed_size
               for g in range(metadata.num_row_groups) for p in wanted.values()))
    table = parquet.read(columns=sorted(wanted))
    found = dict(stats)
    for path in wanted:
        values = _column_values(table, path)
        if values is None:
            continue
        values = values.filter(pc.invert(pc.is_nan(values))).drop_null()
        span = pc.min_max(values) if len(values) else None
        found[path] = replace(found[path], proven=True,
                              least=None if span is None else float(span["min"].as_py()),
                              greatest=None if span is None else float(span["max"].as_py()))
    return found


def _column_values(table: pa.Table, path: str) -> pa.Array | None:
    parts = path.split(".")
    if parts[0] not in table.column_names:
        return None
    values = table.column(parts[0]).combine_chunks()
    for part in parts[1:]:
        if not pa.types.is_struct(values.type) or values.type.get_field_index(part) < 0:
            return None
        values = values.flatten()[values.type.get_field_index(part)]
    return values if pa.types.is_floating(values.type) else None


def _leaf(metadata: pq.FileMetaData, position: int) -> LeafStats:
    column = metadata.schema.column(position)
    convert = _raw_converter(column)
    values, least, greatest, proven = 0, None, None, True
    nulls: int | None = 0
    for group in range(metadata.num_row_groups):
        chunk = metadata.row_group(group).column(position)
        stats = chunk.statistics if chunk.is_stats_set else None
        found = stats.null_count if stats is not None and stats.has_null_count else None
        values += chunk.num_values
        nulls = None if nulls is None or found is None else nulls + found
        span = _span(stats, convert)
        if span is None:
            proven = proven and found is not None and chunk.num_values <= found
            continue
        least = span[0] if least is None else min(least, span[0])
        greatest = span[1] if greatest is None else max(greatest, span[1])
    return LeafStats(values, nulls, least, greatest, proven)


def _span(stats: Any, convert: Any) -> tuple[Any, Any] | None:
    """A row group's (min, max) in the comparison domain; None if it has none usable."""
    if stats is None or not stats.has_min_max or convert is None:
        return None
    try:
        low, high = convert(stats.min_raw), convert(stats.max_raw)
    except Exception:  # a statistic pyarrow cannot give or this domain cannot hold
        return None
    if any(isinstance(v, float) and math.isnan(v) for v in (low, high)):
        return None
    return low, high


def _raw_converter(column: Any) -> Any:
    """How a column's raw statistics map into the comparison domain (None: they cannot)."""
    physical = column.physical_type
    logical = json.loads(column.logical_type.to_json() or "{}")
    kind = logical.get("Type")
    if kind == "Decimal" or column.converted_type == "DECIMAL":
        return (lambda v: int(v)) if physical in ("INT32", "INT64") else \
            (lambda v: int.from_bytes(_bytes(v), "big", signed=True))
    unit = _NANOS.get(logical.get("timeUnit") or column.converted_type)
    if kind in ("Timestamp", "Time") or column.converted_type in _NANOS:
        return None if unit is None else (lambda v: int(v) * unit)
    if physical in ("BOOLEAN", "INT32", "INT64"):
        return int
    if physical in ("FLOAT", "DOUBLE"):
        return float
    if physical in ("BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"):
        return _bytes
    return None  # INT96 and whatever else: no domain


def _bytes(value: Any) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


@dataclass(frozen=True)
class FileColumns:
    """A Parquet file's Iceberg schema, its fields by id and its leaf paths' field ids."""

    schema: Schema
    fields: Mapping[int, NestedField]
    paths: Mapping[str, int]
    top_level: frozenset[int]

    @classmethod
    def of(cls, schema: Schema) -> FileColumns:
        return cls(schema, index_by_id(schema), parquet_path_to_id_mapping(schema),
                   frozenset(f.field_id for f in schema.fields))


def metrics_disagreement(data_file: DataFile, columns: FileColumns | None,
                         stats: FooterStats | None, rules: FileRules) -> str | None:
    """Why the metrics ``data_file`` declares are not proven by its footer (``stats``, its
    ``columns``: None for a non-Parquet file); None if they are."""
    claims = _Claims.of(data_file)
    ids = claims.field_ids
    if not ids:
        return None
    if stats is None or columns is None:
        if ids - set(claims.values):
            return "it is not Parquet, so its column metrics cannot be checked: it may " \
                   "declare value counts only"
        return None
    leaves = {field_id: stats[path] for path, field_id in columns.paths.items()
              if path in stats}
    file_fields = columns.fields
    for field_id in sorted(ids, key=str):
        leaf = leaves.get(field_id)
        if leaf is None:
            return f"it declares metrics for field id {field_id}, which is no primitive " \
                   "column of the file"
        field = file_fields[field_id]
        column = rules.columns.get(field_id, field)
        problem = _leaf_problem(claims, field_id, leaf, field.field_type, column.field_type,
                                field_id not in columns.top_level)
        if problem:
            return f"its metrics for column {column.name!r:.60} (id {field_id}) {problem}"
    return None


@dataclass(frozen=True)
class _Claims:
    values: Mapping[Any, Any]
    nulls: Mapping[Any, Any]
    nans: Mapping[Any, Any]
    lower: Mapping[Any, Any]
    upper: Mapping[Any, Any]

    @classmethod
    def of(cls, data_file: DataFile) -> _Claims:
        return cls(data_file.value_counts or {}, data_file.null_value_counts or {},
                   data_file.nan_value_counts or {}, data_file.lower_bounds or {},
                   data_file.upper_bounds or {})

    @property
    def field_ids(self) -> set[Any]:
        return {*self.values, *self.nulls, *self.nans, *self.lower, *self.upper}


def _leaf_problem(claims: _Claims, field_id: int, leaf: LeafStats, file_type: IcebergType,
                  table_type: IcebergType, nested: bool) -> str | None:
    problem = _count_problem(claims, field_id, leaf, file_type, nested)
    if problem or (field_id not in claims.lower and field_id not in claims.upper):
        return problem
    if leaf.nulls is not None and leaf.nulls >= leaf.values:
        return None  # only nulls: no value a bound could hide
    if not leaf.proven or leaf.least is None:
        return "declare bounds that the footer's statistics cannot prove (a row group has " \
               "no min/max): refused, not taken on trust"
    try:
        lower = _claimed(claims.lower.get(field_id), file_type, table_type)
        upper = _claimed(claims.upper.get(field_id), file_type, table_type)
        if lower is not None and lower > leaf.least:
            return "have a lower bound above the least value the footer records"
        if upper is not None and upper < leaf.greatest:
            return "have an upper bound below the greatest value the footer records"
    except (_Unprovable, TypeError):
        return "declare bounds that cannot be compared with the footer's statistics"
    return None


def _count_problem(claims: _Claims, field_id: int, leaf: LeafStats, file_type: IcebergType,
                   nested: bool) -> str | None:
    declared, nulls = claims.values.get(field_id), claims.nulls.get(field_id)
    if nulls is not None and leaf.nulls is None:
        return "declare a null count the footer does not record"
    problem = _nested_counts(declared, nulls, leaf) if nested else None
    if not nested and declared is not None and declared != leaf.values:
        problem = f"declare {declared} values, the footer {leaf.values}"
    if not nested and nulls is not None and nulls != leaf.nulls:
        problem = f"declare {nulls} nulls, the footer {leaf.nulls}"
    if problem:
        return problem
    nans = claims.nans.get(field_id)
    if nans is None:
        return None
    at_most = leaf.values - (leaf.nulls or 0) if isinstance(file_type, FloatType | DoubleType) \
        else 0
    if type(nans) is not int or not 0 <= nans <= at_most:
        return f"declare {nans} NaN values, more than the column can hold"
    return None


def _nested_counts(declared: Any, nulls: Any, leaf: LeafStats) -> str | None:
    """A column inside a struct, list or map: writers count it only where its parents are
    present, the footer also where they are null; so neither count may exceed the footer's,
    and the non-null values (values - nulls) are exactly the footer's."""
    footer_nulls = leaf.nulls if leaf.nulls is not None else 0
    present = leaf.values - footer_nulls
    if declared is not None and not present <= declared <= leaf.values:
        return f"declare {declared} values, the footer {present} to {leaf.values}"
    if nulls is not None and not 0 <= nulls <= footer_nulls:
        return f"declare {nulls} nulls, the footer at most {footer_nulls}"
    if declared is not None and nulls is not None and declared - nulls != present:
        return f"declare {declared - nulls} non-null values, the footer {present}"
    return None


def _claimed(raw: Any, file_type: IcebergType, table_type: IcebergType) -> Any:
    """A declared bound in the comparison domain, decoded as the file's type or, failing
    that, the table's (a promoted column's bound may be written in either)."""
    if raw is None:
        return None
    if not isinstance(raw, bytes):
        raise _Unprovable
    for kind in (file_type, table_type):
        if isinstance(kind, PrimitiveType):
            try:
                value = from_bytes(kind, raw)
            except Exception:  # wrong width for this type: try the other
                continue
            return _domain(kind, value)
    raise _Unprovable


def _unscaled(value: Decimal, scale: int) -> int:
    """``value`` as an unscaled integer of ``scale``, exactly (``Decimal.scaleb`` rounds to the
    context's 28 digits: a ``decimal(38, s)`` bound would move)."""
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise _Unprovable
    unscaled: int = int("".join(map(str, digits)) or "0")
    shift = exponent + scale
    if shift >= 0:
        unscaled *= 10 ** shift
    else:
        unscaled, rest = divmod(unscaled, 10 ** -shift)
        if rest:
            raise _Unprovable
    return -unscaled if sign else unscaled


def _domain(kind: PrimitiveType, value: Any) -> Any:
    if isinstance(kind, _INTEGRAL):
        return int(value)
    if isinstance(kind, _MICROS_TYPES):
        return int(value) * 1_000
    if isinstance(kind, _NANOS_TYPES):
        return int(value)
    if isinstance(kind, FloatType | DoubleType):
        if math.isnan(value):
            raise _Unprovable
        return float(value)
    if isinstance(kind, DecimalType) and isinstance(value, Decimal):
        return _unscaled(value, kind.scale)
    if isinstance(kind, UUIDType) and isinstance(value, UUID):
        return value.bytes
    if isinstance(kind, _BYTES):
        return _bytes(value)
    raise _Unprovable
