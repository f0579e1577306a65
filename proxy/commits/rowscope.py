"""Which delete files apply to which data file, by the readers' own rules (used by ``rows``).

Two questions, answered in opposite directions of caution:

``applies`` — does every reader apply this live position delete file (or DV) to this data file?
Used to decide that a removed delete file's positions *stay deleted*, so when readers disagree
the answer is no. Java (``DeleteFileIndex``) and pyiceberg (``delete_file_index``) apply a
position delete file to a data file when

* its data sequence number is at least the data file's (Java refuses to read a DV that is not);
* it reaches the data file: Java indexes it by ``referenced_data_file`` (or, without one, by
  ``file_path`` bounds that are equal) and otherwise by (spec id, partition); pyiceberg only by
  equal ``file_path`` bounds, otherwise by (spec id, partition) — so it must be pinned to the
  file by equal bounds, or be in the data file's own spec and partition, and a
  ``referenced_data_file`` must name the data file;
* its ``file_path`` bounds (field 2147483546), where present, enclose the data file's location
  (both readers skip it otherwise; the bounds are compared in code-point and UTF-16 order);
* and, for Java, no DV names the data file: with one, Java applies only the DV (``rows``).

The data file's location is its location *exactly as listed*: readers match a delete file's
``referenced_data_file``, bounds and ``file_path`` values against that string, so a delete that
spells the file another way (``file:/x`` for ``file:///x``) does not delete its rows, even though
``confine.canonical_location`` makes both one file for identity.

``may_apply`` — could any reader apply this delete file (live before the snapshot) to this data
file? Used to compute a removed data file's *live* rows, so it answers yes whenever a reader
might: over-applying only makes the copy-on-write comparison stricter. Locations are compared
canonically here, for the same reason.
"""

from __future__ import annotations

from pyiceberg.table.metadata import TableMetadata

from proxy.commits.confine import canonical_location
from proxy.commits.rowfiles import PATH_FIELD_ID, RowFile
from proxy.commits.rowstats import partition_key


def applies(delete: RowFile, data: RowFile) -> bool:
    """True if every reader applies position delete file (or DV) ``delete`` to ``data``."""
    if not delete.positional or delete.sequence < data.sequence:
        return False
    if delete.referenced_field is not None and delete.referenced_field != data.path:
        return False
    if delete.is_vector and delete.referenced_field is None:
        return False
    bounds = path_bounds(delete)
    if bounds is None or not _within(data.path, *bounds):
        return False
    lower, upper = bounds
    pinned = lower is not None and lower == upper
    return pinned or same_partition(delete, data)


def may_apply(delete: RowFile, data: RowFile, metadata: TableMetadata) -> bool:
    """True if some reader could apply ``delete`` (position or equality) to ``data``."""
    if delete.positional:
        named = delete.referenced_field or delete.referenced
        return (named is not None and canonical_location(named) == canonical_location(data.path)) \
            or same_partition(delete, data) or unpartitioned(delete, metadata)
    return delete.equality and delete.sequence > data.sequence \
        and (unpartitioned(delete, metadata) or same_partition(delete, data))


def same_partition(one: RowFile, other: RowFile) -> bool:
    """Same spec id and the same partition tuple (floats by bits, as Java compares them)."""
    return one.spec_id == other.spec_id \
        and partition_key(one.partition) == partition_key(other.partition)


def unpartitioned(file: RowFile, metadata: TableMetadata) -> bool:
    """``file``'s spec is a known, unpartitioned one (its equality deletes are global)."""
    spec = metadata.specs().get(file.spec_id)
    return spec is not None and spec.is_unpartitioned()


def path_bounds(delete: RowFile) -> tuple[str | None, str | None] | None:
    """The ``file_path`` lower and upper bounds a delete file claims (None: not decodable)."""
    found: list[str | None] = []
    for bounds in (delete.stats.lower, delete.stats.upper):
        raw = bounds.get(PATH_FIELD_ID)
        if raw is not None and not isinstance(raw, bytes):
            return None
        try:
            found.append(None if raw is None else raw.decode("utf-8"))
        except UnicodeDecodeError:
            return None
    return found[0], found[1]


def _within(path: str, lower: str | None, upper: str | None) -> bool:
    """``lower <= path <= upper`` (a missing bound does not limit), in both orders readers use."""
    def utf16(text: str) -> bytes:
        return text.encode("utf-16-be", errors="surrogatepass")
    below = lower is not None and (path < lower or utf16(path) < utf16(lower))
    above = upper is not None and (path > upper or utf16(path) > utf16(upper))
    return not (below or above)
