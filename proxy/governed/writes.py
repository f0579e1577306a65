"""Commits built on a governed snapshot: an INSERT lands on the real table, nothing else does.

A governed principal's engine builds its commit on the governed snapshot it read: its new
snapshot's manifest list names the governed manifests of its parent beside its own new ones.
``ungoverned`` rewrites such a commit before it is classified: the governed manifests are
replaced by the base parent's own manifests (a new manifest list icegov writes under the table's
metadata directory), so the commit is judged — and lands — as the append it is, with none of the
governed manifests or files carried into the table. It is accepted only when it keeps *every*
governed manifest of its parent's governed snapshot and its own manifests list only files it
adds, none in a governed tree; anything else would act on rows the principal cannot see: 403,
nothing written.
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

from proxy.commits.confine import table_locations
from proxy.commits.manifests import ManifestReader
from proxy.commits.operations.writer import metadata_root, with_totals
from proxy.errors import Forbidden
from proxy.governed.layout import TableTree, ViewTree, content_key

Json = dict[str, Any]
_REFUSED = ("a commit built on a governed snapshot may only add rows: it would act on rows "
            "you cannot see")


def ungoverned(body: Json, metadata: TableMetadata, io: FileIO, tree: TableTree,
               copy_proven: bool) -> Json | None:
    """``body`` with each added snapshot built on a governed one rebuilt on its base parent;
    None when no added snapshot lists a governed manifest. 403 for anything but an append."""
    updates = body.get("updates")
    if not isinstance(updates, list):
        return None
    changed = False
    rewritten: list[Any] = []
    for update in updates:
        if isinstance(update, dict) and update.get("action") == "add-snapshot":
            snapshot = update.get("snapshot")
            if isinstance(snapshot, dict):
                fixed = _ungoverned_snapshot(snapshot, body, metadata, io, tree, copy_proven)
                if fixed is not None:
                    update, changed = {**update, "snapshot": fixed}, True
        rewritten.append(update)
    return {**body, "updates": rewritten} if changed else None


def _ungoverned_snapshot(snapshot: Json, body: Json, metadata: TableMetadata, io: FileIO,
                         tree: TableTree, copy_proven: bool) -> Json | None:
    listed = snapshot.get("manifest-list")
    if not isinstance(listed, str):
        return None
    reader = ManifestReader(io, table_locations(metadata, body))
    manifests = list(reader.claimed_manifests(listed))  # 400 when unreadable or too large
    governed = [m for m in manifests if tree.holds(m.manifest_path)]
    own = [m for m in manifests if not tree.holds(m.manifest_path)]
    if not governed:
        _names_no_governed_file(own, reader, tree, snapshot)
        return None
    parent_id = snapshot.get("parent-snapshot-id")
    parent = metadata.snapshot_by_id(parent_id) if isinstance(parent_id, int) else None
    if parent is None:
        raise Forbidden(_REFUSED)
    view = _view_of(governed, tree)
    expected = _governed_list(io, view, parent.snapshot_id, parent.manifest_list, copy_proven)
    if {m.manifest_path for m in governed} != expected:
        raise Forbidden(_REFUSED)
    for manifest in own:
        reader.locations.require(manifest.manifest_path, "manifest")
    _only_adds(own, reader, tree, snapshot)
    own = [_kept_copy(io, metadata, manifest) for manifest in own]
    base = list(read_manifest_list(io.new_input(parent.manifest_list)))
    name = f"snap-{snapshot.get('snapshot-id')}-icegov-{uuid.uuid4()}.avro"
    path = f"{metadata_root(metadata)}/{name}"
    sequence = snapshot.get("sequence-number")
    with write_manifest_list(metadata.format_version, io.new_output(path),
                             int(snapshot["snapshot-id"]), parent.snapshot_id,
                             int(sequence) if isinstance(sequence, int) else None,
                             "deflate") as writer:
        writer.add_manifests([*own, *base])
    summary = snapshot.get("summary")
    changes = {str(k): str(v) for k, v in summary.items() if not str(k).startswith("total-")} \
        if isinstance(summary, dict) else {"operation": "append"}
    return {**snapshot, "manifest-list": path, "summary": with_totals(changes, parent)}


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


def _view_of(governed: list[ManifestFile], tree: TableTree) -> ViewTree:
    """The one view tree every governed manifest lies in (403 when they mix views)."""
    digests = {m.manifest_path[len(tree.prefix) + 1:].split("/", 1)[0] for m in governed}
    if len(digests) != 1:
        raise Forbidden(_REFUSED)
    return tree.view(digests.pop())


def _governed_list(io: FileIO, view: ViewTree, parent_id: int, base_list: str,
                   copy_proven: bool) -> set[str]:
    """The governed manifests of the parent's governed snapshot (403 when it has none)."""
    key = content_key(base_list, view.digest, copy_proven)
    try:
        return {m.manifest_path for m in read_manifest_list(
            io.new_input(view.manifest_list(parent_id, key)))}
    except (OSError, ValueError) as exc:
        raise Forbidden(_REFUSED) from exc


def _names_no_governed_file(own: list[ManifestFile], reader: ManifestReader, tree: TableTree,
                            snapshot: Json) -> None:
    """403 when a snapshot that keeps no governed manifest still names a governed file in a
    manifest it wrote (a delete or overwrite of rows read through a governed snapshot)."""
    snapshot_id = snapshot.get("snapshot-id")
    for manifest in own:
        if manifest.added_snapshot_id != snapshot_id:
            continue
        reader.locations.require(manifest.manifest_path, "manifest")
        for entry in reader.entries(manifest):
            if tree.holds(entry.file.path):
                raise Forbidden(_REFUSED)


def _only_adds(own: list[ManifestFile], reader: ManifestReader, tree: TableTree,
               snapshot: Json) -> None:
    """403 unless the commit's own manifests only add data files, none of them governed (a
    delete file would remove rows: by an equality delete on a masked or denied column, a test
    of values the principal may not read)."""
    snapshot_id = snapshot.get("snapshot-id")
    for manifest in own:
        if manifest.added_snapshot_id != snapshot_id or manifest.content != ManifestContent.DATA:
            raise Forbidden(_REFUSED)
        for entry in reader.entries(manifest):
            if entry.status != ManifestEntryStatus.ADDED or not entry.file.is_data \
                    or tree.holds(entry.file.path):
                raise Forbidden(_REFUSED)
