"""The embedded catalog's view endpoints, spoken as raw HTTP to the catalog app itself."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from proxy.catalog import create_catalog_app
from proxy.catalog.store import open_catalog
from tests.support.errors import assert_error_model

SCHEMA = {"type": "struct", "schema-id": 0, "fields": [
    {"id": 1, "name": "id", "type": "long", "required": False}]}
WIDER = {"type": "struct", "schema-id": 7, "fields": [
    {"id": 1, "name": "id", "type": "long", "required": False},
    {"id": 2, "name": "region", "type": "string", "required": False}]}
VIEWS = "/v1/namespaces/db/views"


def version(sql: str, schema_id: int = 0, **extra: Any) -> dict[str, Any]:
    return {"version-id": 1, "timestamp-ms": 1_700_000_000_000, "schema-id": schema_id,
            "summary": {"engine-name": "test"}, "default-namespace": ["db"],
            "representations": [{"type": "sql", "sql": sql, "dialect": "spark"}], **extra}


def create_body(name: str, sql: str = "SELECT id FROM db.t", **extra: Any) -> dict[str, Any]:
    return {"name": name, "schema": SCHEMA, "view-version": version(sql),
            "properties": {"comment": "c"}, **extra}


@pytest.fixture()
def http(tmp_path: Path) -> Iterator[TestClient]:
    catalog = open_catalog(f"sqlite:///{tmp_path / 'catalog.db'}", tmp_path / "warehouse")
    with TestClient(create_catalog_app(catalog, 1 << 20)) as client:
        assert client.post("/v1/namespaces", json={"namespace": ["db"]}).status_code == 200
        yield client
    catalog.engine.dispose()


def create(http: TestClient, name: str, **extra: Any) -> dict[str, Any]:
    response = http.post(VIEWS, json=create_body(name, **extra))
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_config_advertises_the_view_endpoints(http: TestClient) -> None:
    endpoints = set(http.get("/v1/config").json()["endpoints"])
    assert {"GET /v1/{prefix}/namespaces/{namespace}/views",
            "POST /v1/{prefix}/namespaces/{namespace}/views",
            "GET /v1/{prefix}/namespaces/{namespace}/views/{view}",
            "HEAD /v1/{prefix}/namespaces/{namespace}/views/{view}",
            "POST /v1/{prefix}/namespaces/{namespace}/views/{view}",
            "DELETE /v1/{prefix}/namespaces/{namespace}/views/{view}",
            "POST /v1/{prefix}/views/rename"} <= endpoints


def test_create_answers_a_load_view_result_that_load_repeats(http: TestClient,
                                                            tmp_path: Path) -> None:
    created = create(http, "v")
    assert set(created) == {"metadata-location", "metadata", "config"}
    metadata = created["metadata"]
    assert metadata["format-version"] == 1
    assert metadata["current-version-id"] == 1
    assert metadata["location"] == (tmp_path / "warehouse" / "db" / "v").as_uri()
    assert [s["schema-id"] for s in metadata["schemas"]] == [0]
    [current] = metadata["versions"]
    assert current["version-id"] == 1 and current["schema-id"] == 0
    assert current["representations"] == [
        {"type": "sql", "sql": "SELECT id FROM db.t", "dialect": "spark"}]
    assert current["default-namespace"] == ["db"]
    assert [e["version-id"] for e in metadata["version-log"]] == [1]
    assert metadata["properties"] == {"comment": "c"}
    on_disk = Path(created["metadata-location"].removeprefix("file://"))
    assert json.loads(on_disk.read_text())["view-uuid"] == metadata["view-uuid"]
    assert http.get(f"{VIEWS}/v").json() == created
    assert http.head(f"{VIEWS}/v").status_code == 204


def test_views_and_tables_do_not_see_each_other(http: TestClient) -> None:
    create(http, "v")
    assert http.get("/v1/namespaces/db/tables").json() == {"identifiers": []}
    assert_error_model(http.get("/v1/namespaces/db/tables/v"), 404, "NoSuchTableException")
    assert http.head("/v1/namespaces/db/tables/v").status_code == 404
    assert_error_model(http.delete("/v1/namespaces/db/tables/v"), 404)
    assert_error_model(http.post("/v1/namespaces/db/tables", json={"name": "v", "schema": SCHEMA}),
                       409, "AlreadyExistsException")
    assert http.post("/v1/namespaces/db/tables", json={"name": "t", "schema": SCHEMA}) \
        .status_code == 200
    assert_error_model(http.post(VIEWS, json=create_body("t")), 409, "AlreadyExistsException")
    assert_error_model(http.get(f"{VIEWS}/t"), 404, "NoSuchViewException")
    assert http.get(VIEWS).json() == {"identifiers": [{"namespace": ["db"], "name": "v"}]}
    assert_error_model(http.delete("/v1/namespaces/db"), 409, "NamespaceNotEmptyException")


def test_missing_things_are_404(http: TestClient) -> None:
    assert_error_model(http.get(f"{VIEWS}/nope"), 404, "NoSuchViewException")
    assert http.head(f"{VIEWS}/nope").status_code == 404
    assert_error_model(http.delete(f"{VIEWS}/nope"), 404, "NoSuchViewException")
    assert_error_model(http.get("/v1/namespaces/nope/views"), 404, "NoSuchNamespaceException")
    assert_error_model(http.post("/v1/namespaces/nope/views", json=create_body("v")), 404,
                       "NoSuchNamespaceException")
    assert_error_model(http.post(f"{VIEWS}/nope", json={"updates": []}), 404,
                       "NoSuchViewException")


@pytest.mark.parametrize("body", [
    {"name": "v", "schema": SCHEMA},
    {**create_body("v"), "view-version": version("x", representations=[])},
    {**create_body("v"), "view-version": version("x", representations=[
        {"type": "sql", "sql": "a", "dialect": "spark"},
        {"type": "sql", "sql": "b", "dialect": "Spark"}])},
    {**create_body("v"), "view-version": version("x", representations=[
        {"type": "python", "sql": "a", "dialect": "spark"}])},
    create_body("v", properties={"k": 1}),
    create_body("v", location="file:///etc"),
    create_body("v", location="s3://bucket/v"),
    create_body("v/w"),
    {**create_body("v"), "schema": {"type": "struct", "fields": [
        {"id": 1, "name": "a", "type": "long", "required": False},
        {"id": 1, "name": "b", "type": "long", "required": False}]}},
], ids=["no-version", "no-representation", "dialect-twice", "not-sql", "property-not-string",
        "location-outside", "location-s3", "slash-in-name", "field-id-twice"])
def test_invalid_creates_are_400_and_create_nothing(http: TestClient,
                                                    body: dict[str, Any]) -> None:
    assert_error_model(http.post(VIEWS, json=body), 400, "BadRequestException")
    assert http.get(VIEWS).json() == {"identifiers": []}


@pytest.mark.parametrize("component", ["x" * 300, "/".join(["y" * 200] * 6)],
                         ids=["name-too-long-for-the-filesystem", "too-long-for-the-row"])
def test_unusable_locations_in_the_warehouse_are_400(http: TestClient, tmp_path: Path,
                                                     component: str) -> None:
    location = f"{(tmp_path / 'warehouse').as_uri()}/{component}"
    error = assert_error_model(http.post(VIEWS, json=create_body("v", location=location)), 400)
    assert "y" * 200 not in error["message"] and "x" * 300 not in error["message"]
    assert http.get(VIEWS).json() == {"identifiers": []}


def test_create_twice_is_409(http: TestClient) -> None:
    create(http, "v")
    assert_error_model(http.post(VIEWS, json=create_body("v")), 409, "AlreadyExistsException")


def replace_body(uuid: str, sql: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    updates: list[dict[str, Any]] = []
    if schema is not None:
        updates.append({"action": "add-schema", "schema": schema, "last-column-id": 2})
    updates += [
        {"action": "add-view-version", "view-version": version(sql, schema_id=-1 if schema else 0)},
        {"action": "set-current-view-version", "view-version-id": -1},
        {"action": "set-properties", "updates": {"owner": "me"}},
        {"action": "remove-properties", "removals": ["comment"]},
    ]
    return {"requirements": [{"type": "assert-view-uuid", "uuid": uuid}], "updates": updates}


def test_replace_adds_a_version_and_a_schema(http: TestClient) -> None:
    created = create(http, "v")
    uuid = created["metadata"]["view-uuid"]
    response = http.post(f"{VIEWS}/v", json=replace_body(uuid, "SELECT id, region FROM t", WIDER))
    assert response.status_code == 200, response.text
    replaced = response.json()
    metadata = replaced["metadata"]
    assert metadata["view-uuid"] == uuid
    assert [s["schema-id"] for s in metadata["schemas"]] == [0, 1]
    assert metadata["current-version-id"] == 2
    current = next(v for v in metadata["versions"] if v["version-id"] == 2)
    assert current["schema-id"] == 1
    assert current["representations"][0]["sql"] == "SELECT id, region FROM t"
    assert [e["version-id"] for e in metadata["version-log"]] == [1, 2]
    assert metadata["properties"] == {"owner": "me"}
    assert replaced["metadata-location"] != created["metadata-location"]
    assert "/00001-" in replaced["metadata-location"]
    assert http.get(f"{VIEWS}/v").json() == replaced


def test_replace_back_to_an_earlier_version_reuses_it(http: TestClient) -> None:
    uuid = create(http, "v")["metadata"]["view-uuid"]
    http.post(f"{VIEWS}/v", json=replace_body(uuid, "SELECT 2"))
    back = http.post(f"{VIEWS}/v", json=replace_body(uuid, "SELECT id FROM db.t")).json()
    assert [v["version-id"] for v in back["metadata"]["versions"]] == [1, 2]
    assert back["metadata"]["current-version-id"] == 1
    assert [e["version-id"] for e in back["metadata"]["version-log"]] == [1, 2, 1]


def test_replace_with_a_stale_uuid_is_409_and_changes_nothing(http: TestClient) -> None:
    created = create(http, "v")
    stale = "00000000-0000-0000-0000-000000000000"
    assert_error_model(http.post(f"{VIEWS}/v", json=replace_body(stale, "SELECT 2")), 409,
                       "CommitFailedException")
    assert http.get(f"{VIEWS}/v").json() == created


@pytest.mark.parametrize("update", [
    {"action": "set-current-schema", "schema-id": 0},
    {"action": "set-current-view-version", "view-version-id": 9},
    {"action": "set-current-view-version", "view-version-id": -1},
    {"action": "add-view-version", "view-version": version("x", schema_id=5)},
    {"action": "add-view-version", "view-version": version("x", schema_id=-1)},
    {"action": "upgrade-format-version", "format-version": 2},
    {"action": "assign-uuid", "uuid": "00000000-0000-0000-0000-000000000000"},
    {"action": "set-location", "location": "file:///tmp/elsewhere"},
], ids=["table-update", "unknown-version", "no-added-version", "unknown-schema",
        "no-added-schema", "format-2", "new-uuid", "location-outside"])
def test_invalid_replaces_are_400_and_change_nothing(http: TestClient,
                                                     update: dict[str, Any]) -> None:
    created = create(http, "v")
    assert_error_model(http.post(f"{VIEWS}/v", json={"updates": [update]}), 400,
                       "BadRequestException")
    assert http.get(f"{VIEWS}/v").json() == created


def test_replace_naming_another_view_in_its_body_is_400(http: TestClient) -> None:
    create(http, "v")
    body = {"identifier": {"namespace": ["db"], "name": "w"}, "updates": []}
    assert_error_model(http.post(f"{VIEWS}/v", json=body), 400, "BadRequestException")


def test_rename_and_drop(http: TestClient) -> None:
    created = create(http, "v")
    http.post("/v1/namespaces", json={"namespace": ["other"]})
    rename = {"source": {"namespace": ["db"], "name": "v"},
              "destination": {"namespace": ["other"], "name": "w"}}
    assert http.post("/v1/views/rename", json=rename).status_code == 204
    assert http.head(f"{VIEWS}/v").status_code == 404
    assert http.get("/v1/namespaces/other/views/w").json()["metadata"] == created["metadata"]
    assert_error_model(http.post("/v1/views/rename", json=rename), 404, "NoSuchViewException")
    back = {"source": rename["destination"], "destination": {"namespace": ["nope"], "name": "v"}}
    assert_error_model(http.post("/v1/views/rename", json=back), 404, "NoSuchNamespaceException")
    http.post("/v1/namespaces/db/tables", json={"name": "t", "schema": SCHEMA})
    onto_table = {"source": rename["destination"],
                  "destination": {"namespace": ["db"], "name": "t"}}
    assert_error_model(http.post("/v1/views/rename", json=onto_table), 409,
                       "AlreadyExistsException")
    assert http.delete("/v1/namespaces/other/views/w").status_code == 204
    assert http.head("/v1/namespaces/other/views/w").status_code == 404
    assert http.delete("/v1/namespaces/other").status_code == 204


def test_list_is_sorted_and_paginated(http: TestClient) -> None:
    for name in ("c", "a", "b"):
        create(http, name)
    everything = http.get(VIEWS).json()
    assert [i["name"] for i in everything["identifiers"]] == ["a", "b", "c"]
    assert "next-page-token" not in everything
    first = http.get(VIEWS, params={"pageSize": 2}).json()
    assert [i["name"] for i in first["identifiers"]] == ["a", "b"]
    rest = http.get(VIEWS, params={"pageSize": 2, "pageToken": first["next-page-token"]}).json()
    assert [i["name"] for i in rest["identifiers"]] == ["c"]
    assert "next-page-token" not in rest
    for bad in ("0", "-1", "x", "100000"):
        assert_error_model(http.get(VIEWS, params={"pageSize": bad}), 400)
