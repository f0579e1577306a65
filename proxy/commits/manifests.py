"""Reading manifest lists and manifests, to see what a snapshot really contains.

``ManifestReader`` reads for one commit: through the table's FileIO, within the commit's
``CommitLimits`` (manifests per list, list records and entries per commit) and, for what the
commit introduces, within the table's locations (``confine``): the new snapshot's manifest list
is checked before it is opened. Manifests are read with the v3 schemas (a superset of v1/v2), so
deletion vectors keep their ``content_offset``, file-scoped deletes their ``referenced_data_file``
and manifest lists their ``first_row_id``. Manifest lists are read afresh (pyiceberg's
process-wide manifest cache is bypassed: a list is a claim to check, and a cached record from
another list must not stand in for it). Within one commit each list is parsed at most once, and
each list the commit reads counts its records once against ``limits.max_list_records``, whether
read or served from the cache. Any read failure is an ``UnverifiableCommit`` whose message is the
same whatever the cause (missing, unreadable, not Avro): no OS error text or file content reaches
the client.

``live_keys`` (which files a manifest holds live) is cached per process for committed manifests
only: those named by a snapshot of the table (a list read with ``manifests`` that no new
snapshot of the commit claims), keyed by path, length, content and sequence number (which live
entries inherit). A committed manifest is immutable; a claimed one is the writer's and may
change between requests, so it is always read. ``min_live_sequence`` (the lowest data sequence
number a manifest holds live, from its entries) is cached with the keys. Every process-wide
entry is also keyed by the reader's ``scope`` (the table's uuid and location; no scope, no
sharing), so one table's reading is never served another's file, and a committed list comes
from the cache only where it would be read anyway. A new snapshot's list enters the cache once
its commit landed as verified (``remember_verified``), with the manifests the verification
read: the next commit's parent is the list the previous one was judged on, not read again.
A cache hit still counts its entries against ``limits.max_entries``: whether a commit is too
large does not depend on what was read before.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar

from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    MANIFEST_ENTRY_SCHEMAS,
    MANIFEST_LIST_FILE_SCHEMAS,
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    PartitionFieldSummary,
)
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Record

from proxy.commits.avro_readers import open_avro
from proxy.commits.confine import TableLocations, canonical_location, require_regular
from proxy.commits.intent import UnverifiableCommit
from proxy.commits.limits import CommitLimits
from proxy.commits.lru import SizedLru

T = TypeVar("T")
FileKey = tuple[bool, str, int | None]  # ``ContentFile.key``


def file_key(content: DataFileContent, path: str, offset: int | None = None) -> FileKey:
    """A content file's identity across manifests: data-or-delete, physical location (one
    spelling per file, ``confine.canonical_location``: ``file:/x`` and ``file:///x`` are one
    file) and (for deletion vectors) offset."""
    return (content == DataFileContent.DATA, canonical_location(path), offset)
_CacheKey = tuple[str, int, ManifestContent, int]
CacheScope = tuple[str, str]
"""A table's uuid and location: the process-wide caches are shared only within one."""


def cache_scope(metadata: TableMetadata | None) -> CacheScope | None:
    """Whose cached manifests reading ``metadata``'s table may use: its own (uuid and
    location); a create (no metadata) shares none."""
    return None if metadata is None else (str(metadata.table_uuid), metadata.location)

_DELETE_FILE_PATH_FIELD = 2147483546  # ``file_path`` of a position delete file's rows
_FIRST_ROW_ID = 16  # positions in the v3 data_file struct
_REFERENCED_DATA_FILE = 17
_CONTENT_OFFSET = 18
_NONE = type(None)
# position -> accepted types, for the fields classification computes with
_LIST_CONTENT = 3
_LIST_FIELDS: dict[int, tuple[type, ...]] = {
    0: (str,), 1: (int,), 2: (int,), 3: (ManifestContent,), 4: (int,), 5: (int,), 6: (int,),
    **{count: (int, _NONE) for count in range(7, 13)}, 15: (int, _NONE)}  # 15: first_row_id
_ENTRY_FIELDS: dict[int, tuple[type, ...]] = {
    0: (ManifestEntryStatus,), 1: (int, _NONE), 2: (int, _NONE), 3: (int, _NONE),
    4: (DataFile,)}
_FILE_FIELDS: dict[int, tuple[type, ...]] = {
    0: (DataFileContent,), 1: (str,), 4: (int,), _REFERENCED_DATA_FILE: (str, _NONE),
    _CONTENT_OFFSET: (int, _NONE)}


