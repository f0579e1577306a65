"""An attacker's review of server-side planning and column / row policies (issue 8).

Each test is one attack by a principal holding a valid token: ``analyst`` (``ssn`` denied,
``email`` masked on ``demo.customers``), ``eu-analyst`` (only ``region = 'eu'`` rows of
``demo.orders``), and, in this module's copy of the policy, ``deleter`` with ``ssn`` of
``demo.customers`` denied and ``analyst`` owning a sandbox namespace ``scratch``.

Every attack here is met today (refused or made harmless) and is a plain test (the findings once
pinned as strict xfails were fixed and un-marked).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import ForbiddenError
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    UUIDType,
)

from tests.conftest import proxy_for
from tests.support.errors import assert_error_model
from tests.support.http import as_principal, wait_for
from tests.support.plan_tables import (
    EVENTS_SCHEMA,
    EVENTS_SPEC,
    append_partitioned,
    events_rows,
)
from tests.support.settings import ADMIN, POLICIES
from tests.support.world import World, world_of

ANALYST = "analyst:analyst-secret"
EU_ANALYST = "eu-analyst:eu-analyst-secret"
DELETER = "deleter:deleter-secret"
WRITER = "writer:writer-secret"
SSN = ["111-22-3333", "222-33-4444", "333-44-5555"]
CUSTOMERS = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "name", StringType(), required=False),
    NestedField(3, "email", StringType(), required=False),
    NestedField(4, "ssn", StringType(), required=False),
)
TABLES = "/v1/namespaces/demo/tables"
EXTRA_RULES = (
    # a deleter that may not read ssn (DELETE on demo.* comes from the demo policy)
    "p, deleter, icegov.demo.customers.ssn, SELECT, deny",
    # the same restrictions on two more tables, partitioned by the hidden columns
    "p, analyst, icegov.demo.by_ssn.ssn, SELECT, deny",
    "p, analyst, icegov.demo.by_email.email, SELECT, mask:show-last-4",
    # a row filter on a table whose columns differ only by case
    "p, eu-analyst, icegov.demo.twin, SELECT, filter:region = 'eu'",
    # analyst owns a sandbox namespace (a common grant: a scratch space for analysts)
    "p, analyst, icegov.scratch, BROWSE, allow",
    "p, analyst, icegov.scratch.*, *, allow",
)


def _policies(workdir: Path) -> dict[str, Path]:
    policies = workdir / "policies"
    shutil.copytree(POLICIES, policies)
    with (policies / "policy.csv").open("a") as rules:
        rules.write("\n".join(EXTRA_RULES) + "\n")
    return {"model_path": policies / "model.conf", "policy_path": policies / "policy.csv"}




def _customer_rows(ids: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "name": [f"n{i}" for i in ids],
                     "email": [f"user{i}@example.org" for i in ids],
                     "ssn": [SSN[i - 1] for i in ids]})


def _customers(admin: RestCatalog, name: str, spec: PartitionSpec | None = None) -> Table:
    """One single-row data file per customer (bounds of a one-row file are its values)."""
    identifier = f"demo.{name}"
    if admin.table_exists(identifier):
        admin.drop_table(identifier)
    table = (admin.create_table(identifier, CUSTOMERS, partition_spec=spec) if spec
             else admin.create_table(identifier, CUSTOMERS))
    for customer in (1, 2, 3):
        table.append(_customer_rows([customer]))
    return table


def _orders(admin: RestCatalog) -> Table:
    """``demo.orders``: partitioned by region (identity), bucket(id) and day(ts)."""
    if admin.table_exists("demo.orders"):
        admin.drop_table("demo.orders")
    table = admin.create_table("demo.orders", EVENTS_SCHEMA, partition_spec=EVENTS_SPEC)
    append_partitioned(table, events_rows(range(1, 13)))
    append_partitioned(table, events_rows(range(13, 25)))
    return table


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    workdir = tmp_path_factory.mktemp("attacks")
    with proxy_for("embedded", workdir, policy=_policies(workdir)) as proxy, \
            world_of(proxy) as world:
        for namespace in ("demo", "scratch"):
            world.admin.create_namespace_if_not_exists(namespace)
        _customers(world.admin, "customers")
        _orders(world.admin)
        yield world


def _paths(answer: dict[str, Any]) -> list[str]:
    return [t["data-file"]["file-path"] for t in answer.get("file-scan-tasks", [])]


def _stat_keys(answer: dict[str, Any]) -> set[int]:
    keys: set[int] = set()
    files = [t["data-file"] for t in answer.get("file-scan-tasks", [])]
    for data_file in files + answer.get("delete-files", []):
        for stats in ("column-sizes", "value-counts", "null-value-counts", "nan-value-counts",
                      "lower-bounds", "upper-bounds"):
            keys.update(data_file.get(stats, {}).get("keys", []))
    return keys


def _all_text(response: httpx.Response) -> str:
    return response.text.lower()


# == findings (fixed: each is refused now) ===================================================


@pytest.mark.parametrize(("table", "transform", "column"), [
    ("by_ssn", IdentityTransform(), 4),        # denied column, identity partition
    ("by_email", IdentityTransform(), 3),      # masked column (show-last-4)
])
def test_partition_values_of_a_hidden_column_never_leave_in_a_plan(
        world: World, table: str, transform: Any, column: int) -> None:
    spec = PartitionSpec(PartitionField(column, 1000, transform, "hidden_part"))
    _customers(world.admin, table, spec)
    assert_error_model(world.as_(ANALYST).get(f"{TABLES}/{table}"), 403)  # loadTable refuses
    answer = world.plan(ANALYST, table, {"select": ["id"]})
    leaked = [v for v in SSN + [f"user{i}@example.org" for i in (1, 2, 3)] if v in answer.text]
    assert answer.status_code == 403 and not leaked, (answer.status_code, leaked)


def test_a_delete_filter_on_a_hidden_column_is_refused(world: World) -> None:
    _customers(world.admin, "customers")
    deleter = world.as_(DELETER)
    assert "ssn" not in deleter.get(f"{TABLES}/customers").text  # it cannot see the column
    guess = {"type": "and", "left": {"type": "gt", "term": "ssn", "value": "111-22-3332"},
             "right": {"type": "lt", "term": "ssn", "value": "111-22-3334"}}
    answer = deleter.post(f"{TABLES}/customers", json={
        "requirements": [], "updates": [{"action": "delete-files", "row-filter": guess}]})
    rows = world.admin.load_table("demo.customers").scan().to_arrow()
    assert sorted(rows.column("ssn").to_pylist()) == SSN, "rows deleted by a hidden value"
    assert_error_model(answer, 400)  # as for a column the table does not have
    assert "ssn" not in answer.text


def test_registering_a_restricted_tables_metadata_does_not_lift_the_restriction(
        world: World) -> None:
    """The analyst owns ``scratch`` (REGISTER_TABLE included), and registers there the real
    metadata file of ``demo.customers``, whose ``ssn`` it may not read: 403, nothing lands."""
    location = _customers(world.admin, "customers").metadata_location
    for name in ("copy", "admins_copy"):
        if world.admin.table_exists(f"scratch.{name}"):
            world.admin.drop_table(f"scratch.{name}")
    analyst = world.as_(ANALYST)
    registered = analyst.post("/v1/namespaces/scratch/register", json={
        "name": "copy", "metadata-location": location})
    assert_error_model(registered, 403)
    assert not world.admin.table_exists("scratch.copy")
    plan = analyst.post("/v1/namespaces/scratch/tables/copy/plan",
                        json={"select": ["ssn"], "stats-fields": ["ssn"]})
    assert_error_model(plan, 404)
    # the control: the same register by an unrestricted principal lands
    admins = world.as_(ADMIN).post("/v1/namespaces/scratch/register", json={
        "name": "admins_copy", "metadata-location": location})
    assert admins.status_code == 200, admins.text
    assert world.admin.load_table("scratch.admins_copy").metadata_location == location
    world.admin.drop_table("scratch.admins_copy")


def test_load_table_properties_do_not_name_a_denied_column(world: World) -> None:
    table = _customers(world.admin, "customers")
    mapping = [{"field-id": f.field_id, "names": [f.name]} for f in CUSTOMERS.fields]
    with table.transaction() as transaction:
        transaction.set_properties({"schema.name-mapping.default": json.dumps(mapping),
                                    "write.metadata.metrics.column.ssn": "full"})
    loaded = world.as_(ANALYST).get(f"{TABLES}/customers")
    assert loaded.status_code == 200
    assert "ssn" not in json.dumps(loaded.json()["metadata"].get("properties", {})).lower()


def test_case_insensitive_scans_cannot_rebind_the_row_filter(world: World) -> None:
    if world.admin.table_exists("demo.twin"):
        world.admin.drop_table("demo.twin")
    schema = Schema(NestedField(1, "id", LongType(), required=False),
                    NestedField(2, "region", StringType(), required=False),
                    NestedField(3, "REGION", StringType(), required=False))
    table = world.admin.create_table("demo.twin", schema)
    for region, other in (("us", "eu"), ("eu", "us")):
        table.append(pa.table({"id": pa.array([1], pa.int64()), "region": [region],
                               "REGION": [other]}))
    exact = world.plan(EU_ANALYST, "twin", {})
    folded = world.plan(EU_ANALYST, "twin", {"case-sensitive": False})
    assert exact.status_code == 200 and len(_paths(exact.json())) == 1
    assert folded.status_code in (200, 400, 403)
    if folded.status_code == 200:
        assert _paths(folded.json()) == _paths(exact.json())


# == attacks icegov refuses =================================================================


@pytest.mark.parametrize("body", [
    {"select": ["ssn"]},
    {"select": ["SSN"], "case-sensitive": False},
    {"select": ["id", "tax_id"]},  # a column the table does not have
    {"stats-fields": ["ssn"]},
    {"stats-fields": ["Ssn"], "case-sensitive": False},
    {"filter": {"type": "eq", "term": "ssn", "value": "111-22-3333"}},
    {"filter": {"type": "not", "child": {"type": "is-null", "term": "ssn"}}},
    {"filter": {"type": "eq", "term": {"type": "transform", "transform": "bucket[16]",
                                       "term": "ssn"}, "value": 3}},
    {"filter": {"type": "lt", "left": {"type": "reference", "name": "SSN"}, "right": "2"},
     "case-sensitive": False},
    {"filter": {"type": "eq", "left": {"type": "apply", "function": "length",
                                       "arguments": [{"type": "reference", "name": "ssn"}]},
                "right": 11}},
    {"filter": {"type": "eq", "term": "id", "value": 1}, "select": ["ssn.x"]},
])
def test_naming_a_hidden_column_anywhere_is_refused_as_no_column(
        world: World, body: dict[str, Any]) -> None:
    """400, worded as for a column the table does not have: the answer never tells a hidden
    column from a missing one."""
    error = assert_error_model(world.plan(ANALYST, "customers", body), 400)
    assert "denied" not in error["message"] and "mask" not in error["message"]
    for value in SSN:
        assert value not in error["message"]


def test_a_plain_plan_carries_no_statistics_of_hidden_columns(world: World) -> None:
    _customers(world.admin, "customers")
    answer = world.plan(ANALYST, "customers", {"select": ["id", "name"],
                                                "stats-fields": ["id", "name"]})
    assert answer.status_code == 200, answer.text
    assert _stat_keys(answer.json()) == {1, 2}
    assert not any(value in answer.text for value in SSN)


def test_an_unknown_column_is_400_without_echoing_table_internals(world: World) -> None:
    error = assert_error_model(world.plan(ANALYST, "customers", {"select": ["nope"]}), 400)
    assert "ssn" not in error["message"] and "email" not in error["message"]


def _eu_only(world: World, body: dict[str, Any], *, some: bool = True) -> list[str]:
    """eu-analyst's files of ``demo.orders`` for plan ``body``: every one of region ``eu``, and
    some (none when ``some`` is False: the body itself excludes ``eu``); the admin's plan of the
    same body holds files of another region, so the check had something to refuse."""
    admin = world.plan(ADMIN, "orders", body)
    assert admin.status_code == 200, admin.text
    assert any("region=eu" not in path for path in _paths(admin.json()))
    answer = world.plan(EU_ANALYST, "orders", body)
    assert answer.status_code == 200, answer.text
    paths = _paths(answer.json())
    assert bool(paths) == some, paths
    assert all("region=eu" in path for path in paths), paths
    return paths


@pytest.mark.parametrize(("body", "some"), [
    ({}, True),
    ({"case-sensitive": False}, True),
    ({"filter": {"type": "or", "left": {"type": "eq", "term": "region", "value": "us"},
                 "right": {"type": "eq", "term": "region", "value": "eu"}}}, True),
    # weakened to true: a filter that is not translated must not widen the row filter
    ({"filter": {"type": "eq", "term": {"type": "transform", "transform": "day",
                                        "term": "ts"}, "value": 19844}}, True),
    ({"filter": {"type": "not", "child": {"type": "eq", "term": {
        "type": "transform", "transform": "bucket[4]", "term": "id"}, "value": 1}}}, True),
    ({"filter": {"type": "not", "child": {"type": "eq", "term": "region", "value": "eu"}}},
     False),
])
def test_a_row_filtered_principal_never_gets_another_regions_file(
        world: World, body: dict[str, Any], some: bool) -> None:
    _eu_only(world, body, some=some)


def test_time_travel_and_incremental_scans_keep_the_row_filter(world: World) -> None:
    table = world.admin.load_table("demo.orders")
    first, last = table.metadata.snapshots[0].snapshot_id, table.metadata.current_snapshot_id
    assert _eu_only(world, {"snapshot-id": first})
    assert _eu_only(world, {"snapshot-id": first, "use-snapshot-schema": True})
    assert _eu_only(world, {"start-snapshot-id": first, "end-snapshot-id": last})


def test_a_cached_plan_of_another_principal_is_never_reused(world: World) -> None:
    """The admin plans wide, then narrower filters: eu-analyst's plans stay pruned."""
    narrow = {"filter": {"type": "gt-eq", "term": "id", "value": 2}}
    for body in ({}, narrow, {}, narrow):
        admin = world.plan(ADMIN, "orders", body)
        assert admin.status_code == 200
        assert any("region=us" in p for p in _paths(admin.json()))
        _eu_only(world, body)


