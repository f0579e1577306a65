"""How much of a table is indexed: per indexed column, the live data files whose filter is
stored and believed (``store.load_filter``), read from storage as any replica would find it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pyiceberg.io import FileIO
from pyiceberg.table.metadata import TableMetadata

from proxy.indexes.files import indexed_columns, live_data_files, wanted_filters
from proxy.indexes.store import filter_path, index_dir, load_filter
from proxy.planning.manifest_cache import ManifestCache


@dataclass(frozen=True)
class ColumnStatus:
    """One indexed column: its hashing family, live files with a stored filter, live files."""

    column: str
    family: str
    indexed: int
    live: int


def index_status(metadata: TableMetadata, io: FileIO, threads: int = 8) -> list[ColumnStatus]:
    """The index status of every column the table's property names (that it still has)."""
    columns = indexed_columns(metadata)
    files = live_data_files(metadata, io, ManifestCache(1_000_000))
    wanted = wanted_filters(files, columns)
    directory = index_dir(metadata)
    with ThreadPoolExecutor(threads) as pool:
        found = list(pool.map(lambda w: load_filter(io, filter_path(directory, w.key), w.key)
                              is not None, wanted))
    counts = {field_id: 0 for field_id in columns}
    for w, stored in zip(wanted, found, strict=True):
        counts[w.key.field_id] += stored
    return [ColumnStatus(name, kind, counts[field_id], len(files))
            for field_id, (name, kind) in columns.items()]
