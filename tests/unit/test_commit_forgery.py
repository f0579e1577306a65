"""Forged bookkeeping in crafted commits: what a ``writer`` holding only INSERT must not pass.

Each attack is a real commit against a real table (``tests.support.row_files``: ``db.t (id long)``
with ``f1`` (ids 1, 2; sequence 1) and ``f2`` (id 3; sequence 2), each in its own manifest), its
manifests and files written under the table's location. Every attack claims ``append`` and would
classify as INSERT if its forgery were believed:

* a tombstone (DELETED entry) for a live file a kept manifest still holds: snapshot expiry then
  deletes the live file (``history``);
* a fresh manifest's manifest-list record that its entries contradict (counts, sequence numbers,
  partition summaries): readers skip or mis-sequence it (``listing``);
* a forged ``min_sequence_number`` used as the delete-expiry floor, and removed delete files
  passing as what the summary claims (``diff``, ``rules``);
* a live file added again under another spelling of its path (``file:/x`` for ``file:///x``):
  readers match position deletes by exact string, so the deleted rows return (``manifests``);
* moving a tag to a new snapshot (``refs``).

Honest commits of the same shapes stay as they were.
"""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import EqualTo
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriterV2,
    PartitionFieldSummary,
)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.update import SetSnapshotRefUpdate
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField, StringType

from proxy.commits import CommitIntent, UnverifiableCommit, classify_commit
from proxy.governance import Action
from tests.support.commit_capture import Crafter, RecordingSqlCatalog
from tests.support.row_files import RowTable

ADDED, EXISTING, DELETED = ManifestEntryStatus.ADDED, ManifestEntryStatus.EXISTING, \
    ManifestEntryStatus.DELETED
SCHEMA = pa.schema([pa.field("id", pa.int64(), False)])
_ids = itertools.count(9100)


@pytest.fixture()
def rt(tmp_path: Path) -> RowTable:
    return RowTable.create(tmp_path, SCHEMA, [pa.table({"id": [1, 2]}, schema=SCHEMA),
                                             pa.table({"id": [3]}, schema=SCHEMA)])


def classify(rt: RowTable, manifests: list[ManifestFile], sid: int, operation: str = "append",
             apply: bool = False) -> CommitIntent:
    snapshot = rt.crafter.snapshot(sid, manifests, operation)
    intent = rt.crafter.classify(rt.crafter.body(snapshot))
    if apply:
        rt.crafter.apply(snapshot)
    return intent


def assert_rewrites(intent: CommitIntent, reason: str) -> None:
    assert intent.actions == {Action.UPDATE}, intent.evidence.mismatch
    assert not intent.evidence.verified
    assert reason in (intent.evidence.mismatch or ""), intent.evidence.mismatch


def new_data(rt: RowTable, ids: list[int]) -> DataFile:
    return rt.write_data("new", pa.table({"id": ids}))


def add_position_delete(rt: RowTable, target: DataFile, position: int) -> DataFile:
    """Commit (through classification: a verified DELETE) a position delete on ``target``."""
    sid = next(_ids)
    delete = rt.write_positions("d", [(target.file_path, position)])
    manifest = rt.crafter.manifest(sid, [(ADDED, delete, 0)], deletes=True)
    intent = classify(rt, [manifest, *rt.crafter.parent_manifests()], sid, "delete", apply=True)
    assert intent.actions == {Action.DELETE} and intent.evidence.verified
    return delete


# 1. Tombstones ---------------------------------------------------------------------------------

def test_tombstone_for_a_file_a_kept_manifest_holds_live_is_an_update(rt: RowTable) -> None:
    """Classified INSERT, the tombstone would let ``expireSnapshots`` delete ``f1`` while every
    manifest still lists it live: the table's reads fail (attack a4)."""
    (f1, s1), _ = rt.data_files()
    sid = next(_ids)
    fresh = rt.crafter.manifest(sid, [(DELETED, f1, s1), (ADDED, new_data(rt, [9]), 0)])
    intent = classify(rt, [*rt.crafter.parent_manifests(), fresh], sid)
    assert_rewrites(intent, f"DELETED entry for {f1.file_path}, which no replaced manifest held "
                            "live")
    assert intent.evidence.counts.removed_data_files == 0  # the file stays live: no DELETE


