"""Rows as comparable keys: the pure pyarrow half of row verification (``rows`` reads the files).

Two tables projected onto the same Iceberg schema are compared row by row through *key
columns*: every leaf value becomes a null-free column of a hashable type, preceded by a column
saying whether it was null, so that grouping and joining treat values the way a reader sees them:

* nulls equal nulls (and differ from every value); a null struct differs from a struct of nulls;
* floating-point values compare by bits, with every NaN made one NaN (``-0.0`` is not ``0.0``);
* integers, dates, times and timestamps compare as 64-bit integers; decimals by their text;
  strings, binaries, fixed and UUIDs by their bytes;
* lists and maps compare by a canonical encoding of their whole value (entry order included).

``is_sub_multiset`` says whether every row of one table is a row of the other, as a multiset;
``rows_deleted_by`` says which rows an equality delete's values delete.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

_WEIGHT = "__icegov_weight"
_POSITION = "__icegov_position"
_NAN = float("nan")


class RowKeyError(ValueError):
    """The two sides cannot be compared (different column types after canonicalisation)."""


def key_columns(table: pa.Table, names: Sequence[str] | None = None) -> list[pa.Array]:
    """The canonical, null-free key columns of ``table`` (of ``names`` only, if given)."""
    keys: list[pa.Array] = []
    for name in names if names is not None else table.column_names:
        keys += _leaf_keys(table.column(name).combine_chunks())
    return keys


def is_sub_multiset(added: Sequence[pa.Table], removed: Sequence[pa.Table]) -> bool:
    """True if every row of the ``added`` tables is a row of the ``removed`` ones, counted with
    multiplicity. All tables must be projected onto one schema (same columns, same order)."""
    count_added = sum(t.num_rows for t in added)
    count_removed = sum(t.num_rows for t in removed)
    if count_added == 0:
        return True
    if count_added > count_removed:
        return False
    columns = _without_constant_validity(_concat([key_columns(t) for t in [*added, *removed]]))
    if not columns:  # no columns at all: only the counts could differ, and they do not
        return True
    weights = pa.concat_arrays([pa.repeat(pa.scalar(1, pa.int64()), count_added),
                                pa.repeat(pa.scalar(-1, pa.int64()), count_removed)])
    return _max_group_weight(columns, weights) <= 0


def _without_constant_validity(columns: list[pa.Array]) -> list[pa.Array]:
    """Drop is-valid columns (the int8 ones) that say "valid" for every row on both sides: they
    cannot tell rows apart, and each key column costs a sort pass."""
    return [c for c in columns
            if not (pa.types.is_int8(c.type) and len(c) and pc.min(c).as_py() == 1)]


def _max_group_weight(columns: list[pa.Array], weights: pa.Array) -> int:
    """The largest sum of ``weights`` over rows with equal ``columns``.

    Sorting and summing runs is much faster here than a hash group-by over many keys.
    """
    names = [f"k{i}" for i in range(len(columns))]
    table = pa.table([*columns, weights], names=[*names, _WEIGHT])
    table = table.take(pc.sort_indices(table, sort_keys=[(n, "ascending") for n in names]))
    count = table.num_rows
    new_run: pa.Array = pa.repeat(pa.scalar(False), count - 1)
    for name in names:
        column = table.column(name).combine_chunks()
        new_run = pc.or_(new_run, pc.not_equal(column.slice(1), column.slice(0, count - 1)))
    starts = pc.indices_nonzero(pa.concat_arrays([pa.array([True]), new_run])).cast(pa.int64())
    ends = pa.concat_arrays([pc.subtract(starts.slice(1), 1), pa.array([count - 1], pa.int64())])
    running = pa.concat_arrays([pa.array([0], pa.int64()),
                                pc.cumulative_sum(table.column(_WEIGHT).combine_chunks())])
    sums = pc.subtract(running.take(pc.add(ends, 1)), running.take(starts))
    return int(pc.max(sums).as_py())


def rows_deleted_by(table: pa.Table, names: Sequence[str], deleted: pa.Table) -> pa.Array:
    """Positions (int64) of the rows of ``table`` whose ``names`` columns equal a row of
    ``deleted`` (same columns, same order), with Iceberg's equality-delete semantics (null
    matches null)."""
    if table.num_rows == 0 or deleted.num_rows == 0:
        return pa.array([], pa.int64())
    left = key_columns(table, names)
    right = key_columns(deleted)
    if [a.type for a in left] != [b.type for b in right]:
        raise RowKeyError("equality delete values do not match the column types")
    keys = [f"k{i}" for i in range(len(left))]
    positions = pa.array(range(table.num_rows), pa.int64())
    matched = pa.table([*left, positions], names=[*keys, _POSITION]).join(
        pa.table(right, names=keys), keys=keys, join_type="left semi")
    return matched.column(_POSITION).combine_chunks()


def _concat(tables: list[list[pa.Array]]) -> list[pa.Array]:
    """Key columns of several tables, concatenated column by column."""
    kinds = {tuple(a.type for a in keys) for keys in tables}
    if len(kinds) != 1:
        raise RowKeyError("the rows compared have different column types")
    return [pa.concat_arrays(list(parts)) for parts in zip(*tables, strict=True)]


def _leaf_keys(array: pa.Array) -> list[pa.Array]:
    """[is-valid, filled value] per leaf of ``array`` (structs: one pair per field too)."""
    if isinstance(array, pa.ExtensionArray):
        array = array.storage
    kind = array.type
    if pa.types.is_dictionary(kind):
        return _leaf_keys(array.dictionary_decode())
    valid = pc.is_valid(array).cast(pa.int8())
    if pa.types.is_struct(kind):
        children = [key for child in array.flatten() for key in _leaf_keys(child)]
        return [valid, *children]
    if pa.types.is_null(kind):
        return [valid]
    return [valid, _filled(_comparable(array))]


def _comparable(array: pa.Array) -> pa.Array:
    """``array`` as int64 or large_binary values that are equal exactly when readers see the
    same value."""
    kind = array.type
    if pa.types.is_floating(kind):
        canonical = pc.if_else(pc.is_nan(array), pa.scalar(_NAN, kind), array)
        bits = {16: pa.int16(), 32: pa.int32(), 64: pa.int64()}[kind.bit_width]
        return canonical.view(bits).cast(pa.int64())
    if pa.types.is_boolean(kind) or pa.types.is_integer(kind):
        return array.cast(pa.int64())
    if pa.types.is_temporal(kind):
        width = pa.int64() if kind.bit_width == 64 else pa.int32()
        return array.view(width).cast(pa.int64())
    if pa.types.is_decimal(kind):
        return array.cast(pa.string()).cast(pa.large_binary())
    if _is_bytes(kind):
        return array.cast(pa.large_binary())
    return pa.array([_encoded(v) for v in array.to_pylist()], pa.large_binary())


def _is_bytes(kind: pa.DataType) -> bool:
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind)
            or pa.types.is_binary(kind) or pa.types.is_large_binary(kind)
            or pa.types.is_fixed_size_binary(kind) or pa.types.is_string_view(kind)
            or pa.types.is_binary_view(kind))


def _filled(array: pa.Array) -> pa.Array:
    zero = pa.scalar(0, pa.int64()) if pa.types.is_int64(array.type) \
        else pa.scalar(b"", pa.large_binary())
    return pc.fill_null(array, zero)


def _encoded(value: Any) -> bytes | None:
    """A nested value (list, map, struct inside them) as canonical bytes; None stays null."""
    return None if value is None else repr(_canonical(value)).encode()


def _canonical(value: Any) -> Any:
    if isinstance(value, float):
        return ("f", struct.pack(">d", _NAN if math.isnan(value) else value))
    if isinstance(value, bool | int | str | bytes) or value is None:
        return (type(value).__name__, value)
    if isinstance(value, Decimal):
        return ("d", str(value))
    if isinstance(value, dict):
        return ("s", tuple((k, _canonical(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return ("l", tuple(_canonical(v) for v in value))
    return (type(value).__name__, repr(value))
