"""Masks on rows (``proxy.governed.masks``): every action, nulls, short strings, unicode,
dates and timestamps with a zone, the spec's sha-256 encodings, refusals."""

from __future__ import annotations

import datetime as dt
import hashlib
import uuid
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    IcebergType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampNanoType,
    TimestampType,
    TimestamptzType,
    UUIDType,
)

from proxy.governed.masks import MaskUnsupported, mask_column
from proxy.restrictions import Mask, MaskAction

A = MaskAction
UTC = dt.UTC


def field(kind: IcebergType, required: bool = False) -> NestedField:
    return NestedField(7, "c", kind, required=required)


def masked(action: MaskAction, values: list[Any], arrow: pa.DataType, kind: IcebergType,
           value: str | None = None) -> list[Any]:
    array = pa.array(values, arrow)
    out = mask_column(Mask(action, value), array, field(kind))
    assert out.type == arrow
    return list(out.to_pylist())


STRINGS = ["prashant010696@gmail.com", "4111-1111-1111-4444", "abc", "abcd", "abcde", "",
           None, "héllo wörld", "😀😀😀😀😀x", "tab\there\nnl", "(555) 123.45,6"]


def test_mask_alphanum_per_code_point_keeps_the_spec_punctuation() -> None:
    out = masked(A.MASK_ALPHANUM, STRINGS, pa.large_string(), StringType())
    assert out == ["xxxxxxxxnnnnnn@xxxxx.xxx", "nnnn-nnnn-nnnn-nnnn", "xxx", "xxxx", "xxxxx", "",
                   None, "xxxxxxxxxxx", "xxxxxx", "xxxxxxxxxxx", "(nnn)xnnn.nn,n"]


def test_show_first_4_keeps_four_code_points_and_short_values_whole() -> None:
    out = masked(A.SHOW_FIRST_4, STRINGS, pa.large_string(), StringType())
    assert out == ["prasxxxxnnnnnn@xxxxx.xxx", "4111-nnnn-nnnn-nnnn", "abc", "abcd", "abcdx", "",
                   None, "héllxxxxxxx", "😀😀😀😀xx", "tab\txxxxxxx", "(555)xnnn.nn,n"]


def test_show_last_4_keeps_the_last_four_code_points() -> None:
    out = masked(A.SHOW_LAST_4, STRINGS, pa.string(), StringType())
    assert out == ["xxxxxxxxnnnnnn@xxxxx.com", "nnnn-nnnn-nnnn-4444", "abc", "abcd", "xbcde", "",
                   None, "xxxxxxxörld", "xx😀😀😀x", "xxxxxxxe\nnl",
                   "(nnn)xnnn.45,6"]


def test_replace_with_null_on_any_optional_type() -> None:
    assert masked(A.REPLACE_WITH_NULL, [1, None, 3], pa.int32(), IntegerType()) == [None] * 3
    dates = [dt.date(2024, 7, 15)]
    assert masked(A.REPLACE_WITH_NULL, dates, pa.date32(), DateType()) == [None]


def test_replace_with_null_refuses_a_required_column() -> None:
    with pytest.raises(MaskUnsupported):
        mask_column(Mask(A.REPLACE_WITH_NULL), pa.array([1]), field(IntegerType(), True))


def test_fixed_value_is_parsed_to_the_column_type_and_nulls_stay() -> None:
    assert masked(A.MASK_TO_FIXED_VALUE, [1, None, 3], pa.int64(), LongType(), "-5") \
        == [-5, None, -5]
    assert masked(A.MASK_TO_FIXED_VALUE, ["a", None], pa.large_string(), StringType(),
                  "***") == ["***", None]
    assert masked(A.MASK_TO_FIXED_VALUE, [dt.date(2024, 7, 15), None], pa.date32(), DateType(),
                  "2000-01-02") == [dt.date(2000, 1, 2), None]
    tz = pa.timestamp("us", tz="UTC")
    assert masked(A.MASK_TO_FIXED_VALUE, [dt.datetime(2024, 7, 15, tzinfo=UTC)], tz,
                  TimestamptzType(), "2001-02-03T04:05:06+00:00") \
        == [dt.datetime(2001, 2, 3, 4, 5, 6, tzinfo=UTC)]
    assert masked(A.MASK_TO_FIXED_VALUE, [Decimal("12.34")], pa.decimal128(10, 2),
                  DecimalType(10, 2), "1.50") == [Decimal("1.50")]
    assert masked(A.MASK_TO_FIXED_VALUE, [b"\x01", None], pa.large_binary(), BinaryType(),
                  "ABCD") == [b"\xab\xcd", None]


