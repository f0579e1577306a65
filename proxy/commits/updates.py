"""One small classifier per table update action, in a dispatch table checked at start-up.

Each classifier reads one raw update (a JSON object) and records what it needs in a
``CommitScan``; snapshots and refs are only collected here and judged once the whole commit has
been read (``classify``). The decisions for metadata-only updates:

* schema, partition spec, sort order, properties, location, format version, removing old schemas
  or specs: ALTER (CREATE_TABLE inside a create, ``assert-create``);
* ``assign-uuid``: CREATE_TABLE inside a create; on an existing table it swaps the table's
  identity, so it needs every table right (like an unknown action);
* ``set-statistics`` / ``set-partition-statistics``: REWRITE. Statistics are derived from the
  data by maintenance jobs (like compaction) and never change what a query returns; their
  ``statistics-path`` is a file of the table (a purge deletes it), so it is collected in
  ``referenced_files`` and must lie under the table's locations (``confine``);
* ``remove-statistics`` / ``remove-partition-statistics``: nothing more when the same commit
  removes that snapshot (snapshot expiry sends both), else REWRITE;
* ``add-encryption-key``: nothing more when the commit adds a snapshot (the key belongs to its
  files) or creates the table, else ALTER;
* ``remove-encryption-key``: ALTER and DELETE, since files encrypted with it become unreadable;
* ``remove-snapshots``: MANAGE_SNAPSHOTS; ``set-snapshot-ref``/``remove-snapshot-ref``: judged
  per ref at the end (see ``classify``; a ref's type and retention settings, see ``refs``).

An action not in the table needs every table right (``TABLE_ACTIONS``) and is listed in the
evidence. ``check_classification_complete`` fails start-up if an action of the REST spec has no
classifier.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.table.metadata import TableMetadata

from proxy.commits.intent import UnverifiableCommit
from proxy.commits.snapshots import ClaimedSnapshot, optional_id, parse_snapshot, require_id
from proxy.governance import TABLE_ACTIONS, Action
from proxy.locations import LOCATION_PROPERTIES

SPEC_TABLE_UPDATES: tuple[str, ...] = (
    "assign-uuid", "upgrade-format-version", "add-schema", "set-current-schema", "add-spec",
    "set-default-spec", "add-sort-order", "set-default-sort-order", "add-snapshot",
    "set-snapshot-ref", "remove-snapshots", "remove-snapshot-ref", "set-location",
    "set-properties", "remove-properties", "set-statistics", "remove-statistics",
    "set-partition-statistics", "remove-partition-statistics", "remove-partition-specs",
    "remove-schemas", "add-encryption-key", "remove-encryption-key",
)
"""Every ``TableUpdate`` of the Iceberg REST spec (rest-catalog-open-api.yaml, ``TableUpdate``)."""


class IncompleteClassification(RuntimeError):
    """Some update action of the REST spec has no classifier: refuse to start."""


@dataclass
class CommitScan:
    """What the updates of one commit say, collected in order."""

    base: TableMetadata | None
    creating: bool
    actions: set[Action] = field(default_factory=set)
    unknown: list[str] = field(default_factory=list)
    added: dict[int, ClaimedSnapshot] = field(default_factory=dict)
    refs: dict[str, int | None] = field(default_factory=dict)  # final target; None = removed
    reset_refs: set[str] = field(default_factory=set)  # removed at some point in the commit
    ref_settings: dict[str, Mapping[str, Any]] = field(default_factory=dict)  # last set per ref
    referenced_files: list[tuple[str, str]] = field(default_factory=list)  # (what, location)
    removed_snapshots: set[int] = field(default_factory=set)
    removed_statistics: set[int] = field(default_factory=set)
    adds_key: bool = False

    @property
    def metadata_action(self) -> Action:
        """ALTER, or CREATE_TABLE when the commit creates the table."""
        return Action.CREATE_TABLE if self.creating else Action.ALTER


Classifier = Callable[[Mapping[str, Any], CommitScan], None]


def _metadata(_: Mapping[str, Any], scan: CommitScan) -> None:
    scan.actions.add(scan.metadata_action)


def _set_location(_: Mapping[str, Any], scan: CommitScan) -> None:
    """Moving an existing table's files root lets its next commits adopt files it never wrote
    (another table's): that is ``REGISTER_TABLE``'s power. A create's location is judged by the
    gate against the location the catalog would assign (``proxy.gate.evidence``)."""
    scan.actions.add(scan.metadata_action)
    if not scan.creating:
        scan.actions.add(Action.REGISTER_TABLE)


RETENTION_PREFIX = "history.expire."
"""Table properties that say how long snapshots and refs live (``max-snapshot-age-ms``,
``min-snapshots-to-keep``, ``max-ref-age-ms``): Java's and Spark's snapshot expiry read them."""
GC_ENABLED = "gc.enabled"
"""A table property that, true (its default), lets expiry and purges delete the table's files."""


def _set_properties(update: Mapping[str, Any], scan: CommitScan) -> None:
    """Properties are ALTER; the ones that name a files root also need ``REGISTER_TABLE``, and
    the ones that decide how long history lives ``MANAGE_SNAPSHOTS``."""
    scan.actions.add(scan.metadata_action)
    updates = update.get("updates")
    if not isinstance(updates, Mapping):
        return
    if any(p in updates for p in LOCATION_PROPERTIES):
        scan.actions.add(Action.REGISTER_TABLE)
    if any(_retention(key) for key in updates):
        scan.actions.add(Action.MANAGE_SNAPSHOTS)


def _remove_properties(update: Mapping[str, Any], scan: CommitScan) -> None:
    """ALTER; removing a retention property (its default may be shorter) is ``MANAGE_SNAPSHOTS``
    as setting one is."""
    scan.actions.add(scan.metadata_action)
    removals = update.get("removals")
    if isinstance(removals, list) and any(_retention(k) for k in removals):
        scan.actions.add(Action.MANAGE_SNAPSHOTS)


def _retention(key: Any) -> bool:
    """Whether a table property decides when the next expiry may drop snapshots or refs:
    shortening it lets a routine expiry erase history (refs' own settings: ``commits.refs``)."""
    return isinstance(key, str) and (key.startswith(RETENTION_PREFIX) or key == GC_ENABLED)


def _assign_uuid(_: Mapping[str, Any], scan: CommitScan) -> None:
    scan.actions.update({Action.CREATE_TABLE} if scan.creating else TABLE_ACTIONS)


def _add_snapshot(update: Mapping[str, Any], scan: CommitScan) -> None:
    snapshot = parse_snapshot(update.get("snapshot"))
    scan.added[snapshot.snapshot_id] = snapshot


def _set_snapshot_ref(update: Mapping[str, Any], scan: CommitScan) -> None:
    target = require_id(update.get("snapshot-id"), "set-snapshot-ref snapshot-id")
    name = _ref_name(update)
    scan.refs[name] = target
    scan.ref_settings[name] = update


def _remove_snapshot_ref(update: Mapping[str, Any], scan: CommitScan) -> None:
    name = _ref_name(update)
    scan.refs[name] = None
    scan.reset_refs.add(name)


def _remove_snapshots(update: Mapping[str, Any], scan: CommitScan) -> None:
    ids = update.get("snapshot-ids")
    if not isinstance(ids, list):
        raise UnverifiableCommit("remove-snapshots needs a list of snapshot-ids")
    scan.removed_snapshots.update(require_id(i, "remove-snapshots id") for i in ids)
    scan.actions.add(Action.MANAGE_SNAPSHOTS)


STATISTICS_FILE = "statistics file"
"""What ``referenced_files`` calls a statistics file (``held`` checks them)."""


def _set_statistics(update: Mapping[str, Any], scan: CommitScan) -> None:
    scan.actions.add(Action.REWRITE)
    for key in ("statistics", "partition-statistics"):
        statistics = update.get(key)
        path = statistics.get("statistics-path") if isinstance(statistics, dict) else None
        if isinstance(path, str):
            scan.referenced_files.append((STATISTICS_FILE, path))


def _remove_statistics(update: Mapping[str, Any], scan: CommitScan) -> None:
    snapshot_id = optional_id(update.get("snapshot-id"), "remove-statistics snapshot-id")
    if snapshot_id is None:
        scan.actions.add(Action.REWRITE)
    else:
        scan.removed_statistics.add(snapshot_id)


def _add_encryption_key(_: Mapping[str, Any], scan: CommitScan) -> None:
    scan.adds_key = True


def _remove_encryption_key(_: Mapping[str, Any], scan: CommitScan) -> None:
    scan.actions.update({Action.ALTER, Action.DELETE})


def _ref_name(update: Mapping[str, Any]) -> str:
    name = update.get("ref-name")
    if not isinstance(name, str) or not name:
        raise UnverifiableCommit(f"{update.get('action')} needs a ref-name")
    return name


UPDATE_CLASSIFIERS: Mapping[str, Classifier] = {
    "assign-uuid": _assign_uuid,
    "upgrade-format-version": _metadata,
    "add-schema": _metadata,
    "set-current-schema": _metadata,
    "add-spec": _metadata,
    "set-default-spec": _metadata,
    "add-sort-order": _metadata,
    "set-default-sort-order": _metadata,
    "set-location": _set_location,
    "set-properties": _set_properties,
    "remove-properties": _remove_properties,
    "remove-partition-specs": _metadata,
    "remove-schemas": _metadata,
    "add-snapshot": _add_snapshot,
    "set-snapshot-ref": _set_snapshot_ref,
    "remove-snapshot-ref": _remove_snapshot_ref,
    "remove-snapshots": _remove_snapshots,
    "set-statistics": _set_statistics,
    "set-partition-statistics": _set_statistics,
    "remove-statistics": _remove_statistics,
    "remove-partition-statistics": _remove_statistics,
    "add-encryption-key": _add_encryption_key,
    "remove-encryption-key": _remove_encryption_key,
}


def apply_update(update: Any, scan: CommitScan) -> None:
    """Run the classifier for one raw update; an unknown action needs every table right."""
    if not isinstance(update, dict) or not isinstance(update.get("action"), str):
        raise UnverifiableCommit(f"every update needs an action, got {update!r:.100}")
    classifier = UPDATE_CLASSIFIERS.get(update["action"])
    if classifier is None:
        scan.unknown.append(update["action"])
        scan.actions.update(TABLE_ACTIONS)
        return
    classifier(update, scan)


def check_classification_complete(
        classifiers: Mapping[str, Classifier] = UPDATE_CLASSIFIERS) -> None:
    """Raise ``IncompleteClassification`` if a REST spec update action has no classifier."""
    missing = [action for action in SPEC_TABLE_UPDATES if action not in classifiers]
    if missing:
        raise IncompleteClassification(
            f"no commit classifier for update action(s): {', '.join(missing)}")
