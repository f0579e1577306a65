"""Keeping every indexed table's bloom filters current, off the commit path, and serving them
to planning.

``IndexService.want`` (called when icegov lands a commit, ``landed``, and whenever a table is
planned) queues a *sync* of the table in a background thread: for every live data file of the
current snapshot and every indexed column (``icegov.index.bloom-filter-columns``) without a
filter in memory, the filter's Puffin file is read if it exists (a restart, another replica:
``store``), else built — in icegov's threads, or on PySpark when the files to read add up to
more than ``spark_above_bytes``. Filters of files no longer live are forgotten. A sync of a
table whose property was dropped forgets its filters and removes their files.

``pruner`` gives planning an ``IndexPruner`` over the filters in memory now: a file without one
is never pruned. Columns hidden from the principal are absent from the schema the scan binds to,
and masked ones are left out by the caller (``excluded``), so an index is never an oracle on
values the principal cannot read. ``version`` changes whenever the filters in memory do (plan
caches key on it).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import groupby

from pyiceberg.io import FileIO, load_file_io
from pyiceberg.manifest import DataFile
from pyiceberg.table.metadata import TableMetadata

from proxy.indexes.build import BuildJob, BuiltFilter, ColumnJob, IndexBuildFailed, build_file
from proxy.indexes.files import Wanted, indexed_columns, live_data_files, wanted_filters
from proxy.indexes.settings import IndexSettings
from proxy.indexes.store import FilterKey, filter_path, index_dir, load_filter, remove_all
from proxy.planning.bloom import BloomFilter
from proxy.planning.index_pruning import IndexPruner
from proxy.planning.manifest_cache import ManifestCache
from proxy.planning.scope import ScanSpec, scanned_schema

_log = logging.getLogger(__name__)


@dataclass
class _Table:
    """What is known of one table's filters, and the sync it wants."""

    filters: dict[tuple[str, int], tuple[FilterKey, BloomFilter]] = field(default_factory=dict)
    version: int = 0
    synced: tuple[object, ...] | None = None
    wanted: tuple[TableMetadata, FileIO] | None = None
    running: bool = False
    failed: set[FilterKey] = field(default_factory=set)
    io: FileIO | None = None


@dataclass
class IndexStats:
    """Filters built, read back from storage (reused), failed; syncs run; files removed."""

    built: int = 0
    reused: int = 0
    failed: int = 0
    syncs: int = 0
    removed: int = 0


