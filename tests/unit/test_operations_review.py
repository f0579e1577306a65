"""Data operations after review: added files must be the table's data (their Parquet columns),
must not already be in the table, filters never crash, old specs keep working, "replace" labels
do not hide new data, and the files' footers are read once per check."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import requests
from pyiceberg.exceptions import BadRequestError, CommitStateUnknownException
from pyiceberg.manifest import ManifestFile

from proxy.client import IcegovClient, _Change
from proxy.commits.lru import SizedLru
from proxy.commits.operations import build_commit, head
from proxy.errors import IcebergError
from tests.unit.test_operations import Tbl, position_deletes


@pytest.fixture()
def tbl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Tbl:
    t = Tbl(tmp_path)
    t.append([1, 2])
    return t


def _ids(field_id: int) -> dict[bytes, bytes]:
    return {b"PARQUET:field_id": str(field_id).encode()}


def _parquet(tbl: Tbl, rows: pa.Table, name: str = "crafted") -> str:
    path = f"{tbl.table.location()}/data/p=a/{name}-{time.time_ns()}.parquet"
    with tbl.table.io.new_output(path).create() as out:
        pq.write_table(rows, out)
    return path


def _as(tbl: Tbl, path: str, rows: int, content: str = "data", **extra: Any) -> dict[str, Any]:
    return {"content": content, "file-path": path, "file-format": "parquet",
            "spec-id": tbl.table.metadata.default_spec_id, "partition": ["a"], "record-count": rows,
            "file-size-in-bytes": len(tbl.table.io.new_input(path)), **extra}


def _status(tbl: Tbl, update: dict[str, Any]) -> tuple[int, str]:
    try:
        tbl.build(update)
    except IcebergError as exc:
        return exc.status, exc.message
    return 200, ""


def _data(columns: list[tuple[str, pa.DataType, int | None]], values: list[Any]) -> pa.Table:
    fields = [pa.field(name, kind, True, _ids(i) if i is not None else None)
              for name, kind, i in columns]
    return pa.table([pa.array([v], kind) for v, (_, kind, _) in zip(values, columns,
                                                                     strict=True)],
                    schema=pa.schema(fields))


# 1. added files must be the table's data --------------------------------------------------

@pytest.mark.parametrize(("columns", "values", "expected"), [
    ([("id", pa.int64(), None), ("p", pa.string(), None)], [5, "a"], "no Iceberg field ids"),
    ([("id", pa.int64(), 1), ("x", pa.int64(), 99)], [5, 6], "not a column of the table"),
    ([("id", pa.string(), 1)], ["5"], "does not read as the table's long"),
    ([("file_path", pa.string(), 2147483546), ("pos", pa.int64(), 2147483545)], ["f", 0],
     "not a column of the table"),
])
def test_added_data_files_must_hold_table_columns(tbl: Tbl, columns: Any, values: list[Any],
                                                  expected: str) -> None:
    path = _parquet(tbl, _data(columns, values))
    status, message = _status(tbl, {"action": "append-files",
                                    "data-files": [_as(tbl, path, 1)]})
    assert status == 400 and expected in message


def test_promotable_and_partial_columns_are_the_tables_data(tbl: Tbl) -> None:
    path = _parquet(tbl, _data([("id", pa.int32(), 1)], [5]))  # int reads as long; p missing
    tbl.land(tbl.build({"action": "append-files", "data-files": [_as(tbl, path, 1)]}))
    assert (5, "a") in tbl.rows()  # the identity partition supplies p


def test_files_without_ids_are_read_through_the_name_mapping(tbl: Tbl) -> None:
    with tbl.table.transaction() as tx:
        tx.set_properties({"schema.name-mapping.default":
                           '[{"field-id": 1, "names": ["id"]}, {"field-id": 2, "names": ["p"]}]'})
    tbl.refresh()
    path = _parquet(tbl, _data([("id", pa.int64(), None), ("p", pa.string(), None)], [5, "a"]))
    tbl.land(tbl.build({"action": "append-files", "data-files": [_as(tbl, path, 1)]}))
    assert (5, "a") in tbl.rows()


def test_a_data_file_posing_as_position_deletes_is_refused(tbl: Tbl) -> None:
    [data] = tbl.append([3])
    path = _parquet(tbl, _data([("id", pa.int64(), 1)], [3]))
    status, message = _status(tbl, {"action": "row-delta", "added-delete-files": [
        _as(tbl, path, 1, "position-deletes", **{"referenced-data-file": data.file_path})]})
    assert status == 400 and "needs the columns file_path" in message
    good = position_deletes(tbl, data, [0])
    assert _status(tbl, {"action": "row-delta", "added-delete-files": [good]}) == (200, "")


def test_equality_delete_files_must_hold_their_equality_columns(tbl: Tbl) -> None:
    path = _parquet(tbl, _data([("p", pa.string(), 2)], ["a"]))
    delete = _as(tbl, path, 1, "equality-deletes", **{"equality-ids": [1]})
    status, message = _status(tbl, {"action": "row-delta", "added-delete-files": [delete]})
    assert status == 400 and "lacks its equality-ids" in message
    delete["equality-ids"] = [2]
    # accepted (pyiceberg cannot read equality deletes back, so nothing is landed here)
    assert _status(tbl, {"action": "row-delta", "added-delete-files": [delete]}) == (200, "")


# 7. footers are read once per file and check, never taken from an earlier request ---------------

def test_each_check_reads_each_footer_once_and_never_from_an_earlier_request(
        tbl: Tbl, monkeypatch: pytest.MonkeyPatch) -> None:
    """An added file is the writer's until its commit lands: one swapped for another of the
    same size between two requests must be read again, so no footer outlives its check."""
    opened: list[object] = []
    original = pq.ParquetFile

    def counting(source: Any, *args: Any, **kwargs: Any) -> pq.ParquetFile:
        if "read_dictionary" not in kwargs:  # a footer read (the partition proof reads on)
            opened.append(source)
        return original(source, *args, **kwargs)

    monkeypatch.setattr("proxy.commits.footers.pq.ParquetFile", counting)
    files = tbl.wire(tbl.write([3]) + tbl.write([4]))
    update = {"action": "append-files", "data-files": files}
    start = tbl.table.metadata.current_snapshot_id
    tbl.build(update)
    assert len(opened) == 2
    tbl.append([5])  # the head moves: the operation is built again on it
    opened.clear()
    tbl.build(update, start=start)
    assert len(opened) == 2  # read again: the files may have changed since
    opened.clear()
    lying = {**files[0], "record-count": 7}
    refused = _status(tbl, {"action": "append-files", "data-files": [lying]})
    assert refused[0] == 400 and "not the declared 7" in refused[1]
    assert len(opened) == 1


# 3. filters never crash -------------------------------------------------------------------

@pytest.mark.parametrize("row_filter", [
    {"type": "starts-with", "term": "id", "value": 1},
    {"type": "not-starts-with", "term": "id", "value": "1"},
    {"type": "and", "left": True, "right": {"type": "starts-with", "term": "id", "value": -1}},
    {"type": "not", "child": {"type": "starts-with", "term": "id", "value": 1}},
])
@pytest.mark.parametrize("action", ["delete-files", "overwrite-files", "row-delta"])
def test_ill_typed_filters_are_refused_at_parse(tbl: Tbl, row_filter: dict[str, Any],
                                                action: str) -> None:
    key = "conflict-filter" if action == "row-delta" else "row-filter"
    update: dict[str, Any] = {"action": action, key: row_filter}
    if action == "row-delta":
        update["added-data-files"] = tbl.wire(tbl.write([9]))
    status, message = _status(tbl, update)
    assert status == 400 and "string columns only" in message


def test_starts_with_on_strings_still_works(tbl: Tbl) -> None:
    tbl.land(tbl.build({"action": "delete-files",
                        "row-filter": {"type": "starts-with", "term": "p", "value": "a"}}))
    assert tbl.rows() == []


def test_an_evaluator_failure_is_a_400(tbl: Tbl, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: Any) -> bool:
        raise TypeError("object of type 'int' has no len()")

    monkeypatch.setattr("proxy.commits.operations.filters.FileFilter._partition", broken)
    monkeypatch.setattr("proxy.commits.operations.filters.manifest_evaluator",
                        lambda *_: broken)
    status, message = _status(tbl, {"action": "delete-files", "row-filter": {
        "type": "eq", "term": "p", "value": "a"}})
    assert status == 400 and "could not be evaluated" in message and "len()" not in message


# 4. manifests of an old spec whose source column was dropped ---------------------------------

def _drop_partition_column(tbl: Tbl) -> None:
    with tbl.table.update_spec() as spec:
        spec.remove_field("p")
    tbl.refresh()
    with tbl.table.update_schema(allow_incompatible_changes=True) as schema:
        schema.delete_column("p")
    tbl.refresh()


def test_old_spec_files_are_rewritten_with_a_schema_that_binds_the_spec(tbl: Tbl) -> None:
    [kept] = tbl.append([3])
    _drop_partition_column(tbl)
    gone = tbl.live_paths() - {kept.file_path}
    tbl.land(tbl.build({"action": "delete-files", "data-files": sorted(gone)}))
    assert tbl.live_paths() == {kept.file_path}
    tbl.land(tbl.build({"action": "delete-files",  # by filter: spec 0's partitions are read
                        "row-filter": {"type": "eq", "term": "id", "value": 3}}))
    assert tbl.live_paths() == set()
    tbl.land(tbl.build({"action": "append-files", "data-files": [_as(
        tbl, _parquet(tbl, _data([("id", pa.int64(), 1)], [4])), 1, partition=[])]}))
    assert tbl.table.scan().to_arrow()["id"].to_pylist() == [4]


def test_a_spec_no_schema_binds_is_refused(tbl: Tbl) -> None:
    [target] = tbl.append([3])
    metadata = tbl.table.metadata
    current = metadata.schema()
    spec = metadata.spec()
    pruned = metadata.model_copy(update={"schemas": [current.model_copy(update={
        "fields": tuple(f for f in current.fields if f.name != "p")})]})
    assert spec.spec_id == 0 and pruned.schema().find_field("id")
    body = {"requirements": [], "updates": [{"action": "delete-files",
                                             "data-files": [target.file_path]}]}
    with pytest.raises(IcebergError) as refused:
        build_commit(body, pruned, tbl.table.io, start_snapshot_id=metadata.current_snapshot_id,
                     now_ms=int(time.time() * 1000))
    assert refused.value.status == 400 and "no schema of the table has" in refused.value.message


# 2. an added file must be new to the table ------------------------------------------------

def test_a_live_file_cannot_be_added_again(tbl: Tbl) -> None:
    [live] = tbl.append([3])
    status, message = _status(tbl, {"action": "append-files", "data-files": tbl.wire([live])})
    assert status == 400 and "already a live file" in message
    status, message = _status(tbl, {"action": "rewrite-files", "added-data-files":
                                    tbl.wire([live]), "deleted-data-files": [live.file_path]})
    assert status == 400 and "already a live file" in message


def test_a_removed_file_cannot_bring_its_rows_back(tbl: Tbl) -> None:
    [gone] = tbl.append([3])
    tbl.land(tbl.build({"action": "delete-files", "data-files": [gone.file_path]}))
    status, message = _status(tbl, {"action": "append-files", "data-files": tbl.wire([gone])})
    assert status == 400 and "would bring back its rows" in message
    assert sorted(r[0] for r in tbl.rows()) == [1, 2]


def test_a_file_removed_in_the_window_is_refused_after_manifests_merged(tbl: Tbl) -> None:
    with tbl.table.transaction() as tx:
        tx.set_properties({"commit.manifest.min-count-to-merge": "2"})
    tbl.refresh()
    [gone] = tbl.append([3])
    start = tbl.table.metadata.current_snapshot_id
    tbl.land(tbl.build({"action": "delete-files", "data-files": [gone.file_path]}))
    tbl.append([4])  # merges the manifest that recorded the removal: the head forgets it
    head = tbl.table.current_snapshot()
    assert head is not None
    assert all(e.data_file.file_path != gone.file_path for m in head.manifests(tbl.table.io)
               for e in m.fetch_manifest_entry(tbl.table.io, discard_deleted=False))
    update = {"action": "append-files", "data-files": tbl.wire([gone])}
    with pytest.raises(IcebergError) as refused:
        tbl.build(update, start=start)
    assert refused.value.status == 400 and "since base-snapshot-id" in refused.value.message


def test_repeated_builds_read_the_heads_manifests_once(tbl: Tbl,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(3):
        tbl.append([10 + i])
    opened: list[str] = []
    original = ManifestFile.fetch_manifest_entry

    def counting(self: ManifestFile, *args: Any, **kwargs: Any) -> Any:
        opened.append(self.manifest_path)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ManifestFile, "fetch_manifest_entry", counting)
    update = {"action": "append-files", "data-files": tbl.wire(tbl.write([20]))}
    tbl.build(update)
    assert len(opened) == 1  # the earlier appends' builds read the others already
    monkeypatch.setattr(head, "MANIFEST_PATHS", SizedLru(head.PATH_CACHE_FILES))
    opened.clear()
    tbl.build(update)
    assert len(opened) == 4  # every manifest of the head, once
    opened.clear()
    tbl.build(update)
    assert opened == []


# 5. a "replace" label does not hide new data ---------------------------------------------

def _land_labelled(tbl: Tbl, update: dict[str, Any], label: str) -> None:
    """Commit ``update`` with its snapshot's operation label changed to ``label``."""
    built = tbl.build(update)
    snapshot = built.body["updates"][0]["snapshot"]
    snapshot["summary"]["operation"] = label
    tbl.land(built)


