"""REWRITE (a ``replace`` snapshot) is verified to the rows, not by record counts.

The base is a real table ``db.t (id long, name string)`` with one data file ``f1`` holding ids
1-4; crafted ``replace`` snapshots write real Parquet files under the table's location
(``tests.support.row_files``). Each dishonest rewrite below keeps the record counts a count rule
accepts, so only reading the rows tells it from a compaction.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.manifest import DataFile, ManifestContent, ManifestEntryStatus

from proxy.commits import CommitIntent, classify_commit
from proxy.commits.compaction import rewrite_in_the_way
from proxy.commits.intent import UnverifiableCommit
from proxy.commits.limits import CommitLimits
from proxy.governance import Action
from tests.support.row_files import RowTable

ADDED, DELETED = ManifestEntryStatus.ADDED, ManifestEntryStatus.DELETED
REWRITE, UPDATE, DELETE = Action.REWRITE, Action.UPDATE, Action.DELETE
SCHEMA = pa.schema([pa.field("id", pa.int64(), False), ("name", pa.string())])
_ids = itertools.count(5000)


def rows(*ids: int) -> pa.Table:
    return pa.table({"id": list(ids), "name": [f"n{i}" for i in ids]}, schema=SCHEMA)


@pytest.fixture()
def rt(tmp_path: Path) -> RowTable:
    return RowTable.create(tmp_path, SCHEMA, [rows(1, 2, 3, 4)])


def live(rt: RowTable) -> list[tuple[DataFile, int]]:
    return rt.data_files()


def classify(rt: RowTable, sid: int, manifests: list[Any], operation: str = "replace",
             limits: CommitLimits | None = None, apply: bool = False,
             extra: list[dict[str, Any]] = ()) -> CommitIntent:
    """Classify a snapshot ``sid`` of ``manifests`` (and ``extra`` updates); commit it to the
    table if ``apply``."""
    snapshot = rt.crafter.snapshot(sid, manifests, operation)
    body = rt.crafter.body(snapshot)
    body["updates"] += list(extra)
    intent = classify_commit(body, rt.table.metadata, rt.table.io,
                             limits=limits or CommitLimits())
    if apply:
        rt.crafter.apply(snapshot)
    return intent


def add_deletes(rt: RowTable, *deletes: DataFile) -> int:
    """Commit a merge-on-read delete adding ``deletes``; their sequence number."""
    sid = next(_ids)
    manifest = rt.crafter.manifest(sid, [(ADDED, d, 0) for d in deletes], deletes=True)
    intent = classify(rt, sid, [manifest, *rt.crafter.parent_manifests()], "delete", apply=True)
    assert intent.actions == {DELETE}
    return rt.table.metadata.last_sequence_number


def replace(rt: RowTable, added: list[pa.Table], *, removed_deletes: list[tuple[DataFile, int]]
            = (), added_deletes: list[DataFile] = (), keep_deletes: bool = True,
            limits: CommitLimits | None = None) -> CommitIntent:
    """Classify a ``replace`` that removes every live data file and adds one file per table of
    ``added``, removing and adding delete files as given (other delete manifests kept)."""
    sid = next(_ids)
    new = [rt.write_data("rw", t) for t in added]
    data = rt.crafter.manifest(sid, [*((DELETED, d, s) for d, s in live(rt)),
                                     *((ADDED, f, 0) for f in new)])
    manifests = [data]
    if removed_deletes or added_deletes:
        manifests.append(rt.crafter.manifest(
            sid, [*((DELETED, d, s) for d, s in removed_deletes),
                  *((ADDED, d, 0) for d in added_deletes)], deletes=True))
    if keep_deletes and not removed_deletes:
        manifests += rt.manifests(ManifestContent.DELETES)
    return classify(rt, sid, manifests, limits=limits)


def checks(intent: CommitIntent) -> str:
    return " | ".join(intent.evidence.row_checks)


# dishonest rewrites: rows dropped or changed ------------------------------------------------

def test_a_rewrite_that_drops_rows_is_no_rewrite(rt: RowTable) -> None:
    intent = replace(rt, [rows(1, 2)])
    assert REWRITE in intent.actions and intent.actions != {REWRITE}
    assert intent.actions == {DELETE, REWRITE}, "a copy-on-write delete, claimed as a rewrite"
    assert "the 2 live rows of 1 added data files are not the 4 live rows" in checks(intent)
    assert not intent.evidence.verified


def test_a_rewrite_that_changes_rows_is_an_update(rt: RowTable) -> None:
    intent = replace(rt, [rows(1, 2, 3, 99)])
    assert intent.actions == {UPDATE, REWRITE}
    assert "no REWRITE" in checks(intent)
    assert "claims 'replace' but its manifests show UPDATE" in (intent.evidence.mismatch or "")


def test_a_rewrite_that_changes_a_value_only_is_an_update(rt: RowTable) -> None:
    changed = rows(1, 2, 3, 4).set_column(1, "name", pa.array(["n1", "n2", "n3", "x"]))
    assert replace(rt, [changed]).actions == {UPDATE, REWRITE}


def test_removing_a_data_file_and_its_position_delete_brings_the_row_back(rt: RowTable) -> None:
    [(f1, _)] = live(rt)
    d1 = rt.write_positions("d1", [(f1.file_path, 0)], scoped=f1.file_path)
    seq = add_deletes(rt, d1)  # id 1 deleted: 3 live rows
    back = replace(rt, [rows(1, 2, 3, 4)], removed_deletes=[(d1, seq)])
    assert back.actions == {UPDATE, REWRITE}, checks(back)
    assert "the 4 live rows of 1 added data files are not the 3 live rows" in checks(back)
    one_more = replace(rt, [rows(2, 3, 4, 5)], removed_deletes=[(d1, seq)])
    assert one_more.actions == {UPDATE, REWRITE}
    honest = replace(rt, [rows(4, 3, 2)], removed_deletes=[(d1, seq)])
    assert honest.actions == {REWRITE}, checks(honest)
    assert honest.evidence.verified


def test_a_kept_position_delete_still_counts(rt: RowTable) -> None:
    """Spark's compaction leaves the now dangling delete file in place: the rows it deleted
    must not come back in the rewritten file."""
    [(f1, _)] = live(rt)
    add_deletes(rt, rt.write_positions("d1", [(f1.file_path, 1)], scoped=f1.file_path))
    assert replace(rt, [rows(1, 2, 3, 4)]).actions == {UPDATE, REWRITE}
    assert replace(rt, [rows(1, 3, 4)]).actions == {REWRITE}


def test_equality_deletes_count_before_and_after(rt: RowTable) -> None:
    e1 = rt.write_equality("e1", pa.table({"id": [1]}), [1])
    seq = add_deletes(rt, e1)
    kept = replace(rt, [rows(1, 2, 3, 4)])  # the new file is newer than e1: id 1 is back
    assert kept.actions == {UPDATE, REWRITE}, checks(kept)
    dropped = replace(rt, [rows(1, 2, 3, 4)], removed_deletes=[(e1, seq)])
    assert dropped.actions == {UPDATE, REWRITE}
    assert replace(rt, [rows(2, 3, 4)]).actions == {REWRITE}
    assert replace(rt, [rows(2, 3, 4)], removed_deletes=[(e1, seq)]).actions == {REWRITE}


def test_an_added_equality_delete_cannot_hide_a_changed_row(rt: RowTable) -> None:
    e9 = rt.write_equality("e9", pa.table({"id": [9]}), [1])
    changed = replace(rt, [rows(1, 2, 3, 4, 9)], added_deletes=[e9])
    assert changed.actions != {REWRITE}, "e9 is as new as the file: it deletes nothing of it"


# honest compactions ------------------------------------------------------------------------

def test_compacting_two_files_into_one_is_a_rewrite(tmp_path: Path) -> None:
    two = RowTable.create(tmp_path, SCHEMA, [rows(1, 2), rows(3, 4, 4)])
    intent = replace(two, [rows(4, 3, 2, 4, 1)])
    assert intent.actions == {REWRITE} and intent.evidence.verified
    assert "the 5 live rows of 1 added data files are the 5 live rows of 2 removed ones" \
        in checks(intent)
    assert replace(two, [rows(4, 3, 2, 1, 1)]).actions == {UPDATE, REWRITE}, "multiset"


def test_position_delete_compaction_is_a_rewrite(rt: RowTable) -> None:
    [(f1, _)] = live(rt)
    path = f1.file_path
    d1 = rt.write_positions("d1", [(path, 0)], scoped=path)
    d2 = rt.write_positions("d2", [(path, 2)], scoped=path)
    seq = add_deletes(rt, d1, d2)
    compacted = rt.write_positions("d3", [(path, 0), (path, 2)], scoped=path)
    intent = delete_swap(rt, [(d1, seq), (d2, seq)], [compacted])
    assert intent.actions == {REWRITE} and intent.evidence.verified, checks(intent)
    assert "1 kept data files keep their deleted rows: REWRITE" in checks(intent)


def test_a_delete_compaction_that_deletes_one_more_row_is_no_rewrite(rt: RowTable) -> None:
    """As many delete records as before (one was a duplicate), every old position still
    deleted: a count rule passes it, yet row 1 disappears."""
    [(f1, _)] = live(rt)
    path = f1.file_path
    d1 = rt.write_positions("d1", [(path, 0), (path, 0)], scoped=path)
    d2 = rt.write_positions("d2", [(path, 2)], scoped=path)
    seq = add_deletes(rt, d1, d2)
    wider = rt.write_positions("d3", [(path, 0), (path, 1), (path, 2)], scoped=path)
    intent = delete_swap(rt, [(d1, seq), (d2, seq)], [wider])
    assert intent.actions == {DELETE, REWRITE}, checks(intent)
    assert f"change which rows of kept data file {path} are deleted" in checks(intent)


def delete_swap(rt: RowTable, old: list[tuple[DataFile, int]], new: list[DataFile]
                ) -> CommitIntent:
    sid = next(_ids)
    manifest = rt.crafter.manifest(sid, [*((DELETED, d, s) for d, s in old),
                                         *((ADDED, d, 0) for d in new)], deletes=True)
    return classify(rt, sid, [manifest, *rt.manifests(ManifestContent.DATA)])


# what cannot be verified is no rewrite -----------------------------------------------------

def test_over_the_row_budget_a_rewrite_is_judged_by_its_shape(rt: RowTable) -> None:
    intent = replace(rt, [rows(1, 2, 3, 4)], limits=CommitLimits(row_bytes_budget=100))
    assert intent.actions == {UPDATE, REWRITE}
    assert "row budget of 100 bytes exhausted" in checks(intent)
    assert "no REWRITE" in checks(intent)
    assert replace(rt, [rows(1, 2, 3, 4)]).actions == {REWRITE}


def test_a_rewrite_that_also_changes_metadata_is_no_rewrite(rt: RowTable) -> None:
    sid = next(_ids)
    [(f1, seq)] = live(rt)
    manifest = rt.crafter.manifest(sid, [(DELETED, f1, seq),
                                         (ADDED, rt.write_data("rw", rows(1, 2, 3, 4)), 0)])
    intent = classify(rt, sid, [manifest], extra=[{"action": "set-properties",
                                              "updates": {"k": "v"}}])
    assert intent.actions == {Action.ALTER, UPDATE, REWRITE}
    assert "the commit also changes table metadata" in checks(intent)


def test_a_rewrite_adding_a_missing_file_is_refused(rt: RowTable) -> None:
    """Its rows cannot be read, and the file is not there: refused before any row check."""
    sid = next(_ids)
    [(f1, seq)] = live(rt)
    ghost = rt.write_data("ghost", rows(1, 2, 3, 4))
    rt.table.io.delete(ghost.file_path)
    manifest = rt.crafter.manifest(sid, [(DELETED, f1, seq), (ADDED, ghost, 0)])
    with pytest.raises(UnverifiableCommit, match="does not exist"):
        classify(rt, sid, [manifest])


def test_rewriting_only_manifests_needs_no_rows(rt: RowTable) -> None:
    intent = classify(rt, next(_ids), rt.crafter.parent_manifests())
    assert intent.actions == {REWRITE} and not intent.evidence.row_checks


# compaction yield trusts only a rewrite read row by row ------------------------------------

def landed_rewrite(rt: RowTable, added: pa.Table) -> int:
    """Commit a ``replace`` of every data file by a file of ``added``; the base it was on."""
    base = rt.table.metadata.current_snapshot_id
    assert base is not None
    sid = next(_ids)
    manifest = rt.crafter.manifest(sid, [*((DELETED, d, s) for d, s in live(rt)),
                                         (ADDED, rt.write_data("rw", added), 0)])
    classify(rt, sid, [manifest], apply=True)
    return base


@pytest.mark.parametrize(("added", "budget", "yields"), [
    (rows(4, 3, 2, 1), 1024 * 1024 * 1024, True),
    (rows(1, 2, 3, 99), 1024 * 1024 * 1024, False),  # an admin's change, not a compaction
    (rows(1, 2), 1024 * 1024 * 1024, False),
    (rows(4, 3, 2, 1), 100, False),  # not read within the budget: not known to be one
])
def test_only_a_rewrite_verified_by_its_rows_is_in_the_way(rt: RowTable, added: pa.Table,
                                                           budget: int, yields: bool) -> None:
    base = landed_rewrite(rt, added)
    head = rt.table.metadata.current_snapshot_id
    found = rewrite_in_the_way(rt.table.metadata, rt.table.io, "main", base,
                               CommitLimits(row_bytes_budget=budget))
    assert (found is not None and found.snapshot_id == head) == yields


def test_a_delete_file_not_every_reader_is_known_to_apply_makes_no_rewrite(
        rt: RowTable) -> None:
    """A position delete in ``f1``'s partition whose ``file_path`` bounds leave ``f1`` out
    (written straight to the table: icegov refuses to add such a file): the check does not
    guess whether every reader skips it, so no rewrite of ``f1`` is a REWRITE."""
    [(f1, _)] = live(rt)
    lying = rt.write_positions("d0", [(f1.file_path, 0)], path_bounds=("a", "b"))
    sid = next(_ids)
    manifest = rt.crafter.manifest(sid, [(ADDED, lying, 0)], deletes=True)
    rt.crafter.apply(rt.crafter.snapshot(sid, [manifest, *rt.crafter.parent_manifests()],
                                         "delete"))
    for kept in (rows(1, 2, 3, 4), rows(2, 3, 4)):
        intent = replace(rt, [kept])
        assert REWRITE in intent.actions and intent.actions != {REWRITE}
        assert "readers may disagree whether delete file" in checks(intent)
