"""Collecting governed trees: what no governed snapshot being served references goes, after a grace.

``collect_table`` looks at one table's governed tree (``layout.TableTree``) and removes

- in a view still in use: the governed manifest lists of base snapshots that are no longer in
  the base metadata (``expire_snapshots``), and every governed manifest, manifest summary,
  governed data file and governed metadata file that no list of a live base snapshot reaches
  (the newest metadata file of the view is kept);
- the whole tree of a view no longer in use (a policy change yields a new digest; the old
  tree is retired).

Nothing goes at once: readers may still be reading a snapshot that was just expired. A file is
removed once it has been seen unreferenced for ``grace_seconds`` (first seen, by a marker
``_collect.json`` in the table's tree: object stores have no modification time one can set)
*and* was written at least ``grace_seconds`` ago (a build under way writes files no list names
yet); a view tree once the view has been seen unused for the grace and nothing in it is
younger. Losing the marker only delays removals. Files are listed through pyarrow's
``FileSystem`` (local and object stores give modification times) and removed entry points
first (lists, metadata, manifest summaries, then manifests, then data), so a build that runs
meanwhile finds no summary or list naming a removed file and builds it again. Where the
references of a view cannot be read completely, nothing in that view is removed.

``Collector`` runs collections in the background for the service: one at a time per table, at
most once per table per ``COLLECT_EVERY_SECONDS`` (or the grace, when shorter). Only names this
module recognises are ever removed: view directories named by a digest, nothing else under the
table's tree.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass, field
from typing import Any

from pyarrow.fs import FileSelector, FileSystem, FileType
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import ManifestFile
from pyiceberg.table.metadata import TableMetadata

from proxy.commits.confine import canonical_location
from proxy.governed.layout import TableTree
from proxy.planning.manifest_cache import ManifestCache, read_live_entries

_log = logging.getLogger(__name__)

MARKER = "_collect.json"
COLLECT_EVERY_SECONDS = 60.0
_DIGEST = re.compile(r"[0-9a-f]{40}")
_LIST = re.compile(r"lists/snap-(-?[0-9]+)-[0-9a-f]{40}\.avro(\.json)?")
_RANK = (("lists/", ".json"), ("lists/", ""), ("metadata/", ""), ("manifests/", ".json"),
         ("manifests/", ".avro"), ("data/", ""))


class Unreadable(Exception):
    """The references of a view could not be read completely (nothing is removed there)."""


@dataclass(frozen=True)
class Listed:
    """One file of a table's governed tree: its path below the tree's prefix
    (``{digest}/...``) and when it was last written (seconds since the epoch)."""

    relative: str
    mtime: float

    @property
    def digest(self) -> str:
        return self.relative.split("/", 1)[0]

    @property
    def within(self) -> str:
        """The path below its view's prefix."""
        return self.relative.split("/", 1)[1] if "/" in self.relative else ""


@dataclass
class Collection:
    """What one collection did: paths below the table tree's prefix."""

    removed: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    retired: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)


