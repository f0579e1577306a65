"""What a data operation does to the branch head: which head manifests it keeps, which it
rewrites to remove files, which data files it removes, and the snapshot ``operation`` it is.

Removed files are found in the head's live entries: by name (their canonical location), or for
``delete-files`` and ``overwrite-files`` by row filter, which must align with whole files — a
file the filter matches in part (by partition and metrics) is refused (400): only whole files
can be removed without rewriting them, which is the writer's job (``overwrite-files`` with the
rewritten rows, or ``row-delta`` with delete files). A named file that is not live at the head
is a conflict (409) if a snapshot since the operation's start removed it, else a bad request.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    ManifestContent,
    ManifestEntryStatus,
    ManifestFile,
)
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

from proxy.commits.confine import canonical_location, shown_path
from proxy.commits.intent import UnverifiableCommit
from proxy.commits.operations.conflicts import WindowChanges
from proxy.commits.operations.filters import FileFilter
from proxy.commits.operations.head import HeadReader
from proxy.commits.operations.merge import manifests_to_merge
from proxy.commits.operations.request import (
    APPEND,
    DELETE,
    REWRITE,
    ROW_DELTA,
    DataOperation,
)
from proxy.commits.operations.wire import referenced_data_file
from proxy.commits.operations.writer import Rewrite, SnapshotPlan
from proxy.errors import CommitFailed


@dataclass
class _Removal:
    """What to remove: named paths (canonical) of each kind, and the row filter."""

    data: set[str]
    deletes: set[str]
    row_filter: FileFilter | None
    found: set[str] = field(default_factory=set)
    removed_data: list[DataFile] = field(default_factory=list)


def plan_operation(operation: DataOperation, head: Snapshot | None, reader: HeadReader,
                   changes: WindowChanges, metadata: TableMetadata
                   ) -> tuple[SnapshotPlan, list[DataFile]]:
    """The snapshot plan of ``operation`` on ``head``, and the data files it removes."""
    added = operation.added_data + operation.added_deletes
    manifests = reader.manifests(head) if head is not None else []
    if operation.action == APPEND:
        merged = manifests_to_merge(manifests, added, metadata)
        merging = {m.manifest_path for m in merged}
        return SnapshotPlan("append", head,
                            kept=[m for m in manifests if m.manifest_path not in merging],
                            added=added, merged=[(m, reader.entries(m)) for m in merged]), []
    removal = _Removal(
        data={canonical_location(p) for p in operation.deleted_data},
        deletes={canonical_location(p) for p in operation.deleted_deletes},
        row_filter=FileFilter(operation.row_filter, metadata, operation.case_sensitive)
        if operation.row_filter is not None else None)
    plan = SnapshotPlan(_snapshot_operation(operation), head, added=added)
    live_data: set[str] = set()
    for manifest in manifests:
        if not _may_hold_removed(manifest, removal, operation):
            plan.kept.append(manifest)
            continue
        rewrite = _removals_in(manifest, reader, removal, live_data)
        if rewrite.removed:
            plan.rewrites.append(rewrite)
        else:
            plan.kept.append(manifest)
    _check_named_found(removal, changes)
    _check_referenced_live(operation, live_data, changes)
    return plan, removal.removed_data


def _snapshot_operation(operation: DataOperation) -> str:
    adds_data, adds_deletes = bool(operation.added_data), bool(operation.added_deletes)
    if operation.action == DELETE:
        return "delete"
    if operation.action == REWRITE:
        return "replace"
    if operation.action == ROW_DELTA:
        return "delete" if adds_deletes and not adds_data else \
            "append" if not adds_deletes else "overwrite"
    return "overwrite" if adds_data else "delete"


def _may_hold_removed(manifest: ManifestFile, removal: _Removal,
                      operation: DataOperation) -> bool:
    """Must ``manifest`` be read? Delete manifests only when delete files are named; data
    manifests unless only a row filter removes and the manifest's partitions cannot match."""
    if manifest.content == ManifestContent.DELETES:
        return bool(removal.deletes)
    if removal.data or _references_old_data(operation):
        return True
    return removal.row_filter is not None and removal.row_filter.might_match_manifest(manifest)


def _references_old_data(operation: DataOperation) -> bool:
    """Does the operation add position deletes scoped to data files it does not add?"""
    added = {canonical_location(f.file_path) for f in operation.added_data}
    return any(ref is not None and canonical_location(ref) not in added
               for ref in map(referenced_data_file, operation.added_deletes))


def _removals_in(manifest: ManifestFile, reader: HeadReader, removal: _Removal,
                 live_data: set[str]) -> Rewrite:
    removed: set[str] = set()
    entries = reader.entries(manifest)
    for entry in entries:
        if entry.status == ManifestEntryStatus.DELETED:
            continue
        data_file = entry.data_file
        key = canonical_location(data_file.file_path)
        is_data = data_file.content == DataFileContent.DATA
        if is_data:
            live_data.add(key)
        if key in (removal.data if is_data else removal.deletes) or (
                is_data and _filter_removes(removal.row_filter, data_file)):
            removed.add(key)
            removal.found.add(key)
            if is_data:
                removal.removed_data.append(data_file)
    return Rewrite(manifest, entries, frozenset(removed))


def _filter_removes(row_filter: FileFilter | None, data_file: DataFile) -> bool:
    if row_filter is None or not row_filter.might_match(data_file):
        return False
    if row_filter.must_match(data_file):
        return True
    raise UnverifiableCommit(
        f"row-filter matches some but not all rows of {shown_path(data_file.file_path)}: only "
        "whole files can be removed by filter; use overwrite-files with the rewritten rows, "
        "or row-delta with delete files")


def _check_named_found(removal: _Removal, changes: WindowChanges) -> None:
    for key in sorted((removal.data | removal.deletes) - removal.found):
        if key in changes.removed:
            raise CommitFailed(f"{shown_path(key)} was removed since base-snapshot-id by another "
                               "commit")
        raise UnverifiableCommit(f"{shown_path(key)} is not a live file of the branch")


def _check_referenced_live(operation: DataOperation, live_data: set[str],
                           changes: WindowChanges) -> None:
    """Position deletes scoped to a data file need that file live (or added alongside)."""
    added = {canonical_location(f.file_path) for f in operation.added_data}
    for delete in operation.added_deletes:
        referenced = referenced_data_file(delete)
        key = canonical_location(referenced) if referenced is not None else None
        if key is None or key in live_data or key in added:
            continue
        if key in changes.removed:
            raise CommitFailed(f"data file {shown_path(key)} that a delete file references was "
                               "removed since base-snapshot-id")
        raise UnverifiableCommit(f"delete file {shown_path(delete.file_path)} references "
                                 f"{shown_path(key)}, which is not a live data file of the branch")