def _overwrite_a(tbl: Tbl, old: str) -> dict[str, Any]:
    return {"action": "overwrite-files", "deleted-data-files": [old],
            "added-data-files": tbl.wire(tbl.write([100])),
            "conflict-filter": {"type": "eq", "term": "p", "value": "a"}}


@pytest.mark.parametrize("label", ["replace", "delete"])
def test_data_added_under_another_label_is_new_data(tbl: Tbl, label: str) -> None:
    [old] = tbl.append([3])
    start = tbl.table.metadata.current_snapshot_id
    update = _overwrite_a(tbl, old.file_path)
    _land_labelled(tbl, {"action": "append-files", "data-files": tbl.wire(tbl.write([4]))},
                   label)
    with pytest.raises(IcebergError) as refused:
        tbl.build(update, start=start)
    assert refused.value.status == 409 and "data added since" in refused.value.message


def test_a_replace_adding_more_records_than_it_removes_is_new_data(tbl: Tbl) -> None:
    [old] = tbl.append([3])
    [other] = tbl.append([4])
    start = tbl.table.metadata.current_snapshot_id
    update = _overwrite_a(tbl, old.file_path)
    _land_labelled(tbl, {"action": "overwrite-files", "deleted-data-files": [other.file_path],
                         "added-data-files": tbl.wire(tbl.write([4, 5]))}, "replace")
    with pytest.raises(IcebergError) as refused:
        tbl.build(update, start=start)
    assert refused.value.status == 409 and "data added since" in refused.value.message


