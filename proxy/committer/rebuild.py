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
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Protocol

from pyiceberg.table.metadata import TableMetadata

from proxy.admission.admission import ClassifiedChange, DataOperationRequest
from proxy.backing.tables import TableState
from proxy.commits import UnverifiableCommit, classify_commit
from proxy.commits.compaction import as_of, rewrite_in_the_way, yielding_commit, yields_to_writers
from proxy.commits.limits import CommitLimits
from proxy.commits.operations import build_commit
from proxy.commits.rebase import (
    AppendShape,
    NotRebasable,
    appends_only,
    asserted_head,
    head_of,
    rebase_append,
    single_snapshot,
)
from proxy.commits.shape import updates_of
from proxy.commits.snapshots import added_snapshots
from proxy.commits.timeline import check_snapshot_order, commit_format
from proxy.errors import CommitFailed
from proxy.governance import Action


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
        return built_behind(body, self.shape.branch, state)

    def rebuild(self, body: Mapping[str, Any], state: TableState, now_ms: int) -> dict[str, Any]:
        same_table(body, state)
        if state.metadata.snapshot_by_id(self.shape.snapshot_id) is not None:
            raise CommitFailed("the commit's snapshot id is already in the table")
        try:
            rebased = rebase_append(body, self.shape, state.metadata, state.io, now_ms)
        except NotRebasable as exc:
            raise CommitFailed(f"the table changed and the append cannot be rebased: {exc}") \
                from exc
        reverify(self.change, rebased, state, self.limits, now_ms)
        return rebased



def built_behind(body: Mapping[str, Any], branch: str, state: TableState) -> bool:
    """Does ``body`` assert another head for ``branch`` than the one ``state`` has?"""
    return asserted_head(body, branch) != head_of(state.metadata, branch)


def same_table(body: Mapping[str, Any], state: TableState) -> None:
    """Refuse (409) to build on a table that replaced the one ``body`` was made for."""
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
        return built_behind(body, _branch_of(body), state)

    def rebuild(self, body: Mapping[str, Any], state: TableState, now_ms: int) -> dict[str, Any]:
        same_table(self.change.body, state)  # the uuid of the table it was first built for
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


@dataclass(frozen=True)
class YieldingRebuilder:
    """Lands a DELETE or UPDATE that lost its branch to a compaction (``commits.compaction``),
    on tables that opted in; any other move of the branch is the writer's conflict."""

    change: ClassifiedChange
    shape: AppendShape
    writer_base: int | None
    limits: CommitLimits

    def behind(self, body: Mapping[str, Any], state: TableState) -> bool:
        return built_behind(body, self.shape.branch, state)

    def rebuild(self, body: Mapping[str, Any], state: TableState, now_ms: int) -> dict[str, Any]:
        metadata = state.metadata
        same_table(self.change.body, state)
        if not yields_to_writers(metadata) or metadata.format_version != 2:
            raise CommitFailed("the table changed since the commit was made; retry")
        rewrite = rewrite_in_the_way(metadata, state.io, self.shape.branch, self.writer_base,
                                     self.limits)
        if rewrite is None:
            raise CommitFailed("the table changed since the commit was made; retry")
        original = self.change.body
        rebuilt = yielding_commit(original, self.shape, rewrite, metadata, state.io, now_ms)
        writer_only = {**rebuilt, "updates": rebuilt["updates"][1:],
                       "requirements": [{"type": "assert-ref-snapshot-id",
                                         "ref": self.shape.branch,
                                         "snapshot-id": self.writer_base}]}
        before = as_of(metadata, self.shape.branch, rewrite.parent_snapshot_id or 0)
        reverify(self.change, writer_only, replace(state, metadata=before), self.limits,
                 now_ms)
        self.change.report["compaction_yielded"] = {
            "rewrite_snapshot_id": rewrite.snapshot_id,
            "note": "the compaction was taken off the branch and must be rerun"}
        return rebuilt


def _branch_of(body: Mapping[str, Any]) -> str:
    [moved] = updates_of(body, "set-snapshot-ref")
    return str(moved.get("ref-name"))


def reverify(change: ClassifiedChange, body: Mapping[str, Any], state: TableState,
             limits: CommitLimits, now_ms: int) -> None:
    """Classify a rebuilt ``body`` against ``state``: it must need nothing the gate did not
    allow (``CommitFailed`` otherwise: nothing is sent, the client retries through the gate)."""
    check_snapshot_order(added_snapshots(body), state.metadata, now_ms,
                         format_version=commit_format(body, state.metadata))
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
    if shape is not None:
        return AppendRebuilder(change, shape, limits)
    return _yielding(change, body, base, limits)


def _yielding(change: ClassifiedChange, body: Mapping[str, Any], base: TableMetadata | None,
              limits: CommitLimits) -> Rebuilder | None:
    """A DELETE or UPDATE on a table whose compactions yield to writers."""
    if base is None or not yields_to_writers(base) or base.format_version != 2:
        return None
    if not change.intent.actions & {Action.DELETE, Action.UPDATE}:
        return None
    shape = single_snapshot(body)
    if shape is None:
        return None
    return YieldingRebuilder(change, shape, asserted_head(body, shape.branch), limits)
