"""Bad input to data operations: refused with 400 (413 for size) before anything is written,
with messages that echo no file content; and the wire form of content files."""

from __future__ import annotations

import json
import time
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.conversions import to_bytes
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadataV3
from pyiceberg.transforms import DayTransform
from pyiceberg.typedef import Record
from pyiceberg.types import DateType, DecimalType, LongType, NestedField

from proxy.commits.intent import UnverifiableCommit
from proxy.commits.limits import CommitLimits
from proxy.commits.operations import (
    build_commit,
    check_operation_shape,
    content_file_from_json,
    content_file_to_json,
    has_data_operation,
)
from proxy.errors import CommitFailed, IcebergError, PayloadTooLarge
from tests.unit.test_operations import Tbl


@pytest.fixture()
def tbl(tmp_path: Path) -> Tbl:
    t = Tbl(tmp_path)
    t.append([1])
    return t


def _metadata_files(tbl: Tbl) -> set[Path]:
    return set(Path(tbl.table.location().removeprefix("file://"), "metadata").iterdir())


def _refused(tbl: Tbl, update: dict[str, Any], status: int = 400,
             requirements: list[dict[str, Any]] | None = None) -> IcebergError:
    before = _metadata_files(tbl)
    head = tbl.table.metadata.current_snapshot_id
    with pytest.raises(IcebergError) as refused:
        tbl.build(update, requirements=requirements)
    assert refused.value.status == status, refused.value.message
    assert _metadata_files(tbl) == before  # no manifest or list written
    tbl.refresh()
    assert tbl.table.metadata.current_snapshot_id == head
    return refused.value


def _file(tbl: Tbl, **changes: Any) -> dict[str, Any]:
    return {**tbl.wire(tbl.write([7]))[0], **changes}


def _append(*files: dict[str, Any]) -> dict[str, Any]:
    return {"action": "append-files", "data-files": list(files)}


