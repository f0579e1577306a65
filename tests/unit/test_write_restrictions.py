"""What a restricted principal may commit (``proxy.reads.writes``): INSERTs only when hidden
columns are optional, no rewrites or schema changes over hidden columns, nothing that removes
rows for a row-filtered principal, and denied columns never named."""

from __future__ import annotations

import itertools
import json

import pytest
from pyiceberg.expressions import EqualTo
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from proxy.commits.intent import UnverifiableCommit
from proxy.governance import Action
from proxy.reads.operation_names import judged_operation
from proxy.reads.writes import changes_schema, operation_refusal, write_refusal
from proxy.resources import Resource
from proxy.restrictions import Mask, MaskAction, ReadView, RowFilter, unrestricted

TABLE = Resource("icegov", ("demo",), "customers")

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "region", StringType(), required=False),
    NestedField(3, "ssn", StringType(), required=True),
    NestedField(4, "secret_note", StringType(), required=False),
    NestedField(5, "email", StringType(), required=True),
    NestedField(6, "phone", StringType(), required=False),
)

A = Action


def view(denied: tuple[str, ...] = (), masked: tuple[str, ...] = (),
         row_filter: bool = False) -> ReadView:
    masks = {name: Mask(MaskAction.MASK_ALPHANUM) for name in masked}
    rows = RowFilter(EqualTo("region", "eu"), "region = 'eu'") if row_filter else None
    return ReadView(TABLE, denied=frozenset(denied), masks=masks, row_filter=rows)


def refusal(restricted: ReadView, *actions: Action, schema_change: bool = False) -> str | None:
    return write_refusal(restricted, frozenset(actions), SCHEMA, changes_schema=schema_change)


# -- changes_schema -----------------------------------------------------------------------------

@pytest.mark.parametrize(("updates", "expected"), [
    ([{"action": "add-schema", "schema": {}}], True),
    ([{"action": "set-properties", "updates": {}}, {"action": "set-current-schema",
                                                    "schema-id": -1}], True),
    ([{"action": "set-properties", "updates": {}}, {"action": "add-snapshot"}], False),
    ([], False),
    (None, False),
    ("add-schema", False),
    (["add-schema", 3], False),
    # the name mapping says which file column is which field: rebinding it is a schema change
    ([{"action": "set-properties", "updates": {"schema.name-mapping.default": "[]"}}], True),
    ([{"action": "remove-properties", "removals": ["schema.name-mapping.default"]}], True),
    ([{"action": "set-properties", "updates": {"schema.name-mapping.other": "[]"}}], False),
    ([{"action": "remove-properties", "removals": "schema.name-mapping.default"}], False),
])
def test_changes_schema(updates: object, expected: bool) -> None:
    assert changes_schema(updates) is expected


# -- column-restricted principals ----------------------------------------------------------------

def test_an_insert_is_allowed_when_every_hidden_column_is_optional() -> None:
    assert refusal(view(denied=("secret_note",), masked=("phone",)), A.INSERT) is None


def test_an_insert_leaving_a_denied_required_column_empty_is_refused_without_its_name() -> None:
    message = refusal(view(denied=("ssn",)), A.INSERT)
    assert message == "cannot insert into demo.customers: a required column is hidden from you"


def test_an_insert_leaving_masked_required_columns_empty_names_them() -> None:
    message = refusal(view(denied=("ssn",), masked=("email",)), A.INSERT)
    assert message == ("cannot insert into demo.customers: column email is required and "
                       "hidden from you")


def test_a_masked_required_column_counts_as_hidden_for_writes() -> None:
    assert refusal(view(masked=("email",)), A.INSERT) is not None


@pytest.mark.parametrize("rewrite", [A.UPDATE, A.REWRITE])
def test_rewriting_data_files_is_refused_naming_only_masked_columns(rewrite: Action) -> None:
    message = refusal(view(denied=("secret_note",), masked=("phone",)), A.DELETE, rewrite)
    assert message == ("commit refused: rewriting data files of demo.customers would drop "
                       "values of columns you cannot see (phone)")


def test_rewriting_with_only_denied_columns_names_none() -> None:
    message = refusal(view(denied=("secret_note",)), A.UPDATE)
    assert message == ("commit refused: rewriting data files of demo.customers would drop "
                       "values of columns you cannot see")


def test_a_schema_change_is_refused() -> None:
    message = refusal(view(masked=("phone",)), A.ALTER, schema_change=True)
    assert message is not None
    assert message.startswith("commit refused: changing the schema of demo.customers would drop")


def test_an_alter_without_a_schema_change_is_allowed() -> None:
    assert refusal(view(denied=("secret_note",)), A.ALTER) is None


