"""Row-level classification: removed delete files and copy-on-write rewrites, read row by row.

The base is a real table ``db.t (id long, name string, score double)`` with one data file ``f1``
holding three rows (one with a NaN score, one with nulls); some tests use a table partitioned by
identity ``p`` instead. Crafted commits write real Parquet and Puffin files under the table's
location (``tests.support.row_files``), some with manifest entries that lie about them.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.conversions import to_bytes
from pyiceberg.io.pyarrow import parquet_file_to_data_file, schema_to_pyarrow
from pyiceberg.manifest import DataFile, ManifestContent, ManifestEntryStatus, ManifestFile
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    IdentityTransform,
    TruncateTransform,
    VoidTransform,
)
from pyiceberg.typedef import Record
from pyiceberg.types import DoubleType, LongType, NestedField, StringType, TimestampType

from proxy.commits import CommitIntent, UnverifiableCommit, classify_commit
from proxy.commits.limits import CommitLimits
from proxy.commits.rowkeys import is_sub_multiset, rows_deleted_by
from proxy.commits.rowstats import partition_problem
from proxy.governance import Action
from tests.support.row_files import RowTable, spec_manifest, v3_delete_manifest

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
            operation: str = "overwrite", limits: CommitLimits | None = None,
            **claims: Any) -> CommitIntent:
    """Classify a copy-on-write snapshot replacing ``f1`` with a file of ``rows`` (its entry
    stating ``claims``)."""
    data, sequence = f1(rt)
    sid = next(_ids)
    new = rt.write_data("cow", rows, **claims)
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
                        operation="replace").actions == {Action.UPDATE, Action.REWRITE}


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


def test_copy_on_write_with_a_column_outside_the_schema_is_refused(rt: RowTable) -> None:
    data, sequence = f1(rt)
    sid = next(_ids)
    smuggled = ROWS.slice(1).cast(schema_to_pyarrow(rt.table.schema())).append_column(
        pa.field("hidden", pa.string(), metadata={b"PARQUET:field_id": b"99"}),
        pa.array(["x", "y"]))
    new = rt._parquet(f"{rt.path('extra')}.parquet", smuggled,
                      data.content)  # written as is: field ids 1-3 and 99
    manifest = rt.crafter.manifest(sid, [(DELETED, data, sequence), (ADDED, new, 0)])
    with pytest.raises(UnverifiableCommit, match="has a column that is not a column of the"):
        commit(rt, sid, [manifest], "overwrite")  # the footer shows it (``footers``)


def test_row_budget_exhausted_means_update(rt: RowTable) -> None:
    subset = ROWS.slice(1)
    intent = rewrite(rt, subset, limits=CommitLimits(row_bytes_budget=100))
    assert intent.actions == {Action.UPDATE}
    assert "row budget of 100 bytes exhausted" in checks(intent)
    assert rewrite(rt, subset).actions == {Action.DELETE}


def test_compaction_is_read_row_by_row(rt: RowTable) -> None:
    same = rewrite(rt, ROWS, operation="replace")
    assert same.actions == {Action.REWRITE}
    assert "the 3 live rows of 1 added data files are the 3 live rows" in checks(same)
    swapped = rewrite(rt, ROWS.take([0, 1, 1]), operation="replace")
    assert swapped.actions == {Action.UPDATE, Action.REWRITE}, "as many rows, not the same"


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


# what a manifest entry claims must describe its file -----------------------------------------

PARTED = pa.schema([pa.field("id", pa.int64(), False), ("p", pa.int64()), ("name", pa.string())])
BY_P = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(),
                                    name="p"))


@pytest.fixture()
def parted(tmp_path: Path) -> RowTable:
    """``db.t`` partitioned by identity(p): p=1 holds ids 1, 2, 3; p=2 holds id 4."""
    schema = Schema(NestedField(1, "id", LongType(), required=True),
                    NestedField(2, "p", LongType()), NestedField(3, "name", StringType()))
    return RowTable.create(tmp_path, schema, [
        pa.table({"id": [1, 2, 3], "p": [1, 1, 1], "name": ["a", "b", "c"]}, schema=PARTED),
        pa.table({"id": [4], "p": [2], "name": ["d"]}, schema=PARTED)], partition_spec=BY_P)


def in_partition(rt: RowTable, p: int) -> tuple[DataFile, int]:
    [found] = [(d, s) for d, s in rt.data_files() if d.partition == Record(p)]
    return found


def other_manifests(rt: RowTable, data: DataFile) -> list[ManifestFile]:
    """The current manifests, but the one holding ``data``."""
    return [m for m in rt.crafter.parent_manifests()
            if all(e.data_file.file_path != data.file_path
                   for e in m.fetch_manifest_entry(rt.table.io))]


def rewrite_p1(rt: RowTable, rows: pa.Table, spec: PartitionSpec = BY_P,
               **claims: Any) -> CommitIntent:
    """Classify a copy-on-write snapshot replacing the p=1 file with a file of ``rows``."""
    data, sequence = in_partition(rt, 1)
    sid = next(_ids)
    new = rt.write_data("cow", rows, **{"partition": Record(1), **claims})
    removal = spec_manifest(rt.crafter, sid, [(DELETED, data, sequence)], BY_P)
    addition = spec_manifest(rt.crafter, sid, [(ADDED, new, 0)], spec)
    return commit(rt, sid, [removal, addition, *other_manifests(rt, data)], "overwrite")


def test_copy_on_write_must_keep_the_partition_of_its_rows(parted: RowTable) -> None:
    """An added file is held to its partition on every commit path (``partition_proof``): a
    rewrite whose file declares another partition than its rows' is refused, not classified."""
    kept = pa.table({"id": [1, 3], "p": [1, 1], "name": ["a", "c"]}, schema=PARTED)
    with pytest.raises(UnverifiableCommit, match="partition field p is not identity of its rows"):
        rewrite_p1(parted, kept, partition=Record(2))  # Java would read p=2 for both rows
    assert rewrite_p1(parted, kept).actions == {Action.DELETE}, "the honest rewrite"
    with pytest.raises(UnverifiableCommit, match="partition spec 7, which the table does not"):
        rewrite_p1(parted, kept, spec=PartitionSpec(*BY_P.fields, spec_id=7))
    mixed = pa.table({"id": [1, 4], "p": [1, 2], "name": ["a", "d"]}, schema=PARTED)
    with pytest.raises(UnverifiableCommit, match="is not identity of its rows"):
        rewrite_p1(parted, mixed)


