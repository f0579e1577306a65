"""What a scan covers: its snapshot, the schema its filters bind to, and the manifests to read.

A plain scan reads the data and delete manifests of one snapshot (``snapshot_id``, or the current
``main`` snapshot; a table without one has nothing to scan). An incremental scan follows
Iceberg's ``IncrementalAppendScan``: the files ADDED by ``append`` snapshots after
``start_snapshot_id`` (exclusive) up to ``end_snapshot_id`` (inclusive, the current snapshot when
absent) on the ancestry of the end; it reads data manifests only (appends add no deletes).

A scan's filters bind to ``scanned_schema``: the scanned snapshot's schema (with
``use_snapshot_schema``) or the current one, *as the reader sees it* — without the top-level
columns hidden from the reader (``ScanSpec.hidden``). A hidden column is then absent from
everything the scan names or binds, exactly like a column the table never had.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestContent, ManifestFile
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation, Snapshot

from proxy.errors import BadRequest, NotFound
from proxy.planning.manifest_cache import ManifestCache

_ALWAYS_TRUE = AlwaysTrue()


@dataclass(frozen=True, slots=True)
class ScanSpec:
    """One scan, as the planner needs it.

    ``filter`` is the client's (unbound) filter; ``row_filter`` the principal's row filter from
    policy (``ReadView.filter_expression``): files that cannot match ``filter AND row_filter``
    are pruned, while residuals are computed for ``filter`` alone. ``use_snapshot_schema`` binds
    the filters to the scanned snapshot's schema instead of the current one. Setting
    ``start_snapshot_id`` or ``end_snapshot_id`` makes the scan incremental. ``hidden`` names
    the top-level columns hidden from the reader: they are left out of the schema the scan
    binds to (``scanned_schema``). ``dependencies``: the table's column dependencies may prune
    (``proxy.planning.inferred``).
    """

    snapshot_id: int | None = None
    filter: BooleanExpression = _ALWAYS_TRUE
    row_filter: BooleanExpression = _ALWAYS_TRUE
    case_sensitive: bool = True
    use_snapshot_schema: bool = False
    start_snapshot_id: int | None = None
    end_snapshot_id: int | None = None
    hidden: frozenset[str] = frozenset()
    dependencies: bool = True

    @property
    def incremental(self) -> bool:
        """True for an incremental (appended files between two snapshots) scan."""
        return self.start_snapshot_id is not None or self.end_snapshot_id is not None


@dataclass(frozen=True, slots=True)
class Scope:
    """The snapshot a scan reads (None: nothing to scan), the schema its filters bind to, its
    candidate data and delete manifests, and for incremental scans the snapshots whose ADDED
    entries count."""

    snapshot: Snapshot | None
    schema: Schema
    data: tuple[ManifestFile, ...] = ()
    deletes: tuple[ManifestFile, ...] = ()
    appended: frozenset[int] | None = None


def resolve_scope(metadata: TableMetadata, io: FileIO, spec: ScanSpec,
                  cache: ManifestCache) -> Scope:
    """The scope of ``spec`` on ``metadata``: ``NotFound`` for an unknown snapshot,
    ``BadRequest`` for an invalid incremental range."""
    if spec.incremental:
        return _incremental(metadata, io, spec, cache)
    if spec.snapshot_id is not None:
        snapshot = metadata.snapshot_by_id(spec.snapshot_id)
        if snapshot is None:
            raise NotFound(f"snapshot {spec.snapshot_id} does not exist in this table")
    else:
        snapshot = metadata.current_snapshot()
    schema = visible(_schema(metadata, snapshot, spec.use_snapshot_schema), spec.hidden)
    if snapshot is None:
        return Scope(None, schema)
    manifests = cache.manifests(io, snapshot.manifest_list)
    return Scope(snapshot, schema,
                 tuple(m for m in manifests if m.content == ManifestContent.DATA),
                 tuple(m for m in manifests if m.content == ManifestContent.DELETES))


def require_snapshots(metadata: TableMetadata, snapshot_id: int | None,
                      start_snapshot_id: int | None, end_snapshot_id: int | None) -> None:
    """``NotFound``, worded as ``resolve_scope`` words it, for a snapshot the scan names that
    the table does not have (checked before anything else about the scan is judged)."""
    if snapshot_id is not None and metadata.snapshot_by_id(snapshot_id) is None:
        raise NotFound(f"snapshot {snapshot_id} does not exist in this table")
    if end_snapshot_id is not None and metadata.snapshot_by_id(end_snapshot_id) is None:
        raise NotFound(f"end snapshot {end_snapshot_id} does not exist in this table")
    if start_snapshot_id is not None and metadata.snapshot_by_id(start_snapshot_id) is None:
        raise NotFound(f"start snapshot {start_snapshot_id} does not exist in this table")


def scanned_schema(metadata: TableMetadata, spec: ScanSpec) -> Schema:
    """The schema ``spec``'s names resolve in and its filters bind to, as ``resolve_scope``
    chooses it, without the columns hidden from the reader. A snapshot the table does not
    have counts as none (``require_snapshots`` refuses it first)."""
    if spec.incremental:
        snapshot = (metadata.current_snapshot() if spec.end_snapshot_id is None
                    else metadata.snapshot_by_id(spec.end_snapshot_id))
    elif spec.snapshot_id is not None:
        snapshot = metadata.snapshot_by_id(spec.snapshot_id)
    else:
        snapshot = metadata.current_snapshot()
    return visible(_schema(metadata, snapshot, spec.use_snapshot_schema), spec.hidden)


def visible(schema: Schema, hidden: frozenset[str]) -> Schema:
    """``schema`` without its top-level columns named in ``hidden`` (field ids unchanged)."""
    if not hidden or not any(f.name in hidden for f in schema.fields):
        return schema
    return Schema(*(f for f in schema.fields if f.name not in hidden),
                  schema_id=schema.schema_id)


def _schema(metadata: TableMetadata, snapshot: Snapshot | None, of_snapshot: bool) -> Schema:
    if of_snapshot and snapshot is not None and snapshot.schema_id is not None:
        found = metadata.schema_by_id(snapshot.schema_id)
        if found is not None:
            return found
    return metadata.schema()


def _incremental(metadata: TableMetadata, io: FileIO, spec: ScanSpec,
                 cache: ManifestCache) -> Scope:
    if spec.snapshot_id is not None:
        raise BadRequest("snapshot-id cannot be combined with start-snapshot-id or "
                         "end-snapshot-id (an incremental scan)")
    end = _end_snapshot(metadata, spec)
    schema = visible(_schema(metadata, end, spec.use_snapshot_schema), spec.hidden)
    if end is None:
        return Scope(None, schema)
    start = spec.start_snapshot_id
    ancestry = list(_ancestors(metadata, end))
    if start is not None and start != end.snapshot_id \
            and not any(s.parent_snapshot_id == start for s in ancestry):
        if metadata.snapshot_by_id(start) is None:
            raise NotFound(f"start snapshot {start} does not exist in this table")
        raise BadRequest(f"start-snapshot-id {start} is not an ancestor of end snapshot "
                         f"{end.snapshot_id}")
    appends = [s for s in _until(ancestry, start)
               if s.summary is not None and s.summary.operation == Operation.APPEND]
    appended = frozenset(s.snapshot_id for s in appends)
    manifests: dict[str, ManifestFile] = {}
    for snapshot in appends:
        for manifest in cache.manifests(io, snapshot.manifest_list):
            if manifest.content == ManifestContent.DATA \
                    and manifest.added_snapshot_id in appended:
                manifests.setdefault(manifest.manifest_path, manifest)
    return Scope(end, schema, tuple(manifests.values()), (), appended)


def _end_snapshot(metadata: TableMetadata, spec: ScanSpec) -> Snapshot | None:
    if spec.end_snapshot_id is None:
        current = metadata.current_snapshot()
        if current is None and spec.start_snapshot_id is not None:
            raise NotFound(f"start snapshot {spec.start_snapshot_id} does not exist in this "
                           "table")
        return current
    end = metadata.snapshot_by_id(spec.end_snapshot_id)
    if end is None:
        raise NotFound(f"end snapshot {spec.end_snapshot_id} does not exist in this table")
    return end


def _ancestors(metadata: TableMetadata, snapshot: Snapshot) -> Iterator[Snapshot]:
    """``snapshot`` and its ancestors, newest first (a parent cycle ends the walk)."""
    seen: set[int] = set()
    current: Snapshot | None = snapshot
    while current is not None and current.snapshot_id not in seen:
        seen.add(current.snapshot_id)
        yield current
        parent = current.parent_snapshot_id
        current = None if parent is None else metadata.snapshot_by_id(parent)


def _until(ancestry: list[Snapshot], start: int | None) -> Iterator[Snapshot]:
    """The ancestors after ``start`` (exclusive), newest first."""
    for snapshot in ancestry:
        if snapshot.snapshot_id == start:
            return
        yield snapshot
