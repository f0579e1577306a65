"""Small tables for the server-side planning tests, written through icegov (test-only).

Every builder writes through a pyiceberg ``RestCatalog`` pointed at icegov (so the tables live in
whichever backing catalog the proxy fronts) and returns a ``BuiltTable``: its identifier and, per
snapshot in commit order, the data files that snapshot added. Delete files pyiceberg 0.12 cannot
write (it has no merge-on-read) are written here as real Parquet files under the table's location
and committed with icegov's ``row-delta`` data operation.

``RawPlanner`` sends planning requests by hand (what pyiceberg 0.12 cannot send) and follows
their plan tasks; ``RawPlan.rows`` / ``plan_rows`` read a raw plan the way an engine would: each
data file minus the rows its attached position and equality deletes remove.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog.rest import _PLANNING_RESPONSE_ADAPTER, RestCatalog
from pyiceberg.catalog.rest.scan_planning import PlanCompleted, ScanTasks
from pyiceberg.io.pyarrow import schema_to_pyarrow, write_file
from pyiceberg.manifest import DataFileContent, ManifestEntryStatus
from pyiceberg.partitioning import PartitionField, PartitionFieldValue, PartitionKey, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table, WriteTask
from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType, TimestampType

Row = tuple[Any, ...]


def ordered(rows: Iterable[Row]) -> list[Row]:
    """Rows in one canonical order (values may be None, so ordered by their repr)."""
    return sorted(rows, key=repr)

POSITION_PATH_FIELD, POSITION_POS_FIELD = 2147483546, 2147483545


@dataclass
class BuiltTable:
    """A table written through icegov: its name and what each of its snapshots added."""

    identifier: str
    snapshots: list[int] = field(default_factory=list)
    added: dict[int, frozenset[str]] = field(default_factory=dict)
    """Data files added by each snapshot (empty for a snapshot adding only deletes)."""
    deletes: dict[int, frozenset[str]] = field(default_factory=dict)
    """Delete files added by each snapshot."""

    def record(self, table: Table) -> int:
        """Note the table's current snapshot and the files it added; return its id."""
        snapshot = table.current_snapshot()
        assert snapshot is not None
        data: set[str] = set()
        deletes: set[str] = set()
        for manifest in snapshot.manifests(table.io):
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                if (entry.status == ManifestEntryStatus.ADDED
                        and entry.snapshot_id == snapshot.snapshot_id):
                    is_data = entry.data_file.content == DataFileContent.DATA
                    (data if is_data else deletes).add(entry.data_file.file_path)
        self.snapshots.append(snapshot.snapshot_id)
        self.added[snapshot.snapshot_id] = frozenset(data)
        self.deletes[snapshot.snapshot_id] = frozenset(deletes)
        return snapshot.snapshot_id


# -- the partitioned table: identity(region), bucket(4, id), day(ts) --------------------------

EVENTS_SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "region", StringType(), required=False),
    NestedField(3, "ts", TimestampType(), required=False),
    NestedField(4, "amount", LongType(), required=False),
)
EVENTS_SPEC = PartitionSpec(
    PartitionField(2, 1000, IdentityTransform(), "region"),
    PartitionField(1, 1001, BucketTransform(4), "id_bucket"),
    PartitionField(3, 1002, DayTransform(), "ts_day"),
)
REGIONS = ("eu", "us", "ap")


def events_rows(ids: Iterable[int]) -> pa.Table:
    """Rows of the events table: region, day and amount all follow from the id."""
    ids = list(ids)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "region": [REGIONS[i % 3] for i in ids],
        "ts": pa.array([dt.datetime(2024, 5, 1 + i % 3, i % 24, 30) for i in ids],
                       pa.timestamp("us")),
        "amount": pa.array([i * 10 for i in ids], pa.int64()),
    })


EVENTS_APPENDS = (range(1, 9), range(9, 17), range(17, 25))


def build_events(catalog: RestCatalog, namespace: str) -> BuiltTable:
    """``events``: three appends of 8 rows each, partitioned three ways (many small files)."""
    built = BuiltTable(f"{namespace}.events")
    table = catalog.create_table(built.identifier, EVENTS_SCHEMA, partition_spec=EVENTS_SPEC)
    for ids in EVENTS_APPENDS:
        append_partitioned(table, events_rows(ids))
        built.record(table)
    return built


