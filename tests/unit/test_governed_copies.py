"""Governed copies of data files (``proxy.governed.copies``): live rows only, the row filter,
masks, kept columns with field ids, statistics without masked columns, reuse, failures."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.expressions import EqualTo, Not, NotEqualTo
from pyiceberg.manifest import DataFileContent
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.transforms import IdentityTransform

from proxy.governed.copies import CopiedFile, CopyFailed, copy_governed
from proxy.governed.masks import MaskUnsupported
from tests.support.governed_copies import ROWS, SCHEMA, job, row_file, table
from tests.support.row_files import RowTable

EU = EqualTo("region", "EU")


@pytest.fixture
def rt(tmp_path: Path) -> RowTable:
    return table(tmp_path / "t")


def out(tmp_path: Path, name: str = "g") -> str:
    return str(tmp_path / "governed" / "data" / f"{name}.parquet")


def data_path(rt: RowTable) -> str:
    return str(rt.data_files()[0][0].file_path)


def read(path: str) -> pa.Table:
    return pq.read_table(path)


def test_live_permitted_rows_masked_and_kept_with_field_ids(rt: RowTable,
                                                             tmp_path: Path) -> None:
    target = data_path(rt)
    positions = rt.write_positions("pos", [(target, 0)], scoped=target)
    equality = rt.write_equality("eq", pa.table({"id": pa.array([3], pa.int64())}), [1])
    deletes = (row_file(positions, 2), row_file(equality, 2))
    copied = copy_governed(job(rt, out(tmp_path), deletes=deletes, row_filter=EU,
                               keep=(1, 3, 5), masks=((3, "show-last-4", None),)))
    rows = read(copied.path)
    # 0 deleted by position, 3 by value, 1 is US, 4 has no region (NULL is not permitted)
    assert rows.column("id").to_pylist() == [2, 5]
    assert rows.column("email").to_pylist() == [None, "xxx@y.io"]
    assert rows.column_names == ["id", "email", "ts"]
    assert [f.metadata[b"PARQUET:field_id"] for f in pq.read_schema(copied.path)] \
        == [b"1", b"3", b"5"]
    assert copied.record_count == 2 and copied.file_size_in_bytes == os.path.getsize(copied.path)


def test_statistics_cover_kept_unmasked_columns_only(rt: RowTable, tmp_path: Path) -> None:
    copied = copy_governed(job(rt, out(tmp_path), keep=(1, 2, 3),
                               masks=((2, "sha-256", None),)))
    stats = copied.stats
    assert set(stats.value_counts) == {1, 3}
    assert set(stats.lower_bounds) == {1, 3} and set(stats.upper_bounds) == {1, 3}
    assert 2 not in stats.null_value_counts and 2 not in stats.column_sizes
    assert stats.null_value_counts[3] == 1
    assert stats.lower_bounds[1] == (0).to_bytes(8, "little")
    names = read(copied.path).column("name").to_pylist()
    assert names[0] == hashlib.sha256(b"ann").hexdigest()


def test_a_deletion_vector_removes_its_positions(rt: RowTable, tmp_path: Path) -> None:
    target = data_path(rt)
    vector = rt.write_vector("dv", target, [1, 4])
    copied = copy_governed(job(rt, out(tmp_path), deletes=(row_file(vector, 2),)))
    assert read(copied.path).column("id").to_pylist() == [0, 2, 3, 5]


def test_positions_for_another_file_are_not_applied(rt: RowTable, tmp_path: Path) -> None:
    positions = rt.write_positions("pos", [("s3://elsewhere/f.parquet", 0)])
    copied = copy_governed(job(rt, out(tmp_path), deletes=(row_file(positions, 2),)))
    assert copied.record_count == ROWS.num_rows


def test_null_filter_results_are_not_permitted(rt: RowTable, tmp_path: Path) -> None:
    copied = copy_governed(job(rt, out(tmp_path), row_filter=Not(EqualTo("region", "US"))))
    assert read(copied.path).column("id").to_pylist() == [0, 2, 3, 5]
    other = copy_governed(job(rt, out(tmp_path, "ne"), row_filter=NotEqualTo("region", "US")))
    assert 4 not in read(other.path).column("id").to_pylist()


def test_no_permitted_row_writes_nothing(rt: RowTable, tmp_path: Path) -> None:
    target = out(tmp_path)
    copied = copy_governed(job(rt, target, row_filter=EqualTo("region", "MARS")))
    assert copied == CopiedFile("", 0, 0)
    assert not os.path.exists(target)


def test_an_existing_file_is_reused_without_reading_the_base(rt: RowTable,
                                                             tmp_path: Path) -> None:
    target = out(tmp_path)
    first = copy_governed(job(rt, target, row_filter=EU, masks=((3, "mask-alphanum", None),)))
    base = data_path(rt)
    os.remove(base.removeprefix("file://"))
    again = copy_governed(job(rt, target, row_filter=EU, masks=((3, "mask-alphanum", None),)))
    assert again == first


def test_reuse_never_bypasses_a_refused_mask_or_filter(rt: RowTable, tmp_path: Path) -> None:
    target = out(tmp_path)
    copy_governed(job(rt, target))
    with pytest.raises(MaskUnsupported):
        copy_governed(job(rt, target, masks=((1, "show-first-4", None),)))
    with pytest.raises(CopyFailed, match="row filter"):
        copy_governed(job(rt, target, row_filter=EqualTo("nope", 1)))


def test_an_existing_file_with_other_columns_is_refused(rt: RowTable, tmp_path: Path) -> None:
    target = out(tmp_path)
    copy_governed(job(rt, target, keep=(1, 2)))
    with pytest.raises(CopyFailed, match="other columns"):
        copy_governed(job(rt, target, keep=(1, 2, 3)))


def test_writing_leaves_no_temporary_file(rt: RowTable, tmp_path: Path) -> None:
    copied = copy_governed(job(rt, out(tmp_path)))
    assert os.listdir(os.path.dirname(copied.path)) == ["g.parquet"]


def test_budget_exhausted_fails_the_copy(rt: RowTable, tmp_path: Path) -> None:
    with pytest.raises(CopyFailed, match="budget"):
        copy_governed(job(rt, out(tmp_path), max_bytes=100))
    assert not os.path.exists(out(tmp_path))


def test_an_unreadable_base_file_fails_with_our_message(rt: RowTable, tmp_path: Path) -> None:
    os.remove(data_path(rt).removeprefix("file://"))
    with pytest.raises(CopyFailed) as failed:
        copy_governed(job(rt, out(tmp_path)))
    assert "could not be read" in str(failed.value)
    assert "No such file" not in str(failed.value)


def test_a_data_file_that_is_not_a_delete_file_is_refused(rt: RowTable,
                                                          tmp_path: Path) -> None:
    file, sequence = rt.data_files()[0]
    assert file.content == DataFileContent.DATA
    with pytest.raises(CopyFailed, match="not a delete file"):
        copy_governed(job(rt, out(tmp_path), deletes=(row_file(file, sequence),)))


def test_a_mask_the_column_cannot_take_is_mask_unsupported(rt: RowTable,
                                                           tmp_path: Path) -> None:
    with pytest.raises(MaskUnsupported):
        copy_governed(job(rt, out(tmp_path), masks=((1, "show-first-4", None),)))
    with pytest.raises(MaskUnsupported):
        copy_governed(job(rt, out(tmp_path), masks=((2, "rot13", None),)))
    with pytest.raises(MaskUnsupported):
        copy_governed(job(rt, out(tmp_path), masks=((99, "sha-256", None),)))


def test_a_filter_that_does_not_apply_fails_closed(rt: RowTable, tmp_path: Path) -> None:
    with pytest.raises(CopyFailed, match="row filter"):
        copy_governed(job(rt, out(tmp_path), row_filter=EqualTo("nope", 1)))


def test_jobs_and_results_pickle(rt: RowTable, tmp_path: Path) -> None:
    the_job = job(rt, out(tmp_path), row_filter=EU, masks=((3, "sha-256", None),))
    assert pickle.loads(pickle.dumps(the_job)) == the_job
    copied = copy_governed(the_job)
    assert pickle.loads(pickle.dumps(copied)) == copied


def test_a_partitioned_file_is_copied_when_its_partition_describes_it(tmp_path: Path) -> None:
    folder = tmp_path / "p"
    folder.mkdir()
    spec = PartitionSpec(PartitionField(4, 1000, IdentityTransform(), "region"))
    rt = RowTable.create(folder, SCHEMA, [ROWS], partition_spec=spec)
    file, sequence = next((f, s) for f, s in rt.data_files() if f.partition[0] == "US")
    data = row_file(file, sequence)
    copied = copy_governed(job(rt, out(tmp_path), data=data))
    assert read(copied.path).column("id").to_pylist() == [1]
    lying = dataclasses.replace(data, partition=("EU",))
    with pytest.raises(CopyFailed, match="does not describe"):
        copy_governed(job(rt, out(tmp_path, "lie"), data=lying))
