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
from sqlalchemy import make_url, select
from sqlalchemy.orm import Session

from proxy.catalog.locations import place_of
from proxy.locations import LOCATION_PROPERTIES

log = structlog.get_logger(__name__)
Place = tuple[str, ...]
READERS = 8
"""Metadata files and manifests read at once."""


@dataclass(frozen=True)
class Held:
    """What no purge deletes: places (with everything beneath them) and single files."""

    places: frozenset[Place]
    files: frozenset[str]


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
        live = _live_locations(self._catalog)
        unknown = [location for location in live if location not in self._by_location]
        with ThreadPoolExecutor(max_workers=READERS) as pool:
            for location, held in zip(unknown, pool.map(self._held_by, unknown), strict=True):
                self._by_location[location] = held
        holdings = [self._by_location[location] for location in live]
        if any(held is None for held in holdings):
            return None
        places = {place for held in holdings if held is not None for place in held.places}
        database = _database_place(self._catalog)
        if database is not None:
            places.add(database)
        return Held(frozenset(places),
                    frozenset(f for held in holdings if held is not None for f in held.files))

    def _held_by(self, location: str) -> Held | None:
        try:
            with self._io.new_input(location).open() as stream:
                raw = Compressor.get_compressor(location).stream_decompressor(stream).read()
            metadata = json.loads(raw)
            places = _places(location, metadata)
            files = {location} if "view-uuid" in metadata else self._named(raw, location)
        except Exception:  # missing, unreadable or not what it claims
            log.warning("purge.unreadable_live_metadata", location=location)
            return None
        return Held(places, frozenset(files))

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


def _live_locations(catalog: SqlCatalog) -> list[str]:
    with Session(catalog.engine) as session:
        found = session.execute(select(IcebergTables.metadata_location).where(
            IcebergTables.catalog_name == catalog.name)).scalars().all()
    return [location for location in found if location]


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
