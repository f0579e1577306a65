"""Files the table's history removed: what a commit may never add again.

A snapshot that removes a file writes a manifest listing it DELETED, dated to itself. While that
snapshot is in the table, expiring it deletes the file (Java's incremental cleanup reads exactly
those entries), so a file added again after its removal would be deleted under a table that
lists it live, and its rows (which a DELETE took out) would be back until then: a partial
rollback, which is ``MANAGE_SNAPSHOTS``' power, not an INSERT's.

``removed_in_history`` answers which of a commit's added files some snapshot still in the table
removed. Each snapshot's removals are read once per process (its manifest list and the manifests
it wrote with deleted entries; both are immutable) and remembered by manifest-list path, so a
commit reads only the snapshots committed since the last one it saw; like the manifests' caches,
they are kept per table (``manifests.cache_scope``), never served to another. The reading has
its own bounds (``HISTORY_LIMITS``), apart from the commit's own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import structlog
from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestEntryStatus
from pyiceberg.table.metadata import TableMetadata

from proxy.commits.confine import TableLocations
from proxy.commits.intent import UnverifiableCommit
from proxy.commits.limits import CommitLimits
from proxy.commits.lru import SizedLru
from proxy.commits.manifests import (
    CacheScope,
    CommitTooLarge,
    FileKey,
    ManifestReader,
    cache_scope,
)

log = structlog.get_logger("icegov")

HISTORY_LIMITS = CommitLimits(max_list_records=5_000_000, max_manifests_read=50_000,
                              max_entries=50_000_000)
"""What reading a table's removals may cost in one commit (a cold process, a long history)."""

_REMOVED: SizedLru[tuple[CacheScope | None, str], frozenset[FileKey]] = SizedLru(
    500_000, lambda keys: max(len(keys), 1))
"""Per manifest list (one snapshot): the files that snapshot removed."""


def removed_in_history(io: FileIO, metadata: TableMetadata, locations: TableLocations,
                       keys: Iterable[FileKey]) -> dict[FileKey, int]:
    """Of ``keys``, those a snapshot of ``metadata`` removed, with that snapshot's id (raises
    ``UnverifiableCommit`` if a manifest cannot be read, ``CommitTooLarge`` past the limits)."""
    wanted = set(keys)
    if not wanted:
        return {}
    reader = ManifestReader(io, locations, HISTORY_LIMITS, cache_scope(metadata))
    found: dict[FileKey, int] = {}
    for snapshot in metadata.snapshots:
        removed = _removed_by(reader, snapshot.snapshot_id, snapshot.manifest_list)
        for key in wanted & removed:
            found.setdefault(key, snapshot.snapshot_id)
    return found


def _removed_by(reader: ManifestReader, snapshot_id: int, manifest_list: str) -> frozenset[FileKey]:
    """What one snapshot removed; nothing (and a warning, not remembered) when its manifests
    can no longer be read: a history that broke elsewhere must not stop every later commit."""
    key = (reader.scope, manifest_list)
    cached = _REMOVED.get(key) if reader.scope is not None else None
    if cached is not None:
        return cached
    try:
        removed = frozenset(
            entry.file.key
            for manifest in reader.manifests(manifest_list)
            if manifest.added_snapshot_id == snapshot_id and manifest.deleted_files_count != 0
            for entry in reader.entries(manifest)
            if entry.status == ManifestEntryStatus.DELETED)
    except CommitTooLarge:
        raise
    except UnverifiableCommit:
        log.warning("commit.history_unreadable", snapshot_id=snapshot_id)
        return frozenset()
    if reader.scope is not None:
        _REMOVED.put(key, removed)
    return removed


def revival_reasons(found: Mapping[FileKey, int], paths: Mapping[FileKey, str]) -> list[str]:
    """What the audit says of each added file the history removed (a few named)."""
    return [f"adds {paths.get(key, key[1])!r} again, which snapshot {snapshot} removed"
            for key, snapshot in sorted(found.items(), key=lambda item: item[0][1])[:3]]
