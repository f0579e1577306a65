"""Row-level verification, where a snapshot's manifests cannot decide between DELETE and UPDATE.

Two shapes need the rows themselves (``rules`` asks, through ``SnapshotRows``):

**Removed delete files** (``diff``'s ``exposing_deletes``: not expired, not orphaned with their one
data file). Removing one is a DELETE only if every row it deleted stays deleted:

* a deleted position ``(file, pos)`` (position delete file or deletion vector) stays deleted when
  every data file live before the snapshot at that location (compared canonically, so a
  spelling the readers would not match still counts) is removed by the same snapshot, or has
  ``pos`` deleted by a position delete / DV live after the snapshot (added by it, or kept) that
  the readers really apply to it (``rowscope.applies``: sequence number, partition or
  pinning, ``file_path`` bounds, ``referenced_data_file``, the exact location string, a DV's
  precedence); with no such data file the delete was dangling and exposes nothing;
* deleted values (equality delete) stay deleted when an equality delete live after the snapshot,
  on the same ``equality_ids``, at least as new (so newer than every data file the removed one
  applied to), scoped to the same partition (or global), with metrics that describe its content
  (Java skips an equality delete by its bounds and null counts: ``rowstats``), deletes every
  one of them.

**Copy-on-write rewrites** (data files removed and added, no delete files added, none exposing):
a DELETE when every added row is one of the removed files' *live* rows, as a multiset (``rowkeys``),
otherwise UPDATE. Live rows are a removed file's rows minus those that delete files live before
the snapshot may delete (``rowscope.may_apply``: positions, DVs, equality values in its
partition): re-adding a row a delete file had removed re-exposes it. Rows are compared in the
table's current schema, by field id, and on format 3 with their row lineage as readers see it
(``rowlineage``: ``_row_id`` and ``_last_updated_sequence_number``, written or inherited); an
added file may hold no column outside that schema and the lineage columns. What readers
take from a manifest entry instead of the file must match the file (``rowstats``): every data
file compared must be in a known spec with the partition its rows transform to (Java fills
identity columns from it), and an added file's ``record_count`` and metrics (counts, bounds:
readers prune on them) must describe its rows. Counts are compared before any row is read. A
commit that also changes table metadata is not compared (its schema after the commit is not
the one read here): UPDATE.

A ``replace`` that claims to be a compaction is read the same way, by ``rewrite_rows``
(``SnapshotRows.is_data_equivalent``): its live rows removed must be its live rows added.

Reads go through the table's FileIO, within the commit's ``row_bytes_budget`` (``rowfiles``).
When a check cannot be completed (budget, unreadable or unsupported file), the stricter
classification stands. Each check done, and why one failed, is kept for the audit record
(``RowVerifier.checks`` -> ``CommitEvidence.row_checks``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.manifest import ManifestContent, ManifestFile
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata

from proxy.commits.confine import canonical_location
from proxy.commits.diff import SnapshotChange
from proxy.commits.manifests import ContentFile, ManifestReader
from proxy.commits.rewrite_rows import data_equivalent
from proxy.commits.rowfiles import ContentReader, RowBudget, RowCheckFailed, RowFile, row_file
from proxy.commits.rowkeys import RowKeyError, is_sub_multiset, rows_deleted_by
from proxy.commits.rowlineage import comparable, first_row_ids, lineage_schema, with_lineage
from proxy.commits.rowscope import applies, may_apply, same_partition, unpartitioned
from proxy.commits.rowstats import metrics_problem, partition_problem

_Key = tuple[bool, str, int | None]


@dataclass
class RowVerifier:
    """One commit's row checks: the byte budget they share and what each found."""

    budget: RowBudget
    checks: list[str] = field(default_factory=list)

    @classmethod
    def with_budget(cls, row_bytes: int) -> RowVerifier:
        return cls(RowBudget(row_bytes))

    def snapshot(self, reader: ManifestReader, metadata: TableMetadata | None,
                 before: tuple[ManifestFile, ...], manifest_list: str, snapshot_id: int,
                 schema_stable: bool) -> SnapshotRows | None:
        """Row checks for one new snapshot measured against ``before`` (None: no base table,
        so there are no rows to compare)."""
        if metadata is None:
            return None
        content = ContentReader(reader.io, metadata, self.budget)
        return SnapshotRows(self, reader, content, metadata, before, manifest_list, snapshot_id,
                            schema_stable)


