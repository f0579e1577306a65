"""Commits that rewrite history while looking like appends, and ref retention inside data commits.

An attacker holding only INSERT adds a file and, in the same snapshot, alters what it carries
over: a kept manifest's sequence number (merge-on-read deletes stop applying) or file counts
(engines skip the manifest), or a re-listed file's bounds (filtered reads lose rows). Each must
come out UPDATE and unverified, never INSERT. A ``set-snapshot-ref`` that changes retention or the
ref's type needs MANAGE_SNAPSHOTS, while re-sending the ref's current values does not.
"""

from __future__ import annotations

import contextlib
import itertools
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.manifest import (
    ManifestContent,
    ManifestEntryStatus,
    ManifestFile,
    PartitionFieldSummary,
)

from proxy.commits import CommitIntent, UnverifiableCommit, classify_commit
from proxy.commits.history import kept_manifest_changes
from proxy.governance import Action
from tests.support.commit_capture import Crafter, new_data
from tests.unit.test_classify_crafted import confined_crafter, live_entries, write_manifest

ADDED, EXISTING, DELETED = ManifestEntryStatus.ADDED, ManifestEntryStatus.EXISTING, \
    ManifestEntryStatus.DELETED
_ids = itertools.count(5000)
_SEQUENCE, _MIN_SEQUENCE = 4, 5  # positions in the manifest-list record
_ADDED_FILES, _EXISTING_FILES, _ADDED_ROWS, _EXISTING_ROWS = 7, 8, 10, 11
_LOWER, _UPPER = 10, 11  # positions in the data_file record


@pytest.fixture()
def crafter(tmp_path: Path) -> Crafter:
    return confined_crafter(tmp_path)


def copy(manifest: ManifestFile, **changes: Any) -> ManifestFile:
    """A copy of a manifest-list record with fields changed by position (``p4=...``)."""
    values = [manifest[i] for i in range(len(manifest))]
    for position, value in changes.items():
        values[int(position[1:])] = value
    return ManifestFile(*values)


def append_with(crafter: Crafter, kept: list[ManifestFile], **summary: str) -> CommitIntent:
    """Classify an append of one new file whose manifest list carries ``kept``."""
    sid = next(_ids)
    added = crafter.manifest(sid, [(ADDED, new_data(f"n{sid}", 1), 0)])
    snapshot = crafter.snapshot(sid, [added, *kept], "append", **summary)
    return crafter.classify(crafter.body(snapshot))


def assert_rewrites_history(intent: CommitIntent, *phrases: str) -> None:
    assert intent.actions == {Action.UPDATE}, intent.evidence.mismatch
    assert not intent.evidence.verified
    mismatch = intent.evidence.mismatch or ""
    assert all(p in mismatch for p in phrases), mismatch


def test_honest_append_keeps_manifests_and_is_an_insert(crafter: Crafter) -> None:
    intent = append_with(crafter, crafter.parent_manifests(), **{"added-data-files": "1"})
    assert intent.actions == {Action.INSERT} and intent.evidence.verified


def test_raised_sequence_number_of_a_kept_manifest_is_an_update(crafter: Crafter) -> None:
    m2, m1 = crafter.parent_manifests()
    raised = copy(m1, **{f"p{_SEQUENCE}": 3, f"p{_MIN_SEQUENCE}": 3})
    intent = append_with(crafter, [m2, raised])
    assert_rewrites_history(intent, f"kept manifest {m1.manifest_path} differs",
                            "sequence_number, min_sequence_number")
    assert intent.evidence.counts.added_records == 1


def test_zeroed_counts_of_a_kept_manifest_are_an_update(crafter: Crafter) -> None:
    m2, m1 = crafter.parent_manifests()
    zeroed = copy(m1, **{f"p{i}": 0 for i in (_ADDED_FILES, _EXISTING_FILES, _ADDED_ROWS,
                                                  _EXISTING_ROWS)})
    assert_rewrites_history(append_with(crafter, [m2, zeroed]), "added_files_count",
                            "added_rows_count")


@pytest.mark.parametrize("position", [1, 6, 13])  # length, added snapshot, summaries
def test_any_other_kept_manifest_field_counts(crafter: Crafter, position: int) -> None:
    m2, m1 = crafter.parent_manifests()
    summary = [PartitionFieldSummary(True, False, b"a", b"z")]
    value = {1: m1.manifest_length + 1, 6: 42, 13: summary}[position]
    assert_rewrites_history(append_with(crafter, [m2, copy(m1, **{f"p{position}": value})]),
                            "differs from the parent's manifest list")


def test_a_manifest_naming_a_spec_the_table_lacks_is_refused(crafter: Crafter) -> None:
    m2, m1 = crafter.parent_manifests()
    with pytest.raises(UnverifiableCommit, match="partition spec 7, which the table does not"):
        append_with(crafter, [m2, copy(m1, p2=7)])


