"""Building the bloom filters of one data file and writing them as Puffin files.

``build_file(job)`` reads the indexed columns of one Parquet data file (found by their Iceberg
field ids, as Iceberg writers record them), hashes the distinct non-null values of each
(``proxy.planning.bloom``) and writes one Puffin file per column (``store.puffin_bytes``). It
runs in icegov's own threads or on Spark executors (``spark_build``): a ``BuildJob`` carries all
it needs, FileIO properties included. A column the file lacks, a Parquet type that does not
fit the column's family, or a file that is not Parquet fails the job (``IndexBuildFailed``):
such a file simply has no index, and is never pruned by one.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io import load_file_io

from proxy.indexes.store import FilterKey, puffin_bytes
from proxy.planning.bloom import BloomFilter, encoder

_FIELD_ID = b"PARQUET:field_id"


class IndexBuildFailed(Exception):
    """This data file's columns cannot be indexed (the message is ours, never file content)."""


@dataclass(frozen=True)
class ColumnJob:
    """One column of a data file to index, and where its Puffin file goes."""

    key: FilterKey
    output: str


@dataclass(frozen=True)
class BuildJob:
    """The columns of one data file to index."""

    data_path: str
    file_format: str
    columns: tuple[ColumnJob, ...]
    io_properties: tuple[tuple[str, str], ...]
    fpp: float
    snapshot_id: int
    sequence_number: int
    mac_key: bytes | None = None


@dataclass(frozen=True)
class BuiltFilter:
    """A filter built and written: what it indexes, where it lies, its bits."""

    key: FilterKey
    path: str
    bloom: BloomFilter


def build_file(job: BuildJob) -> list[BuiltFilter]:
    """Index every column of ``job`` and write their Puffin files."""
    if job.file_format.upper() != "PARQUET":
        raise IndexBuildFailed(f"{job.data_path}: only Parquet data files are indexed")
    io = load_file_io(dict(job.io_properties), job.data_path)
    try:
        with io.new_input(job.data_path).open() as stream:
            arrays = dict(_columns(pq.ParquetFile(stream), job))
    except (OSError, pa.ArrowException) as exc:
        raise IndexBuildFailed(f"{job.data_path} cannot be read to index it") from exc
    built = []
    for column in job.columns:
        try:
            bloom = filter_of(arrays[column.key.field_id], column.key.family, job.fpp)
        except pa.ArrowException as exc:
            raise IndexBuildFailed(f"a column of {job.data_path} cannot be indexed") from exc
        data = puffin_bytes(column.key, bloom, job.snapshot_id, job.sequence_number,
                            job.mac_key)
        with io.new_output(column.output).create(overwrite=True) as out:
            out.write(data)
        built.append(BuiltFilter(column.key, column.output, bloom))
    return built


def _columns(parquet: pq.ParquetFile, job: BuildJob) -> Iterator[tuple[int, pa.ChunkedArray]]:
    by_id: dict[int, str] = {}
    for arrow_field in parquet.schema_arrow:
        raw = (arrow_field.metadata or {}).get(_FIELD_ID)
        if raw is not None and raw.isdigit():
            by_id[int(raw)] = arrow_field.name
    wanted = {c.key.field_id: by_id.get(c.key.field_id) for c in job.columns}
    missing = [i for i, name in wanted.items() if name is None]
    if missing:
        raise IndexBuildFailed(f"{job.data_path} has no column with field id {missing[0]}")
    names = [name for name in wanted.values() if name is not None]
    table = parquet.read(columns=names)
    for field_id, name in wanted.items():
        yield field_id, table.column(name)


def filter_of(values: pa.ChunkedArray, family: str, fpp: float) -> BloomFilter:
    """The bloom filter of ``values``' distinct non-null values, hashed in ``family``."""
    distinct = pc.unique(_physical(values, family)).drop_null()
    bloom = BloomFilter.sized_for(len(distinct), fpp)
    encode = encoder(family)
    bloom.add_all(h for h in (encode(v) for v in distinct.to_pylist()) if h is not None)
    return bloom


def _physical(values: pa.ChunkedArray, family: str) -> pa.ChunkedArray:
    """``values`` as Iceberg's Python forms for ``family`` (ints for dates, times and
    timestamps in the family's unit), refusing an Arrow type that does not fit it."""
    kind = values.type
    if isinstance(kind, pa.BaseExtensionType):  # e.g. arrow.uuid: its storage is the value
        values = pa.chunked_array([c.storage for c in values.chunks], kind.storage_type)
        kind = kind.storage_type
    if pa.types.is_dictionary(kind):
        values, kind = values.cast(kind.value_type), kind.value_type
    if family == "long" and pa.types.is_integer(kind):
        return values.cast(pa.int64())
    if family == "double" and pa.types.is_floating(kind):
        return values.cast(pa.float64())
    if family == "date" and pa.types.is_date32(kind):
        return values.cast(pa.int32())
    if family == "time" and pa.types.is_time(kind):
        return values.cast(pa.time64("us")).cast(pa.int64())
    if family.startswith("timestamp") and pa.types.is_timestamp(kind):
        unit = "ns" if family.endswith("_ns") else "us"
        return values.cast(pa.timestamp(unit, kind.tz)).cast(pa.int64())
    if family == "string" and (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return values
    if family in ("binary", "uuid") and (pa.types.is_binary(kind) or pa.types.is_large_binary(kind)
                                         or pa.types.is_fixed_size_binary(kind)):
        return values
    if family.startswith("decimal(") and pa.types.is_decimal(kind):
        return values
    raise IndexBuildFailed(f"a column of Arrow type {kind} cannot be indexed as {family}")
