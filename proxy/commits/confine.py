"""Which files a table commit may reference: only those under the table's own locations.

A commit names files by location (manifest lists, manifests, data and delete files, a delete
file's ``referenced_data_file``). icegov reads some of them to verify the commit, and the catalog
later reads, serves and (on purge) deletes all of them as the table's own. A location outside
the table would let a commit read icegov's host files, adopt another table's manifests (its rows
become readable here) or its data files (a purge of this table deletes them). So every location a
commit introduces must lie under one of the table's roots:

* the table ``location``;
* ``write.data.path`` and ``write.metadata.path`` (and the deprecated data-path aliases
  ``write.object-storage.path`` and ``write.folder-storage.path``), when set.

For an existing table the roots come from its current metadata; for a create (no base) from the
commit's own ``set-location`` and ``set-properties`` updates.

Locations are compared as (scheme, authority, path segments): ``/x``, ``file:/x`` and
``file:///x`` are the same file (Java writes ``file:/...``, pyiceberg ``file:///...`` or plain
paths); a different scheme or authority is a different place. A location with a ``.`` or ``..``
segment (also percent-encoded), a NUL, or a relative path is refused outright. Containment is on
segment boundaries (``/t`` does not admit ``/t2/...``), checked both on the location as written
and percent-decoded, so a FileIO that decodes cannot be led elsewhere.

Local files (``file`` scheme, no authority, or a bare path) are also identified by what they
are: the location (as written and decoded) with every symbolic link resolved (``realpath``) must
lie under a root resolved the same way, so a link under the table's location that points at
another table's file (or anywhere else) is refused like the file's own location would be.
Object stores have no links: their locations are compared as written. A local file icegov
opens to verify a commit must be a regular file or a directory (``require_regular``): a named
pipe or a device under the table's location would hold the reading thread forever (opening a
FIFO waits for a writer), past every time budget; a directory fails to open at once and is
refused as unreadable, like a missing file.

A refused location is never opened, so the refusal says the same whether the file exists or not.
A root that is a whole local file system (``/``, also once resolved) admits nothing; a whole
bucket (``s3://b``) is a root like any other.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any
from urllib.parse import unquote

from pyiceberg.table.metadata import TableMetadata

from proxy.commits.intent import UnverifiableCommit
from proxy.locations import LOCATION_PROPERTIES

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(.*)$", re.DOTALL)
_SHOWN = 120


def shown_path(path: str) -> str:
    """A file path as an error message quotes it: ``repr``, cut after 120 characters."""
    return repr(path if len(path) <= _SHOWN else path[:_SHOWN] + "...")


@dataclass(frozen=True)
class Location:
    """A file location split for comparison: scheme, authority and path segments."""

    scheme: str
    authority: str
    segments: tuple[str, ...]

    def contains(self, other: Location) -> bool:
        """True if ``other`` is this location or lies under it (segment-wise)."""
        return ((self.scheme, self.authority) == (other.scheme, other.authority)
                and other.segments[:len(self.segments)] == self.segments)


def parse_location(text: str) -> tuple[Location, Location] | None:
    """``text`` as written and percent-decoded; None if it is not an acceptable location."""
    if not text or "\x00" in text:
        return None
    raw = _split(text)
    decoded = _split(unquote(text))
    if raw is None or decoded is None:
        return None
    return raw, decoded


def canonical_location(text: str) -> str:
    """One spelling per physical file: ``file:/x``, ``file:////x`` and ``/x`` all become
    ``file:///x``, percent-escapes decoded. Readers match position deletes to data files by the
    exact string, so two spellings of one file must be recognised as the same file. A text that
    is no acceptable location is returned unchanged (confinement refuses it anyway).

    A pure function of the text, remembered for the last 16Ki texts (an append to a table of
    N manifests spells each of them again; texts over 1 KiB are not remembered: at most ~32 MiB)."""
    return _canonical_remembered(text) if len(text) <= _REMEMBERED_TEXT else _canonical(text)


_REMEMBERED_TEXT = 1024


def _canonical(text: str) -> str:
    parsed = parse_location(text)
    if parsed is None:
        return text
    decoded = parsed[1]
    return f"{decoded.scheme}://{decoded.authority}/" + "/".join(decoded.segments)


_canonical_remembered = lru_cache(maxsize=16_384)(_canonical)


def _split(text: str) -> Location | None:
    match = _SCHEME.match(text)
    scheme, rest = ("file", text) if match is None else (match[1].lower(), match[2])
    authority = ""
    if rest.startswith("//"):
        authority, _, rest = rest[2:].partition("/")
        rest = "/" + rest
    if not rest.startswith("/") or (match is None and authority):
        return None  # relative, or a scheme-less "//host/..." that readers disagree on
    segments = tuple(s for s in rest.split("/") if s)
    if any(s in (".", "..") for s in segments):
        return None
    return Location(scheme, authority, segments)


@dataclass(frozen=True)
class TableLocations:
    """The roots a table's files must lie under."""

    roots: tuple[tuple[Location, Location], ...]

    def admits(self, path: str) -> bool:
        """True if ``path`` lies under one of the roots (as written and decoded) and, for a
        local file, also once symbolic links are resolved."""
        parsed = parse_location(path)
        if parsed is None:
            return False
        raw, decoded = parsed
        if not any(root_raw.contains(raw) and root_decoded.contains(decoded)
                   for root_raw, root_decoded in self.roots):
            return False
        local = [p for p in (raw, decoded) if _is_local(p)]
        return all(any(root.contains(real_location(p)) for root in self._real_roots)
                   for p in local)

    @cached_property
    def _real_roots(self) -> tuple[Location, ...]:
        """The local roots with symbolic links resolved (one resolving to ``/`` admits
        nothing)."""
        real = (real_location(r) for pair in self.roots for r in pair if _is_local(r))
        return tuple(r for r in real if r.segments)

    def require(self, path: str, what: str) -> None:
        """Refuse (400, without reading it) a ``what`` at ``path`` outside the table, or a
        local one that is not a regular file (``require_regular``)."""
        if not self.admits(path):
            raise UnverifiableCommit(
                f"cannot verify the commit: {what} {shown_path(path)} is not under the table's "
                "locations (location, write.data.path, write.metadata.path)")
        require_regular(path, what)


