"""classify_commit on hand-written manifests: rewrites, lying manifests, refs.

The base is a real pyiceberg table (two appends: ``f1`` with 2 rows, ``f2`` with 1 row, each in
its own manifest); new snapshots are written by ``tests.support.commit_capture.Crafter``.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from pyiceberg.manifest import ManifestEntryStatus

from proxy.governance import Action
from tests.support.commit_capture import Crafter, new_data

ADDED, EXISTING, DELETED = ManifestEntryStatus.ADDED, ManifestEntryStatus.EXISTING, \
    ManifestEntryStatus.DELETED
_ids = itertools.count(1000)


@pytest.fixture()
def crafter(tmp_path: Path) -> Crafter:
    return Crafter.with_two_appends(tmp_path)


def test_data_equivalent_replace_is_rewrite(crafter: Crafter) -> None:
    (f1, s1), (f2, s2) = crafter.live()
    sid = next(_ids)
    merged = crafter.manifest(sid, [(DELETED, f1, s1), (DELETED, f2, s2),
                                    (ADDED, new_data("g", 3), 0)])
    snapshot = crafter.snapshot(sid, [merged], "replace", **{"added-records": "3",
                                                             "deleted-records": "3"})
    intent = crafter.classify(crafter.body(snapshot))
    assert intent.actions == {Action.REWRITE}
    assert intent.evidence.verified, intent.evidence.mismatch


def test_replace_that_grows_is_update(crafter: Crafter) -> None:
    (f1, s1), (f2, s2) = crafter.live()
    sid = next(_ids)
    merged = crafter.manifest(sid, [(DELETED, f1, s1), (DELETED, f2, s2),
                                    (ADDED, new_data("g", 4), 0)])
    intent = crafter.classify(crafter.body(crafter.snapshot(sid, [merged], "replace")))
    assert intent.actions == {Action.UPDATE}
    assert "claims 'replace' but its manifests show UPDATE" in (intent.evidence.mismatch or "")


def test_replace_that_only_removes_is_not_a_rewrite(crafter: Crafter) -> None:
    (f1, s1), _ = crafter.live()
    sid = next(_ids)
    m2 = crafter.parent_manifests()[0]
    gone = crafter.manifest(sid, [(DELETED, f1, s1)])
    intent = crafter.classify(crafter.body(crafter.snapshot(sid, [gone, m2], "replace")))
    assert intent.actions == {Action.DELETE} and not intent.evidence.verified


def test_rewriting_only_manifests_is_rewrite(crafter: Crafter) -> None:
    (f1, s1), (f2, s2) = crafter.live()
    sid = next(_ids)
    merged = crafter.manifest(sid, [(EXISTING, f1, s1), (EXISTING, f2, s2)])
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


def test_existing_entry_for_a_foreign_file_is_an_insert(crafter: Crafter) -> None:
    [m2, m1] = crafter.parent_manifests()
    sid = next(_ids)
    smuggled = crafter.manifest(sid, [(EXISTING, new_data("x", 5), 1)], entry_snapshot=1)
    intent = crafter.classify(crafter.body(crafter.snapshot(sid, [smuggled, m2, m1], "append")))
    assert intent.actions == {Action.INSERT}
    assert intent.evidence.counts.added_records == 5
    mismatch = intent.evidence.mismatch or ""
    assert "EXISTING entries for files no replaced manifest held" in mismatch


def test_entries_and_manifests_of_another_snapshot_are_reported(crafter: Crafter) -> None:
    [m2, m1] = crafter.parent_manifests()
    sid = next(_ids)
    foreign = crafter.manifest(42, [(ADDED, new_data("y", 1), 0)])
    foreign.sequence_number = foreign.min_sequence_number = 3
    intent = crafter.classify(crafter.body(crafter.snapshot(sid, [foreign, m2, m1], "append")))
    assert intent.actions == {Action.INSERT}
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
