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
from pyiceberg.transforms import DayTransform
from pyiceberg.typedef import Record

from proxy.commits import UnverifiableCommit
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
