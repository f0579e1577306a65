"""What one new snapshot changes, computed from manifests rather than taken from its summary.

The state a snapshot replaces is its predecessor's manifest list. Only the difference is read:
manifests in the new list but not the old one ("fresh", which must be the new snapshot's own) and
manifests in the old list but not the new one ("dropped"). Manifests in both ("kept") are unchanged
and are not opened, except the kept data manifests while delete files are live or removed
(below). The truth
is the set difference of live files:

* added   = live in fresh manifests, not live in dropped ones;
* removed = live in dropped manifests, not live in fresh ones.

Entry statuses are then checked against that truth: every live entry of a dropped manifest must
reappear as EXISTING or DELETED (otherwise data was deleted silently, reported as an anomaly; the
classification uses the set difference either way). Fresh manifests and their ADDED/DELETED
entries must carry the new snapshot's id: one dated to another snapshot rewrites history.

Before anything is read, the new manifest list and its fresh manifests must lie under the table's
locations, and so must every file the fresh manifests introduce (``confine``). What the snapshot
carries over must be unchanged: kept manifests' list records and re-listed entries equal the
predecessor's, EXISTING and DELETED entries have an original, ADDED ones do not re-add a held
file (``history``). While the predecessor or the snapshot has live delete files (a kept delete
manifest, a delete file in a dropped or fresh one), the kept data manifests are read too
(``ManifestReader.live_keys``, cached for committed manifests): a data file a kept manifest holds
live must not be listed live again, nor removed, by the snapshot. A difference marks the change
``rewrites_history`` (an UPDATE, see ``classify``).

Files are identified by physical location (``ContentFile.key``): two spellings of one file
(``file:/x``, ``file:///x``) are one file, listed live twice if both are live. What the new list
says of each fresh manifest (counts, sequence numbers, partition summaries) must be what its
entries show (``listing``); a difference also rewrites history.

A removed delete file re-exposes the rows it deleted unless it is

* expired: its sequence number is below every live data file's, so it applies to nothing (the
  floor is read from the entries of the kept data manifests and the fresh live files, never
  from a manifest-list record's ``min_sequence_number``);
* orphaned: the one data file it applies to is removed by the same snapshot; or
* superseded: an added delete file for the same data file deletes at least as many rows
  (a deletion vector or file-scoped delete merged into a new one).

The rest are ``exposing`` deletes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pyiceberg.manifest import ManifestContent, ManifestEntryStatus, ManifestFile
from pyiceberg.types import StructType

from proxy.commits.confine import TableLocations, canonical_location, shown_path
from proxy.commits.held import check_list_is_no_manifest
from proxy.commits.history import (
    kept_file_relistings,
    kept_manifest_changes,
    relisted_entry_changes,
)
from proxy.commits.intent import FileCounts, UnverifiableCommit
from proxy.commits.listing import fresh_record_changes
from proxy.commits.manifests import ContentFile, Entry, FileKey, ManifestReader
from proxy.commits.vectors import check_one_vector_per_file

_Key = FileKey
_MAX_NAMED = 3


@dataclass(frozen=True)
class SnapshotChange:
    """The files one snapshot adds and removes, with what its manifests got wrong."""

    snapshot_id: int
    added: tuple[ContentFile, ...] = ()
    removed: tuple[ContentFile, ...] = ()
    exposing_deletes: tuple[ContentFile, ...] = ()
    anomalies: tuple[str, ...] = ()
    rewrites_history: bool = False  # carried-over manifests or entries differ (``history``)

    @property
    def added_data(self) -> tuple[ContentFile, ...]:
        return tuple(f for f in self.added if f.is_data)

    @property
    def removed_data(self) -> tuple[ContentFile, ...]:
        return tuple(f for f in self.removed if f.is_data)

    @property
    def added_deletes(self) -> tuple[ContentFile, ...]:
        return tuple(f for f in self.added if not f.is_data)

    @property
    def removed_deletes(self) -> tuple[ContentFile, ...]:
        return tuple(f for f in self.removed if not f.is_data)

    @property
    def counts(self) -> FileCounts:
        return FileCounts(
            added_data_files=len(self.added_data), removed_data_files=len(self.removed_data),
            added_delete_files=len(self.added_deletes),
            removed_delete_files=len(self.removed_deletes),
            added_records=records(self.added_data), deleted_records=records(self.removed_data))


def records(files: Iterable[ContentFile]) -> int:
    """Total record count of ``files``."""
    return sum(f.records for f in files)


def diff_snapshot(reader: ManifestReader, snapshot_id: int, manifest_list: str,
                  before: tuple[ManifestFile, ...], *, sequence_number: int = 0,
                  partition_types: Mapping[int, StructType] | None = None) -> SnapshotChange:
    """Read what snapshot ``snapshot_id`` changes relative to the manifests in ``before``.

    The new manifest list, its fresh manifests and the files they introduce must lie under the
    table's locations (checked before anything is read); what it carries over from ``before``
    must be unchanged (``history``), and what its list says of its fresh manifests must be what
    their entries show (``listing``: ``sequence_number`` is the snapshot's, ``partition_types``
    the table's partition type per spec id).
    """
    after = reader.claimed_manifests(manifest_list)
    _require_unique(after)
    check_list_is_no_manifest(manifest_list, (*before, *after))
    old_paths = {m.manifest_path for m in before}
    new_paths = {m.manifest_path for m in after}
    fresh = [m for m in after if m.manifest_path not in old_paths]
    kept = [m for m in before if m.manifest_path in new_paths]
    for manifest in fresh:
        reader.locations.require(manifest.manifest_path, "manifest")
    fresh_read = [(m, reader.entries(m)) for m in fresh]
    fresh_entries = [e for _, entries in fresh_read for e in entries]
    dropped = [e for m in before if m.manifest_path not in new_paths for e in reader.entries(m)]
    dropped_live = _live({}, dropped)
    _confine_new_files(reader.locations, fresh_entries, dropped_live)
    check_one_vector_per_file(reader, kept, fresh_entries)
    history = [*kept_manifest_changes(before, after),
               *relisted_entry_changes(fresh_entries, {e.file.key: e for e in dropped if e.live}),
               *_kept_files_listed_again(reader, kept, fresh_entries, dropped_live),
               *[reason for m, entries in fresh_read for reason in fresh_record_changes(
                   m, entries, sequence_number, partition_types or {})],
               *_foreign_manifests(snapshot_id, fresh),
               *_foreign_entries(snapshot_id, fresh_entries),
               *_own_row_ids(fresh_entries)]
    anomalies = [*_silently_dropped(fresh_entries, dropped_live), *history]
    return _change(reader, snapshot_id, fresh_entries, dropped_live, kept, anomalies,
                   bool(history))


def _confine_new_files(locations: TableLocations, fresh: list[Entry],
                       dropped_live: dict[_Key, ContentFile]) -> None:
    """Files the fresh manifests list that the predecessor did not must be the table's own."""
    for entry in fresh:
        original = dropped_live.get(entry.file.key)
        if original is not None and original.path == entry.file.path:
            continue  # re-listed: the same location, spelled as the predecessor held it
        kind = "data file" if entry.file.is_data else "delete file"
        locations.require(entry.file.path, kind)
        if entry.file.referenced_data_file is not None:
            locations.require(entry.file.referenced_data_file, "referenced data file")


def _kept_files_listed_again(reader: ManifestReader, kept: list[ManifestFile], fresh: list[Entry],
                             dropped_live: dict[_Key, ContentFile]) -> list[str]:
    """Data files kept manifests hold live that the snapshot lists again or removes, looked for
    only while delete files are live (``history.kept_file_relistings``)."""
    touches_data = any(f.is_data for f in dropped_live.values()) or any(
        e.live and e.file.is_data for e in fresh)
    if not touches_data or not _deletes_live(kept, fresh, dropped_live):
        return []
    held = {m.manifest_path: reader.live_keys(m) for m in kept if m.content == ManifestContent.DATA}
    return kept_file_relistings(fresh, dropped_live.values(), held)


def _deletes_live(kept: list[ManifestFile], fresh: list[Entry],
                  dropped_live: dict[_Key, ContentFile]) -> bool:
    """Whether delete files may apply: a kept delete manifest (whatever its counts say: not
    every reader trusts them), or a live delete file among the dropped or fresh entries."""
    return (any(m.content == ManifestContent.DELETES for m in kept)
            or any(not f.is_data for f in dropped_live.values())
            or any(e.live and not e.file.is_data for e in fresh))


def _change(reader: ManifestReader, snapshot_id: int, fresh_entries: list[Entry],
            dropped_live: dict[_Key, ContentFile], kept: list[ManifestFile], anomalies: list[str],
            rewrites_history: bool = False) -> SnapshotChange:
    fresh_live = _live({}, fresh_entries)
    added = tuple(f for k, f in fresh_live.items() if k not in dropped_live)
    removed = tuple(f for k, f in dropped_live.items() if k not in fresh_live)
    exposing: tuple[ContentFile, ...] = ()
    if any(not f.is_data for f in removed):
        exposing = _exposing(removed, _min_data_sequence(reader, kept, fresh_live.values()))
    return SnapshotChange(snapshot_id, added, removed, exposing, tuple(anomalies),
                          rewrites_history)


def _require_unique(manifests: tuple[ManifestFile, ...]) -> None:
    paths = [m.manifest_path for m in manifests]
    if len(set(paths)) != len(paths):
        raise UnverifiableCommit("cannot verify the commit: its manifest list names a manifest "
                                 "twice")


def _live(into: dict[_Key, ContentFile], entries: Iterable[Entry]) -> dict[_Key, ContentFile]:
    for entry in entries:
        if not entry.live:
            continue
        if entry.file.key in into:
            raise UnverifiableCommit(f"cannot verify the commit: {entry.file.path} is listed "
                                     "live twice")
        into[entry.file.key] = entry.file
    return into


def _foreign_manifests(snapshot_id: int, fresh: list[ManifestFile]) -> list[str]:
    """Fresh manifests another snapshot claims to have added: their entries inherit its id."""
    foreign = [m.manifest_path for m in fresh if m.added_snapshot_id != snapshot_id]
    if not foreign:
        return []
    return [f"manifests not in the parent's list and not added by snapshot {snapshot_id}: "
            f"{_named(foreign)}"]


def _foreign_entries(snapshot_id: int, fresh: list[Entry]) -> list[str]:
    """ADDED or DELETED entries dated to another snapshot: incremental readers and snapshot
    expiry would take the change for that snapshot's."""
    changed = ManifestEntryStatus.ADDED, ManifestEntryStatus.DELETED
    foreign = [e.file.path for e in fresh if e.status in changed and e.snapshot_id != snapshot_id]
    if not foreign:
        return []
    return [f"entries added or deleted under another snapshot id than {snapshot_id}: "
            f"{_named(foreign)}"]


def _own_row_ids(fresh: list[Entry]) -> list[str]:
    """ADDED data files that carry a ``first_row_id`` of their own: writers leave it null, and
    readers prefer it to the id the manifest assigns, so the rows would take ids the table's
    lineage gave other rows (an insert passed off as an update of them)."""
    return [f"ADDED data file {shown_path(e.file.path)} carries its own first_row_id "
            f"{e.file.first_row_id}: row ids are assigned by its manifest"
            for e in fresh if e.status == ManifestEntryStatus.ADDED and e.file.is_data
            and e.file.first_row_id is not None][:3]


def _silently_dropped(fresh: list[Entry], dropped_live: dict[_Key, ContentFile]) -> list[str]:
    """Live files of dropped manifests that no fresh entry lists (removed all the same)."""
    listed = {e.file.key for e in fresh}
    dropped = [f.path for k, f in dropped_live.items() if k not in listed]
    return [f"files silently dropped with their manifest: {_named(dropped)}"] if dropped else []


def _min_data_sequence(reader: ManifestReader, kept: list[ManifestFile],
                       fresh_live: Iterable[ContentFile]) -> int | None:
    """The lowest data sequence number of any live data file after the snapshot (None: no
    data), from the entries of the kept data manifests and the fresh live files; never from a
    manifest-list record's ``min_sequence_number``, which an earlier writer chose."""
    floors = [reader.min_live_sequence(m) for m in kept if m.content == ManifestContent.DATA]
    floors += [f.sequence_number or 0 for f in fresh_live if f.is_data]
    return min((f for f in floors if f is not None), default=None)


def _exposing(removed: tuple[ContentFile, ...], floor: int | None) -> tuple[ContentFile, ...]:
    """Removed delete files that may re-expose rows: neither expired nor orphaned.

    Whether delete files live after the snapshot (added or kept) still delete the same rows
    is not judged from manifests (record counts prove nothing): ``rows`` reads them. Data files
    are matched by physical location (``confine.canonical_location``).
    """
    gone = {f.key[1] for f in removed if f.is_data}
    return tuple(f for f in removed if not f.is_data
                 and not _expired(f, floor)
                 and (f.referenced_data_file is None
                      or canonical_location(f.referenced_data_file) not in gone))


def _expired(delete: ContentFile, floor: int | None) -> bool:
    if floor is None:
        return True
    return delete.sequence_number is not None and delete.sequence_number < floor


def _named(paths: list[str]) -> str:
    shown = ", ".join(paths[:_MAX_NAMED])
    more = len(paths) - _MAX_NAMED
    return f"{shown} (and {more} more)" if more > 0 else shown