def append_partitioned(table: Table, rows: pa.Table) -> None:
    """Append ``rows`` to a table of the events spec, one data file per partition.

    pyiceberg 0.12 partitions bucket and day columns only with ``pyiceberg-core`` (not
    installed), so the partition values are computed here with the transforms' Python form and
    the files written and committed with pyiceberg's own writer and fast append."""
    bucket = BucketTransform(4).transform(LongType())
    day = DayTransform().transform(TimestampType())
    groups: dict[tuple[Any, ...], list[int]] = {}
    for index, (key, region, ts) in enumerate(zip(
            rows.column("id").to_pylist(), rows.column("region").to_pylist(),
            rows.column("ts").to_pylist(), strict=True)):
        micros = (ts - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)
        groups.setdefault((region, bucket(key), day(micros)), []).append(index)
    write_uuid = uuid.uuid4()
    files = []
    for task_id, (partition, indices) in enumerate(sorted(groups.items())):
        key = PartitionKey([PartitionFieldValue(f, v) for f, v in zip(
            EVENTS_SPEC.fields, partition, strict=True)], EVENTS_SPEC, EVENTS_SCHEMA)
        task = WriteTask(write_uuid=write_uuid, task_id=task_id, schema=table.schema(),
                         record_batches=rows.take(indices).to_batches(), partition_key=key)
        files.extend(write_file(table.io, table.metadata, iter([task])))
    with table.transaction() as transaction, \
            transaction.update_snapshot().fast_append() as append:
        for data_file in files:
            append.append_data_file(data_file)


# -- schema evolution: add a column, then rename one ------------------------------------------

def build_evolving(catalog: RestCatalog, namespace: str) -> BuiltTable:
    """``evolving``: append (id, name); add ``score``; append; rename ``name`` to ``label``;
    append. Snapshots: [before score, after score, after rename]."""
    built = BuiltTable(f"{namespace}.evolving")
    schema = Schema(NestedField(1, "id", LongType(), required=False),
                    NestedField(2, "name", StringType(), required=False))
    table = catalog.create_table(built.identifier, schema)
    table.append(pa.table({"id": pa.array([1, 2], pa.int64()), "name": ["a", "b"]}))
    built.record(table)
    with table.update_schema() as update:
        update.add_column("score", LongType())
    table.append(pa.table({"id": pa.array([3, 4], pa.int64()), "name": ["c", "d"],
                           "score": pa.array([5, 9], pa.int64())}))
    built.record(table)
    with table.update_schema() as update:
        update.rename_column("name", "label")
    table.append(pa.table({"id": pa.array([5], pa.int64()), "label": ["e"],
                           "score": pa.array([1], pa.int64())}))
    built.record(table)
    return built


# -- delete files, committed with icegov's row-delta ------------------------------------------

KEYED_SCHEMA = Schema(NestedField(1, "id", LongType(), required=False),
                      NestedField(2, "name", StringType(), required=False))


def keyed_rows(rows: list[tuple[int, str]]) -> pa.Table:
    return pa.table({"id": pa.array([r[0] for r in rows], pa.int64()),
                     "name": [r[1] for r in rows]})


def build_position_deletes(catalog: RestCatalog, namespace: str) -> BuiltTable:
    """``pos_deletes``: A = ids 1..5, B = ids 6..10, then position deletes of A's rows 0 and 2
    (ids 1, 3), then of B's row 4 (id 10). Live rows: 2, 4, 5, 6, 7, 8, 9."""
    built = BuiltTable(f"{namespace}.pos_deletes")
    table = catalog.create_table(built.identifier, KEYED_SCHEMA)
    for ids in (range(1, 6), range(6, 11)):
        table.append(keyed_rows([(i, f"n{i}") for i in ids]))
        built.record(table)
    file_a, file_b = (only(built.added[s]) for s in built.snapshots)
    for target, positions in ((file_a, [0, 2]), (file_b, [4])):
        table = row_delta(catalog, table, [position_delete(table, target, positions)])
        built.record(table)
    return built


POSITION_LIVE = [(i, f"n{i}") for i in (2, 4, 5, 6, 7, 8, 9)]


def build_equality_deletes(catalog: RestCatalog, namespace: str) -> BuiltTable:
    """``eq_deletes`` (snapshots s1..s6):

    s1 A = (1,a) (2,b) (3,c); s2 B = (3,c2) (4,f); s3 equality delete on id {2, 3};
    s4 C = (2,b2) (5,e); s5 equality delete on name {a, e}; s6 D = (6,a).
    A delete applies to data of a lower sequence number only, so the live rows are
    (2,b2) (4,f) (6,a): s3's delete applies to A and B, s5's to A, B and C (B's name bounds
    [c2, f] contain e), neither to D.
    """
    built = BuiltTable(f"{namespace}.eq_deletes")
    table = catalog.create_table(built.identifier, KEYED_SCHEMA)
    steps: list[Callable[[Table], Table]] = [
        lambda t: appended(t, [(1, "a"), (2, "b"), (3, "c")]),
        lambda t: appended(t, [(3, "c2"), (4, "f")]),
        lambda t: row_delta(catalog, t, [equality_delete(t, "id", [2, 3])]),
        lambda t: appended(t, [(2, "b2"), (5, "e")]),
        lambda t: row_delta(catalog, t, [equality_delete(t, "name", ["a", "e"])]),
        lambda t: appended(t, [(6, "a")]),
    ]
    for step in steps:
        table = step(table)
        built.record(table)
    return built