def test_plan_tokens_serve_only_their_principal_and_table(world: World) -> None:
    planned = world.plan(EU_ANALYST, "orders", {})
    plan_id = planned.json()["plan-id"]
    for who in (ANALYST, ADMIN):  # another principal, even the admin: as if it did not exist
        assert_error_model(world.as_(who).get(f"{TABLES}/orders/plan/{plan_id}"), 404)
        assert_error_model(world.as_(who).delete(f"{TABLES}/orders/plan/{plan_id}"), 404)
    eu = world.as_(EU_ANALYST)
    assert_error_model(eu.get(f"{TABLES}/customers/plan/{plan_id}"), 404)  # another table
    assert_error_model(eu.post(f"{TABLES}/orders/tasks", json={"plan-task": plan_id}), 400)
    tampered = plan_id[:-3] + ("AAA" if not plan_id.endswith("AAA") else "BBB")
    assert_error_model(eu.get(f"{TABLES}/orders/plan/{tampered}"), 404)  # never issued
    assert eu.get(f"{TABLES}/orders/plan/{plan_id}").status_code == 200
    assert eu.delete(f"{TABLES}/orders/plan/{plan_id}").status_code == 204


def test_a_plan_id_dies_with_its_table(world: World) -> None:
    _customers(world.admin, "customers")
    plan_id = world.plan(ANALYST, "customers", {"select": ["id"]}).json()["plan-id"]
    _customers(world.admin, "customers")  # dropped and created again: a new uuid
    assert_error_model(world.as_(ANALYST).get(f"{TABLES}/customers/plan/{plan_id}"), 404)