def test_a_data_equivalent_rewrite_is_not_new_data(tbl: Tbl) -> None:
    [old] = tbl.append([3])
    [other] = tbl.append([4])
    start = tbl.table.metadata.current_snapshot_id
    update = _overwrite_a(tbl, old.file_path)
    tbl.land(tbl.build({"action": "rewrite-files", "deleted-data-files": [other.file_path],
                        "added-data-files": tbl.wire(tbl.write([4]))}))
    tbl.land(tbl.build(update, start=start))
    assert sorted(r[0] for r in tbl.rows()) == [1, 2, 4, 100]


# 6. the operation names its snapshot id, so a client can retry safely ----------------------

def test_the_operations_snapshot_id_is_the_built_snapshots(tbl: Tbl) -> None:
    update = {"action": "append-files", "data-files": tbl.wire(tbl.write([3])),
              "snapshot-id": 4242}
    built = tbl.build(update)
    assert built.snapshot_id == 4242
    assert built.body["updates"][0]["snapshot"]["snapshot-id"] == 4242
    tbl.land(built)
    status, message = _status(tbl, {**update, "data-files": tbl.wire(tbl.write([4]))})
    assert status == 400 and "snapshot-id 4242 already exists" in message


@pytest.mark.parametrize("value", [0, -5, 2**63, True, "12", 1.5])
def test_snapshot_id_must_be_a_positive_long(tbl: Tbl, value: Any) -> None:
    status, message = _status(tbl, {"action": "append-files", "snapshot-id": value,
                                    "data-files": tbl.wire(tbl.write([3]))})
    assert status == 400 and "snapshot-id must be a positive long" in message


