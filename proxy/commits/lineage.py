"""Format v3 row lineage: the row ids a new snapshot assigns must be the table's next ones.

In a table of format 3 or later every row has a ``_row_id``, inherited from its data file's
``first_row_id``, which is inherited from its manifest's ``first_row_id`` (the manifest-list
record), which the writer of the snapshot assigns from the snapshot's ``first-row-id``. The table's
``next-row-id`` then advances by the snapshot's ``added-rows``. A writer who chooses these values
freely gives new rows the ids of existing ones (row-level change tracking then takes an insert for
an update of someone else's rows) or moves ``next-row-id`` anywhere (up to overflow), so, as
Java's ``SnapshotProducer`` and ``ManifestListWriter`` assign them:

* the first snapshot a commit adds has ``first-row-id`` equal to the base metadata's
  ``next-row-id`` (0 for a table created or upgraded to v3 by the commit); each later one the
  previous added snapshot's ``first-row-id`` plus its ``added-rows``;
* in the snapshot's manifest list, the data manifests it assigns ids to (a fresh one with a
  ``first_row_id``, or a kept one whose record in the predecessor's list had none) have, in list
  order, ``first_row_id`` equal to the snapshot's ``first-row-id`` and then each the previous one
  plus that manifest's ``added_rows_count`` and ``existing_rows_count``; a fresh data manifest
  may leave it null (its rows get no ids);
* ``added-rows`` is a non-negative integer equal to the rows so assigned.

A kept manifest's ``first_row_id`` must stay what it was (``history``). Each difference is a
reason, and ``classify`` takes the snapshot for one that rewrites history (an UPDATE); a
manifest-list record whose counts are missing cannot be evaluated (``UnverifiableCommit``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pyiceberg.manifest import ManifestContent, ManifestFile
from pyiceberg.table.metadata import TableMetadata

from proxy.commits.intent import UnverifiableCommit
from proxy.commits.snapshots import ClaimedSnapshot

ROW_LINEAGE_FORMAT = 3
FIRST_ROW_ID = 15  # position of ``first_row_id`` in a (v3) manifest-list record
_UPGRADE = "upgrade-format-version"


def expected_first_row_ids(base: TableMetadata | None, updates: Iterable[Any],
                           added: Mapping[int, ClaimedSnapshot]) -> dict[int, int] | None:
    """The ``first-row-id`` each added snapshot must have, in commit order (None: the table
    does not track row lineage, its format is below 3 before and after the commit)."""
    if _format_version(base, updates) < ROW_LINEAGE_FORMAT:
        return None
    next_row_id = _base_next_row_id(base)
    expected: dict[int, int] = {}
    for snapshot in added.values():
        expected[snapshot.snapshot_id] = next_row_id
        if snapshot.first_row_id is not None and snapshot.added_rows is not None:
            next_row_id = snapshot.first_row_id + snapshot.added_rows
    return expected


def row_lineage_changes(snapshot: ClaimedSnapshot, expected_first_row_id: int,
                        after: Sequence[ManifestFile],
                        before: Sequence[ManifestFile]) -> list[str]:
    """Reasons, one per row-lineage value of ``snapshot`` (its list ``after``, the state it
    replaces ``before``) that is not the one its table's lineage requires."""
    sid, first, added_rows = snapshot.snapshot_id, snapshot.first_row_id, snapshot.added_rows
    if first is None:
        return [f"snapshot {sid} has no first-row-id, which a format-3 table requires"]
    reasons: list[str] = []
    if first != expected_first_row_id:
        reasons.append(f"snapshot {sid} has first-row-id {first}, but the table's next row id "
                       f"is {expected_first_row_id}")
    assigned_end, misplaced = _assigned_rows(first, after, before)
    if misplaced:
        reasons.append(f"snapshot {sid} assigns row ids out of sequence to manifests "
                       f"{', '.join(misplaced[:3])}")
    if added_rows is None or added_rows < 0 or added_rows != assigned_end - first:
        reasons.append(f"snapshot {sid} has added-rows {added_rows}, but its manifest list "
                       f"assigns ids to {assigned_end - first} rows")
    return reasons


def _assigned_rows(first: int, after: Sequence[ManifestFile],
                   before: Sequence[ManifestFile]) -> tuple[int, list[str]]:
    """Where the ids the list assigns end, walking its data manifests that get ids here, and
    the manifests whose ``first_row_id`` is not the next id."""
    held = {m.manifest_path: m[FIRST_ROW_ID] for m in before}
    next_row_id, misplaced = first, []
    for manifest in after:
        first_row_id = manifest[FIRST_ROW_ID]
        if manifest.content != ManifestContent.DATA or first_row_id is None \
                or held.get(manifest.manifest_path) is not None:
            continue  # no ids, or ids assigned by an earlier snapshot (kept: ``history``)
        if first_row_id != next_row_id:
            misplaced.append(manifest.manifest_path)
        next_row_id = first_row_id + _rows(manifest)
    return next_row_id, misplaced


def _rows(manifest: ManifestFile) -> int:
    added, existing = manifest.added_rows_count, manifest.existing_rows_count
    if added is None or existing is None:
        raise UnverifiableCommit(f"cannot verify the commit: manifest {manifest.manifest_path} "
                                 "is assigned row ids but its list record has no row counts")
    return int(added) + int(existing)


def _format_version(base: TableMetadata | None, updates: Iterable[Any]) -> int:
    version = 1 if base is None else int(base.format_version)
    for update in updates:
        if isinstance(update, Mapping) and update.get("action") == _UPGRADE:
            upgraded = update.get("format-version")
            if isinstance(upgraded, bool) or not isinstance(upgraded, int):
                raise UnverifiableCommit(f"{_UPGRADE} needs an integer format-version")
            version = max(version, upgraded)
    return version


def _base_next_row_id(base: TableMetadata | None) -> int:
    """The base's ``next-row-id`` (0 where it had no row lineage: new or upgraded here)."""
    if base is None or base.format_version < ROW_LINEAGE_FORMAT:
        return 0
    next_row_id = getattr(base, "next_row_id", None)
    if isinstance(next_row_id, bool) or not isinstance(next_row_id, int):
        raise UnverifiableCommit("cannot verify the commit: the format-3 table has no "
                                 "next-row-id")
    return next_row_id