def test_a_pure_delete_is_allowed_for_a_column_restricted_principal() -> None:
    assert refusal(view(denied=("ssn",), masked=("phone",)), A.DELETE) is None


# -- row-filtered principals ---------------------------------------------------------------------

@pytest.mark.parametrize("action", [A.DELETE, A.UPDATE, A.REWRITE, A.MANAGE_SNAPSHOTS])
def test_a_row_filtered_principal_may_not_remove_or_rewrite_rows(action: Action) -> None:
    message = refusal(view(row_filter=True), action)
    assert message is not None
    assert "rows outside your row filter" in message
    assert action.value in message


@pytest.mark.parametrize("action", [A.INSERT, A.ALTER])
def test_a_row_filtered_principal_may_insert_and_alter(action: Action) -> None:
    assert refusal(view(row_filter=True), action) is None


def test_both_restrictions_apply_together() -> None:
    both = view(masked=("phone",), row_filter=True)
    assert refusal(both, A.INSERT) is None
    message = refusal(both, A.DELETE)
    assert message is not None and "row filter" in message


# -- whoever is not restricted, and what is never said ---------------------------------------

WRITE_ACTIONS = (A.INSERT, A.DELETE, A.UPDATE, A.REWRITE, A.MANAGE_SNAPSHOTS, A.ALTER)


@pytest.mark.parametrize("schema_change", [False, True])
def test_an_unrestricted_principal_may_commit_anything(schema_change: bool) -> None:
    assert refusal(unrestricted(TABLE), *WRITE_ACTIONS, schema_change=schema_change) is None


def test_no_refusal_ever_names_a_denied_column() -> None:
    restricted = view(denied=("ssn", "secret_note"), masked=("phone",), row_filter=True)
    refusals = 0
    for size in range(1, len(WRITE_ACTIONS) + 1):
        for actions in itertools.combinations(WRITE_ACTIONS, size):
            for schema_change in (False, True):
                message = refusal(restricted, *actions, schema_change=schema_change)
                if message is not None:
                    refusals += 1
                    assert "ssn" not in message and "secret_note" not in message, message
    assert refusals > 50


# -- data operations, judged before icegov builds them --------------------------------------------

HIDDEN_IDS = frozenset({3})  # ssn


@pytest.mark.parametrize("column", ["ssn", "no_such_column"])
@pytest.mark.parametrize("update", [
    {"action": "delete-files", "row-filter": {"type": "eq", "term": "COLUMN", "value": "1"}},
    {"action": "overwrite-files", "row-filter": True,
     "conflict-filter": {"type": "not", "child": {"type": "is-null", "term": "COLUMN"}},
     "case-sensitive": False},
])
def test_operation_filters_on_a_hidden_column_are_refused_as_on_a_missing_one(
        update: dict[str, object], column: str) -> None:
    named = json.loads(json.dumps(update).replace("COLUMN", column))
    with pytest.raises(UnverifiableCommit) as refused:
        judged_operation(named, SCHEMA, view(denied=("ssn",)))
    assert "is not an Iceberg expression over the table's columns" in str(refused.value)
    assert "ssn" not in str(refused.value).lower()


def test_an_equality_delete_on_a_hidden_column_is_refused_without_naming_it() -> None:
    update = {"action": "row-delta", "added-delete-files": [{"content": "equality-deletes",
                                                            "equality-ids": [3]}]}
    message = operation_refusal(view(denied=("ssn",)), update, HIDDEN_IDS)
    assert message is not None and "ssn" not in message.lower()


def test_operations_on_visible_columns_pass() -> None:
    update = {"action": "delete-files", "row-filter": {"type": "eq", "term": "id", "value": 1},
              "added-delete-files": [{"equality-ids": [1]}]}
    assert operation_refusal(view(denied=("ssn",)), update, HIDDEN_IDS) is None


@pytest.mark.parametrize("action", ["delete-files", "overwrite-files", "row-delta",
                                    "rewrite-files"])
def test_a_row_filtered_principal_removes_no_rows(action: str) -> None:
    assert operation_refusal(view(row_filter=True), {"action": action}, frozenset())
    assert operation_refusal(view(row_filter=True), {"action": "append-files"},
                             frozenset()) is None


def test_a_case_insensitive_operation_filter_binds_the_readable_twin_only() -> None:
    twins = Schema(NestedField(1, "id", LongType(), required=False),
                   NestedField(2, "SSN", StringType(), required=False),
                   NestedField(3, "ssn", StringType(), required=False))
    update = {"action": "delete-files", "case-sensitive": False,
              "row-filter": {"type": "eq", "term": "Ssn", "value": "1"}}
    judged = judged_operation(update, twins, view(denied=("ssn",)))
    assert judged["row-filter"] == {"type": "eq", "term": "SSN", "value": "1"}
    assert judged["case-sensitive"] is True
