"""The heads this replica's own commits left, to judge the next commit on without a loadTable.

After a commit lands, the table's queue slot (``committer.queue``) goes away with its last waiter; a
sequential appender's next commit would load the base from the backing again (a round trip and a
metadata parse that grow with the table). ``KnownHeads`` keeps, per table, the state a landed
commit left: the state it was judged on with its own updates applied (only for a plain append to
a branch of a v1/v2 table — one ``add-snapshot`` and the ``set-snapshot-ref`` to it; any other
commit forgets the table). The gate judges the next commit of that table on it when

- it is **young**: the information in it was observed at the backing (a fresh loadTable: the
  oldest part of it) at most ``seconds`` ago (default 2 s; 0 turns this off);
- the commit's own requirements all hold on it (a client that asserts another head, schema or
  spec knows of a change this replica did not see: the base is loaded);
- the change is a plain commit (icegov builds data operations on a fresh load) and not a create.

Otherwise the base is loaded as before. A commit in flight to a table forgets its head first.

**Pinning.** A commit judged on a known head carries a requirement for everything it was judged
on that a requirement can assert (``pinning``): the table uuid, the current schema id, the last
assigned field id, the default spec id, the last assigned partition id, the default sort order
id, ``main`` and every ref the commit moves. The backing's compare-and-swap refuses it (409,
nothing landed) if any of these moved, whoever moved them; so a commit never lands on a head
whose schema, specs, sort order, refs or identity differ from what it was judged on.

**What cannot be asserted**: table properties (the location properties confinement reads, the
name mapping the footer checks read, ``icegov.compaction.yield-to-writers``), the table location,
the format version, snapshots added to no ref or expired, statistics and encryption keys. A
fresh load has the same gap, for the milliseconds between the load and the commit: a property
change landing there goes unseen, and the outcome is the serial order "commit, then change".
A known head widens that window to at most ``seconds`` after the load it descends from (its age
is the load's, not the last commit's: a chain of appends never extends it), and only for changes
made *elsewhere* (another replica or worker, or straight at the backing) — every commit through
this replica forgets or replaces the head. A snapshot added elsewhere to no ref (staged) is
caught in format v2 by the backing itself, which refuses a snapshot whose sequence number is not
above its last one; in format v1 it goes unseen within the window like a property change (the
judgement then misses only what that snapshot removed, for the revival check). An expired
snapshot only makes the judgement on the head stricter (more history to be checked against).

**Answers.** A commit judged on a known head is never answered 409 on that judgement. A 409
from the backing means a pin (or the client's own requirement) failed; the committer reloads
the table. When every change is a pure append (or other rebuildable change) whose branch moved,
it goes on exactly as a freshly judged one would: rebuilt on the reloaded head, classified again
there, and sent with the usual pins only (uuid and refs). Otherwise it raises ``Rejudge``: the
gate judges the request again on a fresh load (the head forgotten) and it is sent again, as if
it had just arrived. A real conflict the client caused is then answered from that fresh try, as
before; a head that was merely stale costs one more classification.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic import ValidationError
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    SetSnapshotRefUpdate,
    _apply_table_update,
    _TableMetadataUpdateContext,
)

from proxy.backing.tables import TableState
from proxy.commits.lru import SizedLru
from proxy.committer.queue import TableKey
from proxy.errors import IcebergError
from proxy.resources import Resource

Clock = Callable[[], float]
_WEIGHT_KEPT = 200_000  # a head weighs its snapshots plus 500: at most 400 tables' heads
_HEAD_WEIGHT = 500


def key_of(resource: Resource) -> TableKey:
    """The table's key in the queue and among the known heads: its exact name."""
    return (resource.catalog, tuple(resource.namespace), resource.table or "")


class Rejudge(Exception):
    """A commit judged on a known head was refused (409): judge it again on a fresh load."""


@dataclass(frozen=True)
class KnownHead:
    """A table's state as this replica's last commit to it left it."""

    state: TableState
    observed_at: float  # when its oldest part was loaded from the backing (``clock``)


