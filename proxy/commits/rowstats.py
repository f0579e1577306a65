"""Does a file's manifest entry describe the rows it holds? (Used by ``rows``.)

Readers trust a manifest entry without opening the file in two ways, so a row check that compares
file contents must also check the entry, or the rows readers see are not the rows compared:

* **partition**: Java readers fill identity-partitioned columns from the entry's partition tuple,
  not from the file, and every reader prunes files by it. ``partition_problem`` requires the
  tuple to be what the spec's transforms give for *every* row: identity (by value, NaN and -0.0
  told apart), order-preserving transforms (truncate, year, month, day, hour: the least and the
  greatest value map to the tuple's value), bucket (every distinct value), void (null).
* **metrics**: readers skip files (and apply or skip equality deletes) by the entry's
  ``value_counts``, ``null_value_counts``, ``nan_value_counts`` and ``lower_bounds`` /
  ``upper_bounds``. ``metrics_problem`` requires counts to equal the content's and bounds to
  enclose it (lower <= least, upper >= greatest non-null, non-NaN value; a truncated string
  bound still encloses). Metrics for a field id outside the schema are refused; metrics for
  fields no filter can reference (inside a list or map, or not primitive) are not checked.

Anything that cannot be evaluated is a problem too: the caller keeps the stricter classification.
Strings are ordered by code point (pyiceberg's and UTF-8's order), floats with -0.0 < 0.0.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any
from uuid import UUID

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.conversions import from_bytes
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    TruncateTransform,
    VoidTransform,
    YearTransform,
)
from pyiceberg.types import (
    DoubleType,
    FloatType,
    IcebergType,
    ListType,
    MapType,
    NestedField,
    PrimitiveType,
    StructType,
)

from proxy.commits.rowfiles import FileStats
from proxy.commits.rowkeys import key_columns

_ORDERED = (TruncateTransform, YearTransform, MonthTransform, DayTransform, HourTransform)
_Leaf = tuple[tuple[str, ...], NestedField]


def partition_problem(spec: PartitionSpec | None, schema: Schema, partition: tuple[Any, ...],
                      rows: pa.Table) -> str | None:
    """Why ``partition`` (an entry's tuple, NaN as ``("NaN",)``) is not what ``spec`` gives for
    every row of ``rows`` (projected onto ``schema``); None if it is."""
    if spec is None:
        return "its partition spec is not one of the table's"
    if len(partition) != len(spec.fields):
        return f"its partition has {len(partition)} values, its spec {len(spec.fields)} fields"
    leaves = _leaves(schema)
    for position, part in enumerate(spec.fields):
        leaf = leaves.get(part.source_id)
        if leaf is None:
            return f"partition field {part.name} has no source column in the schema"
        value = _plain(partition[position])
        try:
            fits = _fits(part.transform, leaf[1].field_type, _column(rows, leaf[0]), value)
        except Exception:  # a transform or value pyiceberg cannot evaluate here
            return f"partition field {part.name} ({part.transform}) cannot be evaluated"
        if not fits:
            return f"partition field {part.name} is not {part.transform} of its rows"
    return None


def metrics_problem(stats: FileStats, schema: Schema, rows: pa.Table,
                    only: Iterable[int] | None = None) -> str | None:
    """Why the metrics ``stats`` claims do not describe ``rows`` (projected onto ``schema``);
    None if they do. ``only``: check just these field ids (an equality delete's)."""
    leaves = _leaves(schema)
    known = set(schema.field_ids)
    wanted = stats.field_ids if only is None else stats.field_ids & set(only)
    for field_id in sorted(wanted, key=str):
        if field_id not in known:
            return f"it claims metrics for field id {field_id}, which is not in the schema"
        leaf = leaves.get(field_id)
        if leaf is None:
            continue  # not a primitive reachable through structs: no filter prunes on it
        try:
            problem = _leaf_problem(stats, field_id, leaf[1].field_type, _column(rows, leaf[0]))
        except Exception:  # a bound or type that cannot be decoded or compared
            problem = "cannot be evaluated"
        if problem:
            return f"its metrics for column {leaf[1].name} (id {field_id}) {problem}"
    return None


def _leaf_problem(stats: FileStats, field_id: int, kind: IcebergType,
                  column: pa.Array) -> str | None:
    nans = _nan_count(column, kind)
    claims = ((stats.value_counts, len(column), "value count"),
              (stats.null_counts, column.null_count, "null count"),
              (stats.nan_counts, nans, "NaN count"))
    for claimed, actual, name in claims:
        if field_id in claimed and claimed[field_id] != actual:
            return f"say {name} {claimed[field_id]}, the file holds {actual}"
    lower, upper = stats.lower.get(field_id), stats.upper.get(field_id)
    if lower is None and upper is None:
        return None
    span = _span(column, kind)
    if span is None:
        return None  # only nulls and NaN: bounds prune nothing a reader could match
    order = _order_key(kind)
    least, greatest = span
    if lower is not None and order(_bound(kind, lower)) > order(least):
        return "have a lower bound above a value the file holds"
    if upper is not None and order(_bound(kind, upper)) < order(greatest):
        return "have an upper bound below a value the file holds"
    return None


def _fits(transform: Any, kind: IcebergType, column: pa.Array, value: Any) -> bool:
    """True if ``transform`` maps every value of ``column`` to ``value``."""
    if isinstance(transform, VoidTransform):
        return value is None
    if isinstance(transform, IdentityTransform):
        if not isinstance(kind, FloatType | DoubleType):  # NaN and -0.0 are compared whole
            column = pc.unique(column)
        return _all_equal_to(column, value, kind)
    if value is None or column.null_count:
        return value is None and column.null_count == len(column)
    apply: Callable[[Any], Any] = transform.transform(kind)
    if isinstance(transform, _ORDERED):
        span = _span(column, kind)
        return span is None or (apply(span[0]) == value and apply(span[1]) == value)
    if isinstance(transform, BucketTransform):
        return _buckets(transform, kind, column, apply) == {value}
    raise ValueError(f"unsupported transform {transform}")


def _buckets(transform: BucketTransform[Any], kind: IcebergType, values: pa.Array,
             apply: Callable[[Any], Any]) -> set[Any]:
    """The buckets of ``values``: pyiceberg-core's vectorized hash, else one value at a time
    (a type it does not take)."""
    try:
        return set(pc.unique(transform.pyarrow_transform(kind)(values)).to_pylist())
    except Exception:  # a type it does not take: the per-value path decides the same
        return {apply(v) for v in _python(pc.unique(values), kind)}


def _all_equal_to(column: pa.Array, value: Any, kind: IcebergType) -> bool:
    """Every value of ``column`` is ``value`` (nulls, NaN and -0.0 compared as readers do)."""
    storage = column.storage if isinstance(column, pa.ExtensionArray) else column
    if isinstance(value, UUID):
        value = value.bytes
    literal = pa.array([value], storage.type)
    both = pa.table({"v": pa.concat_arrays([storage, literal])})
    return all(pc.min(k).as_py() == pc.max(k).as_py() for k in key_columns(both))


def _span(column: pa.Array, kind: IcebergType) -> tuple[Any, Any] | None:
    """The least and greatest non-null, non-NaN values, in Iceberg's representation."""
    values = _comparable(column, kind)
    if isinstance(kind, FloatType | DoubleType):
        values = values.filter(pc.invert(pc.is_nan(values)))
    values = values.drop_null()
    if len(values) == 0:
        return None
    found = pc.min_max(values)
    least, greatest = found["min"].as_py(), found["max"].as_py()
    if isinstance(kind, FloatType | DoubleType):
        least = -0.0 if least == 0 and _holds_sign(values, negative=True) else least
        greatest = 0.0 if greatest == 0 and _holds_sign(values, negative=False) else greatest
    return least, greatest


def _holds_sign(values: pa.Array, negative: bool) -> bool:
    zeros = values.filter(pc.equal(values, 0.0)).to_pylist()
    return any(math.copysign(1.0, v) < 0 if negative else math.copysign(1.0, v) > 0
               for v in zeros)


def _comparable(column: pa.Array, kind: IcebergType) -> pa.Array:
    """``column`` in the representation pyiceberg's transforms and bounds use."""
    if isinstance(column, pa.ExtensionArray):
        column = column.storage
    if pa.types.is_temporal(column.type):
        width = pa.int64() if column.type.bit_width == 64 else pa.int32()
        return column.view(width)
    return column


def _python(values: pa.Array, kind: IcebergType) -> list[Any]:
    found: list[Any] = _comparable(values, kind).to_pylist()
    if str(kind) == "uuid":
        return [None if v is None else UUID(bytes=v) for v in found]
    return found


def _nan_count(column: pa.Array, kind: IcebergType) -> int:
    if not isinstance(kind, FloatType | DoubleType):
        return 0
    return int(pc.sum(pc.is_nan(column).cast(pa.int64())).as_py() or 0)


def _bound(kind: IcebergType, raw: Any) -> Any:
    if not isinstance(kind, PrimitiveType) or not isinstance(raw, bytes):
        raise ValueError("no bound for this type")
    value = from_bytes(kind, raw)
    return value.bytes if isinstance(value, UUID) else value


def _order_key(kind: IcebergType) -> Callable[[Any], Any]:
    """Iceberg's order for a type: floats with -0.0 below 0.0, the rest as Python orders them."""
    if isinstance(kind, FloatType | DoubleType):
        return lambda v: (float(v), math.copysign(1.0, float(v)))
    if str(kind) == "uuid":
        return lambda v: v.bytes if isinstance(v, UUID) else bytes(v)
    return lambda v: Decimal(v) if isinstance(v, Decimal) else v


def _leaves(schema: Schema) -> dict[int, _Leaf]:
    """Primitive fields reachable through structs only, with their column path."""
    found: dict[int, _Leaf] = {}
    pending: list[tuple[tuple[str, ...], NestedField]] = [((f.name,), f) for f in schema.fields]
    while pending:
        path, current = pending.pop()
        kind = current.field_type
        if isinstance(kind, StructType):
            pending += [((*path, f.name), f) for f in kind.fields]
        elif isinstance(kind, PrimitiveType) and not isinstance(kind, ListType | MapType):
            found[current.field_id] = (path, current)
    return found


def _column(rows: pa.Table, path: tuple[str, ...]) -> pa.Array:
    """The column at ``path``; a null struct makes its children null (as Parquet counts them)."""
    array: pa.Array = rows.column(path[0]).combine_chunks()
    for name in path[1:]:
        array = array.flatten()[array.type.get_field_index(name)]
    return array


def _plain(value: Any) -> Any:
    """Undo ``manifests.canonical``'s NaN marker."""
    return float("nan") if value == ("NaN",) else value


def partition_key(partition: tuple[Any, ...]) -> tuple[Any, ...]:
    """A partition tuple with floats by bits (``-0.0`` is not ``0.0``, as Java compares)."""
    return tuple(("f", struct.pack(">d", v)) if isinstance(v, float) else v for v in partition)

