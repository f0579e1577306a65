"""Iceberg's conflict rules between the snapshot an operation started from and the branch head.

``WindowChanges`` gathers what the snapshots committed since the start added and removed (only
the entries each snapshot wrote itself). ``validate`` applies the rules Iceberg's Java library
applies for the same operation (``BaseOverwriteFiles``, ``BaseRowDelta``, ``BaseRewriteFiles``),
raising ``CommitFailed`` (409, nothing landed) on the first conflict:

* every isolation level: a file the operation removes must not have been removed since (a
  missing file is checked against the head: ``build``); no delete file added since may apply to
  a data file the operation removes (rewrite, overwrite); an overwrite by row filter conflicts
  with delete files added, or data files removed, since that may match its filter (or its
  conflict filter); a row delta conflicts with delete files added since that may match its
  conflict filter (everything by default);
* ``serializable`` (the default) also: an overwrite or row delta conflicts with data files added
  since (by ``append`` or ``overwrite`` snapshots) that may match its conflict filter.

Which snapshots count: a snapshot's ``operation`` label is its writer's claim, so it is only
believed where the manifests bear it out. Data (or delete files) that a snapshot added are new
unless it is labelled ``replace`` *and* its own manifests show it removing at least as many
data records (delete records) as it adds: a data-equivalent rewrite, Iceberg's compaction.
A ``replace`` that adds more records than it removes, or data added under any other label
(``delete`` included), counts as new. Data files removed since the start count whatever the
label.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from pyiceberg.manifest import DataFile, DataFileContent, ManifestEntry, ManifestEntryStatus
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

from proxy.commits.confine import canonical_location
from proxy.commits.operations.filters import FileFilter
from proxy.commits.operations.head import HeadReader
from proxy.commits.operations.request import (
    OVERWRITE,
    REWRITE,
    ROW_DELTA,
    SERIALIZABLE,
    DataOperation,
    effective_conflict_filter,
)
from proxy.commits.operations.wire import POSITION_PATH_FIELD, referenced_data_file
from proxy.errors import CommitFailed

_REWRITE = "replace"


@dataclass
class WindowChanges:
    """What snapshots after the start wrote: (snapshot operation, file) per kind of change."""

    added_data: list[tuple[str, DataFile]] = field(default_factory=list)
    added_deletes: list[tuple[str, DataFile]] = field(default_factory=list)
    removed: dict[str, tuple[str, DataFile]] = field(default_factory=dict)  # by canonical path

    @classmethod
    def read(cls, snapshots: Iterable[Snapshot], reader: HeadReader) -> WindowChanges:
        """The changes of ``snapshots``, from the manifests each of them added."""
        changes = cls()
        for snapshot in snapshots:
            operation = snapshot.summary.operation.value if snapshot.summary else ""
            entries = [entry for manifest in reader.manifests(snapshot)
                       if manifest.added_snapshot_id == snapshot.snapshot_id
                       for entry in reader.entries(manifest)
                       if entry.snapshot_id == snapshot.snapshot_id]
            rewrites_data, rewrites_deletes = _rewrites(operation, entries)
            for entry in entries:
                changes._add(operation, entry.status, entry.data_file,
                             rewrites_data, rewrites_deletes)
        return changes

    def _add(self, operation: str, status: ManifestEntryStatus, data_file: DataFile,
             rewrites_data: bool, rewrites_deletes: bool) -> None:
        is_data = data_file.content == DataFileContent.DATA
        if status == ManifestEntryStatus.DELETED:
            self.removed[canonical_location(data_file.file_path)] = (operation, data_file)
        elif status == ManifestEntryStatus.ADDED and is_data and not rewrites_data:
            self.added_data.append((operation, data_file))
        elif status == ManifestEntryStatus.ADDED and not is_data and not rewrites_deletes:
            self.added_deletes.append((operation, data_file))


def _rewrites(operation: str, entries: Iterable[ManifestEntry]) -> tuple[bool, bool]:
    """Is a snapshot with ``entries`` (those it wrote) a data-equivalent rewrite of its data
    files, and of its delete files? Only a ``replace`` can be, and only when it removes at
    least as many records of that kind as it adds."""
    if operation != _REWRITE:
        return False, False
    net = {True: 0, False: 0}  # per kind (data?): records removed minus records added
    for entry in entries:
        sign = {ManifestEntryStatus.DELETED: 1, ManifestEntryStatus.ADDED: -1}.get(entry.status, 0)
        net[entry.data_file.content == DataFileContent.DATA] += sign * entry.data_file.record_count
    return net[True] >= 0, net[False] >= 0


def validate(operation: DataOperation, changes: WindowChanges, metadata: TableMetadata,
             removed_data: Iterable[DataFile]) -> None:
    """Refuse (409) ``operation`` if what happened since its start conflicts with it;
    ``removed_data`` are the data files it removes (named or matched by its row filter)."""
    removed = list(removed_data)
    if operation.action in (OVERWRITE, REWRITE) and removed:
        _no_new_deletes_for(removed, changes, metadata)
    if operation.action == OVERWRITE and operation.row_filter is not None:
        matcher = FileFilter(operation.conflict_filter or operation.row_filter, metadata,
                             operation.case_sensitive)
        _no_new_deletes_matching(matcher, changes)
        _no_removed_data_matching(matcher, changes)
    if operation.action == ROW_DELTA:
        matcher = FileFilter(effective_conflict_filter(operation), metadata,
                             operation.case_sensitive)
        _no_new_deletes_matching(matcher, changes)
    if operation.action in (OVERWRITE, ROW_DELTA) and operation.isolation == SERIALIZABLE:
        matcher = FileFilter(effective_conflict_filter(operation), metadata,
                             operation.case_sensitive)
        for _, data_file in changes.added_data:
            if matcher.might_match(data_file):
                raise CommitFailed(f"{operation.action} conflicts with data added since "
                                   "base-snapshot-id that may match its conflict filter "
                                   "(serializable isolation)")


def _no_new_deletes_for(removed: list[DataFile], changes: WindowChanges,
                        metadata: TableMetadata) -> None:
    for _, delete in changes.added_deletes:
        for data_file in removed:
            if delete_may_apply(delete, data_file, metadata):
                raise CommitFailed(
                    "a delete file added since base-snapshot-id applies to a data file this "
                    "operation removes: its deleted rows would come back")


def _no_new_deletes_matching(matcher: FileFilter, changes: WindowChanges) -> None:
    if any(matcher.might_match(delete) for _, delete in changes.added_deletes):
        raise CommitFailed("delete files added since base-snapshot-id may match the "
                           "operation's conflict filter")


def _no_removed_data_matching(matcher: FileFilter, changes: WindowChanges) -> None:
    if any(data_file.content == DataFileContent.DATA and matcher.might_match(data_file)
           for _, data_file in changes.removed.values()):
        raise CommitFailed("data files that may match the operation's filter were removed "
                           "since base-snapshot-id")


def delete_may_apply(delete: DataFile, data_file: DataFile, metadata: TableMetadata) -> bool:
    """Could ``delete`` (a position or equality delete file) delete rows of ``data_file``?
    A file-scoped position delete applies to its one file; otherwise a delete file applies
    within its partition (everywhere, if its spec is unpartitioned), and a position delete
    only to paths within its ``file_path`` bounds."""
    referenced = referenced_data_file(delete)
    path = canonical_location(data_file.file_path)
    if referenced is not None:
        return canonical_location(referenced) == path
    if delete.content == DataFileContent.POSITION_DELETES and not _within_path_bounds(
            delete, data_file.file_path):
        return False
    spec = metadata.specs().get(delete.spec_id)
    if spec is None or spec.is_unpartitioned():
        return True
    return bool(delete.spec_id == data_file.spec_id and delete.partition == data_file.partition)


def _within_path_bounds(delete: DataFile, path: str) -> bool:
    lower = (delete.lower_bounds or {}).get(POSITION_PATH_FIELD)
    upper = (delete.upper_bounds or {}).get(POSITION_PATH_FIELD)
    encoded = path.encode()
    return (lower is None or lower <= encoded) and (upper is None or encoded <= upper)
