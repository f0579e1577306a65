"""Masks applied to the rows of a governed copy, as the REST spec's ``read-restrictions`` define
the column projection actions (``required-column-projections``).

``mask_column`` returns a column's masked values with the column's own Arrow type (a masked
column keeps its name, type and field id), nulls staying null, for the actions
``proxy.reads.restrictions_json.mask_applies`` allows on the column; any other pair is
``MaskUnsupported`` (the caller fails closed, 403). What each action does:

* ``replace-with-null``: every value null (optional columns only).
* ``mask-to-fixed-value``: every non-null value becomes the mask's value parsed to the column
  type (pyiceberg's literal conversion; binary and fixed values in hex); without a value, the
  spec's per-type default (``mask-to-default``: 999999999 for int and long, ``XXXXXXXX``,
  9999-12-31, 2261-12-31 for nanosecond timestamps, zero, false, the nil UUID, empty or zero
  bytes).
* ``mask-alphanum``: code point by code point, ASCII digits become ``n``, the characters
  ``( ) , . - @`` stay, every other code point (letters of any script, spaces, emoji, control
  characters) becomes ``x``: ``"ab1@x.io"`` → ``"xxn@x.xx"``.
* ``show-first-4`` / ``show-last-4``: the first / last 4 code points kept, the others masked as
  ``mask-alphanum``; a value of 4 code points or fewer is unchanged.
* ``truncate-to-year`` / ``truncate-to-month``: dates and timestamps to the first instant of
  their year / month; timestamps with a zone are truncated in UTC.
* ``sha-256`` (the spec's deterministic ``sha-256-global``): SHA-256 (FIPS 180-4) of the value's
  bytes: UTF-8 for strings, 4 / 8 little-endian bytes for int / long, the raw bytes for binary.
  Strings become the 64-character lowercase hex digest; ints / longs the digest's first 4 / 8
  bytes read as a signed little-endian integer; binaries the 32-byte digest. The same value
  always masks to the same output, so joins on a hashed column still match.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from decimal import Decimal
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions.literals import AboveMax, BelowMin, literal
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
    StringType,
    TimestampNanoType,
    TimestampType,
    TimestamptzNanoType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from proxy.reads.restrictions_json import mask_applies
from proxy.restrictions import Mask, MaskAction

Column: TypeAlias = pa.Array | pa.ChunkedArray

_KEPT = r"0-9(),.\-@"  # digits (then ``n``) and the punctuation the spec keeps
_FAR_DAYS = 2932896  # 9999-12-31
_FAR_NANO_DAYS = 106_650  # 2261-12-31: 9999 overflows nanoseconds
_DEFAULTS: tuple[tuple[type[IcebergType] | tuple[type[IcebergType], ...], Any], ...] = (
    (BooleanType, False), ((IntegerType, LongType), 999999999), ((FloatType, DoubleType), 0.0),
    (StringType, "XXXXXXXX"), (DateType, _FAR_DAYS), (TimeType, 0),
    ((TimestampType, TimestamptzType), _FAR_DAYS * 86_400_000_000),
    ((TimestampNanoType, TimestamptzNanoType), _FAR_NANO_DAYS * 86_400_000_000_000),
    (BinaryType, b""), (UUIDType, bytes(16)),
)
_NANOS: dict[type[IcebergType], type[IcebergType]] = {
    TimestampNanoType: TimestampType, TimestamptzNanoType: TimestamptzType}


class MaskUnsupported(Exception):
    """The mask cannot be applied to this column (its action does not apply to the type, or
    its value does not parse to it); the message is safe to show."""


def mask_column(mask: Mask, array: Column, field: NestedField) -> Column:
    """``array`` (the values of ``field``) masked by ``mask``, with the same Arrow type."""
    if not mask_applies(mask, field):
        raise MaskUnsupported(f"{mask.action.value} does not apply to column {field.name} "
                              f"of type {field.field_type}")
    apply = _on_storage(_masker(mask, field))
    masked: Column
    if isinstance(array, pa.ChunkedArray):
        masked = pa.chunked_array([apply(chunk) for chunk in array.chunks], type=array.type)
    else:
        masked = apply(array)
    return masked


def _on_storage(apply: Callable[[pa.Array], pa.Array]) -> Callable[[pa.Array], pa.Array]:
    """``apply`` on the storage of an extension array (a UUID column), wrapped back."""
    def on_storage(array: pa.Array) -> pa.Array:
        if isinstance(array, pa.ExtensionArray):
            return pa.ExtensionArray.from_storage(array.type, apply(array.storage))
        return apply(array)
    return on_storage


def _masker(mask: Mask, field: NestedField) -> Callable[[pa.Array], pa.Array]:
    match mask.action:
        case MaskAction.REPLACE_WITH_NULL:
            return lambda a: pa.nulls(len(a), a.type)
        case MaskAction.MASK_TO_FIXED_VALUE:
            value = _fixed_value(mask.value, field)
            return lambda a: _constant(a, value)
        case MaskAction.MASK_ALPHANUM:
            return _alphanum
        case MaskAction.SHOW_FIRST_4:
            return lambda a: _join(_slice(a, 0, 4), _alphanum(_slice(a, 4, None)))
        case MaskAction.SHOW_LAST_4:
            return lambda a: _join(_alphanum(_slice(a, 0, -4)), _slice(a, -4, None))
        case MaskAction.TRUNCATE_TO_YEAR:
            return lambda a: _truncate(a, "year")
        case MaskAction.TRUNCATE_TO_MONTH:
            return lambda a: _truncate(a, "month")
        case MaskAction.SHA_256:
            return lambda a: _hashed(a, field.field_type)
    raise MaskUnsupported(f"mask action {mask.action!r} is not known")


# ---- strings ------------------------------------------------------------------------------


def _alphanum(array: pa.Array) -> pa.Array:
    others = pc.replace_substring_regex(array, pattern=f"[^{_KEPT}]", replacement="x")
    return pc.replace_substring_regex(others, pattern="[0-9]", replacement="n")


def _slice(array: pa.Array, start: int, stop: int | None) -> pa.Array:
    """Code points ``start:stop`` of every value (Python slice semantics)."""
    return pc.utf8_slice_codeunits(array, start=start, stop=stop)


def _join(left: pa.Array, right: pa.Array) -> pa.Array:
    return pc.binary_join_element_wise(left, right, pa.scalar("", left.type))


# ---- dates and timestamps -----------------------------------------------------------------


def _truncate(array: pa.Array, unit: str) -> pa.Array:
    kind = array.type
    if pa.types.is_date32(kind):
        return pc.floor_temporal(array, unit=unit)
    if not pa.types.is_timestamp(kind):
        raise MaskUnsupported(f"cannot truncate values of Arrow type {kind}")
    # the stored values are UTC instants: truncate them without a zone, in UTC
    naive = array.view(pa.int64()).view(pa.timestamp(kind.unit))
    return pc.floor_temporal(naive, unit=unit).view(pa.int64()).view(kind)


# ---- sha-256 ------------------------------------------------------------------------------


def _hashed(array: pa.Array, kind: IcebergType) -> pa.Array:
    """Each distinct value hashed once (``_digest``), then spread over the rows."""
    encoded = pc.dictionary_encode(array)
    distinct = [_digest(v, kind) for v in encoded.dictionary.to_pylist()]
    return pa.array(distinct, array.type).take(encoded.indices)


def _digest(value: Any, kind: IcebergType) -> Any:
    if isinstance(kind, StringType):
        return hashlib.sha256(value.encode("utf-8")).hexdigest()
    if isinstance(kind, IntegerType | LongType):
        width = 4 if isinstance(kind, IntegerType) else 8
        digest = hashlib.sha256(value.to_bytes(width, "little", signed=True)).digest()
        return int.from_bytes(digest[:width], "little", signed=True)
    if isinstance(kind, BinaryType):
        return hashlib.sha256(value).digest()
    raise MaskUnsupported(f"sha-256 does not apply to {kind}")


# ---- fixed values -------------------------------------------------------------------------


def _fixed_value(text: str | None, field: NestedField) -> Any:
    """The value every non-null value becomes, in pyiceberg's representation of the type
    (days, microseconds, nanoseconds, bytes...)."""
    kind = field.field_type
    try:
        return _default(kind) if text is None else _parsed(text, kind)
    except (ValueError, TypeError, ArithmeticError) as exc:
        raise MaskUnsupported(f"the fixed value of the mask on column {field.name} is not a "
                              f"{kind}") from exc


def _parsed(text: str, kind: IcebergType) -> Any:
    if isinstance(kind, BinaryType | FixedType):
        value = bytes.fromhex(text)
        if isinstance(kind, FixedType) and len(value) != len(kind):
            raise ValueError("wrong length")
        return value
    nanos = _NANOS.get(type(kind))
    converted = literal(text).to(nanos() if nanos is not None else kind)
    if isinstance(converted, AboveMax | BelowMin):
        raise ValueError("out of range")
    return converted.value * 1000 if nanos is not None else converted.value


def _default(kind: IcebergType) -> Any:
    """The spec's ``mask-to-default`` value of ``kind``."""
    if isinstance(kind, DecimalType):
        return Decimal(0).scaleb(-kind.scale)
    if isinstance(kind, FixedType):
        return bytes(len(kind))
    for types, value in _DEFAULTS:
        if isinstance(kind, types):
            return value
    raise MaskUnsupported(f"mask-to-fixed-value has no default for {kind}")


def _constant(array: pa.Array, value: Any) -> pa.Array:
    """``value`` on every row where ``array`` is not null, in ``array``'s Arrow type."""
    scalar = _arrow_scalar(value, array.type)
    return pc.if_else(pc.is_null(array), pa.scalar(None, array.type),
                      pa.repeat(scalar, len(array)))


def _arrow_scalar(value: Any, arrow_type: pa.DataType) -> pa.Scalar:
    if pa.types.is_temporal(arrow_type) and isinstance(value, int):
        width = pa.int32() if arrow_type.bit_width == 32 else pa.int64()
        return pa.array([value], width).view(arrow_type)[0]
    return pa.scalar(value, arrow_type)
