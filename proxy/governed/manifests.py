"""Writing governed manifests, and remembering what the manifest list says of each.

A governed manifest lists the live entries a governed view keeps of one base manifest: files
referenced in place and governed copies, each with its base entry's status, snapshot id and
sequence numbers (written explicitly, so the manifest reads the same in any list). It is written
with the governed schema (denied columns absent: a manifest's key-value metadata carries its
schema) and no statistics of a denied or masked column. Beside it a small JSON summary keeps
what a manifest list needs of it (``ManifestFile``), so a later build — in this process or a
replica — reuses it without reading it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    PartitionFieldSummary,
    write_manifest,
)
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata

from proxy.commits.operations.specs import require_binding_schema
from proxy.governed.layout import ViewTree

_STATS = ("column_sizes", "value_counts", "null_value_counts", "nan_value_counts",
          "lower_bounds", "upper_bounds")


@dataclass(frozen=True)
class Kept:
    """One entry a governed manifest lists: the base entry it stands for and the file listed
    (the base file itself, or a governed copy)."""

    base: ManifestEntry
    data_file: DataFile


def governed_data_file(source: DataFile, *, path: str | None = None,
                       record_count: int | None = None, size: int | None = None,
                       stats: dict[str, Any] | None = None,
                       withheld: frozenset[int] = frozenset()) -> DataFile:
    """A new ``DataFile`` for a governed manifest: ``source``'s partition and spec, its path,
    counts and statistics replaced where given, no statistics of ``withheld`` field ids, no
    format-3 lineage, encryption or equality ids."""
    facts = {name: getattr(source, name) for name in _STATS} if stats is None else stats
    facts = {name: ({k: v for k, v in (facts.get(name) or {}).items() if k not in withheld}
                    or None) for name in _STATS}
    data_file = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=source.file_path if path is None else path,
        file_format=source.file_format if path is None else FileFormat.PARQUET,
        partition=source.partition,
        record_count=source.record_count if record_count is None else record_count,
        file_size_in_bytes=source.file_size_in_bytes if size is None else size,
        split_offsets=source.split_offsets if path is None else None,
        sort_order_id=source.sort_order_id if path is None else None,
        **facts)
    data_file.spec_id = source.spec_id
    return data_file


def write_governed_manifest(io: FileIO, tree: ViewTree, key: str, base: ManifestFile,
                            metadata: TableMetadata, schema_without: frozenset[int],
                            kept: Iterable[Kept]) -> ManifestFile | None:
    """Write the governed manifest ``key`` of ``base`` listing ``kept``, and its summary; the
    ``ManifestFile`` a list names it by (None when it would list nothing)."""
    entries = list(kept)
    if not entries:
        return None
    spec = metadata.specs()[base.partition_spec_id]
    schema = _without(require_binding_schema(metadata, spec), schema_without)
    path = tree.manifest(key)
    writer = write_manifest(metadata.format_version, spec, schema, io.new_output(path),
                            base.added_snapshot_id or 0, "deflate")
    with writer:
        for item in entries:
            writer.add_entry(ManifestEntry.from_args(
                status=item.base.status, snapshot_id=item.base.snapshot_id,
                sequence_number=item.base.sequence_number,
                file_sequence_number=item.base.file_sequence_number,
                data_file=item.data_file))
    manifest = writer.to_manifest_file()
    manifest.sequence_number = base.sequence_number
    manifest.min_sequence_number = min(
        (e.base.sequence_number for e in entries if e.base.sequence_number is not None),
        default=base.min_sequence_number)
    _write_summary(io, tree.manifest_summary(key), manifest)
    return manifest


def read_summary(io: FileIO, tree: ViewTree, key: str) -> ManifestFile | bool | None:
    """The summary of governed manifest ``key`` if one was written (``False``: none yet;
    ``None``: the manifest was found to list nothing)."""
    try:
        with io.new_input(tree.manifest_summary(key)).open() as stream:
            raw = json.loads(stream.read())
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        return False
    return None if raw.get("empty") else _manifest_file(raw)


def write_empty_summary(io: FileIO, tree: ViewTree, key: str) -> None:
    """Remember that the governed manifest ``key`` lists nothing."""
    _put(io, tree.manifest_summary(key), {"empty": True})


def _without(schema: Schema, field_ids: frozenset[int]) -> Schema:
    if not field_ids:
        return schema
    return Schema(*(f for f in schema.fields if f.field_id not in field_ids),
                  schema_id=schema.schema_id)


def _b64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode("ascii")


def _unb64(value: str | None) -> bytes | None:
    return None if value is None else base64.b64decode(value)


def _write_summary(io: FileIO, path: str, manifest: ManifestFile) -> None:
    _put(io, path, {
        "path": manifest.manifest_path, "length": manifest.manifest_length,
        "spec-id": manifest.partition_spec_id, "sequence": manifest.sequence_number,
        "min-sequence": manifest.min_sequence_number, "snapshot": manifest.added_snapshot_id,
        "counts": [manifest.added_files_count, manifest.existing_files_count,
                   manifest.deleted_files_count, manifest.added_rows_count,
                   manifest.existing_rows_count, manifest.deleted_rows_count],
        "partitions": [[p.contains_null, p.contains_nan, _b64(p.lower_bound),
                        _b64(p.upper_bound)] for p in manifest.partitions or ()],
    })


def _manifest_file(raw: dict[str, Any]) -> ManifestFile:
    counts = raw["counts"]
    return ManifestFile.from_args(
        manifest_path=raw["path"], manifest_length=raw["length"],
        partition_spec_id=raw["spec-id"], content=ManifestContent.DATA,
        sequence_number=raw["sequence"], min_sequence_number=raw["min-sequence"],
        added_snapshot_id=raw["snapshot"], added_files_count=counts[0],
        existing_files_count=counts[1], deleted_files_count=counts[2],
        added_rows_count=counts[3], existing_rows_count=counts[4],
        deleted_rows_count=counts[5],
        partitions=[PartitionFieldSummary.from_args(
            contains_null=p[0], contains_nan=p[1], lower_bound=_unb64(p[2]),
            upper_bound=_unb64(p[3])) for p in raw["partitions"]],
        key_metadata=None)


def _put(io: FileIO, path: str, body: dict[str, Any]) -> None:
    with io.new_output(path).create(overwrite=True) as stream:
        stream.write(json.dumps(body, sort_keys=True).encode("utf-8"))


LIVE = (ManifestEntryStatus.ADDED, ManifestEntryStatus.EXISTING)