EQUALITY_LIVE = [(2, "b2"), (4, "f"), (6, "a")]
EQUALITY_LIVE_AT_S4 = [(1, "a"), (2, "b2"), (4, "f"), (5, "e")]


def appended(table: Table, rows: list[tuple[int, str]]) -> Table:
    table.append(keyed_rows(rows))
    return table


def many_files(catalog: RestCatalog, identifier: str, files: int) -> BuiltTable:
    """A table of ``files`` appends of two rows each (one data file per append)."""
    built = BuiltTable(identifier)
    table = catalog.create_table(identifier, KEYED_SCHEMA)
    for n in range(files):
        table.append(keyed_rows([(2 * n, f"r{2 * n}"), (2 * n + 1, f"r{2 * n + 1}")]))
        built.record(table)
    return built


def only(paths: frozenset[str]) -> str:
    [path] = paths
    return path


def _delete_path(table: Table) -> str:
    return f"{table.location()}/data/deletes-{uuid.uuid4().hex}.parquet"


def _written(table: Table, path: str, rows: pa.Table) -> int:
    with table.io.new_output(path).create() as out:
        pq.write_table(rows, out)
    return len(table.io.new_input(path))


def position_delete(table: Table, target: str, positions: list[int]) -> dict[str, Any]:
    """A Parquet position delete file of ``target``'s rows, as row-delta wire JSON."""
    schema = pa.schema([
        pa.field("file_path", pa.string(), False,
                 {b"PARQUET:field_id": str(POSITION_PATH_FIELD).encode()}),
        pa.field("pos", pa.int64(), False,
                 {b"PARQUET:field_id": str(POSITION_POS_FIELD).encode()}),
    ])
    rows = pa.table({"file_path": [target] * len(positions), "pos": positions}, schema=schema)
    path = _delete_path(table)
    return {"content": "position-deletes", "file-path": path, "file-format": "parquet",
            "spec-id": 0, "partition": [], "record-count": len(positions),
            "file-size-in-bytes": _written(table, path, rows), "referenced-data-file": target}


def equality_delete(table: Table, column: str, values: list[Any]) -> dict[str, Any]:
    """A Parquet equality delete file on one ``column``, as row-delta wire JSON."""
    schema = table.schema()
    arrow_schema = schema_to_pyarrow(schema.select(column))
    rows = pa.table({column: values}).cast(arrow_schema)
    path = _delete_path(table)
    return {"content": "equality-deletes", "file-path": path, "file-format": "parquet",
            "spec-id": 0, "partition": [], "record-count": len(values),
            "file-size-in-bytes": _written(table, path, rows),
            "equality-ids": [schema.find_field(column).field_id]}


def row_delta(catalog: RestCatalog, table: Table, deletes: list[dict[str, Any]]) -> Table:
    """Commit ``deletes`` with icegov's ``row-delta`` data operation; the table after it."""
    path = catalog._split_identifier_for_path(table.name())
    url = catalog.url("namespaces/{namespace}/tables/{table}", **path)
    body = {"requirements": [], "updates": [{
        "action": "row-delta", "added-delete-files": deletes,
        "base-snapshot-id": table.metadata.current_snapshot_id}]}
    response = catalog._session.post(url, data=json.dumps(body),
                                     headers={"Content-Type": "application/json"})
    assert response.status_code == 200, (response.status_code, response.text)
    return catalog.load_table(table.name())


# -- reading a raw plan -----------------------------------------------------------------------

def plan_rows(table: Table, tasks: list[Mapping[str, Any]],
              delete_files: list[Mapping[str, Any]], columns: list[str]) -> list[Row]:
    """The rows (``columns``, sorted) an engine reads from ``tasks``: each data file minus the
    rows removed by the delete files its ``delete-file-references`` name."""
    rows: list[Row] = []
    for task in tasks:
        data_path = task["data-file"]["file-path"]
        data = _read(table, data_path)
        keep = [True] * data.num_rows
        for index in task.get("delete-file-references") or []:
            _apply_delete(table, delete_files[index], data_path, data, keep)
        kept = data.filter(pa.array(keep, pa.bool_()))
        rows.extend(zip(*(kept.column(c).to_pylist() for c in columns), strict=True))
    return ordered(rows)