def test_tombstone_for_a_file_never_live_is_an_update(rt: RowTable) -> None:
    sid = next(_ids)
    stranger = new_data(rt, [7])  # a file of the table's location no snapshot ever listed
    fresh = rt.crafter.manifest(sid, [(DELETED, stranger, 1), (ADDED, new_data(rt, [9]), 0)])
    assert_rewrites(classify(rt, [*rt.crafter.parent_manifests(), fresh], sid),
                    f"DELETED entry for {stranger.file_path}, which no replaced manifest held")


def test_tombstone_beside_its_existing_copy_is_an_update(rt: RowTable) -> None:
    """``f1``'s manifest is dropped and ``f1`` re-listed EXISTING, as a merge does, and also
    DELETED: the file stays live while its tombstone lets expiry delete it."""
    (f1, s1), (f2, _) = rt.data_files()
    kept = [m for m in rt.crafter.parent_manifests()
            if f2.file_path in {e.data_file.file_path
                                for e in m.fetch_manifest_entry(rt.table.io)}]
    sid = next(_ids)
    existing = rt.crafter.manifest(sid, [(EXISTING, f1, s1)],
                                   entry_snapshot=_first_snapshot(rt))
    tomb = rt.crafter.manifest(sid, [(DELETED, f1, s1), (ADDED, new_data(rt, [9]), 0)])
    assert_rewrites(classify(rt, [*kept, existing, tomb], sid),
                    f"{f1.file_path} is listed more than once in the new manifests")


# 2. Manifest-list records ------------------------------------------------------------------------

def _fresh_append(rt: RowTable, sid: int) -> ManifestFile:
    return rt.crafter.manifest(sid, [(ADDED, new_data(rt, [9]), 0)])


@pytest.mark.parametrize(("field", "value", "reason"), [
    (7, 0, "added_files_count"),  # readers skip a manifest that says it adds nothing
    (10, 0, "added_rows_count"),
    (8, 1, "existing_files_count"),
    (5, 10**9, "min_sequence_number"),  # Java's next commit drops every delete file as expired
    (4, 10**9, "sequence_number"),  # its files escape every later delete
])
def test_fresh_manifest_record_contradicting_its_entries_is_an_update(
        rt: RowTable, field: int, value: int, reason: str) -> None:
    sid = next(_ids)
    fresh = _fresh_append(rt, sid)
    fresh[field] = value
    assert_rewrites(classify(rt, [*rt.crafter.parent_manifests(), fresh], sid),
                    f"disagrees with its entries in {reason}")


def test_fresh_manifest_dated_to_another_snapshot_is_an_update(rt: RowTable) -> None:
    sid = next(_ids)
    fresh = _fresh_append(rt, sid)
    fresh.sequence_number = fresh.min_sequence_number = rt.table.metadata.last_sequence_number + 1
    fresh[6] = _first_snapshot(rt)  # added_snapshot_id
    assert_rewrites(classify(rt, [*rt.crafter.parent_manifests(), fresh], sid),
                    f"not added by snapshot {sid}")


def test_added_entry_with_a_later_file_sequence_number_is_an_update(rt: RowTable) -> None:
    """An ADDED entry with explicit sequence numbers above the snapshot's escapes deletes."""
    sid = next(_ids)
    out = rt.table.io.new_output(str(rt.crafter.folder / f"m-{uuid.uuid4()}.avro"))
    with ManifestWriterV2(rt.table.spec(), rt.table.schema(), out, sid, "null") as writer:
        writer.add_entry(ManifestEntry.from_args(
            status=ADDED, snapshot_id=sid, sequence_number=10**9, file_sequence_number=10**9,
            data_file=new_data(rt, [9])))
    fresh = writer.to_manifest_file()
    fresh.min_sequence_number = 0
    assert_rewrites(classify(rt, [*rt.crafter.parent_manifests(), fresh], sid),
                    "file_sequence_number of an ADDED entry")