@dataclass(frozen=True)
class ContentFile:
    """One data or delete file as a manifest entry lists it (DVs are told apart by offset)."""

    path: str
    content: DataFileContent
    records: int
    offset: int | None = None
    sequence_number: int | None = None
    referenced_data_file: str | None = None
    first_row_id: int | None = None  # format 3: its own (null: inherited, as writers leave it)
    data_file: DataFile | None = field(default=None, compare=False, repr=False)  # as listed

    @cached_property
    def key(self) -> FileKey:
        """Identity across manifests (``file_key``)."""
        return file_key(self.content, self.path, self.offset)

    @property
    def is_data(self) -> bool:
        return self.content == DataFileContent.DATA


@dataclass(frozen=True)
class Entry:
    """A manifest entry: its status, the snapshot it names (inherited if null) and its file.

    ``record`` is every field of the entry's data file in canonical, comparable form (v3
    ``data_file`` order); ``spec_id`` is its manifest's partition spec.
    """

    status: ManifestEntryStatus
    snapshot_id: int | None
    file: ContentFile
    file_sequence_number: int | None = None
    spec_id: int | None = None
    record: tuple[Any, ...] = ()

    @property
    def live(self) -> bool:
        return self.status != ManifestEntryStatus.DELETED


@dataclass
class ManifestReader:
    """Reads the manifests one commit's verification needs, within limits and locations."""

    io: FileIO
    locations: TableLocations
    limits: CommitLimits = field(default_factory=CommitLimits)
    scope: CacheScope | None = None  # whose process-wide cache entries it may use
    entries_read: int = 0
    manifests_opened: int = 0
    list_records_read: int = 0
    _claimed_lists: set[str] = field(default_factory=set, init=False, repr=False)
    _lists_here: dict[str, tuple[ManifestFile, ...]] = field(default_factory=dict, init=False,
                                                             repr=False)
    _committed: set[_CacheKey] = field(default_factory=set, init=False, repr=False)
    _held_here: dict[_CacheKey, _LiveKeys] = field(default_factory=dict, init=False, repr=False)

    def claim(self, manifest_lists: Iterable[str]) -> None:
        """Mark the lists the commit's new snapshots name: never cached, always read afresh."""
        self._claimed_lists.update(manifest_lists)

    def remember_verified(self) -> None:
        """The commit landed as verified: the lists its new snapshots claim are committed now,
        with the manifests this reader read from them (kept for the next commit's parent)."""
        if self.scope is None:
            return
        for path in self._claimed_lists & self._lists_here.keys():
            _COMMITTED_LISTS.put((self.scope, path), self._lists_here[path])

    def claimed_manifests(self, manifest_list: str) -> tuple[ManifestFile, ...]:
        """The manifests a new snapshot's list names (the list must be under the table)."""
        self.locations.require(manifest_list, "manifest list")
        self._claimed_lists.add(manifest_list)
        return self._listed(manifest_list, committed=False)

    def manifests(self, manifest_list: str) -> tuple[ManifestFile, ...]:
        """The manifests ``manifest_list`` names, at most ``limits.max_manifests`` of them.

        Unless a new snapshot claims the list, they are the table's committed manifests.
        """
        if manifest_list in self._claimed_lists:
            return self._listed(manifest_list, committed=False)
        manifests = self._listed(manifest_list, committed=True)
        self._committed.update(_cache_key(m) for m in manifests)
        return manifests

    def entries(self, manifest: ManifestFile) -> tuple[Entry, ...]:
        """Every entry of ``manifest`` (deleted ones included), inherited values filled in."""
        raw = _guarded(f"manifest {manifest.manifest_path!r}", lambda: self._read_raw(manifest))
        return tuple(_entry(manifest, e) for e in raw)

    def live_keys(self, manifest: ManifestFile) -> frozenset[FileKey]:
        """Keys of the files ``manifest`` holds live (cached if it is committed)."""
        return self._held(manifest).keys

    def min_live_sequence(self, manifest: ManifestFile) -> int | None:
        """The lowest data sequence number of the files ``manifest`` holds live, from its
        entries (None: none live); never taken from the manifest-list record, which the writer
        of any earlier commit chose (cached like ``live_keys``)."""
        return self._held(manifest).min_sequence

    def _held(self, manifest: ManifestFile) -> _LiveKeys:
        """What ``manifest`` holds live: read (or taken from the cache) and counted once per
        commit, however often asked."""
        key = _cache_key(manifest)
        held = self._held_here.get(key)
        if held is None:
            held = self._held_here[key] = self._held_once(manifest, key)
        return held

    def _held_once(self, manifest: ManifestFile, key: _CacheKey) -> _LiveKeys:
        shared = None if self.scope is None or key not in self._committed else (self.scope, key)
        cached = None if shared is None else _LIVE_KEYS.get(shared)
        if cached is not None:
            self._count(cached.entries)
            return cached
        entries = self.entries(manifest)
        live = [e for e in entries if e.live]
        held = _LiveKeys(len(entries), frozenset(e.file.key for e in live),
                         min((e.file.sequence_number or 0 for e in live), default=None))
        if shared is not None:
            _LIVE_KEYS.put(shared, held)
        return held

    def _listed(self, manifest_list: str, committed: bool) -> tuple[ManifestFile, ...]:
        """A list's manifests, parsed at most once per commit (a committed list may come from
        the process-wide cache) and counted once against ``limits.max_list_records``."""
        manifests = self._lists_here.get(manifest_list)
        if manifests is not None:
            return manifests
        shared = (self.scope, manifest_list) if committed and self.scope is not None else None
        manifests = None if shared is None else _COMMITTED_LISTS.get(shared)
        if manifests is None:
            manifests = _guarded(f"manifest list {manifest_list!r}",
                                 lambda: self._read_list(manifest_list))
            if shared is not None:
                _COMMITTED_LISTS.put(shared, manifests)
        self._count_list_records(len(manifests))
        self._lists_here[manifest_list] = manifests
        return manifests

    def _count_list_records(self, records: int) -> None:
        self._check_list_records(records)
        self.list_records_read += records

    def _check_list_records(self, records: int) -> None:
        limit = self.limits.max_list_records
        if self.list_records_read + records > limit:
            raise CommitTooLarge(f"verifying the commit would read more than {limit} manifest "
                                 "list records")

    def _count(self, entries: int) -> None:
        limit = self.limits.max_entries
        if self.entries_read + entries > limit:
            raise CommitTooLarge(f"verifying the commit would read more than {limit} manifest "
                                 "entries")
        self.entries_read += entries

    def _read_list(self, manifest_list: str) -> tuple[ManifestFile, ...]:
        limit = self.limits.max_manifests
        manifests: list[ManifestFile] = []
        require_regular(manifest_list, "manifest list")  # a FIFO would hold the thread forever
        with open_avro(self.io, manifest_list, "manifest list", MANIFEST_LIST_FILE_SCHEMAS[3],
                       {-1: ManifestFile, 508: PartitionFieldSummary},
                       {517: ManifestContent}) as reader:
            for manifest in reader:
                if len(manifests) == limit:
                    raise CommitTooLarge(f"a manifest list names more than {limit} manifests")
                self._check_list_records(len(manifests) + 1)  # stop reading once beyond
                _default_content(manifest)
                _check_fields(manifest, _LIST_FIELDS, "manifest list record")
                manifests.append(manifest)
        return tuple(manifests)

    def _read_raw(self, manifest: ManifestFile) -> list[ManifestEntry]:
        limit = self.limits.max_manifests_read
        if self.manifests_opened >= limit:
            raise CommitTooLarge(f"verifying the commit would open more than {limit} manifests")
        self.manifests_opened += 1
        entries: list[ManifestEntry] = []
        require_regular(manifest.manifest_path, "manifest file")
        with open_avro(self.io, manifest.manifest_path, "manifest", MANIFEST_ENTRY_SCHEMAS[3],
                       {-1: ManifestEntry, 2: DataFile},
                       {0: ManifestEntryStatus, 101: FileFormat, 134: DataFileContent}) as reader:
            for entry in reader:
                self._count(1)
                entries.append(entry)
        return entries


