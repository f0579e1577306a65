"""A data file listed again while a kept manifest still holds it: deletes stop applying.

A ``writer`` holding only INSERT "appends" a fresh manifest that lists, as ADDED, a data file the
snapshot keeps live in its parent's manifest. The new listing gets a new, higher data sequence
number, so the position deletes, deletion vectors and equality deletes that applied to the file
do not apply to it: the deleted rows come back (scan planning gives the new listing no delete
files; Spark then reads the rows again). While delete files
are live, such a snapshot rewrites history: UPDATE, unverified. An honest append stays INSERT.

The base is a real table ``db.t (id long)`` (``tests.support.row_files``): ``f1`` (ids 1, 2;
sequence 1) and ``f2`` (id 3; sequence 2), each in its own manifest; crafted manifests and files
are written under the table's location, as confinement requires.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.manifest import DataFile, ManifestContent, ManifestEntryStatus, ManifestFile

from proxy.commits import CommitIntent, CommitLimits, CommitTooLarge, UnverifiableCommit
from proxy.commits.confine import table_locations
from proxy.commits.manifests import ManifestReader
from proxy.governance import Action
from tests.support.row_files import RowTable, v3_delete_manifest

ADDED, EXISTING, DELETED = ManifestEntryStatus.ADDED, ManifestEntryStatus.EXISTING, \
    ManifestEntryStatus.DELETED
SCHEMA = pa.schema([pa.field("id", pa.int64(), False)])
_ids = itertools.count(7000)


@pytest.fixture()
def rt(tmp_path: Path) -> RowTable:
    return RowTable.create(tmp_path, SCHEMA, [pa.table({"id": [1, 2]}, schema=SCHEMA),
                                             pa.table({"id": [3]}, schema=SCHEMA)])


def files(rt: RowTable) -> tuple[tuple[DataFile, int], tuple[DataFile, int]]:
    f1, f2 = rt.data_files()
    return f1, f2


def add_deletes(rt: RowTable, delete: DataFile, v3: bool = False) -> None:
    """Commit a merge-on-read delete adding ``delete`` (a verified DELETE)."""
    sid = next(_ids)
    manifest = v3_delete_manifest(rt.crafter, sid, [(ADDED, delete, 0)]) if v3 \
        else rt.crafter.manifest(sid, [(ADDED, delete, 0)], deletes=True)
    snapshot = rt.crafter.snapshot(sid, [manifest, *rt.crafter.parent_manifests()], "delete")
    intent = rt.crafter.classify(rt.crafter.body(snapshot))
    assert intent.actions == {Action.DELETE} and intent.evidence.verified
    rt.crafter.apply(snapshot)


def append(rt: RowTable, listed: list[tuple[ManifestEntryStatus, DataFile, int]],
           apply: bool = False, new_file: bool = True) -> CommitIntent:
    """Classify an "append" of ``listed`` (and a new file if ``new_file``) in one fresh
    manifest, keeping every manifest of the parent; commit it too if ``apply``."""
    sid = next(_ids)
    if new_file:
        listed = [*listed, (ADDED, rt.write_data("new", pa.table({"id": [9]})), 0)]
    fresh = rt.crafter.manifest(sid, listed)
    snapshot = rt.crafter.snapshot(sid, [fresh, *rt.crafter.parent_manifests()], "append",
                                   **{"added-data-files": str(len(listed))})
    intent = rt.crafter.classify(rt.crafter.body(snapshot))
    if apply:
        rt.crafter.apply(snapshot)
    return intent


def assert_listed_again(intent: CommitIntent, data: DataFile, status: str = "ADDED") -> None:
    assert intent.actions == {Action.UPDATE}, intent.evidence.mismatch
    assert not intent.evidence.verified
    mismatch = intent.evidence.mismatch or ""
    assert f"{status} entry lists {data.file_path} again, which kept manifest" in mismatch, \
        mismatch


def test_re_adding_a_file_with_a_position_delete_is_an_update(rt: RowTable) -> None:
    (f1, _), _ = files(rt)
    add_deletes(rt, rt.write_positions("d1", [(f1.file_path, 0)], scoped=f1.file_path))
    intent = append(rt, [(ADDED, f1, 0)], apply=True)
    assert_listed_again(intent, f1)
    assert intent.evidence.counts.added_records == 3
    plan = [len(t.delete_files) for t in rt.table.scan().plan_files()
            if t.file.file_path == f1.file_path]
    assert sorted(plan) == [0, 1], "the new listing escapes the delete (Spark reads row 1 again)"


def test_honest_append_to_a_table_with_deletes_stays_an_insert(rt: RowTable) -> None:
    (f1, _), _ = files(rt)
    add_deletes(rt, rt.write_positions("d1", [(f1.file_path, 0)], scoped=f1.file_path))
    intent = append(rt, [])
    assert intent.actions == {Action.INSERT}, intent.evidence.mismatch
    assert intent.evidence.verified


def test_re_adding_a_file_with_an_equality_delete_is_an_update(rt: RowTable) -> None:
    (f1, _), _ = files(rt)
    add_deletes(rt, rt.write_equality("e1", pa.table({"id": [1]}), [1]))
    assert_listed_again(append(rt, [(ADDED, f1, 0)]), f1)


def test_re_adding_a_file_with_a_deletion_vector_is_an_update(rt: RowTable) -> None:
    _, (f2, _) = files(rt)
    add_deletes(rt, rt.write_vector("dv1", f2.file_path, [0]), v3=True)
    assert_listed_again(append(rt, [(ADDED, f2, 0)]), f2)


def test_existing_entry_for_a_kept_file_is_an_update(rt: RowTable) -> None:
    """Re-listing it EXISTING, with its own sequence number, lists it live twice all the same."""
    (f1, s1), _ = files(rt)
    add_deletes(rt, rt.write_positions("d1", [(f1.file_path, 0)], scoped=f1.file_path))
    assert_listed_again(append(rt, [(EXISTING, f1, s1)]), f1, "EXISTING")


def test_a_delete_added_in_the_same_snapshot_counts(rt: RowTable) -> None:
    (f1, _), _ = files(rt)
    sid = next(_ids)
    again = rt.crafter.manifest(sid, [(ADDED, f1, 0)])
    eq = rt.crafter.manifest(sid, [(ADDED, rt.write_equality("e", pa.table({"id": [1]}), [1]),
                                    0)], deletes=True)
    snapshot = rt.crafter.snapshot(sid, [again, eq, *rt.crafter.parent_manifests()], "overwrite")
    assert_listed_again(rt.crafter.classify(rt.crafter.body(snapshot)), f1)


def test_without_live_deletes_a_second_listing_is_not_looked_for(rt: RowTable) -> None:
    """No delete file applies to the file, so its second listing hides no deletion: the kept
    manifests are not read (that would cost every append) and the duplicate passes as an
    INSERT of its rows (documented limit)."""
    (f1, _), _ = files(rt)
    intent = append(rt, [(ADDED, f1, 0)])
    assert intent.actions == {Action.INSERT} and intent.evidence.verified


def test_removing_one_listing_cannot_orphan_a_delete_file(rt: RowTable) -> None:
    """With ``f1`` listed twice (added again while no delete existed) and a file-scoped delete
    for it, dropping one listing with the delete file looks like the orphaned-delete DELETE, but
    ``f1`` stays live in the other listing and its deleted row returns: an UPDATE."""
    (f1, _), _ = files(rt)
    assert append(rt, [(ADDED, f1, 0)], apply=True, new_file=False).actions == {Action.INSERT}
    [again] = [m for m in data_manifests(rt) if m.added_snapshot_id
               == rt.table.metadata.current_snapshot_id]
    again_sequence = again.sequence_number
    delete = rt.write_positions("d1", [(f1.file_path, 0)], scoped=f1.file_path)
    add_deletes(rt, delete)
    sid = next(_ids)
    dropped = rt.crafter.manifest(sid, [(DELETED, f1, again_sequence)])
    gone = rt.crafter.manifest(sid, [(DELETED, delete, rt.table.metadata.last_sequence_number)],
                               deletes=True)
    others = [m for m in data_manifests(rt) if m.manifest_path != again.manifest_path]
    intent = rt.crafter.classify(rt.crafter.body(rt.crafter.snapshot(
        sid, [dropped, gone, *others], "delete")))
    assert intent.actions == {Action.UPDATE}, intent.evidence.mismatch
    assert f"{f1.file_path} is removed while kept manifest" in (intent.evidence.mismatch or "")


def test_a_file_listed_twice_in_fresh_manifests_is_refused(rt: RowTable) -> None:
    new = rt.write_data("twice", pa.table({"id": [9]}))
    sid = next(_ids)
    twice = [rt.crafter.manifest(sid, [(ADDED, new, 0)]) for _ in range(2)]
    snapshot = rt.crafter.snapshot(sid, [*twice, *rt.crafter.parent_manifests()], "append")
    with pytest.raises(UnverifiableCommit, match="is listed live twice"):
        rt.crafter.classify(rt.crafter.body(snapshot))


def data_manifests(rt: RowTable) -> list[ManifestFile]:
    return rt.manifests(ManifestContent.DATA)


def reader(rt: RowTable, max_entries: int = 1000,
           scope: tuple[str, str] | None = None) -> ManifestReader:
    metadata = rt.table.metadata
    return ManifestReader(rt.table.io, table_locations(metadata, {}),
                          CommitLimits(max_entries=max_entries),
                          scope or (str(metadata.table_uuid), metadata.location))


def test_committed_manifests_are_cached_claimed_ones_are_not(rt: RowTable) -> None:
    snapshot = rt.table.current_snapshot()
    assert snapshot is not None
    warm = reader(rt)
    committed = warm.manifests(snapshot.manifest_list)
    first = {m.manifest_path: warm.live_keys(m) for m in committed}
    for manifest in committed:
        Path(manifest.manifest_path.removeprefix("file:")).unlink()
    fresh = reader(rt)
    fresh.manifests(snapshot.manifest_list)
    assert {m.manifest_path: fresh.live_keys(m) for m in committed} == first
    assert fresh.entries_read == 2, "a cache hit still counts against the entries limit"
    claimed = reader(rt)
    claimed.claimed_manifests(snapshot.manifest_list)
    with pytest.raises(UnverifiableCommit, match="could not be read"):
        claimed.live_keys(committed[0])


def test_cached_manifests_serve_only_their_own_table(rt: RowTable) -> None:
    """The process-wide caches are keyed by the table (uuid and location): another table naming
    the same files reads them itself, and a reader without a scope shares nothing."""
    snapshot = rt.table.current_snapshot()
    assert snapshot is not None
    warm = reader(rt)
    committed = warm.manifests(snapshot.manifest_list)
    for manifest in committed:
        warm.live_keys(manifest)
    for manifest in committed:
        Path(manifest.manifest_path.removeprefix("file:")).unlink()
    assert reader(rt).manifests(snapshot.manifest_list) == committed  # its own: cached
    for other in (reader(rt, scope=("another-uuid", rt.table.metadata.location)),
                  ManifestReader(rt.table.io, table_locations(rt.table.metadata, {}))):
        listed = other.manifests(snapshot.manifest_list)
        with pytest.raises(UnverifiableCommit, match="could not be read"):
            other.live_keys(listed[0])


def test_cache_hits_count_against_the_entries_limit(rt: RowTable) -> None:
    snapshot = rt.table.current_snapshot()
    assert snapshot is not None
    warm = reader(rt)
    [m2, m1] = warm.manifests(snapshot.manifest_list)
    warm.live_keys(m1), warm.live_keys(m2)
    limited = reader(rt, max_entries=1)
    limited.manifests(snapshot.manifest_list)
    limited.live_keys(m1)
    with pytest.raises(CommitTooLarge):
        limited.live_keys(m2)


def test_a_landed_commits_lists_are_remembered_as_verified(rt: RowTable) -> None:
    """A new snapshot's list is read afresh while it is a claim; once its commit landed as
    classified (``remember_verified``), the next commit's parent comes from the cache, with the
    manifests the verification read."""
    snapshot = rt.table.current_snapshot()
    assert snapshot is not None
    claiming = reader(rt)
    claimed = claiming.claimed_manifests(snapshot.manifest_list)
    Path(snapshot.manifest_list.removeprefix("file:")).unlink()
    with pytest.raises(UnverifiableCommit, match="could not be read"):
        reader(rt).manifests(snapshot.manifest_list)  # not remembered before it landed
    claiming.remember_verified()
    assert reader(rt).manifests(snapshot.manifest_list) == claimed
    with pytest.raises(UnverifiableCommit, match="could not be read"):
        reader(rt).claimed_manifests(snapshot.manifest_list)  # a claim is always read
