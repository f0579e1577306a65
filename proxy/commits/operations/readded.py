"""An added content file must be new to the table.

A file the branch head already lists would be listed twice (its rows read twice, and no later
commit could remove it cleanly); a file a snapshot removed would bring back the rows it held
(a DELETE undone by an INSERT). So an added data or delete file is refused (400) when the head's
manifests list it, live or removed, or when a snapshot committed since the operation's start
removed it, or any snapshot still in the table removed it (``check_never_removed``). The
manifests are read through the ``HeadReader`` (within ``CommitLimits``; what a
manifest lists is remembered across builds, so appends on a moving head stay cheap).
"""

from __future__ import annotations

from collections.abc import Iterable

from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

from proxy.commits.confine import shown_path, table_locations
from proxy.commits.intent import UnverifiableCommit
from proxy.commits.manifests import file_key
from proxy.commits.operations.head import HeadReader, location_key
from proxy.commits.tombstones import removed_in_history


def check_new_to_table(added: Iterable[DataFile], head: Snapshot | None,
                       window: Iterable[Snapshot], reader: HeadReader) -> None:
    """Refuse (400) any of ``added`` that ``head`` lists or a snapshot of ``window`` (those
    committed since the operation's start) removed."""
    wanted = {location_key(f.file_path): f.file_path for f in added}
    if not wanted:
        return
    if head is not None:
        for manifest in reader.manifests(head):
            paths = reader.paths(manifest)
            _refuse(wanted, paths.live, "is already a live file of the branch")
            _refuse(wanted, paths.removed, "was removed from the table: adding it again "
                                           "would bring back its rows")
    for snapshot in window:
        for manifest in reader.manifests(snapshot):
            if manifest.added_snapshot_id == snapshot.snapshot_id:
                _refuse(wanted, reader.paths(manifest).removed,
                        "was removed from the table since base-snapshot-id: adding it again "
                        "would bring back its rows")


def check_never_removed(added: Iterable[DataFile], metadata: TableMetadata, io: FileIO) -> None:
    """Refuse (400) any of ``added`` that a snapshot still in the table removed, however long
    ago (``tombstones``: expiring that snapshot would delete the file under the table)."""
    paths = {file_key(f.content, f.file_path): f.file_path for f in added}
    found = removed_in_history(io, metadata, table_locations(metadata, {}), paths)
    if found:
        key = min(found, key=lambda k: k[1])
        raise UnverifiableCommit(f"content file {shown_path(paths[key])} was removed from the "
                                 f"table by snapshot {found[key]}: adding it again would bring "
                                 "back its rows")


def _refuse(wanted: dict[int, str], listed: frozenset[int], why: str) -> None:
    found = wanted.keys() & listed
    if found:
        raise UnverifiableCommit(f"content file {shown_path(wanted[min(found)])} {why}")

