"""Where the embedded catalog reads and writes: only under its warehouse directory.

The embedded catalog writes metadata files with its own (local) FileIO at locations its callers
choose: a table's ``location`` (create, ``set-location``, or a namespace's ``location``
property) and the ``write.*.path`` table properties; it reads metadata files named by register.
Anything outside the warehouse would let a caller write or read arbitrary host files, so every
such location must resolve (symbolic links and ``..`` included, percent-decoded or not) to a
path under the warehouse; other schemes (``s3://``...) are refused too. A refusal names the
field, never what is or is not on disk.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import unquote, urlparse

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table.metadata import TableMetadata

from proxy.errors import BadRequest
from proxy.locations import LOCATION_PROPERTIES, NAMESPACE_LOCATION


class Warehouse:
    """The catalog's warehouse root, and checks that locations stay inside it."""

    def __init__(self, catalog: SqlCatalog) -> None:
        self.root = Path(os.path.realpath(unquote(urlparse(catalog.properties["warehouse"]).path)))

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

    def check(self, location: str, what: str) -> None:
        """400 unless ``location`` lies under the warehouse."""
        if self.path(location) is None:
            raise BadRequest(f"{what} must be a location in this catalog's warehouse")

    def check_table_properties(self, properties: Mapping[str, str]) -> None:
        """400 when a ``write.*.path`` property points outside the warehouse."""
        for key in LOCATION_PROPERTIES:
            if key in properties:
                self.check(properties[key], f"table property {key}")

    def check_namespace_properties(self, properties: Mapping[str, str]) -> None:
        """400 when a namespace's ``location`` points outside the warehouse."""
        if NAMESPACE_LOCATION in properties:
            self.check(properties[NAMESPACE_LOCATION], "namespace location")

    def check_metadata(self, metadata: TableMetadata) -> None:
        """400 when a table's location or its ``write.*.path`` properties leave the warehouse."""
        self.check(metadata.location, "table location")
        self.check_table_properties(metadata.properties)