def test_a_hidden_table_is_404_to_the_planner(world: World) -> None:
    world.admin.create_namespace_if_not_exists("vault")
    if not world.admin.table_exists("vault.secrets"):
        world.admin.create_table("vault.secrets", CUSTOMERS)
    hidden = world.as_(ANALYST).post("/v1/namespaces/vault/tables/secrets/plan", json={})
    absent = world.as_(ANALYST).post("/v1/namespaces/vault/tables/nothing/plan", json={})
    assert hidden.status_code == absent.status_code == 404
    assert hidden.json()["error"]["type"] == absent.json()["error"]["type"]


def test_a_column_restricted_writer_cannot_rewrite_data(world: World) -> None:
    """Overwrites and copy-on-write deletes by a principal that cannot see ssn: 403."""
    _customers(world.admin, "customers")
    deleter = RestCatalog("deleter", uri=world.proxy.url, credential=DELETER)
    table = deleter.load_table("demo.customers")
    assert [f.name for f in table.schema().fields] == ["id", "name", "email"]
    before = world.admin.load_table("demo.customers").metadata.current_snapshot_id
    with pytest.raises(ForbiddenError):
        table.overwrite(pa.table({"id": pa.array([9], pa.int64()), "name": ["x"],
                                  "email": ["e"]}))
    assert world.admin.load_table("demo.customers").metadata.current_snapshot_id == before