def long_bound(value: int) -> bytes:
    return to_bytes(LongType(), value)


@pytest.mark.parametrize(("claims", "why"), [
    ({"lower_bounds": {1: long_bound(100)}}, "lower bound above"),  # filtered reads skip it
    ({"upper_bounds": {1: long_bound(2)}}, "upper bound below"),
    ({"null_value_counts": {2: 0}}, "declare 0 nulls, the footer 1"),  # IS NULL skips it
    ({"value_counts": {1: 5}}, "declare 5 values, the footer 2"),
    ({"lower_bounds": {99: long_bound(1)}}, "field id 99, which is no primitive column"),
    ({"record_count": 1}, "holds 2 rows, not the declared 1"),
])
def test_copy_on_write_entry_the_footer_contradicts_is_refused(
        rt: RowTable, claims: dict[str, Any], why: str) -> None:
    kept = ROWS.slice(1)  # ids 2, 3: names "b" and null, scores NaN and null
    with pytest.raises(UnverifiableCommit, match=why):
        rewrite(rt, kept, **claims)


def test_copy_on_write_entry_must_describe_the_added_rows(rt: RowTable) -> None:
    """A footer does not count NaN: the rows do."""
    intent = rewrite(rt, ROWS.slice(1), nan_value_counts={3: 0})
    assert intent.actions == {Action.UPDATE}, checks(intent)
    assert "NaN count 0, the file holds 1" in checks(intent)


def test_copy_on_write_with_honest_metrics_is_a_delete(rt: RowTable) -> None:
    kept = ROWS.slice(1)
    honest = {"lower_bounds": {1: long_bound(2), 2: b"b"}, "upper_bounds": {1: long_bound(3)},
              "null_value_counts": {1: 0, 2: 1, 3: 1}, "value_counts": {1: 2, 2: 2, 3: 2},
              "nan_value_counts": {3: 1}}
    intent = rewrite(rt, kept, **honest)
    assert intent.actions == {Action.DELETE}, checks(intent)
    new = rt.write_data("stats", kept)  # pyiceberg's own metrics for a file it did not write
    measured = parquet_file_to_data_file(rt.table.io, rt.table.metadata, new.file_path)
    assert measured.lower_bounds, "pyiceberg measured bounds"
    intent = rewrite(rt, kept, **{k: getattr(measured, k) for k in (
        "lower_bounds", "upper_bounds", "null_value_counts", "value_counts",
        "nan_value_counts")})
    assert intent.actions == {Action.DELETE}, checks(intent)


def test_a_tiny_file_of_many_rows_is_refused_before_its_rows_are_read(rt: RowTable) -> None:
    many = pa.table({"id": [2] * 200_000, "name": ["b"] * 200_000,
                     "score": [math.nan] * 200_000}, schema=SCHEMA)
    with pytest.raises(UnverifiableCommit, match="holds 200000 rows, not the declared 1"):
        rewrite(rt, many, record_count=1)
    honest = rewrite(rt, many)
    assert honest.actions == {Action.UPDATE}
    assert "200000 added rows cannot all be among the 3 rows" in checks(honest)


