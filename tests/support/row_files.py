"""Real data and delete files for row-level classification tests (test-only).

``RowTable`` is a pyiceberg SqlCatalog table whose crafted commits (``Crafter``) write their
manifests, manifest lists and content files under the table's own location, as confinement
requires. Content files are real: Parquet data files with Iceberg field ids, Parquet position
and equality delete files, and Puffin deletion vectors (``deletion-vector-v1``), each returned
as the ``DataFile`` a manifest entry lists; what the entry claims (partition, counts, bounds,
``file_path`` bounds of position deletes) can be chosen, to craft entries that lie.
"""

from __future__ import annotations

import json
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.avro.file import AvroOutputFile
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import (
    MANIFEST_LIST_FILE_SCHEMAS,
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriterV2,
)
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.typedef import Record
from pyroaring import BitMap64

from tests.support.commit_capture import Crafter, DeleteManifestWriter

_FILE_PATH_ID, _POS_ID = 2147483546, 2147483545
_POSITION_SCHEMA = pa.schema([
    pa.field("file_path", pa.string(), False, {b"PARQUET:field_id": str(_FILE_PATH_ID).encode()}),
    pa.field("pos", pa.int64(), False, {b"PARQUET:field_id": str(_POS_ID).encode()}),
])


@dataclass
class RowTable:
    """A table with real files, and a ``Crafter`` writing under its location."""

    catalog: SqlCatalog
    crafter: Crafter

    @classmethod
    def create(cls, folder: Path, schema: pa.Schema | Schema, appends: list[pa.Table],
               format_version: int = 2,
               partition_spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC) -> RowTable:
        """Table ``db.t`` with ``schema``, one pyiceberg append per table in ``appends``."""
        catalog = SqlCatalog("rows", uri=f"sqlite:///{folder}/c.db", warehouse=folder.as_uri())
        catalog.create_namespace("db")
        table = catalog.create_table("db.t", schema, partition_spec=partition_spec,
                                     properties={"format-version": str(format_version)})
        for rows in appends:
            table.append(rows)
        table = catalog.load_table("db.t")
        metadata = Path(urlparse(table.location()).path) / "metadata"
        return cls(catalog, Crafter(catalog, table, metadata))

    @property
    def table(self) -> Table:
        return self.crafter.table

    def data_files(self) -> list[tuple[DataFile, int]]:
        """Live data files with their data sequence numbers, oldest first."""
        files = [(e.data_file, e.sequence_number or 0) for m in self.crafter.parent_manifests()
                 for e in m.fetch_manifest_entry(self.table.io)
                 if e.data_file.content == DataFileContent.DATA]
        return sorted(files, key=lambda f: f[1])

    def path(self, name: str) -> str:
        return f"{self.table.location()}/data/{name}-{uuid.uuid4().hex[:8]}"

    def write_data(self, name: str, rows: pa.Table, **claims: Any) -> DataFile:
        """A Parquet data file of ``rows`` in the table's schema (field ids included);
        ``claims``: ``DataFile`` fields its entry states (partition, record_count, bounds...)."""
        arrow_schema = schema_to_pyarrow(self.table.schema())
        return self._parquet(f"{self.path(name)}.parquet", rows.cast(arrow_schema),
                             DataFileContent.DATA, **claims)

    def write_positions(self, name: str, deleted: list[tuple[str, int]],
                        scoped: str | None = None,
                        path_bounds: tuple[str, str] | None = None, **claims: Any) -> DataFile:
        """A position delete file; file-scoped (equal path bounds) if ``scoped`` names a data
        file, or with ``path_bounds`` (lower, upper) as its ``file_path`` bounds."""
        rows = pa.table({"file_path": [p for p, _ in deleted], "pos": [i for _, i in deleted]},
                        schema=_POSITION_SCHEMA)
        lower, upper = path_bounds or (scoped, scoped)
        return self._parquet(f"{self.path(name)}.parquet", rows,
                             DataFileContent.POSITION_DELETES,
                             lower_bounds={_FILE_PATH_ID: lower.encode()} if lower else None,
                             upper_bounds={_FILE_PATH_ID: upper.encode()} if upper else None,
                             **claims)

    def write_equality(self, name: str, rows: pa.Table, ids: list[int],
                       **claims: Any) -> DataFile:
        """An equality delete file of ``rows`` (columns of the table schema with ``ids``)."""
        schema = schema_to_pyarrow(self.table.schema().select(*rows.column_names))
        return self._parquet(f"{self.path(name)}.parquet", rows.cast(schema),
                             DataFileContent.EQUALITY_DELETES, equality_ids=ids, **claims)

    def write_vector(self, name: str, target: str, positions: list[int] | range,
                     record_count: int | None = None) -> DataFile:
        """A Puffin file holding one deletion vector for ``target``, as a v3 DataFile whose
        ``record_count`` is the cardinality unless given."""
        bitmap = BitMap64(positions)
        bitmap.run_optimize()
        serialized = bitmap.serialize()
        body = bytes.fromhex("d1d33964") + serialized
        blob = len(body).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")
        offset = 4
        footer = json.dumps({"blobs": [{
            "type": "deletion-vector-v1", "fields": [2147483645], "snapshot-id": -1,
            "sequence-number": -1, "offset": offset, "length": len(blob),
            "properties": {"referenced-data-file": target, "cardinality": str(len(positions))},
        }]}).encode()
        content = (b"PFA1" + blob + b"PFA1" + footer + len(footer).to_bytes(4, "little")
                   + bytes(4) + b"PFA1")
        path = f"{self.path(name)}.puffin"
        with self.table.io.new_output(path).create() as out:
            out.write(content)
        return DataFile.from_args(
            _table_format_version=3, content=DataFileContent.POSITION_DELETES, file_path=path,
            file_format=FileFormat.PUFFIN, partition=Record(),
            record_count=len(positions) if record_count is None else record_count,
            file_size_in_bytes=len(content), referenced_data_file=target,
            content_offset=offset, content_size_in_bytes=len(blob))

    def _parquet(self, path: str, rows: pa.Table, content: DataFileContent,
                 **fields: Any) -> DataFile:
        with self.table.io.new_output(path).create() as out:
            pq.write_table(rows, out)
        size = len(self.table.io.new_input(path))
        claims: dict[str, Any] = {"partition": Record(), "record_count": rows.num_rows, **fields}
        return DataFile.from_args(content=content, file_path=path,
                                  file_format=FileFormat.PARQUET, file_size_in_bytes=size,
                                  **claims)

    def manifests(self, content: ManifestContent) -> list[ManifestFile]:
        """The current snapshot's manifests of one content."""
        return [m for m in self.crafter.parent_manifests() if m.content == content]


