"""Hostile data files against the partition proof (``proxy.commits.partition_proof``): what a
writer with INSERT rights could craft so the declared partition is not what readers see."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionField
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyiceberg.typedef import Record

from proxy.commits import UnverifiableCommit
from proxy.commits.limits import CommitLimits
from proxy.commits.manifests import CommitTooLarge
from proxy.governance import Action
from tests.unit.test_commit_partition_proof import ARROW, insert, rows, table

UTC = dt.UTC
FAR = (1, "eu", dt.datetime(3000, 1, 1, tzinfo=UTC), dt.date(2026, 11, 28))
FAR_DAY = (dt.date(3000, 1, 1) - dt.date(1970, 1, 1)).days


def int96(rt: object, name: str, data: pa.Table, *partition: object) -> DataFile:
    """``data`` written as Spark and Hive once did: timestamps as INT96."""
    path = f"{rt.table.location()}/data/{name}.parquet"  # type: ignore[attr-defined]
    io = rt.table.io  # type: ignore[attr-defined]
    with io.new_output(path).create() as out:
        pq.write_table(data.cast(ARROW), out, use_deprecated_int96_timestamps=True)
    return DataFile.from_args(content=DataFileContent.DATA, file_path=path,
                              file_format=FileFormat.PARQUET,
                              file_size_in_bytes=len(io.new_input(path)),
                              partition=Record(*partition), record_count=data.num_rows)


def test_an_int96_timestamp_beyond_nanoseconds_is_proven_by_its_real_day(tmp_path: Path) -> None:
    """pyarrow reads INT96 as nanoseconds by default: year 3000 wraps to another day. Java
    reads the real day, so the declared partition must be the real day, never the wrapped one."""
    rt = table(tmp_path, PartitionField(3, 1000, DayTransform(), "at_day"))
    probe = int96(rt, "probe", rows(FAR))
    with rt.table.io.new_input(probe.file_path).open() as stream:
        wrapped = pq.read_table(stream).column("at")[0].value  # pyarrow's default: ns
    wrapped_day = wrapped // (86_400 * 10**9)
    assert wrapped_day != FAR_DAY
    with pytest.raises(UnverifiableCommit, match="does not hold the rows"):
        insert(rt, int96(rt, "wrapped", rows(FAR), wrapped_day))
    assert insert(rt, int96(rt, "real", rows(FAR), FAR_DAY)).actions == {Action.INSERT}


def test_a_few_compressed_bytes_cannot_expand_into_gigabytes(tmp_path: Path) -> None:
    """2,000 rows of one 200 KB region compress to about a kilobyte and decode to 400 MB: read
    as a dictionary reduced to its one distinct value, the proof holds one copy of it (and
    charges that, not the 87 compressed bytes or the 400 MB)."""
    rt = table(tmp_path, PartitionField(2, 1000, IdentityTransform(), "region"))
    big = "x" * 200_000
    bomb = pa.table({"id": pa.array(range(2000), pa.int64()), "region": [big] * 2000,
                     "at": [FAR[2]] * 2000, "day": [FAR[3]] * 2000})
    path = f"{rt.table.location()}/data/bomb.parquet"
    with rt.table.io.new_output(path).create() as out:
        pq.write_table(bomb.cast(ARROW), out, compression="zstd")
    size = len(rt.table.io.new_input(path))
    assert size < 10_000, size
    data_file = DataFile.from_args(content=DataFileContent.DATA, file_path=path,
                                   file_format=FileFormat.PARQUET, file_size_in_bytes=size,
                                   partition=Record(big), record_count=2000)
    assert insert(rt, data_file, limits=CommitLimits(partition_bytes_budget=1_000_000)) \
        .actions == {Action.INSERT}  # one 200 KB value and the indices: under 1 MB
    with pytest.raises(CommitTooLarge, match="partition_bytes_budget"):
        insert(rt, data_file, limits=CommitLimits(partition_bytes_budget=100_000))
