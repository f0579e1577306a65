"""Compaction yields to writers (opt-in per table: ``icegov.compaction.yield-to-writers=true``).

A DELETE or UPDATE built on snapshot P conflicts when a compaction landed on P meanwhile, though
the compaction changed no row. When the branch's head is exactly that — one snapshot, verified a
data-equivalent REWRITE of P by reading its rows (``rewrite_rows``, within the commit's
``row_bytes_budget``; a rewrite not read to the end is not one), with nothing after it — icegov
can land the writer's change instead of failing it: the branch goes back to P and the writer's
snapshot goes on top, in one commit asserting the head is still the rewrite. The rewrite stays
in the table's snapshots, off the branch; the audit record says the compaction must be rerun.

The writer's snapshot keeps its id, parent (P), files and meaning; only its sequence number must
rise above the rewrite's, so its manifest list is written again with its own manifests re-written
so that their new entries inherit the new sequence number (carried manifests are unchanged).
Format v3 tables are left alone (row lineage would have to be reassigned).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from pyiceberg.avro.codecs import AvroCompressionCodec
from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriter,
    read_manifest_list,
    write_manifest,
    write_manifest_list,
)
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import SnapshotRef, SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot

from proxy.commits.classify import classify_commit
from proxy.commits.limits import CommitLimits
from proxy.commits.operations.writer import DeleteManifestWriter, metadata_root
from proxy.commits.rebase import AppendShape, head_of

YIELD_PROPERTY = "icegov.compaction.yield-to-writers"
_CODEC: AvroCompressionCodec = "deflate"


def yields_to_writers(metadata: TableMetadata) -> bool:
    """Has the table opted in (the property is ``true``)?"""
    return metadata.properties.get(YIELD_PROPERTY, "false").strip().lower() == "true"


def as_of(metadata: TableMetadata, branch: str, snapshot_id: int,
          without: int | None = None) -> TableMetadata:
    """``metadata`` with ``branch`` at ``snapshot_id`` (and snapshot ``without`` left out)."""
    ref = metadata.refs.get(branch) or SnapshotRef.model_validate(
        {"snapshot-id": snapshot_id, "type": SnapshotRefType.BRANCH.value})
    refs = {**metadata.refs, branch: ref.model_copy(update={"snapshot_id": snapshot_id})}
    update: dict[str, Any] = {"refs": refs,
                              "snapshots": [s for s in metadata.snapshots
                                            if s.snapshot_id != without]}
    if branch == "main":
        update["current_snapshot_id"] = snapshot_id
    return metadata.model_copy(update=update)


def rewrite_in_the_way(metadata: TableMetadata, io: FileIO, branch: str, base_id: int | None,
                       limits: CommitLimits) -> Snapshot | None:
    """The branch's head when it is a data-equivalent rewrite made right on ``base_id`` (what
    the writer built on), verified against ``base_id`` row by row within ``limits``, else
    None."""
    head_id = head_of(metadata, branch)
    head = None if head_id is None else metadata.snapshot_by_id(head_id)
    if (head is None or base_id is None or head.parent_snapshot_id != base_id
            or head.summary is None or head.summary.operation != Operation.REPLACE):
        return None
    body = {"requirements": [{"type": "assert-ref-snapshot-id", "ref": branch,
                              "snapshot-id": base_id}],
            "updates": [{"action": "add-snapshot", "snapshot": json.loads(head.model_dump_json())},
                        {"action": "set-snapshot-ref", "ref-name": branch, "type": "branch",
                         "snapshot-id": head.snapshot_id}]}
    before = as_of(metadata, branch, base_id, without=head.snapshot_id)
    intent = classify_commit(body, before, io, limits=limits)
    evidence = intent.evidence
    verified = evidence.verified and evidence.classification == "REWRITE"
    return head if verified else None


def yielding_commit(body: Mapping[str, Any], shape: AppendShape, rewrite: Snapshot,
                    metadata: TableMetadata, io: FileIO, now_ms: int) -> dict[str, Any]:
    """One commit that takes ``rewrite`` off the branch and lands the writer's snapshot."""
    base_id = rewrite.parent_snapshot_id
    assert base_id is not None
    sequence = int(getattr(metadata, "last_sequence_number", 0) or 0) + 1
    snapshot = {**shape.snapshot,
                "sequence-number": sequence,
                "timestamp-ms": max(int(shape.snapshot.get("timestamp-ms") or 0), now_ms),
                "manifest-list": _resequenced_list(shape, metadata, io, base_id, sequence)}
    ref = metadata.refs[shape.branch]
    back = {"action": "set-snapshot-ref", "ref-name": shape.branch, "type": "branch",
            "snapshot-id": base_id, **_retention(ref)}
    requirements = [r for r in body.get("requirements") or []
                    if r.get("type") != "assert-ref-snapshot-id"]
    requirements.append({"type": "assert-ref-snapshot-id", "ref": shape.branch,
                         "snapshot-id": rewrite.snapshot_id})
    updates = [back, *({**u, "snapshot": snapshot} if u.get("action") == "add-snapshot"
                       else dict(u) for u in body.get("updates") or [])]
    return {**body, "requirements": requirements, "updates": updates}


def _retention(ref: SnapshotRef) -> dict[str, int]:
    values = {"max-ref-age-ms": ref.max_ref_age_ms,
              "max-snapshot-age-ms": ref.max_snapshot_age_ms,
              "min-snapshots-to-keep": ref.min_snapshots_to_keep}
    return {k: v for k, v in values.items() if v is not None}


def _resequenced_list(shape: AppendShape, metadata: TableMetadata, io: FileIO, parent_id: int,
                      sequence: int) -> str:
    own, records = shape.snapshot_id, []
    for manifest in read_manifest_list(io.new_input(str(shape.snapshot["manifest-list"]))):
        records.append(_rewritten(manifest, metadata, io, own)
                       if manifest.added_snapshot_id == own else manifest)
    path = f"{metadata_root(metadata)}/snap-{own}-icegov-yield-{uuid.uuid4()}.avro"
    with write_manifest_list(2, io.new_output(path), own, parent_id, sequence,
                             _CODEC) as writer:
        writer.add_manifests(records)
    return path


def _rewritten(manifest: ManifestFile, metadata: TableMetadata, io: FileIO,
               snapshot_id: int) -> ManifestFile:
    """The writer's own manifest again, its new entries left to inherit the new sequence."""
    spec = metadata.specs()[manifest.partition_spec_id]
    output = io.new_output(f"{metadata_root(metadata)}/{uuid.uuid4()}-icegov-yield-m0.avro")
    writer: ManifestWriter
    if manifest.content == ManifestContent.DATA:
        writer = write_manifest(2, spec, metadata.schema(), output, snapshot_id, _CODEC)
    else:
        writer = DeleteManifestWriter(spec, metadata.schema(), output, snapshot_id, _CODEC)
    with writer:
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
            if entry.status == ManifestEntryStatus.ADDED:
                entry = ManifestEntry.from_args(
                    status=ManifestEntryStatus.ADDED, snapshot_id=snapshot_id,
                    sequence_number=None, file_sequence_number=None,
                    data_file=entry.data_file)
            writer.add_entry(entry)
    return writer.to_manifest_file()
