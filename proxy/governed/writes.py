"""Commits of a principal who reads a table through governed snapshots: an INSERT lands on the
real table, nothing else does.

Such a principal's engine builds its commit on the governed snapshot it read: its new snapshot's
manifest list names the governed manifests of its parent beside its own new ones (none, when the
parent's governed snapshot lists nothing). ``ungoverned`` rewrites every snapshot such a commit
adds before it is classified: the governed manifests are replaced by the base parent's own
manifests (a new manifest list icegov writes under the table's metadata directory), so the
commit is judged — and lands — as the append it is, with none of the governed manifests or files
carried into the table. It is accepted only when the snapshot keeps *exactly* the governed
manifests of its parent's governed snapshot and its own manifests list only files it adds, none
in a governed tree; anything else would act on rows the principal cannot see: 403, nothing
written. A parent whose governed snapshot is gone (collected, or never built) is a conflict (409):
nothing landed, and the client retries on the table as it is now.
"""

from __future__ import annotations

import uuid
from typing import Any

from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    ManifestContent,
    ManifestEntryStatus,
    ManifestFile,
    read_manifest_list,
    write_manifest_list,
)
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

from proxy.commits.confine import table_locations
from proxy.commits.manifests import ManifestReader
from proxy.commits.operations.writer import metadata_root, with_totals
from proxy.errors import CommitFailed, Forbidden
from proxy.governed.layout import ViewTree, content_key

Json = dict[str, Any]
_REFUSED = ("a commit built on a governed snapshot may only add rows: it would act on rows "
            "you cannot see")


def ungoverned(body: Json, metadata: TableMetadata, io: FileIO, view: ViewTree,
               copy_proven: bool) -> Json | None:
    """``body`` with each snapshot it adds rebuilt on its base parent; None when it adds no
    snapshot. 403 for anything but an append built on the view's governed snapshot."""
    updates = body.get("updates")
    if not isinstance(updates, list):
        return None
    changed = False
    rewritten: list[Any] = []
    for update in updates:
        if isinstance(update, dict) and update.get("action") == "add-snapshot":
            snapshot = update.get("snapshot")
            if not isinstance(snapshot, dict):
                raise Forbidden(_REFUSED)
            update = {**update, "snapshot": _rebuilt(snapshot, body, metadata, io, view,
                                                     copy_proven)}
            changed = True
        rewritten.append(update)
    return {**body, "updates": rewritten} if changed else None


def _rebuilt(snapshot: Json, body: Json, metadata: TableMetadata, io: FileIO, view: ViewTree,
             copy_proven: bool) -> Json:
    """One added snapshot, its governed manifests replaced by its base parent's own."""
    listed = snapshot.get("manifest-list")
    snapshot_id = snapshot.get("snapshot-id")
    if not isinstance(listed, str) or not isinstance(snapshot_id, int):
        raise Forbidden(_REFUSED)
    reader = ManifestReader(io, table_locations(metadata, body))
    manifests = list(reader.claimed_manifests(listed))  # 400 when unreadable or too large
    governed = {m.manifest_path for m in manifests if view.table.holds(m.manifest_path)}
    own = [m for m in manifests if not view.table.holds(m.manifest_path)]
    parent = _parent(snapshot, metadata)
    expected = set() if parent is None else _governed_list(io, view, parent, copy_proven)
    if governed != expected:
        raise Forbidden(_REFUSED)
    _only_adds(own, reader, view, snapshot_id)
    own = [_kept_copy(io, metadata, manifest) for manifest in own]
    base = [] if parent is None else list(read_manifest_list(io.new_input(parent.manifest_list)))
    path = f"{metadata_root(metadata)}/snap-{snapshot_id}-icegov-{uuid.uuid4()}.avro"
    sequence = snapshot.get("sequence-number")
    with write_manifest_list(metadata.format_version, io.new_output(path), snapshot_id,
                             None if parent is None else parent.snapshot_id,
                             int(sequence) if isinstance(sequence, int) else None,
                             "deflate") as writer:
        writer.add_manifests([*own, *base])
    summary = snapshot.get("summary")
    changes = {str(k): str(v) for k, v in summary.items() if not str(k).startswith("total-")} \
        if isinstance(summary, dict) else {"operation": "append"}
    return {**snapshot, "manifest-list": path, "summary": with_totals(changes, parent)}


def _parent(snapshot: Json, metadata: TableMetadata) -> Snapshot | None:
    """The base snapshot the added one names as its parent (None: it names none); a parent
    the table does not have is a conflict."""
    parent_id = snapshot.get("parent-snapshot-id")
    if parent_id is None:
        return None
    parent = metadata.snapshot_by_id(parent_id) if isinstance(parent_id, int) else None
    if parent is None:
        raise CommitFailed("the snapshot this commit was built on is not the table's: retry")
    return parent


def _governed_list(io: FileIO, view: ViewTree, parent: Snapshot, copy_proven: bool) -> set[str]:
    """The governed manifests of the parent's governed snapshot (409 when it has none)."""
    key = content_key(parent.manifest_list, view.digest, copy_proven)
    try:
        return {m.manifest_path for m in read_manifest_list(
            io.new_input(view.manifest_list(parent.snapshot_id, key)))}
    except (OSError, ValueError) as exc:
        raise CommitFailed("the governed snapshot this commit was built on is gone: "
                           "retry") from exc


def _only_adds(own: list[ManifestFile], reader: ManifestReader, view: ViewTree,
               snapshot_id: int) -> None:
    """403 unless the commit's own manifests were written for it and only add data files,
    none of them in a governed tree (a delete file would remove rows: an equality delete on a
    masked or denied column would test values the principal may not read)."""
    for manifest in own:
        reader.locations.require(manifest.manifest_path, "manifest")
        if manifest.added_snapshot_id != snapshot_id or manifest.content != ManifestContent.DATA:
            raise Forbidden(_REFUSED)
        for entry in reader.entries(manifest):
            if entry.status != ManifestEntryStatus.ADDED or not entry.file.is_data \
                    or view.table.holds(entry.file.path):
                raise Forbidden(_REFUSED)


def _kept_copy(io: FileIO, metadata: TableMetadata, manifest: ManifestFile) -> ManifestFile:
    """``manifest`` copied byte for byte to a path of icegov's own: the client, which sees its
    commit through governed metadata that does not name its manifests, deletes them once the
    commit lands (Java's clean-up of uncommitted manifests)."""
    with io.new_input(manifest.manifest_path).open() as stream:
        content = stream.read()
    path = f"{metadata_root(metadata)}/{uuid.uuid4()}-icegov-m0.avro"
    with io.new_output(path).create(overwrite=False) as out:
        out.write(content)
    fields = {name: getattr(manifest, name) for name in _MANIFEST_FIELDS}
    return ManifestFile.from_args(**{**fields, "manifest_path": path,
                                     "manifest_length": len(content)})


_MANIFEST_FIELDS = (
    "manifest_path", "manifest_length", "partition_spec_id", "content", "sequence_number",
    "min_sequence_number", "added_snapshot_id", "added_files_count", "existing_files_count",
    "deleted_files_count", "added_rows_count", "existing_rows_count", "deleted_rows_count",
    "partitions", "key_metadata")
