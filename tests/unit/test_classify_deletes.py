"""classify_commit on delete files: which removals re-expose rows (UPDATE) and which cannot.

The base is a real table ``db.t (id long)`` with two appends: ``f1`` (ids 1, 2; sequence 1) and
``f2`` (id 3; sequence 2); the first delete file added on top gets sequence 3. Delete files are
real Parquet files under the table (``tests.support.row_files``): whether a removal re-exposes
rows is decided by reading them (``proxy.commits.rows``).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.manifest import DataFile, ManifestContent, ManifestEntryStatus, ManifestFile

from proxy.commits.intent import CommitIntent
from proxy.governance import Action
from tests.support.row_files import RowTable

ADDED, EXISTING, DELETED = ManifestEntryStatus.ADDED, ManifestEntryStatus.EXISTING, \
    ManifestEntryStatus.DELETED
SCHEMA = pa.schema([pa.field("id", pa.int64(), False)])
_ids = itertools.count(1000)


@pytest.fixture()
def rt(tmp_path: Path) -> RowTable:
    return RowTable.create(tmp_path, SCHEMA, [pa.table({"id": [1, 2]}, schema=SCHEMA),
                                             pa.table({"id": [3]}, schema=SCHEMA)])


def live(rt: RowTable) -> tuple[tuple[DataFile, int], tuple[DataFile, int]]:
    f1, f2 = rt.data_files()
    return f1, f2


def add_position_delete(rt: RowTable, deleted: list[tuple[DataFile, int]],
                        scoped: DataFile | None = None, name: str = "d1") -> DataFile:
    """Commit a snapshot adding one position delete file of (data file, position) rows."""
    sid = next(_ids)
    delete = rt.write_positions(name, [(f.file_path, pos) for f, pos in deleted],
                                scoped.file_path if scoped else None)
    manifest = rt.crafter.manifest(sid, [(ADDED, delete, 0)], deletes=True)
    snapshot = rt.crafter.snapshot(sid, [manifest, *rt.crafter.parent_manifests()], "delete")
    intent = rt.crafter.classify(rt.crafter.body(snapshot))
    assert intent.actions == {Action.DELETE}, "adding a delete file deletes rows"
    assert intent.evidence.counts.added_delete_files == 1 and intent.evidence.verified
    rt.crafter.apply(snapshot)
    return delete


def data_manifests(rt: RowTable) -> list[ManifestFile]:
    return rt.manifests(ManifestContent.DATA)


def remove_delete(rt: RowTable, delete: DataFile, sequence: int,
                  extra: list[tuple[ManifestEntryStatus, DataFile, int]] | None = None,
                  data: list[ManifestFile] | None = None, operation: str = "delete",
                  sid: int | None = None) -> CommitIntent:
    """Classify a snapshot whose delete manifest marks ``delete`` DELETED (plus ``extra``)."""
    sid = sid or next(_ids)
    manifest = rt.crafter.manifest(sid, [(DELETED, delete, sequence), *(extra or [])],
                                   deletes=True)
    manifests = [manifest, *(data_manifests(rt) if data is None else data)]
    return rt.crafter.classify(rt.crafter.body(rt.crafter.snapshot(sid, manifests, operation)))


def test_removing_a_delete_file_re_exposes_rows(rt: RowTable) -> None:
    (f1, _), _ = live(rt)
    delete = add_position_delete(rt, [(f1, 0)], scoped=f1)
    intent = remove_delete(rt, delete, 3)
    assert intent.actions == {Action.UPDATE}
    assert intent.evidence.counts.removed_delete_files == 1
    assert "claims 'delete' but its manifests show UPDATE" in (intent.evidence.mismatch or "")
    assert "0 of 1 removed delete files" in " ".join(intent.evidence.row_checks)


def test_superseding_delete_file_is_a_delete(rt: RowTable) -> None:
    (f1, _), (f2, _) = live(rt)
    delete = add_position_delete(rt, [(f1, 0)], scoped=f1)
    merged = rt.write_positions("d2", [(f1.file_path, 0), (f1.file_path, 1)], f1.file_path)
    intent = remove_delete(rt, delete, 3, [(ADDED, merged, 0)])
    assert intent.actions == {Action.DELETE} and intent.evidence.verified
    elsewhere = rt.write_positions("d3", [(f2.file_path, 0), (f1.file_path, 1)])
    assert remove_delete(rt, delete, 3, [(ADDED, elsewhere, 0)]).actions == {Action.UPDATE}


def test_delete_file_orphaned_with_its_data_file_is_a_delete(rt: RowTable) -> None:
    (f1, s1), _ = live(rt)
    delete = add_position_delete(rt, [(f1, 0)], scoped=f1)
    sid = next(_ids)
    m1 = next(m for m in data_manifests(rt) if any(
        e.data_file.file_path == f1.file_path for e in m.fetch_manifest_entry(rt.table.io)))
    others = [m for m in data_manifests(rt) if m != m1]
    dropped = rt.crafter.manifest(sid, [(DELETED, f1, s1)])
    deletes = rt.crafter.manifest(sid, [(DELETED, delete, 3)], deletes=True)
    intent = rt.crafter.classify(rt.crafter.body(rt.crafter.snapshot(
        sid, [dropped, deletes, *others], "delete")))
    assert intent.actions == {Action.DELETE} and intent.evidence.verified


def test_expired_delete_file_exposes_nothing(rt: RowTable) -> None:
    (f1, s1), (f2, s2) = live(rt)
    delete = add_position_delete(rt, [(f1, 0), (f2, 0)])  # partition-scoped, sequence 3
    sid = next(_ids)
    newer = rt.crafter.manifest(sid, [(ADDED, rt.write_data("f3", pa.table({"id": [4]})), 0)])
    rt.crafter.apply(rt.crafter.snapshot(sid, [newer, *rt.crafter.parent_manifests()],
                                         "append"))
    [newer_manifest] = [m for m in data_manifests(rt) if m.added_snapshot_id == sid]
    sid = next(_ids)
    gone = rt.crafter.manifest(sid, [(DELETED, f1, s1), (DELETED, f2, s2)])
    intent = remove_delete(rt, delete, 3, data=[gone, newer_manifest], sid=sid)
    assert intent.actions == {Action.DELETE}, "only data from sequence 4 remains: d1 is moot"
    kept_old = rt.crafter.manifest(sid, [(DELETED, f1, s1)])
    f2_manifest = next(m for m in data_manifests(rt) if any(
        e.data_file.file_path == f2.file_path for e in m.fetch_manifest_entry(rt.table.io)))
    intent = remove_delete(rt, delete, 3, data=[kept_old, f2_manifest, newer_manifest],
                           sid=sid)
    assert intent.actions == {Action.UPDATE}, "f2 (sequence 2) is still live: d1 applied to it"


def test_dangling_delete_file_exposes_nothing(rt: RowTable) -> None:
    (f1, s1), _ = live(rt)
    delete = add_position_delete(rt, [(f1, 0)], scoped=f1)
    sid = next(_ids)
    f1_manifest = next(m for m in data_manifests(rt) if any(
        e.data_file.file_path == f1.file_path for e in m.fetch_manifest_entry(rt.table.io)))
    others = [m for m in data_manifests(rt) if m != f1_manifest]
    gone = rt.crafter.manifest(sid, [(DELETED, f1, s1)])
    # f1 is removed first, leaving the delete file dangling ...
    rt.crafter.apply(rt.crafter.snapshot(sid, [gone, *others, *rt.manifests(
        ManifestContent.DELETES)], "delete"))
    # ... then a delete-file clean-up removes it: nothing it deleted can come back
    intent = remove_delete(rt, delete, 3, operation="replace")
    assert intent.actions == {Action.REWRITE}, intent.evidence.row_checks


def test_rewrite_applying_deletes_is_rewrite(rt: RowTable) -> None:
    (f1, s1), (f2, s2) = live(rt)
    delete = add_position_delete(rt, [(f1, 0)], scoped=f1)
    sid = next(_ids)
    compacted = rt.write_data("c", pa.table({"id": [2, 3]}))
    data = rt.crafter.manifest(sid, [(DELETED, f1, s1), (DELETED, f2, s2), (ADDED, compacted, 0)])
    intent = remove_delete(rt, delete, 3, data=[data], operation="replace", sid=sid)
    assert intent.actions == {Action.REWRITE} and intent.evidence.verified
