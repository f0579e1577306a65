"""classify_commit on hand-written manifests: rewrites, lying manifests, refs.

The base is a real pyiceberg table (two appends: ``f1`` with 2 rows, ``f2`` with 1 row, each in
its own manifest); new snapshots are written by ``tests.support.commit_capture.Crafter`` into the
table's metadata folder. Crafted data files (``new_data``) are written, as their entries describe
them, under ``CRAFTED_DATA_DIR``, which the table admits as its ``write.data.path``
(``confined_crafter``).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from urllib.parse import urlparse

import pytest
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriterV2,
)
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC

from proxy.governance import Action
from tests.support.commit_capture import CRAFTED_DATA_DIR, Crafter, new_data

ADDED, EXISTING, DELETED = ManifestEntryStatus.ADDED, ManifestEntryStatus.EXISTING, \
    ManifestEntryStatus.DELETED
_ids = itertools.count(1000)


CRAFTED_DATA_ROOT = CRAFTED_DATA_DIR.as_uri()  # where ``new_data`` files are


def confined_crafter(folder: Path) -> Crafter:
    """``Crafter.with_two_appends`` writing into the table's metadata folder, with crafted data
    files' root set as the table's ``write.data.path`` (after the real appends)."""
    crafter = Crafter.with_two_appends(folder)
    with crafter.table.transaction() as transaction:
        transaction.set_properties({"write.data.path": CRAFTED_DATA_ROOT})
    table = crafter.catalog.load_table(crafter.table.name())
    return Crafter(crafter.catalog, table, Path(urlparse(table.location()).path) / "metadata")


@pytest.fixture()
def crafter(tmp_path: Path) -> Crafter:
    return confined_crafter(tmp_path)


Relisted = tuple[ManifestEntryStatus, DataFile, int, int]  # status, file, data seq, snapshot id


def live_entries(crafter: Crafter) -> tuple[Relisted, Relisted]:
    """(f1, f2) as EXISTING entries exactly as a writer re-lists them: original sequence numbers
    and snapshot ids."""
    entries = [(EXISTING, e.data_file, e.sequence_number or 0, e.snapshot_id or 0)
               for m in crafter.parent_manifests() for e in m.fetch_manifest_entry(crafter.table.io)
               if e.data_file.content == DataFileContent.DATA]
    f1, f2 = sorted(entries, key=lambda e: -e[1].record_count)
    return f1, f2


def write_manifest(crafter: Crafter, snapshot_id: int, entries: list[Relisted],
                   file_sequence: int | None = None) -> ManifestFile:
    """A data manifest added by ``snapshot_id`` whose entries carry their own snapshot ids (and
    data sequence numbers; file sequence numbers equal them unless ``file_sequence`` is given)."""
    out = crafter.table.io.new_output(str(crafter.folder / f"r-{next(_ids)}.avro"))
    with ManifestWriterV2(UNPARTITIONED_PARTITION_SPEC, crafter.table.schema(), out, snapshot_id,
                          "null") as writer:
        for status, file, sequence, entry_snapshot in entries:
            writer.add_entry(ManifestEntry.from_args(
                status=status, snapshot_id=entry_snapshot, sequence_number=sequence,
                file_sequence_number=sequence if file_sequence is None else file_sequence,
                data_file=file))
    return writer.to_manifest_file()


def test_replace_with_matching_counts_but_other_rows_is_not_a_rewrite(crafter: Crafter) -> None:
    """Counts that match prove nothing: the added file (ids 0-2) is read and its rows are not
    the removed ones (ids 1-3) (honest rewrites are in ``test_rewrite_rows``)."""
    (f1, s1), (f2, s2) = crafter.live()
    sid = next(_ids)
    merged = crafter.manifest(sid, [(DELETED, f1, s1), (DELETED, f2, s2),
                                    (ADDED, new_data("g", 3), 0)])
    snapshot = crafter.snapshot(sid, [merged], "replace", **{"added-records": "3",
                                                             "deleted-records": "3"})
    intent = crafter.classify(crafter.body(snapshot))
    assert intent.actions == {Action.UPDATE, Action.REWRITE}
    assert "are not the 3 live rows" in " ".join(intent.evidence.row_checks)


def test_replace_that_grows_is_update(crafter: Crafter) -> None:
    (f1, s1), (f2, s2) = crafter.live()
    sid = next(_ids)
    merged = crafter.manifest(sid, [(DELETED, f1, s1), (DELETED, f2, s2),
                                    (ADDED, new_data("g", 4), 0)])
    intent = crafter.classify(crafter.body(crafter.snapshot(sid, [merged], "replace")))
    # UPDATE by its manifests; the false 'replace' claim needs REWRITE too (readers skip it)
    assert intent.actions == {Action.UPDATE, Action.REWRITE}
    assert "claims 'replace' but its manifests show UPDATE" in (intent.evidence.mismatch or "")


def test_replace_that_only_removes_is_not_a_rewrite(crafter: Crafter) -> None:
    (f1, s1), _ = crafter.live()
    sid = next(_ids)
    m2 = crafter.parent_manifests()[0]
    gone = crafter.manifest(sid, [(DELETED, f1, s1)])
    intent = crafter.classify(crafter.body(crafter.snapshot(sid, [gone, m2], "replace")))
    assert intent.actions == {Action.DELETE, Action.REWRITE} and not intent.evidence.verified


def test_rewriting_only_manifests_is_rewrite(crafter: Crafter) -> None:
    f1, f2 = live_entries(crafter)
    sid = next(_ids)
    merged = write_manifest(crafter, sid, [f1, f2])
    intent = crafter.classify(crafter.body(crafter.snapshot(sid, [merged], "replace")))
    assert intent.actions == {Action.REWRITE} and intent.evidence.verified


def test_silently_dropped_manifest_deletes_data(crafter: Crafter) -> None:
    m2 = crafter.parent_manifests()[0]  # the second append's; the first's is dropped
    sid = next(_ids)
    added = crafter.manifest(sid, [(ADDED, new_data("h", 1), 0)])
    snapshot = crafter.snapshot(sid, [added, m2], "append", **{"added-data-files": "1"})
    intent = crafter.classify(crafter.body(snapshot))
    assert intent.actions == {Action.UPDATE}
    assert intent.evidence.counts.removed_data_files == 1
    mismatch = intent.evidence.mismatch or ""
    assert "silently dropped" in mismatch and "claims 'append'" in mismatch


def test_existing_entry_without_an_original_invents_history(crafter: Crafter) -> None:
    """An EXISTING entry no replaced manifest held claims an old snapshot and sequence number
    (so deletes may not apply to it): not an INSERT."""
    [m2, m1] = crafter.parent_manifests()
    sid = next(_ids)
    smuggled = crafter.manifest(sid, [(EXISTING, new_data("x", 5), 1)], entry_snapshot=1)
    intent = crafter.classify(crafter.body(crafter.snapshot(sid, [smuggled, m2, m1], "append")))
    assert intent.actions == {Action.UPDATE}
    assert intent.evidence.counts.added_records == 5
    mismatch = intent.evidence.mismatch or ""
    assert f"EXISTING entry for {CRAFTED_DATA_ROOT}/x.parquet, which no replaced manifest held" \
        in mismatch


def test_re_adding_a_held_file_is_an_update(crafter: Crafter) -> None:
    """Dropping f1's manifest and listing f1 as ADDED gives it a new sequence number, so deletes
    that applied to it stop applying."""
    (f1, _), _ = crafter.live()
    [m2, _m1] = crafter.parent_manifests()
    sid = next(_ids)
    again = crafter.manifest(sid, [(ADDED, f1, 0), (ADDED, new_data("z", 1), 0)])
    intent = crafter.classify(crafter.body(crafter.snapshot(sid, [again, m2], "append")))
    assert intent.actions == {Action.UPDATE}
    assert f"ADDED entry re-adds {f1.file_path}" in (intent.evidence.mismatch or "")


def test_entries_and_manifests_of_another_snapshot_rewrite_history(crafter: Crafter) -> None:
    """Dated to snapshot 42, the new rows would be taken for 42's by incremental readers."""
    [m2, m1] = crafter.parent_manifests()
    sid = next(_ids)
    foreign = crafter.manifest(42, [(ADDED, new_data("y", 1), 0)])
    foreign.sequence_number = foreign.min_sequence_number = 3
    intent = crafter.classify(crafter.body(crafter.snapshot(sid, [foreign, m2, m1], "append")))
    assert intent.actions == {Action.UPDATE} and not intent.evidence.verified
    mismatch = intent.evidence.mismatch or ""
    assert "not added by snapshot" in mismatch and "another snapshot id" in mismatch


def test_staged_snapshot_is_classified_without_a_ref(crafter: Crafter) -> None:
    [m2, m1] = crafter.parent_manifests()
    sid = next(_ids)
    added = crafter.manifest(sid, [(ADDED, new_data("s", 1), 0)])
    intent = crafter.classify(crafter.body(crafter.snapshot(sid, [added, m2, m1], "append"),
                                           ref=None))
    assert intent.actions == {Action.INSERT} and intent.evidence.verified


def test_new_branch_from_current_snapshot_manages_snapshots(crafter: Crafter) -> None:
    [m2, m1] = crafter.parent_manifests()
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