def test_a_snapshot_reusing_an_id_or_naming_an_unknown_schema_is_refused(
        crafter: Crafter) -> None:
    sid = next(_ids)
    added = crafter.manifest(sid, [(ADDED, new_data(f"n{sid}", 1), 0)])
    body = crafter.body(crafter.snapshot(sid, [added, *crafter.parent_manifests()], "append"))
    snapshot = body["updates"][0]["snapshot"]
    existing = crafter.table.metadata.current_snapshot_id
    with pytest.raises(UnverifiableCommit, match="already exists in the table"):
        crafter.classify({**body, "updates": [
            {**body["updates"][0], "snapshot": {**snapshot, "snapshot-id": existing}},
            {**body["updates"][1], "snapshot-id": existing}]})
    with pytest.raises(UnverifiableCommit, match="schema 99, which the table does not have"):
        crafter.classify({**body, "updates": [
            {**body["updates"][0], "snapshot": {**snapshot, "schema-id": 99}},
            body["updates"][1]]})


@pytest.mark.parametrize("update", [{"action": "add-spec", "spec": 1e308},
                                    {"action": "add-schema", "schema": [1]}])
def test_an_added_spec_or_schema_that_is_no_object_is_no_crash(
        crafter: Crafter, update: dict[str, object]) -> None:
    """Its shape is the backing's to refuse (400); classifying it must not fail (a 500)."""
    sid = next(_ids)
    added = crafter.manifest(sid, [(ADDED, new_data(f"n{sid}", 1), 0)])
    body = crafter.body(crafter.snapshot(sid, [added, *crafter.parent_manifests()], "append"))
    with contextlib.suppress(UnverifiableCommit):
        crafter.classify({**body, "updates": [update, *body["updates"]]})


def test_first_row_id_may_be_assigned_to_a_kept_manifest() -> None:
    old = ManifestFile.from_args(manifest_path="m", manifest_length=1, partition_spec_id=0,
                                 content=ManifestContent.DATA, sequence_number=1,
                                 min_sequence_number=1, added_snapshot_id=1, added_files_count=1,
                                 existing_files_count=0, deleted_files_count=0,
                                 added_rows_count=1, existing_rows_count=0,
                                 deleted_rows_count=0, _table_format_version=3)
    assigned = copy(old, p15=100)
    assert kept_manifest_changes([old], [assigned]) == []
    assert kept_manifest_changes([assigned], [copy(old, p15=7)]) == [
        "kept manifest m differs from the parent's manifest list in first_row_id"]


def relist_and_append(crafter: Crafter, entries: list[Any], operation: str = "append",
                      file_sequence: int | None = None) -> CommitIntent:
    """A snapshot that re-lists both files in one new manifest and adds one more file."""
    sid = next(_ids)
    merged = write_manifest(crafter, sid, entries, file_sequence)
    added = crafter.manifest(sid, [(ADDED, new_data(f"a{sid}", 1), 0)])
    return crafter.classify(crafter.body(crafter.snapshot(sid, [added, merged], operation)))


def test_relisting_existing_files_unchanged_is_an_insert(crafter: Crafter) -> None:
    intent = relist_and_append(crafter, list(live_entries(crafter)))
    assert intent.actions == {Action.INSERT} and intent.evidence.verified, \
        intent.evidence.mismatch


def test_forged_bounds_on_existing_entries_are_an_update(crafter: Crafter) -> None:
    (status, f1, sequence, snapshot), f2 = live_entries(crafter)
    forged = f1.__class__(*[f1[i] for i in range(len(f1))])
    forged[_LOWER] = forged[_UPPER] = {1: (100).to_bytes(8, "little")}
    intent = relist_and_append(crafter, [(status, forged, sequence, snapshot), f2])
    assert_rewrites_history(intent, f"EXISTING entry for {f1.file_path} differs",
                            "lower_bounds, upper_bounds")


@pytest.mark.parametrize(("field", "index"), [
    ("sequence_number", 2), ("snapshot_id", 3), ("file_sequence_number", None)])
def test_existing_entry_tracking_fields_count(crafter: Crafter, field: str,
                                              index: int | None) -> None:
    f1, f2 = live_entries(crafter)
    changed = list(f1)
    if index is not None:
        changed[index] = changed[index] + 1000
    intent = relist_and_append(crafter, [tuple(changed), f2],
                               file_sequence=None if index is not None else 99)
    assert_rewrites_history(intent, "EXISTING entry", field)


