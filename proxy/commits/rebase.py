"""Rebase a pure append onto a newer head of its branch, as Iceberg's own client would retry it.

An append verified INSERT-only (``appends_only``) adds data files and changes nothing else, so it
can land on any later state of its branch without changing its meaning. ``rebase_append`` builds
the commit anew on ``head``:

- the client's snapshot-id is kept (a duplicate ``add-snapshot`` is refused by the catalog: that
  is what makes a retry after an unknown outcome safe), ``parent-snapshot-id`` is the head,
  ``sequence-number`` the table's last plus one, ``timestamp-ms`` no earlier than now;
- the manifest list is written anew: a manifest holding only the snapshot's ADDED entries (Spark's
  MergeAppend may have merged parent manifests into its new ones: those EXISTING entries would be
  listed twice next to the head's own manifests), then every manifest of the head;
- the summary's ``added-*`` counters are recounted from the entries and its ``total-*`` ones from
  the head's summary;
- the ref assertion becomes the head, so the catalog refuses it (409) if the branch moves again.

Format v3 appends are not rebased (``appends_only`` says no): pyiceberg writes v1/v2 manifest lists
only, and a v3 rebase must also assign row lineage. They pass through as the client sent them.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyiceberg.avro.codecs import AvroCompressionCodec
from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    DataFile,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    read_manifest_list,
    write_manifest,
    write_manifest_list,
)
from pyiceberg.table.metadata import TableMetadata

from proxy.commits.intent import CommitIntent
from proxy.commits.shape import updates_of
from proxy.governance import Action

_REQUIREMENTS = frozenset({"assert-table-uuid", "assert-ref-snapshot-id"})
_TOTALS = {  # total counter -> the added counter that raises it
    "total-data-files": "added-data-files",
    "total-records": "added-records",
    "total-files-size": "added-files-size",
}
_UNCHANGED_TOTALS = ("total-delete-files", "total-position-deletes", "total-equality-deletes")
_COMPRESSION: AvroCompressionCodec = "deflate"


class NotRebasable(Exception):
    """The commit cannot be rebased after all (its files say more than an append)."""


@dataclass(frozen=True)
class AppendShape:
    """Where a pure append goes: its branch and its one new snapshot (raw JSON)."""

    branch: str
    snapshot: Mapping[str, Any]

    @property
    def snapshot_id(self) -> int:
        return int(self.snapshot["snapshot-id"])


def appends_only(body: Mapping[str, Any], intent: CommitIntent,
                 base: TableMetadata | None) -> AppendShape | None:
    """The append's shape when the commit is a pure append icegov may rebase, else None.

    Pure: verified INSERT-only from its manifests (no deletes, nothing removed), exactly one
    ``add-snapshot`` and one ``set-snapshot-ref`` moving a branch to it, no other update, and
    only table-uuid and ref assertions (any other requirement says the client cares about more
    than its branch's head). Tables of format v3 and new tables are never rebased.
    """
    if base is None or base.format_version > 2 or intent.actions != {Action.INSERT}:
        return None
    evidence = intent.evidence
    counts = evidence.counts
    if (evidence.classification != "INSERT" or not evidence.verified or counts.added_delete_files
            or counts.removed_data_files or counts.removed_delete_files):
        return None
    return _shape(body)


def _shape(body: Mapping[str, Any]) -> AppendShape | None:
    updates = [u for u in body.get("updates") or []]
    if len(updates) != 2 or any(r.get("type") not in _REQUIREMENTS
                                for r in body.get("requirements") or []):
        return None
    added, moved = updates_of(body, "add-snapshot"), updates_of(body, "set-snapshot-ref")
    if len(added) != 1 or len(moved) != 1 or not isinstance(added[0].get("snapshot"), dict):
        return None
    snapshot, moved_ref = added[0]["snapshot"], moved[0]
    if (moved_ref.get("type") != "branch"
            or moved_ref.get("snapshot-id") != snapshot.get("snapshot-id")):
        return None
    branch = moved_ref.get("ref-name")
    return AppendShape(branch, snapshot) if isinstance(branch, str) else None


def head_of(metadata: TableMetadata, branch: str) -> int | None:
    """The snapshot ``branch`` is at in ``metadata`` (None: the branch does not exist)."""
    ref = metadata.refs.get(branch)
    return None if ref is None else ref.snapshot_id


def asserted_head(body: Mapping[str, Any], branch: str) -> int | None:
    """The value the commit asserts for ``branch`` (its last ``assert-ref-snapshot-id``)."""
    value = None
    for requirement in body.get("requirements") or []:
        if requirement.get("type") == "assert-ref-snapshot-id" and requirement.get("ref") == branch:
            value = requirement.get("snapshot-id")
    return value if isinstance(value, int) else None


def rebase_append(body: Mapping[str, Any], shape: AppendShape, head: TableMetadata, io: FileIO,
                  now_ms: int) -> dict[str, Any]:
    """``body`` rebuilt on ``head`` (see the module doc); writes one manifest and one list."""
    head_id = head_of(head, shape.branch)
    sequence = int(getattr(head, "last_sequence_number", 0) or 0) + 1
    added = _added_entries(io, shape)
    manifest = _write_added(head, io, shape.snapshot_id, added)
    carried = _head_manifests(head, io, head_id)
    manifest_list = _write_list(head, io, shape.snapshot_id, head_id, sequence,
                                [manifest, *carried])
    snapshot = {
        **shape.snapshot,
        "parent-snapshot-id": head_id,
        "timestamp-ms": max(int(shape.snapshot.get("timestamp-ms") or 0), now_ms),
        "manifest-list": manifest_list,
        "summary": rebased_summary(shape.snapshot.get("summary") or {}, added,
                                   _summary_of(head, head_id), empty_before=head_id is None),
    }
    if head.format_version >= 2:
        snapshot["sequence-number"] = sequence
    else:
        snapshot.pop("sequence-number", None)
    requirements = [r for r in body.get("requirements") or []
                    if not (r.get("type") == "assert-ref-snapshot-id"
                            and r.get("ref") == shape.branch)]
    requirements.append({"type": "assert-ref-snapshot-id", "ref": shape.branch,
                         "snapshot-id": head_id})
    updates = [{**u, "snapshot": snapshot} if u.get("action") == "add-snapshot" else dict(u)
               for u in body.get("updates") or []]
    return {**body, "requirements": requirements, "updates": updates}


def _added_entries(io: FileIO, shape: AppendShape) -> list[DataFile]:
    """The data files the snapshot adds (ADDED entries of its own manifests)."""
    files: list[DataFile] = []
    for manifest in read_manifest_list(io.new_input(str(shape.snapshot["manifest-list"]))):
        if manifest.added_snapshot_id != shape.snapshot_id:
            continue
        if manifest.content != ManifestContent.DATA:
            raise NotRebasable("the append's manifests hold delete files")
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
            if entry.status == ManifestEntryStatus.ADDED:
                files.append(entry.data_file)
            elif entry.status == ManifestEntryStatus.DELETED:
                raise NotRebasable("the append's manifests delete files")
    return files


def _write_added(head: TableMetadata, io: FileIO, snapshot_id: int,
                 files: Sequence[DataFile]) -> ManifestFile:
    spec_ids = {f.spec_id for f in files}
    if len(spec_ids) > 1 or not files:
        raise NotRebasable("the append's files span several partition specs, or none")
    spec = head.specs().get(spec_ids.pop())
    if spec is None:
        raise NotRebasable("the append's partition spec is not the table's")
    path = f"{_metadata_dir(head)}/{uuid.uuid4()}-icegov-m0.avro"
    writer = write_manifest(head.format_version, spec, head.schema(), io.new_output(path),
                            snapshot_id, _COMPRESSION)
    with writer:
        for data_file in files:
            writer.add_entry(ManifestEntry.from_args(
                status=ManifestEntryStatus.ADDED, snapshot_id=snapshot_id,
                sequence_number=None, file_sequence_number=None, data_file=data_file))
    return writer.to_manifest_file()


def _head_manifests(head: TableMetadata, io: FileIO, head_id: int | None) -> list[ManifestFile]:
    if head_id is None:
        return []
    snapshot = head.snapshot_by_id(head_id)
    if snapshot is None:
        raise NotRebasable("the branch's head snapshot is missing from the table's metadata")
    return list(snapshot.manifests(io))


def _write_list(head: TableMetadata, io: FileIO, snapshot_id: int, parent_id: int | None,
                sequence: int, manifests: list[ManifestFile]) -> str:
    path = f"{_metadata_dir(head)}/snap-{snapshot_id}-icegov-{uuid.uuid4()}.avro"
    with write_manifest_list(head.format_version, io.new_output(path), snapshot_id,
                             parent_id, sequence if head.format_version >= 2 else None,
                             _COMPRESSION) as writer:
        writer.add_manifests(manifests)
    return path


def _metadata_dir(head: TableMetadata) -> str:
    return (head.properties.get("write.metadata.path") or f"{head.location}/metadata").rstrip("/")


def _summary_of(head: TableMetadata, head_id: int | None) -> Mapping[str, str]:
    snapshot = None if head_id is None else head.snapshot_by_id(head_id)
    if snapshot is None or snapshot.summary is None:
        return {}
    return {str(k): str(v) for k, v in snapshot.summary.additional_properties.items()}


def rebased_summary(claimed: Mapping[str, Any], files: Sequence[DataFile],
                    previous: Mapping[str, str], empty_before: bool = False) -> dict[str, str]:
    """The client's summary with its counters recounted: added from ``files``, totals from the
    head's summary ``previous`` (a total the head does not state is left out, as Iceberg does,
    unless the branch was empty: ``empty_before``)."""
    summary = {str(k): str(v) for k, v in claimed.items()
               if not str(k).startswith(("added-", "total-", "changed-partition"))}
    summary["operation"] = "append"
    added = {
        "added-data-files": len(files),
        "added-records": sum(f.record_count for f in files),
        "added-files-size": sum(f.file_size_in_bytes for f in files),
    }
    summary.update({k: str(v) for k, v in added.items()})
    summary["changed-partition-count"] = str(len({repr(f.partition) for f in files}))
    for total, counter in _TOTALS.items():
        if total in previous or empty_before:
            summary[total] = str(_int(previous.get(total)) + added[counter])
    for total in _UNCHANGED_TOTALS:
        if total in previous or empty_before:
            summary[total] = str(_int(previous.get(total)))
    return summary


def _int(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0