def _read(table: Table, path: str) -> pa.Table:
    with table.io.new_input(path).open() as stream:
        return pq.read_table(stream)


def _apply_delete(table: Table, delete: Mapping[str, Any], data_path: str, data: pa.Table,
                  keep: list[bool]) -> None:
    deleted = _read(table, delete["file-path"])
    if delete["content"] == "position-deletes":
        for path, position in zip(deleted.column("file_path").to_pylist(),
                                  deleted.column("pos").to_pylist(), strict=True):
            if path == data_path:
                keep[position] = False
        return
    assert delete["content"] == "equality-deletes", delete
    names = [table.schema().find_column_name(i) for i in delete["equality-ids"]]
    keys = set(zip(*(deleted.column(n).to_pylist() for n in names), strict=True))
    for row, key in enumerate(zip(*(data.column(n).to_pylist() for n in names), strict=True)):
        if key in keys:
            keep[row] = False


# -- raw planning requests --------------------------------------------------------------------

@dataclass
class RawPlan:
    """Every answer of one plan (the plan's own, then each fetched plan task's)."""

    answers: list[dict[str, Any]]

    @property
    def plan_id(self) -> str | None:
        return self.answers[0].get("plan-id")

    def tasks(self) -> Iterable[tuple[dict[str, Any], list[dict[str, Any]]]]:
        """Each file scan task with the delete files of the answer it came in."""
        for answer in self.answers:
            for task in answer.get("file-scan-tasks", []):
                yield task, answer.get("delete-files", [])

    def data_files(self) -> list[str]:
        """Data file paths, one per task (a path listed twice appears twice)."""
        return [task["data-file"]["file-path"] for task, _ in self.tasks()]

    def attached(self) -> dict[str, frozenset[str]]:
        """Each data file path with the paths of the delete files attached to it."""
        return {task["data-file"]["file-path"]: frozenset(
            deletes[i]["file-path"] for i in task.get("delete-file-references") or [])
            for task, deletes in self.tasks()}

    def rows(self, table: Table, columns: list[str]) -> list[Row]:
        rows: list[Row] = []
        for task, deletes in self.tasks():
            rows.extend(plan_rows(table, [task], deletes, columns))
        return ordered(rows)


class RawPlanner:
    """Planning requests sent by hand (httpx) to icegov as one principal."""

    def __init__(self, catalog: RestCatalog, http: httpx.Client) -> None:
        self.catalog = catalog
        self.http = http

    def url(self, identifier: str, suffix: str = "") -> str:
        path = self.catalog._split_identifier_for_path(identifier)
        return self.catalog.url("namespaces/{namespace}/tables/{table}" + suffix, **path)

    def plan(self, identifier: str, body: Any) -> httpx.Response:
        return self.http.post(self.url(identifier, "/plan"), json=body)

    def fetch_tasks(self, identifier: str, plan_task: Any) -> httpx.Response:
        return self.http.post(self.url(identifier, "/tasks"), json={"plan-task": plan_task})

    def completed(self, identifier: str, body: dict[str, Any]) -> RawPlan:
        """Plan, check the answer is a completed plan pyiceberg can parse, and fetch every
        plan task it hands out (and theirs)."""
        response = self.plan(identifier, body)
        assert response.status_code == 200, (response.status_code, response.text)
        first = response.json()
        assert first.get("status") == "completed", first
        assert isinstance(first.get("plan-id"), str) and first["plan-id"], first
        assert isinstance(_PLANNING_RESPONSE_ADAPTER.validate_json(response.text), PlanCompleted)
        check_references(first)
        answers, pending = [first], list(first.get("plan-tasks", []))
        while pending:
            fetched = self.fetch_tasks(identifier, pending.pop(0))
            assert fetched.status_code == 200, (fetched.status_code, fetched.text)
            ScanTasks.model_validate_json(fetched.text)
            answers.append(check_references(fetched.json()))
            pending.extend(answers[-1].get("plan-tasks", []))
        return RawPlan(answers)


def check_references(answer: dict[str, Any]) -> dict[str, Any]:
    """Delete files come only with tasks, and each is referenced by index from one of them."""
    deletes = answer.get("delete-files", [])
    referenced = {i for task in answer.get("file-scan-tasks", [])
                  for i in task.get("delete-file-references") or []}
    assert referenced <= set(range(len(deletes))), answer
    assert referenced == set(range(len(deletes))), f"unreferenced delete files: {answer}"
    return answer