class KnownHeads:
    """The known heads of this replica's tables, by exact table name: each weighs its snapshots
    plus 500, at most 200,000 in all (so at most 400 tables, and fewer of large ones)."""

    def __init__(self, seconds: float, clock: Clock = time.monotonic) -> None:
        self._seconds = seconds
        self._clock = clock
        self._heads: SizedLru[TableKey, KnownHead] = SizedLru(
            _WEIGHT_KEPT, lambda head: len(head.state.metadata.snapshots) + _HEAD_WEIGHT)

    @property
    def clock(self) -> Clock:
        return self._clock

    def usable(self, key: TableKey, body: Mapping[str, Any]) -> KnownHead | None:
        """The table's known head if the commit ``body`` may be judged on it (see the module's
        docstring), else None."""
        if self._seconds <= 0:
            return None
        head = self._heads.get(key)
        if head is None or self._clock() - head.observed_at > self._seconds:
            return None
        return head if requirements_hold(body, head.state.metadata) else None

    def forget(self, key: TableKey) -> None:
        """A commit to the table is in flight, or left a head icegov does not derive."""
        self._heads.pop(key)

    def learn(self, key: TableKey, base: TableState, body: Mapping[str, Any],
              observed_at: float) -> None:
        """``body`` landed on ``base`` (whose oldest part was loaded at ``observed_at``)."""
        if self._seconds <= 0:
            return
        metadata = appended(base.metadata, body)
        if metadata is None:
            self.forget(key)
            return
        self._heads.put(key, KnownHead(replace(base, metadata=metadata, document=None,
                                               metadata_location=None), observed_at))


def appended(base: TableMetadata, body: Mapping[str, Any]) -> TableMetadata | None:
    """``base`` with a plain append's two updates applied as the backing applies them (None for
    any other commit, or one pyiceberg's rules refuse)."""
    updates = body.get("updates")
    if base.format_version > 2 or not isinstance(updates, list) or len(updates) != 2:
        return None
    try:
        added = AddSnapshotUpdate.model_validate(updates[0])
        moved = SetSnapshotRefUpdate.model_validate(updates[1])
    except ValidationError:
        return None
    if moved.type != SnapshotRefType.BRANCH or moved.snapshot_id != added.snapshot.snapshot_id:
        return None
    context = _TableMetadataUpdateContext()
    try:
        return _apply_table_update(moved, _apply_table_update(added, base, context), context)
    except (ValueError, IcebergError):
        return None


def requirements_hold(body: Mapping[str, Any], metadata: TableMetadata) -> bool:
    """Do all of ``body``'s requirements hold on ``metadata``? (An unknown one: no.)"""
    requirements = body.get("requirements") or []
    if not isinstance(requirements, list):
        return False
    return all(isinstance(r, dict) and _holds(r, metadata) for r in requirements)


def _holds(requirement: Mapping[str, Any], metadata: TableMetadata) -> bool:
    kind = requirement.get("type")
    if kind == "assert-table-uuid":
        return requirement.get("uuid") == str(metadata.table_uuid)
    if kind == "assert-ref-snapshot-id":
        ref = metadata.refs.get(str(requirement.get("ref")))
        return requirement.get("snapshot-id") == (None if ref is None else ref.snapshot_id)
    field = _ASSERTED.get(str(kind))
    if field is None:
        return False  # assert-create, or a requirement icegov does not know
    name, value = field
    return _same_int(requirement.get(name), value(metadata))


_ASSERTED: dict[str, tuple[str, Callable[[TableMetadata], int | None]]] = {
    "assert-current-schema-id": ("current-schema-id", lambda m: m.current_schema_id),
    "assert-last-assigned-field-id": ("last-assigned-field-id", lambda m: m.last_column_id),
    "assert-default-spec-id": ("default-spec-id", lambda m: m.default_spec_id),
    "assert-last-assigned-partition-id": ("last-assigned-partition-id",
                                          lambda m: m.last_partition_id),
    "assert-default-sort-order-id": ("default-sort-order-id", lambda m: m.default_sort_order_id),
}
"""Requirement type -> (its field, the metadata value it asserts)."""


def head_pins(metadata: TableMetadata, moved: Sequence[str]) -> list[dict[str, Any]]:
    """The requirements pinning a commit to everything assertable of ``metadata`` it was
    judged on: uuid, schema, field ids, spec, partition ids, sort order, ``main`` and the refs
    in ``moved``."""
    pins: list[dict[str, Any]] = [{"type": "assert-table-uuid", "uuid": str(metadata.table_uuid)}]
    for kind, (name, value) in _ASSERTED.items():
        pins.append({"type": kind, name: value(metadata)})
    for ref in dict.fromkeys(["main", *moved]):
        current = metadata.refs.get(ref)
        pins.append({"type": "assert-ref-snapshot-id", "ref": ref,
                     "snapshot-id": None if current is None else current.snapshot_id})
    return pins


def _same_int(asserted: Any, value: int | None) -> bool:
    return (asserted is None and value is None) or (
        isinstance(asserted, int) and not isinstance(asserted, bool) and asserted == value)
