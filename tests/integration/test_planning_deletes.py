"""Server-side planning of tables with delete files, and of plans too large to answer inline.

Position deletes: pyiceberg plans and applies them locally, so server planning must read the
same rows. Equality deletes: pyiceberg refuses them both ways (locally while planning, and in a
server plan), so the raw plan is checked against rows worked out by hand: each equality delete
file must be attached to exactly the data files of a lower sequence number it may match.
Large plans: icegov answers with plan tasks (signed tokens) that pyiceberg fetches; a forged,
foreign, misplaced or expired token gets a clean 4xx.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.expressions import EqualTo, GreaterThan, LessThan

from tests.conftest import proxy_for
from tests.integration.test_planning import (
    Catalogs,
    assert_same_scan,
    planned,
    planning_catalogs,
)
from tests.support.errors import assert_error_model
from tests.support.http import as_principal, wait_for
from tests.support.plan_tables import (
    EQUALITY_LIVE,
    EQUALITY_LIVE_AT_S4,
    POSITION_LIVE,
    BuiltTable,
    RawPlanner,
    build_equality_deletes,
    build_position_deletes,
    many_files,
    only,
    ordered,
)

ANALYST = "analyst:analyst-secret"
SHARDED = {"shard_files": 2}


@dataclass(frozen=True)
class DeleteTables:
    positions: BuiltTable
    equalities: BuiltTable


@pytest.fixture(scope="session")
def catalogs(proxy_url: str) -> Catalogs:
    return planning_catalogs(proxy_url)


@pytest.fixture(scope="session")
def tables(catalogs: Catalogs) -> Iterator[DeleteTables]:
    namespace = f"plan_deletes_{uuid.uuid4().hex[:8]}"
    catalogs.local.create_namespace(namespace)
    yield DeleteTables(build_position_deletes(catalogs.local, namespace),
                       build_equality_deletes(catalogs.local, namespace))
    for identifier in catalogs.local.list_tables(namespace):
        catalogs.local.drop_table(identifier)
    catalogs.local.drop_namespace(namespace)


# -- position deletes -------------------------------------------------------------------------

def test_position_deletes_read_like_local_planning(catalogs: Catalogs,
                                                   tables: DeleteTables) -> None:
    positions = tables.positions
    assert assert_same_scan(catalogs, positions.identifier) == ordered(POSITION_LIVE)
    assert assert_same_scan(catalogs, positions.identifier, row_filter=GreaterThan("id", 4)) == [
        row for row in ordered(POSITION_LIVE) if row[0] > 4]
    for snapshot_id in positions.snapshots:
        assert_same_scan(catalogs, positions.identifier, snapshot_id=snapshot_id)


def test_each_position_delete_file_is_attached_to_its_data_file(
        catalogs: Catalogs, tables: DeleteTables) -> None:
    positions = tables.positions
    file_a, file_b, deletes_a, deletes_b = (
        only(positions.added[s] or positions.deletes[s]) for s in positions.snapshots)
    plan = catalogs.raw.completed(positions.identifier, {})
    assert plan.attached() == {file_a: {deletes_a}, file_b: {deletes_b}}
    assert all(d["content"] == "position-deletes"
               for answer in plan.answers for d in answer.get("delete-files", []))
    table = catalogs.local.load_table(positions.identifier)
    assert plan.rows(table, ["id", "name"]) == ordered(POSITION_LIVE)
    before_b = catalogs.raw.completed(positions.identifier,
                                      {"snapshot-id": positions.snapshots[2]})
    assert before_b.attached() == {file_a: {deletes_a}, file_b: frozenset()}


# -- equality deletes -------------------------------------------------------------------------

def _equality_files(built: BuiltTable) -> tuple[list[str], str, str]:
    """Data files A, B, C, D and the delete files of s3 and s5."""
    s1, s2, s3, s4, s5, s6 = built.snapshots
    return ([only(built.added[s]) for s in (s1, s2, s4, s6)],
            only(built.deletes[s3]), only(built.deletes[s5]))


def test_equality_deletes_apply_to_older_data_only(catalogs: Catalogs,
                                                   tables: DeleteTables) -> None:
    equalities = tables.equalities
    (a, b, c, d), by_id, by_name = _equality_files(equalities)
    plan = catalogs.raw.completed(equalities.identifier, {})
    assert plan.attached() == {a: {by_id, by_name}, b: {by_id, by_name}, c: {by_name},
                               d: frozenset()}
    deletes = [f for answer in plan.answers for f in answer.get("delete-files", [])]
    assert {f["content"] for f in deletes} == {"equality-deletes"}
    assert {tuple(f["equality-ids"]) for f in deletes} == {(1,), (2,)}
    table = catalogs.local.load_table(equalities.identifier)
    assert plan.rows(table, ["id", "name"]) == ordered(EQUALITY_LIVE)


def test_equality_deletes_at_an_older_snapshot(catalogs: Catalogs,
                                               tables: DeleteTables) -> None:
    equalities = tables.equalities
    (a, b, c, _), by_id, _ = _equality_files(equalities)
    plan = catalogs.raw.completed(equalities.identifier,
                                  {"snapshot-id": equalities.snapshots[3]})
    assert plan.attached() == {a: {by_id}, b: {by_id}, c: frozenset()}
    table = catalogs.local.load_table(equalities.identifier)
    assert plan.rows(table, ["id", "name"]) == ordered(EQUALITY_LIVE_AT_S4)


def test_equality_deletes_with_a_filter(catalogs: Catalogs, tables: DeleteTables) -> None:
    equalities = tables.equalities
    (a, b, c, d), by_id, by_name = _equality_files(equalities)
    plan = catalogs.raw.completed(equalities.identifier,
                                  {"filter": {"type": "eq", "term": "id", "value": 4}})
    attached = plan.attached()
    assert a not in attached and d not in attached  # their id bounds exclude 4
    assert attached == {b: {by_id, by_name}, c: {by_name}}
    table = catalogs.local.load_table(equalities.identifier)
    assert [r for r in plan.rows(table, ["id", "name"]) if r[0] == 4] == [(4, "f")]


def test_pyiceberg_refuses_equality_deletes_either_way(catalogs: Catalogs,
                                                       tables: DeleteTables) -> None:
    identifier = tables.equalities.identifier
    with pytest.raises(ValueError, match="equality deletes"):
        catalogs.local.load_table(identifier).scan().to_arrow()
    with pytest.raises(NotImplementedError, match="equality deletes"):
        catalogs.server.load_table(identifier).scan().to_arrow()
    before_deletes = tables.equalities.snapshots[1]
    assert assert_same_scan(catalogs, identifier, snapshot_id=before_deletes) == [
        (1, "a"), (2, "b"), (3, "c"), (3, "c2"), (4, "f")]


# -- large plans: plan tasks ------------------------------------------------------------------

@dataclass(frozen=True)
class Sharded:
    """A proxy that answers plans of more than two files with plan tasks, and its tables."""

    catalogs: Catalogs
    many: BuiltTable
    other: BuiltTable
    url: str


@pytest.fixture(scope="session")
def sharded(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sharded]:
    workdir = tmp_path_factory.mktemp(f"sharded-{backend}")
    with proxy_for(backend, workdir, planning=SHARDED) as running:
        catalogs = planning_catalogs(running.url)
        catalogs.local.create_namespace("demo")  # the analyst may read demo.* tables
        many = many_files(catalogs.local, "demo.many", 7)
        other = many_files(catalogs.local, "demo.other", 1)
        yield Sharded(catalogs, many, other, running.url)


def _first_answer(raw: RawPlanner, identifier: str) -> dict[str, Any]:
    response = raw.plan(identifier, {})
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    assert answer["status"] == "completed" and answer.get("plan-tasks"), answer
    return answer


def test_a_large_plan_is_answered_with_plan_tasks(sharded: Sharded) -> None:
    raw, many = sharded.catalogs.raw, sharded.many
    first = _first_answer(raw, many.identifier)
    assert not first.get("file-scan-tasks")  # the files come with the plan tasks
    plan = raw.completed(many.identifier, {})
    assert len(plan.answers) > 2
    assert sorted(plan.data_files()) == sorted(set().union(*many.added.values()))


def test_pyiceberg_fetches_the_plan_tasks_and_reads_every_row(sharded: Sharded) -> None:
    identifier = sharded.many.identifier
    rows = assert_same_scan(sharded.catalogs, identifier)
    assert rows == ordered((i, f"r{i}") for i in range(14))
    assert assert_same_scan(sharded.catalogs, identifier, row_filter=LessThan("id", 5)) == [
        (i, f"r{i}") for i in range(5)]
    assert len(planned(sharded.catalogs.server, identifier, row_filter=EqualTo("id", 9))) == 1


def _forgeries(task: str) -> dict[str, Any]:
    middle = len(task) // 2
    flipped = task[:middle] + ("A" if task[middle] != "A" else "B") + task[middle + 1:]
    return {"flipped character": flipped, "truncated": task[:-3], "extended": task + "x",
            "garbage": "not-a-plan-task", "empty": "", "not a string": 42}


@pytest.mark.parametrize("forgery", list(_forgeries("placeholder")))
def test_a_forged_plan_task_is_a_clean_4xx(sharded: Sharded, forgery: str) -> None:
    raw, identifier = sharded.catalogs.raw, sharded.many.identifier
    task = _first_answer(raw, identifier)["plan-tasks"][0]
    response = raw.fetch_tasks(identifier, _forgeries(task)[forgery])
    assert_error_model(response, 400, "BadRequestException")  # never issued by icegov
    assert raw.fetch_tasks(identifier, task).status_code == 200


def test_a_plan_task_of_another_table_is_refused(sharded: Sharded) -> None:
    raw = sharded.catalogs.raw
    task = _first_answer(raw, sharded.many.identifier)["plan-tasks"][0]
    response = raw.fetch_tasks(sharded.other.identifier, task)
    assert_error_model(response, 404, "NoSuchPlanTaskException")


def test_a_plan_task_of_another_principal_is_refused(sharded: Sharded) -> None:
    admin = sharded.catalogs.raw
    analyst = RawPlanner(admin.catalog, as_principal(sharded.url, ANALYST))
    identifier = sharded.many.identifier
    own = _first_answer(analyst, identifier)["plan-tasks"][0]
    assert analyst.fetch_tasks(identifier, own).status_code == 200
    foreign = _first_answer(admin, identifier)["plan-tasks"][0]
    response = analyst.fetch_tasks(identifier, foreign)
    assert_error_model(response, 404, "NoSuchPlanTaskException")


def test_an_expired_plan_task_is_refused(tmp_path: Path) -> None:
    settings = {**SHARDED, "task_ttl_seconds": 1}
    with proxy_for("embedded", tmp_path, planning=settings) as running:
        catalogs = planning_catalogs(running.url)
        catalogs.local.create_namespace("demo")
        many = many_files(catalogs.local, "demo.many", 4)
        task = _first_answer(catalogs.raw, many.identifier)["plan-tasks"][0]
        refused = wait_for(
            lambda: (r := catalogs.raw.fetch_tasks(many.identifier, task)).status_code != 200
            and r, timeout=15, what="the plan task to expire")
        assert_error_model(refused, 404, "NoSuchPlanTaskException")
