"""Does a Parquet file's row-group statistics describe its rows? (Used by ``rowfiles``.)

Readers skip whole row groups by the statistics in a Parquet footer: Java's
``ParquetMetricsRowGroupFilter`` (min, max, null count), pyarrow's dataset filters likewise. A
file whose row-group statistics do not enclose its values reads the same without a filter and
loses rows under one: a "compaction" whose row groups claim ``id`` in [1, 2] while holding 3
hides row 3 from ``WHERE id = 3``. The row checks compare files read in full, so for the files a
snapshot adds they also require every row group's statistics (of a column no list or map
holds) to describe that row group: null count equal, min at most and max at least every value
that is neither null nor NaN. Whatever cannot be compared is a problem too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import UUID

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

Leaf = Callable[[pa.Table], pa.Array] | None
"""How to take one Parquet leaf column out of a row group read as Arrow (None: inside a list or
map, which no reader prunes on)."""


def row_group_problem(parquet: pq.ParquetFile) -> str | None:
    """Why some row group's statistics do not describe its rows; None if all do."""
    metadata = parquet.metadata
    leaves = _leaves(parquet.schema_arrow)
    if len(leaves) != metadata.num_columns:
        return "its Arrow and Parquet schemas disagree"
    for group in range(metadata.num_row_groups):
        chunks = metadata.row_group(group)
        table: pa.Table | None = None
        for position, leaf in enumerate(leaves):
            chunk = chunks.column(position)
            if leaf is None or not chunk.is_stats_set:
                continue
            table = parquet.read_row_group(group) if table is None else table
            problem = _stats_problem(chunk.statistics, leaf(table))
            if problem is not None:
                return f"row group {group} says of column {chunk.path_in_schema!r:.80} {problem}"
    return None


def _stats_problem(stats: Any, values: pa.Array) -> str | None:
    if stats.has_null_count and stats.null_count != values.null_count:
        return f"null count {stats.null_count}, it holds {values.null_count}"
    if not stats.has_min_max:
        return None
    if pa.types.is_floating(values.type):
        values = values.filter(pc.invert(pc.is_nan(values)))
    values = values.drop_null()
    if len(values) == 0:
        return None
    span = pc.min_max(values)
    try:
        least, greatest = _plain(span["min"].as_py()), _plain(span["max"].as_py())
        low, high = _plain(stats.min), _plain(stats.max)
        if low > least or high < greatest:
            return "bounds that do not enclose its values"
    except Exception:  # a statistic pyarrow cannot give, or values that do not compare
        return "bounds that cannot be compared with its values"
    return None


def _plain(value: Any) -> Any:
    return value.bytes if isinstance(value, UUID) else value


def _leaves(schema: pa.Schema) -> list[Leaf]:
    """Each Parquet leaf column, in order, as a way to take it from a row group."""
    leaves: list[Leaf] = []
    for index, field in enumerate(schema):
        leaves += _field_leaves(field.type, _column(index))
    return leaves


def _column(index: int) -> Callable[[pa.Table], pa.Array]:
    return lambda table: table.column(index).combine_chunks()


def _field_leaves(kind: pa.DataType, take: Callable[[pa.Table], pa.Array]) -> list[Leaf]:
    if isinstance(kind, pa.ExtensionType):
        kind = kind.storage_type
    if pa.types.is_struct(kind):
        found: list[Leaf] = []
        for child in range(kind.num_fields):
            found += _field_leaves(kind.field(child).type, _child(take, child))
        return found
    if pa.types.is_map(kind):
        return [None] * (_count(kind.key_type) + _count(kind.item_type))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) \
            or pa.types.is_fixed_size_list(kind):
        return [None] * _count(kind.value_type)
    return [take]


def _child(take: Callable[[pa.Table], pa.Array], child: int) -> Callable[[pa.Table], pa.Array]:
    """A struct's child with the struct's nulls merged in (as Parquet counts them)."""
    return lambda table: _storage(take(table)).flatten()[child]


def _storage(array: pa.Array) -> pa.Array:
    return array.storage if isinstance(array, pa.ExtensionArray) else array


def _count(kind: pa.DataType) -> int:
    return sum(1 for _ in _field_leaves(kind, _column(0)))
