"""Is a ``replace`` snapshot data-equivalent? Read row by row (``rules`` asks, through
``SnapshotRows.is_data_equivalent``).

A REWRITE (compaction) may change how rows are stored, never which rows readers see. A snapshot
that adds or removes files is data-equivalent only if

* the multiset of live rows it removes equals the multiset of live rows it adds: the rows of the
  data files it removes, minus the rows that delete files live before it (the ones it removes
  and the kept ones) delete from them, against the rows of the data files it adds, minus the
  rows that delete files live after it (the ones it adds and the kept ones) delete from them;
* every kept data file that a delete file it removes or adds may apply to has the same rows
  deleted before and after it: a delete file it drops deletes nothing still live (its rows stay
  deleted by another, or its data file goes), one it adds deletes nothing that was live.

Rows are compared as the copy-on-write check compares them (``rows``, ``rowkeys``): in the
table's current schema, by field id, with their row lineage on format 3 (``rowlineage``: a
compaction keeps every row's ``_row_id`` and ``_last_updated_sequence_number``), as multisets of
canonical keys; an added data file holds no column outside the schema and the lineage columns;
each compared data file's manifest entry describes its rows (partition; and metrics for added
files, which readers prune on: ``rowstats``).

Which delete file deletes which row follows the readers, and where they could disagree the check
fails rather than pick one: a position delete file (or DV) counts for a data file when its rows
name the file's location exactly as listed and every reader applies it (``rowscope.applies``);
one only some reader may apply (``rowscope.may_apply``) is a disagreement, and so is a DV beside
another position delete for one file (Java applies only the DV). An equality delete counts where
``rowscope.may_apply`` (sequence number, partition or global); when it deletes rows, its metrics
and the data file's must describe their values (Java skips it by them).

Reads share the commit's ``row_bytes_budget`` (``rowfiles``). A check that cannot be completed
(budget, an unreadable or unsupported file, readers that could disagree, a commit that also
changes table metadata) leaves the snapshot no REWRITE: ``rules`` judges it by its shape, and the
row-check evidence says why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from proxy.commits.confine import canonical_location
from proxy.commits.diff import SnapshotChange
from proxy.commits.manifests import FileKey
from proxy.commits.rowfiles import RowCheckFailed, RowFile
from proxy.commits.rowkeys import RowKeyError, is_sub_multiset, rows_deleted_by
from proxy.commits.rowlineage import comparable
from proxy.commits.rowscope import applies, may_apply
from proxy.commits.rowstats import metrics_problem

if TYPE_CHECKING:
    from proxy.commits.rows import SnapshotRows

Rows = Callable[[], pa.Table]


def data_equivalent(rows: SnapshotRows, change: SnapshotChange) -> bool:
    """True if ``change`` leaves readers the same rows (module doc); each verdict, and why a
    check could not be completed, is noted in the row-check evidence."""
    if not rows.schema_stable:
        rows.note("rewrite rows not compared: the commit also changes table metadata: "
                  "no REWRITE")
        return False
    try:
        return _Rewrite(rows, change).equivalent()
    except (RowCheckFailed, RowKeyError) as failed:
        rows.note(f"rewrite rows not compared ({failed}): no REWRITE")
        return False


@dataclass
class _Rewrite:
    """One snapshot's rewrite check: its files, and each data file's rows read once."""

    rows: SnapshotRows
    change: SnapshotChange
    _read: dict[FileKey, pa.Table] = field(default_factory=dict)

    def equivalent(self) -> bool:
        removed, added = self.rows.data_files(self.change)
        before = list(self.rows.deletes_before().values())
        after = list(self.rows.deletes_after(self.change).values())
        changed = self._changed(before, after)
        self.rows.reserve(_unique([*removed, *added, *changed]))
        kept = self._touched(changed, {r.key for r in removed})
        if not self._counts_can_match(removed, added, after):
            return False
        self.rows.reserve(_unique([*removed, *added, *kept, *changed]))
        for data in kept:
            if not self._keeps_deleted_rows(data, before, after):
                return False
        gone = comparable([self._live(r, before, self._removed_rows(r)) for r in removed],
                          removed)
        new = comparable([self._live(a, after, self._added_rows(a)) for a in added], removed)
        count_gone, count_new = (sum(t.num_rows for t in ts) for ts in (gone, new))
        same = count_gone == count_new and is_sub_multiset(new, gone)
        self.rows.note(
            f"rewrite: the {count_new} live rows of {len(added)} added data files "
            f"{'are' if same else 'are not'} the {count_gone} live rows of {len(removed)} "
            f"removed ones; {len(kept)} kept data files keep their deleted rows: "
            f"{'REWRITE' if same else 'no REWRITE'}")
        return same

    def _changed(self, before: list[RowFile], after: list[RowFile]) -> list[RowFile]:
        """The delete files the snapshot removes and adds."""
        removed = {f.key for f in self.change.removed_deletes}
        added = {f.key for f in self.change.added_deletes}
        return [d for d in before if d.key in removed] + [d for d in after if d.key in added]

    def _touched(self, changed: list[RowFile], gone: set[FileKey]) -> list[RowFile]:
        """Kept data files (live before, not removed) that a changed delete file may apply to:
        position deletes by the locations their rows name, equality deletes by scope."""
        if not changed:
            return []
        by_location = self.rows.data_files_before()
        everything = [d for files in by_location.values() for d in files]
        touched: dict[FileKey, RowFile] = {}
        for delete in changed:
            candidates = everything if not delete.positional else [
                d for path in self.rows.content.positions(delete)
                for d in by_location.get(canonical_location(path), [])]
            touched.update({d.key: d for d in candidates if d.key not in gone
                            and _may_touch(delete, d, self.rows)})
        return list(touched.values())

    def _counts_can_match(self, removed: list[RowFile], added: list[RowFile],
                          after: list[RowFile]) -> bool:
        """Before reading rows: added files no delete file may apply to must not hold more
        rows than the removed files do."""
        if any(_may_touch(d, a, self.rows) for a in added for d in after):
            return True
        claimed_added, claimed_removed = (sum(f.records for f in fs) for fs in (added, removed))
        if claimed_added <= claimed_removed:
            return True
        self.rows.note(f"rewrite: {claimed_added} added rows cannot be the at most "
                       f"{claimed_removed} live rows of {len(removed)} removed data files: "
                       "no REWRITE")
        return False

    def _keeps_deleted_rows(self, data: RowFile, before: list[RowFile],
                            after: list[RowFile]) -> bool:
        rows = self._kept_rows(data)
        dead_before, dead_after = (self._dead(data, ds, rows) for ds in (before, after))
        if _same_positions(dead_before, dead_after):
            return True
        self.rows.note(f"rewrite: the delete files it removes or adds change which rows of "
                       f"kept data file {data.path} are deleted: no REWRITE")
        return False

    def _live(self, data: RowFile, deletes: list[RowFile], rows: Rows) -> pa.Table:
        """``data``'s rows less the ones ``deletes`` delete."""
        table = rows()
        dead = self._dead(data, deletes, rows)
        if len(dead) == 0:
            return table
        everything = pa.array(range(table.num_rows), pa.int64())
        return table.filter(pc.invert(pc.is_in(everything, value_set=dead)))

    def _dead(self, data: RowFile, deletes: list[RowFile], rows: Rows) -> pa.Array:
        """Positions (int64) of ``data``'s rows that ``deletes`` delete, as every reader sees
        it; ``RowCheckFailed`` where readers could disagree."""
        vectors: list[pa.Array] = []
        files: list[pa.Array] = []
        values: list[pa.Array] = []
        for delete in (d for d in deletes if _may_touch(d, data, self.rows)):
            if delete.positional:
                positions = self._positions(delete, data)
                if positions is not None:
                    (vectors if delete.is_vector else files).append(positions)
            elif delete.equality:
                values.append(self._matched(delete, data, rows))
        if vectors and files:
            raise RowCheckFailed(f"readers may disagree which rows of {data.path} are "
                                 "deleted: it has a deletion vector and position delete files")
        found = [*vectors, *files, *values]
        return pa.concat_arrays(found) if found else pa.array([], pa.int64())

    def _positions(self, delete: RowFile, data: RowFile) -> pa.Array | None:
        """What position delete ``delete`` deletes of ``data`` (None: nothing, for every
        reader)."""
        exact = self.rows.content.positions(delete).get(data.path)  # readers match the string
        if exact is None or len(exact) == 0 or delete.sequence < data.sequence:
            return None
        if applies(delete, data):
            return exact
        if may_apply(delete, data, self.rows.metadata):
            raise RowCheckFailed(f"readers may disagree whether delete file {delete.path} "
                                 f"deletes rows of {data.path}")
        return None

    def _matched(self, delete: RowFile, data: RowFile, rows: Rows) -> pa.Array:
        """Positions of ``data``'s rows that equality delete ``delete`` deletes; where it
        deletes any, both files' metrics must describe the values (Java prunes by them)."""
        id_schema = self.rows.id_schema(delete.equality_ids)
        values = self.rows.content.equality_values(delete, id_schema)
        table = rows()
        matched = rows_deleted_by(table, id_schema.column_names, values)
        if len(matched) == 0:
            return matched
        problem = metrics_problem(delete.stats, id_schema, values, delete.equality_ids) \
            or metrics_problem(data.stats, self.rows.metadata.schema(), table,
                               delete.equality_ids)
        if problem is not None:
            raise RowCheckFailed(f"readers may disagree whether equality delete file "
                                 f"{delete.path} applies to {data.path}: {problem}")
        return matched

    def _removed_rows(self, data: RowFile) -> Rows:
        return self._cached(data, lambda: self.rows.compared_rows(data, False))

    def _added_rows(self, data: RowFile) -> Rows:
        return self._cached(data, lambda: self.rows.compared_rows(data, True))

    def _kept_rows(self, data: RowFile) -> Rows:
        schema = self.rows.metadata.schema()
        return self._cached(data, lambda: self.rows.content.data_rows(data, schema))

    def _cached(self, data: RowFile, read: Rows) -> Rows:
        def rows() -> pa.Table:
            if data.key not in self._read:
                self._read[data.key] = read()
            return self._read[data.key]
        return rows


def _may_touch(delete: RowFile, data: RowFile, rows: SnapshotRows) -> bool:
    """Could ``delete`` delete a row of ``data`` for some reader? (Position deletes also by
    equal path bounds, which pin them to a file across partitions.)"""
    if delete.positional and delete.sequence < data.sequence:
        return False
    return may_apply(delete, data, rows.metadata) or (delete.positional
                                                       and applies(delete, data))


def _same_positions(one: pa.Array, other: pa.Array) -> bool:
    return bool(pc.all(pc.is_in(one, value_set=other)).as_py() is not False
                and pc.all(pc.is_in(other, value_set=one)).as_py() is not False)


def _unique(files: Iterable[RowFile]) -> list[RowFile]:
    return list({f.key: f for f in files}.values())