def test_a_row_filtered_principals_load_table_is_governed(world: World) -> None:
    """Its rows are filtered in the data it is served: nothing is left to declare, and every
    snapshot's manifest list is icegov's."""
    loaded = world.as_(EU_ANALYST).get(f"{TABLES}/orders").json()
    assert "read-restrictions" not in loaded
    assert loaded["metadata"]["snapshots"], loaded
    for snapshot in loaded["metadata"]["snapshots"]:
        assert "/_icegov_governed/" in snapshot["manifest-list"]


# == hostile input: never a 5xx, bounded cost ================================================

TYPED = Schema(
    NestedField(1, "l", LongType(), required=False),
    NestedField(2, "s", StringType(), required=False),
    NestedField(3, "ts", TimestampType(), required=False),
    NestedField(4, "d", DateType(), required=False),
    NestedField(5, "dec", DecimalType(9, 2), required=False),
    NestedField(6, "bin", BinaryType(), required=False),
    NestedField(7, "b", BooleanType(), required=False),
    NestedField(8, "f", DoubleType(), required=False),
    NestedField(9, "u", UUIDType(), required=False),
    NestedField(10, "fx", FixedType(4), required=False),
    NestedField(11, "st", StructType(NestedField(12, "x", LongType(), required=False)),
                required=False),
    NestedField(13, "li", ListType(14, LongType(), element_required=False), required=False),
    NestedField(15, "m", MapType(16, StringType(), 17, LongType(), value_required=False),
                required=False),
)
NAMES = st.sampled_from(["l", "s", "ts", "d", "dec", "bin", "b", "f", "u", "fx", "st", "st.x",
                         "li", "li.element", "m", "m.key", "L", "nope", "", "a.b.c"])