def test_file_outside_the_table_is_refused_unread(tbl: Tbl, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.parquet"
    outside.write_bytes(b"secret contents")
    refused = _refused(tbl, _append(_file(tbl, **{"file-path": outside.as_uri()})))
    assert "not under the table's locations" in refused.message
    assert "secret" not in refused.message


def test_missing_file_is_refused(tbl: Tbl) -> None:
    path = f"{tbl.table.location()}/data/p=a/never-written.parquet"
    assert "does not exist" in _refused(tbl, _append(_file(tbl, **{"file-path": path}))).message


def test_wrong_size_is_refused(tbl: Tbl) -> None:
    good = _file(tbl)
    refused = _refused(tbl, _append({**good, "file-size-in-bytes": good["file-size-in-bytes"] + 1}))
    assert "not the declared" in refused.message


def test_wrong_record_count_is_refused(tbl: Tbl) -> None:
    refused = _refused(tbl, _append(_file(tbl, **{"record-count": 1000})))
    assert "holds 1 rows, not the declared 1000" in refused.message


def test_not_parquet_is_refused_without_echoing_it(tbl: Tbl) -> None:
    path = f"{tbl.table.location()}/data/p=a/fake.parquet"
    with tbl.table.io.new_output(path).create() as out:
        out.write(b"PASSWORD=hunter2")
    refused = _refused(tbl, _append(_file(tbl, **{"file-path": path, "file-size-in-bytes": 16})))
    assert "could not be read as Parquet" in refused.message and "hunter2" not in refused.message


@pytest.mark.parametrize(("changes", "expected"), [
    ({"spec-id": 7}, "spec-id"),
    ({"partition": []}, "partition must list 1 values"),
    ({"partition": [5]}, "partition value"),
    ({"content": "position-deletes"}, "must be one of the data files"),
    ({"key-metadata": "00"}, "does not accept"),
    ({"first-row-id": 0}, "does not accept"),
    ({"file-format": "csv"}, "file-format"),
    ({"record-count": -1}, "record-count"),
    ({"lower-bounds": {"keys": [99], "values": ["00"]}}, "bounds"),
    ({"lower-bounds": {"keys": [1], "values": ["zz"]}}, "hex"),
    ({"value-counts": {"keys": [1, 1], "values": [1, 1]}}, "distinct"),
])
def test_malformed_content_files_are_refused(tbl: Tbl, changes: dict[str, Any],
                                             expected: str) -> None:
    assert expected in _refused(tbl, _append(_file(tbl, **changes))).message


def test_file_added_twice_is_refused(tbl: Tbl) -> None:
    file = _file(tbl)
    assert "added twice" in _refused(tbl, _append(file, file)).message


@pytest.mark.parametrize(("update", "expected"), [
    ({"action": "append-files", "data-files": []}, "changes nothing"),
    ({"action": "delete-files"}, "changes nothing"),
    ({"action": "delete-files", "data-files": [{"file-path": "x"}]}, "list of paths"),
    ({"action": "delete-files", "row-filter": {"type": "eq", "term": "nope", "value": 1}},
     "Iceberg expression"),
    ({"action": "delete-files", "row-filter": {"type": "frobnicate"}}, "Iceberg expression"),
    ({"action": "overwrite-files", "deleted-data-files": ["x"], "isolation-level": "loose"},
     "isolation-level"),
    ({"action": "append-files", "data-files": [], "row-filter": True}, "does not accept"),
    ({"action": "delete-files", "data-files": ["file:///nowhere/x.parquet"]},
     "not a live file"),
    ({"action": "delete-files", "data-files": ["x"], "branch": "nope"}, "does not exist"),
])
def test_malformed_operations_are_refused(tbl: Tbl, update: dict[str, Any],
                                          expected: str) -> None:
    assert expected in _refused(tbl, update).message


def test_only_table_uuid_requirements_and_one_update() -> None:
    update = {"action": "delete-files", "data-files": ["x"]}
    for body in ({"updates": [update, update]},
                 {"updates": [update, {"action": "set-properties", "updates": {}}]},
                 {"updates": [update], "requirements": [{"type": "assert-create"}]},
                 {"updates": [update], "other": 1}, [update]):
        with pytest.raises(UnverifiableCommit):
            check_operation_shape(body, CommitLimits())


def test_too_many_files_is_413_and_too_deep_a_filter_400() -> None:
    paths = [f"file:///t/{i}" for i in range(11)]
    with pytest.raises(PayloadTooLarge):
        check_operation_shape({"updates": [{"action": "delete-files", "data-files": paths}]},
                              CommitLimits(max_entries=10))
    deep: Any = {"type": "eq", "term": "id", "value": 1}
    for _ in range(100):
        deep = {"type": "not", "child": deep}
    with pytest.raises(UnverifiableCommit, match="too large"):
        check_operation_shape({"updates": [{"action": "delete-files", "row-filter": deep}]},
                              CommitLimits())


def test_table_uuid_mismatch_is_a_conflict(tbl: Tbl) -> None:
    refused = _refused(tbl, _append(_file(tbl)), 409, requirements=[
        {"type": "assert-table-uuid", "uuid": "00000000-0000-0000-0000-000000000000"}])
    assert isinstance(refused, CommitFailed)


def test_format_3_tables_are_not_supported_yet(tmp_path: Path) -> None:
    t = Tbl(tmp_path)  # pyiceberg creates no format-3 table: its metadata, as format 3
    v3 = TableMetadataV3.model_validate({**json.loads(t.table.metadata.model_dump_json()),
                                         "format-version": 3, "next-row-id": 0})
    body = {"updates": [{"action": "append-files", "data-files": t.wire(t.write([1]))}]}
    with pytest.raises(UnverifiableCommit, match="not supported yet"):
        build_commit(body, v3, t.table.io, start_snapshot_id=None,
                     now_ms=int(time.time() * 1000))


def test_has_data_operation() -> None:
    assert has_data_operation({"updates": [{"action": "row-delta"}]})
    assert not has_data_operation({"updates": [{"action": "add-snapshot"}]})
    assert not has_data_operation({"updates": "append-files"})
    assert not has_data_operation(None)


def test_wire_form_round_trips_dates_bounds_and_metrics(tmp_path: Path) -> None:
    schema = Schema(NestedField(1, "id", LongType()), NestedField(2, "d", DateType()),
                    NestedField(3, "amount", DecimalType(9, 2)))
    spec = PartitionSpec(PartitionField(2, 1000, DayTransform(), "d_day"))
    t = Tbl(tmp_path)
    t.table = t.catalog.create_table("db.dated", schema, partition_spec=spec)
    day = (date(2024, 5, 1) - date(1970, 1, 1)).days
    original = DataFile.from_args(
        content=DataFileContent.DATA, file_path=f"{t.table.location()}/data/f.parquet",
        file_format=FileFormat.PARQUET, partition=Record(day), record_count=3,
        file_size_in_bytes=100, column_sizes={1: 10}, value_counts={1: 3, 2: 3},
        null_value_counts={1: 0}, nan_value_counts={},
        lower_bounds={1: to_bytes(LongType(), 1), 2: to_bytes(DateType(), day)},
        upper_bounds={1: to_bytes(LongType(), 9)}, split_offsets=[4], sort_order_id=0)
    original.spec_id = spec.spec_id
    wire = content_file_to_json(original, t.table.metadata.spec(), t.table.schema())
    assert wire["partition"] == ["2024-05-01"]
    day_hex = to_bytes(DateType(), day).hex().upper()
    assert wire["lower-bounds"] == {"keys": [1, 2], "values": ["0100000000000000", day_hex]}
    parsed = content_file_from_json(wire, t.table.metadata, "file")
    for name in ("content", "file_path", "file_format", "partition", "record_count",
                 "file_size_in_bytes", "column_sizes", "value_counts", "null_value_counts",
                 "lower_bounds", "upper_bounds", "split_offsets", "sort_order_id"):
        assert getattr(parsed, name) == getattr(original, name), name
    assert parsed.spec_id == spec.spec_id


def test_equality_delete_files_need_table_columns(tbl: Tbl) -> None:
    delete = {"content": "equality-deletes", "file-path": "x", "file-format": "parquet",
              "spec-id": 0, "partition": ["a"], "record-count": 1, "file-size-in-bytes": 1}
    for ids in (None, [], [99]):
        with pytest.raises(UnverifiableCommit, match="equality-ids"):
            content_file_from_json({**delete, "equality-ids": ids}, tbl.table.metadata, "d")
    parsed = content_file_from_json({**delete, "equality-ids": [1]}, tbl.table.metadata, "d")
    assert parsed.equality_ids == [1]
    assert parsed.content == DataFileContent.EQUALITY_DELETES