def test_fixed_value_without_a_value_is_the_spec_default() -> None:
    assert masked(A.MASK_TO_FIXED_VALUE, [1], pa.int32(), IntegerType()) == [999999999]
    assert masked(A.MASK_TO_FIXED_VALUE, ["x"], pa.large_string(), StringType()) \
        == ["XXXXXXXX"]
    assert masked(A.MASK_TO_FIXED_VALUE, [dt.date(2020, 1, 1)], pa.date32(), DateType()) \
        == [dt.date(9999, 12, 31)]
    assert masked(A.MASK_TO_FIXED_VALUE, [dt.datetime(2020, 1, 1)], pa.timestamp("us"),
                  TimestampType()) == [dt.datetime(9999, 12, 31)]
    assert masked(A.MASK_TO_FIXED_VALUE, [1], pa.int64(), LongType()) == [999999999]
    ns = pa.array([0], pa.timestamp("ns"))
    out = mask_column(Mask(A.MASK_TO_FIXED_VALUE), ns, field(TimestampNanoType()))
    assert out.cast(pa.int64()).to_pylist() == [
        (dt.date(2261, 12, 31) - dt.date(1970, 1, 1)).days * 86_400 * 10**9]
    assert masked(A.MASK_TO_FIXED_VALUE, [Decimal("12.34")], pa.decimal128(10, 2),
                  DecimalType(10, 2)) == [Decimal("0.00")]
    assert masked(A.MASK_TO_FIXED_VALUE, [True], pa.bool_(), BooleanType()) == [False]
    assert masked(A.MASK_TO_FIXED_VALUE, [1.5], pa.float64(), DoubleType()) == [0.0]
    assert masked(A.MASK_TO_FIXED_VALUE, [b"abc"], pa.binary(3), FixedType(3)) == [bytes(3)]


def test_fixed_value_on_a_uuid_extension_column() -> None:
    values = [uuid.uuid4().bytes, None]
    array = pa.ExtensionArray.from_storage(pa.uuid(), pa.array(values, pa.binary(16)))
    out = mask_column(Mask(A.MASK_TO_FIXED_VALUE), array, field(UUIDType()))
    assert out.type == pa.uuid()
    assert out.storage.to_pylist() == [bytes(16), None]


@pytest.mark.parametrize(("kind", "value"), [(IntegerType(), "x"),
                                             (IntegerType(), "99999999999"),
                                             (DateType(), "yesterday"),
                                             (FixedType(2), "ABCDEF")])
def test_fixed_value_that_does_not_parse_is_refused(kind: IcebergType, value: str) -> None:
    with pytest.raises(MaskUnsupported):
        mask_column(Mask(A.MASK_TO_FIXED_VALUE, value), pa.array([], pa.int32()), field(kind))


def test_truncate_dates() -> None:
    dates = [dt.date(2024, 7, 15), dt.date(1969, 12, 31), None]
    assert masked(A.TRUNCATE_TO_YEAR, dates, pa.date32(), DateType()) \
        == [dt.date(2024, 1, 1), dt.date(1969, 1, 1), None]
    assert masked(A.TRUNCATE_TO_MONTH, dates, pa.date32(), DateType()) \
        == [dt.date(2024, 7, 1), dt.date(1969, 12, 1), None]


