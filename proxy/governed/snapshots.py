"""Building the governed snapshot of one base snapshot: per manifest, reused, then the list.

``SnapshotBuilder.build`` reads the base snapshot's manifest list, indexes its live delete files
(``proxy.planning.deletes``: the rules readers apply), and maps every base data manifest to one
governed manifest, named by the base manifest's path, the view and the delete files that apply
to each of its entries — so a new snapshot costs only its new manifests and the files a new
delete touches. Per live data file (``proof.Verdict``): left out, referenced in place (proven,
no delete applies, nothing masked or denied, and the operator did not ask for storage isolation),
or copied (``copies.CopyJob``: its permitted live rows, masked). Copies of one build run
together through ``run_copies`` (in process or on PySpark, the service decides). Governed
snapshots hold no delete files: deletes are applied in the copies.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    ManifestContent,
    ManifestEntry,
    ManifestFile,
    write_manifest_list,
)
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

from proxy.commits.rowfiles import RowFile
from proxy.governed.copies import CopiedFile, CopyJob, Reading, row_filter_json
from proxy.governed.layout import ViewTree, content_key
from proxy.governed.manifests import (
    Kept,
    governed_data_file,
    read_summary,
    write_empty_summary,
    write_governed_manifest,
)
from proxy.governed.proof import FileProver, Verdict
from proxy.governed.views import GovernedView
from proxy.planning.deletes import DeleteIndex, _v3_field, referenced_data_file
from proxy.planning.manifest_cache import ManifestCache

RunCopies = Callable[[Sequence[CopyJob]], list[CopiedFile]]
_CONTENT_SIZE = 19  # DataFile position of v3 ``content_size_in_bytes``
_CONTENT_OFFSET = 18


class GovernedBuildFailed(Exception):
    """A governed snapshot could not be built (the message is icegov's own)."""


@dataclass(frozen=True)
class GovernedSnapshot:
    """The governed counterpart of one base snapshot."""

    snapshot_id: int
    manifest_list: str
    data_files: int
    records: int
    size: int

    def to_json(self) -> dict[str, Any]:
        return {"snapshot-id": self.snapshot_id, "manifest-list": self.manifest_list,
                "data-files": self.data_files, "records": self.records, "size": self.size}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> GovernedSnapshot:
        return cls(int(raw["snapshot-id"]), str(raw["manifest-list"]), int(raw["data-files"]),
                   int(raw["records"]), int(raw["size"]))


@dataclass
class _Pending:
    """A governed manifest to write: entries kept in place, and copies still to make."""

    key: str
    base: ManifestFile
    kept: list[Kept] = field(default_factory=list)
    copies: list[tuple[ManifestEntry, CopyJob]] = field(default_factory=list)


@dataclass(frozen=True)
class BuildInputs:
    """What a build of one table under one view works with."""

    metadata: TableMetadata
    io: FileIO
    view: GovernedView
    tree: ViewTree
    manifests: ManifestCache
    io_properties: tuple[tuple[str, str], ...]
    copy_proven: bool = False
    max_bytes: int = 16 * 1024**3


class SnapshotBuilder:
    """Builds governed snapshots of one table under one view (``build``), reusing every
    governed manifest and list already written for it."""

    def __init__(self, inputs: BuildInputs, run_copies: RunCopies) -> None:
        self._in = inputs
        self._run = run_copies
        self._prover = FileProver(inputs.metadata, inputs.view.row_filter, inputs.io)
        row_filter = inputs.view.row_filter
        self._filter_json = None if row_filter is None else row_filter_json(row_filter)
        self._withheld = inputs.view.masked_ids | inputs.view.denied_ids
        self.bytes_read = 0
        self.bytes_written = 0

    def build(self, snapshot: Snapshot) -> GovernedSnapshot:
        """The governed snapshot of ``snapshot``, written if it was not yet."""
        inputs = self._in
        key = content_key(snapshot.manifest_list, inputs.view.digest, inputs.copy_proven)
        known = self._known_list(snapshot.snapshot_id, key)
        if known is not None:
            return known
        manifests = inputs.manifests.manifests(inputs.io, snapshot.manifest_list)
        index = self._delete_index(manifests)
        governed: list[ManifestFile] = []
        pending: list[_Pending] = []
        for manifest in manifests:
            if manifest.content != ManifestContent.DATA:
                continue
            found = self._manifest(manifest, index)
            if isinstance(found, _Pending):
                pending.append(found)
            elif found is not None:
                governed.append(found)
        governed.extend(self._finish(pending))
        return self._write_list(snapshot, key, governed)

    def _known_list(self, snapshot_id: int, key: str) -> GovernedSnapshot | None:
        path = self._in.tree.manifest_list(snapshot_id, key)
        try:
            with self._in.io.new_input(path + ".json").open() as stream:
                return GovernedSnapshot.from_json(json.loads(stream.read()))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _delete_index(self, manifests: Sequence[ManifestFile]) -> DeleteIndex:
        index = DeleteIndex(self._in.metadata.specs())
        for manifest in manifests:
            if manifest.content != ManifestContent.DELETES:
                continue
            for entry in self._in.manifests.entries(self._in.io, manifest):
                if entry.data_file.content != DataFileContent.DATA:
                    index.add(entry)
        return index.seal()

    def _manifest(self, manifest: ManifestFile,
                  index: DeleteIndex) -> ManifestFile | _Pending | None:
        """The governed manifest of ``manifest``: known, or what is to be written."""
        entries = [e for e in self._in.manifests.entries(self._in.io, manifest)
                   if e.data_file.content == DataFileContent.DATA]
        applying = [(e, sorted(index.for_data(e), key=_delete_name)) for e in entries]
        key = content_key(manifest.manifest_path, self._in.view.digest, self._in.copy_proven,
                          [[e.data_file.file_path, [_delete_name(d) for d in ds]]
                           for e, ds in applying if ds])
        summary = read_summary(self._in.io, self._in.tree, key)
        if summary is not False:
            return summary if isinstance(summary, ManifestFile) else None
        pending = _Pending(key, manifest)
        for entry, deletes in applying:
            self._decide(pending, entry, deletes)
        return pending

    def _decide(self, pending: _Pending, entry: ManifestEntry,
                deletes: list[DataFile]) -> None:
        verdict = self._prover.verdict(entry.data_file)
        if verdict is Verdict.NONE:
            return
        if (verdict is Verdict.ALL and not deletes and not self._withheld
                and not self._in.copy_proven):
            pending.kept.append(Kept(entry, governed_data_file(entry.data_file)))
            return
        pending.copies.append((entry, self._job(entry, deletes)))

    def _job(self, entry: ManifestEntry, deletes: list[DataFile]) -> CopyJob:
        view = self._in.view
        out = self._in.tree.data_file(content_key(
            entry.data_file.file_path, [_delete_name(d) for d in deletes], view.digest))
        return CopyJob(
            data=_row_file(entry.data_file, entry),
            deletes=tuple(_row_file(d, None) for d in deletes),
            # rows are read whole (deletes and the filter may name a denied column), then cut
            schema_json=self._in.metadata.schema().model_dump_json(),
            keep_field_ids=tuple(f.field_id for f in view.schema.fields),
            row_filter_json=self._filter_json,
            masks=tuple((i, m.action.value, m.value) for i, m in sorted(view.masks.items())),
            out_path=out, io_properties=self._in.io_properties, max_bytes=self._in.max_bytes,
            reading=Reading.of(self._in.metadata, entry.data_file.spec_id))

    def _finish(self, pending: list[_Pending]) -> list[ManifestFile]:
        jobs = [job for p in pending for _, job in p.copies]
        self.bytes_read += sum(job.data.size + sum(d.size for d in job.deletes) for job in jobs)
        copied = iter(self._run(jobs) if jobs else [])
        written: list[ManifestFile] = []
        for item in pending:
            kept = list(item.kept)
            for entry, _ in item.copies:
                result = next(copied)
                if result.record_count == 0:
                    continue
                self.bytes_written += result.file_size_in_bytes
                kept.append(Kept(entry, governed_data_file(
                    entry.data_file, path=result.path, record_count=result.record_count,
                    size=result.file_size_in_bytes, stats=_stats(result),
                    withheld=self._withheld)))
            manifest = write_governed_manifest(self._in.io, self._in.tree, item.key, item.base,
                                               self._in.metadata, self._in.view.denied_ids,
                                               kept)
            if manifest is None:
                write_empty_summary(self._in.io, self._in.tree, item.key)
            else:
                written.append(manifest)
        return written

    def _write_list(self, snapshot: Snapshot, key: str,
                    manifests: list[ManifestFile]) -> GovernedSnapshot:
        inputs = self._in
        path = inputs.tree.manifest_list(snapshot.snapshot_id, key)
        version = inputs.metadata.format_version
        with write_manifest_list(version, inputs.io.new_output(path), snapshot.snapshot_id,
                                 snapshot.parent_snapshot_id,
                                 snapshot.sequence_number if version >= 2 else None,
                                 "deflate") as writer:
            writer.add_manifests(manifests)
        built = GovernedSnapshot(
            snapshot.snapshot_id, path,
            sum((m.added_files_count or 0) + (m.existing_files_count or 0) for m in manifests),
            sum((m.added_rows_count or 0) + (m.existing_rows_count or 0) for m in manifests),
            0)
        with inputs.io.new_output(path + ".json").create(overwrite=True) as stream:
            stream.write(json.dumps(built.to_json()).encode("utf-8"))
        return built


def _stats(copied: CopiedFile) -> dict[str, Any]:
    stats = copied.stats
    return {"value_counts": stats.value_counts, "null_value_counts": stats.null_value_counts,
            "nan_value_counts": stats.nan_value_counts, "lower_bounds": stats.lower_bounds,
            "upper_bounds": stats.upper_bounds, "column_sizes": stats.column_sizes}


def _delete_name(delete: DataFile) -> str:
    offset = _v3_field(delete, _CONTENT_OFFSET)
    return delete.file_path if offset is None else f"{delete.file_path}#{offset}"


def _row_file(data_file: DataFile, entry: ManifestEntry | None) -> RowFile:
    """What reading ``data_file``'s rows (or deletes) needs."""
    partition = data_file.partition
    return RowFile(
        path=data_file.file_path, content=data_file.content, file_format=data_file.file_format,
        records=data_file.record_count, size=data_file.file_size_in_bytes,
        sequence=(entry.sequence_number or 0) if entry is not None else 0,
        spec_id=data_file.spec_id or 0,
        partition=tuple(partition._data) if partition is not None else (),
        equality_ids=tuple(data_file.equality_ids or ()),
        offset=_v3_field(data_file, _CONTENT_OFFSET),
        length=_v3_field(data_file, _CONTENT_SIZE),
        referenced=referenced_data_file(data_file) if data_file.content != DataFileContent.DATA
        else None)
