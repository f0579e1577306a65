"""The live data files of a table and the filters they should have (shared by the service and
``icegov index status``)."""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, DataFileContent, ManifestContent
from pyiceberg.table.metadata import TableMetadata

from proxy.commits.index_property import indexed_fields
from proxy.indexes.store import FilterKey
from proxy.planning.bloom import family
from proxy.planning.manifest_cache import ManifestCache


def indexed_columns(metadata: TableMetadata) -> dict[int, tuple[str, str]]:
    """The indexed columns of the table as it stands: field id -> (name, hashing family)."""
    columns: dict[int, tuple[str, str]] = {}
    for name, field in indexed_fields(metadata.properties, metadata.schema()).items():
        kind = family(field.field_type)
        if kind is not None:
            columns[field.field_id] = (name, kind)
    return columns


def live_data_files(metadata: TableMetadata, io: FileIO,
                    manifests: ManifestCache) -> list[DataFile]:
    """The data files of the table's current snapshot (none without one)."""
    snapshot = metadata.current_snapshot()
    if snapshot is None:
        return []
    files: list[DataFile] = []
    for manifest in manifests.manifests(io, snapshot.manifest_list):
        if manifest.content != ManifestContent.DATA:
            continue
        files.extend(e.data_file for e in manifests.entries(io, manifest)
                     if e.data_file.content == DataFileContent.DATA)
    return files


@dataclass(frozen=True, slots=True)
class Wanted:
    """A filter a live data file should have."""

    data_file: DataFile
    key: FilterKey


def wanted_filters(files: list[DataFile], columns: dict[int, tuple[str, str]]) -> list[Wanted]:
    """Every (file, column) filter of ``files`` for ``columns``."""
    return [Wanted(f, FilterKey(f.file_path, f.file_size_in_bytes, field_id, kind))
            for f in files for field_id, (_, kind) in columns.items()]