def test_truncate_timestamps_with_a_zone_in_utc() -> None:
    # 2024-01-01T02:30 UTC is still 2023 in New York: truncation is in UTC, whatever the zone
    instant = dt.datetime(2024, 1, 1, 2, 30, tzinfo=UTC)
    for tz in ("UTC", "America/New_York"):
        kind = pa.timestamp("us", tz=tz)
        out = mask_column(Mask(A.TRUNCATE_TO_YEAR), pa.array([instant, None], kind),
                          field(TimestamptzType()))
        assert out.type == kind
        assert [v if v is None else v.astimezone(UTC) for v in out.to_pylist()] \
            == [dt.datetime(2024, 1, 1, tzinfo=UTC), None]
    naive = masked(A.TRUNCATE_TO_MONTH, [dt.datetime(2024, 7, 15, 13, 14, 15, 16)],
                   pa.timestamp("us"), TimestampType())
    assert naive == [dt.datetime(2024, 7, 1)]


def test_truncate_nanosecond_timestamps() -> None:
    array = pa.array([1_721_000_000_123_456_789, None], pa.int64()).cast(pa.timestamp("ns"))
    out = mask_column(Mask(A.TRUNCATE_TO_MONTH), array, field(TimestampNanoType()))
    first = dt.datetime(2024, 7, 1, tzinfo=UTC).timestamp()
    assert out.cast(pa.int64()).to_pylist() == [int(first) * 10**9, None]


def test_sha_256_of_strings_is_the_lowercase_hex_of_the_utf8_bytes() -> None:
    out = masked(A.SHA_256, ["héllo", None, "héllo", ""], pa.large_string(), StringType())
    expected = hashlib.sha256("héllo".encode()).hexdigest()
    assert out == [expected, None, expected, hashlib.sha256(b"").hexdigest()]


def test_sha_256_of_ints_and_longs_keeps_the_type() -> None:
    def spec(value: int, width: int) -> int:
        digest = hashlib.sha256(value.to_bytes(width, "little", signed=True)).digest()
        return int.from_bytes(digest[:width], "little", signed=True)
    ints = masked(A.SHA_256, [1, -7, None, 2**31 - 1], pa.int32(), IntegerType())
    assert ints == [spec(1, 4), spec(-7, 4), None, spec(2**31 - 1, 4)]
    longs = masked(A.SHA_256, [1, -(2**63)], pa.int64(), LongType())
    assert longs == [spec(1, 8), spec(-(2**63), 8)]
    assert ints[0] != 1


def test_sha_256_of_binaries_is_the_raw_digest() -> None:
    out = masked(A.SHA_256, [b"\x00\xff", None], pa.large_binary(), BinaryType())
    assert out == [hashlib.sha256(b"\x00\xff").digest(), None]


def test_sha_256_is_deterministic_across_chunks_so_joins_match() -> None:
    chunked = pa.chunked_array([["a", "b"], ["b", None]], pa.large_string())
    out = mask_column(Mask(A.SHA_256), chunked, field(StringType()))
    assert isinstance(out, pa.ChunkedArray) and out.num_chunks == 2
    values = out.to_pylist()
    assert values[1] == values[2] and values[3] is None


@pytest.mark.parametrize(("action", "kind"), [
    (A.MASK_ALPHANUM, IntegerType()), (A.SHOW_FIRST_4, BinaryType()),
    (A.SHOW_LAST_4, DateType()), (A.TRUNCATE_TO_YEAR, StringType()),
    (A.TRUNCATE_TO_MONTH, LongType()), (A.SHA_256, DoubleType()),
    (A.SHA_256, DateType()), (A.SHA_256, DecimalType(4, 1))])
def test_actions_refused_on_types_the_spec_does_not_list(action: MaskAction,
                                                         kind: IcebergType) -> None:
    with pytest.raises(MaskUnsupported):
        mask_column(Mask(action), pa.array([], pa.int32()), field(kind))
