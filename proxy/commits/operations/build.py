"""Building the standard commit that carries out a data operation on the branch head."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyiceberg.io import FileIO
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

from proxy.commits.intent import UnverifiableCommit
from proxy.commits.limits import CommitLimits
from proxy.commits.operations.conflicts import WindowChanges, validate
from proxy.commits.operations.head import HeadReader, branch_head, snapshots_since
from proxy.commits.operations.inputs import check_added_files
from proxy.commits.operations.plan import plan_operation
from proxy.commits.operations.readded import check_never_removed, check_new_to_table
from proxy.commits.operations.request import (
    APPEND,
    check_operation_shape,
    check_table_uuid,
    parse_operation,
)
from proxy.commits.operations.writer import write_snapshot

DEFAULT_LIMITS = CommitLimits()
_REF_RETENTION = (("max-ref-age-ms", "max_ref_age_ms"),
                  ("max-snapshot-age-ms", "max_snapshot_age_ms"),
                  ("min-snapshots-to-keep", "min_snapshots_to_keep"))


@dataclass(frozen=True)
class BuiltCommit:
    """A data operation turned into a standard REST table commit.

    ``body``: requirements ``assert-table-uuid`` and ``assert-ref-snapshot-id(branch, head)``,
    updates ``add-snapshot`` and ``set-snapshot-ref`` (plus the change's ``identifier``, if it
    had one). ``snapshot_id``: the snapshot it adds. ``start_snapshot_id``: the start of the
    conflict-validation window, to pass unchanged to every rebuild. ``retryable``: the build
    validated cleanly, so on a 409 (the head moved) it may be rebuilt on the fresh head.
    """

    body: dict[str, Any]
    snapshot_id: int
    start_snapshot_id: int | None
    operation: str
    retryable: bool = True


def starting_snapshot_id(body: Mapping[str, Any], metadata: TableMetadata) -> int | None:
    """Where the operation's validation window starts: its ``base-snapshot-id`` (null: the
    branch was empty), or when left out the branch head now. Call it once, before the first
    build, and pass the same value to every rebuild (shape-checked ``body`` only)."""
    update = body["updates"][0]
    if "base-snapshot-id" in update:
        base = update["base-snapshot-id"]
        return base if isinstance(base, int) else None
    head = branch_head(metadata, update.get("branch", "main"))
    return head.snapshot_id if head is not None else None


def build_commit(body: Mapping[str, Any], metadata: TableMetadata, io: FileIO, *,
                 start_snapshot_id: int | None, now_ms: int,
                 limits: CommitLimits = DEFAULT_LIMITS,
                 snapshot_id: int | None = None) -> BuiltCommit:
    """Validate the data operation in ``body`` against the table and what happened on its
    branch since ``start_snapshot_id``, write its manifests and manifest list, and return the
    standard commit. Bad input: ``UnverifiableCommit`` (400; ``PayloadTooLarge`` 413); a
    conflict: ``CommitFailed`` (409). Nothing is committed here. A rebuild passes the
    ``snapshot_id`` of the first build: every try of one operation adds the same snapshot, so at
    most one of them can land (a try whose outcome was lost may still land later). Without
    ``snapshot_id``, the operation's own ``snapshot-id`` is used (a client retrying a request
    whose answer it lost sends the same id), else a fresh one; an id already in the table is
    refused (400)."""
    check_operation_shape(body, limits)
    if metadata.format_version > 2:
        raise UnverifiableCommit("data operations on format-3 tables are not supported yet")
    operation = parse_operation(body, metadata)
    check_table_uuid(operation, metadata)
    snapshot_id = _snapshot_id(snapshot_id, operation.snapshot_id, metadata)
    head = branch_head(metadata, operation.branch)
    window = snapshots_since(metadata, start_snapshot_id, head)
    added = (*operation.added_data, *operation.added_deletes)
    check_added_files(added, metadata, io, limits)
    reader = HeadReader(metadata, io, limits)
    changes = WindowChanges.read(window, reader) if operation.action != APPEND \
        else WindowChanges()
    plan, removed_data = plan_operation(operation, head, reader, changes, metadata)
    check_new_to_table(added, head, window, reader)  # after the plan read what it needed
    check_never_removed(added, metadata, io)
    validate(operation, changes, metadata, removed_data)
    snapshot = write_snapshot(plan, metadata, io, snapshot_id=snapshot_id,
                              timestamp_ms=_timestamp(metadata, head, now_ms))
    commit = _commit_body(body, metadata, operation.branch, head, snapshot)
    return BuiltCommit(commit, snapshot_id, start_snapshot_id, plan.operation)


def _commit_body(body: Mapping[str, Any], metadata: TableMetadata, branch: str,
                 head: Snapshot | None, snapshot: dict[str, Any]) -> dict[str, Any]:
    ref: dict[str, Any] = {"action": "set-snapshot-ref", "ref-name": branch, "type": "branch",
                           "snapshot-id": snapshot["snapshot-id"]}
    existing = metadata.refs.get(branch)
    for key, name in _REF_RETENTION:  # a ref set without them would lose its retention
        value = getattr(existing, name, None) if existing is not None else None
        if value is not None:
            ref[key] = value
    commit: dict[str, Any] = {
        "requirements": [
            {"type": "assert-table-uuid", "uuid": str(metadata.table_uuid)},
            {"type": "assert-ref-snapshot-id", "ref": branch,
             "snapshot-id": head.snapshot_id if head is not None else None},
        ],
        "updates": [{"action": "add-snapshot", "snapshot": snapshot}, ref],
    }
    if "identifier" in body:
        commit = {"identifier": body["identifier"], **commit}
    return commit


def _snapshot_id(given: int | None, requested: int | None, metadata: TableMetadata) -> int:
    """The id the built snapshot gets: the one ``build_commit`` was given, else the
    operation's own ``snapshot-id``, else a fresh one. It must not be in the table."""
    chosen = given if given is not None else requested
    if chosen is None:
        return _fresh_snapshot_id(metadata)
    if metadata.snapshot_by_id(chosen) is not None:
        raise UnverifiableCommit(f"snapshot-id {chosen} already exists in the table")
    return chosen


def _fresh_snapshot_id(metadata: TableMetadata) -> int:
    taken = {s.snapshot_id for s in metadata.snapshots}
    while True:
        candidate = uuid.uuid4().int >> 65  # 63 random bits: a positive long
        if candidate and candidate not in taken:
            return candidate


def _timestamp(metadata: TableMetadata, head: Snapshot | None, now_ms: int) -> int:
    """``now_ms``, but never before the snapshot log's last entry or the head."""
    logged = max((e.timestamp_ms for e in metadata.snapshot_log), default=0)
    return max(now_ms, logged, head.timestamp_ms if head is not None else 0)
