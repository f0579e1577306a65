"""Where the embedded catalog reads and writes: only under its warehouse.

The embedded catalog writes metadata files with its own FileIO at locations its callers choose: a
table's ``location`` (create, ``set-location``, or a namespace's ``location`` property) and the
``write.*.path`` table properties; it reads metadata files named by register. Anything outside the
warehouse would let a caller write or read files the catalog was never meant to touch, so every
such location must lie under the warehouse, which is one of two kinds:

- a local directory (``file://``): the location must resolve (symbolic links and ``..`` included,
  percent-decoded or not) to a path under it;
- an object-store prefix (``s3://bucket/prefix``): the location must use the same scheme and
  bucket and, read as is and percent-decoded, be a canonical key (no ``.``, ``..`` or empty
  segment, no query, fragment or control character) whose segments start with the prefix's.

Table properties that configure the catalog's FileIO (endpoints, keys, ``py-io-impl``) or load a
location provider are refused as well: they would let a caller send the catalog's writes elsewhere
or make it import code. A refusal names the field, never what is or is not stored.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote, urlparse

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table.metadata import TableMetadata

from proxy.errors import BadRequest
from proxy.locations import LOCATION_PROPERTIES, NAMESPACE_LOCATION

OBJECT_STORE_SCHEMES = frozenset({"s3", "s3a", "s3n"})
"""Warehouse URI schemes the embedded catalog accepts besides local directories (pyiceberg's
PyArrow FileIO reaches all three through its S3 file system)."""

CATALOG_IO_PROPERTY_PREFIXES = (
    "py-io-impl", "s3.", "client.", "gcs.", "adls.", "hdfs.", "oss.", "hf.", "buffer-size",
    "write.py-location-provider.impl", "DEFAULT_SCHEME", "DEFAULT_NETLOC",
)
"""Table-property keys pyiceberg would read into the catalog's own FileIO or location provider:
only the operator (``ICEGOV__FILE_IO``) configures those."""

_FORBIDDEN_CHARACTERS = frozenset("\\?#") | {chr(c) for c in (*range(0x20), 0x7F)}
_MAX_DECODINGS = 4


class WarehouseRoot(Protocol):
    """One kind of warehouse: says whether a location lies inside it."""

    def contains(self, location: str) -> bool:
        """True when ``location`` lies under the warehouse."""

    def may_read(self, location: str) -> bool:
        """True when the catalog may read ``location`` as a file (it lies under the warehouse
        and, where that can be known without reading, is a regular file)."""


@dataclass(frozen=True)
class LocalRoot:
    """A warehouse directory on the local file system (symbolic links resolved)."""

    root: Path

    def path(self, location: str) -> Path | None:
        """The local path of ``location`` if it lies under the warehouse, else None."""
        parsed = urlparse(location)
        if parsed.scheme not in ("", "file") or parsed.netloc not in ("", "localhost"):
            return None
        raw = parsed.path if parsed.scheme else location
        candidates = {raw, unquote(raw)}
        if any(not c.startswith("/") or "\x00" in c for c in candidates):
            return None
        resolved = [Path(os.path.realpath(c)) for c in candidates]
        if not all(p.is_relative_to(self.root) for p in resolved):
            return None
        return Path(os.path.realpath(raw))

    def contains(self, location: str) -> bool:
        return self.path(location) is not None

    def may_read(self, location: str) -> bool:
        path = self.path(location)
        return path is not None and path.is_file()  # never a directory, FIFO or device


@dataclass(frozen=True)
class ObjectKey:
    """A canonical object-store location split into scheme, bucket and key segments."""

    scheme: str
    bucket: str
    segments: tuple[str, ...]

    @classmethod
    def parse(cls, location: str) -> ObjectKey | None:
        """The location's parts if it is canonical, else None.

        Canonical: ``scheme://bucket[/segment...]`` with an optional trailing slash, no empty,
        ``.`` or ``..`` segment, and no ``?``, ``#``, backslash or control character."""
        scheme, separator, rest = location.partition("://")
        if not separator or not scheme or any(c in _FORBIDDEN_CHARACTERS for c in location):
            return None
        bucket, _, key = rest.partition("/")
        key = key.removesuffix("/")
        segments = tuple(key.split("/")) if key else ()
        if not bucket or any(segment in ("", ".", "..") for segment in segments):
            return None
        return cls(scheme, bucket, segments)

    def is_under(self, root: ObjectKey) -> bool:
        """True when this key is ``root`` or lies below it (whole segments, same bucket)."""
        return (self.scheme == root.scheme and self.bucket == root.bucket
                and self.segments[:len(root.segments)] == root.segments)


def _decodings(location: str) -> list[str] | None:
    """``location`` and each successive percent-decoding of it until nothing changes (None if
    it keeps changing: nobody encodes a location that many times in good faith)."""
    forms = [location]
    for _ in range(_MAX_DECODINGS):
        decoded = unquote(forms[-1])
        if decoded == forms[-1]:
            return forms
        forms.append(decoded)
    return None


