"""Rebasing pure appends onto a moved head, on real pyiceberg tables (commits/rebase.py), and
judging lost outcomes from the table (commits/reconcile.py).

Each test builds a client's append on a stale base with pyiceberg (a fast append, or a merge
append whose new manifest re-lists the parent's files as EXISTING), lets another append land,
rebases, and commits the rebased body through the catalog: every row must be there exactly once.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pydantic import TypeAdapter
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.update import TableRequirement, TableUpdate

from proxy.commits import classify_commit
from proxy.commits.rebase import appends_only, rebase_append
from proxy.commits.reconcile import Outcome, outcome_of
from proxy.governance import Action
from tests.support.commit_capture import wire_json

SCHEMA = pa.schema([("id", pa.int64())])
MERGING = {"commit.manifest-merge.enabled": "true", "commit.manifest.min-count-to-merge": "1"}


def rows(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64())}, schema=SCHEMA)


def new_table(tmp_path: Path, **properties: str) -> tuple[SqlCatalog, Table]:
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=tmp_path.as_uri())
    catalog.create_namespace("db")
    return catalog, catalog.create_table("db.t", SCHEMA, properties=properties)


def pending_append(table: Table, data: pa.Table) -> dict[str, Any]:
    """The REST body of an append built on ``table``'s current state, not committed."""
    tx = table.transaction()
    tx.append(data)
    return {"requirements": [wire_json(r) for r in tx._requirements],
            "updates": [wire_json(u) for u in tx._updates]}


def commit(catalog: SqlCatalog, body: dict[str, Any]) -> Table:
    """Commit a REST body through the catalog as a REST server would."""
    table = catalog.load_table("db.t")
    requirements = tuple(TypeAdapter(TableRequirement).validate_python(r)
                         for r in body["requirements"])
    updates = tuple(TypeAdapter(TableUpdate).validate_python(u) for u in body["updates"])
    catalog.commit_table(table, requirements, updates)
    return catalog.load_table("db.t")


def rebased_on_head(catalog: SqlCatalog, stale: Table, body: dict[str, Any]) -> dict[str, Any]:
    intent = classify_commit(body, stale.metadata, stale.io)
    shape = appends_only(body, intent, stale.metadata)
    assert shape is not None
    head = catalog.load_table("db.t")
    return rebase_append(body, shape, head.metadata, head.io, int(time.time() * 1000))


def ids(table: Table) -> list[int]:
    return sorted(table.scan().to_arrow()["id"].to_pylist())


@pytest.mark.parametrize("properties", [{}, MERGING, {"format-version": "1"}],
                         ids=["fast-append", "merge-append", "format-v1"])
def test_a_stale_append_rebased_on_the_head_adds_its_rows_once(
        tmp_path: Path, properties: dict[str, str]) -> None:
    catalog, table = new_table(tmp_path, **properties)
    table.append(rows(1, 2))
    stale = catalog.load_table("db.t")
    body = pending_append(stale, rows(7))
    catalog.load_table("db.t").append(rows(100))  # the branch moves
    head = catalog.load_table("db.t")

    rebased = rebased_on_head(catalog, stale, body)
    landed = commit(catalog, rebased)

    assert ids(landed) == [1, 2, 7, 100]
    client = body["updates"][0]["snapshot"]
    snapshot = landed.current_snapshot()
    assert snapshot is not None and snapshot.snapshot_id == client["snapshot-id"]
    assert snapshot.parent_snapshot_id == head.metadata.current_snapshot_id
    if landed.metadata.format_version >= 2:
        assert snapshot.sequence_number == head.metadata.last_sequence_number + 1
    summary = snapshot.summary
    assert summary is not None
    assert summary["total-records"] == "4" and summary["added-records"] == "1"
    assert summary["total-data-files"] == "3" and summary["added-data-files"] == "1"
    # the rebased commit is itself a verified INSERT on the head
    again = classify_commit(rebased, head.metadata, head.io)
    assert again.actions == {Action.INSERT} and again.evidence.verified


def test_a_merge_append_is_rebased_without_its_existing_entries(tmp_path: Path) -> None:
    catalog, table = new_table(tmp_path, **MERGING)
    table.append(rows(1))
    table.append(rows(2))
    stale = catalog.load_table("db.t")
    body = pending_append(stale, rows(7))
    client_list = body["updates"][0]["snapshot"]["manifest-list"]
    catalog.load_table("db.t").append(rows(100))

    rebased = rebased_on_head(catalog, stale, body)
    snapshot = rebased["updates"][0]["snapshot"]
    assert snapshot["manifest-list"] != client_list
    landed = commit(catalog, rebased)
    current = landed.current_snapshot()
    assert current is not None
    entries = [e for m in current.manifests(landed.io)
               for e in m.fetch_manifest_entry(landed.io, discard_deleted=False)]
    paths = [e.data_file.file_path for e in entries]
    assert len(paths) == len(set(paths)) == 4  # no file listed twice
    assert ids(landed) == [1, 2, 7, 100]