@dataclass
class SnapshotRows:
    """Row checks for one snapshot (``rules.RowChecks``)."""

    verifier: RowVerifier
    reader: ManifestReader
    content: ContentReader
    metadata: TableMetadata
    before: tuple[ManifestFile, ...]
    manifest_list: str
    snapshot_id: int
    schema_stable: bool
    _after: tuple[ManifestFile, ...] | None = None
    _entries: dict[str, list[RowFile]] = field(default_factory=dict)
    _data_before: dict[str, list[RowFile]] | None = None

    def still_exposing(self, change: SnapshotChange) -> tuple[ContentFile, ...]:
        """The removed delete files of ``change.exposing_deletes`` whose rows come back."""
        try:
            removed = _keyed(self._live(self._dropped(ManifestContent.DELETES)))
            after = self.deletes_after(change)
            gone = {f.key for f in change.removed_data}
            exposing = tuple(d for d in change.exposing_deletes
                             if not self._stays_deleted(_find(removed, d), after, gone))
        except (RowCheckFailed, RowKeyError) as failed:
            self.note(f"{failed}: removed delete files count as re-exposing rows")
            return change.exposing_deletes
        kept = len(change.exposing_deletes) - len(exposing)
        self.note(f"{kept} of {len(change.exposing_deletes)} removed delete files checked: "
                   "every row they deleted stays deleted" + (
                       f"; {len(exposing)} re-expose rows" if exposing else ""))
        return exposing

    def only_removes_rows(self, change: SnapshotChange) -> bool:
        """True if every row ``change`` adds is one of the live rows it removes."""
        if not self.schema_stable:
            self.note("copy-on-write rows not compared: the commit also changes table "
                       "metadata")
            return False
        try:
            removed, added = self.data_files(change)
            return self._compare(removed, added, list(self.deletes_before().values()))
        except (RowCheckFailed, RowKeyError) as failed:
            self.note(f"copy-on-write rows not compared ({failed}): UPDATE")
            return False

    def is_data_equivalent(self, change: SnapshotChange) -> bool:
        """True if the live rows ``change`` removes are the live rows it adds, and its kept data
        files keep their deleted rows (``rewrite_rows``)."""
        return data_equivalent(self, change)

    def data_files(self, change: SnapshotChange) -> tuple[list[RowFile], list[RowFile]]:
        """The data files ``change`` removes and adds, as their manifest entries list them."""
        dropped = _keyed(self._live(self._dropped(ManifestContent.DATA)))
        fresh = _keyed(self._live(self._fresh(ManifestContent.DATA)))
        return ([_find(dropped, f) for f in change.removed_data],
                [_find(fresh, f) for f in change.added_data])

    def deletes_before(self) -> dict[_Key, RowFile]:
        """Delete files live before the snapshot (the ones it removes and the kept ones)."""
        return _keyed(self._live(self._of(self.before, ManifestContent.DELETES)))

    def _compare(self, removed: list[RowFile], added: list[RowFile],
                 deletes: list[RowFile]) -> bool:
        claimed_added, claimed_removed = (sum(f.records for f in fs) for fs in (added, removed))
        if claimed_added > claimed_removed:
            self.note(f"copy-on-write: {claimed_added} added rows cannot all be among the "
                       f"{claimed_removed} rows of {len(removed)} removed data files: UPDATE")
            return False
        applying = {r.key: [d for d in deletes if may_apply(d, r, self.metadata)]
                    for r in removed}
        self.reserve([*removed, *added, *{d.key: d for ds in applying.values()
                                           for d in ds}.values()])
        added_rows = comparable([self.compared_rows(f, True) for f in added], removed)
        live_rows = comparable([self._live_rows(r, applying[r.key]) for r in removed], removed)
        subset = is_sub_multiset(added_rows, live_rows)
        count_added = sum(t.num_rows for t in added_rows)
        count_live = sum(t.num_rows for t in live_rows)
        self.note(f"copy-on-write: {count_added} added rows "
                   f"{'are all' if subset else 'are not all'} among the {count_live} live rows "
                   f"of {len(removed)} removed data files: {'DELETE' if subset else 'UPDATE'}")
        return subset

    def compared_rows(self, data: RowFile, added: bool) -> pa.Table:
        """``data``'s rows as the checks compare them: in the current schema, with their row
        lineage on format 3 (``rowlineage``), if its entry describes them (``described``). An
        added file may hold no column outside that schema."""
        schema = lineage_schema(self.metadata)
        rows = self.content.data_rows(data, schema, strict=added)
        return with_lineage(self.described(data, rows, added, schema), data)

    def described(self, data: RowFile, rows: pa.Table, added: bool,
                  schema: Schema | None = None) -> pa.Table:
        """``rows`` of ``data`` (projected onto ``schema``, by default the current one), if its
        manifest entry describes them (partition always, metrics for an added file);
        otherwise the check fails."""
        schema = schema or self.metadata.schema()
        problem = partition_problem(self.metadata.specs().get(data.spec_id), schema,
                                    data.partition, rows)
        if problem is None and added:
            problem = metrics_problem(data.stats, schema, rows)
        if problem is not None:
            raise RowCheckFailed(f"the manifest entry of data file {data.path} does not "
                                 f"describe its rows: {problem}")
        return rows

    def _live_rows(self, data: RowFile, deletes: list[RowFile]) -> pa.Table:
        rows = self.compared_rows(data, False)
        location = canonical_location(data.path)
        dead: list[pa.Array] = []
        for delete in deletes:
            if delete.positional:  # every spelling of the file: over-applying is stricter
                dead += [positions for path, positions in self.content.positions(delete).items()
                         if canonical_location(path) == location]
            else:
                id_schema = self.id_schema(delete.equality_ids)
                values = self.content.equality_values(delete, id_schema)
                dead.append(rows_deleted_by(rows, id_schema.column_names, values))
        if not dead:
            return rows
        everything = pa.array(range(rows.num_rows), pa.int64())
        return rows.filter(pc.invert(pc.is_in(everything, value_set=pa.concat_arrays(dead))))

    def _stays_deleted(self, gone: RowFile, after: Mapping[_Key, RowFile],
                       gone_data: set[_Key]) -> bool:
        if gone.positional:
            return all(self._positions_stay_deleted(path, positions, after, gone_data)
                       for path, positions in self.content.positions(gone).items())
        if gone.equality:
            return self._values_covered(gone, after)
        return False

    def _positions_stay_deleted(self, path: str, positions: pa.Array,
                                after: Mapping[_Key, RowFile], gone_data: set[_Key]) -> bool:
        """Every data file live before at ``path`` (any spelling) is removed, or has these
        positions deleted by delete files the readers apply to it after the snapshot."""
        targets = self.data_files_before().get(canonical_location(path), [])
        return all(data.key in gone_data or self._positions_covered(data, positions, after)
                   for data in targets)

    def _positions_covered(self, data: RowFile, positions: pa.Array,
                           after: Mapping[_Key, RowFile]) -> bool:
        vectors = [f for f in after.values() if f.is_vector and f.referenced_field == data.path]
        candidates = vectors or [f for f in after.values() if f.positional]  # Java: a DV wins
        covering = sorted((f for f in candidates if applies(f, data)),
                          key=lambda f: (f.referenced is None, -f.sequence))
        remaining = positions
        for delete in covering:
            if len(remaining) == 0:
                break
            deleted = self.content.positions(delete).get(data.path)  # the exact location
            if deleted is not None:
                remaining = remaining.filter(pc.invert(pc.is_in(remaining, value_set=deleted)))
        return len(remaining) == 0

    def _values_covered(self, gone: RowFile, after: Mapping[_Key, RowFile]) -> bool:
        id_schema = self.id_schema(gone.equality_ids)
        names = id_schema.column_names
        remaining = self.content.equality_values(gone, id_schema)
        covering = [f for f in after.values() if f.equality
                    and set(f.equality_ids) == set(gone.equality_ids)
                    and f.sequence >= gone.sequence and self._covers_scope(f, gone)]
        for delete in covering:
            if remaining.num_rows == 0:
                break
            values = self.content.equality_values(delete, id_schema)
            problem = metrics_problem(delete.stats, id_schema, values, delete.equality_ids)
            if problem is not None:
                self.note(f"equality delete file {delete.path} covers nothing: {problem}")
                continue
            matched = rows_deleted_by(remaining, names, values)
            everything = pa.array(range(remaining.num_rows), pa.int64())
            remaining = remaining.filter(pc.invert(pc.is_in(everything, value_set=matched)))
        return bool(remaining.num_rows == 0)

    def _covers_scope(self, covering: RowFile, gone: RowFile) -> bool:
        return unpartitioned(covering, self.metadata) or same_partition(covering, gone)

    def id_schema(self, ids: Iterable[int]) -> Schema:
        """Top-level columns of the current schema with these field ids, in id order."""
        schema = self.metadata.schema()
        top = {f.field_id: f for f in schema.fields}
        wanted = sorted(set(ids))
        if not wanted or any(i not in top for i in wanted):
            raise RowCheckFailed(f"equality ids {wanted} are not top-level columns of the "
                                 "current schema")
        return Schema(*(top[i] for i in wanted))

    def reserve(self, files: list[RowFile]) -> None:
        claimed = sum(f.size for f in files)
        if claimed > self.verifier.budget.remaining:
            self.verifier.budget.charge(claimed, f"{len(files)} files ({claimed} bytes)")

    def deletes_after(self, change: SnapshotChange) -> dict[_Key, RowFile]:
        """Delete files live after the snapshot: kept ones and the ones it adds."""
        removed = {f.key for f in change.removed_deletes}
        before = self.deletes_before()
        added = {f.key for f in change.added_deletes}
        fresh = {k: f for k, f in _keyed(self._live(self._fresh(ManifestContent.DELETES)))
                 .items() if k in added}
        return {**{k: f for k, f in before.items() if k not in removed}, **fresh}

    def data_files_before(self) -> dict[str, list[RowFile]]:
        """The data files live before the snapshot by canonical location (read when needed)."""
        if self._data_before is None:
            self._data_before = {}
            for data in self._live(self._of(self.before, ManifestContent.DATA)):
                self._data_before.setdefault(canonical_location(data.path), []).append(data)
        return self._data_before

    def _live(self, manifests: Iterable[ManifestFile]) -> list[RowFile]:
        """Live files of ``manifests`` (each manifest read once per snapshot)."""
        files: list[RowFile] = []
        for manifest in manifests:
            path = manifest.manifest_path
            if path not in self._entries:
                entries = [(e.live, row_file(e)) for e in self.reader.entries(manifest)]
                self._entries[path] = [f for live, f in first_row_ids(manifest, entries)
                                       if live]
            files += self._entries[path]
        return files

    def _dropped(self, content: ManifestContent) -> list[ManifestFile]:
        after = {m.manifest_path for m in self._after_manifests()}
        return [m for m in self._of(self.before, content) if m.manifest_path not in after]

    def _fresh(self, content: ManifestContent) -> list[ManifestFile]:
        before = {m.manifest_path for m in self.before}
        return [m for m in self._of(self._after_manifests(), content)
                if m.manifest_path not in before]

    def _after_manifests(self) -> tuple[ManifestFile, ...]:
        if self._after is None:
            self._after = self.reader.manifests(self.manifest_list)
        return self._after

    @staticmethod
    def _of(manifests: Iterable[ManifestFile], content: ManifestContent) -> list[ManifestFile]:
        return [m for m in manifests if m.content == content]

    def note(self, text: str) -> None:
        self.verifier.checks.append(f"snapshot {self.snapshot_id}: {text}")


def _keyed(files: Iterable[RowFile]) -> dict[_Key, RowFile]:
    return {f.key: f for f in files}


def _find(files: Mapping[_Key, RowFile], wanted: ContentFile) -> RowFile:
    found = files.get(wanted.key)
    if found is None:
        raise RowCheckFailed(f"{wanted.path} is not among the manifests' live entries")
    return found