def test_decoded_rows_are_charged_to_the_budget(tmp_path: Path) -> None:
    rows = pa.table({"id": [7] * 50_000, "name": ["x"] * 50_000, "score": [1.0] * 50_000},
                    schema=SCHEMA)
    big = RowTable.create(tmp_path, SCHEMA, [rows])
    files = sum(d.file_size_in_bytes for d, _ in big.data_files())
    budget = CommitLimits(row_bytes_budget=20 * files + 4096)  # the files fit, their rows do not
    intent = rewrite(big, rows.slice(25_000), limits=budget)
    assert intent.actions == {Action.UPDATE}
    assert "exhausted before reading the decoded rows" in checks(intent)
    assert rewrite(big, rows.slice(25_000)).actions == {Action.DELETE}


def test_a_delete_file_must_hold_the_rows_its_entry_counts(rt: RowTable) -> None:
    data, _ = f1(rt)
    dv1 = rt.write_vector("dv1", data.file_path, [0])
    seq = add_deletes(rt, dv1, v3=True)
    bomb = rt.write_vector("dv2", data.file_path, range(100_000), record_count=1)
    intent = swap_deletes(rt, [(dv1, seq)], [bomb], v3=True)
    assert intent.actions == {Action.UPDATE}
    assert "holds 100000 positions, its manifest entry says 1" in checks(intent)
    honest = rt.write_vector("dv3", data.file_path, range(100_000))
    assert swap_deletes(rt, [(dv1, seq)], [honest], v3=True).actions == {Action.DELETE}
    p1 = rt.write_positions("p1", [(data.file_path, 0)])
    seq = add_deletes(rt, p1)
    short = rt.write_positions("p2", [(data.file_path, 0), (data.file_path, 1)], record_count=1)
    with pytest.raises(UnverifiableCommit, match="holds 2 rows, not the declared 1"):
        swap_deletes(rt, [(p1, seq)], [short])


# a delete file covers a removed one only if readers apply it ---------------------------------

def test_a_delete_file_readers_skip_by_its_path_bounds_covers_nothing(rt: RowTable) -> None:
    data, _ = f1(rt)
    d0 = rt.write_positions("d0", [(data.file_path, 1)])
    seq = add_deletes(rt, d0)
    beside = rt.write_positions("d1", [(data.file_path, 1)], path_bounds=("a", "b"))
    with pytest.raises(UnverifiableCommit, match="upper bound below"):  # readers would skip it
        swap_deletes(rt, [(d0, seq)], [beside])
    around = rt.write_positions("d2", [(data.file_path, 1)], path_bounds=("a", "z" * 9))
    assert swap_deletes(rt, [(d0, seq)], [around]).actions == {Action.DELETE}


def swap_p1_deletes(rt: RowTable, old: tuple[DataFile, int], new: DataFile) -> CommitIntent:
    """Classify a snapshot that swaps delete file ``old`` for ``new`` in a partitioned table."""
    sid = next(_ids)
    manifest = spec_manifest(rt.crafter, sid, [(DELETED, *old), (ADDED, new, 0)], BY_P,
                             deletes=True)
    return commit(rt, sid, [manifest, *rt.manifests(ManifestContent.DATA)], "delete")


def test_a_delete_file_in_another_partition_covers_nothing(parted: RowTable) -> None:
    data, _ = in_partition(parted, 1)
    path = data.file_path
    d0 = parted.write_positions("d0", [(path, 1)], partition=Record(1))
    sid = next(_ids)
    commit(parted, sid, [spec_manifest(parted.crafter, sid, [(ADDED, d0, 0)], BY_P, True),
                         *parted.crafter.parent_manifests()], "delete", apply=True)
    old = (d0, parted.table.metadata.last_sequence_number)
    elsewhere = parted.write_positions("d1", [(path, 1)], partition=Record(2))
    intent = swap_p1_deletes(parted, old, elsewhere)
    assert intent.actions == {Action.UPDATE}, "no reader applies a p=2 delete to a p=1 file"
    named = parted.write_positions("d2", [(path, 1)], partition=Record(2),
                                   referenced_data_file=path)
    assert swap_p1_deletes(parted, old, named).actions == {Action.UPDATE}, \
        "pyiceberg ignores referenced_data_file: only equal path bounds pin a delete to a file"
    pinned = parted.write_positions("d3", [(path, 1)], scoped=path, partition=Record(2))
    assert swap_p1_deletes(parted, old, pinned).actions == {Action.DELETE}
    beside = parted.write_positions("d4", [(path, 1)], partition=Record(1))
    assert swap_p1_deletes(parted, old, beside).actions == {Action.DELETE}