def spec_manifest(crafter: Crafter, snapshot_id: int, entries: list[tuple[Any, DataFile, int]],
                  spec: PartitionSpec, deletes: bool = False) -> ManifestFile:
    """A v2 manifest of (status, file, data sequence number) entries written with ``spec``
    (its partition values and spec id), under the table."""
    out = crafter.table.io.new_output(str(crafter.folder / f"m-{uuid.uuid4()}.avro"))
    writer_class = DeleteManifestWriter if deletes else ManifestWriterV2
    with writer_class(spec, crafter.table.schema(), out, snapshot_id, "null") as writer:
        for status, file, sequence in entries:
            added = status == ManifestEntryStatus.ADDED
            writer.add_entry(ManifestEntry.from_args(
                status=status, snapshot_id=snapshot_id,
                sequence_number=None if added else sequence,
                file_sequence_number=None if added else sequence, data_file=file))
    return writer.to_manifest_file()


class V3Entries(ManifestWriterV2):
    """A manifest writer that writes the v3 entry schema (pyiceberg 0.12 writes v2 entries)."""

    @property
    def version(self) -> Any:
        return 3

    def new_writer(self) -> AvroOutputFile[ManifestEntry]:
        return AvroOutputFile[ManifestEntry](
            output_file=self._output_file, file_schema=self._with_partition(3),
            record_schema=self._with_partition(3), schema_name="manifest_entry",
            metadata=self._meta)


class V3DeleteManifestWriter(V3Entries, DeleteManifestWriter):
    """Delete manifests with the v3 entry schema, so deletion vectors keep their offsets."""


class V3DataManifestWriter(V3Entries):
    """Data manifests with the v3 entry schema, so a data file's own ``first_row_id`` is
    written."""


def v3_delete_manifest(crafter: Crafter, snapshot_id: int,
                       entries: list[tuple[Any, DataFile, int]]) -> ManifestFile:
    """A v3 delete manifest of (status, file, data sequence number) entries under the table."""
    out = crafter.table.io.new_output(str(crafter.folder / f"m-{uuid.uuid4()}.avro"))
    with V3DeleteManifestWriter(UNPARTITIONED_PARTITION_SPEC, crafter.table.schema(), out,
                                snapshot_id, "null") as writer:
        for status, file, sequence in entries:
            added = status == ManifestEntryStatus.ADDED
            writer.add_entry(ManifestEntry.from_args(
                _table_format_version=3, status=status, snapshot_id=snapshot_id,
                sequence_number=None if added else sequence,
                file_sequence_number=None if added else sequence, data_file=file))
    return writer.to_manifest_file()


def v3_manifest_list(io: Any, path: str, snapshot_id: int, parent: int | None, sequence: int,
                     manifests: list[tuple[ManifestFile, int | None]]) -> None:
    """A v3 manifest list at ``path`` of (manifest, ``first_row_id``) records (pyiceberg 0.12
    writes v2 lists only)."""
    records = []
    for manifest, first_row_id in manifests:
        fields = {name: getattr(manifest, name) for name in (
            "manifest_path", "manifest_length", "partition_spec_id", "content",
            "sequence_number", "min_sequence_number", "added_snapshot_id", "added_files_count",
            "existing_files_count", "deleted_files_count", "added_rows_count",
            "existing_rows_count", "deleted_rows_count", "partitions", "key_metadata")}
        for name in ("sequence_number", "min_sequence_number"):
            fields[name] = sequence if fields[name] == -1 else fields[name]
        records.append(ManifestFile.from_args(_table_format_version=3, **fields,
                                              first_row_id=first_row_id))
    meta = {"snapshot-id": str(snapshot_id), "sequence-number": str(sequence),
            "parent-snapshot-id": str(parent) if parent is not None else "null",
            "format-version": "3", "avro.codec": "null"}
    with AvroOutputFile[ManifestFile](
            output_file=io.new_output(path), record_schema=MANIFEST_LIST_FILE_SCHEMAS[3],
            file_schema=MANIFEST_LIST_FILE_SCHEMAS[3], schema_name="manifest_file",
            metadata=meta) as writer:
        writer.write_block(records)
