"""Data operations built by icegov (``proxy.commits.operations.build_commit``) on a real table.

The table is a pyiceberg SqlCatalog table ``db.t (id long, p string)`` partitioned by
identity ``p`` (format 2) in a temp dir. Each test writes real Parquet files under the table,
builds the operation, commits the built body through the catalog's own commit (which checks the
built requirements) and reads the rows back with pyiceberg. The built commit is also classified
by ``classify_commit``: governance sees what the manifests show, and the claims verify.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import TypeAdapter
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.update import TableRequirement, TableUpdate
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from proxy.commits import classify_commit
from proxy.commits.operations import (
    BuiltCommit,
    build_commit,
    content_file_to_json,
    starting_snapshot_id,
)
from proxy.governance import Action

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False),
                NestedField(2, "p", StringType(), required=False))
SPEC = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "p"))
ARROW = pa.schema([("id", pa.int64()), ("p", pa.string())])
_REQUIREMENTS: TypeAdapter[TableRequirement] = TypeAdapter(TableRequirement)
_UPDATES: TypeAdapter[TableUpdate] = TypeAdapter(TableUpdate)


class Tbl:
    """A catalog table and the helpers the operation tests share."""

    def __init__(self, folder: Path, spec: PartitionSpec = SPEC, name: str = "db.t",
                 catalog: SqlCatalog | None = None, format_version: int = 2) -> None:
        self.catalog = catalog or SqlCatalog("ops", uri=f"sqlite:///{folder}/c.db",
                                             warehouse=folder.as_uri())
        if catalog is None:
            self.catalog.create_namespace("db")
        self.table: Table = self.catalog.create_table(
            name, SCHEMA, partition_spec=spec, properties={"format-version": str(format_version)})

    def write(self, ids: list[int], p: str | list[str] = "a") -> list[DataFile]:
        """Parquet data files of rows ``ids`` (all in partition ``p``, or one ``p`` per id)."""
        parts = p if isinstance(p, list) else [p] * len(ids)
        rows = pa.table({"id": ids, "p": parts}, schema=ARROW)
        return list(_dataframe_to_data_files(self.table.metadata, rows, self.table.io))

    def wire(self, files: list[DataFile]) -> list[dict[str, Any]]:
        spec = self.table.metadata.spec()  # files are written with the default spec
        return [content_file_to_json(f, spec, self.table.schema()) for f in files]

    def build(self, update: dict[str, Any], start: Any = "default",
              requirements: list[dict[str, Any]] | None = None) -> BuiltCommit:
        body = {"requirements": requirements or [], "updates": [update]}
        metadata = self.table.metadata
        begin = starting_snapshot_id(body, metadata) if start == "default" else start
        return build_commit(body, metadata, self.table.io, start_snapshot_id=begin,
                            now_ms=int(time.time() * 1000))

    def land(self, built: BuiltCommit) -> None:
        """Commit the built body through the catalog (its requirements checked)."""
        body = built.body
        self.catalog.commit_table(
            self.table, tuple(_REQUIREMENTS.validate_python(r) for r in body["requirements"]),
            tuple(_UPDATES.validate_python(u) for u in body["updates"]))
        self.refresh()

    def refresh(self) -> None:
        self.table = self.catalog.load_table(self.table.name())

    def rows(self) -> list[tuple[int, str]]:
        self.refresh()
        scanned = self.table.scan().to_arrow()
        return sorted(zip(scanned["id"].to_pylist(), scanned["p"].to_pylist(), strict=True))

    def live_paths(self) -> set[str]:
        snapshot = self.table.current_snapshot()
        if snapshot is None:
            return set()
        return {e.data_file.file_path for m in snapshot.manifests(self.table.io)
                for e in m.fetch_manifest_entry(self.table.io)}

    def append(self, ids: list[int], p: str | list[str] = "a") -> list[DataFile]:
        files = self.write(ids, p)
        self.land(self.build({"action": "append-files", "data-files": self.wire(files)}))
        return files

    def actions(self, built: BuiltCommit) -> frozenset[Action]:
        intent = classify_commit(built.body, self.table.metadata, self.table.io)
        assert intent.evidence.verified, intent.evidence.mismatch
        return intent.actions


@pytest.fixture()
def tbl(tmp_path: Path) -> Tbl:
    return Tbl(tmp_path)


def test_append_to_empty_table_builds_an_insert_that_lands(tbl: Tbl) -> None:
    files = tbl.write([1, 2, 3], ["a", "a", "b"])
    built = tbl.build({"action": "append-files", "data-files": tbl.wire(files)})
    assert built.operation == "append" and built.start_snapshot_id is None
    assert tbl.actions(built) == {Action.INSERT}
    tbl.land(built)
    assert tbl.rows() == [(1, "a"), (2, "a"), (3, "b")]
    snapshot = tbl.table.current_snapshot()
    assert snapshot is not None and snapshot.snapshot_id == built.snapshot_id
    assert snapshot.summary is not None
    assert snapshot.summary["total-records"] == "3"
    assert snapshot.summary["added-data-files"] == "2"


def test_appends_keep_earlier_rows_and_count_totals(tbl: Tbl) -> None:
    tbl.append([1, 2])
    tbl.append([3], "b")
    built = tbl.build({"action": "append-files", "data-files": tbl.wire(tbl.write([4]))})
    tbl.land(built)
    assert tbl.rows() == [(1, "a"), (2, "a"), (3, "b"), (4, "a")]
    snapshot = tbl.table.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    assert snapshot.summary["total-records"] == "4"
    assert snapshot.summary["total-data-files"] == "3"
    assert snapshot.sequence_number == 3


def test_append_rebuilt_on_a_moved_head_keeps_both_appends(tbl: Tbl) -> None:
    tbl.append([1])
    body = {"action": "append-files", "data-files": tbl.wire(tbl.write([2]))}
    start = tbl.table.metadata.current_snapshot_id
    stale = tbl.build(body, start=start)
    tbl.append([3])  # the head moves: the stale body's ref assertion fails at the catalog
    with pytest.raises(Exception, match=r"(?i)requirement failed"):
        tbl.land(stale)
    tbl.land(tbl.build(body, start=start))
    assert tbl.rows() == [(1, "a"), (2, "a"), (3, "a")]


def test_delete_named_file_removes_exactly_its_rows(tbl: Tbl) -> None:
    [kept] = tbl.append([1, 2])
    [gone] = tbl.append([3, 4], "b")
    built = tbl.build({"action": "delete-files", "data-files": [gone.file_path]})
    assert built.operation == "delete"
    assert tbl.actions(built) == {Action.DELETE}
    tbl.land(built)
    assert tbl.rows() == [(1, "a"), (2, "a")]
    assert tbl.live_paths() == {kept.file_path}
    snapshot = tbl.table.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    assert snapshot.summary["deleted-records"] == "2"
    assert snapshot.summary["total-records"] == "2"


def test_delete_by_partition_filter_removes_whole_partition(tbl: Tbl) -> None:
    tbl.append([1, 2, 3], ["a", "b", "b"])
    tbl.append([4], "b")
    built = tbl.build({"action": "delete-files",
                       "row-filter": {"type": "eq", "term": "p", "value": "b"}})
    tbl.land(built)
    assert tbl.rows() == [(1, "a")]


def test_delete_filter_matching_part_of_a_file_is_refused(tbl: Tbl) -> None:
    tbl.append([1, 2])
    with pytest.raises(Exception) as refused:
        tbl.build({"action": "delete-files",
                   "row-filter": {"type": "eq", "term": "id", "value": 1}})
    assert getattr(refused.value, "status", None) == 400
    assert "some but not all rows" in str(refused.value)


def test_overwrite_replaces_a_file_with_its_rewritten_rows(tbl: Tbl) -> None:
    [old] = tbl.append([1, 2, 3])
    [other] = tbl.append([7], "b")
    new = tbl.write([1, 3])  # "DELETE WHERE id = 2", copy-on-write
    built = tbl.build({"action": "overwrite-files", "added-data-files": tbl.wire(new),
                       "deleted-data-files": [old.file_path],
                       "conflict-filter": {"type": "eq", "term": "p", "value": "a"}})
    assert built.operation == "overwrite"
    assert tbl.actions(built) == {Action.DELETE}  # rows only removed, as the rows show
    tbl.land(built)
    assert tbl.rows() == [(1, "a"), (3, "a"), (7, "b")]
    assert tbl.live_paths() == {new[0].file_path, other.file_path}


def test_overwrite_by_row_filter_with_new_rows_is_an_update(tbl: Tbl) -> None:
    tbl.append([1, 2], "a")
    tbl.append([3], "b")
    built = tbl.build({"action": "overwrite-files",
                       "row-filter": {"type": "eq", "term": "p", "value": "a"},
                       "added-data-files": tbl.wire(tbl.write([10, 20]))})
    assert tbl.actions(built) == {Action.UPDATE}
    tbl.land(built)
    assert tbl.rows() == [(3, "b"), (10, "a"), (20, "a")]


def test_rewrite_compacts_files_into_one(tbl: Tbl) -> None:
    [one] = tbl.append([1])
    [two] = tbl.append([2])
    merged = tbl.write([1, 2])
    built = tbl.build({"action": "rewrite-files", "added-data-files": tbl.wire(merged),
                       "deleted-data-files": [one.file_path, two.file_path]})
    assert built.operation == "replace"
    assert tbl.actions(built) == {Action.REWRITE}
    tbl.land(built)
    assert tbl.rows() == [(1, "a"), (2, "a")]
    assert tbl.live_paths() == {merged[0].file_path}


def test_built_ref_update_keeps_the_table_uuid_requirement(tbl: Tbl) -> None:
    tbl.append([1])
    built = tbl.build({"action": "append-files", "data-files": tbl.wire(tbl.write([2]))},
                      requirements=[{"type": "assert-table-uuid",
                                     "uuid": str(tbl.table.metadata.table_uuid)}])
    [uuid_req, ref_req] = built.body["requirements"]
    assert uuid_req == {"type": "assert-table-uuid", "uuid": str(tbl.table.metadata.table_uuid)}
    assert ref_req == {"type": "assert-ref-snapshot-id", "ref": "main",
                       "snapshot-id": tbl.table.metadata.current_snapshot_id}
    assert [u["action"] for u in built.body["updates"]] == ["add-snapshot", "set-snapshot-ref"]


_POSITIONS = pa.schema([
    pa.field("file_path", pa.string(), False, {b"PARQUET:field_id": b"2147483546"}),
    pa.field("pos", pa.int64(), False, {b"PARQUET:field_id": b"2147483545"})])


def position_deletes(tbl: Tbl, target: DataFile, positions: list[int]) -> dict[str, Any]:
    """A Parquet position delete file under the table, as wire JSON scoped to ``target``."""
    path = f"{tbl.table.location()}/data/p=a/deletes-{len(positions)}-{time.time_ns()}.parquet"
    rows = pa.table({"file_path": [target.file_path] * len(positions), "pos": positions},
                    schema=_POSITIONS)
    with tbl.table.io.new_output(path).create() as out:
        pq.write_table(rows, out)
    return {"content": "position-deletes", "file-path": path, "file-format": "parquet",
            "spec-id": 0, "partition": ["a"], "record-count": len(positions),
            "file-size-in-bytes": len(tbl.table.io.new_input(path)),
            "referenced-data-file": target.file_path}


def test_row_delta_deletes_rows_by_position_and_adds_new_ones(tbl: Tbl) -> None:
    [data] = tbl.append([1, 2, 3])
    built = tbl.build({"action": "row-delta",  # "UPDATE SET id = 20 WHERE id = 2", MoR
                       "added-delete-files": [position_deletes(tbl, data, [1])],
                       "added-data-files": tbl.wire(tbl.write([20])),
                       "conflict-filter": {"type": "eq", "term": "p", "value": "a"}})
    assert built.operation == "overwrite"
    assert tbl.actions(built) == {Action.UPDATE}
    tbl.land(built)
    assert tbl.rows() == [(1, "a"), (3, "a"), (20, "a")]
    snapshot = tbl.table.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    assert snapshot.summary["total-position-deletes"] == "1"
    assert snapshot.summary["total-delete-files"] == "1"


def test_row_delta_of_deletes_only_is_a_delete(tbl: Tbl) -> None:
    [data] = tbl.append([1, 2, 3])
    built = tbl.build({"action": "row-delta",
                       "added-delete-files": [position_deletes(tbl, data, [0, 2])]})
    assert built.operation == "delete"
    assert tbl.actions(built) == {Action.DELETE}
    tbl.land(built)
    assert tbl.rows() == [(2, "a")]


def test_rewrite_removes_delete_files_with_the_rows_they_deleted(tbl: Tbl) -> None:
    [data] = tbl.append([1, 2, 3])
    deletes = position_deletes(tbl, data, [1])
    tbl.land(tbl.build({"action": "row-delta", "added-delete-files": [deletes]}))
    compacted = tbl.write([1, 3])
    built = tbl.build({"action": "rewrite-files", "added-data-files": tbl.wire(compacted),
                       "deleted-data-files": [data.file_path],
                       "deleted-delete-files": [deletes["file-path"]]})
    assert tbl.actions(built) == {Action.REWRITE}
    tbl.land(built)
    assert tbl.rows() == [(1, "a"), (3, "a")]
    assert tbl.live_paths() == {compacted[0].file_path}


def test_operation_on_a_branch_leaves_main_alone(tbl: Tbl) -> None:
    tbl.append([1])
    main_head = tbl.table.metadata.current_snapshot_id
    assert main_head is not None
    tbl.table.manage_snapshots().create_branch(main_head, "audit").commit()
    tbl.refresh()
    built = tbl.build({"action": "append-files", "branch": "audit",
                       "data-files": tbl.wire(tbl.write([2]))})
    tbl.land(built)
    assert tbl.table.metadata.current_snapshot_id == main_head
    assert tbl.table.metadata.refs["audit"].snapshot_id == built.snapshot_id
    assert tbl.rows() == [(1, "a")]


def test_appends_merge_small_manifests_and_keep_every_row(tbl: Tbl) -> None:
    with tbl.table.transaction() as tx:
        tx.set_properties({"commit.manifest.min-count-to-merge": "3"})
    tbl.refresh()
    tbl.append([1])
    tbl.append([2])
    built = tbl.build({"action": "append-files", "data-files": tbl.wire(tbl.write([3]))})
    assert tbl.actions(built) == {Action.INSERT}  # EXISTING entries carried, none dropped
    tbl.land(built)
    snapshot = tbl.table.current_snapshot()
    assert snapshot is not None
    assert len(snapshot.manifests(tbl.table.io)) == 1
    tbl.append([4])
    assert tbl.rows() == [(1, "a"), (2, "a"), (3, "a"), (4, "a")]
    snapshot = tbl.table.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    assert len(snapshot.manifests(tbl.table.io)) == 2
    assert snapshot.summary["total-records"] == "4"
    assert snapshot.summary["total-data-files"] == "4"
