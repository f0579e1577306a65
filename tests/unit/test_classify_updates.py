"""Metadata-only updates, unknown actions and the start-up completeness check."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from pyiceberg.table.update import TableUpdate

from proxy.commits import (
    SPEC_TABLE_UPDATES,
    UPDATE_CLASSIFIERS,
    IncompleteClassification,
    UnverifiableCommit,
    check_classification_complete,
    classify_commit,
)
from proxy.governance import TABLE_ACTIONS, Action


@pytest.fixture()
def table(tmp_path: Path) -> Table:
    catalog = SqlCatalog("u", uri=f"sqlite:///{tmp_path}/c.db", warehouse=tmp_path.as_uri())
    catalog.create_namespace("db")
    schema = pa.schema([("id", pa.int64())])
    table = catalog.create_table("db.t", schema)
    table.append(pa.table({"id": [1]}, schema=schema))
    return table


def actions(table: Table, *updates: dict[str, Any], create: bool = False) -> frozenset[Action]:
    requirements = [{"type": "assert-create"}] if create else []
    body = {"requirements": requirements, "updates": list(updates)}
    return classify_commit(body, None if create else table.metadata, table.io).actions


@pytest.mark.parametrize("update", [
    {"action": "upgrade-format-version", "format-version": 3},
    {"action": "add-schema", "schema": {"type": "struct", "fields": []}},
    {"action": "set-current-schema", "schema-id": -1},
    {"action": "add-spec", "spec": {"fields": []}},
    {"action": "set-default-spec", "spec-id": -1},
    {"action": "add-sort-order", "sort-order": {"order-id": 1, "fields": []}},
    {"action": "set-default-sort-order", "sort-order-id": -1},
    {"action": "set-properties", "updates": {"a": "b"}},
    {"action": "remove-properties", "removals": ["a"]},
    {"action": "remove-partition-specs", "spec-ids": [1]},
    {"action": "remove-schemas", "schema-ids": [1]},
])
def test_metadata_updates_are_alter_or_part_of_a_create(table: Table,
                                                        update: dict[str, Any]) -> None:
    assert actions(table, update) == {Action.ALTER}
    assert actions(table, update, create=True) == {Action.CREATE_TABLE}


@pytest.mark.parametrize("update", [
    {"action": "set-location", "location": "file:///elsewhere"},
    {"action": "set-properties", "updates": {"write.data.path": "file:///elsewhere"}},
    {"action": "set-properties", "updates": {"write.metadata.path": "file:///elsewhere"}},
])
def test_moving_a_tables_files_root_needs_register_table(table: Table,
                                                         update: dict[str, Any]) -> None:
    """A new files root lets later commits adopt files the table never wrote (another
    table's): the power ``REGISTER_TABLE`` grants."""
    assert actions(table, update) == {Action.ALTER, Action.REGISTER_TABLE}


@pytest.mark.parametrize("update", [
    {"action": "set-properties", "updates": {"history.expire.max-snapshot-age-ms": "1"}},
    {"action": "set-properties", "updates": {"history.expire.min-snapshots-to-keep": "1"}},
    {"action": "set-properties", "updates": {"a": "b", "history.expire.max-ref-age-ms": "1"}},
    {"action": "set-properties", "updates": {"gc.enabled": "true"}},
    {"action": "remove-properties", "removals": ["a", "history.expire.max-snapshot-age-ms"]},
    {"action": "remove-properties", "removals": ["gc.enabled"]},
])
def test_the_tables_retention_needs_manage_snapshots(table: Table,
                                                     update: dict[str, Any]) -> None:
    """Shortening how long history lives lets the next routine expiry erase it (as a ref's own
    retention does): ALTER alone must not do that."""
    assert actions(table, update) == {Action.ALTER, Action.MANAGE_SNAPSHOTS}


def test_assign_uuid_outside_a_create_needs_every_right(table: Table) -> None:
    update = {"action": "assign-uuid", "uuid": "00000000-0000-0000-0000-000000000000"}
    assert actions(table, update, create=True) == {Action.CREATE_TABLE}
    assert actions(table, update) == TABLE_ACTIONS


def statistics(table: Table, path: str) -> dict[str, Any]:
    return {"action": "set-statistics", "statistics": {
        "snapshot-id": table.metadata.current_snapshot_id, "statistics-path": path,
        "file-size-in-bytes": 1, "file-footer-size-in-bytes": 1, "blob-metadata": []}}


def test_statistics_are_maintenance(table: Table) -> None:
    snapshot_id = table.metadata.current_snapshot_id
    assert actions(table, statistics(table, f"{table.location()}/metadata/s.puffin")) \
        == {Action.REWRITE}
    assert actions(table, {"action": "set-partition-statistics", "partition-statistics": {}}) \
        == {Action.REWRITE}
    removal = {"action": "remove-statistics", "snapshot-id": snapshot_id}
    assert actions(table, removal) == {Action.REWRITE}
    expiry = {"action": "remove-snapshots", "snapshot-ids": [snapshot_id]}
    partition_removal = {"action": "remove-partition-statistics", "snapshot-id": snapshot_id}
    assert actions(table, expiry, removal, partition_removal) == {Action.MANAGE_SNAPSHOTS}


@pytest.mark.parametrize("path", ["file:///s.puffin", "/etc/passwd", "{loc}2/s.puffin"])
def test_statistics_files_must_be_the_tables_own(table: Table, path: str) -> None:
    """A purge deletes a table's statistics files: they may not be another table's files."""
    for update in (statistics(table, path.format(loc=table.location())),
                   {"action": "set-partition-statistics", "partition-statistics": {
                       "snapshot-id": 1, "statistics-path": path.format(loc=table.location()),
                       "file-size-in-bytes": 1}}):
        with pytest.raises(UnverifiableCommit, match=r"statistics file .* is not under"):
            actions(table, update)


def test_encryption_keys(table: Table) -> None:
    key = {"action": "add-encryption-key",
           "encryption-key": {"key-id": "k", "encrypted-key-metadata": "AA=="}}
    assert actions(table, key) == {Action.ALTER}
    assert actions(table, key, create=True) == {Action.CREATE_TABLE}
    removal = {"action": "remove-encryption-key", "key-id": "k"}
    assert actions(table, removal) == {Action.ALTER, Action.DELETE}


def test_unknown_action_needs_every_table_right(table: Table) -> None:
    body = {"updates": [{"action": "set-properties", "updates": {}},
                        {"action": "add-view-version", "view-version": {}},
                        {"action": "rewrite-everything"}]}
    intent = classify_commit(body, table.metadata, table.io)
    assert intent.actions == TABLE_ACTIONS | {Action.ALTER}
    assert intent.evidence.unknown_actions == ("add-view-version", "rewrite-everything")
    assert intent.to_dict()["unknown_actions"] == ["add-view-version", "rewrite-everything"]


def test_empty_commit_still_needs_a_right(table: Table) -> None:
    assert actions(table) == {Action.ALTER}


@pytest.mark.parametrize(("body", "message"), [
    ([{"action": "x"}], "must be a JSON object"),
    ({"updates": {"action": "x"}}, "updates must be a list"),
    ({"updates": ["set-properties"]}, "every update needs a string 'action'"),
    ({"updates": [{"updates": {}}]}, "every update needs a string 'action'"),
    ({"updates": [{"action": 3}]}, "every update needs a string 'action'"),
    ({"requirements": {"type": "assert-create"}}, "requirements must be a list"),
    ({"requirements": [{"ref": "main"}]}, "every requirement needs a string 'type'"),
    ({"updates": [{"action": "add-snapshot", "snapshot": {"snapshot-id": 1}}]}, "manifest-list"),
    ({"updates": [{"action": "add-snapshot", "snapshot": {
        "snapshot-id": True, "manifest-list": "x"}}]}, "snapshot-id must be an integer"),
    ({"updates": [{"action": "set-snapshot-ref", "ref-name": "main"}]}, "snapshot-id"),
    ({"updates": [{"action": "remove-snapshot-ref"}]}, "ref-name"),
    ({"updates": [{"action": "remove-snapshots", "snapshot-ids": 3}]}, "snapshot-ids"),
])
def test_malformed_commits_are_unverifiable(table: Table, body: Any,
                                            message: str) -> None:
    with pytest.raises(UnverifiableCommit, match=message):
        classify_commit(body, table.metadata, table.io)


def test_every_spec_update_has_a_classifier() -> None:
    check_classification_complete()
    assert set(UPDATE_CLASSIFIERS) == set(SPEC_TABLE_UPDATES)


def test_start_up_check_fails_when_a_classifier_is_missing() -> None:
    incomplete = {k: v for k, v in UPDATE_CLASSIFIERS.items() if k != "remove-encryption-key"}
    with pytest.raises(IncompleteClassification, match="remove-encryption-key"):
        check_classification_complete(incomplete)


def test_spec_list_covers_every_update_pyiceberg_knows() -> None:
    union = typing.get_args(typing.get_args(TableUpdate)[0])
    known = {model.model_fields["action"].default for model in union}
    assert len(known) == 21 and known <= set(SPEC_TABLE_UPDATES)
