"""Added snapshots as the commit claims them, and which state each one replaces.

A ref moved to a snapshot added in the commit is followed down that snapshot's chain of parents
(through other snapshots added in the same commit) to the first one whose parent is not new. That
bottom snapshot replaces the ref's state before the commit: the value asserted with
``assert-ref-snapshot-id`` for that ref, else the ref's value in the base metadata. Its declared
parent must be that predecessor: a snapshot built on a stale, foreign or missing parent (``null``
while the ref is at X) would give the table a lineage, and sequence numbers, that its history does
not have, so the commit is refused (``UnverifiableCommit``, 400). Every honest writer builds on
the ref's head and asserts it (pyiceberg, Java). A ref that does not exist yet, or that the commit
removes before setting it again (create or replace), has no predecessor: it forks from the bottom
snapshot's parent. Snapshots no ref ends on (staged, e.g. write-audit-publish) are measured
against their declared parent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from proxy.commits.intent import UnverifiableCommit
from proxy.commits.shape import updates_of


@dataclass(frozen=True)
class ClaimedSnapshot:
    """The fields of an ``add-snapshot`` that verification needs, parsed from raw JSON."""

    snapshot_id: int
    parent_id: int | None
    manifest_list: str
    summary: Mapping[str, str] = field(default_factory=dict)
    timestamp_ms: int = 0
    sequence_number: int = 0  # absent in v1 (and written only when positive)
    first_row_id: int | None = None  # format 3: the first row id it assigns (``lineage``)
    added_rows: int | None = None  # format 3: how many row ids it assigns

    @property
    def operation(self) -> str | None:
        return self.summary.get("operation")


@dataclass(frozen=True)
class Step:
    """One snapshot to verify, and the snapshot whose state it replaces (None: no data)."""

    snapshot: ClaimedSnapshot
    before_id: int | None


@dataclass
class StepPlan:
    """The steps to verify, plus what the ref analysis found on the way."""

    steps: dict[tuple[int, int | None], Step] = field(default_factory=dict)
    forks: bool = False  # a ref starts at a snapshot it was not on: snapshot management
    replaces: bool = False  # a ref's previous state is dropped wholesale (create or replace)

    def add(self, snapshot: ClaimedSnapshot, before_id: int | None) -> None:
        self.steps.setdefault((snapshot.snapshot_id, before_id), Step(snapshot, before_id))

    def covers(self, snapshot_id: int) -> bool:
        return any(key[0] == snapshot_id for key in self.steps)


def parse_snapshot(raw: Any) -> ClaimedSnapshot:
    """An ``add-snapshot``'s ``snapshot`` object; malformed ones are unverifiable."""
    if not isinstance(raw, dict):
        raise UnverifiableCommit("add-snapshot has no snapshot object")
    manifest_list = raw.get("manifest-list")
    if not isinstance(manifest_list, str) or not manifest_list:
        raise UnverifiableCommit("add-snapshot has no manifest-list: cannot verify its data")
    summary = raw.get("summary") or {}
    if not isinstance(summary, dict):
        raise UnverifiableCommit("add-snapshot summary must be an object")
    return ClaimedSnapshot(
        snapshot_id=require_id(raw.get("snapshot-id"), "add-snapshot snapshot-id"),
        parent_id=optional_id(raw.get("parent-snapshot-id"), "add-snapshot parent-snapshot-id"),
        manifest_list=manifest_list,
        summary={str(k): str(v) for k, v in summary.items()},
        timestamp_ms=require_id(raw.get("timestamp-ms"), "add-snapshot timestamp-ms"),
        sequence_number=optional_id(raw.get("sequence-number"),
                                    "add-snapshot sequence-number") or 0,
        first_row_id=optional_id(raw.get("first-row-id"), "add-snapshot first-row-id"),
        added_rows=optional_id(raw.get("added-rows"), "add-snapshot added-rows"),
    )


def added_snapshots(body: Mapping[str, Any]) -> list[ClaimedSnapshot]:
    """The snapshots a commit body adds, in commit order (for checks made before classifying)."""
    return [parse_snapshot(u.get("snapshot")) for u in updates_of(body, "add-snapshot")]


def require_id(value: Any, what: str) -> int:
    """A snapshot id (a JSON integer, not a boolean)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise UnverifiableCommit(f"{what} must be an integer, not {value!r:.40}")
    return value


def optional_id(value: Any, what: str) -> int | None:
    """A snapshot id or null."""
    return None if value is None else require_id(value, what)


def plan_steps(added: Mapping[int, ClaimedSnapshot], targets: Mapping[str, int],
               predecessors: Mapping[str, int | None]) -> StepPlan:
    """Steps for refs moved to new snapshots (``targets``), then for staged snapshots."""
    plan = StepPlan()
    for ref, target in targets.items():
        _plan_ref(plan, added, ref, target, predecessors.get(ref))
    for snapshot in added.values():
        if not plan.covers(snapshot.snapshot_id):
            plan.add(snapshot, snapshot.parent_id)
    return plan


def _plan_ref(plan: StepPlan, added: Mapping[int, ClaimedSnapshot], ref: str, target: int,
              predecessor: int | None) -> None:
    chain = _chain(added, target)
    bottom = chain[-1]
    for child, parent in pairwise(chain):
        plan.add(child, parent.snapshot_id)
    if predecessor is None:
        plan.forks = plan.forks or bottom.parent_id is not None
        plan.add(bottom, bottom.parent_id)
        return
    if bottom.parent_id != predecessor:
        named = "no parent" if bottom.parent_id is None else f"parent {bottom.parent_id}"
        raise UnverifiableCommit(
            f"cannot verify the commit: snapshot {bottom.snapshot_id} names {named}, but ref "
            f"{ref!r:.60} is at {predecessor}; a snapshot must be built on the ref's current "
            "snapshot")
    plan.add(bottom, predecessor)


def _chain(added: Mapping[int, ClaimedSnapshot], target: int) -> list[ClaimedSnapshot]:
    """``target`` and its ancestors added in this commit, newest first."""
    chain: list[ClaimedSnapshot] = []
    current = added.get(target)
    while current is not None and current not in chain:
        chain.append(current)
        current = None if current.parent_id is None else added.get(current.parent_id)
    return chain
