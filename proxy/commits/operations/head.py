"""Reading what a data operation builds on: the branch head's manifests and their entries, and
the snapshots committed between the operation's start and the head, within ``CommitLimits``.

The head and its history are the table's own committed files, read through the table's FileIO
with pyiceberg (inherited snapshot ids and sequence numbers filled in). Every read is counted:
manifest lists (``max_manifests`` each), manifests opened (``max_manifests_read``) and entries
(``max_entries``); beyond a limit the operation is refused (``CommitTooLarge``, 400). A read
failure is refused alike, with a message of icegov's own.

Manifest lists and manifests are immutable, so what rebuilds need again is remembered across
builds in small LRUs: each snapshot's manifests (by table and manifest list) and each
manifest's file locations (``ManifestPaths``, by table, manifest and length). What is found
there costs no read and counts against no limit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestEntry, ManifestEntryStatus, ManifestFile
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

from proxy.commits.confine import canonical_location
from proxy.commits.intent import UnverifiableCommit
from proxy.commits.limits import CommitLimits
from proxy.commits.lru import SizedLru
from proxy.commits.manifests import CommitTooLarge
from proxy.errors import CommitFailed

T = TypeVar("T")
LIST_CACHE_MANIFESTS = 50_000
PATH_CACHE_FILES = 1_000_000


def location_key(location: str) -> int:
    """A 64-bit digest of a file's canonical location (what ``ManifestPaths`` hold)."""
    digest = hashlib.blake2b(canonical_location(location).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


@dataclass(frozen=True)
class ManifestPaths:
    """The files a manifest lists, as ``location_key`` digests: ``live`` (ADDED or EXISTING
    entries) and ``removed`` (DELETED entries)."""

    live: frozenset[int]
    removed: frozenset[int]

    @classmethod
    def of(cls, entries: Iterable[ManifestEntry]) -> ManifestPaths:
        live: set[int] = set()
        removed: set[int] = set()
        for entry in entries:
            is_removed = entry.status == ManifestEntryStatus.DELETED
            (removed if is_removed else live).add(location_key(entry.data_file.file_path))
        return cls(frozenset(live), frozenset(removed))


MANIFEST_LISTS: SizedLru[tuple[str, str], tuple[ManifestFile, ...]] = SizedLru(
    LIST_CACHE_MANIFESTS, lambda manifests: max(len(manifests), 1))
MANIFEST_PATHS: SizedLru[tuple[str, str, int], ManifestPaths] = SizedLru(
    PATH_CACHE_FILES, lambda paths: max(len(paths.live) + len(paths.removed), 1))


@dataclass
class HeadReader:
    """Reads one build's manifests, counting against ``limits``."""

    metadata: TableMetadata
    io: FileIO
    limits: CommitLimits
    manifests_opened: int = 0
    entries_read: int = 0
    _entries: dict[str, list[ManifestEntry]] = field(default_factory=dict)

    def manifests(self, snapshot: Snapshot) -> list[ManifestFile]:
        """The manifests ``snapshot``'s list names (at most ``limits.max_manifests``)."""
        key = (str(self.metadata.table_uuid), snapshot.manifest_list)
        cached = MANIFEST_LISTS.get(key)
        manifests = list(cached) if cached is not None else \
            _guarded(lambda: list(snapshot.manifests(self.io)))
        if cached is None:
            MANIFEST_LISTS.put(key, tuple(manifests))
        if len(manifests) > self.limits.max_manifests:
            raise CommitTooLarge(f"a manifest list names more than {self.limits.max_manifests} "
                                 "manifests")
        return manifests

    def entries(self, manifest: ManifestFile) -> list[ManifestEntry]:
        """Every entry of ``manifest`` (deleted ones included), read once per build."""
        found = self._entries.get(manifest.manifest_path)
        if found is None:
            found = self._entries[manifest.manifest_path] = self._read(manifest)
        return found

    def _read(self, manifest: ManifestFile) -> list[ManifestEntry]:
        """Open ``manifest`` and read its entries, counting against the limits."""
        if self.manifests_opened >= self.limits.max_manifests_read:
            raise CommitTooLarge(f"the operation would open more than "
                                 f"{self.limits.max_manifests_read} manifests")
        self.manifests_opened += 1
        entries = _guarded(lambda: manifest.fetch_manifest_entry(self.io, discard_deleted=False))
        self.entries_read += len(entries)
        if self.entries_read > self.limits.max_entries:
            raise CommitTooLarge(f"the operation would read more than {self.limits.max_entries} "
                                 "manifest entries")
        return entries

    def paths(self, manifest: ManifestFile) -> ManifestPaths:
        """The files ``manifest`` lists (read at most once per process while remembered; the
        entries are not kept for the build unless ``entries`` read them already)."""
        key = (str(self.metadata.table_uuid), manifest.manifest_path, manifest.manifest_length)
        found = MANIFEST_PATHS.get(key)
        if found is None:
            entries = self._entries.get(manifest.manifest_path) or self._read(manifest)
            found = ManifestPaths.of(entries)
            MANIFEST_PATHS.put(key, found)
        return found


def branch_head(metadata: TableMetadata, branch: str) -> Snapshot | None:
    """The snapshot ``branch`` points at; None for ``main`` of a table with no snapshot."""
    ref = metadata.refs.get(branch)
    if ref is None:
        if branch == "main" and metadata.current_snapshot_id is None:
            return None
        raise UnverifiableCommit(f"branch {branch!r:.80} does not exist")
    if ref.snapshot_ref_type != "branch":
        raise UnverifiableCommit(f"{branch!r:.80} is a tag, not a branch")
    snapshot = metadata.snapshot_by_id(ref.snapshot_id)
    if snapshot is None:
        raise UnverifiableCommit(f"branch {branch!r:.80} points at no snapshot of the table")
    return snapshot


def snapshots_since(metadata: TableMetadata, start_id: int | None,
                    head: Snapshot | None) -> list[Snapshot]:
    """The snapshots after ``start_id`` up to ``head`` (newest first). The start must be an
    ancestor of the head still in the metadata; otherwise the operation cannot be validated
    against what happened since it started, and is refused as a conflict (409)."""
    found: list[Snapshot] = []
    current = head
    while current is not None and current.snapshot_id != start_id:
        found.append(current)
        parent = current.parent_snapshot_id
        current = None if parent is None else metadata.snapshot_by_id(parent)
        if parent is not None and current is None:
            break
    if start_id is not None and (current is None or current.snapshot_id != start_id):
        raise CommitFailed(
            f"base-snapshot-id {start_id} is not an ancestor of the branch head any more "
            "(rolled back or expired): the operation cannot be validated, rebuild it")
    if start_id is None and current is None and found and found[-1].parent_snapshot_id:
        raise CommitFailed("the branch history is expired: the operation cannot be "
                           "validated, rebuild it")
    return found


def _guarded(read: Callable[[], T]) -> T:
    try:
        return read()
    except UnverifiableCommit:
        raise
    except Exception as exc:  # any I/O or decoding failure: refused alike, nothing echoed
        raise UnverifiableCommit("the table's manifests could not be read") from exc