class IndexService:
    """The bloom-filter indexes of every table in use."""

    def __init__(self, settings: IndexSettings, manifests: ManifestCache,
                 file_io: Mapping[str, str]) -> None:
        self._settings = settings
        self._manifests = manifests
        self._file_io = dict(file_io)
        self._tables: dict[str, _Table] = {}
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._sync_pool = ThreadPoolExecutor(1, thread_name_prefix="icegov-index-sync")
        self._build_pool = ThreadPoolExecutor(settings.threads,
                                              thread_name_prefix="icegov-index-build")
        self.stats = IndexStats()

    def close(self) -> None:
        self._sync_pool.shutdown(wait=False, cancel_futures=True)
        self._build_pool.shutdown(wait=False, cancel_futures=True)

    def landed(self, metadata: TableMetadata) -> None:
        """icegov landed a commit whose result is ``metadata``: bring its filters up to date."""
        uuid = str(metadata.table_uuid)
        with self._lock:
            known = self._tables.get(uuid)
            io = known.io if known is not None else None
        if known is None and not indexed_columns(metadata):
            return
        self.want(metadata, io or load_file_io(self._file_io, metadata.location))

    def want(self, metadata: TableMetadata, io: FileIO) -> None:
        """Queue a sync of the table as ``metadata`` has it (nothing when it is synced)."""
        if not self._settings.enabled:
            return
        uuid = str(metadata.table_uuid)
        with self._lock:
            table = self._tables.get(uuid)
            if table is None:
                if not indexed_columns(metadata):
                    return
                table = self._tables[uuid] = _Table()
            table.io = io
            if table.synced == _sync_key(metadata) and table.wanted is None:
                return
            table.wanted = (metadata, io)
            if table.running:
                return
            table.running = True
        try:
            self._sync_pool.submit(self._drain, uuid, table)
        except RuntimeError:  # closed: icegov is stopping
            with self._lock:
                table.running = False

    def version(self, metadata: TableMetadata) -> int:
        """A number that changes whenever the table's filters in memory change."""
        table = self._tables.get(str(metadata.table_uuid))
        return -1 if table is None else table.version

    def pruner(self, metadata: TableMetadata, io: FileIO, spec: ScanSpec,
               excluded: frozenset[str], *, sync: bool = True) -> IndexPruner | None:
        """The index pruner of ``spec`` (None: no index applies); with ``sync``, queues a sync
        when the table's filters are not current (never for governed metadata, whose files
        are not the table's: only a governed file at a base file's path finds its filter).
        ``excluded``: columns whose index must not be used (masked ones)."""
        columns = indexed_columns(metadata) if self._settings.enabled else {}
        if not columns:
            return None
        if sync:
            self.want(metadata, io)
        table = self._tables.get(str(metadata.table_uuid))
        if table is None or not table.filters:
            return None
        usable = frozenset(i for i, (name, _) in columns.items() if name not in excluded)
        filters = table.filters

        def lookup(data_file: DataFile, field_id: int, kind: str) -> BloomFilter | None:
            found = filters.get((data_file.file_path, field_id))
            if found is None:
                return None
            key, bloom = found
            if key.data_size != data_file.file_size_in_bytes or key.family != kind:
                return None
            return bloom

        return IndexPruner.for_filter(scanned_schema(metadata, spec), spec.filter,
                                      spec.case_sensitive, usable, lookup)

    def wait_idle(self, timeout: float) -> bool:
        """Until no sync runs or is queued (tests, benchmarks); False on timeout."""
        with self._idle:
            return self._idle.wait_for(
                lambda: not any(t.running for t in self._tables.values()), timeout)

    def _drain(self, uuid: str, table: _Table) -> None:
        while True:
            with self._lock:
                wanted = table.wanted
                table.wanted = None
                if wanted is None:
                    table.running = False
                    self._idle.notify_all()
                    return
            try:
                self._sync(uuid, table, *wanted)
            except Exception:  # a failed sync leaves files unindexed, never wrong
                _log.exception("index sync failed")

    def _sync(self, uuid: str, table: _Table, metadata: TableMetadata, io: FileIO) -> None:
        self.stats.syncs += 1
        columns = indexed_columns(metadata)
        if not columns:
            with self._lock:
                self._tables.pop(uuid, None)
                table.version += 1
            self.stats.removed += remove_all(io, metadata)
            return
        live = live_data_files(metadata, io, self._manifests)
        wanted = wanted_filters(live, columns)
        missing = [w for w in wanted if (w.key.data_path, w.key.field_id) not in table.filters
                   and w.key not in table.failed]
        directory = index_dir(metadata)
        found = list(self._build_pool.map(
            lambda w: load_filter(io, filter_path(directory, w.key), w.key,
                                  self._settings.key_bytes()), missing))
        kept = {(w.key.data_path, w.key.field_id): table.filters[(w.key.data_path,
                                                                  w.key.field_id)]
                for w in wanted if (w.key.data_path, w.key.field_id) in table.filters}
        for w, bloom in zip(missing, found, strict=True):
            if bloom is not None:
                kept[(w.key.data_path, w.key.field_id)] = (w.key, bloom)
                self.stats.reused += 1
        table.filters = kept
        to_build = [w for w, bloom in zip(missing, found, strict=True) if bloom is None]
        for built in self._build(to_build, metadata, io, directory, table):
            kept[(built.key.data_path, built.key.field_id)] = (built.key, built.bloom)
        with self._lock:
            table.filters = dict(kept)
            table.version += 1
            table.synced = _sync_key(metadata)

    def _build(self, wanted: list[Wanted], metadata: TableMetadata, io: FileIO,
               directory: str, table: _Table) -> list[BuiltFilter]:
        jobs = _jobs(wanted, metadata, directory, self._settings, io)
        if not jobs:
            return []
        size = sum(w.data_file.file_size_in_bytes for w in wanted)
        if size > self._settings.spark_above_bytes:
            from proxy.indexes.spark_build import build_on_spark
            outcomes = build_on_spark(jobs, self._settings.spark_master)
        else:
            outcomes = list(self._build_pool.map(_built_or_none, jobs))
        built: list[BuiltFilter] = []
        for job, outcome in zip(jobs, outcomes, strict=True):
            if outcome is None:
                table.failed.update(c.key for c in job.columns)
                self.stats.failed += len(job.columns)
            else:
                built.extend(outcome)
                self.stats.built += len(outcome)
        return built


def _built_or_none(job: BuildJob) -> list[BuiltFilter] | None:
    try:
        return build_file(job)
    except IndexBuildFailed as exc:
        _log.warning("index build skipped: %s", exc)
        return None
    except Exception:
        _log.exception("index build of %s failed", job.data_path)
        return None


def _jobs(wanted: list[Wanted], metadata: TableMetadata, directory: str,
          settings: IndexSettings, io: FileIO) -> list[BuildJob]:
    """One job per data file (all its missing columns), files too large to index left out."""
    snapshot = metadata.current_snapshot()
    snapshot_id = snapshot.snapshot_id if snapshot is not None else -1
    sequence = snapshot.sequence_number if snapshot is not None else 0
    jobs = []
    ordered = sorted(wanted, key=lambda w: w.key.data_path)
    for path, group in groupby(ordered, key=lambda w: w.key.data_path):
        items = list(group)
        data_file = items[0].data_file
        if data_file.file_size_in_bytes > settings.max_file_bytes:
            continue
        jobs.append(BuildJob(
            path, str(data_file.file_format.value),
            tuple(ColumnJob(w.key, filter_path(directory, w.key)) for w in items),
            tuple(sorted(io.properties.items())), settings.fpp, snapshot_id,
            sequence or 0, settings.key_bytes()))
    return jobs


def _sync_key(metadata: TableMetadata) -> tuple[object, ...]:
    return (metadata.current_snapshot_id, tuple(sorted(indexed_columns(metadata).items())),
            index_dir(metadata))
