"""Dropping a table with ``purgeRequested``: delete the table's own files, and nothing else.

A table's metadata names files (metadata log, manifest lists, manifests, data and delete files,
statistics) that any writer of its metadata chose: a registered table's metadata file was
written by whoever registered it. pyiceberg's ``purge_table`` deletes every file so named,
wherever it is. Here a file is deleted (or read, to find more files) only when it lies under the
warehouse *and* under one of the table's own roots: its ``location`` or a ``write.*.path``
property, *and* it is held by no table or view the catalog still has: not under one of their
places (the directory of the metadata file, the location, the ``write.*.path``) and not a file
a live table's metadata or manifests name (a table that took the dropped table's data files
with ``add_files`` keeps them; ``proxy.catalog.holdings``). Files elsewhere (another bucket,
the catalog's database) are left alone; when a live table's metadata, manifest lists or
manifests cannot be read, nothing is deleted (what it holds is unknown).

The purge learns what the live tables hold while writes go on, then takes the catalog's
adoption lock alone (``proxy.catalog.adoption``), learns again only what changed meanwhile, and
deletes: nothing adopts files between what it knows and what it deletes, and writes wait only
for that last look and the deletes. Deletion failures are logged, as pyiceberg does: the table
is already dropped and a missing file is no reason to fail.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TypeVar

import structlog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestFile
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Identifier

from proxy.catalog.adoption import adoption_lock
from proxy.catalog.holdings import NOTHING_HELD, READERS, Held, LiveHoldings
from proxy.catalog.locations import Warehouse, place_of
from proxy.locations import LOCATION_PROPERTIES

log = structlog.get_logger(__name__)
T = TypeVar("T")


class TableFiles:
    """Says whether a location is one of a table's own files: inside the warehouse, under the
    table's location or a ``write.*.path`` root (never the warehouse root itself), and held by
    no live table or view (``held``: ``proxy.catalog.holdings``), so a table placed over
    another's files, or registered from its metadata, never purges them."""

    def __init__(self, warehouse: Warehouse, metadata: TableMetadata,
                 held: Held = NOTHING_HELD) -> None:
        self._warehouse = warehouse
        top = place_of(warehouse.uri)
        roots = [metadata.location, *(metadata.properties[key] for key in LOCATION_PROPERTIES
                                      if key in metadata.properties)]
        places = [place_of(root) for root in roots if warehouse.contains(root)]
        self._roots = [place for place in places if place is not None and place != top]
        self._others = held.places
        self._named = held.files

    def owns(self, location: str) -> bool:
        """True when ``location`` may be read or deleted as this table's file."""
        place = place_of(location) if self._warehouse.contains(location) else None
        if place is None or place in self._named:
            return False
        above = {place[:depth] for depth in range(1, len(place) + 1)}
        return any(root in above for root in self._roots) and above.isdisjoint(self._others)


def purge_table(catalog: SqlCatalog, identifier: Identifier) -> None:
    """Drop ``identifier`` and delete its own files (see the module's docstring)."""
    table = catalog.load_table(identifier)
    catalog.drop_table(identifier)
    warehouse = Warehouse(catalog)
    candidates = _candidates(table, TableFiles(warehouse, table.metadata))
    holdings = LiveHoldings(catalog, table.io)
    holdings.learn()  # the long read, while writes go on
    with adoption_lock(catalog).purging():
        held = holdings.learn()  # what changed meanwhile
        if held is None:
            log.warning("purge.skipped", reason="what a live table holds is unknown")
            return
        owned = TableFiles(warehouse, table.metadata, held)
        for group in candidates:  # data first, the metadata file that names them all last
            _delete(table.io, owned, group)


def _candidates(table: Table, files: TableFiles) -> list[set[str]]:
    """The files of the table under its own roots, in the order they are deleted."""
    metadata, io = table.metadata, table.io
    manifests = list(_manifests(io, metadata, files))
    return [_data_files(io, manifests), {m.manifest_path for m in manifests},
            {s.manifest_list for s in metadata.snapshots},
            {s.statistics_path for s in metadata.statistics},
            {s.statistics_path for s in metadata.partition_statistics},
            {entry.metadata_file for entry in metadata.metadata_log},
            {table.metadata_location}]


def _manifests(io: FileIO, metadata: TableMetadata, files: TableFiles) -> Iterator[ManifestFile]:
    """Every manifest named by a manifest list the table owns, itself owned."""
    seen: set[str] = set()
    for snapshot in metadata.snapshots:
        if not files.owns(snapshot.manifest_list):
            continue
        for manifest in _read(partial(snapshot.manifests, io), snapshot.manifest_list):
            if manifest.manifest_path not in seen and files.owns(manifest.manifest_path):
                seen.add(manifest.manifest_path)
                yield manifest


def _data_files(io: FileIO, manifests: list[ManifestFile]) -> set[str]:
    def named_by(manifest: ManifestFile) -> list[str]:
        read = partial(manifest.fetch_manifest_entry, io, discard_deleted=False)
        return [entry.data_file.file_path for entry in _read(read, manifest.manifest_path)]

    with ThreadPoolExecutor(max_workers=READERS) as pool:
        return {path for paths in pool.map(named_by, manifests) for path in paths}


def _read(read: Callable[[], Iterable[T]], location: str) -> list[T]:
    try:
        return list(read())
    except Exception:  # unreadable or not what it claims: its files stay
        log.warning("purge.unreadable", location=location)
        return []


def _delete(io: FileIO, files: TableFiles, locations: Iterable[str]) -> None:
    for location in set(locations):
        if not files.owns(location):
            log.warning("purge.kept_foreign_file", location=location)
            continue
        try:
            io.delete(location)
        except OSError:
            log.warning("purge.delete_failed", location=location)