class CommitTooLarge(UnverifiableCommit):
    """Verifying the commit would exceed a ``CommitLimits`` bound (400)."""


@dataclass(frozen=True)
class _LiveKeys:
    """What a manifest holds live, and how many entries reading it costs."""

    entries: int
    keys: frozenset[FileKey]
    min_sequence: int | None = None  # lowest data sequence number of a live file


_LIVE_KEYS: SizedLru[tuple[CacheScope, _CacheKey], _LiveKeys] = SizedLru(
    200_000, lambda held: len(held.keys))
"""What committed manifests hold live, at most 200,000 file keys in all."""

_COMMITTED_LISTS: SizedLru[tuple[CacheScope, str], tuple[ManifestFile, ...]] = SizedLru(
    200_000, lambda manifests: max(len(manifests), 1))
"""The manifests of committed manifest lists, at most 200,000 list records in all; a list a
commit claims is never served from here."""


def _cache_key(manifest: ManifestFile) -> _CacheKey:
    return (manifest.manifest_path, manifest.manifest_length, manifest.content,
            manifest.sequence_number)


def _guarded(what: str, read: Callable[[], T]) -> T:
    try:
        return read()
    except UnverifiableCommit:
        raise
    except Exception as exc:  # any I/O or decoding failure means: not verifiable
        raise UnverifiableCommit(
            f"cannot verify the commit: {what} could not be read as an Iceberg manifest "
            "file") from exc