def require_regular(path: str, what: str) -> None:
    """Refuse (400) a local ``path`` that exists but is neither a regular file nor a directory
    once links are resolved (a FIFO, socket or device: opening one can block forever). Missing
    files, directories and object-store locations pass: reading them fails at once, with the
    message an unreadable file gets (so they look alike)."""
    parsed = parse_location(path)
    local = [p for p in parsed or () if _is_local(p)]
    for location in local:
        try:
            mode = os.stat("/" + "/".join(location.segments)).st_mode
        except (OSError, ValueError):
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise UnverifiableCommit(f"cannot verify the commit: {what} {shown_path(path)} is "
                                     "not a regular file")


def _is_local(location: Location) -> bool:
    return location.scheme == "file" and not location.authority


def real_location(location: Location) -> Location:
    """A local location with every symbolic link resolved (``os.path.realpath``; missing
    parts are kept as written)."""
    real = os.path.realpath("/" + "/".join(location.segments))
    return Location("file", "", tuple(s for s in real.split("/") if s))


def locations_from(texts: Iterable[Any]) -> TableLocations:
    """The roots named by ``texts`` (non-strings, empty and unacceptable ones are ignored)."""
    roots = [parse_location(t) for t in texts if isinstance(t, str)]
    return TableLocations(tuple(r for r in roots if r is not None and not _everything(r[0])))


def _everything(root: Location) -> bool:
    """A root of a whole file system (``/``, ``file:///``) is no table location; a bucket is."""
    return not root.segments and not root.authority


def table_locations(base: TableMetadata | None, body: Mapping[str, Any]) -> TableLocations:
    """The roots of the table a commit changes: from ``base``, or for a create from the body.

    For a create (``base`` None) the last ``set-location`` and the ``set-properties`` updates
    name them; a create that names no location has no roots, so it may reference no file.
    """
    if base is not None:
        return locations_from([base.location,
                               *(base.properties.get(p) for p in LOCATION_PROPERTIES)])
    location: Any = None
    properties: dict[str, Any] = {}
    updates = body.get("updates") if isinstance(body, Mapping) else None
    for update in updates if isinstance(updates, list) else []:
        if not isinstance(update, dict):
            continue
        if update.get("action") == "set-location":
            location = update.get("location")
        elif update.get("action") == "set-properties" and isinstance(update.get("updates"), dict):
            properties.update(update["updates"])
    return locations_from([location, *(properties.get(p) for p in LOCATION_PROPERTIES)])
