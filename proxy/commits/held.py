"""Files a commit must write anew, not borrow from the table.

Snapshot expiry (the Java library's, which Spark's ``expire_snapshots`` and most maintenance
runs) deletes, for every snapshot it expires: its manifest list; for a snapshot that never
became an ancestor of ``main`` (staged, or on a dropped branch), the files it added; and every
statistics file the expired snapshots name and the retained ones do not. A commit that names a
file the table still reads in one of those roles has the next routine expiry delete it — a
table-destroying change whatever right the commit was classified under. So:

- a new snapshot's manifest list must be a new file: no snapshot of the table has it, no other
  new snapshot of the commit, and it is none of the manifests it lists or replaces (400);
- a new snapshot that does not become ``main`` must not add a file ``main`` (or its own parent)
  holds live: that is history rewritten (UPDATE, and MANAGE_SNAPSHOTS);
- a statistics file must not be a file the table reads: a metadata file, a snapshot's manifest
  list, or one of ``main``'s manifests or live files (400).

Files are compared by location (``confine.canonical_location``: one spelling per file).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pyiceberg.manifest import ManifestFile
from pyiceberg.table.metadata import TableMetadata

from proxy.commits.confine import canonical_location, shown_path
from proxy.commits.intent import UnverifiableCommit
from proxy.commits.manifests import FileKey, ManifestReader
from proxy.commits.snapshots import ClaimedSnapshot

MAIN_BRANCH = "main"


def check_fresh_manifest_lists(added: Mapping[int, ClaimedSnapshot],
                               base: TableMetadata | None) -> None:
    """400 when a new snapshot's manifest list is another snapshot's (the table's or the
    commit's): expiring either would delete the list the other reads."""
    taken = {canonical_location(s.manifest_list): s.snapshot_id
             for s in (base.snapshots if base is not None else ())}
    for snapshot in added.values():
        place = canonical_location(snapshot.manifest_list)
        other = taken.setdefault(place, snapshot.snapshot_id)
        if other != snapshot.snapshot_id:
            raise UnverifiableCommit(
                f"snapshot {snapshot.snapshot_id}'s manifest list "
                f"{shown_path(snapshot.manifest_list)} is snapshot {other}'s: a new snapshot "
                "must write its own")


def check_list_is_no_manifest(manifest_list: str, manifests: Iterable[ManifestFile]) -> None:
    """400 when a manifest list is also one of the manifests a snapshot lists or replaces."""
    place = canonical_location(manifest_list)
    if any(canonical_location(m.manifest_path) == place for m in manifests):
        raise UnverifiableCommit(f"the manifest list {shown_path(manifest_list)} is also a "
                                 "manifest of the table: a new snapshot must write its own")


def main_line(added: Mapping[int, ClaimedSnapshot], refs: Mapping[str, int | None]) -> set[int]:
    """The snapshots of the commit that ``main`` ends on or passes through."""
    line: set[int] = set()
    current = refs.get(MAIN_BRANCH)
    while current is not None and current in added and current not in line:
        line.add(current)
        current = added[current].parent_id
    return line


def main_manifests(base: TableMetadata | None, reader: ManifestReader) -> tuple[ManifestFile, ...]:
    """The manifests of ``main``'s current snapshot (none for a table without one)."""
    current = None if base is None else base.current_snapshot()
    return () if current is None else reader.manifests(current.manifest_list)


def held_keys(reader: ManifestReader, manifests: Iterable[ManifestFile]) -> frozenset[FileKey]:
    """The files ``manifests`` hold live."""
    return frozenset().union(*(reader.live_keys(m) for m in manifests))


def check_statistics_files(paths: Iterable[str], base: TableMetadata | None,
                           reader: ManifestReader) -> None:
    """400 when a statistics file is a file the table reads (see the module's docstring)."""
    wanted = {canonical_location(p): p for p in paths}
    if not wanted or base is None:
        return
    manifests = main_manifests(base, reader)
    read = {canonical_location(s.manifest_list) for s in base.snapshots}
    read.update(canonical_location(e.metadata_file) for e in base.metadata_log)
    read.update(canonical_location(m.manifest_path) for m in manifests)
    read.update(key[1] for key in held_keys(reader, manifests))
    for place, path in wanted.items():
        if place in read:
            raise UnverifiableCommit(f"the statistics file {shown_path(path)} is a file the "
                                     "table reads: statistics must be written to their own file")
