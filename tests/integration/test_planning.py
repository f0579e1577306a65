"""Server-side scan planning through icegov gives exactly local planning's rows (issue 8 §4).

Two pyiceberg 0.12 ``RestCatalog`` objects talk to the same proxy as ``admin``: ``server`` with
``scan-planning-mode=server`` (every scan is planned by icegov's ``POST …/plan``) and ``local``
without it (pyiceberg reads the manifests itself). For each case both must read the same rows and
plan the same data files. What pyiceberg cannot send (incremental ranges, use-snapshot-schema) and
what must be refused is sent by hand.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.expressions import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    BooleanExpression,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNull,
    LessThan,
    NotEqualTo,
    NotNull,
    Or,
    StartsWith,
)

from tests.support.errors import assert_error_model
from tests.support.http import as_principal
from tests.support.plan_tables import (
    EVENTS_APPENDS,
    BuiltTable,
    RawPlanner,
    Row,
    build_events,
    build_evolving,
    events_rows,
    ordered,
)
from tests.support.settings import ADMIN

PLANNING_ENDPOINTS = {
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/plan",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/plan/{plan-id}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}/plan/{plan-id}",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/tasks",
}


@dataclass(frozen=True)
class Catalogs:
    """The same proxy seen by a client that plans locally and one that plans on the server."""

    local: RestCatalog
    server: RestCatalog
    raw: RawPlanner


def planning_catalogs(proxy_url: str) -> Catalogs:
    """``Catalogs`` for ``admin``; the server one must really plan on the server."""
    local = RestCatalog("local", uri=proxy_url, credential=ADMIN)
    server = RestCatalog("server", uri=proxy_url, credential=ADMIN,
                         **{"scan-planning-mode": "server"})
    assert server.supports_server_side_planning(), "icegov does not advertise POST …/plan"
    return Catalogs(local, server, RawPlanner(local, as_principal(proxy_url, ADMIN)))


@dataclass(frozen=True)
class Tables:
    events: BuiltTable
    evolving: BuiltTable


@pytest.fixture(scope="session")
def catalogs(proxy_url: str) -> Catalogs:
    return planning_catalogs(proxy_url)


@pytest.fixture(scope="session")
def tables(catalogs: Catalogs) -> Iterator[Tables]:
    namespace = f"plan_{uuid.uuid4().hex[:8]}"
    catalogs.local.create_namespace(namespace)
    yield Tables(build_events(catalogs.local, namespace),
                 build_evolving(catalogs.local, namespace))
    for identifier in catalogs.local.list_tables(namespace):
        catalogs.local.drop_table(identifier)
    catalogs.local.drop_namespace(namespace)


def sorted_rows(arrow: Any) -> list[Row]:
    columns = [arrow.column(n).to_pylist() for n in arrow.column_names]
    return ordered(zip(*columns, strict=True))


def planned(catalog: RestCatalog, identifier: str, **scan: Any) -> dict[str, frozenset[str]]:
    """Each planned data file with its delete files, as ``catalog`` plans the scan."""
    tasks = list(catalog.load_table(identifier).scan(**scan).plan_files())
    paths = [t.file.file_path for t in tasks]
    assert len(paths) == len(set(paths)), f"a data file is planned twice: {sorted(paths)}"
    return {t.file.file_path: frozenset(d.file_path for d in t.delete_files) for t in tasks}


def assert_same_scan(catalogs: Catalogs, identifier: str, **scan: Any) -> list[Row]:
    """Server and local planning of one scan read the same rows from the same files; the
    rows."""
    local_rows = sorted_rows(catalogs.local.load_table(identifier).scan(**scan).to_arrow())
    server_rows = sorted_rows(catalogs.server.load_table(identifier).scan(**scan).to_arrow())
    assert server_rows == local_rows
    assert planned(catalogs.server, identifier, **scan) == planned(
        catalogs.local, identifier, **scan)
    return local_rows


def test_config_advertises_the_planning_endpoints(catalogs: Catalogs) -> None:
    config = catalogs.raw.http.get("/v1/config")
    assert config.status_code == 200, config.text
    assert set(config.json()["endpoints"]) >= PLANNING_ENDPOINTS


FILTERS: dict[str, BooleanExpression | str] = {
    "full scan": AlwaysTrue(),
    "identity eq": EqualTo("region", "eu"),
    "identity in": In("region", {"us", "ap"}),
    "identity not eq": NotEqualTo("region", "eu"),
    "identity starts-with": StartsWith("region", "e"),
    "bucket eq": EqualTo("id", 5),
    "bucket in": In("id", {3, 11, 19}),
    "day range": And(GreaterThanOrEqual("ts", "2024-05-02T00:00:00"),
                     LessThan("ts", "2024-05-03T00:00:00")),
    "day after": GreaterThan("ts", "2024-05-03T12:00:00"),
    "non-partition column": GreaterThan("amount", 150),
    "partition and not": And(EqualTo("region", "eu"), LessThan("amount", 100)),
    "partition or not": Or(EqualTo("region", "ap"), EqualTo("id", 1)),
    "is null": IsNull("amount"),
    "not null": NotNull("amount"),
    "always false": AlwaysFalse(),
    "parsed string": "region = 'us' and amount >= 100",
}


@pytest.mark.parametrize("row_filter", FILTERS.values(), ids=FILTERS.keys())
def test_filtered_scans_match_local_planning(catalogs: Catalogs, tables: Tables,
                                              row_filter: BooleanExpression | str) -> None:
    assert_same_scan(catalogs, tables.events.identifier, row_filter=row_filter)


def test_partition_filters_prune_files(catalogs: Catalogs, tables: Tables) -> None:
    everything = planned(catalogs.server, tables.events.identifier)
    assert set(everything) == set().union(*tables.events.added.values())
    for row_filter in (EqualTo("region", "eu"), EqualTo("id", 5),
                       GreaterThan("ts", "2024-05-03T00:00:00")):
        pruned = planned(catalogs.server, tables.events.identifier, row_filter=row_filter)
        assert pruned and set(pruned) < set(everything), row_filter


def test_projection_and_case_insensitive_filter(catalogs: Catalogs, tables: Tables) -> None:
    rows = assert_same_scan(catalogs, tables.events.identifier, selected_fields=("id", "amount"),
                            row_filter=EqualTo("REGION", "eu"), case_sensitive=False)
    assert rows == ordered((i, i * 10) for ids in EVENTS_APPENDS for i in ids if i % 3 == 0)


def test_time_travel_to_each_snapshot(catalogs: Catalogs, tables: Tables) -> None:
    events = tables.events
    for n, snapshot_id in enumerate(events.snapshots, start=1):
        rows = assert_same_scan(catalogs, events.identifier, snapshot_id=snapshot_id)
        assert len(rows) == 8 * n
        assert set(planned(catalogs.server, events.identifier, snapshot_id=snapshot_id)) == set(
            ).union(*(events.added[s] for s in events.snapshots[:n]))
        assert_same_scan(catalogs, events.identifier, snapshot_id=snapshot_id,
                         row_filter=EqualTo("region", "us"))


@pytest.mark.parametrize(("start", "end"), [(0, 2), (0, 1), (1, 2)])
def test_incremental_range_plans_the_files_appended_in_it(
        catalogs: Catalogs, tables: Tables, start: int, end: int) -> None:
    events = tables.events
    first, last = events.snapshots[start], events.snapshots[end]
    plan = catalogs.raw.completed(events.identifier, {
        "start-snapshot-id": first, "end-snapshot-id": last})
    expected = set().union(*(events.added[s] for s in events.snapshots[start + 1:end + 1]))
    assert sorted(plan.data_files()) == sorted(expected)
    table = catalogs.local.load_table(events.identifier)
    appended = events_rows([i for ids in EVENTS_APPENDS[start + 1:end + 1] for i in ids])
    assert plan.rows(table, ["id", "region", "amount"]) == ordered(zip(
        *(appended.column(c).to_pylist() for c in ("id", "region", "amount")), strict=True))


def test_incremental_range_with_a_filter(catalogs: Catalogs, tables: Tables) -> None:
    events = tables.events
    first, last = events.snapshots[0], events.snapshots[2]
    plan = catalogs.raw.completed(events.identifier, {
        "start-snapshot-id": first, "end-snapshot-id": last,
        "filter": {"type": "eq", "term": "region", "value": "eu"}})
    eu_files = set(planned(catalogs.local, events.identifier, row_filter=EqualTo("region", "eu")))
    expected = eu_files & (events.added[events.snapshots[1]] | events.added[last])
    assert expected and sorted(plan.data_files()) == sorted(expected)


def test_schema_evolution_matches_local_planning(catalogs: Catalogs, tables: Tables) -> None:
    evolving = tables.evolving.identifier
    assert assert_same_scan(catalogs, evolving) == [
        (1, "a", None), (2, "b", None), (3, "c", 5), (4, "d", 9), (5, "e", 1)]
    assert assert_same_scan(catalogs, evolving, row_filter=GreaterThan("score", 4)) == [
        (3, "c", 5), (4, "d", 9)]
    assert assert_same_scan(catalogs, evolving, row_filter=EqualTo("label", "a")) == [
        (1, "a", None)]
    assert assert_same_scan(catalogs, evolving, row_filter=IsNull("score")) == [
        (1, "a", None), (2, "b", None)]
    for snapshot_id in tables.evolving.snapshots:
        assert_same_scan(catalogs, evolving, snapshot_id=snapshot_id)


def test_old_snapshot_with_its_own_schema(catalogs: Catalogs, tables: Tables) -> None:
    evolving = tables.evolving
    oldest = evolving.snapshots[0]
    first_files = sorted(evolving.added[oldest])
    as_then = catalogs.raw.completed(evolving.identifier, {
        "snapshot-id": oldest, "use-snapshot-schema": True, "select": ["id", "name"],
        "filter": {"type": "eq", "term": "name", "value": "a"}})
    assert sorted(as_then.data_files()) == first_files
    as_now = catalogs.raw.completed(evolving.identifier, {
        "snapshot-id": oldest, "select": ["id", "label", "score"],
        "filter": {"type": "eq", "term": "label", "value": "a"}})
    assert sorted(as_now.data_files()) == first_files
    for body in ({"snapshot-id": oldest, "use-snapshot-schema": True, "select": ["score"]},
                 {"snapshot-id": oldest, "use-snapshot-schema": True, "select": ["label"]},
                 {"snapshot-id": oldest, "filter": {"type": "eq", "term": "name",
                                                    "value": "a"}}):
        assert_error_model(catalogs.raw.plan(evolving.identifier, body), 400)


def test_cancel_after_a_completed_plan_is_204(catalogs: Catalogs, tables: Tables) -> None:
    identifier = tables.events.identifier
    plan = catalogs.raw.completed(identifier, {"select": ["id"]})
    assert plan.plan_id
    cancelled = catalogs.raw.http.delete(catalogs.raw.url(identifier, f"/plan/{plan.plan_id}"))
    assert cancelled.status_code == 204, cancelled.text
    assert cancelled.content == b""


def test_an_unknown_plan_id_is_a_clean_4xx(catalogs: Catalogs, tables: Tables) -> None:
    for method in ("GET", "DELETE"):
        url = catalogs.raw.url(tables.events.identifier, "/plan/not-a-plan-id")
        response = catalogs.raw.http.request(method, url)
        assert_error_model(response, 404, "NoSuchPlanIdException")


def _invalid_bodies(events: BuiltTable) -> dict[str, tuple[Any, set[int]]]:
    s1, s2, s3 = events.snapshots
    bad_filter = {"type": "eq", "term": "no_such_column", "value": 1}
    return {
        "snapshot-id with a range": (
            {"snapshot-id": s3, "start-snapshot-id": s1, "end-snapshot-id": s3}, {400}),
        "start without end": ({"start-snapshot-id": s1}, {400}),
        "end before start": ({"start-snapshot-id": s3, "end-snapshot-id": s1}, {400}),
        "unknown snapshot": ({"snapshot-id": 123456789}, {404}),
        "unknown end snapshot": ({"start-snapshot-id": s1, "end-snapshot-id": 123456789}, {404}),
        "filter on an unknown column": ({"filter": bad_filter}, {400}),
        "filter of an unknown type": ({"filter": {"type": "sorta", "term": "id"}}, {400}),
        "filter not an expression": ({"filter": 42}, {400}),
        "filter value of the wrong type": (
            {"filter": {"type": "lt", "term": "ts", "value": "yesterday"}}, {400}),
        "select an unknown column": ({"select": ["id", "no_such_column"]}, {400}),
        "select not a list": ({"select": "id"}, {400}),
        "case-sensitive not a boolean": ({"case-sensitive": "yes"}, {400}),
        "snapshot-id not a number": ({"snapshot-id": "latest"}, {400}),
        "body not an object": ([s2], {400}),
    }


INVALID = list(_invalid_bodies(BuiltTable("x", [1, 2, 3])))


@pytest.mark.parametrize("case", INVALID)
def test_invalid_plan_requests_are_clean_4xx(catalogs: Catalogs, tables: Tables,
                                             case: str) -> None:
    body, statuses = _invalid_bodies(tables.events)[case]
    response = catalogs.raw.plan(tables.events.identifier, body)
    assert response.status_code in statuses, (response.status_code, response.text)
    assert_error_model(response, response.status_code)


def test_planning_an_unknown_table_is_404(catalogs: Catalogs, tables: Tables) -> None:
    namespace = tables.events.identifier.split(".")[0]
    response = catalogs.raw.plan(f"{namespace}.no_such_table", {})
    assert_error_model(response, 404, "NoSuchTableException")


def test_a_non_json_plan_body_is_400(catalogs: Catalogs, tables: Tables) -> None:
    response = catalogs.raw.http.post(catalogs.raw.url(tables.events.identifier, "/plan"),
                                      content=b"{not json", headers={
                                          "content-type": "application/json"})
    assert_error_model(response, 400)
