"""Serving governed snapshots: builds in the background, answers within a freshness bound.

``GovernedSnapshots.govern`` turns a restricted principal's table answer (a LoadTableResult or a
CommitTableResponse, its metadata already without denied columns) into the governed answer. One
``_Track`` per table and view holds what is built and runs one build at a time, in a worker
thread: the base's current snapshot first, then the others newest first (time travel). The
answer waits for the current one up to ``wait_seconds``; past that it is served the newest
complete governed snapshot on the base's main branch, and says how stale it is (properties, the
audit record, a metric) — never base files. With nothing complete to serve: 503 with
Retry-After. ``landed`` starts the build of a new current snapshot as soon as icegov lands a
commit, for every view of that table in use.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from pyiceberg.io import FileIO
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

from proxy.errors import Forbidden, NotReady
from proxy.governed.collect import Collector, Uses
from proxy.governed.copies import CopiedFile, CopyFailed, CopyJob, copy_governed
from proxy.governed.layout import TableTree, content_key, default_root, outside
from proxy.governed.masks import MaskUnsupported
from proxy.governed.metadata import Freshness, governed_metadata, newest_built
from proxy.governed.settings import GovernedSettings
from proxy.governed.snapshots import (
    BuildInputs,
    GovernedBuildFailed,
    GovernedSnapshot,
    SnapshotBuilder,
)
from proxy.governed.views import GovernedView, governed_view
from proxy.governed.writes import ungoverned
from proxy.planning.manifest_cache import ManifestCache
from proxy.restrictions import ReadView

Json = dict[str, Any]
_log = logging.getLogger(__name__)
RETRY_AFTER_SECONDS = 5
VIEWS_KEPT = 1024
FAILED_BUILD_RETRY_SECONDS = 30.0
"""A failed build is tried again by the first answer that wants it after this long."""
_COPY_FAILED = "a governed copy of a data file failed (the operator's log names it)"


@dataclass
class _Track:
    """What is built of one table under one view, and the build under way."""

    view: GovernedView
    inputs: BuildInputs
    built: dict[int, GovernedSnapshot] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)
    failed_at: dict[int, float] = field(default_factory=dict)
    wanted: list[Snapshot] = field(default_factory=list)
    task: asyncio.Task[None] | None = None
    progress: asyncio.Event = field(default_factory=asyncio.Event)
    used: float = field(default_factory=time.monotonic)
    answered: tuple[tuple[int, int | None, int], GovernedAnswer] | None = None


@dataclass(frozen=True)
class GovernedAnswer:
    """A governed metadata document and what the audit record says of it."""

    metadata: Json
    metadata_location: str
    freshness: Freshness
    digest: str
    tree_prefix: str


class GovernedSnapshots:
    """Governed snapshots of every table and view in use, built and served."""

    def __init__(self, settings: GovernedSettings, manifests: ManifestCache,
                 warehouse: str | None,
                 observe: Callable[[float], None] | None = None) -> None:
        """``observe``: told the staleness of every governed answer (a metric). The FileIO
        settings of a build are the answer's (``govern``'s ``io_properties``)."""
        self._observe = observe
        self._settings = settings
        self._manifests = manifests
        self._warehouse = warehouse
        self._tracks: dict[tuple[str, str], _Track] = {}
        self._views: dict[tuple[object, ...], GovernedView] = {}
        self._copies = ThreadPoolExecutor(settings.threads, thread_name_prefix="governed")
        self.collector = Collector(settings.retain_unused_seconds, manifests)
        self.bytes_read = 0
        """Bytes of base data and delete files every build so far gave its copies to read."""
        self.bytes_written = 0
        """Bytes of governed data files every build so far wrote (or found written)."""

    @property
    def in_use(self) -> bool:
        """True when some table's governed snapshots are being served."""
        return bool(self._tracks)

    def close(self) -> None:
        for track in self._tracks.values():
            if track.task is not None:
                track.task.cancel()
        self._copies.shutdown(wait=False, cancel_futures=True)
        self.collector.close()

    async def govern(self, base: Json, view: ReadView, metadata: TableMetadata,
                     io: FileIO, io_properties: Mapping[str, str]) -> GovernedAnswer:
        """The governed counterpart of ``base`` (TableMetadata JSON, denied columns gone) for
        ``view`` on the table ``metadata`` describes."""
        gview = self._governed_view(view, metadata)
        track = self._track(gview, metadata, io, io_properties)
        current = metadata.current_snapshot()
        self._want(track, metadata, current)
        if current is not None:
            await self._wait_for(track, [current.snapshot_id,
                                         *(s.snapshot_id for s in metadata.snapshots)])
        served = newest_built(None if current is None else current.snapshot_id,
                              {s.snapshot_id: s.parent_snapshot_id for s in metadata.snapshots},
                              track.built)
        if current is not None and served is None:
            reason = track.failed.get(current.snapshot_id)
            raise NotReady(
                "the governed snapshot of this table is not built yet" if reason is None
                else f"the governed snapshot of this table cannot be built: {reason}",
                retry_after=RETRY_AFTER_SECONDS)
        freshness = _freshness(metadata, served)
        if self._observe is not None:
            self._observe(freshness.stale_seconds)
        key = (metadata.last_updated_ms, served, len(track.built))
        if freshness.current and track.answered is not None and track.answered[0] == key:
            return track.answered[1]  # the same base state, already answered
        document = governed_metadata(base, track.built, gview.digest, freshness)
        location = self._write_metadata(track, document)
        answer = GovernedAnswer(document, location, freshness, gview.digest,
                                track.inputs.tree.prefix)
        if freshness.current:
            track.answered = (key, answer)
        return answer

    def _governed_view(self, view: ReadView, metadata: TableMetadata) -> GovernedView:
        """``governed_view``, remembered per view and table state (``last-updated-ms`` moves
        with every change of the metadata it reads: schemas, specs, format)."""
        key = (view.cache_key(), str(metadata.table_uuid), metadata.last_updated_ms,
               metadata.format_version, metadata.current_schema_id)
        known = self._views.get(key)
        if known is None:
            known = governed_view(view, metadata)
            if len(self._views) >= VIEWS_KEPT:
                self._views.clear()
            self._views[key] = known
        return known

    def landed(self, metadata: TableMetadata) -> None:
        """icegov landed a commit on the table: build its new current snapshot for every view
        of the table in use — unless the commit changed the table's columns: a view is judged
        against the columns it was resolved on (a new column may be one the policy denies), so
        that build waits for the next restricted answer, which resolves the view afresh."""
        current = metadata.current_snapshot()
        if current is None:
            return
        for (uuid, _), track in list(self._tracks.items()):
            if uuid == str(metadata.table_uuid) and _same_columns(track.inputs.metadata,
                                                                  metadata):
                track.inputs = replace(track.inputs, metadata=metadata)
                self._want(track, metadata, current)

    def table_tree(self, metadata: TableMetadata) -> TableTree:
        """The governed tree of the table ``metadata`` describes."""
        return TableTree(self._root(metadata), str(metadata.table_uuid))

    def ungovern(self, body: Json, metadata: TableMetadata, io: FileIO,
                 digest: str) -> Json | None:
        """``body`` of a principal reading the table through the governed view ``digest``,
        its snapshots rewritten onto the base table (``writes.ungoverned``); None when it adds
        none."""
        return ungoverned(body, metadata, io, self.table_tree(metadata).view(digest),
                          self._settings.copy_proven_files)

    def _root(self, metadata: TableMetadata) -> str:
        root = self._settings.root or default_root(metadata.location, self._warehouse)
        own = [metadata.location, *(metadata.properties.get(k) for k in (
            "write.data.path", "write.metadata.path", "write.object-storage.path"))]
        if not outside(root, [loc for loc in own if loc]):
            raise Forbidden("the governed location lies inside the table's own locations, "
                            "so governed data cannot be served for it (set governed.root)")
        return root

    def _track(self, gview: GovernedView, metadata: TableMetadata, io: FileIO,
               io_properties: Mapping[str, str]) -> _Track:
        key = (gview.table_uuid, gview.digest)
        tree = self.table_tree(metadata).view(gview.digest)
        inputs = BuildInputs(metadata, io, gview, tree, self._manifests,
                             tuple(sorted(io_properties.items())),
                             self._settings.copy_proven_files, self._settings.build_max_bytes)
        track = self._tracks.get(key)
        if track is None:
            track = self._tracks[key] = _Track(gview, inputs)
        else:
            track.inputs = inputs
        track.used = time.monotonic()
        return track

    def _want(self, track: _Track, metadata: TableMetadata, current: Snapshot | None) -> None:
        """Queue ``current`` first, then every other snapshot newest first."""
        others = sorted((s for s in metadata.snapshots
                         if current is None or s.snapshot_id != current.snapshot_id),
                        key=lambda s: -s.timestamp_ms)
        order = ([current] if current is not None else []) + others
        retry = [i for i, when in track.failed_at.items()
                 if time.monotonic() - when > FAILED_BUILD_RETRY_SECONDS]
        for snapshot_id in retry:  # a failure may have been passing: try again
            track.failed.pop(snapshot_id, None)
            track.failed_at.pop(snapshot_id, None)
        queued = {s.snapshot_id for s in track.wanted}
        fresh = [s for s in order if s.snapshot_id not in track.built
                 and s.snapshot_id not in queued]
        track.wanted = [s for s in order if s.snapshot_id in queued or s in fresh]
        if track.task is None or track.task.done():
            track.task = asyncio.get_running_loop().create_task(self._run(track))

    async def _wait_for(self, track: _Track, snapshot_ids: Sequence[int]) -> None:
        """Until every snapshot of ``snapshot_ids`` is built or failed, or the bound is up."""
        deadline = time.monotonic() + self._settings.wait_seconds
        while any(i not in track.built and i not in track.failed for i in snapshot_ids):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            track.progress.clear()
            try:
                await asyncio.wait_for(track.progress.wait(), remaining)
            except TimeoutError:
                return

    async def _run(self, track: _Track) -> None:
        started = time.monotonic()
        while track.wanted:
            snapshot = track.wanted.pop(0)
            if snapshot.snapshot_id in track.built:
                continue
            if time.monotonic() - started > self._settings.build_max_seconds:
                track.failed[snapshot.snapshot_id] = "the build ran over its time bound"
                track.progress.set()
                continue
            builder = SnapshotBuilder(track.inputs, self._run_copies)
            try:
                built = await asyncio.to_thread(builder.build, snapshot)
            except CopyFailed as exc:  # names base files: for the operator's log only
                self._failed(track, snapshot.snapshot_id, str(exc), _COPY_FAILED)
            except (GovernedBuildFailed, MaskUnsupported, Forbidden) as exc:
                self._failed(track, snapshot.snapshot_id, str(exc))
            except Exception:  # a build failure is served as not built
                _log.exception("governed build failed")
                self._failed(track, snapshot.snapshot_id, "the build failed")
            else:
                track.built[snapshot.snapshot_id] = built
            self.bytes_read += builder.bytes_read
            self.bytes_written += builder.bytes_written
            track.progress.set()
        self.collect(track.inputs.metadata)

    def collect(self, metadata: TableMetadata) -> None:
        """Collect the table's governed trees in the background (``collect.Collector``: at
        most once per table per minute or grace). When it starts, views whose track built
        nothing and served no answer within ``retain_unused_seconds`` are forgotten here (their
        trees retire); the newest base metadata any track of the table holds says which base
        snapshots are live. Tracks of views whose trees were removed are forgotten too, so a
        view used again is built again."""
        uuid = str(metadata.table_uuid)

        def uses() -> Uses:
            in_use: set[str] = set()
            busy: set[str] = set()
            newest: TableMetadata = metadata
            grace = self._settings.retain_unused_seconds
            for (table, digest), track in list(self._tracks.items()):
                if table != uuid:
                    continue
                running = bool(track.wanted) or (track.task is not None
                                                 and not track.task.done())
                if running:
                    busy.add(digest)
                if running or time.monotonic() - track.used < grace:
                    in_use.add(digest)
                else:
                    del self._tracks[(table, digest)]
                if track.inputs.metadata.last_updated_ms > newest.last_updated_ms:
                    newest = track.inputs.metadata
            return Uses(frozenset(in_use), frozenset(busy), newest, io)

        def retired(digests: Iterable[str]) -> None:
            for digest in digests:
                self._tracks.pop((uuid, digest), None)

        tracks = [t for (table, _), t in list(self._tracks.items()) if table == uuid]
        if not tracks:
            return
        io = tracks[0].inputs.io
        try:
            tree = self.table_tree(metadata)
        except Forbidden:
            return
        self.collector.request(tree, uses, retired)

    @staticmethod
    def _failed(track: _Track, snapshot_id: int, reason: str, public: str | None = None
                ) -> None:
        """Record a failed build: ``reason`` is logged, ``public`` (default: ``reason``) is
        what a restricted principal's 503 says."""
        _log.warning("governed build of snapshot %s failed: %s", snapshot_id, reason)
        track.failed[snapshot_id] = reason if public is None else public
        track.failed_at[snapshot_id] = time.monotonic()

    def _run_copies(self, jobs: Sequence[CopyJob]) -> list[CopiedFile]:
        size = sum(job.data.size for job in jobs)
        if size > self._settings.build_max_bytes:
            raise GovernedBuildFailed("the build would read more than governed.build_max_bytes")
        if size > self._settings.spark_above_bytes:
            from proxy.governed.spark_copies import copy_on_spark
            return copy_on_spark(jobs, self._settings.spark_master)
        return list(self._copies.map(copy_governed, jobs))

    def _write_metadata(self, track: _Track, document: Json) -> str:
        body = json.dumps(document, sort_keys=True, separators=(",", ":")).encode("utf-8")
        path = track.inputs.tree.metadata(content_key(body.decode("utf-8")))
        io = track.inputs.io
        if not io.new_input(path).exists():
            with io.new_output(path).create(overwrite=True) as stream:
                stream.write(body)
        return path


def _same_columns(before: TableMetadata, after: TableMetadata) -> bool:
    """True when both states have the same schemas (so a view resolved on one holds on the
    other)."""
    return (before.current_schema_id == after.current_schema_id
            and [s.schema_id for s in before.schemas] == [s.schema_id for s in after.schemas])


def _freshness(metadata: TableMetadata, served: int | None) -> Freshness:
    current = metadata.current_snapshot()
    base_id = None if current is None else current.snapshot_id
    if served == base_id:
        return Freshness(served, base_id, 0.0)
    newer = [s for s in metadata.snapshots if s.parent_snapshot_id == served]
    since = min((s.timestamp_ms for s in newer), default=time.time() * 1000)
    return Freshness(served, base_id, max(0.0, time.time() - since / 1000))
