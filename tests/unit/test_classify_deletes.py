"""classify_commit on delete files: which removals re-expose rows (UPDATE) and which cannot.

Same base as ``test_classify_crafted``: ``f1`` (2 rows, sequence 1) and ``f2`` (1 row,
sequence 2); the first position delete file added on top gets sequence 3.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    ManifestContent,
    ManifestEntryStatus,
    ManifestFile,
)

from proxy.commits.intent import CommitIntent
from proxy.governance import Action
from tests.support.commit_capture import Crafter, content_file, new_data

ADDED, EXISTING, DELETED = ManifestEntryStatus.ADDED, ManifestEntryStatus.EXISTING, \
    ManifestEntryStatus.DELETED
POS = DataFileContent.POSITION_DELETES
_ids = itertools.count(1000)


@pytest.fixture()
def crafter(tmp_path: Path) -> Crafter:
    return Crafter.with_two_appends(tmp_path)


def add_position_delete(crafter: Crafter, target: DataFile | None, records: int = 1,
                        name: str = "d1") -> DataFile:
    """Commit a snapshot adding one position delete file (file-scoped if ``target``)."""
    sid = next(_ids)
    delete = content_file(f"file:///nowhere/{name}-deletes.parquet", records, POS,
                          target.file_path if target else None)
    manifest = crafter.manifest(sid, [(ADDED, delete, 0)], deletes=True)
    snapshot = crafter.snapshot(sid, [manifest, *crafter.parent_manifests()], "delete")
    intent = crafter.classify(crafter.body(snapshot))
    assert intent.actions == {Action.DELETE}, "adding a delete file deletes rows"
    assert intent.evidence.counts.added_delete_files == 1 and intent.evidence.verified
    crafter.apply(snapshot)
    return delete


def delete_manifest(crafter: Crafter) -> ManifestFile:
    return next(m for m in crafter.parent_manifests() if m.content == ManifestContent.DELETES)


def data_manifests(crafter: Crafter) -> list[ManifestFile]:
    return [m for m in crafter.parent_manifests() if m.content == ManifestContent.DATA]


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
    (f1, _), _ = crafter.live()
    delete = add_position_delete(crafter, f1)
    intent = remove_delete(crafter, delete, 3)
    assert intent.actions == {Action.UPDATE}
    assert intent.evidence.counts.removed_delete_files == 1
    assert "claims 'delete' but its manifests show UPDATE" in (intent.evidence.mismatch or "")


def test_superseding_delete_file_is_a_delete(crafter: Crafter) -> None:
    (f1, _), (f2, _) = crafter.live()
    delete = add_position_delete(crafter, f1)
    merged = content_file("file:///nowhere/d2.parquet", 2, POS, f1.file_path)
    intent = remove_delete(crafter, delete, 3, [(ADDED, merged, 0)])
    assert intent.actions == {Action.DELETE} and intent.evidence.verified
    elsewhere = content_file("file:///nowhere/d3.parquet", 2, POS, f2.file_path)
    assert remove_delete(crafter, delete, 3, [(ADDED, elsewhere, 0)]).actions == {Action.UPDATE}


def test_delete_file_orphaned_with_its_data_file_is_a_delete(crafter: Crafter) -> None:
    (f1, s1), _ = crafter.live()
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
    (f1, s1), (f2, s2) = crafter.live()
    delete = add_position_delete(crafter, None)  # partition-scoped, sequence 3
    sid = next(_ids)
    newer = crafter.manifest(sid, [(ADDED, new_data("f3", 1), 0)])
    crafter.apply(crafter.snapshot(sid, [newer, *crafter.parent_manifests()], "append"))
    [newer_manifest] = [m for m in data_manifests(crafter) if m.added_snapshot_id == sid]
    sid = next(_ids)
    gone = crafter.manifest(sid, [(DELETED, f1, s1), (DELETED, f2, s2)])
    intent = remove_delete(crafter, delete, 3, data=[gone, newer_manifest], sid=sid)
    assert intent.actions == {Action.DELETE}, "only data from sequence 4 remains: d1 is moot"
    kept_old = crafter.manifest(sid, [(DELETED, f1, s1), (EXISTING, f2, s2)])
    intent = remove_delete(crafter, delete, 3, data=[kept_old, newer_manifest], sid=sid)
    assert intent.actions == {Action.UPDATE}, "f2 (sequence 2) is still live: d1 applied to it"


def test_rewrite_applying_deletes_is_rewrite(crafter: Crafter) -> None:
    (f1, s1), (f2, s2) = crafter.live()
    delete = add_position_delete(crafter, f1)
    sid = next(_ids)
    data = crafter.manifest(sid, [(DELETED, f1, s1), (DELETED, f2, s2),
                                  (ADDED, new_data("c", 2), 0)])
    intent = remove_delete(crafter, delete, 3, data=[data], operation="replace", sid=sid)
    assert intent.actions == {Action.REWRITE} and intent.evidence.verified
