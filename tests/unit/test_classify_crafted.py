"""classify_commit on hand-written manifests: rewrites, delete files, and manifests that lie.

The base is a real pyiceberg table (two appends: ``f1`` with 2 rows, ``f2`` with 1 row, each in
its own manifest). New snapshots are written with pyiceberg's manifest writers; ``apply`` commits
one to the table so later cases can build on it.
"""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriterV2,
    write_manifest_list,
)
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.update import AddSnapshotUpdate, SetSnapshotRefUpdate
from pyiceberg.typedef import Record

from proxy.commits import classify_commit
from proxy.commits.intent import CommitIntent
from proxy.governance import Action

ADDED, EXISTING, DELETED = ManifestEntryStatus.ADDED, ManifestEntryStatus.EXISTING, \
    ManifestEntryStatus.DELETED
POS = DataFileContent.POSITION_DELETES
_FILE_PATH_FIELD = 2147483546
_ids = itertools.count(1000)


class DeleteManifestWriter(ManifestWriterV2):
    """pyiceberg writes data manifests only; delete manifests differ in content alone."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


def content_file(path: str, records: int, content: DataFileContent = DataFileContent.DATA,
                 target: str | None = None) -> DataFile:
    """A data or delete file; ``target`` makes a delete file file-scoped (path bounds)."""
    bounds = {_FILE_PATH_FIELD: target.encode()} if target else None
    return DataFile.from_args(content=content, file_path=path, file_format=FileFormat.PARQUET,
                              partition=Record(), record_count=records, file_size_in_bytes=10,
                              lower_bounds=bounds, upper_bounds=bounds)


@dataclass
class Crafter:
    """Writes manifests and snapshots for ``table`` and commits them."""

    catalog: SqlCatalog
    table: Table
    folder: Path

    def files(self) -> list[tuple[DataFile, int]]:
        """Live data files of the current snapshot with their data sequence numbers."""
        snapshot = self.table.current_snapshot()
        assert snapshot is not None
        return [(e.data_file, e.sequence_number or 0) for m in snapshot.manifests(self.table.io)
                for e in m.fetch_manifest_entry(self.table.io)
                if e.data_file.content == DataFileContent.DATA]

    def manifest(self, snapshot_id: int, entries: list[tuple[ManifestEntryStatus, DataFile, int]],
                 deletes: bool = False, entry_snapshot: int | None = None) -> ManifestFile:
        """A manifest of (status, file, data sequence number) entries, added by ``snapshot_id``."""
        out = self.table.io.new_output(str(self.folder / f"m-{uuid.uuid4()}.avro"))
        writer_class = DeleteManifestWriter if deletes else ManifestWriterV2
        with writer_class(UNPARTITIONED_PARTITION_SPEC, self.table.schema(), out, snapshot_id,
                          "null") as writer:
            for status, file, sequence in entries:
                writer.add_entry(ManifestEntry.from_args(
                    status=status, snapshot_id=entry_snapshot or snapshot_id,
                    sequence_number=None if status == ADDED else sequence,
                    file_sequence_number=None if status == ADDED else sequence, data_file=file))
        return writer.to_manifest_file()

    def snapshot(self, snapshot_id: int, manifests: list[ManifestFile], operation: str,
                 **summary: str) -> dict[str, Any]:
        """An add-snapshot ``snapshot`` object on top of the current snapshot."""
        parent = self.table.metadata.current_snapshot_id
        sequence = self.table.metadata.last_sequence_number + 1
        path = str(self.folder / f"snap-{snapshot_id}.avro")
        with write_manifest_list(2, self.table.io.new_output(path), snapshot_id, parent, sequence,
                                 "null") as writer:
            writer.add_manifests(manifests)
        return {"snapshot-id": snapshot_id, "parent-snapshot-id": parent,
                "sequence-number": sequence, "timestamp-ms": 1, "manifest-list": path,
                "summary": {"operation": operation, **summary}, "schema-id": 0}

    def body(self, snapshot: dict[str, Any], ref: str | None = "main") -> dict[str, Any]:
        updates: list[dict[str, Any]] = [{"action": "add-snapshot", "snapshot": snapshot}]
        if ref is not None:
            updates.append({"action": "set-snapshot-ref", "ref-name": ref, "type": "branch",
                            "snapshot-id": snapshot["snapshot-id"]})
        asserted = {"type": "assert-ref-snapshot-id", "ref": ref or "main",
                    "snapshot-id": self.table.metadata.current_snapshot_id}
        return {"requirements": [asserted], "updates": updates}

    def classify(self, body: dict[str, Any]) -> CommitIntent:
        return classify_commit(body, self.table.metadata, self.table.io)

    def apply(self, snapshot: dict[str, Any]) -> None:
        self.catalog.commit_table(self.table, (), (
            AddSnapshotUpdate(snapshot=Snapshot.model_validate(snapshot)),
            SetSnapshotRefUpdate(ref_name="main", type="branch",
                                 snapshot_id=snapshot["snapshot-id"])))
        self.table = self.catalog.load_table(self.table.name())


@pytest.fixture()
def crafter(tmp_path: Path) -> Crafter:
    catalog = SqlCatalog("crafted", uri=f"sqlite:///{tmp_path}/c.db", warehouse=tmp_path.as_uri())
    catalog.create_namespace("db")
    schema = pa.schema([("id", pa.int64())])
    table = catalog.create_table("db.t", schema)
    for ids in ([1, 2], [3]):
        table.append(pa.table({"id": ids}, schema=schema))
    return Crafter(catalog, table, tmp_path)


def live(crafter: Crafter) -> tuple[tuple[DataFile, int], tuple[DataFile, int]]:
    """(f1, f2): the 2-row file of the first append and the 1-row file of the second."""
    f1, f2 = sorted(crafter.files(), key=lambda f: -f[0].record_count)
    return f1, f2


def parent_manifests(crafter: Crafter) -> list[ManifestFile]:
    return crafter.table.current_snapshot().manifests(crafter.table.io)  # type: ignore[union-attr]


def new_data(name: str, records: int) -> DataFile:
    return content_file(f"file:///nowhere/{name}.parquet", records)


def test_data_equivalent_replace_is_rewrite(crafter: Crafter) -> None:
    (f1, s1), (f2, s2) = live(crafter)
    sid = next(_ids)
    merged = crafter.manifest(sid, [(DELETED, f1, s1), (DELETED, f2, s2),
                                    (ADDED, new_data("g", 3), 0)])
    snapshot = crafter.snapshot(sid, [merged], "replace", **{"added-records": "3",
                                                             "deleted-records": "3"})
    intent = crafter.classify(crafter.body(snapshot))
    assert intent.actions == {Action.REWRITE}
    assert intent.evidence.verified, intent.evidence.mismatch


def test_replace_that_grows_is_update(crafter: Crafter) -> None:
    (f1, s1), (f2, s2) = live(crafter)
    sid = next(_ids)
    merged = crafter.manifest(sid, [(DELETED, f1, s1), (DELETED, f2, s2),
                                    (ADDED, new_data("g", 4), 0)])
    intent = crafter.classify(crafter.body(crafter.snapshot(sid, [merged], "replace")))
    assert intent.actions == {Action.UPDATE}
    assert "claims 'replace' but its manifests show UPDATE" in (intent.evidence.mismatch or "")


def test_replace_that_only_removes_is_not_a_rewrite(crafter: Crafter) -> None:
    (f1, s1), _ = live(crafter)
    sid = next(_ids)
    m2 = parent_manifests(crafter)[0]
    gone = crafter.manifest(sid, [(DELETED, f1, s1)])
    intent = crafter.classify(crafter.body(crafter.snapshot(sid, [gone, m2], "replace")))
    assert intent.actions == {Action.DELETE} and not intent.evidence.verified


def test_rewriting_only_manifests_is_rewrite(crafter: Crafter) -> None:
    (f1, s1), (f2, s2) = live(crafter)
    sid = next(_ids)
    merged = crafter.manifest(sid, [(EXISTING, f1, s1), (EXISTING, f2, s2)])
    intent = crafter.classify(crafter.body(crafter.snapshot(sid, [merged], "replace")))
    assert intent.actions == {Action.REWRITE} and intent.evidence.verified


def test_silently_dropped_manifest_deletes_data(crafter: Crafter) -> None:
    m2 = parent_manifests(crafter)[0]  # the second append's; the first's is dropped
    sid = next(_ids)
    added = crafter.manifest(sid, [(ADDED, new_data("h", 1), 0)])
    snapshot = crafter.snapshot(sid, [added, m2], "append", **{"added-data-files": "1"})
    intent = crafter.classify(crafter.body(snapshot))
    assert intent.actions == {Action.UPDATE}
    assert intent.evidence.counts.removed_data_files == 1
    mismatch = intent.evidence.mismatch or ""
    assert "silently dropped" in mismatch and "claims 'append'" in mismatch


def test_existing_entry_for_a_foreign_file_is_an_insert(crafter: Crafter) -> None:
    [m2, m1] = parent_manifests(crafter)
    sid = next(_ids)
    smuggled = crafter.manifest(sid, [(EXISTING, new_data("x", 5), 1)], entry_snapshot=1)
    intent = crafter.classify(crafter.body(crafter.snapshot(sid, [smuggled, m2, m1], "append")))
    assert intent.actions == {Action.INSERT}
    assert intent.evidence.counts.added_records == 5
    mismatch = intent.evidence.mismatch or ""
    assert "EXISTING entries for files no replaced manifest held" in mismatch


def test_entries_and_manifests_of_another_snapshot_are_reported(crafter: Crafter) -> None:
    [m2, m1] = parent_manifests(crafter)
    sid = next(_ids)
    foreign = crafter.manifest(42, [(ADDED, new_data("y", 1), 0)])
    foreign.sequence_number = foreign.min_sequence_number = 3
    intent = crafter.classify(crafter.body(crafter.snapshot(sid, [foreign, m2, m1], "append")))
    assert intent.actions == {Action.INSERT}
    mismatch = intent.evidence.mismatch or ""
    assert "not added by snapshot" in mismatch and "another snapshot id" in mismatch


def test_staged_snapshot_is_classified_without_a_ref(crafter: Crafter) -> None:
    [m2, m1] = parent_manifests(crafter)
    sid = next(_ids)
    added = crafter.manifest(sid, [(ADDED, new_data("s", 1), 0)])
    intent = crafter.classify(crafter.body(crafter.snapshot(sid, [added, m2, m1], "append"),
                                           ref=None))
    assert intent.actions == {Action.INSERT} and intent.evidence.verified


def test_new_branch_from_current_snapshot_manages_snapshots(crafter: Crafter) -> None:
    [m2, m1] = parent_manifests(crafter)
    sid = next(_ids)
    added = crafter.manifest(sid, [(ADDED, new_data("b", 1), 0)])
    body = crafter.body(crafter.snapshot(sid, [added, m2, m1], "append"), ref="feature")
    body["requirements"] = []
    intent = crafter.classify(body)
    assert intent.actions == {Action.INSERT, Action.MANAGE_SNAPSHOTS}
    assert intent.evidence.verified, intent.evidence.mismatch


def test_replaced_main_drops_its_rows(crafter: Crafter) -> None:
    sid = next(_ids)
    added = crafter.manifest(sid, [(ADDED, new_data("r", 1), 0)])
    snapshot = crafter.snapshot(sid, [added], "append", **{"added-data-files": "1"})
    snapshot["parent-snapshot-id"] = None
    body = crafter.body(snapshot)
    body["requirements"] = []
    body["updates"].insert(0, {"action": "remove-snapshot-ref", "ref-name": "main"})
    intent = crafter.classify(body)
    assert intent.actions == {Action.UPDATE}
    assert intent.evidence.verified, intent.evidence.mismatch


# --- delete files ---------------------------------------------------------------------------


def add_position_delete(crafter: Crafter, target: DataFile | None, records: int = 1,
                        name: str = "d1") -> DataFile:
    """Commit a snapshot adding one position delete file (file-scoped if ``target``)."""
    sid = next(_ids)
    delete = content_file(f"file:///nowhere/{name}-deletes.parquet", records, POS,
                          target.file_path if target else None)
    manifest = crafter.manifest(sid, [(ADDED, delete, 0)], deletes=True)
    snapshot = crafter.snapshot(sid, [manifest, *parent_manifests(crafter)], "delete")
    intent = crafter.classify(crafter.body(snapshot))
    assert intent.actions == {Action.DELETE}, "adding a delete file deletes rows"
    assert intent.evidence.counts.added_delete_files == 1 and intent.evidence.verified
    crafter.apply(snapshot)
    return delete


def delete_manifest(crafter: Crafter) -> ManifestFile:
    return next(m for m in parent_manifests(crafter) if m.content == ManifestContent.DELETES)


def data_manifests(crafter: Crafter) -> list[ManifestFile]:
    return [m for m in parent_manifests(crafter) if m.content == ManifestContent.DATA]


def remove_delete(crafter: Crafter, delete: DataFile, sequence: int,
                  extra: list[tuple[ManifestEntryStatus, DataFile, int]] | None = None,
                  data: list[ManifestFile] | None = None, operation: str = "delete",
                  sid: int | None = None) -> CommitIntent:
    """Classify a snapshot whose delete manifest marks ``delete`` DELETED (plus ``extra``)."""
    sid = sid or next(_ids)
    manifest = crafter.manifest(sid, [(DELETED, delete, sequence), *(extra or [])], deletes=True)
    manifests = [manifest, *(data_manifests(crafter) if data is None else data)]
    return crafter.classify(crafter.body(crafter.snapshot(sid, manifests, operation)))


def test_removing_a_delete_file_re_exposes_rows(crafter: Crafter) -> None:
    (f1, _), _ = live(crafter)
    delete = add_position_delete(crafter, f1)
    intent = remove_delete(crafter, delete, 3)
    assert intent.actions == {Action.UPDATE}
    assert intent.evidence.counts.removed_delete_files == 1
    assert "claims 'delete' but its manifests show UPDATE" in (intent.evidence.mismatch or "")


def test_superseding_delete_file_is_a_delete(crafter: Crafter) -> None:
    (f1, _), (f2, _) = live(crafter)
    delete = add_position_delete(crafter, f1)
    merged = content_file("file:///nowhere/d2.parquet", 2, POS, f1.file_path)
    intent = remove_delete(crafter, delete, 3, [(ADDED, merged, 0)])
    assert intent.actions == {Action.DELETE} and intent.evidence.verified
    elsewhere = content_file("file:///nowhere/d3.parquet", 2, POS, f2.file_path)
    assert remove_delete(crafter, delete, 3, [(ADDED, elsewhere, 0)]).actions == {Action.UPDATE}


def test_delete_file_orphaned_with_its_data_file_is_a_delete(crafter: Crafter) -> None:
    (f1, s1), _ = live(crafter)
    delete = add_position_delete(crafter, f1)
    sid = next(_ids)
    m1 = next(m for m in data_manifests(crafter) if any(
        e.data_file.file_path == f1.file_path for e in m.fetch_manifest_entry(crafter.table.io)))
    others = [m for m in data_manifests(crafter) if m != m1]
    dropped = crafter.manifest(sid, [(DELETED, f1, s1)])
    deletes = crafter.manifest(sid, [(DELETED, delete, 3)], deletes=True)
    intent = crafter.classify(crafter.body(crafter.snapshot(
        sid, [dropped, deletes, *others], "delete")))
    assert intent.actions == {Action.DELETE} and intent.evidence.verified


def test_expired_delete_file_exposes_nothing(crafter: Crafter) -> None:
    (f1, s1), (f2, s2) = live(crafter)
    delete = add_position_delete(crafter, None)  # partition-scoped, sequence 3
    sid = next(_ids)
    newer = crafter.manifest(sid, [(ADDED, new_data("f3", 1), 0)])
    crafter.apply(crafter.snapshot(sid, [newer, *parent_manifests(crafter)], "append"))
    [newer_manifest] = [m for m in data_manifests(crafter) if m.added_snapshot_id == sid]
    sid = next(_ids)
    gone = crafter.manifest(sid, [(DELETED, f1, s1), (DELETED, f2, s2)])
    intent = remove_delete(crafter, delete, 3, data=[gone, newer_manifest], sid=sid)
    assert intent.actions == {Action.DELETE}, "only data from sequence 4 remains: d1 is moot"
    kept_old = crafter.manifest(sid, [(DELETED, f1, s1), (EXISTING, f2, s2)])
    intent = remove_delete(crafter, delete, 3, data=[kept_old, newer_manifest], sid=sid)
    assert intent.actions == {Action.UPDATE}, "f2 (sequence 2) is still live: d1 applied to it"


def test_rewrite_applying_deletes_is_rewrite(crafter: Crafter) -> None:
    (f1, s1), (f2, s2) = live(crafter)
    delete = add_position_delete(crafter, f1)
    sid = next(_ids)
    data = crafter.manifest(sid, [(DELETED, f1, s1), (DELETED, f2, s2),
                                  (ADDED, new_data("c", 2), 0)])
    intent = remove_delete(crafter, delete, 3, data=[data], operation="replace", sid=sid)
    assert intent.actions == {Action.REWRITE} and intent.evidence.verified
