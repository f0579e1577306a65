"""Writing the snapshot a data operation produces: its new manifests, the head's manifests it
rewrites (removed files become DELETED entries, the rest EXISTING), its manifest list and the
``add-snapshot`` JSON with a summary whose totals continue the parent's.

Files go under the table's metadata directory (``write.metadata.path``, else
``{location}/metadata``), written through the table's FileIO with pyiceberg's writers (format 1
and 2 only; pyiceberg writes no delete manifests, so ``DeleteManifestWriter`` adds them). A
manifest of an old partition spec is written with a schema that binds that spec
(``specs.binding_schema``); if none does, the operation is refused (400).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.avro.codecs import AvroCompressionCodec
from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriter,
    ManifestWriterV2,
    write_manifest,
    write_manifest_list,
)
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot, SnapshotSummaryCollector

from proxy.commits.confine import canonical_location
from proxy.commits.operations.specs import require_binding_schema

_CODEC: AvroCompressionCodec = "deflate"
_TOTALS = (  # (total, added, removed) summary properties
    ("total-data-files", "added-data-files", "deleted-data-files"),
    ("total-delete-files", "added-delete-files", "removed-delete-files"),
    ("total-records", "added-records", "deleted-records"),
    ("total-files-size", "added-files-size", "removed-files-size"),
    ("total-position-deletes", "added-position-deletes", "removed-position-deletes"),
    ("total-equality-deletes", "added-equality-deletes", "removed-equality-deletes"),
)


class DeleteManifestWriter(ManifestWriterV2):
    """A format-2 manifest of delete files (pyiceberg writes data manifests only)."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


@dataclass
class Rewrite:
    """A head manifest holding files the operation removes: ``entries`` are all of its entries,
    ``removed`` the canonical paths of those to mark DELETED."""

    manifest: ManifestFile
    entries: list[ManifestEntry]
    removed: frozenset[str]


@dataclass
class SnapshotPlan:
    """What the new snapshot holds: new files, rewritten head manifests, kept head manifests,
    and head data manifests ``merged`` into the new manifest of their spec (their live entries
    carried over as EXISTING, as Iceberg's merging append does)."""

    operation: str
    parent: Snapshot | None
    kept: list[ManifestFile] = field(default_factory=list)
    rewrites: list[Rewrite] = field(default_factory=list)
    added: tuple[DataFile, ...] = ()
    merged: list[tuple[ManifestFile, list[ManifestEntry]]] = field(default_factory=list)


def write_snapshot(plan: SnapshotPlan, metadata: TableMetadata, io: FileIO, *,
                   snapshot_id: int, timestamp_ms: int) -> dict[str, Any]:
    """Write ``plan``'s manifests and manifest list; the ``add-snapshot`` snapshot JSON."""
    out = _Output(metadata, io, snapshot_id)
    summary = SnapshotSummaryCollector()
    manifests = [*out.new_manifests(plan.added, summary, plan.merged),
                 *(out.rewritten(r, summary) for r in plan.rewrites), *plan.kept]
    last_sequence = int(getattr(metadata, "last_sequence_number", 0) or 0)
    sequence = last_sequence + 1 if metadata.format_version >= 2 else None
    parent_id = plan.parent.snapshot_id if plan.parent is not None else None
    manifest_list = out.path(f"snap-{snapshot_id}-1-{uuid.uuid4()}.avro")
    with write_manifest_list(metadata.format_version, io.new_output(manifest_list), snapshot_id,
                             parent_id, sequence, _CODEC) as writer:
        writer.add_manifests(manifests)
    snapshot: dict[str, Any] = {
        "snapshot-id": snapshot_id,
        "timestamp-ms": timestamp_ms,
        "manifest-list": manifest_list,
        "summary": {"operation": plan.operation,
                    **with_totals(summary.build(), plan.parent)},
        "schema-id": metadata.current_schema_id,
    }
    if parent_id is not None:
        snapshot["parent-snapshot-id"] = parent_id
    if sequence is not None:
        snapshot["sequence-number"] = sequence
    return snapshot


