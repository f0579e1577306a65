"""Plan answers from proxy.planning.wire, parsed back by pyiceberg 0.12's own plan-response
models: the files, partitions, statistics, delete files and residuals a client receives."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pydantic import TypeAdapter
from pyiceberg.catalog.rest.scan_planning import (
    PlanCompleted,
    PlanFailed,
    PlanningResponse,
    PlanSubmitted,
    PlanTableScanRequest,
    RESTPositionDeleteFile,
    ScanTasks,
)
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.conversions import to_bytes
from pyiceberg.expressions import AlwaysTrue, And, EqualTo, GreaterThan, NotNull
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask, Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import DateType, LongType, NestedField, StringType, StructType

from proxy.commits.operations.wire import content_file_from_json, content_file_to_json
from proxy.errors import BadRequest, Forbidden
from proxy.planning.request import ScanRequest, parse_scan_request, parse_task_request
from proxy.planning.wire import (
    cancelled_plan,
    completed_plan,
    failed_plan,
    fetched_tasks,
    file_scan_tasks_json,
    residual_json,
    submitted_plan,
)

PLANNING = TypeAdapter(PlanningResponse)
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "region", StringType(), required=False),
    NestedField(3, "day", DateType(), required=False),
    NestedField(4, "secret", StructType(NestedField(5, "pin", StringType(), required=False)),
                required=False),
)
SPEC = PartitionSpec(
    PartitionField(2, 1000, IdentityTransform(), "region"),
    PartitionField(3, 1001, IdentityTransform(), "day"),
)
STATS_MAPS = ("column-sizes", "value-counts", "null-value-counts", "nan-value-counts",
              "lower-bounds", "upper-bounds")


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Table:
    """A real table with four data files in three partitions, written by pyiceberg."""
    root: Path = tmp_path_factory.mktemp("wire")
    catalog = SqlCatalog("wire", uri=f"sqlite:///{root}/c.db", warehouse=f"file://{root}")
    catalog.create_namespace("ns")
    created = catalog.create_table("ns.t", SCHEMA, partition_spec=SPEC)
    arrow_schema = created.schema().as_arrow()
    for region, day, ids in (("eu", 1, [1, 2]), ("us", 1, [3]), ("eu", 2, [4, 5, 6]),
                             ("eu", 1, [7])):
        rows = {"id": ids, "region": [region] * len(ids),
                "day": [date(2024, 5, day)] * len(ids),
                "secret": [{"pin": f"p{i}"} for i in ids]}
        created.append(pa.Table.from_pydict(rows, schema=arrow_schema))
    return catalog.load_table("ns.t")


def _round_trip(answer: dict[str, Any]) -> Any:
    """What pyiceberg 0.12 makes of an answer (through JSON text, as on the wire)."""
    return PLANNING.validate_json(json.dumps(answer))


def _client_tasks(parsed: ScanTasks) -> list[FileScanTask]:
    return [FileScanTask.from_rest_response(t, parsed.delete_files)
            for t in parsed.file_scan_tasks]


def test_a_planned_table_reaches_pyiceberg_file_for_file(table: Table) -> None:
    local = list(table.scan().plan_files())
    answer = completed_plan("p1", file_scan_tasks_json(local, table.metadata), [])
    parsed = _round_trip(answer)
    assert isinstance(parsed, PlanCompleted) and parsed.plan_id == "p1"
    received = {t.file.file_path: t for t in _client_tasks(parsed)}
    assert len(local) == 4 and set(received) == {t.file.file_path for t in local}
    for task in local:
        got = received[task.file.file_path].file
        assert got.record_count == task.file.record_count
        assert got.file_size_in_bytes == task.file.file_size_in_bytes
        assert got.file_format == FileFormat.PARQUET and got.content == DataFileContent.DATA
        assert got.spec_id == task.file.spec_id == 0
        region, day = task.file.partition[0], task.file.partition[1]
        assert list(got.partition._data) == [region, date.fromordinal(719163 + day).isoformat()]


def test_wire_form_is_what_java_reads(table: Table) -> None:
    task = next(iter(table.scan().plan_files()))
    data_file = file_scan_tasks_json([task], table.metadata)["file-scan-tasks"][0]["data-file"]
    assert data_file["content"] == "data" and data_file["file-format"] == "parquet"
    assert isinstance(data_file["partition"], list) and len(data_file["partition"]) == 2


def test_no_column_statistics_unless_asked(table: Table) -> None:
    tasks = list(table.scan().plan_files())
    body = file_scan_tasks_json(tasks, table.metadata, stats_fields=None)
    for task in body["file-scan-tasks"]:
        assert not set(STATS_MAPS) & set(task["data-file"])
        assert {"record-count", "file-size-in-bytes"} <= set(task["data-file"])


def test_statistics_only_for_asked_fields_as_hex_bounds(table: Table) -> None:
    tasks = list(table.scan().plan_files())
    body = file_scan_tasks_json(tasks, table.metadata, stats_fields=frozenset({1}))
    by_path = {t.file.file_path: t.file for t in tasks}
    for task in body["file-scan-tasks"]:
        data_file = task["data-file"]
        original = by_path[data_file["file-path"]]
        assert data_file["lower-bounds"] == {
            "keys": [1], "values": [original.lower_bounds[1].hex().upper()]}
        assert data_file["value-counts"]["keys"] == [1]
        assert bytes.fromhex(data_file["upper-bounds"]["values"][0]) == original.upper_bounds[1]
    smallest = min(bytes.fromhex(t["data-file"]["lower-bounds"]["values"][0])
                   for t in body["file-scan-tasks"])
    assert smallest == to_bytes(LongType(), 1)


def test_hidden_fields_never_get_statistics_even_when_asked(table: Table) -> None:
    tasks = list(table.scan().plan_files())
    assert all(2 in t.file.lower_bounds and 5 in t.file.value_counts for t in tasks)
    body = file_scan_tasks_json(tasks, table.metadata, stats_fields=frozenset({1, 2, 4, 5}),
                                hidden_field_ids=frozenset({2, 4, 5}))
    parsed = _round_trip(completed_plan("p", body, []))
    for task in _client_tasks(parsed):
        for counts in (task.file.value_counts, task.file.null_value_counts,
                       task.file.column_sizes):
            assert set(counts or {}) <= {1}
    for task in body["file-scan-tasks"]:
        for key in STATS_MAPS:
            assert not {2, 4, 5} & set(task["data-file"].get(key, {}).get("keys", []))
        assert task["data-file"]["lower-bounds"]["keys"] == [1]


def _delete_file(path: str, data_path: str, *, version: int = 2, **extra: Any) -> DataFile:
    bounds = {2147483546: data_path.encode(), 2147483545: to_bytes(LongType(), 0),
              1: to_bytes(LongType(), 1), 5: b"p1"}
    delete = DataFile.from_args(
        _table_format_version=version,  # type: ignore[arg-type]
        content=DataFileContent.POSITION_DELETES, file_path=path,
        file_format=extra.pop("file_format", FileFormat.PARQUET),
        partition=Record("eu", 19844), record_count=1, file_size_in_bytes=100,
        lower_bounds=bounds, upper_bounds=bounds, value_counts={1: 1, 5: 1},
        **extra)
    delete.spec_id = 0
    return delete


def test_shared_delete_files_appear_once_and_references_index_them(table: Table) -> None:
    first, second = list(table.scan().plan_files())[:2]
    shared = _delete_file("file:///d/shared.parquet", first.file.file_path)
    own = _delete_file("file:///d/own.parquet", second.file.file_path)
    tasks = [FileScanTask(first.file, {shared}), FileScanTask(second.file, {shared, own})]
    body = file_scan_tasks_json(tasks, table.metadata, hidden_field_ids=frozenset({5}),
                                stats_fields=frozenset({1}))
    assert [d["file-path"] for d in body["delete-files"]] == [
        "file:///d/shared.parquet", "file:///d/own.parquet"]
    assert body["file-scan-tasks"][0]["delete-file-references"] == [0]
    assert body["file-scan-tasks"][1]["delete-file-references"] == [1, 0]
    delete = body["delete-files"][0]
    assert delete["content"] == "position-deletes"
    assert set(delete["lower-bounds"]["keys"]) == {2147483546, 2147483545, 1}  # never 5
    assert delete["value-counts"] == {"keys": [1], "values": [1]}
    received = _client_tasks(_round_trip(completed_plan("p", body, [])))
    assert {d.file_path for d in received[1].delete_files} == {
        "file:///d/shared.parquet", "file:///d/own.parquet"}
    assert all(d.content == DataFileContent.POSITION_DELETES for d in received[1].delete_files)


def test_deletion_vectors_keep_their_puffin_coordinates(table: Table) -> None:
    task = next(iter(table.scan().plan_files()))
    vector = _delete_file("file:///d/dv.puffin", task.file.file_path, version=3,
                          file_format=FileFormat.PUFFIN,
                          referenced_data_file=task.file.file_path, content_offset=4,
                          content_size_in_bytes=40)
    body = file_scan_tasks_json([FileScanTask(task.file, {vector})], table.metadata)
    wire = body["delete-files"][0]
    assert wire["file-format"] == "puffin"
    assert (wire["referenced-data-file"], wire["content-offset"],
            wire["content-size-in-bytes"]) == (task.file.file_path, 4, 40)
    parsed = _round_trip(completed_plan("p", body, []))
    assert isinstance(parsed, PlanCompleted)
    model = parsed.delete_files[0]
    assert isinstance(model, RESTPositionDeleteFile)
    assert (model.referenced_data_file, model.content_offset, model.content_size_in_bytes,
            model.file_format) == (task.file.file_path, 4, 40, FileFormat.PUFFIN)


def test_equality_deletes_carry_their_ids(table: Table) -> None:
    task = next(iter(table.scan().plan_files()))
    equality = DataFile.from_args(
        content=DataFileContent.EQUALITY_DELETES, file_path="file:///d/eq.parquet",
        file_format=FileFormat.PARQUET, partition=Record("eu", 19844), record_count=2,
        file_size_in_bytes=50, equality_ids=[1])
    equality.spec_id = 0
    body = file_scan_tasks_json([FileScanTask(task.file, {equality})], table.metadata)
    assert body["delete-files"][0]["content"] == "equality-deletes"
    assert body["delete-files"][0]["equality-ids"] == [1]
    parsed = PLANNING.validate_json(json.dumps(completed_plan("p", body, [])))
    assert parsed.delete_files[0].equality_ids == [1]  # type: ignore[union-attr]


def test_residuals_in_the_legacy_form_and_true_when_they_name_a_hidden_column(
        table: Table) -> None:
    scanned = list(table.scan(row_filter=GreaterThan("id", 2)).plan_files())
    body = file_scan_tasks_json(scanned, table.metadata)
    assert {json.dumps(t["residual-filter"]) for t in body["file-scan-tasks"]} == {
        json.dumps({"type": "gt", "term": "id", "value": 2})}
    received = _client_tasks(_round_trip(completed_plan("p", body, [])))
    assert all(t.residual == GreaterThan("id", 2) for t in received)
    hidden = file_scan_tasks_json(scanned, table.metadata, hidden_field_ids=frozenset({1}))
    assert all(t["residual-filter"] is True for t in hidden["file-scan-tasks"])
    omitted = file_scan_tasks_json(scanned, table.metadata, residual=False)
    assert all("residual-filter" not in t for t in omitted["file-scan-tasks"])


def test_residual_of_a_nested_column_is_written_by_its_full_name(table: Table) -> None:
    bound_task = next(iter(table.scan(row_filter=EqualTo("secret.pin", "p1")).plan_files()))
    assert residual_json(bound_task.residual, table.schema(), frozenset()) == {
        "type": "eq", "term": "secret.pin", "value": "p1"}
    assert residual_json(bound_task.residual, table.schema(), frozenset({5})) is True
    assert residual_json(AlwaysTrue(), table.schema(), frozenset()) is True
    assert residual_json(EqualTo("nope", 1), table.schema(), frozenset()) is True


def test_plan_tasks_and_the_other_statuses_parse_as_pyiceberg_expects() -> None:
    with_tasks = _round_trip(completed_plan("p2", None, ["t1", "t2"]))
    assert isinstance(with_tasks, PlanCompleted)
    assert with_tasks.plan_tasks == ["t1", "t2"] and with_tasks.file_scan_tasks == []
    submitted = _round_trip(submitted_plan("p3"))
    assert isinstance(submitted, PlanSubmitted) and submitted.plan_id == "p3"
    assert submitted_plan(None) == {"status": "submitted"}
    failed = _round_trip(failed_plan(Forbidden("no")))
    assert isinstance(failed, PlanFailed)
    assert (failed.error.type, failed.error.code, failed.error.message) == (
        "ForbiddenException", 403, "no")
    assert _round_trip(cancelled_plan()).status == "cancelled"
    credentials = completed_plan("p", None, [], storage_credentials=[
        {"prefix": "s3://b/", "config": {"k": "v"}}])
    parsed = _round_trip(credentials)
    assert parsed.storage_credentials[0].prefix == "s3://b/"


def test_fetched_tasks_parse_as_scan_tasks(table: Table) -> None:
    tasks = list(table.scan().plan_files())
    body = fetched_tasks(file_scan_tasks_json(tasks, table.metadata), ["next"])
    parsed = ScanTasks.model_validate_json(json.dumps(body))
    assert len(parsed.file_scan_tasks) == 4 and parsed.plan_tasks == ["next"]
    assert "delete-files" not in body  # both clients refuse delete files without tasks
    assert fetched_tasks(None, []) == {"file-scan-tasks": []}


def _as_dicts(body: dict[str, Any]) -> dict[str, Any]:
    """A content file with its statistics maps as {id: value} (their order carries nothing)."""
    return {k: dict(zip(v["keys"], v["values"], strict=True)) if k in STATS_MAPS else v
            for k, v in body.items()}


def test_content_files_are_written_as_the_commit_path_reads_and_writes_them(
        table: Table) -> None:
    """The planning writer is the commit path's ``content_file_to_json``, trimmed: with every
    field asked for and none hidden they agree, and the commit path parses it back."""
    tasks = list(table.scan().plan_files())
    every_id = frozenset({1, 2, 3, 4, 5})
    body = file_scan_tasks_json(tasks, table.metadata, stats_fields=every_id, residual=False)
    spec, schema = table.metadata.spec(), table.schema()
    for task, wire in zip(tasks, body["file-scan-tasks"], strict=True):
        expected = content_file_to_json(task.file, spec, schema)
        assert _as_dicts(wire["data-file"]) == _as_dicts(expected)
        parsed = content_file_from_json(wire["data-file"], table.metadata, "file")
        assert parsed.partition == task.file.partition
        assert parsed.lower_bounds == dict(task.file.lower_bounds)


# ---- requests -------------------------------------------------------------------------------


def test_a_full_scan_request_parses_and_writes_back_canonically() -> None:
    body = {"snapshot-id": 7, "select": ["id", "addr.zip"], "case-sensitive": False,
            "filter": {"type": "and", "left": {"type": "eq", "term": "id", "value": 1},
                       "right": {"type": "not-null", "term": "region"}},
            "use-snapshot-schema": True, "stats-fields": ["id"], "min-rows-requested": 10}
    request = parse_scan_request(body)
    assert request.snapshot_id == 7 and request.select == ("id", "addr.zip")
    assert request.filter == And(EqualTo("id", 1), NotNull("region"))
    assert request.filter_columns == {"id", "region"} and request.filter_exact
    assert request.case_sensitive is False and request.use_snapshot_schema is True
    assert request.stats_fields == ("id",) and request.min_rows_requested == 10
    assert not request.incremental
    assert parse_scan_request(request.to_json()) == request
    assert parse_scan_request(PlanTableScanRequest.model_validate(body).model_dump(
        by_alias=True, exclude_none=True, mode="json")) == request


def test_defaults_and_what_pyiceberg_sends() -> None:
    request = parse_scan_request({})
    assert request == ScanRequest() and request.filter == AlwaysTrue()
    assert request.filter_key == "true" and request.to_json() == {}
    sent = PlanTableScanRequest(select=["id"], filter=EqualTo("id", 1), case_sensitive=True)
    parsed = parse_scan_request(json.loads(sent.model_dump_json(by_alias=True,
                                                                exclude_none=True)))
    assert parsed.filter == EqualTo("id", 1) and parsed.select == ("id",)
    incremental = parse_scan_request({"start-snapshot-id": 1, "end-snapshot-id": 2})
    assert incremental.incremental and incremental.to_json() == {"start-snapshot-id": 1,
                                                                 "end-snapshot-id": 2}


def test_equal_filters_written_differently_share_a_key() -> None:
    a = parse_scan_request({"filter": {"type": "and", "left": {"type": "eq", "term": "id",
                                                                "value": 1},
                                       "right": {"type": "is-null", "term": "region"}}})
    b = parse_scan_request({"filter": {"type": "and",
                                       "left": {"type": "is-null",
                                                "child": {"type": "reference",
                                                          "name": "region"}},
                                       "right": {"type": "eq", "term": "id", "value": 1}}})
    assert a.filter_key == b.filter_key


def test_a_weakened_filter_still_names_its_columns() -> None:
    request = parse_scan_request({"filter": {
        "type": "eq", "term": {"type": "transform", "transform": "day", "term": "ssn"},
        "value": "2024-01-01"}})
    assert request.filter == AlwaysTrue() and request.filter_columns == {"ssn"}
    assert not request.filter_exact


@pytest.mark.parametrize(("body", "names"), [
    ([], "JSON object"),
    ({"snapshot-id": 1, "start-snapshot-id": 0, "end-snapshot-id": 1}, "snapshot-id"),
    ({"snapshot-id": 1, "end-snapshot-id": 1}, "snapshot-id"),
    ({"start-snapshot-id": 1}, "end-snapshot-id"),
    ({"end-snapshot-id": 1}, "start-snapshot-id"),
    ({"min-rows-requested": -1}, "min-rows-requested"),
    ({"snapshot-id": True}, "snapshot-id"),
    ({"snapshot-id": "1"}, "snapshot-id"),
    ({"snapshot-id": 2**63}, "snapshot-id"),
    ({"snapshot-id": 1.0}, "snapshot-id"),
    ({"select": "id"}, "select"),
    ({"select": ["id", 3]}, "select"),
    ({"select": [""]}, "select"),
    ({"stats-fields": [None]}, "stats-fields"),
    ({"case-sensitive": "false"}, "case-sensitive"),
    ({"use-snapshot-schema": 1}, "use-snapshot-schema"),
    ({"filter": {"type": "eq"}}, "invalid filter"),
    ({"snapshot_id": 1}, "snapshot_id"),
    ({"select": ["x" * 2000]}, "select"),
])
def test_invalid_requests_are_400_naming_the_field(body: Any, names: str) -> None:
    with pytest.raises(BadRequest) as refused:
        parse_scan_request(body)
    assert names in refused.value.message and refused.value.status == 400


def test_task_requests() -> None:
    assert parse_task_request({"plan-task": "abc"}) == "abc"
    for bad in ({}, {"plan-task": ""}, {"plan-task": 1}, {"plan-task": "a", "x": 1}, ["a"]):
        with pytest.raises(BadRequest):
            parse_task_request(bad)
