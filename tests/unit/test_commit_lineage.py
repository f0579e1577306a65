"""Snapshot lineage: parents, v3 row ids, and how much one commit may make icegov read.

An attacker holding only INSERT

* adds a data snapshot that names no parent (or a stale one) while main is at X: on the embedded
  catalog the table's lineage, and its sequence numbers, would restart; it must be refused (400),
  while honest flows (an asserted append, create-or-replace, a staged snapshot, the first append
  of an empty table) still pass;
* in a format-3 table, gives new rows the row ids of existing ones or moves the table's
  ``next-row-id`` anywhere (``first-row-id``, ``added-rows``, a manifest's ``first_row_id``): the
  snapshot rewrites history, an UPDATE that is never verified;
* sends hundreds of snapshots each listing thousands of manifests: refused before reading (413)
  or once the commit has read ``max_list_records`` list records (400), and each list is parsed
  once per commit however often it is needed.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from pyiceberg.avro.file import AvroFile, AvroOutputFile
from pyiceberg.io import FileIO, InputFile, OutputFile
from pyiceberg.manifest import (
    MANIFEST_LIST_FILE_SCHEMAS,
    ManifestContent,
    ManifestEntryStatus,
    ManifestFile,
    PartitionFieldSummary,
    write_manifest_list,
)
from pyiceberg.table.metadata import TableMetadata, TableMetadataV3

from proxy.commits import (
    CommitIntent,
    CommitLimits,
    CommitTooLarge,
    UnverifiableCommit,
    check_commit_shape,
    classify_commit,
)
from proxy.errors import PayloadTooLarge
from proxy.governance import Action
from tests.support.commit_capture import Crafter, new_data
from tests.unit.test_classify_crafted import CRAFTED_DATA_ROOT, confined_crafter

ADDED = ManifestEntryStatus.ADDED
_ids = itertools.count(7000)


@pytest.fixture()
def crafter(tmp_path: Path) -> Crafter:
    return confined_crafter(tmp_path)


def append(crafter: Crafter, **changes: Any) -> dict[str, Any]:
    """A snapshot adding one file on top of main, with ``changes`` to its JSON."""
    sid = next(_ids)
    added = crafter.manifest(sid, [(ADDED, new_data(f"n{sid}", 1), 0)])
    snapshot = crafter.snapshot(sid, [added, *crafter.parent_manifests()], "append")
    return {**snapshot, **changes}


# 1. a data snapshot must be built on the ref's predecessor


@pytest.mark.parametrize("parent", [None, "first"])
def test_a_snapshot_on_another_parent_than_the_ref_is_refused(crafter: Crafter,
                                                              parent: str | None) -> None:
    """Parent null (lineage and sequence numbers restart) or a stale parent, asserted or not."""
    first = crafter.table.snapshots()[0].snapshot_id
    snapshot = append(crafter, **{"parent-snapshot-id": None if parent is None else first})
    for body in (crafter.body(snapshot), {**crafter.body(snapshot), "requirements": []}):
        with pytest.raises(UnverifiableCommit, match="but ref 'main' is at") as exc:
            crafter.classify(body)
        assert exc.value.status == 400


def test_a_snapshot_without_parent_field_is_refused(crafter: Crafter) -> None:
    snapshot = append(crafter)
    del snapshot["parent-snapshot-id"]
    with pytest.raises(UnverifiableCommit, match="names no parent"):
        crafter.classify(crafter.body(snapshot))


def test_a_chain_whose_bottom_skips_the_ref_is_refused(crafter: Crafter) -> None:
    """Two snapshots in one commit: the lower one names no parent."""
    lower = append(crafter, **{"parent-snapshot-id": None})
    upper = {**append(crafter), "snapshot-id": next(_ids),
             "parent-snapshot-id": lower["snapshot-id"]}
    body = crafter.body(upper)
    body["updates"].insert(0, {"action": "add-snapshot", "snapshot": lower})
    with pytest.raises(UnverifiableCommit, match=f"{lower['snapshot-id']} names no parent"):
        crafter.classify(body)


def test_honest_flows_build_on_the_predecessor(crafter: Crafter) -> None:
    """An asserted append, a staged snapshot and create-or-replace still pass."""
    appended = crafter.classify(crafter.body(append(crafter)))
    assert appended.actions == {Action.INSERT} and appended.evidence.verified
    staged = crafter.classify(crafter.body(append(crafter), ref=None))
    assert staged.actions == {Action.INSERT} and staged.evidence.verified
    sid = next(_ids)
    added = crafter.manifest(sid, [(ADDED, new_data(f"r{sid}", 1), 0)])
    replacing = crafter.body({**crafter.snapshot(sid, [added], "append"),
                              "parent-snapshot-id": None})
    replacing["requirements"] = []
    replacing["updates"].insert(0, {"action": "remove-snapshot-ref", "ref-name": "main"})
    assert crafter.classify(replacing).actions == {Action.UPDATE}


def test_first_append_to_an_empty_table_has_no_parent(tmp_path: Path) -> None:
    crafter = confined_crafter(tmp_path)
    table = crafter.catalog.create_table("db.empty", crafter.table.schema(),
                                         properties={"write.data.path": CRAFTED_DATA_ROOT})
    empty = Crafter(crafter.catalog, table, Path(urlparse(table.location()).path) / "metadata")
    sid = next(_ids)
    added = empty.manifest(sid, [(ADDED, new_data(f"e{sid}", 1), 0)])
    snapshot = empty.snapshot(sid, [added], "append")
    assert snapshot["parent-snapshot-id"] is None
    intent = classify_commit(empty.body(snapshot), empty.table.metadata, empty.table.io)
    assert intent.actions == {Action.INSERT} and intent.evidence.verified


# 2. format v3 row lineage

_FIRST_ROW_ID = 15
_SEQUENCE, _MIN_SEQUENCE, _UNASSIGNED = 4, 5, -1  # positions in the list record; not written


def with_row_id(manifest: ManifestFile, first_row_id: int | None,
                sequence_number: int | None = None) -> ManifestFile:
    """``manifest``'s list record in the v3 shape, with ``first_row_id`` (and, for a manifest
    of the new snapshot, its ``sequence_number`` as a manifest-list writer fills it in)."""
    values = [manifest[i] for i in range(_FIRST_ROW_ID)]
    if sequence_number is not None and values[_SEQUENCE] == _UNASSIGNED:
        values[_SEQUENCE] = values[_MIN_SEQUENCE] = sequence_number
    return ManifestFile(*values, first_row_id)


def write_v3_list(crafter: Crafter, records: list[ManifestFile]) -> str:
    path = str(crafter.folder / f"snap-v3-{next(_ids)}.avro")
    with AvroOutputFile[ManifestFile](crafter.table.io.new_output(path),
                                      MANIFEST_LIST_FILE_SCHEMAS[3], "manifest_file") as writer:
        writer.write_block(records)
    return path


def v3_base(crafter: Crafter, next_row_id: int) -> TableMetadata:
    """The crafter's table as a format-3 table whose current snapshot's manifests were assigned
    row ids 0 (the second append's manifest, 1 row) and 1 (the first's, 2 rows)."""
    m2, m1 = crafter.parent_manifests()
    raw = crafter.table.metadata.model_dump(by_alias=True)
    current = raw["current-snapshot-id"]
    for snapshot in raw["snapshots"]:
        if snapshot["snapshot-id"] == current:
            snapshot["manifest-list"] = write_v3_list(crafter, [with_row_id(m2, 0),
                                                                with_row_id(m1, 1)])
            snapshot["first-row-id"], snapshot["added-rows"] = 0, 3
    return TableMetadataV3.model_validate({**raw, "format-version": 3,
                                           "next-row-id": next_row_id})


def v3_append(crafter: Crafter, base: TableMetadata, first_row_id: int | None,
              added_rows: int | None, manifest_row_id: int | None, *,
              parent: dict[str, Any] | None = None) -> dict[str, Any]:
    """A v3 append of one 1-row file whose new manifest gets ``manifest_row_id``, keeping the
    manifests of main (or of ``parent``, a snapshot added by the same commit)."""
    sid = next(_ids)
    parent_list = _main_list(base) if parent is None else parent["manifest-list"]
    sequence = base.last_sequence_number + 1 + (parent is not None)
    added = crafter.manifest(sid, [(ADDED, new_data(f"v{sid}", 1), 0)])
    records = [with_row_id(added, manifest_row_id, sequence),
               *read_list(crafter.table.io, parent_list)]
    snapshot = {"snapshot-id": sid,
                "parent-snapshot-id": base.current_snapshot_id if parent is None
                else parent["snapshot-id"],
                "sequence-number": sequence,
                "timestamp-ms": 1, "manifest-list": write_v3_list(crafter, records),
                "summary": {"operation": "append"}, "schema-id": 0}
    if first_row_id is not None:
        snapshot["first-row-id"] = first_row_id
    if added_rows is not None:
        snapshot["added-rows"] = added_rows
    return snapshot


def _main_list(base: TableMetadata) -> str:
    snapshot = base.current_snapshot()
    assert snapshot is not None
    return snapshot.manifest_list


def read_list(io: FileIO, path: str) -> list[ManifestFile]:
    """A manifest list's records in the v3 shape (read directly: no reader's cache involved)."""
    with AvroFile[ManifestFile](io.new_input(path), MANIFEST_LIST_FILE_SCHEMAS[3],
                                read_types={-1: ManifestFile, 508: PartitionFieldSummary},
                                read_enums={517: ManifestContent}) as reader:
        return list(reader)


def classify_v3(crafter: Crafter, base: TableMetadata, *snapshots: dict[str, Any],
                ref: str | None = "main") -> CommitIntent:
    updates: list[dict[str, Any]] = [{"action": "add-snapshot", "snapshot": s} for s in snapshots]
    if ref is not None:
        updates.append({"action": "set-snapshot-ref", "ref-name": ref, "type": "branch",
                        "snapshot-id": snapshots[-1]["snapshot-id"]})
    body = {"requirements": [{"type": "assert-ref-snapshot-id", "ref": "main",
                              "snapshot-id": base.current_snapshot_id}], "updates": updates}
    return classify_commit(body, base, crafter.table.io)


def assert_rewrites_row_ids(intent: CommitIntent, phrase: str) -> None:
    assert intent.actions == {Action.UPDATE}, intent.evidence.mismatch
    assert not intent.evidence.verified
    assert phrase in (intent.evidence.mismatch or ""), intent.evidence.mismatch


def test_honest_v3_append_is_an_insert(crafter: Crafter) -> None:
    base = v3_base(crafter, next_row_id=10)
    intent = classify_v3(crafter, base, v3_append(crafter, base, 10, 1, 10))
    assert intent.actions == {Action.INSERT} and intent.evidence.verified, \
        intent.evidence.mismatch


def test_v3_append_that_leaves_its_manifest_without_row_ids_is_an_insert(
        crafter: Crafter) -> None:
    base = v3_base(crafter, next_row_id=10)
    intent = classify_v3(crafter, base, v3_append(crafter, base, 10, 0, None))
    assert intent.actions == {Action.INSERT} and intent.evidence.verified, \
        intent.evidence.mismatch


@pytest.mark.parametrize(("first", "added", "manifest", "phrase"), [
    (0, 1, 0, "has first-row-id 0, but the table's next row id is 10"),  # rewound
    (10, 1, 0, "assigns row ids out of sequence"),  # new rows take existing rows' ids
    (10, 2**63 - 10, 10, "has added-rows 9223372036854775798"),  # next-row-id to overflow
    (10, -4, 10, "has added-rows -4"),
    (10, 0, 10, "has added-rows 0, but its manifest list assigns ids to 1 rows"),
    (None, 1, 10, "has no first-row-id"),
    (10, None, 10, "has added-rows None"),
])
def test_forged_row_lineage_rewrites_history(crafter: Crafter, first: int | None,
                                             added: int | None, manifest: int | None,
                                             phrase: str) -> None:
    base = v3_base(crafter, next_row_id=10)
    intent = classify_v3(crafter, base, v3_append(crafter, base, first, added, manifest))
    assert_rewrites_row_ids(intent, phrase)


def test_second_snapshot_of_a_commit_continues_the_row_ids(crafter: Crafter) -> None:
    base = v3_base(crafter, next_row_id=10)
    lower = v3_append(crafter, base, 10, 1, 10)
    upper = v3_append(crafter, base, 11, 1, 11, parent=lower)
    intent = classify_v3(crafter, base, lower, upper)
    assert intent.actions == {Action.INSERT} and intent.evidence.verified, \
        intent.evidence.mismatch
    reused = classify_v3(crafter, base, lower, v3_append(crafter, base, 10, 1, 10, parent=lower))
    assert Action.UPDATE in reused.actions and not reused.evidence.verified
    assert "has first-row-id 10, but the table's next row id is 11" in (
        reused.evidence.mismatch or "")


def test_upgrade_to_v3_assigns_ids_to_kept_manifests_in_order(crafter: Crafter) -> None:
    """A v2 table upgraded by the commit: next row id 0, every data manifest gets ids."""
    base = crafter.table.metadata
    m2, m1 = crafter.parent_manifests()
    sid = next(_ids)
    added = crafter.manifest(sid, [(ADDED, new_data(f"u{sid}", 1), 0)])

    def commit(ids: list[int], added_rows: int) -> CommitIntent:
        sequence = base.last_sequence_number + 1
        records = [with_row_id(m, i, sequence)
                   for m, i in zip([added, m2, m1], ids, strict=True)]
        snapshot = {"snapshot-id": sid, "parent-snapshot-id": base.current_snapshot_id,
                    "sequence-number": sequence, "timestamp-ms": 1,
                    "manifest-list": write_v3_list(crafter, records), "first-row-id": 0,
                    "added-rows": added_rows, "summary": {"operation": "append"}}
        body = crafter.body(snapshot)
        body["updates"].insert(0, {"action": "upgrade-format-version", "format-version": 3})
        return classify_commit(body, base, crafter.table.io)

    honest = commit([0, 1, 2], 4)
    assert honest.actions == {Action.ALTER, Action.INSERT} and honest.evidence.verified, \
        honest.evidence.mismatch
    overlapping = commit([0, 0, 1], 3)
    assert Action.UPDATE in overlapping.actions and not overlapping.evidence.verified
    assert "out of sequence" in (overlapping.evidence.mismatch or "")


def test_v2_tables_do_not_check_row_lineage(crafter: Crafter) -> None:
    intent = crafter.classify(crafter.body(append(crafter, **{"first-row-id": 0,
                                                               "added-rows": -1})))
    assert intent.actions == {Action.INSERT} and intent.evidence.verified


def test_non_integer_row_lineage_is_unverifiable(crafter: Crafter) -> None:
    base = v3_base(crafter, next_row_id=10)
    snapshot = v3_append(crafter, base, 10, 1, 10)
    snapshot["added-rows"] = "1"
    with pytest.raises(UnverifiableCommit, match="added-rows must be an integer"):
        classify_v3(crafter, base, snapshot)


# 3. how much one commit may make icegov read


def test_too_many_snapshots_are_refused_before_any_read(crafter: Crafter) -> None:
    updates = [{"action": "add-snapshot", "snapshot": {
        "snapshot-id": i, "manifest-list": "file:///nowhere/list.avro"}} for i in range(3)]
    body = {"requirements": [], "updates": updates}
    limits = CommitLimits(max_snapshots=2)
    with pytest.raises(PayloadTooLarge, match="at most 2 snapshots") as exc:
        check_commit_shape(body, limits)
    assert exc.value.status == 413
    with pytest.raises(PayloadTooLarge):
        classify_commit(body, crafter.table.metadata, crafter.table.io, limits=limits)
    check_commit_shape(body, CommitLimits(max_snapshots=3))


def test_list_records_read_per_commit_are_bounded(crafter: Crafter) -> None:
    """The parent's list (2 records) and the new one (3): 5 records in all."""
    body = crafter.body(append(crafter))
    fits = classify_commit(body, crafter.table.metadata, crafter.table.io,
                           limits=CommitLimits(max_list_records=5))
    assert fits.actions == {Action.INSERT}
    with pytest.raises(CommitTooLarge, match="more than 4 manifest list records"):
        classify_commit(body, crafter.table.metadata, crafter.table.io,
                        limits=CommitLimits(max_list_records=4))


