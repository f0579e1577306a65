"""Attacker's review, round 6 (unit): what a restricted principal learns through server-side
planning, loadTable's config, the catalog config and views.

Principals are the demo policy's: ``analyst`` (``demo.customers.ssn`` denied, ``email`` masked),
``writer`` (no column rules). Tables are real (pyiceberg ``SqlCatalog`` in ``tmp_path``) behind
a fake backing that serves their metadata, so plans read real manifests.

Every attack here is met today (refused or made harmless) and keeps a passing test, so a regression
shows (the findings once pinned as strict xfails were fixed and un-marked)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField, StringType
from starlette.testclient import TestClient

from proxy.catalog import store
from tests.support.audit import no_icegov_environment  # noqa: F401
from tests.support.errors import assert_error_model
from tests.support.settings import POLICIES
from tests.support.upstream import ALL_ENDPOINTS, Upstream, client_for
from tests.unit.test_page_tokens_view_guard_keys_verify import (
    ViewWorld,
    bearer,
    table_answer,
    view_answer,
)

pytestmark = pytest.mark.usefixtures("no_icegov_environment")

ANALYST = "analyst:analyst-secret"
WRITER = "writer:writer-secret"
CUSTOMERS = "/v1/cat/namespaces/demo/tables/customers"
SSNS = ["111-22-3333", "222-33-4444", "333-44-5555"]


# -- a real table behind a fake backing ---------------------------------------------------------

def customers(tmp: Path, schema: Schema, rows: Callable[[int, str], dict[str, Any]]) -> Table:
    """``demo.customers`` with ``schema`` and one single-row data file per SSN (the bounds of a
    one-row file are its values); ``rows(i, ssn)`` gives the columns of row ``i``."""
    catalog = store.open_catalog(f"sqlite:///{tmp / 'catalog.db'}", tmp / "warehouse")
    catalog.create_namespace("demo")
    table = catalog.create_table(("demo", "customers"), schema=schema)
    arrow = schema.as_arrow()
    for i, ssn in enumerate(SSNS):
        table.append(pa.Table.from_pylist([rows(i, ssn)], schema=arrow))
    return catalog.load_table(("demo", "customers"))


def served(table: Table) -> dict[str, Any]:
    return {"metadata-location": table.metadata_location,
            "metadata": json.loads(table.metadata.model_dump_json()), "config": {}}


def proxy_serving(tmp: Path, table: Table, **settings: Any) -> TestClient:
    answer = served(table)
    return client_for(Upstream(lambda _: httpx.Response(200, json=answer)), tmp, **settings)


def plan(client: TestClient, headers: dict[str, str], body: dict[str, Any]) -> httpx.Response:
    response: httpx.Response = client.post(f"{CUSTOMERS}/plan", json=body, headers=headers)
    return response


def outcome(response: httpx.Response) -> tuple[int, tuple[str, ...]]:
    """The status and, for a plan, the data files it hands out."""
    if response.status_code != 200:
        return response.status_code, ()
    return 200, tuple(sorted(t["data-file"]["file-path"]
                             for t in response.json()["file-scan-tasks"]))


def eq(term: str, value: str) -> dict[str, Any]:
    return {"type": "eq", "term": term, "value": value}


ID_SSN = Schema(NestedField(1, "id", LongType(), required=False),
                NestedField(2, "ssn", StringType(), required=False))


def id_ssn_row(i: int, ssn: str) -> dict[str, Any]:
    return {"id": i, "ssn": ssn}


# == 1. Planning: a filter bound to another schema than the one judged ==========================

def renamed(table: Table) -> Table:
    with table.update_schema() as update:
        update.rename_column("ssn", "tax_id")
    return table


def dropped(table: Table) -> Table:
    with table.update_schema() as update:
        update.delete_column("ssn")
    return table


@pytest.mark.parametrize("change", [renamed, dropped], ids=["renamed", "dropped"])
def test_an_incremental_scan_on_the_snapshot_schema_cannot_filter_on_a_hidden_column(
        tmp_path: Path, change: Callable[[Table], Table]) -> None:
    table = customers(tmp_path, ID_SSN, id_ssn_row)
    first, _, last = (s.snapshot_id for s in table.metadata.snapshots)
    change(table)
    incremental = {"start-snapshot-id": first, "end-snapshot-id": last,
                   "use-snapshot-schema": True}
    with proxy_serving(tmp_path, table.refresh()) as client:
        analyst = bearer(client, ANALYST)
        present = outcome(plan(client, analyst, {**incremental, "filter": eq("ssn", SSNS[2])}))
        absent = outcome(plan(client, analyst, {**incremental, "filter": eq("ssn", "none")}))
    # what comes back must not depend on the hidden column's values
    assert present == absent, (present, absent)


def test_time_travel_on_the_snapshot_schema_refuses_the_hidden_columns_old_name(
        tmp_path: Path) -> None:
    table = renamed(customers(tmp_path, ID_SSN, id_ssn_row))
    old = table.metadata.snapshots[-1].snapshot_id
    with proxy_serving(tmp_path, table.refresh()) as client:
        analyst = bearer(client, ANALYST)
        refused = plan(client, analyst, {"snapshot-id": old, "use-snapshot-schema": True,
                                         "filter": eq("ssn", SSNS[0])})
        new_name = plan(client, analyst, {"filter": eq("tax_id", SSNS[0])})
    assert_error_model(refused, 400)  # refused as a column the analyst's table does not have
    assert_error_model(new_name, 400)


def test_statistics_of_a_renamed_hidden_column_stay_out_of_incremental_plans(
        tmp_path: Path) -> None:
    table = renamed(customers(tmp_path, ID_SSN, id_ssn_row))
    first, _, last = (s.snapshot_id for s in table.metadata.snapshots)
    with proxy_serving(tmp_path, table.refresh()) as client:
        answer = plan(client, bearer(client, ANALYST), {
            "start-snapshot-id": first, "end-snapshot-id": last, "use-snapshot-schema": True,
            "stats-fields": ["id", "ssn"]})
    assert answer.status_code in (200, 400), answer.text  # 400: 'ssn' is the hidden column's
    assert all(ssn.encode().hex().upper() not in answer.text for ssn in SSNS)
    for task in answer.json().get("file-scan-tasks", []):
        assert 2 not in task["data-file"].get("lower-bounds", {}).get("keys", [])


TWINS = Schema(NestedField(1, "id", LongType(), required=False),
               NestedField(2, "SSN", StringType(), required=False),  # readable
               NestedField(3, "ssn", StringType(), required=False))  # denied to analyst


def test_a_case_insensitive_filter_cannot_bind_to_a_hidden_twin_column(tmp_path: Path) -> None:
    table = customers(tmp_path, TWINS, lambda i, ssn: {"id": i, "SSN": "public", "ssn": ssn})
    with proxy_serving(tmp_path, table) as client:
        analyst = bearer(client, ANALYST)
        folded = {"case-sensitive": False}
        present = outcome(plan(client, analyst, {**folded, "filter": eq("Ssn", SSNS[1])}))
        absent = outcome(plan(client, analyst, {**folded, "filter": eq("Ssn", "none")}))
        exact = plan(client, analyst, {"filter": eq("ssn", SSNS[1])})
    assert_error_model(exact, 400)  # the exact spelling is refused (as no column)
    assert present == absent, (present, absent)


@pytest.mark.parametrize("field", ["select", "stats-fields"])
def test_plan_errors_do_not_tell_whether_a_denied_column_exists(tmp_path: Path,
                                                                field: str) -> None:
    table = customers(tmp_path, ID_SSN, id_ssn_row)
    with proxy_serving(tmp_path, table) as client:
        analyst = bearer(client, ANALYST)
        denied = plan(client, analyst, {field: ["ssn"]})
        unknown = plan(client, analyst, {field: ["no_such_column"]})
    assert denied.status_code == unknown.status_code, (denied.text, unknown.text)
    assert "denied" not in denied.text


# == 2. Storage secrets ===========================================================================

def test_the_catalog_config_hands_no_storage_secret_to_a_restricted_principal(
        tmp_path: Path) -> None:
    upstream = Upstream(config={
        "defaults": {"s3.access-key-id": "AKIAEXAMPLE", "s3.secret-access-key": "SECRETKEY"},
        "overrides": {"prefix": "cat", "adls.sas-token.acct": "SASTOKEN"},
        "endpoints": ALL_ENDPOINTS})
    with client_for(upstream, tmp_path) as client:
        config = client.get("/v1/config", headers=bearer(client, ANALYST))
    assert config.status_code == 200, config.text
    for secret in ("SECRETKEY", "SASTOKEN"):
        assert secret not in config.text


@pytest.mark.parametrize("key", ["adls.auth.shared-key.account.key", "adls.client-secret",
                                 "client.access-key-secret", "hf.token"])
def test_load_table_config_drops_every_fileio_secret(tmp_path: Path, key: str) -> None:
    table = table_answer(tmp_path, "id", "ssn", "email")
    table["config"] = {key: "THE-SECRET", "s3.endpoint": "http://minio"}
    upstream = Upstream(lambda _: httpx.Response(200, json=table))
    with client_for(upstream, tmp_path) as client:
        loaded = client.get(CUSTOMERS, headers=bearer(client, ANALYST))
    assert loaded.status_code == 200, loaded.text
    assert loaded.json()["config"]["s3.endpoint"] == "http://minio"
    assert "THE-SECRET" not in loaded.text


def test_the_known_secrets_stay_out_of_a_restricted_load_table(tmp_path: Path) -> None:
    table = table_answer(tmp_path, "id", "ssn", "email")
    table["config"] = {"s3.secret-access-key": "S1", "adls.sas-token.acct": "S2",
                       "gcs.oauth2.token": "S3", "token": "S4"}
    table["storage-credentials"] = [{"prefix": "s3://b", "config": {"s3.session-token": "S5"}}]
    upstream = Upstream(lambda _: httpx.Response(200, json=table))
    with client_for(upstream, tmp_path) as client:
        loaded = client.get(CUSTOMERS, headers=bearer(client, ANALYST))
    assert loaded.status_code == 200, loaded.text
    assert not any(f"S{n}" in loaded.text for n in range(1, 6))


# == 3. Views =====================================================================================

def a_view_in(default_namespace: list[str], sql: str, fields: list[str]) -> dict[str, Any]:
    view = view_answer(sql, fields)
    view["metadata"]["versions"][0]["default-namespace"] = default_namespace
    return view


def test_a_view_resolving_its_sql_in_a_hidden_namespace_is_refused(tmp_path: Path) -> None:
    rule = "p, analyst, icegov.hr.*, SELECT, deny\n"
    with ViewWorld(tmp_path, rule) as world:
        named = world.load(a_view_in(["demo"], "SELECT name, salary FROM hr.payroll",
                                     ["name", "salary"]))
        assert named.status_code == 403  # naming hr in the SQL is refused
        loaded = world.load(a_view_in(["hr"], "SELECT name, salary FROM payroll",
                                      ["name", "salary"]))
    assert loaded.status_code == 403, loaded.text


def test_a_view_over_a_table_the_reader_cannot_see_does_not_name_it(tmp_path: Path) -> None:
    with ViewWorld(tmp_path) as world:
        writer = bearer(world.client, WRITER)
        hidden_table = world.client.get("/v1/cat/namespaces/hr/tables/payroll", headers=writer)
        assert_error_model(hidden_table, 404)
        world.view = a_view_in(["demo"], "SELECT name, salary FROM hr.payroll",
                               ["name", "salary"])
        loaded = world.client.get("/v1/cat/namespaces/demo/views/v", headers=writer)
    assert "payroll" not in loaded.text, loaded.status_code


def test_a_view_naming_a_denied_column_only_in_its_doc_or_nested_field_is_refused(
        tmp_path: Path) -> None:
    nested = view_answer("SELECT id, info FROM demo.t", ["id", "info"])
    nested["metadata"]["schemas"][0]["fields"][1]["type"] = {
        "type": "struct", "fields": [{"id": 3, "name": "SSN", "type": "string",
                                      "required": False}]}
    with ViewWorld(tmp_path) as world:
        by_doc = world.load(view_answer("SELECT id FROM demo.t", ["id"],
                                        docs={"id": "copied from customers.ssn"}))
        by_nested = world.load(nested)
    assert_error_model(by_doc, 403)
    assert_error_model(by_nested, 403)


# == 4. Plans and credentials: tokens stay with their principal ==================================

def test_a_plan_id_opens_no_credentials_for_its_own_restricted_principal(tmp_path: Path) -> None:
    table = customers(tmp_path, ID_SSN, id_ssn_row)
    with proxy_serving(tmp_path, table) as client:
        analyst = bearer(client, ANALYST)
        planned = plan(client, analyst, {"select": ["id"]})
        assert planned.status_code == 200, planned.text
        plan_id = planned.json()["plan-id"]
        with_plan = client.get(f"{CUSTOMERS}/credentials", params={"planId": plan_id},
                               headers=analyst)
        writer_with_it = client.get(f"{CUSTOMERS}/credentials", params={"planId": plan_id},
                                    headers=bearer(client, WRITER))
        writer_fetch = client.get(f"{CUSTOMERS}/plan/{plan_id}", headers=bearer(client, WRITER))
    assert_error_model(with_plan, 403)
    assert_error_model(writer_with_it, 404, "NoSuchPlanIdException")
    assert_error_model(writer_fetch, 404, "NoSuchPlanIdException")


def test_policy_file_is_the_demo_policy() -> None:
    """The findings above assume the demo policy's column rules for analyst."""
    text = (POLICIES / "policy.csv").read_text()
    assert "p, analyst, icegov.demo.customers.ssn, SELECT, deny" in text
    assert "p, analyst, icegov.demo.customers.email, SELECT, mask:show-last-4" in text
