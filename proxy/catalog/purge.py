"""Dropping a table with ``purgeRequested``: delete the table's own files, and nothing else.

A table's metadata names files (metadata log, manifest lists, manifests, data and delete files,
statistics) that any writer of its metadata chose: a registered table's metadata file was
written by whoever registered it. pyiceberg's ``purge_table`` deletes every file so named,
wherever it is. Here a file is deleted (or read, to find more files) only when it lies under the
warehouse *and* under one of the table's own roots: its ``location`` or a ``write.*.path``
property, *and* not under any root of another table or view the catalog still has (the
directory of its metadata file, its location, its ``write.*.path``), *and* not a file a live
table's metadata or manifests name (a table that took the dropped table's data files with
``add_files`` keeps them). Files elsewhere (another bucket, the catalog's database, another
live table's files) are left alone; when a live table's metadata, manifest lists or manifests
cannot be read, nothing is deleted (what it holds is unknown). A purge runs alone, under the
catalog's adoption lock (``proxy.catalog.adoption``): nothing adopts files between what it
learns and what it deletes. Deletion failures are logged, as pyiceberg does: the table is
already dropped and a missing file is no reason to fail.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TypeVar

import structlog
from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestFile
from pyiceberg.serializers import Compressor
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Identifier
from sqlalchemy import make_url, select
from sqlalchemy.orm import Session

from proxy.catalog.adoption import adoption_lock
from proxy.catalog.live_files import live_table_files
from proxy.catalog.locations import Warehouse, place_of
from proxy.locations import LOCATION_PROPERTIES

log = structlog.get_logger(__name__)
T = TypeVar("T")


class TableFiles:
    """Says whether a location is one of a table's own files: inside the warehouse, under the
    table's location or a ``write.*.path`` root (never the warehouse root itself), and not under
    a protected place (``others``: see ``protected_places``), so a table placed over another's
    files, or registered from its metadata, never purges them."""

    def __init__(self, warehouse: Warehouse, metadata: TableMetadata,
                 others: frozenset[tuple[str, ...]] = frozenset(),
                 named: frozenset[str] = frozenset()) -> None:
        self._warehouse = warehouse
        top = place_of(warehouse.uri)
        roots = [metadata.location, *(metadata.properties[key] for key in LOCATION_PROPERTIES
                                      if key in metadata.properties)]
        places = [place_of(root) for root in roots if warehouse.contains(root)]
        self._roots = [place for place in places if place is not None and place != top]
        self._others = others
        self._named = named

    def owns(self, location: str) -> bool:
        """True when ``location`` may be read or deleted as this table's file."""
        place = place_of(location) if self._warehouse.contains(location) else None
        if place is None or location in self._named:
            return False
        above = {place[:depth] for depth in range(1, len(place) + 1)}
        return any(root in above for root in self._roots) and above.isdisjoint(self._others)


def protected_places(catalog: SqlCatalog, io: FileIO) -> frozenset[tuple[str, ...]] | None:
    """What no purge deletes: the catalog's own database file (SQLite) and, for every table
    and view the catalog still has, the directory of its current metadata file (less a last
    ``metadata`` segment) and every root its metadata declares (``location``, ``write.*.path``).
    None when a live table's metadata cannot be read: its roots are unknown, so nothing is
    safe to delete."""
    with Session(catalog.engine) as session:
        locations = session.execute(select(IcebergTables.metadata_location).where(
            IcebergTables.catalog_name == catalog.name)).scalars().all()
    live = [location for location in locations if location]
    with ThreadPoolExecutor(max_workers=_READERS) as pool:
        declared = list(pool.map(partial(_declared_roots, io), live))
    if any(roots is None for roots in declared):
        return None
    places: set[tuple[str, ...] | None] = {
        place for roots in declared if roots is not None for place in roots}
    places.update(_metadata_directory(location) for location in live)
    database = make_url(str(catalog.properties["uri"]))
    if database.get_backend_name() == "sqlite" and database.database:
        places.add(place_of(os.path.abspath(database.database)))
    return frozenset(place for place in places if place is not None)


_READERS = 8
"""Live tables' metadata files read at once while a purge learns what to keep."""


def files_live_tables_name(catalog: SqlCatalog, io: FileIO) -> frozenset[str] | None:
    """Every file the catalog's live tables name: metadata log, manifest lists, manifests, data
    and delete files, statistics. None when one of them cannot be read."""
    with Session(catalog.engine) as session:
        query = select(IcebergTables.metadata_location).where(
            IcebergTables.catalog_name == catalog.name)
        if (only_tables := catalog._iceberg_type_filter()) is not None:
            query = query.where(only_tables)
        locations = [loc for loc in session.execute(query).scalars().all() if loc]
    with ThreadPoolExecutor(max_workers=_READERS) as pool:
        named = list(pool.map(partial(live_table_files, io), locations))
    if any(files is None for files in named):
        return None
    return frozenset(path for files in named if files is not None for path in files)


def _metadata_directory(location: str) -> tuple[str, ...] | None:
    """The directory a metadata file lies in, less a last ``metadata`` segment
    (``<location>/metadata/v3.metadata.json``)."""
    place = place_of(location)
    if place is None or len(place) < 3:
        return None
    directory = place[:-1]
    return directory[:-1] if directory[-1] == "metadata" else directory


def _declared_roots(io: FileIO, location: str) -> list[tuple[str, ...]] | None:
    """The places a table's (or view's) metadata file names as its roots; None when it
    cannot be read."""
    try:
        with io.new_input(location).open() as stream:
            raw = Compressor.get_compressor(location).stream_decompressor(stream).read()
        metadata = json.loads(raw)
        properties = metadata.get("properties") or {}
        roots = [metadata.get("location"), *(properties.get(key) for key in LOCATION_PROPERTIES)]
    except Exception:  # missing, unreadable or not metadata: its roots are unknown
        log.warning("purge.unreadable_live_metadata", location=location)
        return None
    places = (place_of(root) for root in roots if isinstance(root, str))
    return [place for place in places if place is not None]


def purge_table(catalog: SqlCatalog, identifier: Identifier) -> None:
    """Drop ``identifier`` and delete its own files (see the module's docstring)."""
    with adoption_lock(catalog).purging():
        table = catalog.load_table(identifier)
        catalog.drop_table(identifier)
        _delete_own_files(catalog, table)


def _delete_own_files(catalog: SqlCatalog, table: Table) -> None:
    metadata, io = table.metadata, table.io
    protected = protected_places(catalog, io)
    named = files_live_tables_name(catalog, io) if protected is not None else None
    if protected is None or named is None:
        log.warning("purge.skipped", reason="what a live table holds is unknown")
        return
    files = TableFiles(Warehouse(catalog), metadata, protected, named)
    manifests = list(_manifests(io, metadata, files))
    _delete(io, files, _data_files(io, manifests, files))
    _delete(io, files, (m.manifest_path for m in manifests))
    _delete(io, files, (s.manifest_list for s in metadata.snapshots))
    _delete(io, files, (s.statistics_path for s in metadata.statistics))
    _delete(io, files, (s.statistics_path for s in metadata.partition_statistics))
    _delete(io, files, (entry.metadata_file for entry in metadata.metadata_log))
    _delete(io, files, [table.metadata_location])


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


def _data_files(io: FileIO, manifests: Iterable[ManifestFile], files: TableFiles) -> set[str]:
    paths: set[str] = set()
    for manifest in manifests:
        read = partial(manifest.fetch_manifest_entry, io, discard_deleted=False)
        entries = _read(read, manifest.manifest_path)
        paths.update(entry.data_file.file_path for entry in entries)
    return paths


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