class _Answer:
    def __init__(self, status: int, text: str = "{}") -> None:
        self.status_code, self.text = status, text


class _Session:
    """A scripted ``requests`` session: each post takes the next answer (or raises it)."""

    def __init__(self, *answers: _Answer | Exception) -> None:
        self.answers = list(answers)
        self.sent: list[tuple[bytes, dict[str, str]]] = []

    def post(self, url: str, data: bytes, headers: dict[str, str]) -> _Answer:
        self.sent.append((data, dict(headers)))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def _client(session: _Session, landed: list[bool]) -> IcegovClient:
    """A client whose posts go to ``session`` and whose reloads find its snapshot when the
    next ``landed`` says so."""
    client = object.__new__(IcegovClient)
    client.catalog = SimpleNamespace(_session=session)  # type: ignore[assignment]
    client.retries, client.retry_backoff_s = 2, 0.0
    found = SimpleNamespace(snapshot_by_id=lambda _: object())
    missing = SimpleNamespace(snapshot_by_id=lambda _: None)
    client.load = lambda _: SimpleNamespace(  # type: ignore[method-assign,assignment,return-value]
        metadata=found if landed.pop(0) else missing)
    client._landed_here = lambda table, change: (  # type: ignore[method-assign]
        None if table.metadata.snapshot_by_id(change.snapshot_id) is None else True)
    return client


