"""A second attacker's review of column and row policies (issue 8): the answers and commits the
first review (``test_planning_attacks.py``) did not look at.

Principals (``tests.support.read_tables``): ``analyst-writer`` (``ssn`` of ``demo.customers``
denied, ``email`` masked, write and ALTER rights on ``demo.*``) and ``eu-writer`` (only
``region = 'eu'`` rows of ``demo.orders``, write rights). This module's copy of the policy adds
rights a real deployment may well grant: ``analyst-writer`` may rename ``demo.customers`` and
owns a sandbox namespace ``scratch``; ``eu-writer`` may ALTER ``demo.orders`` (schema
evolution) and manage its snapshots; ``demo.filtered`` carries a row filter over a column the
same principal may not see (a policy mistake).

Every attack here is met today (refused or made harmless) and is a plain test (the findings once
pinned as strict xfails were fixed and un-marked).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import proxy_for
from tests.support.errors import assert_error_model
from tests.support.read_tables import (
    ANALYST_WRITER,
    CUSTOMERS,
    EU_ANALYST,
    EU_WRITER,
    MASK_CAPABLE_CLIENT,
    MASK_TRUSTED,
    ORDERS,
    SSN_ID,
    build_customers,
    build_orders,
    customers_schema,
    local_policies,
    table_state,
)
from tests.support.settings import ADMIN
from tests.support.world import World, world_of

TABLES = "/v1/namespaces/demo/tables"
SSN_VALUES = ("111-11-1111", "222-22-2222", "333-33-3333", "444-44-4444")
EXTRA_RULES = """
# test-local (second attack review): rights a deployment may grant to restricted writers
p, analyst-writer, icegov.demo.customers, RENAME_TABLE, allow
p, analyst-writer, icegov.scratch, BROWSE, allow
p, analyst-writer, icegov.scratch.*, *, allow
p, eu-writer, icegov.demo.orders, ALTER, allow
p, eu-writer, icegov.demo.orders, MANAGE_SNAPSHOTS, allow
# a policy mistake: a row filter over a column the same principal may not see
p, analyst-writer, icegov.demo.filtered.ssn, SELECT, deny
p, analyst-writer, icegov.demo.filtered, SELECT, "filter:ssn = '111-11-1111'"
"""




@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    workdir = tmp_path_factory.mktemp("attacks2")
    settings = local_policies(workdir)
    with Path(settings["policy"]["policy_path"]).open("a") as rules:
        rules.write(EXTRA_RULES)
    settings["planning"] = {"mask_capable_clients": (MASK_CAPABLE_CLIENT,),
                            "mask_capable_principals": (MASK_TRUSTED,)}
    with proxy_for("embedded", workdir, **settings) as proxy, world_of(proxy) as world:
        world.admin.create_namespace_if_not_exists("scratch")
        yield world


def _paths(answer: httpx.Response) -> list[str]:
    assert answer.status_code == 200, answer.text
    return [t["data-file"]["file-path"] for t in answer.json().get("file-scan-tasks", [])]


def _stat_keys(answer: httpx.Response) -> set[int]:
    keys: set[int] = set()
    for task in answer.json().get("file-scan-tasks", []):
        for stats in ("lower-bounds", "upper-bounds", "value-counts", "null-value-counts"):
            keys.update(task["data-file"].get(stats, {}).get("keys", []))
    return keys


def _field_names(loaded: dict[str, Any]) -> set[str]:
    return {f["name"] for schema in loaded["metadata"]["schemas"] for f in schema["fields"]}


def _drop(world: World, identifier: str) -> None:
    if world.admin.table_exists(identifier):
        world.admin.drop_table(identifier)


# == findings (fixed: each is refused now) ===================================================


def test_schema_evolution_by_a_row_filtered_writer_cannot_rebind_its_filter(
        world: World) -> None:
    build_orders(world.admin)
    renamed = {"type": "struct", "schema-id": 1, "fields": [
        {"id": 1, "name": "order_id", "required": False, "type": "long"},
        {"id": 2, "name": "zone", "required": False, "type": "string"},
        {"id": 3, "name": "amount", "required": False, "type": "long"},
        {"id": 4, "name": "region", "required": False, "type": "string"}]}
    before = table_state(world.proxy.url, ORDERS)
    committed = world.commit(EU_WRITER, "orders", {"action": "add-schema", "schema": renamed},
                             {"action": "set-current-schema", "schema-id": -1})
    assert_error_model(committed, 403)
    assert table_state(world.proxy.url, ORDERS) == before  # a 403 alone: also if it landed
    body = {"select": ["order_id", "amount"]}
    assert any("region=eu" not in path for path in _paths(world.plan(ADMIN, "orders", body)))
    for who in (EU_WRITER, EU_ANALYST):
        paths = _paths(world.plan(who, "orders", body))
        assert paths and all("region=eu" in path for path in paths), (who, paths)


def test_removing_old_schemas_does_not_reveal_a_renamed_hidden_column(world: World) -> None:
    table = build_customers(world.admin)
    with table.update_schema() as update:
        update.rename_column("ssn", "tax_id")
    assert "tax_id" not in _field_names(world.as_(ANALYST_WRITER).get(
        f"{TABLES}/customers").json())  # widened: hidden under its new name
    removed = world.commit(ANALYST_WRITER, "customers",
                           {"action": "remove-schemas", "schema-ids": [0]})
    loaded = world.as_(ANALYST_WRITER).get(f"{TABLES}/customers").json()
    planned = world.plan(ANALYST_WRITER, "customers", {"select": ["id"],
                                                       "stats-fields": ["id", "tax_id"]})
    assert "tax_id" not in _field_names(loaded), removed.status_code
    assert planned.status_code == 403 or SSN_ID not in _stat_keys(planned)


def test_renaming_a_restricted_table_does_not_shed_its_rules(world: World) -> None:
    build_customers(world.admin)
    _drop(world, "scratch.moved")
    try:
        renamed = world.as_(ANALYST_WRITER).post("/v1/tables/rename", json={
            "source": {"namespace": ["demo"], "name": "customers"},
            "destination": {"namespace": ["scratch"], "name": "moved"}})
        planned = world.plan(ANALYST_WRITER, "moved", {"select": ["id", "ssn"],
                                                       "stats-fields": ["ssn"]}, "scratch")
        leaked = planned.status_code == 200 and SSN_ID in _stat_keys(planned)
        assert not leaked, (renamed.status_code, planned.text[:200])
    finally:
        if world.admin.table_exists("scratch.moved"):
            world.admin.rename_table("scratch.moved", CUSTOMERS)


def test_a_commit_answer_cannot_be_registered_into_an_unrestricted_copy(world: World) -> None:
    build_customers(world.admin)
    _drop(world, "scratch.copy")
    answer = world.commit(ANALYST_WRITER, "customers",
                          {"action": "set-properties", "updates": {"owner": "me"}})
    assert answer.status_code == 200, answer.text
    assert SSN_ID not in {f["id"] for s in answer.json()["metadata"]["schemas"]
                          for f in s["fields"]}  # the answer itself is projected
    registered = world.as_(ANALYST_WRITER).post("/v1/namespaces/scratch/register", json={
        "name": "copy", "metadata-location": answer.json()["metadata-location"]})
    planned = world.plan(ANALYST_WRITER, "copy", {"select": ["id", "ssn"],
                                                  "stats-fields": ["ssn"]}, "scratch")
    leaked = planned.status_code == 200 and SSN_ID in _stat_keys(planned)
    assert not leaked, (registered.status_code, planned.text[:200])


def test_a_partition_spec_over_a_hidden_column_is_refused_before_it_lands(
        world: World) -> None:
    build_customers(world.admin)
    spec = {"spec-id": 1, "fields": [{"source-id": SSN_ID, "field-id": 1000,
                                      "transform": "identity", "name": "by_ssn"}]}
    answer = world.commit(ANALYST_WRITER, "customers", {"action": "add-spec", "spec": spec},
                          {"action": "set-default-spec", "spec-id": -1})
    assert_error_model(answer, 403)
    table = world.admin.load_table(CUSTOMERS)
    assert table.spec().is_unpartitioned(), "the refused commit landed"


def test_a_row_filter_over_a_hidden_column_is_not_handed_to_the_principal(
        world: World) -> None:
    _drop(world, "demo.filtered")
    world.admin.create_namespace_if_not_exists("demo")
    world.admin.create_table("demo.filtered", customers_schema())
    loaded = world.as_(ANALYST_WRITER).get(f"{TABLES}/filtered")
    if loaded.status_code == 200:
        declared = json.dumps(loaded.json().get("read-restrictions", {}))
        assert "111-11-1111" not in declared and f'"id": {SSN_ID}' not in declared
    else:
        assert_error_model(loaded, 403)


# == attacks icegov refuses =================================================================


@pytest.mark.parametrize("update", [
    {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": 0},
    {"action": "set-snapshot-ref", "ref-name": "mine", "type": "branch", "snapshot-id": -1},
    {"action": "remove-snapshot-ref", "ref-name": "main"},
])
def test_a_row_filtered_principal_cannot_move_refs(world: World, update: dict[str, Any]) -> None:
    """Rollbacks and new branches by eu-writer (who holds MANAGE_SNAPSHOTS here): 403."""
    table = build_orders(world.admin)
    snapshots = [s.snapshot_id for s in table.snapshots()]
    if "snapshot-id" in update:
        update = {**update, "snapshot-id": snapshots[update["snapshot-id"]]}
    before = table_state(world.proxy.url, ORDERS)
    assert_error_model(world.commit(EU_WRITER, "orders", update), 403)
    assert table_state(world.proxy.url, ORDERS) == before
    assert set(world.admin.load_table(ORDERS).refs()) == {"main"}


@pytest.mark.parametrize(("credential", "table", "update"), [
    (ANALYST_WRITER, "customers", {"action": "set-current-schema", "schema-id": 0}),
    (ANALYST_WRITER, "customers", {"action": "add-schema", "schema": {
        "type": "struct", "schema-id": 1, "fields": [
            {"id": 1, "name": "id", "required": True, "type": "long"},
            {"id": 4, "name": "renamed", "required": False, "type": "string"}]}}),
    (EU_WRITER, "orders", {"action": "remove-snapshot-ref", "ref-name": "main"}),
])
def test_a_transaction_is_judged_like_a_table_commit(
        world: World, credential: str, table: str, update: dict[str, Any]) -> None:
    build_customers(world.admin)
    build_orders(world.admin)
    identifier = f"demo.{table}"
    before = table_state(world.proxy.url, identifier)
    answer = world.as_(credential).post("/v1/transactions/commit", json={"table-changes": [
        {"identifier": {"namespace": ["demo"], "name": table}, "requirements": [],
         "updates": [update]}]})
    error = assert_error_model(answer, 403)
    assert not any(value in error["message"] for value in SSN_VALUES)
    assert "ssn" not in error["message"]
    assert table_state(world.proxy.url, identifier) == before


def test_going_back_to_an_older_schema_is_a_schema_change(world: World) -> None:
    """An older schema lacking a column would drop it from what the writer rewrites: 403."""
    table = build_customers(world.admin)
    with table.update_schema() as update:
        update.add_column("extra", table.schema().find_field("name").field_type)
    before = table_state(world.proxy.url, CUSTOMERS)
    answer = world.commit(ANALYST_WRITER, "customers",
                          {"action": "set-current-schema", "schema-id": 0})
    assert_error_model(answer, 403)
    assert table_state(world.proxy.url, CUSTOMERS) == before


def test_an_idempotency_key_never_replays_another_principals_answer(world: World) -> None:
    build_customers(world.admin)
    key = "0190a8f0-0000-7000-8000-0000000000a2"
    body = {"requirements": [], "updates": [
        {"action": "set-properties", "updates": {"k": "v"}}]}
    first = world.as_(ADMIN).post(f"{TABLES}/customers", json=body,
                                  headers={"Idempotency-Key": key})
    assert first.status_code == 200 and "ssn" in first.text
    again = world.as_(ANALYST_WRITER).post(f"{TABLES}/customers", json=body,
                                           headers={"Idempotency-Key": key})
    assert_error_model(again, 422)
    assert "ssn" not in again.text and "metadata" not in again.text


def test_every_load_form_is_projected(world: World) -> None:
    """``snapshots=refs`` and conditional loads carry no hidden column and no base metadata file
    (the governed metadata file a governed answer names holds only what the principal may
    read)."""
    build_customers(world.admin)
    analyst = world.as_(ANALYST_WRITER)
    for params, headers in (({"snapshots": "refs"}, {}), ({"snapshots": "all"}, {}),
                            ({}, {"If-None-Match": '"*"'})):
        loaded = analyst.get(f"{TABLES}/customers", params=params, headers=headers)
        assert loaded.status_code in (200, 304), loaded.text[:200]
        if loaded.status_code == 200:
            assert "ssn" not in loaded.text
            location = loaded.json().get("metadata-location") or "/_icegov_governed/"
            assert "/_icegov_governed/" in location


def test_a_plain_rename_of_the_filter_column_fails_closed(world: World) -> None:
    table = build_orders(world.admin)
    with table.update_schema() as update:
        update.rename_column("region", "zone")
    assert_error_model(world.plan(EU_ANALYST, "orders", {"select": ["amount"]}), 403)
    assert_error_model(world.as_(EU_ANALYST).get(f"{TABLES}/orders"), 403)
