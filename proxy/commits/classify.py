"""Classify one table commit by what it really does: ``classify_commit``.

1. Every update goes through its classifier (``updates``); unknown actions need every right.
2. Refs are judged by their net effect. A ref that ends on a snapshot added by this commit is a
   data change, verified against the ref's state before the commit (``snapshots``); creating a
   ref other than ``main``, starting a ref from an existing snapshot, moving a tag, or changing
   the ref's type or retention settings on the way (``refs``), is MANAGE_SNAPSHOTS. A
   ref that ends on a snapshot the commit did not add (rollback, fast-forward, retention change)
   or is removed is MANAGE_SNAPSHOTS. A ref removed and then set to a new snapshot in the same
   commit (``CREATE OR REPLACE TABLE ... AS SELECT``) is replaced: its new snapshots are measured
   against nothing and all its previous rows are dropped, a DELETE (with any INSERT: UPDATE).
3. Each added snapshot is verified by reading the difference between its manifest list and its
   predecessor's (``diff``) and classified from that (``rules``); where the summary or the
   manifests' bookkeeping disagree with what the files show, the evidence says so. In a table of
   format 3 or later, the row ids it assigns must be the table's next ones (``lineage``).
4. Every file the snapshots add must be what its manifest entry claims (``footers``: present,
   of its size, a Parquet footer that agrees with the entry and the table's schemas).
5. The table's column dependencies (``dependency_rows``): a property the commit sets, or a
   schema it changes under one, must hold (400); rows it adds must hold them (400), and each
   snapshot whose rows were all checked gets a stamp (``CommitIntent.dependency_stamps``).

A commit that cannot be verified raises ``UnverifiableCommit`` (400).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestFile
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.types import StructType

from proxy.commits.confine import shown_path, table_locations
from proxy.commits.dependency_rows import check_added_rows, commit_dependencies
from proxy.commits.diff import SnapshotChange, diff_snapshot
from proxy.commits.footers import check_commit_files
from proxy.commits.held import (
    check_fresh_manifest_lists,
    check_statistics_files,
    held_keys,
    main_line,
    main_manifests,
)
from proxy.commits.index_property import check_index_property
from proxy.commits.intent import CommitEvidence, CommitIntent, FileCounts, UnverifiableCommit
from proxy.commits.limits import CommitLimits
from proxy.commits.lineage import expected_first_row_ids, row_lineage_changes
from proxy.commits.manifests import FileKey, ManifestReader, cache_scope
from proxy.commits.operations.specs import binding_schema
from proxy.commits.references import check_snapshot_references
from proxy.commits.refs import changes_ref_settings, moves_tag
from proxy.commits.rows import RowVerifier
from proxy.commits.rules import claim_disagreements, data_action, merge_data_actions
from proxy.commits.shape import DEFAULT_LIMITS, check_commit_shape
from proxy.commits.snapshots import StepPlan, optional_id, plan_steps
from proxy.commits.tombstones import removed_in_history, revival_reasons
from proxy.commits.updates import STATISTICS_FILE, CommitScan, apply_update
from proxy.governance import Action

MAIN_BRANCH = "main"


def creates_table(body: Mapping[str, Any]) -> bool:
    """True if a commit (or a ``table-changes`` entry) creates its table (``assert-create``)."""
    if not isinstance(body, Mapping):
        return False
    return any(isinstance(r, dict) and r.get("type") == "assert-create"
               for r in _list(body, "requirements"))


def classify_commit(body: Mapping[str, Any], base: TableMetadata | None, io: FileIO, *,
                    limits: CommitLimits = DEFAULT_LIMITS) -> CommitIntent:
    """Everything a table commit needs, verified against its manifests.

    ``body`` is the raw commit JSON (``requirements`` and ``updates``), ``base`` the table's
    current metadata (None for a create), ``io`` a FileIO that can read its manifests. Files the
    commit introduces must lie under the table's locations (``confine``); reading is bounded by
    ``limits`` (``CommitTooLarge``, 400) and the shape by ``check_commit_shape``.
    """
    check_commit_shape(body, limits)
    check_index_property(body, base)
    creating = creates_table(body)
    if base is None and not creating:
        raise UnverifiableCommit("cannot verify a commit to a table without its metadata")
    scan = CommitScan(base=None if creating else base, creating=creating)
    for update in _list(body, "updates"):
        apply_update(update, scan)
    plan = _plan(scan, _asserted_refs(body))
    check_fresh_manifest_lists(scan.added, scan.base)
    reader = ManifestReader(io, table_locations(scan.base, body), limits, cache_scope(scan.base))
    reader.claim(s.manifest_list for s in scan.added.values())
    check_snapshot_references(body, scan.base, reader,
                              [s.manifest_list for s in scan.added.values()])
    for what, path in scan.referenced_files:
        reader.locations.require(path, what)
    check_statistics_files([path for what, path in scan.referenced_files
                            if what == STATISTICS_FILE], scan.base, reader)
    rows = RowVerifier.with_budget(limits.row_bytes_budget)
    row_ids = expected_first_row_ids(scan.base, _list(body, "updates"), scan.added)
    changes = [_history_checked(_verify(scan, plan, step_key, reader, rows, row_ids))
               for step_key in plan.steps]
    check_commit_files(changes, scan.base, _list(body, "updates"), io, limits)
    checked = _without_borrowed_files(scan, reader, _without_revivals(scan, reader, changes))
    stamps = check_added_rows(
        commit_dependencies(scan.base, _list(body, "updates")), [c for c, _ in checked],
        {i: s.manifest_list for i, s in scan.added.items()}, reader, scan.base, rows.budget,
        rows.checks)
    return replace(_intent(scan, plan, checked, rows), landed=reader.remember_verified,
                   dependency_stamps=stamps)


def _list(body: Mapping[str, Any], key: str) -> list[Any]:
    value = body.get(key) or []
    if not isinstance(value, list):
        raise UnverifiableCommit(f"commit {key} must be a list")
    return value


def _asserted_refs(body: Mapping[str, Any]) -> dict[str, int | None]:
    asserted: dict[str, int | None] = {}
    for r in _list(body, "requirements"):
        if isinstance(r, dict) and r.get("type") == "assert-ref-snapshot-id":
            asserted[str(r.get("ref"))] = optional_id(r.get("snapshot-id"), "asserted snapshot-id")
    return asserted


def _plan(scan: CommitScan, asserted: Mapping[str, int | None]) -> StepPlan:
    """Judge ref moves (adding MANAGE_SNAPSHOTS where due) and plan the snapshots to verify."""
    base_refs = {} if scan.base is None else {n: r.snapshot_id for n, r in scan.base.refs.items()}
    targets: dict[str, int] = {}
    for ref, target in scan.refs.items():
        if target is None or target not in scan.added:
            scan.actions.add(Action.MANAGE_SNAPSHOTS)
            continue
        targets[ref] = target
        if (ref != MAIN_BRANCH and ref not in base_refs) or changes_ref_settings(scan, ref) \
                or moves_tag(scan, ref):
            scan.actions.add(Action.MANAGE_SNAPSHOTS)
    predecessors = {ref: None if ref in scan.reset_refs else asserted.get(ref, base_refs.get(ref))
                    for ref in targets}
    plan = plan_steps(scan.added, targets, predecessors)
    if plan.forks:
        scan.actions.add(Action.MANAGE_SNAPSHOTS)
    plan.replaces = any(base_refs.get(ref) is not None for ref in scan.reset_refs & set(targets))
    return plan


def _verify(scan: CommitScan, plan: StepPlan, key: tuple[int, int | None],
            reader: ManifestReader, rows: RowVerifier,
            row_ids: Mapping[int, int] | None) -> tuple[SnapshotChange, Action]:
    """Diff one step's snapshot against the state it replaces and classify it; where the
    manifests cannot decide, ``rows`` reads the rows (within the commit's byte budget).
    ``row_ids``: each added snapshot's expected first row id (None: no row lineage)."""
    step = plan.steps[key]
    before = _manifests_of(scan, step.before_id, reader)
    snapshot = step.snapshot
    change = diff_snapshot(reader, snapshot.snapshot_id, snapshot.manifest_list, before,
                           sequence_number=snapshot.sequence_number,
                           partition_types=partition_types(scan.base))
    if row_ids is not None:
        lineage = row_lineage_changes(snapshot, row_ids[snapshot.snapshot_id],
                                      reader.claimed_manifests(snapshot.manifest_list), before)
        if lineage:
            change = replace(change, anomalies=(*change.anomalies, *lineage),
                             rewrites_history=True)
    if change.rewrites_history:
        return change, data_action(change, snapshot.operation)
    metadata_stable = not scan.actions & {Action.ALTER, Action.CREATE_TABLE}
    checks = rows.snapshot(reader, scan.base, before, snapshot.manifest_list,
                           snapshot.snapshot_id, metadata_stable)
    return change, data_action(change, snapshot.operation, checks)


def partition_types(base: TableMetadata | None) -> dict[int, StructType]:
    """The table's partition type per spec id, bound to the newest schema that has its source
    columns (a spec no schema binds is left out: its bounds are not decoded)."""
    if base is None:
        return {}
    types: dict[int, StructType] = {}
    for spec in base.partition_specs:
        schema = binding_schema(base, spec)  # the newest schema with its source columns
        if schema is not None:
            types[spec.spec_id] = spec.partition_type(schema)
    return types


def _without_revivals(scan: CommitScan, reader: ManifestReader,
                      changes: list[tuple[SnapshotChange, Action]]
                      ) -> list[tuple[SnapshotChange, Action]]:
    """Each step's changes, a step that adds a file the table's history (or an earlier step of
    the commit) removed marked as rewriting history: an UPDATE that also needs
    ``MANAGE_SNAPSHOTS`` (``tombstones``)."""
    if scan.base is None:  # a create has no history
        return changes
    removed_here: dict[FileKey, int] = {}
    checked = []
    for change, action in changes:
        added = {f.key: f.path for f in change.added}
        found = {key: removed_here[key] for key in added.keys() & removed_here.keys()}
        found.update(removed_in_history(reader.io, scan.base, reader.locations,
                                        added.keys() - found.keys()))
        if found:
            scan.actions.add(Action.MANAGE_SNAPSHOTS)
            change = replace(change, anomalies=(*change.anomalies,
                                                *revival_reasons(found, added)),
                             rewrites_history=True)
            action = Action.UPDATE
        removed_here.update({f.key: change.snapshot_id for f in change.removed})
        checked.append((change, action))
    return checked


def _without_borrowed_files(scan: CommitScan, reader: ManifestReader,
                            changes: list[tuple[SnapshotChange, Action]]
                            ) -> list[tuple[SnapshotChange, Action]]:
    """Each step off ``main``'s line that adds a file ``main`` or its own parent holds live,
    marked as rewriting history (an UPDATE that also needs ``MANAGE_SNAPSHOTS``): expiring
    that snapshot would delete the file (``held``)."""
    line = main_line(scan.added, scan.refs)
    if scan.base is None or all(c.snapshot_id in line for c, _ in changes):
        return changes
    held_by_main = held_keys(reader, main_manifests(scan.base, reader))
    checked = []
    for change, action in changes:
        if change.snapshot_id not in line:
            parent = scan.added[change.snapshot_id].parent_id
            held = held_by_main | held_keys(reader, _manifests_of(scan, parent, reader))
            borrowed = [f.path for f in change.added if f.key in held]
            if borrowed:
                scan.actions.add(Action.MANAGE_SNAPSHOTS)
                change = replace(change, anomalies=(*change.anomalies, (
                    f"snapshot {change.snapshot_id} adds {shown_path(borrowed[0])} again, a "
                    "file the table holds live: expiring the snapshot would delete it")),
                    rewrites_history=True)
                action = Action.UPDATE
        checked.append((change, action))
    return checked


def _history_checked(verified: tuple[SnapshotChange, Action]) -> tuple[SnapshotChange, Action]:
    """A snapshot that alters what it carries over rewrites history: an UPDATE, whatever else."""
    change, _ = verified
    return (change, Action.UPDATE) if change.rewrites_history else verified


def _manifests_of(scan: CommitScan, snapshot_id: int | None,
                  reader: ManifestReader) -> tuple[ManifestFile, ...]:
    """The manifests of the state a step replaces: a base snapshot, a new one, or nothing."""
    if snapshot_id is None:
        return ()
    if snapshot_id in scan.added:
        return reader.claimed_manifests(scan.added[snapshot_id].manifest_list)
    known = None if scan.base is None else scan.base.snapshot_by_id(snapshot_id)
    if known is None:
        raise UnverifiableCommit(f"cannot verify the commit: parent snapshot {snapshot_id} is "
                                 "not in the table")
    return reader.manifests(known.manifest_list)


def _intent(scan: CommitScan, plan: StepPlan, changes: list[tuple[SnapshotChange, Action]],
            rows: RowVerifier) -> CommitIntent:
    data = merge_data_actions({action for _, action in changes}
                              | ({Action.DELETE} if plan.replaces else set()))
    actions = scan.actions | data | _pending_actions(scan) | _claimed_rewrites(scan, changes)
    reasons = _reasons(scan, changes)
    evidence = CommitEvidence(
        operations=tuple(s.operation or "none" for s in scan.added.values()),
        classification="+".join(sorted(a.value for a in data)) or None,
        counts=sum((c.counts for c, _ in changes), FileCounts()),
        snapshot_ids=tuple(scan.added),
        verified=not reasons,
        mismatch="; ".join(reasons) or None,
        unknown_actions=tuple(scan.unknown),
        row_checks=tuple(rows.checks),
    )
    return CommitIntent(frozenset(actions or {Action.ALTER}), evidence)


def _claimed_rewrites(scan: CommitScan, changes: list[tuple[SnapshotChange, Action]]
                      ) -> set[Action]:
    """REWRITE for a snapshot that claims ``replace`` but is classified otherwise: incremental
    readers (Spark streaming, CDC) skip ``replace`` snapshots as compactions, so the claim
    hides its rows from them — what only a principal trusted with rewrites may do."""
    claims = any(scan.added[c.snapshot_id].operation == "replace" and action != Action.REWRITE
                 for c, action in changes)
    return {Action.REWRITE} if claims else set()


def _pending_actions(scan: CommitScan) -> set[Action]:
    """Actions that depend on the whole commit: statistics and encryption keys."""
    pending: set[Action] = set()
    if scan.removed_statistics - scan.removed_snapshots:
        pending.add(Action.REWRITE)
    if scan.adds_key and not scan.added:
        pending.add(scan.metadata_action)
    return pending


def _reasons(scan: CommitScan, changes: list[tuple[SnapshotChange, Action]]) -> list[str]:
    reasons: list[str] = []
    for change, action in changes:
        summary = scan.added[change.snapshot_id].summary
        reasons += [*change.anomalies, *claim_disagreements(change, summary, action)]
    return list(dict.fromkeys(reasons))
