"""classify_commit on commits pyiceberg really makes against a SqlCatalog table (real manifests)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pytest
from pyiceberg.expressions import EqualTo
from pyiceberg.table import Table
from pyiceberg.types import StringType

from proxy.commits import CommitIntent, UnverifiableCommit, classify_commit, creates_table
from proxy.governance import Action
from tests.support.commit_capture import Captured, RecordingSqlCatalog

ARROW = pa.schema([("id", pa.int64()), ("region", pa.string())])


@pytest.fixture()
def catalog(tmp_path: Path) -> RecordingSqlCatalog:
    catalog = RecordingSqlCatalog("test", uri=f"sqlite:///{tmp_path}/catalog.db",
                                  warehouse=tmp_path.as_uri())
    catalog.create_namespace("db")
    return catalog


@pytest.fixture()
def table(catalog: RecordingSqlCatalog) -> Table:
    table = catalog.create_table("db.t", ARROW)
    table.append(rows([1, 2], ["eu", "us"]))
    table.append(rows([3], ["eu"]))
    catalog.commits.clear()
    return table


def rows(ids: list[int], regions: list[str]) -> pa.Table:
    return pa.table({"id": ids, "region": regions}, schema=ARROW)


def last(catalog: RecordingSqlCatalog) -> Captured:
    return catalog.commits[-1]


def classify(captured: Captured, table: Table) -> CommitIntent:
    return classify_commit(captured.body, captured.base, table.io)


def test_insert_adds_only_data(catalog: RecordingSqlCatalog, table: Table) -> None:
    table.append(rows([4, 5], ["ap", "ap"]))
    intent = classify(last(catalog), table)
    assert intent.actions == {Action.INSERT}
    evidence = intent.evidence
    assert evidence.operations == ("append",) and evidence.classification == "INSERT"
    assert (evidence.counts.added_data_files, evidence.counts.added_records) == (1, 2)
    assert evidence.verified and evidence.mismatch is None
    assert evidence.snapshot_ids == (table.current_snapshot().snapshot_id,)  # type: ignore[union-attr]


def test_first_insert_into_empty_table(catalog: RecordingSqlCatalog) -> None:
    table = catalog.create_table("db.empty", ARROW)
    table.append(rows([1], ["eu"]))
    intent = classify(last(catalog), table)
    assert intent.actions == {Action.INSERT}
    assert intent.evidence.verified


def test_delete_of_whole_file(catalog: RecordingSqlCatalog, table: Table) -> None:
    table.delete(EqualTo("id", 3))
    intent = classify(last(catalog), table)
    assert intent.actions == {Action.DELETE}
    assert intent.evidence.operations == ("delete",)
    assert (intent.evidence.counts.removed_data_files, intent.evidence.counts.deleted_records) \
        == (1, 1)
    assert intent.evidence.verified


def test_partial_copy_on_write_delete_is_a_delete(
        catalog: RecordingSqlCatalog, table: Table) -> None:
    """pyiceberg rewrites the file without the deleted row: every added row was there before."""
    table.delete(EqualTo("id", 1))
    intent = classify(last(catalog), table)
    assert intent.evidence.operations == ("overwrite",)
    assert intent.actions == {Action.DELETE}
    assert intent.evidence.counts.removed_data_files == 1
    assert intent.evidence.counts.added_data_files == 1
    assert intent.evidence.verified, intent.evidence.mismatch


def test_overwrite_is_one_update_across_two_snapshots(
        catalog: RecordingSqlCatalog, table: Table) -> None:
    table.overwrite(rows([9], ["ap"]))
    captured = last(catalog)
    assert captured.operations == ["delete", "append"]
    intent = classify(captured, table)
    assert intent.actions == {Action.UPDATE}
    assert intent.evidence.classification == "UPDATE"
    assert len(intent.evidence.snapshot_ids) == 2 and intent.evidence.verified


def test_ctas_is_create_plus_insert(catalog: RecordingSqlCatalog) -> None:
    txn = catalog.create_table_transaction("db.ctas", ARROW)
    txn.append(rows([1, 2], ["eu", "us"]))
    txn.commit_transaction()
    captured = last(catalog)
    assert creates_table(captured.body) and captured.base is None
    assert {"assign-uuid", "add-schema", "add-snapshot"} <= set(captured.update_actions)
    intent = classify(captured, catalog.load_table("db.ctas"))
    assert intent.actions == {Action.CREATE_TABLE, Action.INSERT}
    assert intent.evidence.counts.added_records == 2 and intent.evidence.verified


def test_create_without_data_is_only_create(catalog: RecordingSqlCatalog) -> None:
    catalog.create_table_transaction("db.bare", ARROW).commit_transaction()
    intent = classify(last(catalog), catalog.load_table("db.bare"))
    assert intent.actions == {Action.CREATE_TABLE}
    assert intent.evidence.snapshot_ids == () and intent.evidence.classification is None


def test_schema_and_property_changes_are_alter(catalog: RecordingSqlCatalog, table: Table) -> None:
    with table.update_schema() as update:
        update.add_column("note", StringType())
    assert classify(last(catalog), table).actions == {Action.ALTER}
    table.transaction().set_properties({"owner": "x"}).commit_transaction()
    assert classify(last(catalog), table).actions == {Action.ALTER}


def test_schema_change_with_data_needs_both(catalog: RecordingSqlCatalog, table: Table) -> None:
    with table.transaction() as txn:
        txn.set_properties({"k": "v"})
        txn.append(rows([7], ["eu"]))
    assert classify(last(catalog), table).actions == {Action.ALTER, Action.INSERT}


def test_rollback_is_snapshot_management(catalog: RecordingSqlCatalog, table: Table) -> None:
    first = table.snapshots()[0].snapshot_id
    table.manage_snapshots().rollback_to_snapshot(first).commit()
    captured = last(catalog)
    assert captured.update_actions == ["set-snapshot-ref"]
    intent = classify(captured, table)
    assert intent.actions == {Action.MANAGE_SNAPSHOTS}
    assert intent.evidence.snapshot_ids == ()


def test_branches_and_tags_are_snapshot_management(
        catalog: RecordingSqlCatalog, table: Table) -> None:
    current = table.current_snapshot().snapshot_id  # type: ignore[union-attr]
    table.manage_snapshots().create_branch(current, "dev").create_tag(current, "v1").commit()
    assert classify(last(catalog), table).actions == {Action.MANAGE_SNAPSHOTS}
    table.manage_snapshots().remove_branch("dev").commit()
    assert last(catalog).update_actions == ["remove-snapshot-ref"]
    assert classify(last(catalog), table).actions == {Action.MANAGE_SNAPSHOTS}


def test_insert_on_a_new_branch_also_creates_a_ref(
        catalog: RecordingSqlCatalog, table: Table) -> None:
    current = table.current_snapshot().snapshot_id  # type: ignore[union-attr]
    table.manage_snapshots().create_branch(current, "dev").commit()
    table.append(rows([8], ["eu"]), branch="dev")
    intent = classify(last(catalog), table)
    assert intent.actions == {Action.INSERT}, "the branch exists: an insert on it is an insert"
    assert intent.evidence.verified, intent.evidence.mismatch


def test_remove_snapshots_is_snapshot_management(table: Table) -> None:
    first = table.snapshots()[0].snapshot_id
    body = {"requirements": [], "updates": [
        {"action": "remove-snapshots", "snapshot-ids": [first]},
        {"action": "remove-statistics", "snapshot-id": first}]}
    assert classify_commit(body, table.metadata, table.io).actions == {Action.MANAGE_SNAPSHOTS}


def test_lying_summary_is_classified_by_manifests(
        catalog: RecordingSqlCatalog, table: Table) -> None:
    table.delete(EqualTo("id", 3))
    body = json.loads(json.dumps(last(catalog).body))
    snapshot = body["updates"][0]["snapshot"]
    snapshot["summary"] = {"operation": "append", "added-data-files": "1"}
    intent = classify_commit(body, last(catalog).base, table.io)
    assert intent.actions == {Action.DELETE}
    assert not intent.evidence.verified
    assert intent.evidence.operations == ("append",)
    mismatch = intent.evidence.mismatch or ""
    assert "claims 'append' but its manifests show DELETE" in mismatch
    assert "added-data-files=1, manifests show 0" in mismatch


def test_missing_manifest_list_is_unverifiable(
        catalog: RecordingSqlCatalog, table: Table) -> None:
    table.append(rows([4], ["eu"]))
    body = json.loads(json.dumps(last(catalog).body))
    body["updates"][0]["snapshot"]["manifest-list"] = f"{table.location()}/metadata/gone.avro"
    unreadable = r"manifest list .*gone\.avro' could not be read as an Iceberg manifest file"
    with pytest.raises(UnverifiableCommit, match=unreadable) as exc:
        classify_commit(body, last(catalog).base, table.io)
    assert exc.value.status == 400 and exc.value.error_type == "BadRequestException"


def test_garbage_manifest_list_is_unverifiable(
        catalog: RecordingSqlCatalog, table: Table) -> None:
    table.append(rows([4], ["eu"]))
    garbage = Path(urlparse(table.location()).path) / "metadata" / "garbage.avro"
    garbage.write_bytes(b"not avro at all")
    body = json.loads(json.dumps(last(catalog).body))
    body["updates"][0]["snapshot"]["manifest-list"] = garbage.as_uri()
    with pytest.raises(UnverifiableCommit, match="could not be read") as exc:
        classify_commit(body, last(catalog).base, table.io)
    assert "not avro" not in exc.value.message


def test_unknown_parent_is_unverifiable(catalog: RecordingSqlCatalog, table: Table) -> None:
    table.append(rows([4], ["eu"]))
    body = json.loads(json.dumps(last(catalog).body))
    body["updates"] = body["updates"][:1]  # staged: measured against its declared parent
    body["updates"][0]["snapshot"]["parent-snapshot-id"] = 42
    with pytest.raises(UnverifiableCommit, match="parent snapshot 42 is not in the table"):
        classify_commit(body, last(catalog).base, table.io)


def test_missing_base_without_create_is_unverifiable(table: Table) -> None:
    with pytest.raises(UnverifiableCommit, match="without its metadata"):
        classify_commit({"updates": []}, None, table.io)


def test_stale_parent_is_refused(catalog: RecordingSqlCatalog, table: Table) -> None:
    """A snapshot built on an old parent, sent without assertion, would drop what came after it
    and give the table a lineage its history does not have: it cannot be verified."""
    table.append(rows([4], ["eu"]))
    stale: dict[str, Any] = json.loads(json.dumps(last(catalog).body))
    table.append(rows([5], ["us"]))  # main moves on: its manifest is not in the stale list
    stale["requirements"] = [r for r in stale["requirements"]
                             if r["type"] != "assert-ref-snapshot-id"]
    with pytest.raises(UnverifiableCommit, match=r"names parent .* but ref 'main' is at") as exc:
        classify_commit(stale, catalog.load_table("db.t").metadata, table.io)
    assert exc.value.status == 400


def test_evidence_is_json(catalog: RecordingSqlCatalog, table: Table) -> None:
    table.append(rows([4], ["eu"]))
    record = classify(last(catalog), table).to_dict()
    assert json.loads(json.dumps(record))["actions"] == ["INSERT"]
    assert record["added_data_files"] == 1 and record["mismatch"] is None


def test_format_v1_tables_are_verified_like_any_other(catalog: RecordingSqlCatalog) -> None:
    """v1 manifest lists and manifests carry no content or sequence numbers: defaults apply."""
    table = catalog.create_table("db.v1", ARROW, properties={"format-version": "1"})
    table.append(rows([1], ["eu"]))
    table.append(rows([2], ["us"]))
    intent = classify(last(catalog), table)
    assert intent.actions == {Action.INSERT} and intent.evidence.verified
    table.delete(EqualTo("region", "eu"))
    assert classify(last(catalog), table).actions == {Action.DELETE}