def _entry(manifest: ManifestFile, raw: ManifestEntry) -> Entry:
    data_file = raw.data_file
    _check_fields(raw, _ENTRY_FIELDS, "manifest entry")
    if type(data_file[0]) is int and data_file[0] == 0:  # v1: no content field, data files
        data_file[0] = DataFileContent.DATA
    _check_fields(data_file, _FILE_FIELDS, "manifest entry")
    _check_content(manifest, data_file)
    data_file.spec_id = manifest.partition_spec_id  # the spec its manifest writes it under
    inherits = raw.status == ManifestEntryStatus.ADDED or manifest.sequence_number == 0
    sequence, file_sequence = raw.sequence_number, raw.file_sequence_number
    if inherits:
        sequence = manifest.sequence_number if sequence is None else sequence
        file_sequence = manifest.sequence_number if file_sequence is None else file_sequence
    file = ContentFile(
        path=data_file.file_path,
        content=DataFileContent(data_file.content),
        records=data_file.record_count,
        offset=data_file[_CONTENT_OFFSET],
        sequence_number=sequence,
        referenced_data_file=_referenced_data_file(data_file),
        first_row_id=data_file[_FIRST_ROW_ID],
        data_file=data_file,
    )
    snapshot_id = raw.snapshot_id if raw.snapshot_id is not None else manifest.added_snapshot_id
    return Entry(ManifestEntryStatus(raw.status), snapshot_id, file, file_sequence,
                 manifest.partition_spec_id, canonical(data_file))


def canonical(value: Any) -> Any:
    """``value`` (a record, map, list or scalar read from Avro) as a comparable, hashable form.

    Maps become sorted item tuples, records and lists tuples, and NaN a marker equal to itself.
    """
    if isinstance(value, Record):
        return tuple(canonical(value[i]) for i in range(len(value)))
    if isinstance(value, Mapping):
        return tuple(sorted((k, canonical(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(canonical(v) for v in value)
    if isinstance(value, float) and math.isnan(value):
        return ("NaN",)
    return value


def _default_content(manifest: ManifestFile) -> None:
    """A v1 manifest list has no ``content``: its manifests hold data (the field's default)."""
    content = manifest[_LIST_CONTENT]
    if type(content) is int and content in (0, 1):
        manifest[_LIST_CONTENT] = ManifestContent(content)


def _check_fields(record: Record, fields: Mapping[int, tuple[type, ...]], what: str) -> None:
    """Fields read from a file must have the types the classification relies on."""
    for position, types in fields.items():
        value = record[position]
        if isinstance(value, bool) or not isinstance(value, types):
            raise UnverifiableCommit(f"cannot verify the commit: a {what} has a malformed field")


def _check_content(manifest: ManifestFile, data_file: DataFile) -> None:
    is_data = data_file.content == DataFileContent.DATA
    if is_data != (manifest.content == ManifestContent.DATA):
        raise UnverifiableCommit(
            f"cannot verify the commit: manifest {manifest.manifest_path} of content "
            f"{manifest.content.name} lists {data_file.file_path} of content "
            f"{DataFileContent(data_file.content).name}")


def _referenced_data_file(data_file: DataFile) -> str | None:
    """The one data file a delete file applies to, if it is file-scoped (or a DV)."""
    if data_file.content == DataFileContent.DATA:
        return None
    referenced: str | None = data_file[_REFERENCED_DATA_FILE]
    if referenced is not None:
        return referenced
    lower = (data_file.lower_bounds or {}).get(_DELETE_FILE_PATH_FIELD)
    upper = (data_file.upper_bounds or {}).get(_DELETE_FILE_PATH_FIELD)
    if lower is None or lower != upper:
        return None
    return lower.decode("utf-8", errors="replace")