class CountingIO(FileIO):
    """A FileIO that counts how often each location is opened for reading."""

    def __init__(self, io: FileIO) -> None:
        super().__init__()
        self.io = io
        self.opened: dict[str, int] = {}

    def new_input(self, location: str) -> InputFile:
        self.opened[location] = self.opened.get(location, 0) + 1
        return self.io.new_input(location)

    def new_output(self, location: str) -> OutputFile:
        return self.io.new_output(location)

    def delete(self, location: str | InputFile | OutputFile) -> None:
        self.io.delete(location)


def test_each_manifest_list_is_parsed_once_per_commit(crafter: Crafter) -> None:
    """A chain of staged snapshots: each list is the next one's predecessor, read once."""
    lower = append(crafter)
    sid, sequence = next(_ids), lower["sequence-number"] + 1
    added = crafter.manifest(sid, [(ADDED, new_data(f"c{sid}", 1), 0)])
    upper = {**lower, "snapshot-id": sid, "parent-snapshot-id": lower["snapshot-id"],
             "sequence-number": sequence, "manifest-list": str(crafter.folder / f"up-{sid}.avro")}
    with write_manifest_list(2, crafter.table.io.new_output(upper["manifest-list"]), sid,
                             lower["snapshot-id"], sequence, "null") as writer:
        writer.add_manifests([added, *read_list(crafter.table.io, lower["manifest-list"])])
    body = {"requirements": [], "updates": [{"action": "add-snapshot", "snapshot": lower},
                                            {"action": "add-snapshot", "snapshot": upper}]}
    io = CountingIO(crafter.table.io)
    intent = classify_commit(body, crafter.table.metadata, io)
    assert intent.actions == {Action.INSERT} and intent.evidence.verified, \
        intent.evidence.mismatch
    assert io.opened[lower["manifest-list"]] == 1
    assert io.opened[upper["manifest-list"]] == 1
