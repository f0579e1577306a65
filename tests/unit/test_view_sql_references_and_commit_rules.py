"""Attacks, round 8: today's changes (view SQL references, the round-7 commit rules).

View attacks go through icegov with the demo policy (``writer`` sees ``demo.*`` only, never
``hr.payroll``) against a fake backing serving one view (``ViewWorld``), as in
``test_view_refs``. Every test asserts the secure (or correct) behaviour; every finding of the
round is fixed.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.types import LongType, NestedField

from proxy.commits import UnverifiableCommit
from proxy.commits.snapshots import added_snapshots
from proxy.commits.timeline import check_snapshot_order, commit_format
from proxy.errors import CommitFailed
from tests.support.audit import no_icegov_environment  # noqa: F401
from tests.support.errors import assert_error_model
from tests.unit.test_page_tokens_view_guard_keys_verify import ViewWorld, bearer
from tests.unit.test_restricted_planning_config_and_views import a_view_in

pytestmark = pytest.mark.usefixtures("no_icegov_environment")

WRITER = "writer:writer-secret"
VIEW = "/v1/cat/namespaces/demo/views/v"


def _writer_loads(tmp_path: Path, default: list[str], sql: str):  # type: ignore[no-untyped-def]
    with ViewWorld(tmp_path) as world:
        world.view = a_view_in(default, sql, ["id"])
        return world.client.get(VIEW, headers=bearer(world.client, WRITER))


# 1. CTE names treated as defined everywhere in the tree --------------------------------------

@pytest.mark.parametrize(("default", "sql"), [
    (["hr"], "WITH payroll AS (SELECT * FROM payroll) SELECT * FROM payroll"),
    (["hr"], "WITH a AS (SELECT * FROM payroll), payroll AS (SELECT 1 AS id) SELECT * FROM a"),
    (["hr"], "SELECT * FROM (WITH payroll AS (SELECT 1 AS id) SELECT * FROM payroll) x "
             "UNION ALL SELECT * FROM payroll"),
], ids=["self-reference", "forward-reference", "out-of-scope"])
def test_a_cte_name_does_not_hide_the_table_of_the_same_name(
        tmp_path: Path, default: list[str], sql: str) -> None:
    """HIGH. ``_tables`` drops every one-part reference whose name is *any* CTE name anywhere in
    the statement. But a non-recursive CTE is not in scope inside its own definition, nor in
    the CTEs before it, nor outside the subquery that defines it: in each SQL here Spark (and
    standard SQL) reads the table ``payroll`` of the default namespace ``hr``. ``writer``
    (who cannot see ``hr.payroll``) loads the view and learns its definition (table name, the
    columns the view selects). Only references the CTE actually shadows (in scope, defined
    before use) may be skipped."""
    loaded = _writer_loads(tmp_path, default, sql)
    assert_error_model(loaded, 403)


# 2. Table names given as strings or as table arguments ---------------------------------------

@pytest.mark.parametrize("sql", [
    "SELECT * FROM IDENTIFIER('hr.payroll')",
    "SELECT * FROM demo.customers WHERE id IN (SELECT id FROM identifier('hr.payroll'))",
    "SELECT * FROM IDENTIFIER('hr' || '.payroll')",
])
def test_a_table_named_by_the_identifier_clause_is_a_reference(tmp_path: Path,
                                                                sql: str) -> None:
    """HIGH. Spark 3.4+ resolves ``IDENTIFIER('hr.payroll')`` (any constant string
    expression) as the table ``hr.payroll``. sqlglot parses it as a function-shaped table, whose
    parts are not identifiers, so ``_tables`` skips it as "a table function": ``writer`` loads a
    view reading ``hr.payroll``. The identifier clause (or any table whose parts are not plain
    identifiers and that is not a known table-valued function) must fail closed."""
    loaded = _writer_loads(tmp_path, ["demo"], sql)
    assert_error_model(loaded, 403)


def test_a_table_argument_of_a_table_function_is_a_reference(tmp_path: Path) -> None:
    """MEDIUM. Spark 3.5 table-valued functions (Python UDTFs) take table arguments:
    ``SELECT * FROM my_udtf(TABLE(hr.payroll))`` reads every row of ``hr.payroll``. sqlglot
    does not produce an ``exp.Table`` for the argument, so no reference is found and
    ``writer`` loads the view. (``TABLE hr.payroll`` without parentheses is caught.)"""
    loaded = _writer_loads(tmp_path, ["demo"], "SELECT * FROM my_udtf(TABLE(hr.payroll))")
    assert_error_model(loaded, 403)


# 3. Sequence numbers and format version 1 -------------------------------------------------

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


def _now() -> int:
    return int(time.time() * 1000)


def _snapshot(snapshot_id: int, sequence: int | None) -> dict[str, object]:
    raw: dict[str, object] = {"snapshot-id": snapshot_id, "parent-snapshot-id": None,
                              "timestamp-ms": _now(), "schema-id": 0,
                              "manifest-list": f"file:///tmp/t/metadata/snap-{snapshot_id}.avro",
                              "summary": {"operation": "append"}}
    if sequence is not None:
        raw["sequence-number"] = sequence
    return raw


def test_creating_a_v1_table_with_its_first_snapshot_is_not_refused() -> None:
    """MEDIUM (honest flow refused). A create-table transaction for a format-1 table with data
    (Spark CTAS / REPLACE TABLE AS SELECT with ``'format-version'='1'``, pyiceberg
    ``create_table_transaction`` with ``format-version: 1``) adds a snapshot without a
    ``sequence-number`` (Java writes it only when positive; v1 has none). ``ChangeClassifier``
    calls ``check_snapshot_order(..., None, ...)`` for creates, and ``versioned`` is True for
    ``base is None``, so ``_next_sequence(0, 0)`` refuses it (400, "a table of format 2 or
    later needs one"). The format the create sets (``upgrade-format-version``) must decide."""
    body = {"updates": [{"action": "upgrade-format-version", "format-version": 1},
                        {"action": "add-snapshot", "snapshot": _snapshot(1, None)}]}
    check_snapshot_order(added_snapshots(body), None, _now(),
                         format_version=commit_format(body, None))


def test_a_v1_table_upgraded_in_the_commit_gets_the_next_sequence_number_only() -> None:
    """MEDIUM. On a format-1 table ``check_snapshot_order`` skips sequence numbers entirely
    (``versioned`` comes from the base). A commit ``[upgrade-format-version 2, add-snapshot
    sequence-number 2**62]`` is therefore not checked, yet the catalog applies the snapshot to
    the upgraded (v2) metadata and sets ``last-sequence-number`` to 2**62: the very jump
    towards the end of the ``long`` range the round-7 rule refuses (every later writer's
    ``last + 1`` overflows, Java refuses the table). Also a v1 snapshot may carry any
    sequence number, which survives the upgrade. Only the next number (or none on v1) is
    acceptable."""
    base = new_table_metadata(SCHEMA, UNPARTITIONED_PARTITION_SPEC, UNSORTED_SORT_ORDER,
                              "file:///tmp/t", properties={"format-version": "1"})
    assert base.format_version == 1
    body = {"updates": [{"action": "upgrade-format-version", "format-version": 2},
                        {"action": "add-snapshot", "snapshot": _snapshot(7, 2**62)}]}
    with pytest.raises((UnverifiableCommit, CommitFailed)):
        check_snapshot_order(added_snapshots(body), base, _now(),
                             format_version=commit_format(body, base))