def with_totals(changes: dict[str, str], parent: Snapshot | None) -> dict[str, str]:
    """``changes`` plus the parent's totals moved by them (a total the parent's summary lacks
    or cannot state is left out, as Iceberg does)."""
    previous = dict(parent.summary.additional_properties) if parent and parent.summary else {}
    result = dict(changes)
    for total, added, removed in _TOTALS:
        before = previous.get(total, "0" if parent is None else None)
        if before is None or not before.isdigit():
            continue
        value = int(before) + int(changes.get(added, 0)) - int(changes.get(removed, 0))
        if value >= 0:
            result[total] = str(value)
    return result


def metadata_root(metadata: TableMetadata) -> str:
    """Where icegov writes a table's manifests and lists: ``write.metadata.path``, else
    ``{location}/metadata``."""
    root = metadata.properties.get("write.metadata.path") or f"{metadata.location}/metadata"
    return root.rstrip("/")


class _Output:
    """Writes one snapshot's manifests under the table's metadata directory."""

    def __init__(self, metadata: TableMetadata, io: FileIO, snapshot_id: int) -> None:
        self._metadata = metadata
        self._io = io
        self._snapshot_id = snapshot_id
        self._root = metadata_root(metadata)
        self._prefix = uuid.uuid4()
        self._count = 0

    def path(self, name: str) -> str:
        return f"{self._root}/{name}"

    def new_manifests(self, files: Iterable[DataFile], summary: SnapshotSummaryCollector,
                      merged: Iterable[tuple[ManifestFile, list[ManifestEntry]]] = ()
                      ) -> list[ManifestFile]:
        """One manifest of ADDED entries per (content, spec) of ``files``; a data manifest
        also carries the live entries of the ``merged`` manifests of its spec as EXISTING."""
        carried: dict[int, list[ManifestEntry]] = defaultdict(list)
        for manifest, entries in merged:
            carried[manifest.partition_spec_id].extend(
                e for e in entries if e.status != ManifestEntryStatus.DELETED)
        groups: dict[tuple[bool, int], list[DataFile]] = defaultdict(list)
        for data_file in files:
            groups[(data_file.content == DataFileContent.DATA, data_file.spec_id)].append(data_file)
        written = []
        for (is_data, spec_id), group in groups.items():
            spec = self._metadata.specs()[spec_id]
            schema = require_binding_schema(self._metadata, spec)
            with self._writer(spec, schema, is_data) as writer:
                for data_file in group:
                    writer.add_entry(ManifestEntry.from_args(
                        status=ManifestEntryStatus.ADDED, snapshot_id=self._snapshot_id,
                        data_file=data_file))
                    summary.add_file(data_file, schema, spec)
                for entry in carried.pop(spec_id, []) if is_data else []:
                    writer.existing(entry)
            written.append(writer.to_manifest_file())
        if carried:  # planning merges only specs that get new data files
            raise ValueError("merged manifests of a spec without new data files")
        return written

    def rewritten(self, rewrite: Rewrite, summary: SnapshotSummaryCollector) -> ManifestFile:
        """``rewrite.manifest`` again: removed files DELETED, other live files EXISTING."""
        spec = self._metadata.specs()[rewrite.manifest.partition_spec_id]
        schema = require_binding_schema(self._metadata, spec)
        with self._writer(spec, schema, rewrite.manifest.content == ManifestContent.DATA) \
                as writer:
            for entry in rewrite.entries:
                if entry.status == ManifestEntryStatus.DELETED:
                    continue
                if canonical_location(entry.data_file.file_path) in rewrite.removed:
                    writer.delete(entry)
                    summary.remove_file(entry.data_file, schema, spec)
                else:
                    writer.existing(entry)
        return writer.to_manifest_file()

    def _writer(self, spec: PartitionSpec, schema: Schema, is_data: bool) -> ManifestWriter:
        """A manifest writer for files of ``spec`` (typed by ``schema``, which binds it)."""
        self._count += 1
        output = self._io.new_output(self.path(f"{self._prefix}-m{self._count}.avro"))
        if is_data:
            return write_manifest(self._metadata.format_version, spec, schema, output,
                                  self._snapshot_id, _CODEC)
        return DeleteManifestWriter(spec, schema, output, self._snapshot_id, _CODEC)
