"""Row-level classification: removed delete files and copy-on-write rewrites, read row by row.

The base is a real table ``db.t (id long, name string, score double)`` with one data file ``f1``
holding three rows (one with a NaN score, one with nulls). Crafted commits write real Parquet
and Puffin files under the table's location (``tests.support.row_files``).
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile, ManifestContent, ManifestEntryStatus

from proxy.commits import CommitIntent, classify_commit
from proxy.commits.limits import CommitLimits
from proxy.commits.rowkeys import is_sub_multiset, rows_deleted_by
from proxy.governance import Action
from tests.support.row_files import RowTable, v3_delete_manifest

ADDED, EXISTING, DELETED = ManifestEntryStatus.ADDED, ManifestEntryStatus.EXISTING, \
    ManifestEntryStatus.DELETED
SCHEMA = pa.schema([pa.field("id", pa.int64(), False), ("name", pa.string()),
                    ("score", pa.float64())])
ROWS = pa.table({"id": [1, 2, 3], "name": ["a", "b", None], "score": [1.5, math.nan, None]},
                schema=SCHEMA)
_ids = itertools.count(1000)


@pytest.fixture()
def rt(tmp_path: Path) -> RowTable:
    return RowTable.create(tmp_path, SCHEMA, [ROWS])


def f1(rt: RowTable) -> tuple[DataFile, int]:
    [(data, sequence)] = rt.data_files()
    return data, sequence


def commit(rt: RowTable, sid: int, manifests: list[Any], operation: str,
           apply: bool = False, limits: CommitLimits | None = None) -> CommitIntent:
    """Classify a snapshot of ``manifests``; commit it to the table if ``apply``."""
    snapshot = rt.crafter.snapshot(sid, manifests, operation)
    intent = classify_commit(rt.crafter.body(snapshot), rt.table.metadata, rt.table.io,
                             limits=limits or CommitLimits())
    if apply:
        rt.crafter.apply(snapshot)
    return intent


def add_deletes(rt: RowTable, *deletes: DataFile, v3: bool = False) -> int:
    """Commit a merge-on-read delete adding ``deletes``; returns their sequence number."""
    sid = next(_ids)
    entries = [(ADDED, d, 0) for d in deletes]
    manifest = v3_delete_manifest(rt.crafter, sid, entries) if v3 \
        else rt.crafter.manifest(sid, entries, deletes=True)
    intent = commit(rt, sid, [manifest, *rt.crafter.parent_manifests()], "delete", apply=True)
    assert intent.actions == {Action.DELETE}
    return rt.table.metadata.last_sequence_number


def swap_deletes(rt: RowTable, old: list[tuple[DataFile, int]], new: list[DataFile],
                 operation: str = "delete", v3: bool = False) -> CommitIntent:
    """Classify a snapshot that removes the ``old`` delete files and adds the ``new`` ones."""
    sid = next(_ids)
    entries = [*((DELETED, d, s) for d, s in old), *((ADDED, d, 0) for d in new)]
    manifest = v3_delete_manifest(rt.crafter, sid, entries) if v3 \
        else rt.crafter.manifest(sid, entries, deletes=True)
    return commit(rt, sid, [manifest, *rt.manifests(ManifestContent.DATA)], operation)


def rewrite(rt: RowTable, rows: pa.Table, extra_deleted: list[tuple[DataFile, int]] = (),
            operation: str = "overwrite", limits: CommitLimits | None = None) -> CommitIntent:
    """Classify a copy-on-write snapshot replacing ``f1`` with a file of ``rows``."""
    data, sequence = f1(rt)
    sid = next(_ids)
    new = rt.write_data("cow", rows)
    manifest = rt.crafter.manifest(sid, [(DELETED, data, sequence), (ADDED, new, 0)])
    manifests = [manifest]
    if extra_deleted:
        manifests.append(rt.crafter.manifest(
            sid, [(DELETED, d, s) for d, s in extra_deleted], deletes=True))
    return commit(rt, sid, manifests, operation, limits=limits)


def checks(intent: CommitIntent) -> str:
    return " | ".join(intent.evidence.row_checks)


# removed delete files ------------------------------------------------------------------------

def test_swapping_a_position_delete_for_other_rows_is_an_update(rt: RowTable) -> None:
    data, _ = f1(rt)
    d1 = rt.write_positions("d1", [(data.file_path, 0)], scoped=data.file_path)
    seq = add_deletes(rt, d1)
    other = rt.write_positions("d2", [(data.file_path, 1)], scoped=data.file_path)
    intent = swap_deletes(rt, [(d1, seq)], [other])
    assert intent.actions == {Action.UPDATE}, "row 0 comes back: same count, other row"
    assert "re-expose rows" in checks(intent)
    assert intent.to_dict()["row_checks"] == list(intent.evidence.row_checks)


def test_merged_position_deletes_keep_every_row_deleted(rt: RowTable) -> None:
    data, _ = f1(rt)
    d1 = rt.write_positions("d1", [(data.file_path, 0)], scoped=data.file_path)
    seq = add_deletes(rt, d1)
    merged = rt.write_positions("d2", [(data.file_path, 0), (data.file_path, 2)],
                                scoped=data.file_path)
    intent = swap_deletes(rt, [(d1, seq)], [merged])
    assert intent.actions == {Action.DELETE} and intent.evidence.verified
    assert "every row they deleted stays deleted" in checks(intent)


def test_position_delete_compaction_is_a_rewrite(rt: RowTable) -> None:
    data, _ = f1(rt)
    d1 = rt.write_positions("d1", [(data.file_path, 0)], scoped=data.file_path)
    d2 = rt.write_positions("d2", [(data.file_path, 2)], scoped=data.file_path)
    seq = add_deletes(rt, d1, d2)
    compacted = rt.write_positions("d3", [(data.file_path, 0), (data.file_path, 2)])
    intent = swap_deletes(rt, [(d1, seq), (d2, seq)], [compacted], operation="replace")
    assert intent.actions == {Action.REWRITE} and intent.evidence.verified
    shifted = rt.write_positions("d4", [(data.file_path, 1), (data.file_path, 2)])
    assert swap_deletes(rt, [(d1, seq), (d2, seq)], [shifted],
                        operation="replace").actions == {Action.UPDATE}


def test_a_kept_delete_file_still_covers_the_rows(rt: RowTable) -> None:
    data, _ = f1(rt)
    d1 = rt.write_positions("d1", [(data.file_path, 0)], scoped=data.file_path)
    seq1 = add_deletes(rt, d1)
    add_deletes(rt, rt.write_positions("d2", [(data.file_path, 0), (data.file_path, 1)]))
    newest = max(rt.manifests(ManifestContent.DELETES), key=lambda m: m.sequence_number)
    sid = next(_ids)
    removal = rt.crafter.manifest(sid, [(DELETED, d1, seq1)], deletes=True)
    intent = commit(rt, sid, [removal, newest, *rt.manifests(ManifestContent.DATA)], "delete")
    assert intent.actions == {Action.DELETE}, (checks(intent), intent.evidence.mismatch)
    assert intent.evidence.verified


def test_deletion_vectors_are_read(rt: RowTable) -> None:
    data, _ = f1(rt)
    dv1 = rt.write_vector("dv1", data.file_path, [0])
    seq = add_deletes(rt, dv1, v3=True)
    assert swap_deletes(rt, [(dv1, seq)], [rt.write_vector("dv2", data.file_path, [1])],
                        v3=True).actions == {Action.UPDATE}
    merged = rt.write_vector("dv3", data.file_path, [0, 1])
    intent = swap_deletes(rt, [(dv1, seq)], [merged], v3=True)
    assert intent.actions == {Action.DELETE}, checks(intent)


def test_equality_deletes_compare_their_values(rt: RowTable) -> None:
    e1 = rt.write_equality("e1", pa.table({"id": [1]}), [1])
    seq = add_deletes(rt, e1)
    wider = rt.write_equality("e2", pa.table({"id": [1, 2]}), [1])
    assert swap_deletes(rt, [(e1, seq)], [wider]).actions == {Action.DELETE}
    other = rt.write_equality("e3", pa.table({"id": [2]}), [1])
    assert swap_deletes(rt, [(e1, seq)], [other]).actions == {Action.UPDATE}
    by_name = rt.write_equality("e4", pa.table({"name": ["a"]}), [2])
    assert swap_deletes(rt, [(e1, seq)], [by_name]).actions == {Action.UPDATE}


# copy-on-write rewrites ----------------------------------------------------------------------

def test_copy_on_write_delete_keeping_a_subset_is_a_delete(rt: RowTable) -> None:
    kept = pa.table({"id": [3, 2], "name": [None, "b"], "score": [None, math.nan]},
                    schema=SCHEMA)
    intent = rewrite(rt, kept)
    assert intent.actions == {Action.DELETE}, checks(intent)
    assert intent.evidence.verified, intent.evidence.mismatch
    assert "2 added rows are all among the 3 live rows" in checks(intent)


@pytest.mark.parametrize("changed", [
    {"id": [2], "name": ["b"], "score": [2.0]},  # NaN became a value
    {"id": [3], "name": [""], "score": [None]},  # null became an empty string
    {"id": [1], "name": ["a"], "score": [-1.5]},
    {"id": [1, 1], "name": ["a", "a"], "score": [1.5, 1.5]},  # one row, twice
    {"id": [9], "name": ["new"], "score": [0.0]},
])
def test_copy_on_write_that_changes_rows_is_an_update(rt: RowTable,
                                                      changed: dict[str, list[Any]]) -> None:
    intent = rewrite(rt, pa.table(changed, schema=SCHEMA))
    assert intent.actions == {Action.UPDATE}
    assert "are not all among" in checks(intent)


def test_copy_on_write_cannot_bring_back_a_deleted_row(rt: RowTable) -> None:
    data, _ = f1(rt)
    d1 = rt.write_positions("d1", [(data.file_path, 0)], scoped=data.file_path)
    seq = add_deletes(rt, d1)  # row id=1 is deleted
    everything = rewrite(rt, ROWS, extra_deleted=[(d1, seq)])
    assert everything.actions == {Action.UPDATE}, "id=1 would be visible again"
    assert "among the 2 live rows" in checks(everything)
    assert rewrite(rt, ROWS.slice(1), extra_deleted=[(d1, seq)]).actions == {Action.DELETE}
    kept_delete = rewrite(rt, ROWS)  # the delete file stays, dangling: same rows are live
    assert kept_delete.actions == {Action.UPDATE}


def test_copy_on_write_cannot_undo_an_equality_delete(rt: RowTable) -> None:
    add_deletes(rt, rt.write_equality("e1", pa.table({"id": [2]}), [1]))
    assert rewrite(rt, ROWS.slice(1, 1)).actions == {Action.UPDATE}, "id=2 was deleted"
    assert rewrite(rt, ROWS.slice(2)).actions == {Action.DELETE}


def test_copy_on_write_with_a_column_outside_the_schema_is_an_update(rt: RowTable) -> None:
    data, sequence = f1(rt)
    sid = next(_ids)
    smuggled = ROWS.slice(1).cast(schema_to_pyarrow(rt.table.schema())).append_column(
        pa.field("hidden", pa.string(), metadata={b"PARQUET:field_id": b"99"}),
        pa.array(["x", "y"]))
    new = rt._parquet(f"{rt.path('extra')}.parquet", smuggled,
                      data.content)  # written as is: field ids 1-3 and 99
    manifest = rt.crafter.manifest(sid, [(DELETED, data, sequence), (ADDED, new, 0)])
    intent = commit(rt, sid, [manifest], "overwrite")
    assert intent.actions == {Action.UPDATE}
    assert "outside the table schema" in checks(intent)


def test_row_budget_exhausted_means_update(rt: RowTable) -> None:
    subset = ROWS.slice(1)
    intent = rewrite(rt, subset, limits=CommitLimits(row_bytes_budget=100))
    assert intent.actions == {Action.UPDATE}
    assert "row budget of 100 bytes exhausted" in checks(intent)
    assert rewrite(rt, subset).actions == {Action.DELETE}


def test_compaction_keeps_its_count_rule(rt: RowTable) -> None:
    same = rewrite(rt, ROWS, operation="replace")
    assert same.actions == {Action.REWRITE} and not same.evidence.row_checks


# row keys ------------------------------------------------------------------------------------

NESTED = pa.schema([
    ("tags", pa.list_(pa.string())), ("attrs", pa.map_(pa.string(), pa.float64())),
    ("point", pa.struct([("x", pa.float64()), ("y", pa.int32())])),
])


def nested(*rows: tuple[Any, Any, Any]) -> pa.Table:
    return pa.table([list(column) for column in zip(*rows, strict=True)], schema=NESTED)


def test_row_keys_compare_nested_values_nans_and_nulls() -> None:
    removed = nested((["a", "b"], [("k", math.nan)], {"x": -0.0, "y": None}),
                     (None, None, None), ([], [], {"x": None, "y": None}))
    assert is_sub_multiset([nested((None, None, None),
                                   (["a", "b"], [("k", math.nan)], {"x": -0.0, "y": None}))],
                           [removed])
    for changed in [(["b", "a"], [("k", math.nan)], {"x": -0.0, "y": None}),  # list order
                    (["a", "b"], [("k", 1.0)], {"x": -0.0, "y": None}),
                    (["a", "b"], [("k", math.nan)], {"x": 0.0, "y": None}),  # -0.0 is not 0.0
                    ([], [], None),  # a null struct is not a struct of nulls
                    ([None], [], {"x": None, "y": None})]:
        assert not is_sub_multiset([nested(changed)], [removed]), changed


def test_equality_delete_values_match_nulls() -> None:
    rows = pa.table({"id": [1, 2, None, 4], "name": ["a", None, "c", "d"]})
    values = pa.table({"id": [None, 2], "name": ["c", None]})
    deleted = rows_deleted_by(rows, ["id", "name"], values)
    assert sorted(deleted.to_pylist()) == [1, 2]
