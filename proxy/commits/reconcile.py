"""Did a commit land? Asked of the table's state after the backing's answer was lost.

A commit whose outcome is unknown (a timeout, a reset, a 5xx) is judged from the table as it is
now, never guessed:

- a commit that adds snapshots landed when every snapshot it adds is in the table *with a
  manifest list this request sent* (a catalog applies a commit whole; a snapshot id alone is
  not proof: another commit may have used the same id, and its files are not the caller's).
  When none of its ids is there, it has not landed *yet* (``ABSENT``). When its ids are there
  but none with a manifest list this request sent, another commit holds them: this one never
  landed and never can (a duplicate ``add-snapshot`` is refused), so it is ``TAKEN``, a
  conflict. Any other mix cannot happen for an atomic commit, so it is ``UNKNOWN``;
- a commit that adds none landed when every state it asks for holds now (a property set to its
  value, a ref at its snapshot, a schema current, …). Anything icegov cannot check this way makes
  the outcome ``UNKNOWN``.

``ABSENT`` is not proof that the commit will never land (the backing may still be applying it):
only a commit that keeps its snapshot-id (so at most one of its tries can land) may be retried.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from enum import Enum
from typing import Any

from pyiceberg.table.metadata import TableMetadata

from proxy.commits.classify import creates_table
from proxy.commits.shape import updates_of
from proxy.commits.snapshots import added_snapshots


class Outcome(Enum):
    """What the table shows of a commit."""

    LANDED = "landed"
    ABSENT = "absent"
    TAKEN = "taken"
    UNKNOWN = "unknown"


SentLists = Mapping[int, Collection[str]]
"""Per snapshot id, every manifest list a request sent for it (its tries, rebuilt or not)."""


def outcome_of(body: Mapping[str, Any], current: TableMetadata | None,
               sent: SentLists | None = None) -> Outcome:
    """``body``'s outcome as ``current`` (None: the table does not exist) shows it. ``sent``:
    the manifest lists each snapshot id was sent with (default: the ones ``body`` names)."""
    if current is None:
        return Outcome.ABSENT if creates_table(body) else Outcome.UNKNOWN
    if creates_table(body):  # the uuid it assigns is its identity
        uuids = [u.get("uuid") for u in updates_of(body, "assign-uuid")]
        landed = bool(uuids) and str(current.table_uuid) == uuids[-1]
        return Outcome.LANDED if landed else Outcome.UNKNOWN
    snapshots = added_snapshots(body)
    if snapshots:
        lists = sent if sent is not None else {s.snapshot_id: (s.manifest_list,)
                                               for s in snapshots}
        return _snapshots_outcome(current, {s.snapshot_id: lists.get(s.snapshot_id, ())
                                            for s in snapshots})
    updates = [u for u in body.get("updates") or [] if isinstance(u, Mapping)]
    if updates and all(_holds(u, current) for u in updates):
        return Outcome.LANDED
    return Outcome.UNKNOWN


def _snapshots_outcome(current: TableMetadata, wanted: SentLists) -> Outcome:
    """LANDED when every id is in the table with one of its sent manifest lists; ABSENT when
    none is there; TAKEN when every one there is another commit's; otherwise UNKNOWN."""
    found = {i: current.snapshot_by_id(i) for i in wanted}
    ours = [s is not None and s.manifest_list in wanted[i] for i, s in found.items()]
    present = [s is not None for s in found.values()]
    if all(ours):
        return Outcome.LANDED
    if not any(present):
        return Outcome.ABSENT
    return Outcome.TAKEN if not any(ours) else Outcome.UNKNOWN


def _holds(update: Mapping[str, Any], current: TableMetadata) -> bool:
    check = _CHECKS.get(str(update.get("action")))
    try:
        return check is not None and check(update, current)
    except (TypeError, ValueError, AttributeError, KeyError):
        return False


def _properties_set(update: Mapping[str, Any], current: TableMetadata) -> bool:
    wanted = update.get("updates")
    return isinstance(wanted, Mapping) and all(
        current.properties.get(k) == v for k, v in wanted.items())


def _properties_removed(update: Mapping[str, Any], current: TableMetadata) -> bool:
    removed = update.get("removals")
    return isinstance(removed, list) and all(k not in current.properties for k in removed)


def _ref_set(update: Mapping[str, Any], current: TableMetadata) -> bool:
    ref = current.refs.get(str(update.get("ref-name")))
    return (ref is not None and ref.snapshot_id == update.get("snapshot-id")
            and ref.snapshot_ref_type.value == update.get("type"))


def _ref_removed(update: Mapping[str, Any], current: TableMetadata) -> bool:
    return str(update.get("ref-name")) not in current.refs


def _snapshots_removed(update: Mapping[str, Any], current: TableMetadata) -> bool:
    ids = update.get("snapshot-ids")
    return isinstance(ids, list) and all(current.snapshot_by_id(i) is None for i in ids)


def _location_set(update: Mapping[str, Any], current: TableMetadata) -> bool:
    return bool(current.location == update.get("location"))


def _schema_current(update: Mapping[str, Any], current: TableMetadata) -> bool:
    wanted = update.get("schema-id")
    return isinstance(wanted, int) and wanted >= 0 and current.current_schema_id == wanted


def _spec_default(update: Mapping[str, Any], current: TableMetadata) -> bool:
    wanted = update.get("spec-id")
    return isinstance(wanted, int) and wanted >= 0 and current.default_spec_id == wanted


def _order_default(update: Mapping[str, Any], current: TableMetadata) -> bool:
    wanted = update.get("sort-order-id")
    return isinstance(wanted, int) and wanted >= 0 and current.default_sort_order_id == wanted


def _format_upgraded(update: Mapping[str, Any], current: TableMetadata) -> bool:
    wanted = update.get("format-version")
    return isinstance(wanted, int) and current.format_version >= wanted


_CHECKS: dict[str, Callable[[Mapping[str, Any], TableMetadata], bool]] = {
    "set-properties": _properties_set,
    "remove-properties": _properties_removed,
    "set-snapshot-ref": _ref_set,
    "remove-snapshot-ref": _ref_removed,
    "remove-snapshots": _snapshots_removed,
    "set-location": _location_set,
    "set-current-schema": _schema_current,
    "set-default-spec": _spec_default,
    "set-default-sort-order": _order_default,
    "upgrade-format-version": _format_upgraded,
}
"""Updates whose requested state can be read off the table (others make the outcome unknown)."""
