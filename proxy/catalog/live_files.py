"""The files a live table names, for a purge to keep: its metadata log, manifest lists,
manifests, data and delete files and statistics files, in every snapshot it still has."""

from __future__ import annotations

import structlog
from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestFile
from pyiceberg.serializers import FromInputFile
from pyiceberg.table.metadata import TableMetadata

log = structlog.get_logger(__name__)


def live_table_files(io: FileIO, location: str) -> set[str] | None:
    """Every file the table whose current metadata file is ``location`` names; None when its
    metadata, a manifest list or a manifest cannot be read (what it holds is unknown)."""
    try:
        metadata = FromInputFile.table_metadata(io.new_input(location))
        return _named(io, metadata) | {location}
    except Exception:  # missing, unreadable or not what it claims
        log.warning("purge.unreadable_live_table", location=location)
        return None


def _named(io: FileIO, metadata: TableMetadata) -> set[str]:
    named = {entry.metadata_file for entry in metadata.metadata_log}
    named.update(s.statistics_path for s in metadata.statistics)
    named.update(s.statistics_path for s in metadata.partition_statistics)
    manifests: dict[str, ManifestFile] = {}
    for snapshot in metadata.snapshots:
        named.add(snapshot.manifest_list)
        manifests.update((m.manifest_path, m) for m in snapshot.manifests(io))
    named.update(manifests)
    for manifest in manifests.values():
        named.update(entry.data_file.file_path
                     for entry in manifest.fetch_manifest_entry(io, discard_deleted=False))
    return named