LITERALS = st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False),
                     st.text(max_size=12), st.booleans(), st.none(),
                     st.sampled_from(["2024-01-01", "2024-13-45", "12:00:00", "00ff",
                                      "f79c3e09-677c-4bbd-a479-3f349cb785e7", "1.005",
                                      "2024-01-01T00:00:00", "zz"]),
                     st.lists(st.integers(), max_size=2), st.dictionaries(
                         st.text(max_size=3), st.integers(), max_size=2))
TERMS = st.one_of(NAMES, st.fixed_dictionaries({"type": st.just("reference"), "term": NAMES}),
                  st.fixed_dictionaries({"type": st.just("transform"), "term": NAMES,
                                         "transform": st.sampled_from(
                                             ["identity", "day", "bucket[4]", "truncate[2]",
                                              "year", "void", "bucket[x]", ""])}))
LEAVES = st.one_of(
    st.builds(lambda t, term, v: {"type": t, "term": term, "value": v},
              st.sampled_from(["eq", "not-eq", "lt", "lt-eq", "gt", "gt-eq"]), TERMS,
              LITERALS),
    # starts-with on other than strings: FINDING 8, its own test below
    st.builds(lambda t, term, v: {"type": t, "term": term, "value": v},
              st.sampled_from(["starts-with", "not-starts-with"]),
              st.sampled_from(["s", "S", "nope"]), LITERALS),
    st.builds(lambda t, term: {"type": t, "term": term},
              st.sampled_from(["is-null", "not-null", "is-nan", "not-nan"]), TERMS),
    st.builds(lambda t, term, vs: {"type": t, "term": term, "values": vs},
              st.sampled_from(["in", "not-in"]), TERMS, st.lists(LITERALS, max_size=4)),
    st.builds(lambda t, name, v: {"type": t, "left": {"type": "reference", "name": name},
                                  "right": v},
              st.sampled_from(["eq", "lt", "gt-eq"]), NAMES, LITERALS),
    st.booleans(),
)
FILTERS = st.recursive(LEAVES, lambda inner: st.one_of(
    st.builds(lambda t, a, b: {"type": t, "left": a, "right": b},
              st.sampled_from(["and", "or"]), inner, inner),
    st.builds(lambda c: {"type": "not", "child": c}, inner)), max_leaves=6)
BODIES = st.fixed_dictionaries({}, optional={
    "filter": FILTERS, "select": st.lists(NAMES, max_size=3),
    "stats-fields": st.lists(NAMES, max_size=3), "case-sensitive": st.booleans(),
    "use-snapshot-schema": st.booleans(), "snapshot-id": st.integers(-1, 2**63 - 1),
    "min-rows-requested": st.integers(-1, 10)})


@pytest.fixture(scope="module")
def typed(world: World) -> str:
    if not world.admin.table_exists("demo.typed"):
        world.admin.create_table("demo.typed", TYPED).append(pa.table(
            {"l": pa.array([1, 2], pa.int64())}).cast(pa.schema([pa.field("l", pa.int64())])))
    return "typed"


