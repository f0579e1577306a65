"""Bloom filters over column values, hashed so that planning hashes literals the same way.

**Values.** A value is hashed by its Iceberg single-value binary form (the spec's "Binary
single-value serialization") in its type's *family*, so that the promotions Iceberg allows keep
a filter usable: ``int`` and ``long`` are both hashed as an 8-byte little-endian long, ``float``
and ``double`` both as an 8-byte little-endian IEEE double (``-0.0`` as ``0.0``, since they are
equal; NaN is never added, as ``=`` never matches it), ``date`` as a 4-byte little-endian day
count, ``time`` / ``timestamp`` / ``timestamptz`` as an 8-byte little-endian microsecond count
(the ``_ns`` types: nanoseconds), ``string`` as its UTF-8 bytes, ``uuid`` as its 16 bytes,
``binary`` / ``fixed`` as themselves, ``decimal(P, S)`` as the minimal big-endian two's
complement of its unscaled value (independent of P, which may widen). ``family`` names the
family; a filter is used only for a column whose current type has the family it was built for.

**Filter.** A classic bloom filter of ``num_bits`` bits and ``num_hashes`` probes. The probes
come from one 128-bit MurmurHash3 (x64 variant, seed 0; ``mmh3``, which pyiceberg itself uses
for bucket transforms) of the value bytes, split into two 64-bit halves ``h1``, ``h2`` read as
unsigned: probe ``i`` sets bit ``(h1 + i * h2) mod 2**64 mod num_bits`` (Kirsch-Mitzenmacher
double hashing). Bit ``b`` is bit
``b % 8`` (least significant first) of byte ``b // 8``. ``sized_for`` picks the optimal
``num_bits`` and ``num_hashes`` for a count of distinct values and a false-positive rate.
"""

from __future__ import annotations

import math
import struct
import uuid
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any

import mmh3
from pyiceberg.conversions import to_bytes
from pyiceberg.types import (
    BinaryType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    StringType,
    TimestampNanoType,
    TimestampType,
    TimestamptzNanoType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

HASH = "murmur3-x64-128-kirsch-mitzenmacher"
"""The hashing scheme's name, recorded with every filter."""
MIN_BITS = 64
MAX_BITS = 64 * 1024 * 1024  # 8 MiB of filter, whatever the file holds
MAX_HASHES = 16

_LONG = struct.Struct("<q").pack
_INT = struct.Struct("<i").pack
_DOUBLE = struct.Struct("<d").pack
_MASK64 = (1 << 64) - 1

Encoder = Callable[[Any], bytes | None]


def family(field_type: IcebergType) -> str | None:
    """The hashing family of a column type (None: not indexable)."""
    if isinstance(field_type, IntegerType | LongType):
        return "long"
    if isinstance(field_type, FloatType | DoubleType):
        return "double"
    if isinstance(field_type, DecimalType):
        return f"decimal({field_type.scale})"
    if isinstance(field_type, FixedType):
        return "binary"
    simple = (DateType, TimeType, TimestampType, TimestamptzType, TimestampNanoType,
              TimestamptzNanoType, StringType, UUIDType, BinaryType)
    if isinstance(field_type, simple):
        return str(field_type)
    return None


def encoder(family_name: str) -> Encoder:
    """The function giving a value's hashed bytes in ``family_name`` (None: never matches).
    Values are Iceberg's Python forms: ints for dates (days), times and timestamps (micros or
    nanos), ``str``, ``bytes``, ``uuid.UUID``, ``Decimal``, ``float``."""
    if family_name == "long" or family_name.startswith(("time", "timestamp")):
        return _long
    if family_name == "date":
        return _date
    if family_name == "double":
        return _double
    if family_name == "string":
        return _string
    if family_name == "uuid":
        return _uuid
    if family_name == "binary":
        return _binary
    if family_name.startswith("decimal("):
        scale = int(family_name[len("decimal("):-1])
        return lambda value: _decimal(value, scale)
    raise ValueError(f"no bloom-filter hashing for {family_name!r}")


def _long(value: Any) -> bytes:
    return _LONG(int(value))


def _date(value: Any) -> bytes:
    return _INT(int(value))


def _double(value: Any) -> bytes | None:
    number = float(value)
    if math.isnan(number):
        return None
    return _DOUBLE(0.0 if number == 0.0 else number)


def _string(value: Any) -> bytes:
    return str(value).encode("utf-8")


def _uuid(value: Any) -> bytes:
    return value.bytes if isinstance(value, uuid.UUID) else bytes(value)


def _binary(value: Any) -> bytes:
    return bytes(value)


def _decimal(value: Any, scale: int) -> bytes:
    return to_bytes(DecimalType(38, scale), Decimal(value))


def probes(data: bytes) -> tuple[int, int]:
    """The two 64-bit halves of the value's 128-bit MurmurHash3 (x64, seed 0)."""
    h1, h2 = mmh3.hash64(data, 0, True, False)
    return h1 & _MASK64, h2 & _MASK64


class BloomFilter:
    """A bloom filter; ``bits`` is its bit array (``num_bits`` / 8 bytes)."""

    __slots__ = ("bits", "num_bits", "num_hashes")

    def __init__(self, num_bits: int, num_hashes: int, bits: bytes | None = None) -> None:
        if num_bits % 8 or not MIN_BITS <= num_bits <= MAX_BITS:
            raise ValueError(f"a bloom filter has {MIN_BITS}..{MAX_BITS} bits, in whole bytes")
        if not 1 <= num_hashes <= MAX_HASHES:
            raise ValueError(f"a bloom filter has 1..{MAX_HASHES} hashes")
        if bits is not None and len(bits) != num_bits // 8:
            raise ValueError("the bloom filter's bits do not match its size")
        self.num_bits = num_bits
        self.num_hashes = num_hashes
        self.bits = bytearray(bits) if bits is not None else bytearray(num_bits // 8)

    @classmethod
    def sized_for(cls, distinct: int, fpp: float) -> BloomFilter:
        """An empty filter sized for ``distinct`` values at false-positive rate ``fpp``."""
        n = max(1, distinct)
        bits = math.ceil(-n * math.log(fpp) / (math.log(2) ** 2))
        bits = min(MAX_BITS, max(MIN_BITS, (bits + 7) // 8 * 8))
        hashes = min(MAX_HASHES, max(1, round(bits / n * math.log(2))))
        return cls(bits, hashes)

    def add_all(self, values: Iterable[bytes]) -> None:
        """Add every value's bytes."""
        bits, m, k = self.bits, self.num_bits, self.num_hashes
        for data in values:
            h1, h2 = probes(data)
            for i in range(k):
                position = ((h1 + i * h2) & _MASK64) % m
                bits[position >> 3] |= 1 << (position & 7)

    def might_contain(self, data: bytes) -> bool:
        """False only when ``data`` was certainly never added."""
        return self.might_contain_probes(*probes(data))

    def might_contain_probes(self, h1: int, h2: int) -> bool:
        """``might_contain`` of a value whose ``probes`` are ``h1``, ``h2`` (hashed once for
        many filters)."""
        bits, m = self.bits, self.num_bits
        for i in range(self.num_hashes):
            position = ((h1 + i * h2) & _MASK64) % m
            if not bits[position >> 3] & (1 << (position & 7)):
                return False
        return True

    def to_bytes(self) -> bytes:
        return bytes(self.bits)
