"""Server-side scan planning: a scan's ``FileScanTask``s, planned as Iceberg plans them.

``Planner.plan`` reads a snapshot's manifests (in parallel, through a ``ManifestCache``), prunes
manifests by partition summaries and files by partition and column metrics with the scan filter
AND the principal's row filter, attaches the delete files that apply to each data file
(position deletes, deletion vectors and equality deletes, by sequence number: see
``proxy.planning.deletes``) and the residual of the scan filter. Delete files are pruned with
the scan filter only: the row filter is not applied row by row by clients, so a delete file
must never be withheld because of it.

Large plans are split into shards of data manifests (``plan_shards``); ``plan`` with
``data_manifests`` plans one shard. Delete manifests are read for every shard (from the cache).
``narrow`` re-plans a cached wider plan for a narrower filter without reading manifests.

Which files are pruned, and by what (``Plan.pruned``), is decided by a ``Sieve``
(``proxy.planning.sieve``); column dependencies add an inferred filter to it
(``proxy.planning.inferred``) that prunes only files icegov verified them on
(``Plan.dependable``) and never enters a residual. ``plan`` and ``narrow`` take an optional
``FileIndex`` (bloom-filter indexes: ``proxy.planning.index_pruning``) applied last, counted as
``indexes``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from itertools import chain
from typing import Protocol

from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    INITIAL_SEQUENCE_NUMBER,
    DataFile,
    DataFileContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
)
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask
from pyiceberg.table.metadata import TableMetadata

from proxy.errors import BadRequest
from proxy.planning.deletes import DeleteIndex
from proxy.planning.inferred import inference
from proxy.planning.manifest_cache import ManifestCache
from proxy.planning.pruning import AllOf, Pruner, Residuals, check_filters
from proxy.planning.scope import ScanSpec, Scope, resolve_scope
from proxy.planning.sieve import Sieve, Tally, manifest_files, total

__all__ = ["FileIndex", "Plan", "Planner", "ScanSpec"]

_DATA = DataFileContent.DATA
_ADDED = ManifestEntryStatus.ADDED


@dataclass(frozen=True, slots=True)
class Plan:
    """A planned scan: the snapshot read (None when the table has none; the end snapshot of an
    incremental scan), the schema the filters were bound to, and one task per data file.

    The ``DataFile`` objects in the tasks are shared with the manifest cache: never change
    them (copy one to strip statistics)."""

    snapshot_id: int | None
    schema: Schema
    tasks: tuple[FileScanTask, ...]
    pruned: Mapping[str, int] = field(default_factory=dict)  # files pruned, per mechanism
    dependable: frozenset[str] = frozenset()  # planned files column dependencies may prune


class FileIndex(Protocol):
    """A secondary index consulted after partition and metrics pruning (``index_pruning``):
    ``keeps`` is False only for a file that cannot hold a matching row."""

    def keeps(self, data_file: DataFile) -> bool: ...


def _by_index(plan: Plan, index: FileIndex | None) -> Plan:
    """``plan`` without the files ``index`` rules out, counted as ``indexes``."""
    if index is None:
        return plan
    kept = tuple(task for task in plan.tasks if index.keeps(task.file))
    pruned = total([plan.pruned, {"indexes": len(plan.tasks) - len(kept)}])
    return replace(plan, tasks=kept, pruned=pruned)


@dataclass(frozen=True, slots=True)
class _Filters:
    """The evaluators of one plan."""

    data: AllOf  # scan filter AND row filter: which data manifests may match
    deletes: Pruner  # scan filter only: which delete manifests and files are indexed
    residuals: Residuals  # of the scan filter
    sieve: Sieve  # which data files are planned, and what pruned the others
    verified: frozenset[int] = frozenset()  # snapshots whose files dependencies may prune


class Planner:
    """Plans scans; reads manifests with up to ``threads`` threads through ``manifests``."""

    def __init__(self, manifests: ManifestCache, threads: int = 4) -> None:
        self.manifests = manifests
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="icegov-plan")

    def close(self) -> None:
        """Stop the reading threads (plans in progress finish)."""
        self._pool.shutdown(wait=False)

    def plan(self, metadata: TableMetadata, io: FileIO, spec: ScanSpec,
             data_manifests: tuple[str, ...] | None = None,
             index: FileIndex | None = None) -> Plan:
        """Plan ``spec`` on ``metadata``; only the data manifests named in ``data_manifests``
        (one shard from ``plan_shards``) when given; files ``index`` rules out are left out.

        Raises ``NotFound`` (unknown snapshot), ``BadRequest`` (invalid range, a filter that
        does not bind, a shard naming manifests the snapshot does not scan) and ``Forbidden``
        (a row filter that does not bind)."""
        with self.manifests.collector_paused():
            return _by_index(self._plan(metadata, io, spec, data_manifests), index)

    def _plan(self, metadata: TableMetadata, io: FileIO, spec: ScanSpec,
              data_manifests: tuple[str, ...] | None) -> Plan:
        scope = resolve_scope(metadata, io, spec, self.manifests)
        if scope.snapshot is None:
            return Plan(None, scope.schema, ())
        filters = _filters(metadata, scope.schema, spec)
        tally: Tally = Tally()
        if data_manifests is not None:
            manifests = _shard(scope, data_manifests)
        else:
            manifests = _kept_manifests(scope.data, filters.sieve, tally)
        index = self._delete_index(metadata, io, scope, filters)
        parts = list(self._pool.map(lambda m: self._tasks(io, m, scope, filters, index),
                                    manifests))
        snapshot_id = scope.snapshot.snapshot_id
        return Plan(snapshot_id, scope.schema, tuple(chain.from_iterable(p[0] for p in parts)),
                    total([tally, *(p[1] for p in parts)]),
                    frozenset(chain.from_iterable(p[2] for p in parts)))

    def plan_shards(self, metadata: TableMetadata, io: FileIO, spec: ScanSpec,
                    target_entries: int) -> list[tuple[str, ...]]:
        """The data manifests of ``spec`` that may match (by partition summaries), in groups of
        about ``target_entries`` live entries (added + existing, from the manifest list); a
        manifest that does not say how many it holds is a group of its own. Same errors as
        ``plan``."""
        scope = resolve_scope(metadata, io, spec, self.manifests)
        if scope.snapshot is None:
            return []
        filters = _filters(metadata, scope.schema, spec)
        shards: list[tuple[str, ...]] = []
        current: list[str] = []
        held = 0
        for manifest in scope.data:
            if not filters.data.manifest_may_match(manifest):
                continue
            current.append(manifest.manifest_path)
            held += _live_count(manifest, target_entries)
            if held >= target_entries:
                shards.append(tuple(current))
                current, held = [], 0
        if current:
            shards.append(tuple(current))
        return shards

    def narrow(self, metadata: TableMetadata, spec: ScanSpec, wide: Plan,
               index: FileIndex | None = None) -> Plan:
        """``spec`` planned from ``wide``, a plan of the same scope whose filter is implied by
        ``spec.filter``: each task's data file and delete files are evaluated again (partition,
        metrics, ``index``) and its residual recomputed; no manifest is read."""
        filters = _filters(metadata, wide.schema, spec)
        keeps_delete = _memo_by_path(filters.deletes)
        tally: Tally = Tally()
        with self.manifests.collector_paused():
            kept = [task for task in wide.tasks
                    if _sifted(filters.sieve, task.file, task.file.file_path in wide.dependable,
                               tally)]
            tasks = tuple(
                FileScanTask(task.file, {d for d in task.delete_files if keeps_delete(d)},
                             filters.residuals.of(task.file)) for task in kept)
        dependable = frozenset(t.file.file_path for t in kept) & wide.dependable
        return _by_index(Plan(wide.snapshot_id, wide.schema, tasks,
                              total([wide.pruned, tally]), dependable), index)

    def _delete_index(self, metadata: TableMetadata, io: FileIO, scope: Scope,
                      filters: _Filters) -> DeleteIndex:
        index = DeleteIndex(metadata.specs())
        if not scope.deletes:
            return index.seal()
        oldest_data = min((m.min_sequence_number or INITIAL_SEQUENCE_NUMBER
                           for m in scope.data), default=INITIAL_SEQUENCE_NUMBER)
        wanted = [m for m in scope.deletes
                  if (m.sequence_number or INITIAL_SEQUENCE_NUMBER) >= oldest_data
                  and filters.deletes.manifest_may_match(m)]
        keeps = filters.deletes.keeps
        for entries in self._pool.map(lambda m: self.manifests.entries(io, m), wanted):
            for entry in entries:
                if entry.data_file.content != _DATA and keeps(entry.data_file):
                    index.add(entry)
        return index.seal()

    def _tasks(self, io: FileIO, manifest: ManifestFile, scope: Scope, filters: _Filters,
               index: DeleteIndex) -> tuple[list[FileScanTask], Tally, list[str]]:
        """The tasks of one data manifest, what was pruned, and the planned files column
        dependencies may prune (runs on the pool)."""
        entries: Iterable[ManifestEntry] = self.manifests.entries(io, manifest)
        if scope.appended is not None:
            appended = scope.appended
            entries = [e for e in entries if e.status == _ADDED and e.snapshot_id in appended]
        sieve, residual, verified = filters.sieve, filters.residuals.of, filters.verified
        tally: Tally = Tally()
        kept = [e for e in entries if e.data_file.content == _DATA
                and _sifted(sieve, e.data_file, e.snapshot_id in verified, tally)]
        dependable = [e.data_file.file_path for e in kept if e.snapshot_id in verified]
        if index.empty:
            return ([FileScanTask(e.data_file, None, residual(e.data_file)) for e in kept],
                    tally, dependable)
        return ([FileScanTask(e.data_file, index.for_data(e), residual(e.data_file))
                 for e in kept], tally, dependable)


def _filters(metadata: TableMetadata, schema: Schema, spec: ScanSpec) -> _Filters:
    check_filters(schema, spec.filter, spec.row_filter, spec.case_sensitive)
    specs = metadata.specs()
    scan = Pruner(specs, schema, spec.filter, spec.case_sensitive)
    row = Pruner(specs, schema, spec.row_filter, True)
    inferred = (inference(metadata, schema, spec.filter, spec.case_sensitive)
                if spec.dependencies else None)
    dependencies = None if inferred is None else Pruner(specs, schema, inferred.filter, True)
    return _Filters(
        AllOf(scan, row), Pruner(specs, schema, spec.filter, spec.case_sensitive),
        Residuals(specs, schema, spec.filter, spec.case_sensitive),
        Sieve(scan, row, dependencies),
        frozenset() if inferred is None else inferred.verified)


def _sifted(sieve: Sieve, data_file: DataFile, dependable: bool, tally: Tally) -> bool:
    """Whether ``sieve`` plans ``data_file``; what pruned it is counted in ``tally``."""
    reason = sieve.rejection(data_file, dependable)
    if reason is None:
        return True
    tally[reason] += 1
    return False


def _kept_manifests(manifests: Iterable[ManifestFile], sieve: Sieve,
                    tally: Tally) -> list[ManifestFile]:
    """The data manifests whose partition summaries may match; the files of the others are
    counted in ``tally``."""
    kept = []
    for manifest in manifests:
        reason = sieve.manifest_rejection(manifest)
        if reason is None:
            kept.append(manifest)
        else:
            tally[reason] += manifest_files(manifest)
    return kept


def _shard(scope: Scope, paths: tuple[str, ...]) -> list[ManifestFile]:
    """The data manifests a shard names, which must all belong to the scope."""
    by_path = {m.manifest_path: m for m in scope.data}
    missing = [p for p in paths if p not in by_path]
    if missing:
        raise BadRequest("the plan task names manifests this snapshot does not scan")
    return [by_path[p] for p in paths]


def _live_count(manifest: ManifestFile, unknown: int) -> int:
    added, existing = manifest.added_files_count, manifest.existing_files_count
    if added is None or existing is None:
        return unknown
    return added + existing


def _memo_by_path(pruner: Pruner) -> Callable[[DataFile], bool]:
    verdicts: dict[str, bool] = {}

    def keeps(delete_file: DataFile) -> bool:
        verdict = verdicts.get(delete_file.file_path)
        if verdict is None:
            verdict = verdicts[delete_file.file_path] = pruner.keeps(delete_file)
        return verdict

    return keeps