@settings(max_examples=250, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=BODIES)
def test_hostile_plan_bodies_are_never_a_5xx(world: World, typed: str,
                                             body: dict[str, Any]) -> None:
    answer = world.plan(ADMIN, typed, body)
    assert answer.status_code in (200, 400, 403, 404), (body, answer.status_code, answer.text)
    if answer.status_code != 200:
        assert_error_model(answer, answer.status_code)


@pytest.mark.parametrize("body", [
    {"filter": {"type": "starts-with", "term": "l", "value": 0}},
    {"filter": {"type": "not-starts-with", "term": "l", "value": 12}},
])
def test_starts_with_on_a_non_string_column_is_a_4xx(world: World, typed: str,
                                                     body: dict[str, Any]) -> None:
    answer = world.plan(ADMIN, typed, body)
    assert 400 <= answer.status_code < 500, (answer.status_code, answer.text)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(task=st.one_of(st.text(max_size=64), st.integers(), st.none(), st.lists(st.text()),
                      st.builds(lambda a, b: f"1.{a}.{b}", st.text(max_size=40),
                                st.text(max_size=40))))
def test_hostile_plan_tasks_and_ids_are_clean_4xx(world: World, task: Any) -> None:
    eu = world.as_(EU_ANALYST)
    fetched = eu.post(f"{TABLES}/orders/tasks", json={"plan-task": task})
    assert fetched.status_code in (400, 404), fetched.text
    if isinstance(task, str) and task.strip(".") != "":
        polled = eu.get(f"{TABLES}/orders/plan/{quote(task, safe='')}")
        assert polled.status_code in (400, 404), polled.text


def test_huge_set_and_deep_filters_are_bounded(world: World) -> None:
    """The caps hold (10,000 literals, depth 100); a maximal set is still answered with only
    the principal's files."""
    huge = {"type": "in", "term": "id", "values": list(range(10_000))}
    answer = world.as_(EU_ANALYST).post(f"{TABLES}/orders/plan", json={"filter": huge},
                                        timeout=120)
    assert answer.status_code == 200
    paths = _paths(answer.json())
    assert paths and all("region=eu" in path for path in paths), paths
    too_many = {"type": "in", "term": "id", "values": list(range(10_001))}
    assert_error_model(world.plan(EU_ANALYST, "orders", {"filter": too_many}), 400)
    deep: Any = {"type": "eq", "term": "id", "value": 1}
    for _ in range(150):
        deep = {"type": "not", "child": deep}
    assert_error_model(world.plan(EU_ANALYST, "orders", {"filter": deep}), 400)
    wide = {"select": ["id"] * 10_000}
    assert world.plan(EU_ANALYST, "orders", wide).status_code == 200


def test_every_plan_id_icegov_issues_fits_in_a_url(world: World) -> None:
    body = {"filter": {"type": "in", "term": "id", "values": list(range(9_000))}}
    planned = world.as_(EU_ANALYST).post(f"{TABLES}/orders/plan", json=body, timeout=120)
    assert planned.status_code == 200
    plan_id = planned.json()["plan-id"]
    assert world.as_(EU_ANALYST).delete(f"{TABLES}/orders/plan/{plan_id}").status_code == 204


def test_a_policy_reload_that_hides_more_voids_earlier_plans(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    workdir = tmp_path_factory.mktemp("reload")
    policy = {**_policies(workdir), "reload_interval_seconds": 0.05}
    with proxy_for("embedded", workdir, policy=policy) as proxy:
        admin = RestCatalog("admin", uri=proxy.url, credential=ADMIN)
        admin.create_namespace("demo")
        _customers(admin, "customers")
        analyst = as_principal(proxy.url, ANALYST)
        plan_id = analyst.post(f"{TABLES}/customers/plan",
                               json={"select": ["id", "name"]}).json()["plan-id"]
        assert analyst.get(f"{TABLES}/customers/plan/{plan_id}").status_code == 200
        with Path(policy["policy_path"]).open("a") as rules:
            rules.write("p, analyst, icegov.demo.customers.name, SELECT, deny\n")
        wait_for(lambda: analyst.get(f"{TABLES}/customers/plan/{plan_id}").status_code != 200,
                 what="the policy reload")
        assert_error_model(analyst.get(f"{TABLES}/customers/plan/{plan_id}"), 403)
        analyst.close()
