"""Which admitted changes icegov may build again on a newer state of their table, and how.

A change is rebuildable when its meaning does not depend on the state it was built on: a pure
append (``commits.rebase``), or a data operation icegov builds itself (``commits.operations``:
built again on the new head, its conflict rules checked against what landed meanwhile). Every
rebuilt change is classified again against the state it is built on and must need no right the
gate did not already allow; otherwise it is refused as a conflict (nothing landed) and the
client retries through the gate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from proxy.admission import ClassifiedChange, DataOperationRequest
from proxy.backing.tables import TableState
from proxy.commits import UnverifiableCommit, classify_commit
from proxy.commits.limits import CommitLimits
from proxy.commits.operations import build_commit
from proxy.commits.rebase import (
    AppendShape,
    NotRebasable,
    appends_only,
    asserted_head,
    head_of,
    rebase_append,
)
from proxy.commits.shape import updates_of
from proxy.commits.snapshots import added_snapshots
from proxy.commits.timeline import check_snapshot_order
from proxy.errors import CommitFailed


class Rebuilder(Protocol):
    """Builds one table's change anew on a newer state of the table."""

    def behind(self, body: Mapping[str, Any], state: TableState) -> bool:
        """Is ``body`` built on an older state than ``state``?"""

    def rebuild(self, body: Mapping[str, Any], state: TableState, now_ms: int) -> dict[str, Any]:
        """``body`` built on ``state`` and verified again; ``CommitFailed`` if it cannot be."""


@dataclass(frozen=True)
class AppendRebuilder:
    """Rebases a pure append (``commits.rebase``)."""

    change: ClassifiedChange
    shape: AppendShape
    limits: CommitLimits

    def behind(self, body: Mapping[str, Any], state: TableState) -> bool:
        branch = self.shape.branch
        return asserted_head(body, branch) != head_of(state.metadata, branch)

    def rebuild(self, body: Mapping[str, Any], state: TableState, now_ms: int) -> dict[str, Any]:
        self._same_table(body, state)
        if state.metadata.snapshot_by_id(self.shape.snapshot_id) is not None:
            raise CommitFailed("the commit's snapshot id is already in the table")
        try:
            rebased = rebase_append(body, self.shape, state.metadata, state.io, now_ms)
        except NotRebasable as exc:
            raise CommitFailed(f"the table changed and the append cannot be rebased: {exc}") \
                from exc
        reverify(self.change, rebased, state, self.limits, now_ms)
        return rebased

    @staticmethod
    def _same_table(body: Mapping[str, Any], state: TableState) -> None:
        asserted = [r.get("uuid") for r in body.get("requirements") or []
                    if r.get("type") == "assert-table-uuid"]
        if any(u != str(state.metadata.table_uuid) for u in asserted):
            raise CommitFailed("the table was replaced since the commit was made")


@dataclass(frozen=True)
class OperationRebuilder:
    """Builds a data operation again on the new head (``commits.operations``), with the same
    conflict window and snapshot id, so its conflict rules are checked against what landed."""

    change: ClassifiedChange
    operation: DataOperationRequest
    limits: CommitLimits

    def behind(self, body: Mapping[str, Any], state: TableState) -> bool:
        branch = _branch_of(body)
        return asserted_head(body, branch) != head_of(state.metadata, branch)

    def rebuild(self, body: Mapping[str, Any], state: TableState, now_ms: int) -> dict[str, Any]:
        if state.metadata.snapshot_by_id(self.operation.snapshot_id) is not None:
            raise CommitFailed("the commit's snapshot id is already in the table")
        try:
            built = build_commit(self.operation.body, state.metadata, state.io,
                                 start_snapshot_id=self.operation.start_snapshot_id,
                                 now_ms=now_ms, limits=self.limits,
                                 snapshot_id=self.operation.snapshot_id)
        except UnverifiableCommit as exc:  # e.g. a file it removes went away meanwhile
            raise CommitFailed(f"the table changed: {exc.message}") from exc
        reverify(self.change, built.body, state, self.limits, now_ms)
        return built.body


def _branch_of(body: Mapping[str, Any]) -> str:
    [moved] = updates_of(body, "set-snapshot-ref")
    return str(moved.get("ref-name"))


def reverify(change: ClassifiedChange, body: Mapping[str, Any], state: TableState,
             limits: CommitLimits, now_ms: int) -> None:
    """Classify a rebuilt ``body`` against ``state``: it must need nothing the gate did not
    allow (``CommitFailed`` otherwise: nothing is sent, the client retries through the gate)."""
    check_snapshot_order(added_snapshots(body), state.metadata, now_ms)
    try:
        intent = partial(classify_commit, limits=limits)(body, state.metadata, state.io)
    except UnverifiableCommit as exc:
        raise CommitFailed(f"the rebuilt commit could not be verified: {exc.message}") from exc
    if not intent.actions <= change.intent.actions:
        raise CommitFailed("on the table's new state the commit would need other rights; retry")
    change.report["rebased_classification"] = intent.evidence.classification


def rebuilder_for(change: ClassifiedChange, body: Mapping[str, Any],
                  limits: CommitLimits) -> Rebuilder | None:
    """How ``change`` (sent as ``body``) can be rebuilt, or None when it cannot."""
    if change.operation is not None:
        if not change.operation.retryable:
            return None
        return OperationRebuilder(change, change.operation, limits)
    base = None if change.base is None else change.base.metadata
    shape = appends_only(body, change.intent, base)
    return None if shape is None else AppendRebuilder(change, shape, limits)