class TreeFiles:
    """The files of one table's governed tree, listed and removed through pyarrow."""

    def __init__(self, io: FileIO, tree: TableTree) -> None:
        arrow = PyArrowFileIO(dict(io.properties))
        scheme, netloc, path = arrow.parse_location(tree.prefix)
        self._fs: FileSystem = arrow.fs_by_scheme(scheme, netloc)
        self._base = path.rstrip("/")

    def list(self) -> list[Listed]:
        """Every file under the tree (none when it does not exist)."""
        selector = FileSelector(self._base, recursive=True, allow_not_found=True)
        found = []
        for info in self._fs.get_file_info(selector):
            if info.type != FileType.File or not info.path.startswith(self._base + "/"):
                continue
            mtime = info.mtime.timestamp() if info.mtime is not None else time.time()
            found.append(Listed(info.path[len(self._base) + 1:], mtime))
        return found

    def remove(self, relative: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._fs.delete_file(f"{self._base}/{relative}")

    def remove_view(self, digest: str) -> None:
        """Remove what is left of a view's directory (its files are gone already)."""
        with contextlib.suppress(FileNotFoundError):
            self._fs.delete_dir(f"{self._base}/{digest}")


def collect_table(io: FileIO, tree: TableTree, metadata: TableMetadata, in_use: Set[str], *,
                  grace_seconds: float, busy: Set[str] = frozenset(),
                  manifests: ManifestCache | None = None, now: float | None = None,
                  files: TreeFiles | None = None) -> Collection:
    """Collect the governed tree of the table ``metadata`` describes (see the module
    docstring). ``in_use``: digests of views being served; ``busy``: digests with a build
    under way (nothing in them is touched); ``now``: seconds since the epoch."""
    now = time.time() if now is None else now
    files = files or TreeFiles(io, tree)
    by_view: dict[str, list[Listed]] = {}
    for item in files.list():
        if _DIGEST.fullmatch(item.digest) and item.within:
            by_view.setdefault(item.digest, []).append(item)
    marker = _read_marker(io, tree)
    seen = _Seen(marker.get("files", {}), now)
    views_seen = _Seen(marker.get("views", {}), now)
    live = {s.snapshot_id for s in metadata.snapshots}
    result = Collection()
    for digest, in_view in sorted(by_view.items()):
        if digest in busy:
            seen.keep_prefix(digest + "/")
        elif digest in in_use:
            _collect_view(io, tree, digest, in_view, live, manifests, files, seen,
                          grace_seconds, result)
        else:
            _retire_view(digest, in_view, files, views_seen, seen, grace_seconds, now, result)
    updated = {"files": seen.kept(), "views": views_seen.kept()}
    if updated != marker:
        _write_marker(io, tree, updated)
    return result


def _collect_view(io: FileIO, tree: TableTree, digest: str, listed: list[Listed],
                  live: Set[int], manifests: ManifestCache | None, files: TreeFiles,
                  seen: _Seen, grace: float, result: Collection) -> None:
    try:
        referenced = _referenced(io, tree, digest, listed, live, manifests)
    except Unreadable:
        _log.warning("governed collection: the references of view %s of table %s could not "
                     "be read; nothing removed there", digest, tree.table_uuid)
        result.unreadable.append(digest)
        seen.keep_prefix(digest + "/")
        return
    doomed = []
    for item in listed:
        if item.relative in referenced:
            continue
        since = seen.since(item.relative)
        if since <= seen.now - grace and item.mtime <= seen.now - grace:
            doomed.append(item.relative)
        else:
            result.waiting.append(item.relative)
    for relative in sorted(doomed, key=_rank):
        files.remove(relative)
        seen.drop(relative)
        result.removed.append(relative)


def _retire_view(digest: str, listed: list[Listed], files: TreeFiles, views_seen: _Seen,
                 seen: _Seen, grace: float, now: float, result: Collection) -> None:
    since = views_seen.since(digest)
    newest = max(item.mtime for item in listed)
    seen.keep_prefix(digest + "/")
    if since > now - grace or newest > now - grace:
        result.waiting.extend(item.relative for item in listed)
        return
    for relative in sorted((item.relative for item in listed), key=_rank):
        files.remove(relative)
        result.removed.append(relative)
    files.remove_view(digest)
    seen.drop_prefix(digest + "/")
    views_seen.drop(digest)
    result.retired.append(digest)


def _referenced(io: FileIO, tree: TableTree, digest: str, listed: Iterable[Listed],
                live: Set[int], manifests: ManifestCache | None) -> set[str]:
    """Paths (below the table tree's prefix) that the governed lists of live base snapshots
    reach in view ``digest``, with the newest metadata file of the view."""
    prefix = canonical_location(tree.prefix) + "/"
    referenced: set[str] = set()
    lists: list[str] = []
    metadata_files: list[Listed] = []
    for item in listed:
        match = _LIST.fullmatch(item.within)
        if match is not None and int(match.group(1)) in live:
            referenced.add(item.relative)
            if match.group(2) is None:
                lists.append(item.relative)
        elif item.within.startswith("metadata/"):
            metadata_files.append(item)
    if metadata_files:
        referenced.add(max(metadata_files, key=lambda m: (m.mtime, m.relative)).relative)
    reached: dict[str, ManifestFile] = {}
    for relative in lists:
        for manifest in _manifests(io, f"{tree.prefix}/{relative}", manifests):
            inside = _below(prefix, manifest.manifest_path)
            if inside is not None and inside.startswith(digest + "/"):
                reached.setdefault(inside, manifest)
    for inside, manifest in reached.items():
        referenced.add(inside)
        if inside.endswith(".avro"):
            referenced.add(inside[:-len(".avro")] + ".json")
        for path in _data_files(io, manifest, manifests):
            data = _below(prefix, path)
            if data is not None:
                referenced.add(data)
    return referenced


def _manifests(io: FileIO, path: str, cache: ManifestCache | None) -> tuple[ManifestFile, ...]:
    try:
        if cache is not None:
            return cache.manifests(io, path)
        from pyiceberg.manifest import read_manifest_list
        return tuple(read_manifest_list(io.new_input(path)))
    except Exception as exc:  # whatever the reason: the view's references are unknown
        raise Unreadable(path) from exc


def _data_files(io: FileIO, manifest: ManifestFile, cache: ManifestCache | None) -> list[str]:
    try:
        entries = (cache.entries(io, manifest) if cache is not None
                   else read_live_entries(io, manifest))
        return [str(entry.data_file.file_path) for entry in entries]
    except Exception as exc:  # whatever the reason: the view's references are unknown
        raise Unreadable(manifest.manifest_path) from exc


def _below(prefix: str, path: str) -> str | None:
    canonical = canonical_location(path)
    return canonical[len(prefix):] if canonical.startswith(prefix) else None


def _rank(relative: str) -> tuple[int, str]:
    within = relative.split("/", 1)[1] if "/" in relative else relative
    for rank, (folder, suffix) in enumerate(_RANK):
        if within.startswith(folder) and within.endswith(suffix):
            return rank, relative
    return len(_RANK), relative


# ---- the marker: since when a file or view has been seen unreferenced ----------------------


class _Seen:
    """First-seen times from the marker; what is looked up (``since``) or kept stays."""

    def __init__(self, previous: Mapping[str, float], now: float) -> None:
        self._previous = previous
        self._kept: dict[str, float] = {}
        self.now = now

    def since(self, key: str) -> float:
        found = self._previous.get(key)
        value = self.now if found is None else min(found, self.now)
        self._kept[key] = value
        return value

    def keep_prefix(self, prefix: str) -> None:
        self._kept.update({k: v for k, v in self._previous.items() if k.startswith(prefix)})

    def drop(self, key: str) -> None:
        self._kept.pop(key, None)

    def drop_prefix(self, prefix: str) -> None:
        for key in [k for k in self._kept if k.startswith(prefix)]:
            del self._kept[key]

    def kept(self) -> dict[str, float]:
        return dict(sorted(self._kept.items()))


def _marker_path(tree: TableTree) -> str:
    return f"{tree.prefix}/{MARKER}"


def _read_marker(io: FileIO, tree: TableTree) -> dict[str, dict[str, float]]:
    """The marker, only its well-formed entries (an unreadable one counts as empty: that
    only delays removals)."""
    try:
        with io.new_input(_marker_path(tree)).open() as stream:
            raw: Any = json.loads(stream.read())
    except Exception:  # absent or unreadable: nothing seen yet
        return {}
    marker: dict[str, dict[str, float]] = {}
    for name in ("files", "views"):
        part = raw.get(name) if isinstance(raw, dict) else None
        if isinstance(part, dict):
            marker[name] = {k: float(v) for k, v in part.items() if isinstance(k, str)
                            and isinstance(v, int | float) and not isinstance(v, bool)}
    return marker


def _write_marker(io: FileIO, tree: TableTree, marker: dict[str, dict[str, float]]) -> None:
    body = json.dumps(marker, sort_keys=True).encode("utf-8")
    try:
        with io.new_output(_marker_path(tree)).create(overwrite=True) as stream:
            stream.write(body)
    except Exception:  # the next collection sees these files first: removals only wait longer
        _log.warning("governed collection: the marker of table %s could not be written",
                     tree.table_uuid)


# ---- in the background, for the service -----------------------------------------------------


@dataclass(frozen=True)
class Uses:
    """What the service says of a table when its collection starts: the views in use, those
    with a build under way, and the newest base metadata it knows."""

    in_use: frozenset[str]
    busy: frozenset[str]
    metadata: TableMetadata
    io: FileIO


class Collector:
    """Collections in the background: one at a time per table, at most once per table per
    ``COLLECT_EVERY_SECONDS`` (or ``grace_seconds``, when shorter)."""

    def __init__(self, grace_seconds: float, manifests: ManifestCache | None = None) -> None:
        self._grace = grace_seconds
        self._every = min(COLLECT_EVERY_SECONDS, grace_seconds)
        self._manifests = manifests
        self._last: dict[str, float] = {}
        self._running: dict[str, asyncio.Task[None]] = {}
        self.last: Collection | None = None

    def request(self, tree: TableTree, uses: Callable[[], Uses],
                retired: Callable[[Iterable[str]], None]) -> None:
        """Collect ``tree`` soon, unless it was collected lately or is being collected.
        ``uses`` is asked when the collection starts; ``retired`` is told the views whose
        trees were removed."""
        now = time.monotonic()
        key = tree.table_uuid
        if key in self._running or now - self._last.get(key, -float("inf")) < self._every:
            return
        self._last[key] = now
        task = asyncio.get_running_loop().create_task(self._collect(tree, uses, retired))
        self._running[key] = task
        task.add_done_callback(lambda _: self._running.pop(key, None))

    async def _collect(self, tree: TableTree, uses: Callable[[], Uses],
                       retired: Callable[[Iterable[str]], None]) -> None:
        try:
            now = uses()
            result = await asyncio.to_thread(
                collect_table, now.io, tree, now.metadata, now.in_use, busy=now.busy,
                grace_seconds=self._grace, manifests=self._manifests)
        except Exception:
            _log.exception("governed collection of table %s failed", tree.table_uuid)
            return
        self.last = result
        if result.retired:
            retired(result.retired)
        if result.removed:
            _log.info("governed collection of table %s removed %d files (%d views retired)",
                      tree.table_uuid, len(result.removed), len(result.retired))

    def close(self) -> None:
        for task in self._running.values():
            task.cancel()