def test_merged_manifest_with_a_forged_floor_is_an_update(rt: RowTable) -> None:
    """Attack a2 (minseq): the writer merges the data manifests (EXISTING copies, as Java's
    MergeAppend does) with its new file and claims a floor above every live file."""
    (f1, s1), (f2, s2) = rt.data_files()
    add_position_delete(rt, f1, 1)
    sid = next(_ids)
    first = _first_snapshot(rt)
    appended = _fresh_append(rt, sid)
    honest = _merged(rt, sid, [(f1, s1, first), (f2, s2, _second_snapshot(rt))])
    deletes = _delete_manifests(rt)
    intent = classify(rt, [honest, appended, *deletes], sid)
    assert intent.actions == {Action.INSERT} and intent.evidence.verified, \
        intent.evidence.mismatch
    forged = _merged(rt, sid, [(f1, s1, first), (f2, s2, _second_snapshot(rt))])
    forged.min_sequence_number = 10**9
    assert_rewrites(classify(rt, [forged, appended, *deletes], sid),
                    "disagrees with its entries in min_sequence_number")


def _merged(rt: RowTable, sid: int, files: list[tuple[DataFile, int, int]]) -> ManifestFile:
    out = rt.table.io.new_output(str(rt.crafter.folder / f"m-{uuid.uuid4()}.avro"))
    with ManifestWriterV2(rt.table.spec(), rt.table.schema(), out, sid, "null") as writer:
        for file, sequence, added_by in files:
            writer.add_entry(ManifestEntry.from_args(
                status=EXISTING, snapshot_id=added_by, sequence_number=sequence,
                file_sequence_number=sequence, data_file=file))
    return writer.to_manifest_file()


def _first_snapshot(rt: RowTable) -> int:
    return rt.table.metadata.snapshots[0].snapshot_id


def _second_snapshot(rt: RowTable) -> int:
    return rt.table.metadata.snapshots[1].snapshot_id


# 2b. Partition summaries ---------------------------------------------------------------------

REGION_SCHEMA = Schema(NestedField(1, "id", LongType(), required=False),
                       NestedField(2, "region", StringType(), required=False))
REGION_ARROW = pa.schema([("id", pa.int64()), ("region", pa.string())])


@pytest.fixture()
def regions(tmp_path: Path) -> RecordingSqlCatalog:
    catalog = RecordingSqlCatalog("p", uri=f"sqlite:///{tmp_path}/p.db",
                                  warehouse=tmp_path.as_uri())
    catalog.create_namespace("db")
    table = catalog.create_table("db.r", REGION_SCHEMA, partition_spec=PartitionSpec(
        PartitionField(2, 1000, IdentityTransform(), "region")))
    table.append(pa.table({"id": [1, 2, 3], "region": ["eu", "us", None]}, schema=REGION_ARROW))
    return catalog


def _regions_crafter(catalog: SqlCatalog) -> Crafter:
    table = catalog.load_table("db.r")
    return Crafter(catalog, table, Path(urlparse(table.location()).path) / "metadata")


def _partitioned(crafter: Crafter, sid: int, region: str | None) -> ManifestFile:
    table = crafter.table
    path = f"{table.location()}/data/p-{uuid.uuid4().hex[:8]}.parquet"
    rows = pa.table({"id": [7], "region": [region]}, schema=REGION_ARROW).cast(
        schema_to_pyarrow(table.schema()))  # with the table's field ids, as writers write
    with table.io.new_output(path).create() as out:
        pq.write_table(rows, out)
    data = DataFile.from_args(content=DataFileContent.DATA, file_path=path,
                              file_format=FileFormat.PARQUET,
                              partition=Record(region), record_count=1,
                              file_size_in_bytes=len(table.io.new_input(path)))
    out = table.io.new_output(str(crafter.folder / f"m-{uuid.uuid4()}.avro"))
    with ManifestWriterV2(table.spec(), table.schema(), out, sid, "null") as writer:
        writer.add_entry(ManifestEntry.from_args(status=ADDED, snapshot_id=sid, data_file=data))
    return writer.to_manifest_file()


def _classify_partitioned(crafter: Crafter, fresh: ManifestFile, sid: int) -> CommitIntent:
    snapshot = crafter.snapshot(sid, [*crafter.parent_manifests(), fresh], "append")
    return crafter.classify(crafter.body(snapshot))