def _change(tbl: Tbl) -> _Change:
    written = tbl.write([9])
    return _Change(tbl.table, {"action": "append-files", "data-files": tbl.wire(written)},
                   written)


def test_client_resends_the_same_request_while_its_snapshot_is_absent(tbl: Tbl) -> None:
    session = _Session(requests.ConnectionError("lost"), _Answer(502), _Answer(200, "done"))
    client, change = _client(session, [False, False]), _change(tbl)
    assert client._post("u", change.body(), [change]) == "done"
    assert len(session.sent) == 3 and all(s == session.sent[0] for s in session.sent)
    data, headers = session.sent[0]
    assert json.loads(data)["updates"][0]["snapshot-id"] == change.snapshot_id > 0
    assert uuid.UUID(headers["Idempotency-Key"])


def test_client_takes_a_found_snapshot_as_success(tbl: Tbl) -> None:
    session = _Session(_Answer(504))
    client, change = _client(session, [True]), _change(tbl)
    assert client._post("u", change.body(), [change]) is None  # landed: the caller reloads
    assert len(session.sent) == 1
    session = _Session(requests.ConnectionError("lost"), _Answer(409))  # the resend lost the
    client = _client(session, [False, True])  # race to the first try, which landed after all
    assert client._post("u", change.body(), [change]) is None


def test_client_gives_up_unknown_and_keeps_its_files(tbl: Tbl) -> None:
    session = _Session(_Answer(502), _Answer(502), _Answer(502))
    client, change = _client(session, [False, False, False]), _change(tbl)
    with pytest.raises(CommitStateUnknownException):
        client._post("u", change.body(), [change])
    assert len(session.sent) == 3
    assert tbl.table.io.new_input(change.written[0].file_path).exists()
    session = _Session(_Answer(400, '{"error": {"message": "bad"}}'))
    with pytest.raises(BadRequestError, match="bad"):
        _client(session, [])._post("u", change.body(), [change])  # a first 4xx: no reload
    assert not tbl.table.io.new_input(change.written[0].file_path).exists()


def test_client_keeps_its_files_when_a_refused_retry_cannot_be_checked(tbl: Tbl) -> None:
    session = _Session(_Answer(502), _Answer(400, '{"error": {"message": "exists"}}'))
    client, change = _client(session, [False]), _change(tbl)
    loads = iter([False])

    def load(_: Any) -> Any:
        if next(loads, None) is None:
            raise requests.ConnectionError("icegov unreachable")
        return SimpleNamespace(metadata=SimpleNamespace(snapshot_by_id=lambda _: None))

    client.load = load  # type: ignore[method-assign,assignment]
    with pytest.raises(CommitStateUnknownException):
        client._post("u", change.body(), [change])
    assert tbl.table.io.new_input(change.written[0].file_path).exists()