def test_rebasing_twice_keeps_the_snapshot_id_and_lands_once(tmp_path: Path) -> None:
    catalog, table = new_table(tmp_path)
    table.append(rows(1))
    stale = catalog.load_table("db.t")
    body = pending_append(stale, rows(7))
    catalog.load_table("db.t").append(rows(2))
    first = rebased_on_head(catalog, stale, body)
    catalog.load_table("db.t").append(rows(3))  # moved again before the first landed
    head = catalog.load_table("db.t")
    intent = classify_commit(body, stale.metadata, stale.io)
    shape = appends_only(body, intent, stale.metadata)
    assert shape is not None
    second = rebase_append(first, shape, head.metadata, head.io, int(time.time() * 1000))
    landed = commit(catalog, second)
    assert ids(landed) == [1, 2, 3, 7]
    [snapshot] = [u["snapshot"] for u in second["updates"] if u["action"] == "add-snapshot"]
    sent = {snapshot["snapshot-id"]: {lists(body)[0], lists(first)[0], lists(second)[0]}}
    assert outcome_of(second, landed.metadata, sent) is Outcome.LANDED
    # the client's own body names a manifest list that never landed: by itself it proves nothing
    assert outcome_of(body, landed.metadata) is Outcome.TAKEN


def lists(body: dict[str, Any]) -> list[str]:
    """The manifest lists of the snapshots ``body`` adds."""
    return [u["snapshot"]["manifest-list"] for u in body["updates"]
            if u["action"] == "add-snapshot"]


def test_a_snapshot_id_another_commit_used_is_not_this_commits_landing(tmp_path: Path) -> None:
    catalog, table = new_table(tmp_path)
    table.append(rows(1))
    stale = catalog.load_table("db.t")
    ours = pending_append(stale, rows(2))
    theirs = pending_append(stale, rows(99))
    [snapshot] = [u["snapshot"] for u in ours["updates"] if u["action"] == "add-snapshot"]
    current = stale.metadata.model_copy(update={"snapshots": [
        *stale.metadata.snapshots,
        # another writer's snapshot (its own files) that happens to carry our id
        Snapshot.model_validate({**snapshot, "manifest-list": lists(theirs)[0]})]})
    assert outcome_of(ours, current) is Outcome.TAKEN
    assert outcome_of(ours, current, {snapshot["snapshot-id"]: set()}) is Outcome.TAKEN
    mine = stale.metadata.model_copy(update={"snapshots": [
        *stale.metadata.snapshots, Snapshot.model_validate(snapshot)]})
    assert outcome_of(ours, mine) is Outcome.LANDED


def test_only_pure_appends_may_be_rebased(tmp_path: Path) -> None:
    catalog, table = new_table(tmp_path)
    table.append(rows(1, 2))
    stale = catalog.load_table("db.t")
    tx = stale.transaction()
    tx.delete("id == 1")
    delete = {"requirements": [wire_json(r) for r in tx._requirements],
              "updates": [wire_json(u) for u in tx._updates]}
    intent = classify_commit(delete, stale.metadata, stale.io)
    assert appends_only(delete, intent, stale.metadata) is None

    append = pending_append(stale, rows(3))
    intent = classify_commit(append, stale.metadata, stale.io)
    assert appends_only(append, intent, stale.metadata) is not None
    extra = {**append, "updates": [*append["updates"],
                                   {"action": "set-properties", "updates": {"k": "v"}}]}
    assert appends_only(extra, intent, stale.metadata) is None  # more than an append
    asserting = {**append, "requirements": [*append["requirements"],
                                            {"type": "assert-current-schema-id",
                                             "current-schema-id": 0}]}
    assert appends_only(asserting, intent, stale.metadata) is None
    other_ref = {**append, "requirements": [*append["requirements"],
                                            {"type": "assert-ref-snapshot-id", "ref": "audit",
                                             "snapshot-id": None}]}
    assert appends_only(other_ref, intent, stale.metadata) is None  # could never be satisfied


def test_format_v3_appends_are_not_rebased(tmp_path: Path) -> None:
    catalog, _ = new_table(tmp_path)
    stale = catalog.load_table("db.t")
    body = pending_append(stale, rows(1))
    intent = classify_commit(body, stale.metadata, stale.io)
    assert appends_only(body, intent, stale.metadata) is not None
    v3 = stale.metadata.model_copy(update={"format_version": 3})  # pyiceberg cannot write v3
    assert appends_only(body, intent, v3) is None


def test_outcomes_are_read_off_the_table(tmp_path: Path) -> None:
    catalog, table = new_table(tmp_path)
    table.append(rows(1))
    stale = catalog.load_table("db.t")
    body = pending_append(stale, rows(2))
    assert outcome_of(body, stale.metadata) is Outcome.ABSENT
    landed = commit(catalog, body)
    assert outcome_of(body, landed.metadata) is Outcome.LANDED
    assert outcome_of(body, None) is Outcome.UNKNOWN  # the table is gone: cannot tell

    props = {"updates": [{"action": "set-properties", "updates": {"a": "1"}}]}
    assert outcome_of(props, landed.metadata) is Outcome.UNKNOWN
    with landed.transaction() as tx:
        tx.set_properties(a="1")
    after = catalog.load_table("db.t").metadata
    assert outcome_of(props, after) is Outcome.LANDED
    unknowable = {"updates": [*props["updates"], {"action": "add-schema", "schema": {}}]}
    assert outcome_of(unknowable, after) is Outcome.UNKNOWN