@pytest.mark.parametrize(("summary", "region"), [
    (PartitionFieldSummary(False, False, b"eu", b"us"), "zz"),  # filtered reads skip it
    (PartitionFieldSummary(False, False, b"zz", b"zz"), None),  # "region IS NULL" skips it
    (PartitionFieldSummary(True, False, None, None), "zz"),  # no bound: "all values null"
])
def test_partition_summary_not_covering_its_entries_is_an_update(
        regions: RecordingSqlCatalog, summary: PartitionFieldSummary,
        region: str | None) -> None:
    crafter = _regions_crafter(regions)
    sid = next(_ids)
    fresh = _partitioned(crafter, sid, region)
    honest = _classify_partitioned(crafter, fresh, sid)
    assert honest.actions == {Action.INSERT} and honest.evidence.verified, \
        honest.evidence.mismatch
    fresh[13] = [summary]  # partitions
    assert_rewrites(_classify_partitioned(crafter, fresh, sid),
                    "disagrees with its entries in partitions[0]")


def test_honest_partitioned_commits_stay_verified(regions: RecordingSqlCatalog) -> None:
    table = regions.load_table("db.r")
    regions.commits.clear()
    table.append(pa.table({"id": [4, 5], "region": ["ap", None]}, schema=REGION_ARROW))
    table.delete(EqualTo("region", "us"))
    table.overwrite(pa.table({"id": [6], "region": ["eu"]}, schema=REGION_ARROW),
                    EqualTo("region", "eu"))
    found = [classify_commit(c.body, c.base, table.io) for c in regions.commits]
    assert [sorted(a.value for a in i.actions) for i in found] == [
        ["INSERT"], ["DELETE"], ["UPDATE"]]
    assert all(i.evidence.verified for i in found), [i.evidence.mismatch for i in found]


# 3. The delete-expiry floor and removed delete files ------------------------------------------

def _delete_manifests(rt: RowTable) -> list[ManifestFile]:
    return [m for m in rt.crafter.parent_manifests() if m.content == ManifestContent.DELETES]


def _data_manifests(rt: RowTable) -> list[ManifestFile]:
    return [m for m in rt.crafter.parent_manifests() if m.content == ManifestContent.DATA]


def _remove_deletes(rt: RowTable, sid: int) -> list[ManifestFile]:
    """The parent's manifests with every delete file removed (a DELETED entry each)."""
    live = [(e.data_file, e.sequence_number or 0) for m in _delete_manifests(rt)
            for e in m.fetch_manifest_entry(rt.table.io)]
    tombs = rt.crafter.manifest(sid, [(DELETED, f, s) for f, s in live], deletes=True)
    return [*_data_manifests(rt), tombs]


def test_removing_a_delete_under_a_forged_floor_is_an_update(rt: RowTable) -> None:
    """Attack a3: a merged data manifest whose record claims a floor above every live file was
    committed (here straight to the catalog); removing the position delete on ``f1`` must not
    pass as expired, so the deleted row's return is an UPDATE."""
    (f1, s1), (f2, s2) = rt.data_files()
    add_position_delete(rt, f1, 1)
    sid = next(_ids)
    forged = _merged(rt, sid, [(f1, s1, _first_snapshot(rt)), (f2, s2, _second_snapshot(rt))])
    forged.min_sequence_number = 10**9
    classify(rt, [forged, *_delete_manifests(rt)], sid, apply=True)
    sid = next(_ids)
    intent = classify(rt, _remove_deletes(rt, sid), sid)
    assert intent.actions == {Action.UPDATE}, intent.evidence.mismatch
    assert intent.evidence.counts.removed_delete_files == 1


def _expire_setup(rt: RowTable) -> None:
    """A position delete (sequence 3), then f1 and f2 replaced by f3 (sequence 4): the delete
    applies to no live file any more."""
    (f1, s1), (f2, s2) = rt.data_files()
    add_position_delete(rt, f1, 1)
    sid = next(_ids)
    gone = rt.crafter.manifest(sid, [(DELETED, f1, s1), (DELETED, f2, s2),
                                     (ADDED, new_data(rt, [10]), 0)])
    classify(rt, [gone, *_delete_manifests(rt)], sid, "overwrite", apply=True)


