"""From what a snapshot changes to the data action it needs, and where its summary lies.

A snapshot is classified by its manifests (``diff.SnapshotChange``), never by its summary:

* only data files added: INSERT;
* data files removed and/or delete files added, no data added: DELETE;
* data added together with removed data or added deletes, or any removed delete file that
  re-exposes rows: UPDATE; except
* a copy-on-write rewrite (data removed and added, no delete file added or re-exposing) whose
  added rows are all among the removed live rows: DELETE (``rows``);
* a ``replace`` that is data-equivalent: REWRITE;
* only delete files removed, none re-exposing rows: DELETE (REWRITE for a data-equivalent
  ``replace``), never what the summary claims;
* nothing changed: what the summary claims (append: INSERT, delete: DELETE, replace: REWRITE,
  anything else: UPDATE); an empty change cannot do harm, the claim only names it.

A ``replace`` that adds or removes files is data-equivalent only as its rows show
(``RowChecks.is_data_equivalent``, implemented by ``rewrite_rows``): the live rows it removes
are, as a multiset, the live rows it adds, and no kept data file gains or loses a deleted row.
Record counts decide nothing. Without row checks (no base table), or where they cannot be
completed (budget, an unreadable file, readers that could disagree, metadata changed in the same
commit), a ``replace`` is classified by its shape (usually UPDATE) and reported as a mismatch.

A removed delete file re-exposes rows unless ``diff`` finds it moot (expired, orphaned) or the
row checks (``RowChecks``, implemented by ``rows.SnapshotRows``) show that every row it deleted
stays deleted; one the row checks find re-exposing rows makes the snapshot an UPDATE, even in a
``replace``. Without row checks, every such removal counts as re-exposing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Protocol

from proxy.commits.diff import SnapshotChange
from proxy.commits.manifests import ContentFile
from proxy.governance import Action

KNOWN_OPERATIONS = ("append", "replace", "overwrite", "delete")
_CLAIMED = {"append": Action.INSERT, "delete": Action.DELETE, "replace": Action.REWRITE}
_COMPATIBLE: dict[str, frozenset[Action]] = {
    "append": frozenset({Action.INSERT}),
    "delete": frozenset({Action.DELETE}),
    "replace": frozenset({Action.REWRITE}),
    "overwrite": frozenset({Action.INSERT, Action.DELETE, Action.UPDATE}),
}


class RowChecks(Protocol):
    """Row-level evidence for one snapshot, where its manifests cannot decide."""

    def still_exposing(self, change: SnapshotChange) -> tuple[ContentFile, ...]:
        """The files of ``change.exposing_deletes`` whose deleted rows come back."""

    def only_removes_rows(self, change: SnapshotChange) -> bool:
        """True if every row ``change`` adds is one of the live rows it removes."""

    def is_data_equivalent(self, change: SnapshotChange) -> bool:
        """True if the live rows ``change`` removes are the live rows it adds, as a multiset,
        and its kept data files keep their deleted rows."""


def data_action(change: SnapshotChange, operation: str | None,
                rows: RowChecks | None = None) -> Action:
    """The one data action a snapshot's change needs, given its claimed ``operation``.

    ``rows`` (optional) settles removed delete files, rewrites and copy-on-write rewrites by
    their rows; without it, no ``replace`` that changes files is a REWRITE.
    """
    if rows is not None and change.exposing_deletes:
        change = replace(change, exposing_deletes=rows.still_exposing(change))
        if change.exposing_deletes:  # read, not estimated: rows come back, no rewrite
            return Action.UPDATE
    if operation == "replace" and is_data_equivalent(change, rows):
        return Action.REWRITE
    shape = shape_action(change)
    if shape == Action.UPDATE and rows is not None and is_copy_on_write(change) \
            and rows.only_removes_rows(change):
        return Action.DELETE
    return shape or _CLAIMED.get(operation or "", Action.UPDATE)


def is_copy_on_write(change: SnapshotChange) -> bool:
    """Data files removed and added, no delete file added, none re-exposing rows."""
    return bool(change.added_data and change.removed_data) and not change.added_deletes \
        and not change.exposing_deletes


def shape_action(change: SnapshotChange) -> Action | None:
    """INSERT / DELETE / UPDATE from the files alone; None when no file changed.

    Removed delete files that re-expose nothing (``diff``: expired, orphaned; or ``rows``) make
    a change at least a DELETE when no data is added: such a snapshot never passes for what it
    claims (an "append" removing delete files is no INSERT). Beside added data they can only be
    expired ones (orphaning one removes data), which apply to no row: Java's merging appends
    drop them, and the INSERT stands.
    """
    adds = bool(change.added_data)
    removes = bool(change.removed_data or change.added_deletes)
    if change.exposing_deletes or (adds and removes):
        return Action.UPDATE
    if adds:
        return Action.INSERT
    return Action.DELETE if removes or change.removed_deletes else None


def is_data_equivalent(change: SnapshotChange, rows: RowChecks | None) -> bool:
    """True if the change leaves readers the same rows: it changes no file, or ``rows`` read
    them (module doc)."""
    if not change.added and not change.removed:
        return True
    return rows is not None and rows.is_data_equivalent(change)


def claim_disagreements(change: SnapshotChange, summary: Mapping[str, str],
                        action: Action) -> list[str]:
    """Where a snapshot's summary (operation and counts) disagrees with its manifests."""
    snapshot = change.snapshot_id
    operation = summary.get("operation")
    if operation is None:
        return [f"snapshot {snapshot} has no operation in its summary"]
    if operation not in _COMPATIBLE:
        return [f"snapshot {snapshot} claims unknown operation {operation!r}"]
    found = [] if action in _COMPATIBLE[operation] else [
        f"snapshot {snapshot} claims {operation!r} but its manifests show {action.value}"]
    return found + _count_disagreements(change, summary)


def _count_disagreements(change: SnapshotChange, summary: Mapping[str, str]) -> list[str]:
    counts = change.counts
    actual = {
        "added-data-files": counts.added_data_files,
        "deleted-data-files": counts.removed_data_files,
        "added-records": counts.added_records,
        "deleted-records": counts.deleted_records,
        "added-delete-files": counts.added_delete_files,
        "removed-delete-files": counts.removed_delete_files,
    }
    return [f"snapshot {change.snapshot_id} summary says {key}={summary[key]}, manifests show "
            f"{value}" for key, value in actual.items()
            if key in summary and summary[key] != str(value)]


def merge_data_actions(actions: set[Action]) -> set[Action]:
    """Snapshots of one commit that insert and delete between them amount to an UPDATE."""
    if {Action.INSERT, Action.DELETE} <= actions:
        return (actions - {Action.INSERT, Action.DELETE}) | {Action.UPDATE}
    return actions
