"""Where governed data lives: one tree per table (by uuid) and view (by digest), under a root
that lies outside every table's own locations.

Every name in a tree is derived from what it holds (a digest of its inputs), so a build that
finds a file already written reuses it: base manifests and data files never change, and the
view digest names the restriction they were governed under. Nothing here reads or writes.

::

    {root}/{table-uuid}/{view-digest}/data/{key}.parquet       governed copies of data files
    {root}/{table-uuid}/{view-digest}/manifests/{key}.avro     governed manifests
    {root}/{table-uuid}/{view-digest}/manifests/{key}.json     what the manifest list says of one
    {root}/{table-uuid}/{view-digest}/lists/snap-{id}-{key}.avro  governed manifest lists
    {root}/{table-uuid}/{view-digest}/metadata/{key}.metadata.json governed table metadata
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

GOVERNED_DIR = "_icegov_governed"


def content_key(*parts: object) -> str:
    """A short, stable name for ``parts`` (JSON-serialisable values)."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:40]


def default_root(table_location: str, warehouse: str | None) -> str:
    """The governed root when none is configured: ``_icegov_governed`` in the embedded
    warehouse (its catalog lists no directories). With a backing catalog, outside its
    warehouse (a catalog that lists directories as namespaces, Hadoop's, would show a root
    inside it): at the root of the table's bucket on an object store, else in icegov's working
    directory (where its other local state goes)."""
    if warehouse is not None:
        return f"{warehouse.rstrip('/')}/{GOVERNED_DIR}"
    parsed = urlsplit(table_location)
    if parsed.scheme and parsed.scheme != "file" and parsed.netloc:
        return f"{parsed.scheme}://{parsed.netloc}/{GOVERNED_DIR}"
    return (Path.cwd() / GOVERNED_DIR).as_uri()


def _within(path: str, prefix: str) -> bool:
    return path.startswith(prefix.rstrip("/") + "/")


@dataclass(frozen=True)
class TableTree:
    """The governed tree of one table: every view's tree lies under ``prefix``."""

    root: str
    table_uuid: str

    @property
    def prefix(self) -> str:
        return f"{self.root.rstrip('/')}/{self.table_uuid}"

    def view(self, digest: str) -> ViewTree:
        """The tree of one view of this table."""
        return ViewTree(self, digest)

    def holds(self, path: str) -> bool:
        """True when ``path`` lies in this table's governed tree (any view)."""
        return _within(path, self.prefix)


@dataclass(frozen=True)
class ViewTree:
    """The governed tree of one table under one view."""

    table: TableTree
    digest: str

    @property
    def prefix(self) -> str:
        return f"{self.table.prefix}/{self.digest}"

    def data_file(self, key: str) -> str:
        return f"{self.prefix}/data/{key}.parquet"

    def manifest(self, key: str) -> str:
        return f"{self.prefix}/manifests/{key}.avro"

    def manifest_summary(self, key: str) -> str:
        return f"{self.prefix}/manifests/{key}.json"

    def manifest_list(self, snapshot_id: int, key: str) -> str:
        return f"{self.prefix}/lists/snap-{snapshot_id}-{key}.avro"

    def metadata(self, key: str) -> str:
        return f"{self.prefix}/metadata/{key}.metadata.json"

    def holds(self, path: str) -> bool:
        """True when ``path`` lies in this view's tree."""
        return _within(path, self.prefix)


def outside(root: str, locations: Iterable[str]) -> bool:
    """True when ``root`` neither lies in nor contains any of ``locations`` (a table's own
    locations: governed data must never be seen by the base table's orphan-file clean-up)."""
    base = root.rstrip("/") + "/"
    dirs = [loc.rstrip("/") + "/" for loc in locations]
    return not any(base.startswith(d) or d.startswith(base) for d in dirs)