def test_a_delete_spelling_the_data_file_otherwise_covers_nothing(rt: RowTable) -> None:
    """Readers match ``file_path`` to the data file's location as listed, string for string."""
    data, _ = f1(rt)
    assert data.file_path.startswith("file:///")
    d0 = rt.write_positions("d0", [(data.file_path, 1)])
    seq = add_deletes(rt, d0)
    respelled = "file:/" + data.file_path.removeprefix("file:///")
    other = rt.write_positions("d1", [(respelled, 1)])
    assert swap_deletes(rt, [(d0, seq)], [other]).actions == {Action.UPDATE}


def test_an_equality_delete_readers_skip_by_its_metrics_covers_nothing(rt: RowTable) -> None:
    e1 = rt.write_equality("e1", pa.table({"id": [1]}), [1])
    seq = add_deletes(rt, e1)
    values = pa.table({"id": [1, 2]})
    skipped = rt.write_equality("e2", values, [1], lower_bounds={1: long_bound(100)},
                                upper_bounds={1: long_bound(200)})
    with pytest.raises(UnverifiableCommit, match="lower bound above"):  # Java would skip it
        swap_deletes(rt, [(e1, seq)], [skipped])
    all_null = rt.write_equality("e3", values, [1], null_value_counts={1: 2}, value_counts={1: 2})
    with pytest.raises(UnverifiableCommit, match="declare 2 nulls, the footer 0"):
        swap_deletes(rt, [(e1, seq)], [all_null])
    honest = rt.write_equality("e4", values, [1], lower_bounds={1: long_bound(1)},
                               upper_bounds={1: long_bound(2)}, null_value_counts={1: 0})
    assert swap_deletes(rt, [(e1, seq)], [honest]).actions == {Action.DELETE}


# partition transforms ------------------------------------------------------------------------

TRANSFORMED = Schema(NestedField(1, "id", LongType()), NestedField(2, "ts", TimestampType()),
                     NestedField(3, "name", StringType()), NestedField(4, "x", DoubleType()))


@pytest.mark.parametrize(("transform", "source", "values", "partition", "fits"), [
    (BucketTransform(4), 1, [5, 7, 8], 3, True),  # bucket[4] of 5, 7 and 8 is 3, of 6 is 1
    (BucketTransform(4), 1, [5, 6], 3, False),
    (DayTransform(), 2, [1_704_164_640_000_000, 1_704_240_000_000_000], 19724, False),
    (DayTransform(), 2, [1_704_164_640_000_000, 1_704_153_600_000_000], 19724, True),
    (TruncateTransform(2), 3, ["hello", "help"], "he", True),
    (TruncateTransform(2), 3, ["hello", "hi"], "he", False),
    (TruncateTransform(2), 3, ["hello", None], "he", False),
    (VoidTransform(), 3, ["a"], None, True),
    (VoidTransform(), 3, ["a"], "a", False),
    (IdentityTransform(), 4, [math.nan, math.nan], ("NaN",), True),
    (IdentityTransform(), 4, [-0.0], 0.0, False),  # Java would read 0.0
    (IdentityTransform(), 4, [None, None], None, True),
    (IdentityTransform(), 4, [None, 1.0], None, False),
])
def test_partition_values_are_the_transforms_of_every_row(
        transform: Any, source: int, values: list[Any], partition: Any, fits: bool) -> None:
    spec = PartitionSpec(PartitionField(source, 1000, transform, "part"))
    column = TRANSFORMED.find_field(source).name
    arrow = schema_to_pyarrow(TRANSFORMED)
    rows = pa.table({f.name: values if f.name == column else [None] * len(values)
                     for f in arrow}, schema=arrow)
    problem = partition_problem(spec, TRANSFORMED, (partition,), rows)
    assert (problem is None) == fits, problem


@pytest.mark.parametrize("beside", ["kept", "fresh"])
def test_a_second_live_deletion_vector_for_one_data_file_is_refused(rt: RowTable,
                                                                     beside: str) -> None:
    """A data file may have one live deletion vector: a second one beside it (kept from the
    parent, or added in the same manifest) would make Java readers refuse the table."""
    data, _ = f1(rt)
    first = rt.write_vector("dv1", data.file_path, [0])
    if beside == "kept":
        add_deletes(rt, first, v3=True)
    sid = next(_ids)
    second = rt.write_vector("dv2", data.file_path, [1])
    added = [(ADDED, second, 0)] + ([(ADDED, first, 0)] if beside == "fresh" else [])
    manifest = v3_delete_manifest(rt.crafter, sid, added)
    with pytest.raises(UnverifiableCommit, match="two deletion vectors"):
        commit(rt, sid, [manifest, *rt.crafter.parent_manifests()], "delete")
