"""Iceberg views through icegov, on both backing catalogs: the REST contract (raw HTTP and
pyiceberg), governance of the view's own resource, and real Spark ``CREATE VIEW`` … ``DROP VIEW``.

Reading a view also needs SELECT on what it reads: Spark resolves the view's SQL itself and loads
the underlying tables through icegov, under the reader's own credentials. Every principal's Spark
catalog here lives in one SparkSession, so a view whose SQL must be resolved as the reader names
the reader's catalog as its ``default-catalog`` (created over REST, as any engine may).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import NoSuchViewError
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField
from pyiceberg.view.metadata import ViewVersion

from tests.conftest import RunningProxy
from tests.support.errors import assert_error_model
from tests.support.http import as_principal, audit_records
from tests.support.settings import ADMIN
from tests.support.spark import add_rest_catalog

_ids = itertools.count()
ID_SCHEMA = {"type": "struct", "schema-id": 0, "fields": [
    {"id": 1, "name": "id", "type": "long", "required": False}]}


def fresh(prefix: str) -> str:
    return f"{prefix}{next(_ids)}_{uuid.uuid4().hex[:6]}"


def view_version(sql: str, namespace: list[str], catalog: str | None = None,
                 schema_id: int = 0) -> dict[str, Any]:
    version: dict[str, Any] = {
        "version-id": 1, "timestamp-ms": 1_700_000_000_000, "schema-id": schema_id,
        "summary": {"engine-name": "icegov-tests"}, "default-namespace": namespace,
        "representations": [{"type": "sql", "sql": sql, "dialect": "spark"}]}
    if catalog is not None:
        version["default-catalog"] = catalog
    return version


def create_view(http: httpx.Client, namespace: str, name: str, sql: str,
                catalog: str | None = None) -> httpx.Response:
    return http.post(f"/v1/namespaces/{namespace}/views", json={
        "name": name, "schema": ID_SCHEMA, "properties": {},
        "view-version": view_version(sql, [namespace], catalog)})


@pytest.fixture()
def admin_http(proxy: RunningProxy) -> Iterator[httpx.Client]:
    with as_principal(proxy.url, ADMIN) as client:
        yield client


@pytest.fixture()
def namespace(admin_http: httpx.Client) -> str:
    name = fresh("vns")
    assert admin_http.post("/v1/namespaces", json={"namespace": [name]}).status_code == 200
    return name


# ------------------------------------------------------------------------ REST, both backings


def test_view_rest_contract_through_icegov(admin_http: httpx.Client, namespace: str) -> None:
    views = f"/v1/namespaces/{namespace}/views"
    config = admin_http.get("/v1/config").json()["endpoints"]
    assert "POST /v1/{prefix}/namespaces/{namespace}/views/{view}" in config

    created = create_view(admin_http, namespace, "v", "SELECT 1 AS id")
    assert created.status_code == 200, created.text
    body = created.json()
    assert {"metadata-location", "metadata"} <= set(body)
    metadata = body["metadata"]
    assert metadata["format-version"] == 1 and metadata["current-version-id"] == 1
    current = next(v for v in metadata["versions"] if v["version-id"] == 1)
    assert current["representations"] == [
        {"type": "sql", "sql": "SELECT 1 AS id", "dialect": "spark"}]
    assert admin_http.get(f"{views}/v").json()["metadata"] == metadata
    assert admin_http.head(f"{views}/v").status_code == 204
    assert admin_http.get(views).json()["identifiers"] == [{"namespace": [namespace], "name": "v"}]

    assert_error_model(create_view(admin_http, namespace, "v", "SELECT 2 AS id"), 409,
                       "AlreadyExistsException")
    assert_error_model(admin_http.get(f"{views}/nope"), 404)
    assert admin_http.head(f"{views}/nope").status_code == 404
    assert_error_model(admin_http.get(f"/v1/namespaces/{namespace}/tables/v"), 404)

    replace = {"requirements": [{"type": "assert-view-uuid", "uuid": metadata["view-uuid"]}],
               "updates": [{"action": "add-view-version",
                            "view-version": view_version("SELECT 2 AS id", [namespace])},
                           {"action": "set-current-view-version", "view-version-id": -1}]}
    replaced = admin_http.post(f"{views}/v", json=replace)
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["metadata"]["current-version-id"] == 2
    stale = {**replace, "requirements": [
        {"type": "assert-view-uuid", "uuid": "00000000-0000-0000-0000-000000000000"}]}
    assert_error_model(admin_http.post(f"{views}/v", json=stale), 409, "CommitFailedException")

    rename = {"source": {"namespace": [namespace], "name": "v"},
              "destination": {"namespace": [namespace], "name": "w"}}
    assert admin_http.post("/v1/views/rename", json=rename).status_code == 204
    assert admin_http.head(f"{views}/v").status_code == 404
    assert admin_http.get(f"{views}/w").json()["metadata"]["current-version-id"] == 2
    assert_error_model(admin_http.delete(f"/v1/namespaces/{namespace}"), 409,
                       "NamespaceNotEmptyException")
    assert admin_http.delete(f"{views}/w").status_code == 204
    assert_error_model(admin_http.delete(f"{views}/w"), 404)
    assert admin_http.get(views).json()["identifiers"] == []


def test_a_view_cannot_take_a_tables_name(admin_http: httpx.Client, namespace: str) -> None:
    table = admin_http.post(f"/v1/namespaces/{namespace}/tables",
                            json={"name": "t", "schema": ID_SCHEMA})
    assert table.status_code == 200, table.text
    assert_error_model(create_view(admin_http, namespace, "t", "SELECT 1 AS id"), 409,
                       "AlreadyExistsException")
    assert create_view(admin_http, namespace, "v", "SELECT 1 AS id").status_code == 200
    assert_error_model(admin_http.post(f"/v1/namespaces/{namespace}/tables",
                                       json={"name": "v", "schema": ID_SCHEMA}), 409,
                       "AlreadyExistsException")
    assert_error_model(create_view(admin_http, "no_such_ns", "v", "SELECT 1 AS id"), 404,
                       "NoSuchNamespaceException")


def test_pyiceberg_creates_lists_loads_and_drops_views(proxy: RunningProxy, namespace: str) -> None:
    catalog = RestCatalog("views", uri=proxy.url, credential=ADMIN)
    schema = Schema(NestedField(1, "id", LongType(), required=False))
    version = ViewVersion.model_validate({
        "schema-id": 0, "default-namespace": [namespace], "representations": [
            {"type": "sql", "sql": "SELECT 1 AS id", "dialect": "spark"}]})
    view = catalog.create_view((namespace, "pv"), schema, version)
    assert view.sql_for("spark") is not None
    assert catalog.list_views(namespace) == [(namespace, "pv")]
    assert catalog.view_exists((namespace, "pv"))
    loaded = catalog.load_view((namespace, "pv"))
    assert loaded.metadata.view_uuid == view.metadata.view_uuid
    assert loaded.schema().find_field("id").field_type == LongType()
    catalog.drop_view((namespace, "pv"))
    assert not catalog.view_exists((namespace, "pv"))
    with pytest.raises(NoSuchViewError):
        catalog.drop_view((namespace, "pv"))


def test_views_are_governed_like_tables(proxy: RunningProxy, admin_http: httpx.Client) -> None:
    admin_http.post("/v1/namespaces", json={"namespace": ["demo"]})
    name = fresh("gv")
    assert create_view(admin_http, "demo", name, "SELECT 1 AS id").status_code == 200
    hidden_ns = fresh("vhidden")
    admin_http.post("/v1/namespaces", json={"namespace": [hidden_ns]})
    assert create_view(admin_http, hidden_ns, "secret", "SELECT 1 AS id").status_code == 200
    with as_principal(proxy.url, "analyst:analyst-secret") as analyst:
        assert analyst.get(f"/v1/namespaces/demo/views/{name}").status_code == 200
        listed = analyst.get("/v1/namespaces/demo/views").json()["identifiers"]
        assert {"namespace": ["demo"], "name": name} in listed
        assert_error_model(create_view(analyst, "demo", fresh("no"), "SELECT 1 AS id"), 403)
        assert_error_model(analyst.delete(f"/v1/namespaces/demo/views/{name}"), 403)
        rename = {"source": {"namespace": ["demo"], "name": name},
                  "destination": {"namespace": ["demo"], "name": fresh("moved")}}
        assert_error_model(analyst.post("/v1/views/rename", json=rename), 403)
        assert analyst.get(f"/v1/namespaces/{hidden_ns}/views/secret").status_code in (403, 404)
    assert admin_http.head(f"/v1/namespaces/demo/views/{name}").status_code == 204


# ------------------------------------------------------------------------------------- Spark


def rows(spark: Any, query: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in spark.sql(query).collect())


@pytest.mark.spark
def test_spark_view_lifecycle(spark: Any, cat: str) -> None:
    table, old, plain, renamed = (f"{cat}.db.{fresh(p)}" for p in ("vt", "vold", "vall", "veu"))
    spark.sql(f"CREATE TABLE {table} (id BIGINT, region STRING) USING iceberg")
    spark.sql(f"INSERT INTO {table} VALUES (1, 'eu'), (2, 'us')")
    [(first,)] = rows(spark, f"SELECT snapshot_id FROM {table}.snapshots")
    spark.sql(f"INSERT INTO {table} VALUES (3, 'eu')")

    spark.sql(f"CREATE VIEW {old} AS SELECT id FROM {table} VERSION AS OF {first}")
    spark.sql(f"CREATE VIEW {plain} AS SELECT id, region FROM {table}")
    assert rows(spark, f"SELECT * FROM {old}") == [(1,), (2,)]
    assert rows(spark, f"SELECT * FROM {plain}") == [(1, "eu"), (2, "us"), (3, "eu")]
    shown = {r.viewName for r in spark.sql(f"SHOW VIEWS IN {cat}.db").collect()}
    assert {old.split(".")[-1], plain.split(".")[-1]} <= shown

    spark.sql(f"CREATE OR REPLACE VIEW {plain} AS SELECT id FROM {table} WHERE region = 'eu'")
    assert rows(spark, f"SELECT * FROM {plain}") == [(1,), (3,)]
    spark.sql(f"ALTER VIEW {plain} RENAME TO {renamed}")
    assert rows(spark, f"SELECT * FROM {renamed}") == [(1,), (3,)]
    shown = {r.viewName for r in spark.sql(f"SHOW VIEWS IN {cat}.db").collect()}
    assert plain.split(".")[-1] not in shown and renamed.split(".")[-1] in shown

    spark.sql(f"DROP VIEW {renamed}")
    spark.sql(f"DROP VIEW {old}")
    shown = {r.viewName for r in spark.sql(f"SHOW VIEWS IN {cat}.db").collect()}
    assert not {old.split(".")[-1], renamed.split(".")[-1]} & shown
    assert rows(spark, f"SELECT count(*) FROM {table}") == [(3,)]


@pytest.fixture(scope="module")
def cats(spark: Any, backend: str, proxy: RunningProxy) -> dict[str, str]:
    """Spark catalog per principal (admin, analyst); namespace ``demo`` exists."""
    names = {who: f"{backend}_views_{who}" for who in ("admin", "analyst")}
    for who, name in names.items():
        add_rest_catalog(spark, name, proxy.url, credential=f"{who}:{who}-secret")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {names['admin']}.demo")
    return names


@pytest.mark.spark
def test_analyst_reads_views_over_what_it_may_read_and_creates_none(
        spark: Any, cats: dict[str, str], proxy: RunningProxy) -> None:
    admin, analyst = cats["admin"], cats["analyst"]
    table, secret_ns = fresh("vsrc"), fresh("vsecret")
    spark.sql(f"CREATE TABLE {admin}.demo.{table} (id BIGINT) USING iceberg")
    spark.sql(f"INSERT INTO {admin}.demo.{table} VALUES (1), (2)")
    spark.sql(f"CREATE NAMESPACE {admin}.{secret_ns}")
    spark.sql(f"CREATE TABLE {admin}.{secret_ns}.s (id BIGINT) USING iceberg")
    spark.sql(f"INSERT INTO {admin}.{secret_ns}.s VALUES (42)")

    # Views whose SQL Spark resolves in the reader's catalog, i.e. with the reader's credentials.
    readable, leaking = fresh("vok"), fresh("vleak")
    with as_principal(proxy.url, ADMIN) as http:
        assert create_view(http, "demo", readable, f"SELECT id FROM demo.{table}",
                           catalog=analyst).status_code == 200
        assert create_view(http, "demo", leaking, f"SELECT id FROM {secret_ns}.s",
                           catalog=analyst).status_code == 200

    assert rows(spark, f"SELECT * FROM {analyst}.demo.{readable}") == [(1,), (2,)]
    with pytest.raises(Exception) as refused:
        spark.sql(f"SELECT * FROM {analyst}.demo.{leaking}").collect()
    message = str(refused.value)
    for name in (leaking, readable, secret_ns, table):  # random names may contain "42"
        message = message.replace(name, "")
    assert "42" not in message
    assert secret_ns not in message  # the view's definition is not shown to the analyst
    analysts = [r for r in audit_records(proxy.audit_log) if r["principal"] == "analyst"]
    refused_views = [r for r in analysts if r["endpoint"] == "load_view"
                     and r["path"].endswith(f"/views/{leaking}")]
    assert refused_views and all(r["status"] == 403 for r in refused_views)
    assert not [r for r in analysts if r["path"].endswith(f"/{secret_ns}/tables/s")
                and r["decision"] == "allow"]
    assert rows(spark, f"SELECT * FROM {admin}.{secret_ns}.s") == [(42,)]  # the table is fine

    with pytest.raises(Exception, match="Forbidden"):
        spark.sql(f"CREATE VIEW {analyst}.demo.{fresh('vno')} AS "
                  f"SELECT id FROM {analyst}.demo.{table}")
    with pytest.raises(Exception, match="Forbidden"):
        spark.sql(f"DROP VIEW {analyst}.demo.{readable}")
    assert rows(spark, f"SELECT * FROM {admin}.demo.{readable}") == [(1,), (2,)]
