"""Rebase a pure append onto a newer head of its branch, as Iceberg's own client would retry it.

An append verified INSERT-only (``appends_only``) adds data files and changes nothing else, so it
can land on any later state of its branch without changing its meaning. ``rebase_append`` builds
the commit anew on ``head``:

- the client's snapshot-id is kept (a duplicate ``add-snapshot`` is refused by the catalog: that
  is what makes a retry after an unknown outcome safe), ``parent-snapshot-id`` is the head,
  ``sequence-number`` the table's last plus one, ``timestamp-ms`` no earlier than now;
- the manifest list is written anew (``operations.writer``, as icegov's own data operations
  are): a manifest holding only the snapshot's ADDED entries (Spark's MergeAppend may have merged
  parent manifests into its new ones: those EXISTING entries would be listed twice next to the
  head's own manifests), then every manifest of the head;
- the summary's counters are recounted from the entries and the head's totals; the client's
  other summary properties are kept;
- the ref assertion becomes the head, so the catalog refuses it (409) if the branch moves again.

Format v3 appends are not rebased (``appends_only`` says no): pyiceberg writes v1/v2 manifest lists
only, and a v3 rebase must also assign row lineage. They pass through as the client sent them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    DataFile,
    ManifestContent,
    ManifestEntryStatus,
    read_manifest_list,
)
from pyiceberg.table.metadata import TableMetadata

from proxy.commits.intent import CommitIntent
from proxy.commits.operations.writer import SnapshotPlan, write_snapshot
from proxy.commits.shape import updates_of
from proxy.governance import Action

_REQUIREMENTS = frozenset({"assert-table-uuid", "assert-ref-snapshot-id"})
_COUNTERS = ("added-", "deleted-", "removed-", "total-", "changed-partition")  # recounted


class NotRebasable(Exception):
    """The commit cannot be rebased after all (its files say more than an append)."""


@dataclass(frozen=True)
class AppendShape:
    """Where a pure append goes: its branch and its one new snapshot (raw JSON)."""

    branch: str
    snapshot: Mapping[str, Any]

    @property
    def snapshot_id(self) -> int:
        return int(self.snapshot["snapshot-id"])


def appends_only(body: Mapping[str, Any], intent: CommitIntent,
                 base: TableMetadata | None) -> AppendShape | None:
    """The append's shape when the commit is a pure append icegov may rebase, else None.

    Pure: verified INSERT-only from its manifests (no deletes, nothing removed), exactly one
    ``add-snapshot`` and one ``set-snapshot-ref`` moving a branch to it, no other update, and
    only table-uuid and ref assertions (any other requirement says the client cares about more
    than its branch's head). Tables of format v3 and new tables are never rebased.
    """
    if base is None or base.format_version > 2 or intent.actions != {Action.INSERT}:
        return None
    evidence = intent.evidence
    counts = evidence.counts
    if (evidence.classification != "INSERT" or not evidence.verified or counts.added_delete_files
            or counts.removed_data_files or counts.removed_delete_files):
        return None
    return single_snapshot(body)


def single_snapshot(body: Mapping[str, Any]) -> AppendShape | None:
    """The branch and snapshot of a commit that adds one snapshot and moves one branch to it,
    and asserts nothing but the table's uuid and that branch's head; None for any other
    commit."""
    updates = [u for u in body.get("updates") or []]
    if len(updates) != 2 or any(r.get("type") not in _REQUIREMENTS
                                for r in body.get("requirements") or []):
        return None
    added, moved = updates_of(body, "add-snapshot"), updates_of(body, "set-snapshot-ref")
    if len(added) != 1 or len(moved) != 1 or not isinstance(added[0].get("snapshot"), dict):
        return None
    snapshot, moved_ref = added[0]["snapshot"], moved[0]
    if (moved_ref.get("type") != "branch"
            or moved_ref.get("snapshot-id") != snapshot.get("snapshot-id")):
        return None
    branch = moved_ref.get("ref-name")
    if not isinstance(branch, str) or any(
            r.get("type") == "assert-ref-snapshot-id" and r.get("ref") != branch
            for r in body.get("requirements") or []):
        return None  # it cares about another ref too: a rebuild could never satisfy that
    return AppendShape(branch, snapshot)


def head_of(metadata: TableMetadata, branch: str) -> int | None:
    """The snapshot ``branch`` is at in ``metadata`` (None: the branch does not exist)."""
    ref = metadata.refs.get(branch)
    return None if ref is None else ref.snapshot_id


def asserted_head(body: Mapping[str, Any], branch: str) -> int | None:
    """The value the commit asserts for ``branch`` (its last ``assert-ref-snapshot-id``)."""
    value = None
    for requirement in body.get("requirements") or []:
        if requirement.get("type") == "assert-ref-snapshot-id" and requirement.get("ref") == branch:
            value = requirement.get("snapshot-id")
    return value if isinstance(value, int) else None


def rebase_append(body: Mapping[str, Any], shape: AppendShape, head: TableMetadata, io: FileIO,
                  now_ms: int) -> dict[str, Any]:
    """``body`` rebuilt on ``head`` (see the module doc); writes one manifest and one list."""
    head_id = head_of(head, shape.branch)
    parent = None if head_id is None else head.snapshot_by_id(head_id)
    if head_id is not None and parent is None:
        raise NotRebasable("the branch's head snapshot is missing from the table's metadata")
    kept = [] if parent is None else list(parent.manifests(io))
    plan = SnapshotPlan("append", parent, kept=kept, added=tuple(_added_entries(io, shape)))
    if not plan.added:
        raise NotRebasable("the append adds no data file")
    stamp = max(int(shape.snapshot.get("timestamp-ms") or 0), now_ms)
    snapshot = write_snapshot(plan, head, io, snapshot_id=shape.snapshot_id, timestamp_ms=stamp)
    claimed = shape.snapshot.get("summary") or {}
    snapshot["summary"] = {**{str(k): str(v) for k, v in claimed.items()
                              if not str(k).startswith(_COUNTERS)}, **snapshot["summary"]}
    if "schema-id" in shape.snapshot:
        snapshot["schema-id"] = shape.snapshot["schema-id"]
    requirements = [r for r in body.get("requirements") or []
                    if not (r.get("type") == "assert-ref-snapshot-id"
                            and r.get("ref") == shape.branch)]
    requirements.append({"type": "assert-ref-snapshot-id", "ref": shape.branch,
                         "snapshot-id": head_id})
    updates = [{**u, "snapshot": snapshot} if u.get("action") == "add-snapshot" else dict(u)
               for u in body.get("updates") or []]
    return {**body, "requirements": requirements, "updates": updates}


def _added_entries(io: FileIO, shape: AppendShape) -> list[DataFile]:
    """The data files the snapshot adds (ADDED entries of its own manifests)."""
    files: list[DataFile] = []
    for manifest in read_manifest_list(io.new_input(str(shape.snapshot["manifest-list"]))):
        if manifest.added_snapshot_id != shape.snapshot_id:
            continue
        if manifest.content != ManifestContent.DATA:
            raise NotRebasable("the append's manifests hold delete files")
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
            if entry.status == ManifestEntryStatus.ADDED:
                files.append(entry.data_file)
            elif entry.status == ManifestEntryStatus.DELETED:
                raise NotRebasable("the append's manifests delete files")
    return files
