"""An added data file's declared partition values must be what its rows are
(``proxy.commits.partition_proof``), for every transform, through the real classification of a
commit on a real partitioned table: honest files land as an INSERT, lying ones are 400."""

from __future__ import annotations

import datetime as dt
import itertools
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile, DataFileContent, ManifestEntryStatus
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    IdentityTransform,
    MonthTransform,
    TruncateTransform,
    VoidTransform,
)
from pyiceberg.typedef import Record
from pyiceberg.types import DateType, LongType, NestedField, StringType, TimestamptzType

from proxy.commits import UnverifiableCommit, classify_commit
from proxy.commits.limits import CommitLimits
from proxy.commits.manifests import CommitTooLarge
from proxy.governance import Action
from tests.support.row_files import RowTable, spec_manifest

SCHEMA = Schema(NestedField(1, "id", LongType(), required=True),
                NestedField(2, "region", StringType()),
                NestedField(3, "at", TimestamptzType()),
                NestedField(4, "day", DateType()))
ARROW = schema_to_pyarrow(SCHEMA)
UTC = dt.UTC
_ids = itertools.count(7000)


def rows(*values: tuple[int, str | None, dt.datetime, dt.date]) -> pa.Table:
    return pa.table(list(zip(*values, strict=True)), schema=ARROW)


ROW = (1, "eu", dt.datetime(2026, 11, 28, 6, tzinfo=UTC), dt.date(2026, 11, 28))
US = (3, "us", dt.datetime(2026, 11, 29, 6, tzinfo=UTC), dt.date(2026, 12, 1))  # bucket 3, not 4

SPECS = {
    "identity": (PartitionField(2, 1000, IdentityTransform(), "region"), "eu", "us"),
    "truncate": (PartitionField(2, 1000, TruncateTransform(1), "region_t"), "e", "u"),
    "day": (PartitionField(3, 1000, DayTransform(), "at_day"), 20785, 20786),
    "month": (PartitionField(4, 1000, MonthTransform(), "day_month"), 682, 683),
    "bucket": (PartitionField(1, 1000, BucketTransform(8), "id_bucket"), 4, 3),
}


def table(tmp_path: Path, field: PartitionField) -> RowTable:
    return RowTable.create(tmp_path, SCHEMA, [rows(ROW)], partition_spec=PartitionSpec(field))


def insert(rt: RowTable, *files: DataFile, limits: CommitLimits | None = None) -> Any:
    """Classify a commit adding ``files`` in one manifest written with the table's spec."""
    sid = next(_ids)
    manifest = spec_manifest(rt.crafter, sid, [(ManifestEntryStatus.ADDED, f, 0) for f in files],
                             rt.table.spec())
    snapshot = rt.crafter.snapshot(sid, [manifest, *rt.crafter.parent_manifests()], "append")
    return classify_commit(rt.crafter.body(snapshot), rt.table.metadata, rt.table.io,
                           limits=limits or CommitLimits())


def written(rt: RowTable, name: str, data: pa.Table, *partition: Any,
            arrow: pa.Schema = ARROW) -> DataFile:
    """``data`` as a Parquet file of the table, its entry declaring ``partition`` (no metric
    claims: only the partition is in question)."""
    return rt._parquet(f"{rt.table.location()}/data/{name}.parquet", data.cast(arrow),
                       DataFileContent.DATA, partition=Record(*partition))


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_honest_partition_values_land_and_lying_ones_are_refused(tmp_path: Path,
                                                                  kind: str) -> None:
    field, honest, _ = SPECS[kind]
    rt = table(tmp_path, field)
    good = written(rt, "good", rows(ROW, ROW), honest)
    assert insert(rt, good).actions == {Action.INSERT}
    liar = written(rt, "liar", rows(ROW, US), honest)  # one row maps elsewhere
    with pytest.raises(UnverifiableCommit, match="does not hold the rows its partition declares"):
        insert(rt, liar)


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_a_file_wholly_of_another_partition_is_refused(tmp_path: Path, kind: str) -> None:
    field, honest, other = SPECS[kind]
    rt = table(tmp_path, field)
    assert insert(rt, written(rt, "own", rows(US), other)).actions == {Action.INSERT}
    with pytest.raises(UnverifiableCommit, match=f"partition field {field.name} is not"):
        insert(rt, written(rt, "moved", rows(US), honest))


def test_footer_statistics_that_lie_prove_nothing(tmp_path: Path) -> None:
    """A footer claiming min = max = 'eu' for a column holding 'us' is the writer's word, not
    the rows': the values are read."""
    rt = table(tmp_path, SPECS["identity"][0])
    liar = rows(ROW, US)
    path = f"{rt.table.location()}/data/no-stats.parquet"
    with rt.table.io.new_output(path).create() as out:  # a footer claiming one region only
        pq.write_table(liar.cast(ARROW), out, write_statistics=False)
    data_file = written(rt, "stats", liar, "eu")
    data_file = DataFile.from_args(**{**{k: getattr(data_file, k) for k in (
        "content", "file_format", "partition", "record_count")}, "file_path": path,
        "file_size_in_bytes": len(rt.table.io.new_input(path))})
    with pytest.raises(UnverifiableCommit, match="region is not identity of its rows"):
        insert(rt, data_file)


def test_nulls_map_to_a_null_partition_only(tmp_path: Path) -> None:
    rt = table(tmp_path, SPECS["identity"][0])
    nulls = rows((3, None, ROW[2], ROW[3]))
    assert insert(rt, written(rt, "nulls", nulls, None)).actions == {Action.INSERT}
    with pytest.raises(UnverifiableCommit, match="does not hold the rows"):
        insert(rt, written(rt, "nulls-as-eu", nulls, "eu"))
    with pytest.raises(UnverifiableCommit, match="does not hold the rows"):
        insert(rt, written(rt, "eu-as-null", rows(ROW), None))


def test_an_identity_column_the_file_lacks_takes_its_partition_value(tmp_path: Path) -> None:
    """Readers fill a missing identity source column from the partition (the spec's column
    projection); any other transform of a missing column is null."""
    rt = table(tmp_path, SPECS["identity"][0])
    narrow = pa.schema([f for f in ARROW if f.name != "region"])
    lacking = rows(ROW).drop_columns(["region"])
    assert insert(rt, written(rt, "lacks", lacking, "eu", arrow=narrow)).actions == {Action.INSERT}
    (tmp_path / "b").mkdir()
    bucketed = table(tmp_path / "b", PartitionField(2, 1000, BucketTransform(8), "region_b"))
    assert insert(bucketed, written(bucketed, "null", lacking, None, arrow=narrow)).actions == \
        {Action.INSERT}
    with pytest.raises(UnverifiableCommit, match="of a column it does not hold"):
        insert(bucketed, written(bucketed, "three", lacking, 3, arrow=narrow))


def test_void_fields_are_not_read(tmp_path: Path) -> None:
    rt = table(tmp_path, PartitionField(2, 1000, VoidTransform(), "gone"))
    assert insert(rt, written(rt, "void", rows(ROW, US), None)).actions == {Action.INSERT}


def test_the_column_reads_are_charged_to_the_partition_budget(tmp_path: Path) -> None:
    rt = table(tmp_path, SPECS["bucket"][0])
    data_file = written(rt, "b", rows(ROW), SPECS["bucket"][1])
    with pytest.raises(CommitTooLarge, match="partition_bytes_budget"):
        insert(rt, data_file, limits=CommitLimits(partition_bytes_budget=1))
    assert insert(rt, data_file).actions == {Action.INSERT}