def test_deleted_entry_must_keep_the_original_file_and_sequence(crafter: Crafter) -> None:
    (_, f1, sequence, _), f2 = live_entries(crafter)
    sid = next(_ids)
    smaller = f1.__class__(*[f1[i] for i in range(len(f1))])
    smaller[4] = 1  # record_count: the deletion looks smaller than it is
    honest = write_manifest(crafter, sid, [(DELETED, f1, sequence, sid), f2])
    forged = write_manifest(crafter, sid, [(DELETED, smaller, sequence, sid), f2])
    lying = write_manifest(crafter, sid, [(DELETED, f1, sequence + 5, sid), f2])
    classify = [crafter.classify(crafter.body(crafter.snapshot(sid, [m], "delete")))
                for m in (honest, forged, lying)]
    assert classify[0].actions == {Action.DELETE} and classify[0].evidence.verified
    assert_rewrites_history(classify[1], "DELETED entry", "record_count")
    assert_rewrites_history(classify[2], "DELETED entry", "sequence_number")


def ref_commit(crafter: Crafter, **settings: Any) -> dict[str, Any]:
    """An honest append whose ``set-snapshot-ref main`` carries ``settings``."""
    sid = next(_ids)
    added = crafter.manifest(sid, [(ADDED, new_data(f"r{sid}", 1), 0)])
    body = crafter.body(crafter.snapshot(sid, [added, *crafter.parent_manifests()], "append"))
    body["updates"][1].update(settings)
    return body


@pytest.mark.parametrize("settings", [
    {"max-snapshot-age-ms": 1}, {"min-snapshots-to-keep": 1}, {"max-ref-age-ms": 1000},
    {"type": "tag"}, {"min-snapshots-to-keep": True},
])
def test_retention_change_inside_an_insert_manages_snapshots(
        crafter: Crafter, settings: dict[str, Any]) -> None:
    intent = crafter.classify(ref_commit(crafter, **settings))
    assert intent.actions == {Action.INSERT, Action.MANAGE_SNAPSHOTS}


def test_resending_the_refs_current_settings_is_a_plain_insert(crafter: Crafter) -> None:
    assert crafter.classify(ref_commit(crafter)).actions == {Action.INSERT}
    explicit_nulls = {"max-snapshot-age-ms": None, "min-snapshots-to-keep": None,
                      "max-ref-age-ms": None}
    assert crafter.classify(ref_commit(crafter, **explicit_nulls)).actions == {Action.INSERT}


def test_branch_retention_is_kept_or_needs_management(tmp_path: Path) -> None:
    """Java re-sends a branch's retention on a write (a plain INSERT); pyiceberg sends none,
    which clears it, and that is a retention change."""
    crafter = confined_crafter(tmp_path)
    current = crafter.table.metadata.current_snapshot_id
    assert current is not None
    crafter.table.manage_snapshots().create_branch(
        current, "dev", max_ref_age_ms=86_400_000, min_snapshots_to_keep=3).commit()
    crafter = Crafter(crafter.catalog, crafter.catalog.load_table("db.t"), crafter.folder)
    kept = {"max-ref-age-ms": 86_400_000, "min-snapshots-to-keep": 3}
    for settings, expected in ((kept, {Action.INSERT}),
                               ({}, {Action.INSERT, Action.MANAGE_SNAPSHOTS}),
                               ({**kept, "max-snapshot-age-ms": 5},
                                {Action.INSERT, Action.MANAGE_SNAPSHOTS})):
        body = ref_commit(crafter, **{"ref-name": "dev", **settings})
        body["requirements"][0]["ref"] = "dev"
        assert crafter.classify(body).actions == expected, settings


def test_new_table_main_must_start_with_defaults(tmp_path: Path) -> None:
    crafter = confined_crafter(tmp_path)
    table = crafter.catalog.create_table("db.fresh", pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [1]}, schema=pa.schema([("id", pa.int64())])))
    snapshot = table.current_snapshot()
    assert snapshot is not None
    body = {"requirements": [{"type": "assert-ref-snapshot-id", "ref": "main",
                              "snapshot-id": None}],
            "updates": [{"action": "add-snapshot", "snapshot": {
                "snapshot-id": snapshot.snapshot_id, "sequence-number": 1, "timestamp-ms": 1,
                "manifest-list": snapshot.manifest_list, "summary": {"operation": "append"}}},
                {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch",
                 "snapshot-id": snapshot.snapshot_id}]}
    empty = table.metadata.model_copy(update={"refs": {}, "snapshots": [],
                                              "current_snapshot_id": None})
    assert classify_commit(body, empty, table.io).actions == {Action.INSERT}
    body["updates"][1]["max-snapshot-age-ms"] = 1
    assert classify_commit(body, empty, table.io).actions == {Action.INSERT,
                                                              Action.MANAGE_SNAPSHOTS}
