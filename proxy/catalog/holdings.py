"""What the catalog's live tables and views hold, for a purge to keep.

A live table holds the places it roots (the directory of its metadata file, less a last
``metadata`` segment; its ``location`` and ``write.*.path``) and the files it names (metadata
log, manifest lists, manifests, data and delete files, statistics files) in every snapshot it
still has; a view holds the places it roots. The catalog's own SQLite file is held too.

``LiveHoldings.learn`` reads each metadata file and each manifest once (neither ever changes),
so a purge learns everything while writes go on, then, alone under the adoption lock, learns
again only what changed meanwhile.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import structlog
from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from pyiceberg.io import FileIO
from pyiceberg.serializers import Compressor
from pyiceberg.table.metadata import TableMetadataUtil
from sqlalchemy import literal, make_url, select
from sqlalchemy.orm import Session

from proxy.catalog.locations import place_of
from proxy.catalog.view_store import VIEW_TYPE
from proxy.locations import LOCATION_PROPERTIES

log = structlog.get_logger(__name__)
Place = tuple[str, ...]
READERS = 8
"""Metadata files and manifests read at once."""


@dataclass(frozen=True)
class Held:
    """What no purge deletes: places (with everything beneath them) and single files (as
    places too: a file is the same file however a table spells it)."""

    places: frozenset[Place]
    files: frozenset[Place]


NOTHING_HELD = Held(frozenset(), frozenset())


class LiveHoldings:
    """What the catalog's live tables and views hold, learned incrementally."""

    def __init__(self, catalog: SqlCatalog, io: FileIO) -> None:
        self._catalog = catalog
        self._io = io
        self._by_location: dict[str, Held | None] = {}
        self._manifests: dict[str, frozenset[str]] = {}

    def learn(self) -> Held | None:
        """What the live tables and views hold now; None when one of their metadata files,
        manifest lists or manifests cannot be read (what it holds is unknown)."""
        live = _live_rows(self._catalog)
        unknown = [row for row in live if row[0] not in self._by_location]
        with ThreadPoolExecutor(max_workers=READERS) as pool:
            for (location, _), held in zip(unknown, pool.map(self._held_by, unknown),
                                           strict=True):
                self._by_location[location] = held
        holdings = [self._by_location[location] for location, _ in live]
        if any(held is None for held in holdings):
            return None
        places = {place for held in holdings if held is not None for place in held.places}
        database = _database_place(self._catalog)
        if database is not None:
            places.add(database)
        return Held(frozenset(places),
                    frozenset(f for held in holdings if held is not None for f in held.files))

    def _held_by(self, row: tuple[str, bool]) -> Held | None:
        """What the table (or view: the catalog row says which) at ``row`` holds."""
        location, is_view = row
        try:
            with self._io.new_input(location).open() as stream:
                raw = Compressor.get_compressor(location).stream_decompressor(stream).read()
            places = _places(location, json.loads(raw))
            files = {location} if is_view else self._named(raw, location)
        except Exception:  # missing, unreadable or not what it claims
            log.warning("purge.unreadable_live_metadata", location=location)
            return None
        named = (place_of(file) for file in files)
        return Held(places, frozenset(place for place in named if place is not None))

    def _named(self, raw: bytes, location: str) -> set[str]:
        metadata = TableMetadataUtil.parse_raw(raw.decode("utf-8"))
        named = {location, *(entry.metadata_file for entry in metadata.metadata_log)}
        named.update(s.statistics_path for s in metadata.statistics)
        named.update(s.statistics_path for s in metadata.partition_statistics)
        for snapshot in metadata.snapshots:
            named.add(snapshot.manifest_list)
            for manifest in snapshot.manifests(self._io):
                named.add(manifest.manifest_path)
                if manifest.manifest_path not in self._manifests:
                    self._manifests[manifest.manifest_path] = frozenset(
                        entry.data_file.file_path
                        for entry in manifest.fetch_manifest_entry(self._io, discard_deleted=False))
                named.update(self._manifests[manifest.manifest_path])
        return named


def _live_rows(catalog: SqlCatalog) -> list[tuple[str, bool]]:
    """The metadata file of every table and view the catalog has, and whether it is a view
    (by the catalog's row, never by what the file says)."""
    typed = catalog._iceberg_type_filter() is not None  # a v0 catalog has no type (nor views)
    kind = IcebergTables.iceberg_type if typed else literal(None)
    with Session(catalog.engine) as session:
        found = session.execute(select(IcebergTables.metadata_location, kind).where(
            IcebergTables.catalog_name == catalog.name)).all()
    return [(location, kind == VIEW_TYPE) for location, kind in found if location]


def _places(location: str, metadata: Any) -> frozenset[Place]:
    """The metadata file's directory and the roots the metadata declares."""
    if not isinstance(metadata, dict):
        raise ValueError("not a metadata object")
    properties = metadata.get("properties") or {}
    roots = [metadata.get("location"), *(properties.get(key) for key in LOCATION_PROPERTIES)]
    places = [place_of(root) for root in roots if isinstance(root, str)]
    places.append(_metadata_directory(location))
    return frozenset(place for place in places if place is not None)


def _metadata_directory(location: str) -> Place | None:
    """The directory a metadata file lies in, less a last ``metadata`` segment
    (``<location>/metadata/v3.metadata.json``)."""
    place = place_of(location)
    if place is None or len(place) < 3:
        return None
    directory = place[:-1]
    return directory[:-1] if directory[-1] == "metadata" else directory


def _database_place(catalog: SqlCatalog) -> Place | None:
    database = make_url(str(catalog.properties["uri"]))
    if database.get_backend_name() == "sqlite" and database.database:
        return place_of(os.path.abspath(database.database))
    return None
