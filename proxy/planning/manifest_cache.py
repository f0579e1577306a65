"""Decoded manifests and manifest lists, kept in memory: both are immutable once written.

``ManifestCache`` holds the *live* entries of each manifest (DELETED entries dropped, sequence
numbers and spec id inherited from the manifest list, as Iceberg reads them), keyed by the
manifest's path and length, and the manifests of each manifest list, keyed by its path. It is
bounded by the number of entries held, thread-safe, and decodes a given manifest once even when
several threads ask for it at the same time.

Entries are read with the v3 entry schema, so deletion vectors keep ``referenced_data_file``,
``content_offset`` and ``content_size_in_bytes`` (pyiceberg's own reader drops them). The
``ManifestEntry`` and ``DataFile`` objects handed out are shared by every caller: treat them
as read-only (copy a ``DataFile`` before changing anything in it).
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import Future
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from pyiceberg.avro.file import AvroFile
from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    MANIFEST_ENTRY_SCHEMAS,
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    _inherit_from_manifest,
    read_manifest_list,
)

from proxy.commits.lru import SizedLru

V = TypeVar("V")

_LISTS_KEPT = 4096  # manifest lists are small; keep their decoded manifests for many snapshots
_FREEZE_MIN_OBJECTS = 200_000  # about 10,000 manifest entries
_MAX_PAUSE_SECONDS = 30.0  # overlapping plans still let the collector run this often


@dataclass(frozen=True, slots=True)
class CacheStats:
    """Counters of a cache: lookups answered from memory, lookups that had to read a file."""

    hits: int
    misses: int


class _CollectorPause:
    """Keeps Python's cyclic garbage collector off while any thread decodes manifests.

    Decoding allocates about twenty objects per entry, all acyclic and all kept: every burst of
    allocations would start collections that traverse every live object, which made decoding
    three times slower. Reference counting still frees everything meanwhile. When the last
    holder is done, the collector resumes (if it was on); if a holder asked for it and the
    pause allocated at least ``_FREEZE_MIN_OBJECTS`` objects, they are first moved out of the
    collector's sight for good (``gc.freeze``), so later collections do not traverse the cache
    again and again (measured: a cold 200,000-entry plan and its first use 2x faster, a warm
    plan 3x). The youngest generation (everything made during the pause) is collected first,
    so only what is still alive is frozen: the decoded cache, and whatever requests in flight
    still hold; ``ManifestCache(freeze_decoded=False)`` turns it off."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._resume = False
        self._freeze = False
        self._since = 0.0  # when the collector last ran or the pause began

    @contextmanager
    def held(self, freeze: bool = False) -> Iterator[None]:
        with self._lock:
            if self._holders == 0:
                self._resume = gc.isenabled()
                gc.disable()
                self._since = time.monotonic()
            elif self._resume and time.monotonic() - self._since > _MAX_PAUSE_SECONDS:
                # plans overlapping without end must not keep cyclic garbage forever
                gc.collect()
                self._since = time.monotonic()
            self._holders += 1
            self._freeze |= freeze
        try:
            yield
        finally:
            with self._lock:
                self._holders -= 1
                if self._holders == 0:
                    self._release()

    def _release(self) -> None:
        if self._freeze and gc.get_count()[0] >= _FREEZE_MIN_OBJECTS:
            gc.collect(0)  # what the pause made and dropped goes first: only the living freeze
            gc.freeze()
        self._freeze = False
        if self._resume:
            gc.enable()


_collector = _CollectorPause()


def read_live_entries(io: FileIO, manifest: ManifestFile) -> tuple[ManifestEntry, ...]:
    """The live entries of ``manifest`` as Iceberg reads them (no cache)."""
    with _collector.held(), AvroFile[ManifestEntry](
        io.new_input(manifest.manifest_path),
        MANIFEST_ENTRY_SCHEMAS[3],
        read_types={-1: ManifestEntry, 2: DataFile},
        read_enums={0: ManifestEntryStatus, 101: FileFormat, 134: DataFileContent},
    ) as reader:
        deleted = ManifestEntryStatus.DELETED
        return tuple(_inherit_from_manifest(entry, manifest)
                     for entry in reader if entry.status != deleted)


class ManifestCache:
    """Live manifest entries (at most ``max_entries`` in all) and manifest lists, in memory.

    ``freeze_decoded``: after a large decode, hide the new objects from the cyclic garbage
    collector for good (see ``collector_paused``; evicted entries are still freed, being
    acyclic)."""

    def __init__(self, max_entries: int, freeze_decoded: bool = True) -> None:
        self._freeze = freeze_decoded
        self._entries: SizedLru[tuple[str, int], tuple[ManifestEntry, ...]] = SizedLru(
            max_entries, len)
        self._lists: SizedLru[str, tuple[ManifestFile, ...]] = SizedLru(_LISTS_KEPT)
        self._lock = threading.Lock()
        self._loading: dict[Hashable, Future[Any]] = {}
        self._hits = 0
        self._misses = 0

    def collector_paused(self) -> AbstractContextManager[None]:
        """Keep the cyclic garbage collector off for the block (a whole plan: its decodes and
        the tasks built from them), process-wide and nestable; with ``freeze_decoded``, what a
        large block allocated is frozen when the last pause ends (``gc.freeze``)."""
        return _collector.held(self._freeze)

    @property
    def stats(self) -> CacheStats:
        """Hits and misses of manifest lookups so far (manifest lists are not counted)."""
        with self._lock:
            return CacheStats(self._hits, self._misses)

    def entries(self, io: FileIO, manifest: ManifestFile) -> tuple[ManifestEntry, ...]:
        """The live entries of ``manifest``, read from ``io`` only the first time."""
        key = (manifest.manifest_path, manifest.manifest_length)
        found = self._entries.get(key)
        with self._lock:
            if found is not None:
                self._hits += 1
                return found
            self._misses += 1
        return self._load(key, lambda: read_live_entries(io, manifest),
                          lambda value: self._entries.put(key, value))

    def manifests(self, io: FileIO, manifest_list: str) -> tuple[ManifestFile, ...]:
        """The manifests a manifest list names, read from ``io`` only the first time."""
        found = self._lists.get(manifest_list)
        if found is not None:
            return found
        return self._load(manifest_list,
                          lambda: tuple(read_manifest_list(io.new_input(manifest_list))),
                          lambda value: self._lists.put(manifest_list, value))

    def _load(self, key: Hashable, read: Callable[[], V], keep: Callable[[V], None]) -> V:
        """Read ``key`` once however many threads want it at the same time, then ``keep`` it."""
        with self._lock:
            pending = self._loading.get(key)
            owner = pending is None
            if pending is None:
                pending = self._loading[key] = Future()
        if not owner:
            return cast(V, pending.result())
        try:
            value = read()
            keep(value)
            pending.set_result(value)
            return value
        except BaseException as error:
            pending.set_exception(error)
            raise
        finally:
            with self._lock:
                del self._loading[key]