@dataclass(frozen=True)
class ObjectStoreRoot:
    """A warehouse prefix in an object store: ``s3://bucket/prefix``."""

    root: ObjectKey

    @classmethod
    def of(cls, uri: str) -> ObjectStoreRoot:
        """The root for ``uri``; ValueError unless it is a canonical object-store URI."""
        key = ObjectKey.parse(uri)
        if key is None or key.scheme not in OBJECT_STORE_SCHEMES or unquote(uri) != uri:
            raise ValueError("an object-store warehouse must be a plain "
                             f"{'|'.join(sorted(OBJECT_STORE_SCHEMES))}://bucket/prefix URI")
        return cls(key)

    @property
    def uri(self) -> str:
        """The warehouse URI in canonical form (no trailing slash)."""
        return "/".join((f"{self.root.scheme}://{self.root.bucket}", *self.root.segments))

    def contains(self, location: str) -> bool:
        """True when the location, as is and however often percent-decoded, is canonical and
        under the root: a reader that decodes it (Hadoop's ``Path`` does) lands inside too."""
        forms = _decodings(location)
        if forms is None:
            return False
        keys = [ObjectKey.parse(form) for form in forms]
        return all(key is not None and key.is_under(self.root) for key in keys)

    def may_read(self, location: str) -> bool:
        return self.contains(location)  # whether it exists is learnt only by reading it


def place_of(location: str) -> tuple[str, ...] | None:
    """Where ``location`` really is, as segments from the top (``("file", "srv", "wh", ...)``
    with symbolic links resolved, or ``(scheme, bucket, *key segments)``), fully
    percent-decoded; None when it is not a canonical local or object-store location. Two
    locations name the same place, or one lies under the other, exactly when their places are
    equal or one is a prefix of the other."""
    forms = _decodings(location)
    if forms is None:
        return None
    decoded = forms[-1]
    if is_object_store_uri(decoded):
        key = ObjectKey.parse(decoded)
        return None if key is None else (key.scheme, key.bucket, *key.segments)
    parsed = urlparse(decoded)
    if parsed.scheme not in ("", "file") or parsed.netloc not in ("", "localhost"):
        return None
    raw = parsed.path if parsed.scheme else decoded
    if not raw.startswith("/") or "\x00" in raw:
        return None
    return ("file", *Path(os.path.realpath(raw)).parts[1:])


def is_object_store_uri(value: str) -> bool:
    """True when ``value`` names an object-store location (``s3://...``) rather than a path."""
    return urlparse(value).scheme in OBJECT_STORE_SCHEMES


def warehouse_root(uri: str) -> WarehouseRoot:
    """The confinement for a catalog's ``warehouse`` property: local directory or object store."""
    if is_object_store_uri(uri):
        return ObjectStoreRoot.of(uri)
    parsed = urlparse(uri)
    if parsed.scheme not in ("", "file"):
        raise ValueError("the warehouse must be a local directory or an object-store URI")
    return LocalRoot(Path(os.path.realpath(unquote(parsed.path if parsed.scheme else uri))))


class Warehouse:
    """The catalog's warehouse, and checks that locations and table properties stay inside it."""

    def __init__(self, catalog: SqlCatalog) -> None:
        self.uri = str(catalog.properties["warehouse"])
        self.root = warehouse_root(self.uri)

    def contains(self, location: str) -> bool:
        """True when ``location`` lies under the warehouse."""
        return self.root.contains(location)

    def may_read(self, location: str) -> bool:
        """True when the catalog may read ``location`` (register): see ``WarehouseRoot``."""
        return self.root.may_read(location)

    def check(self, location: str, what: str) -> None:
        """400 unless ``location`` lies under the warehouse."""
        if not self.contains(location):
            raise BadRequest(f"{what} must be a location in this catalog's warehouse")

    def check_table_properties(self, properties: Mapping[str, str]) -> None:
        """400 when a ``write.*.path`` property points outside the warehouse, or a property
        would configure the catalog's FileIO or location provider."""
        for key in properties:
            if key.startswith(CATALOG_IO_PROPERTY_PREFIXES):
                raise BadRequest(f"table property {key} may not be set in this catalog (its "
                                 "storage settings belong to the operator)")
        for key in LOCATION_PROPERTIES:
            if key in properties:
                self.check(properties[key], f"table property {key}")

    def check_namespace_properties(self, properties: Mapping[str, str]) -> None:
        """400 when a namespace's ``location`` points outside the warehouse."""
        if NAMESPACE_LOCATION in properties:
            self.check(properties[NAMESPACE_LOCATION], "namespace location")

    def check_metadata(self, metadata: TableMetadata) -> None:
        """400 when a table's location or its properties leave the warehouse."""
        self.check(metadata.location, "table location")
        self.check_table_properties(metadata.properties)

    def check_named_files(self, metadata: TableMetadata) -> None:
        """400 when a file the metadata itself names (previous metadata files, manifest lists,
        statistics) lies outside the warehouse: what register adopts must be the warehouse's
        (manifests and data files are confined where they are read or deleted)."""
        named = [
            *(entry.metadata_file for entry in metadata.metadata_log),
            *(snapshot.manifest_list for snapshot in metadata.snapshots),
            *(stats.statistics_path for stats in metadata.statistics),
            *(stats.statistics_path for stats in metadata.partition_statistics),
        ]
        for location in named:
            self.check(location, "a file named by the table metadata")