def test_removing_only_expired_deletes_is_no_insert(rt: RowTable) -> None:
    """Nothing is re-exposed, but a snapshot that only removes delete files is a DELETE (a
    ``replace`` a REWRITE), never what an ``append`` claims."""
    _expire_setup(rt)
    sid = next(_ids)
    intent = classify(rt, _remove_deletes(rt, sid), sid)
    assert intent.actions == {Action.DELETE}, intent.evidence.mismatch
    sid = next(_ids)
    intent = classify(rt, _remove_deletes(rt, sid), sid, "replace")
    assert intent.actions == {Action.REWRITE} and intent.evidence.verified


def test_append_dropping_expired_deletes_stays_an_insert(rt: RowTable) -> None:
    """Java's merging append drops delete files older than every live data file: an INSERT."""
    _expire_setup(rt)
    sid = next(_ids)
    intent = classify(rt, [*_remove_deletes(rt, sid), _fresh_append(rt, sid)], sid)
    assert intent.actions == {Action.INSERT}, intent.evidence.mismatch


# 4. One physical file, two spellings -------------------------------------------------------------

@pytest.mark.parametrize("prefix", ["file:/", "file:////"])
def test_live_file_re_added_under_another_spelling_is_an_update(rt: RowTable,
                                                                prefix: str) -> None:
    """Attack a5: the alias is a new listing with a new sequence number; the position delete
    names ``file:///...`` exactly, so readers no longer apply it and row 2 returns."""
    (f1, _), _ = rt.data_files()
    add_position_delete(rt, f1, 1)
    alias = _respelled(f1, prefix)
    sid = next(_ids)
    fresh = rt.crafter.manifest(sid, [(ADDED, alias, 0)])
    assert_rewrites(classify(rt, [*rt.crafter.parent_manifests(), fresh], sid),
                    f"ADDED entry lists {alias.file_path} again, which kept manifest")


def test_one_new_file_listed_live_under_two_spellings_is_unverifiable(rt: RowTable) -> None:
    data = new_data(rt, [9])
    sid = next(_ids)
    fresh = rt.crafter.manifest(sid, [(ADDED, data, 0), (ADDED, _respelled(data, "file:/"), 0)])
    with pytest.raises(UnverifiableCommit, match="listed live twice"):
        classify(rt, [*rt.crafter.parent_manifests(), fresh], sid)


def _respelled(file: DataFile, prefix: str) -> DataFile:
    assert file.file_path.startswith("file:///")
    return DataFile.from_args(content=file.content,
                              file_path=prefix + file.file_path.removeprefix("file:///"),
                              file_format=file.file_format, partition=Record(),
                              record_count=file.record_count,
                              file_size_in_bytes=file.file_size_in_bytes)


# 5. Tags -----------------------------------------------------------------------------------------

def _tag(rt: RowTable, name: str) -> None:
    table: Table = rt.table
    rt.crafter.catalog.commit_table(table, (), (SetSnapshotRefUpdate(
        ref_name=name, type="tag", snapshot_id=table.metadata.current_snapshot_id),))
    rt.crafter.table = rt.crafter.catalog.load_table(table.name())


def test_moving_a_tag_to_a_new_snapshot_needs_manage_snapshots(rt: RowTable) -> None:
    """Attack a8: an "append" that points the ``release-1`` tag at its own snapshot."""
    _tag(rt, "release-1")
    sid = next(_ids)
    snapshot = rt.crafter.snapshot(sid, [*rt.crafter.parent_manifests(), _fresh_append(rt, sid)],
                                   "append")
    body: dict[str, Any] = {"requirements": [], "updates": [
        {"action": "add-snapshot", "snapshot": snapshot},
        {"action": "set-snapshot-ref", "ref-name": "release-1", "type": "tag",
         "snapshot-id": sid}]}
    assert rt.crafter.classify(body).actions == {Action.INSERT, Action.MANAGE_SNAPSHOTS}
    honest = rt.crafter.classify(rt.crafter.body(snapshot))  # main moves: the tag stays
    assert honest.actions == {Action.INSERT} and honest.evidence.verified
