"""A view's table references (``proxy.reads.view_refs``) and loadView/replaceView for a reader who
cannot see a table the view reads (the demo policy's ``writer`` sees ``demo.*`` only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.reads.view_refs import (
    MAX_PARSED_CHARS,
    MAX_SCANNED_NAMES,
    UNREADABLE,
    denoted,
    dotted_names,
    sql_references,
    unseen_reference,
)
from proxy.resources import Resource
from tests.support.audit import no_icegov_environment  # noqa: F401
from tests.support.errors import assert_error_model
from tests.unit.test_page_tokens_view_guard_keys_verify import ViewWorld, bearer
from tests.unit.test_restricted_planning_config_and_views import a_view_in

pytestmark = pytest.mark.usefixtures("no_icegov_environment")

WRITER = "writer:writer-secret"
VIEW = "/v1/cat/namespaces/demo/views/v"
MAY_REPLACE = "p, writer, icegov.demo.*, ALTER, allow\n"
"""The writer may replace the demo views: only what they read can refuse it."""


@pytest.mark.parametrize(("sql", "expected"), [
    ("SELECT a FROM hr.payroll", [("hr", "payroll")]),
    ("SELECT * FROM spark_cat.db.t VERSION AS OF 123", [("spark_cat", "db", "t")]),
    ("WITH x AS (SELECT * FROM a.b) SELECT * FROM x JOIN c ON x.id = c.id",
     [("c",), ("a", "b")]),
    ("SELECT * FROM db.t1 UNION ALL SELECT * FROM db.t2 WHERE id IN (SELECT id FROM q.r)",
     [("db", "t1"), ("db", "t2"), ("q", "r")]),
    ("SELECT * FROM range(10)", [("RANGE",)]),  # a function: read by its dotted names
    ("SELECT * FROM VALUES (1, 2) AS v(a, b)", []),
    ("SELECT `a.b`.c FROM `weird.name`", [("weird.name",)]),
])
def test_the_tables_a_query_reads(sql: str, expected: list[tuple[str, ...]]) -> None:
    assert sorted(sql_references(sql, "spark")) == sorted(expected)


def test_sql_that_does_not_parse_counts_every_dotted_name() -> None:
    names = set(sql_references("SELECT hr.payroll.salary FROM ??? WHERE x = y.z", "spark"))
    assert {("hr", "payroll", "salary"), ("y", "z")} <= names


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200), st.sampled_from([None, "spark", "trino", "nonsense", 7]))
def test_any_text_yields_references_without_raising(sql: str, dialect: Any) -> None:
    for name in sql_references(sql, dialect):
        assert isinstance(name, tuple) and all(isinstance(part, str) for part in name)


def test_a_reference_denotes_its_catalog_less_and_metadata_table_readings() -> None:
    tables = set(denoted(("cat", "db", "t", "snapshots"), ("demo",), "icegov"))
    assert Resource("icegov", ("cat", "db", "t"), "snapshots") in tables
    assert Resource("icegov", ("db", "t"), "snapshots") in tables
    assert Resource("icegov", ("cat", "db"), "t") in tables
    assert Resource("icegov", ("db",), "t") in tables
    # a two-part name is namespace.table; only a metadata table's name makes it table.metadata
    assert set(denoted(("hr", "payroll"), ("demo",), "icegov")) == {
        Resource("icegov", ("hr",), "payroll")}
    assert set(denoted(("t",), ("demo",), "icegov")) == {Resource("icegov", ("demo",), "t")}


def test_unseen_reference_names_the_first_table_no_reading_of_which_is_visible() -> None:
    metadata = a_view_in(["demo"], "SELECT * FROM customers JOIN hr.payroll USING (id)",
                         ["id"])["metadata"]

    def visible(table: Resource) -> bool:
        return table.namespace == ("demo",)

    assert unseen_reference(metadata, "icegov", visible) == ("hr", "payroll")
    assert unseen_reference(metadata, "icegov", lambda _: True) is None


@pytest.mark.parametrize("sql", [
    "SELECT * FROM customers",
    "SELECT * FROM demo.customers",
    "SELECT * FROM spark_cat.demo.customers VERSION AS OF 1",
    "SELECT * FROM demo.customers.snapshots",
    "WITH hidden AS (SELECT * FROM demo.customers) SELECT * FROM hidden",
])
def test_a_view_reading_visible_tables_loads(tmp_path: Path, sql: str) -> None:
    with ViewWorld(tmp_path) as world:
        world.view = a_view_in(["demo"], sql, ["id"])
        loaded = world.client.get(VIEW, headers=bearer(world.client, WRITER))
    assert loaded.status_code == 200, loaded.text


@pytest.mark.parametrize(("default", "sql"), [
    (["demo"], "SELECT * FROM demo.customers JOIN hr.payroll USING (id)"),
    (["hr"], "SELECT * FROM payroll"),
    (["demo"], "SELECT * FROM spark_cat.hr.payroll"),
    (["demo"], "SELECT * FROM hr.payroll.snapshots"),
    (["demo"], "SELECT id FROM demo.customers WHERE id IN (SELECT id FROM hr.payroll)"),
    (["demo"], "SELECT id FROM hr.payroll WHERE ??? broken"),
])
def test_a_view_reading_a_table_the_reader_cannot_see_is_refused_without_naming_it(
        tmp_path: Path, default: list[str], sql: str) -> None:
    with ViewWorld(tmp_path) as world:
        world.view = a_view_in(default, sql, ["id"])
        writer = bearer(world.client, WRITER)
        loaded = world.client.get(VIEW, headers=writer)
        admin = world.client.get(VIEW)  # anonymous admin: sees every table
    assert_error_model(loaded, 403)
    assert "payroll" not in loaded.text and "hr" not in loaded.json()["error"]["message"]
    assert admin.status_code == 200, admin.text


def test_a_replace_reading_a_hidden_table_is_refused_before_it_is_sent(tmp_path: Path) -> None:
    replacement = {"requirements": [], "updates": [{
        "action": "add-view-version", "view-version": {
            "version-id": 2, "timestamp-ms": 1, "schema-id": 0, "summary": {},
            "default-namespace": ["demo"], "representations": [
                {"type": "sql", "sql": "SELECT * FROM hr.payroll", "dialect": "spark"}]}}]}
    with ViewWorld(tmp_path, MAY_REPLACE) as world:
        writer = bearer(world.client, WRITER)
        allowed = world.client.post(VIEW, headers=writer, json={"requirements": [],
                                                                "updates": []})
        assert allowed.status_code == 200, allowed.text
        before = len(world.upstream.seen)
        refused = world.client.post(VIEW, headers=writer, json=replacement)
        sent = [r for r in world.upstream.seen[before:] if r.method == "POST"]
    assert_error_model(refused, 403)
    assert sent == []


def test_a_replace_of_a_view_that_reads_a_hidden_table_is_refused(tmp_path: Path) -> None:
    with ViewWorld(tmp_path, MAY_REPLACE) as world:
        world.view = a_view_in(["demo"], "SELECT * FROM hr.payroll", ["id"])
        writer = bearer(world.client, WRITER)
        before = len(world.upstream.seen)
        refused = world.client.post(VIEW, headers=writer,
                                    json={"requirements": [], "updates": []})
        sent = [r for r in world.upstream.seen[before:] if r.method == "POST"]
    assert_error_model(refused, 403)
    assert "payroll" not in refused.text and sent == []


def test_sql_past_the_parse_budget_is_judged_by_its_dotted_names(tmp_path: Path) -> None:
    """A view's SQL past ``MAX_PARSED_CHARS`` is not parsed but scanned: a reader who can see
    every dotted name in it (the admin) loads it; the writer, who cannot see ``hr.payroll``,
    does not."""
    sql = "SELECT id FROM hr.payroll -- " + "x" * MAX_PARSED_CHARS
    with ViewWorld(tmp_path) as world:
        world.view = a_view_in(["demo"], sql, ["id"])
        writer = world.client.get(VIEW, headers=bearer(world.client, WRITER))
        admin = world.client.get(VIEW)
    assert_error_model(writer, 403)
    assert admin.status_code == 200, admin.text[:200]


@pytest.mark.parametrize("sql", [
    '"' + "a" * 200_000, "`" * 200_000, '"a' * 100_000, "a." * 200_000,
    " ".join(f"t{i}" for i in range(MAX_SCANNED_NAMES + 5)),
])
def test_scanning_hostile_sql_is_bounded_and_fails_closed(sql: str) -> None:
    names = list(dotted_names(sql))
    assert 0 < len(names) <= MAX_SCANNED_NAMES + 1
    if len(names) > MAX_SCANNED_NAMES:
        assert names[-1] == UNREADABLE


def test_each_sql_text_is_read_once_however_many_representations_repeat_it() -> None:
    calls: list[str] = []
    metadata = {"versions": [{"default-namespace": ["demo"], "representations": [
        {"type": "sql", "sql": "SELECT * FROM hr.payroll", "dialect": f"d{n}"}
        for n in range(2000)]}]}

    def visible(table: Resource) -> bool:
        calls.append(str(table))
        return table.namespace == ("demo",)

    assert unseen_reference(metadata, "icegov", visible) == ("hr", "payroll")
    assert len(calls) == 1


def test_a_parser_failure_falls_back_to_the_dotted_names(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: Any, **__: Any) -> Any:
        raise IndexError("a parser bug")

    monkeypatch.setattr("proxy.reads.view_refs.sqlglot.parse", broken)
    assert ("hr", "payroll") in set(sql_references("SELECT a FROM hr.payroll", "spark"))
