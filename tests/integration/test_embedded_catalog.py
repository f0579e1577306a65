"""The embedded catalog's REST contract, spoken as raw HTTP through the proxy."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from proxy.app import create_app
from proxy.catalog import create_catalog_app
from proxy.catalog.store import open_catalog
from tests.support.errors import assert_error_model
from tests.support.settings import settings_for_tests

SCHEMA = {"type": "struct", "schema-id": 0, "fields": [
    {"id": 1, "name": "id", "type": "long", "required": False}]}


@pytest.fixture()
def http(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(create_app(settings_for_tests(tmp_path, anonymous_admin=True))) as client:
        client.post("/v1/namespaces", json={"namespace": ["db"], "properties": {"owner": "me"}})
        yield client


def create(http: TestClient, name: str, **extra: Any) -> dict[str, Any]:
    response = http.post("/v1/namespaces/db/tables", json={"name": name, "schema": SCHEMA, **extra})
    assert response.status_code == 200, response.text
    return dict(response.json())


def properties(http: TestClient, name: str) -> dict[str, str]:
    return dict(http.get(f"/v1/namespaces/db/tables/{name}").json()["metadata"]["properties"])


def set_property(uuid: str, key: str, value: str) -> dict[str, Any]:
    return {"requirements": [{"type": "assert-table-uuid", "uuid": uuid}],
            "updates": [{"action": "set-properties", "updates": {key: value}}]}


def test_namespace_contract(http: TestClient) -> None:
    http.post("/v1/namespaces", json={"namespace": ["db", "inner"]})
    assert http.get("/v1/namespaces").json() == {"namespaces": [["db"]]}
    assert http.get("/v1/namespaces?parent=db").json() == {"namespaces": [["db", "inner"]]}
    assert http.get("/v1/namespaces/db").json() == {"namespace": ["db"],
                                                    "properties": {"owner": "me"}}
    assert http.head("/v1/namespaces/db%1Finner").status_code == 204
    assert http.head("/v1/namespaces/nope").status_code == 404
    changed = http.post("/v1/namespaces/db/properties",
                        json={"updates": {"team": "x"}, "removals": ["owner", "ghost"]}).json()
    assert changed == {"updated": ["team"], "removed": ["owner"], "missing": ["ghost"]}
    assert http.get("/v1/namespaces/db").json()["properties"] == {"team": "x"}
    assert_error_model(http.get("/v1/namespaces/nope"), 404, "NoSuchNamespaceException")
    assert_error_model(http.post("/v1/namespaces", json={"namespace": ["db"]}), 409,
                       "AlreadyExistsException")
    create(http, "t")
    assert_error_model(http.delete("/v1/namespaces/db"), 409, "NamespaceNotEmptyException")
    assert http.get("/v1/namespaces/db").status_code == 200


def test_table_errors(http: TestClient) -> None:
    table = create(http, "t")
    assert_error_model(http.post("/v1/namespaces/db/tables", json={"name": "t", "schema": SCHEMA}),
                       409, "AlreadyExistsException")
    assert_error_model(http.get("/v1/namespaces/db/tables/absent"), 404, "NoSuchTableException")
    assert_error_model(http.get("/v1/namespaces/db%1Ft/tables/snapshots"), 404,
                       "NoSuchTableException")
    in_missing_namespace = http.post("/v1/namespaces/nope/tables",
                                     json={"name": "x", "schema": SCHEMA})
    assert_error_model(in_missing_namespace, 404, "NoSuchNamespaceException")
    uuid = table["metadata"]["table-uuid"]
    to_missing_table = http.post("/v1/namespaces/db/tables/absent",
                                 json=set_property(uuid, "a", "b"))
    assert_error_model(to_missing_table, 404, "NoSuchTableException")
    unknown = {"requirements": [], "updates": [{"action": "grant-everything"}]}
    assert_error_model(http.post("/v1/namespaces/db/tables/t", json=unknown), 400,
                       "BadRequestException")
    assert properties(http, "t") == {}


def test_failed_requirement_is_409_and_changes_nothing(http: TestClient) -> None:
    create(http, "t")
    stale = set_property("00000000-0000-0000-0000-000000000000", "k", "v")
    assert_error_model(http.post("/v1/namespaces/db/tables/t", json=stale), 409,
                       "CommitFailedException")
    assert properties(http, "t") == {}


def test_commit_returns_the_new_metadata(http: TestClient) -> None:
    uuid = create(http, "t")["metadata"]["table-uuid"]
    response = http.post("/v1/namespaces/db/tables/t", json=set_property(uuid, "k", "v")).json()
    assert response["metadata"]["properties"] == {"k": "v"}
    assert http.get("/v1/namespaces/db/tables/t").json()["metadata-location"] == \
        response["metadata-location"]


def test_transaction_is_atomic_across_tables(http: TestClient) -> None:
    first = create(http, "a")["metadata"]["table-uuid"]
    second = create(http, "b")["metadata"]["table-uuid"]

    def change(name: str, uuid: str) -> dict[str, Any]:
        return {"identifier": {"namespace": ["db"], "name": name}, **set_property(uuid, "k", name)}

    broken = {"table-changes": [change("a", first), change("b", first)]}  # b's uuid is wrong
    assert_error_model(http.post("/v1/transactions/commit", json=broken), 409,
                       "CommitFailedException")
    assert properties(http, "a") == {} and properties(http, "b") == {}

    good = {"table-changes": [change("a", first), change("b", second)]}
    assert http.post("/v1/transactions/commit", json=good).status_code == 204
    assert properties(http, "a") == {"k": "a"} and properties(http, "b") == {"k": "b"}


def test_stage_create_then_create_commit(http: TestClient) -> None:
    staged = http.post("/v1/namespaces/db/tables",
                       json={"name": "ctas", "schema": SCHEMA, "stage-create": True}).json()
    assert "metadata-location" not in staged
    assert http.head("/v1/namespaces/db/tables/ctas").status_code == 404
    metadata = staged["metadata"]
    commit = {
        "requirements": [{"type": "assert-create"}],
        "updates": [
            {"action": "assign-uuid", "uuid": metadata["table-uuid"]},
            {"action": "upgrade-format-version", "format-version": 2},
            {"action": "add-schema", "schema": SCHEMA, "last-column-id": 1},
            {"action": "set-current-schema", "schema-id": -1},
            {"action": "add-spec", "spec": {"spec-id": 0, "fields": []}},
            {"action": "set-default-spec", "spec-id": -1},
            {"action": "add-sort-order", "sort-order": {"order-id": 0, "fields": []}},
            {"action": "set-default-sort-order", "sort-order-id": -1},
            {"action": "set-location", "location": metadata["location"]},
            {"action": "set-properties", "updates": {"created-by": "ctas"}},
        ],
    }
    assert http.post("/v1/namespaces/db/tables/ctas", json=commit).status_code == 200
    assert properties(http, "ctas") == {"created-by": "ctas"}
    # a second create-commit fails its assert-create requirement: nothing lands, 409
    assert_error_model(http.post("/v1/namespaces/db/tables/ctas", json=commit), 409,
                       "CommitFailedException")


def test_rename_register_and_drop(http: TestClient) -> None:
    location = create(http, "old")["metadata-location"]
    rename = {"source": {"namespace": ["db"], "name": "old"},
              "destination": {"namespace": ["db"], "name": "new"}}
    assert http.post("/v1/tables/rename", json=rename).status_code == 204
    assert http.head("/v1/namespaces/db/tables/old").status_code == 404
    registered = http.post("/v1/namespaces/db/register",
                           json={"name": "copy", "metadata-location": location}).json()
    assert registered["metadata-location"] == location
    listed = http.get("/v1/namespaces/db/tables").json()["identifiers"]
    assert listed == [{"namespace": ["db"], "name": "copy"}, {"namespace": ["db"], "name": "new"}]
    assert http.delete("/v1/namespaces/db/tables/new?purgeRequested=true").status_code == 204
    assert http.delete("/v1/namespaces/db/tables/copy").status_code == 204
    assert http.get("/v1/namespaces/db/tables").json() == {"identifiers": []}


def test_unimplemented_endpoints_are_not_offered(http: TestClient, tmp_path: Path) -> None:
    endpoints = http.get("/v1/config").json()["endpoints"]
    assert "POST /v1/{prefix}/namespaces/{namespace}/register-view" not in endpoints
    assert "POST /v1/{prefix}/transactions/commit" in endpoints
    register = {"name": "v", "metadata-location": "file:///x.metadata.json"}
    # the proxy never forwards it
    assert_error_model(http.post("/v1/namespaces/db/register-view", json=register), 404)
    with TestClient(create_catalog_app(open_catalog(
            f"sqlite:///{tmp_path / 'alone.db'}", tmp_path / "alone"), 1 << 20)) as alone:
        assert_error_model(alone.post("/v1/namespaces/db/register-view", json=register), 501,
                           "UnsupportedOperationException")


@pytest.fixture()
def alone(tmp_path: Path) -> Iterator[TestClient]:
    """The embedded catalog on its own (no gate in front), namespace ``db`` and table ``t``."""
    catalog = open_catalog(f"sqlite:///{tmp_path / 'alone.db'}", tmp_path / "alone")
    with TestClient(create_catalog_app(catalog, 1 << 20)) as client:
        client.post("/v1/namespaces", json={"namespace": ["db"]})
        create(client, "t")
        yield client
    catalog.engine.dispose()


def _bad_bodies(table_uuid: str) -> list[tuple[str, Any]]:
    commit = set_property(table_uuid, "k", "v")
    return [
        ("/v1/namespaces", {"namespace": ["n1"], "properties": {"a": None}}),
        ("/v1/namespaces", '{"namespace": ["n2"], "properties": {"a": NaN}}'),
        ("/v1/namespaces", {"namespace": ["n3"], "properties": []}),
        ("/v1/namespaces", {"namespace": "n4"}),
        ("/v1/namespaces", {"namespace": []}),
        ("/v1/namespaces", {"namespace": ["n5", ".."]}),
        ("/v1/namespaces", {"namespace": ["n6\u0000"]}),
        ("/v1/namespaces", {"namespace": ["db.t"]}),  # would alias ("db", "t") in SqlCatalog
        ("/v1/namespaces", {"namespace": ["n7"], "properties": {"exists": "false"}}),
        ("/v1/namespaces/db/properties", {"updates": {"a": 1}}),
        ("/v1/namespaces/db/properties", {"removals": "owner"}),
        ("/v1/namespaces/db/properties", {"updates": {"a": "1"}, "removals": ["a"]}),
        ("/v1/namespaces/db/tables", {"name": "u", "schema": 5}),
        ("/v1/namespaces/db/tables", {"name": 7, "schema": SCHEMA}),
        ("/v1/namespaces/db/tables", {"name": "u", "schema": SCHEMA, "properties": []}),
        ("/v1/namespaces/db/tables", {"name": "u", "schema": SCHEMA, "stage-create": "yes"}),
        ("/v1/namespaces/db/tables", {"name": "u/v", "schema": SCHEMA}),
        ("/v1/namespaces/db/tables", {"schema": SCHEMA}),
        ("/v1/namespaces/db/tables", [{"name": "u", "schema": SCHEMA}]),
        ("/v1/namespaces/db/register", {"name": "r", "metadata-location": 5}),
        ("/v1/tables/rename", {"source": {"namespace": ["db"], "name": "t"},
                               "destination": {"namespace": ["db"], "name": 5}}),
        ("/v1/tables/rename", {"source": {"namespace": ["db"], "name": "t"},
                               "destination": {"namespace": "db", "name": "z"}}),
        ("/v1/namespaces/db/tables/t", {**commit, "updates": [
            {"action": "set-properties", "updates": {"a": None}}]}),
        ("/v1/namespaces/db/tables/t", {**commit, "requirements": 5}),
        ("/v1/namespaces/db/tables/t", '{"requirements": [], "updates": [], "updates": []}'),
        ("/v1/transactions/commit", {"table-changes": [commit]}),  # no identifier
        ("/v1/transactions/commit", {"table-changes": "all"}),
        ("/v1/namespaces/db/tables/t/metrics", {"report-type": "scan-report"}),
    ]


def _post(client: TestClient, path: str, body: Any) -> Any:
    if isinstance(body, str):
        return client.post(path, content=body, headers={"content-type": "application/json"})
    return client.post(path, json=body)


@pytest.mark.parametrize("through_proxy", [False, True], ids=["catalog", "proxy"])
def test_bad_bodies_are_400_and_change_nothing(
    through_proxy: bool, http: TestClient, alone: TestClient
) -> None:
    client = http if through_proxy else alone
    if through_proxy:
        create(client, "t")
    uuid = client.get("/v1/namespaces/db/tables/t").json()["metadata"]["table-uuid"]
    for path, body in _bad_bodies(uuid):
        response = _post(client, path, body)
        assert response.status_code == 400, (path, body, response.text)
        assert_error_model(response, 400)
    assert client.get("/v1/namespaces").json()["namespaces"] == [["db"]]
    assert client.get("/v1/namespaces/db/tables").json()["identifiers"] == [
        {"namespace": ["db"], "name": "t"}]
    assert properties(client, "t") == {}


def test_deeply_nested_json_is_400_before_authentication(tmp_path: Path) -> None:
    with TestClient(create_app(settings_for_tests(tmp_path))) as anonymous:
        response = anonymous.post("/v1/namespaces", content=b"[" * 200_000 + b"]" * 200_000)
        assert_error_model(response, 400, "BadRequestException")
        assert anonymous.get("/v1/namespaces").status_code == 401


def test_hostile_names_in_the_path_are_400(alone: TestClient) -> None:
    for path in ("/v1/namespaces/db%1F..%1Fsecret/tables/t", "/v1/namespaces/db%1F/tables/t",
                 "/v1/namespaces/db/tables/x%2F..%2Ft", "/v1/namespaces/db%00", "/v1/namespaces/."
                 "%2E", "/v1/namespaces/db.t", "/v1/namespaces?parent=db%1F%1F"):
        assert_error_model(alone.get(path), 400, "BadRequestException")
    assert alone.head("/v1/namespaces/db/tables/t").status_code == 204


def test_a_failed_register_registers_nothing(alone: TestClient, tmp_path: Path) -> None:
    location = alone.get("/v1/namespaces/db/tables/t").json()["metadata-location"]
    not_metadata = tmp_path / "alone" / "notes.json"
    not_metadata.write_text('{"hello": "world"}')
    refused = [
        str(tmp_path / "alone" / "missing.metadata.json"),  # missing, in the warehouse
        not_metadata.as_uri(),  # present, not metadata
        "/etc/passwd",  # outside the warehouse
        str(tmp_path / "alone" / ".." / "alone.db"),  # out of the warehouse by ".."
        "s3://bucket/metadata/00000.metadata.json",
    ]
    messages = set()
    for candidate in refused:
        response = alone.post("/v1/namespaces/db/register",
                              json={"name": "r", "metadata-location": candidate})
        messages.add(assert_error_model(response, 400, "BadRequestException")["message"])
        assert alone.head("/v1/namespaces/db/tables/r").status_code == 404
    assert len(messages) == 1 and "passwd" not in messages.pop()  # nothing learned about files
    assert alone.post("/v1/namespaces/db/register",
                      json={"name": "r", "metadata-location": location}).status_code == 200
    assert alone.head("/v1/namespaces/db/tables/r").status_code == 204


def test_register_overwrite_repoints_an_existing_table(alone: TestClient) -> None:
    first = alone.get("/v1/namespaces/db/tables/t").json()
    other = create(alone, "other")["metadata-location"]
    body = {"name": "t", "metadata-location": other}
    assert_error_model(alone.post("/v1/namespaces/db/register", json=body), 409,
                       "AlreadyExistsException")
    assert alone.get("/v1/namespaces/db/tables/t").json() == first
    replaced = alone.post("/v1/namespaces/db/register", json={**body, "overwrite": True})
    assert replaced.status_code == 200, replaced.text
    assert alone.get("/v1/namespaces/db/tables/t").json()["metadata-location"] == other


def test_locations_stay_in_the_warehouse(alone: TestClient, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    uuid = alone.get("/v1/namespaces/db/tables/t").json()["metadata"]["table-uuid"]
    escapes = [str(outside), outside.as_uri(), f"file:{outside}", "s3://bucket/t",
               str(tmp_path / "alone" / ".." / "outside"),
               f"{(tmp_path / 'alone').as_uri()}/%2E%2E/outside"]
    for location in escapes:
        refused = [
            ("/v1/namespaces/db/tables", {"name": "u", "schema": SCHEMA, "location": location}),
            ("/v1/namespaces/db/tables", {"name": "u", "schema": SCHEMA, "stage-create": True,
                                          "properties": {"write.metadata.path": location}}),
            ("/v1/namespaces", {"namespace": ["n"], "properties": {"location": location}}),
            ("/v1/namespaces/db/properties", {"updates": {"location": location}}),
            ("/v1/namespaces/db/tables/t", {"requirements": [], "updates": [
                {"action": "set-location", "location": location}]}),
            ("/v1/namespaces/db/tables/t", set_property(uuid, "write.data.path", location)),
        ]
        for path, body in refused:
            assert_error_model(alone.post(path, json=body), 400, "BadRequestException")
    assert not outside.exists()
    assert alone.get("/v1/namespaces").json()["namespaces"] == [["db"]]
    assert alone.get("/v1/namespaces/db").json()["properties"] == {}
    assert alone.head("/v1/namespaces/db/tables/u").status_code == 404
    assert properties(alone, "t") == {}
    inside = (tmp_path / "alone" / "elsewhere").as_uri()
    created = alone.post("/v1/namespaces/db/tables",
                         json={"name": "u", "schema": SCHEMA, "location": inside})
    assert created.status_code == 200 and created.json()["metadata"]["location"] == inside


def test_registered_metadata_must_keep_its_table_in_the_warehouse(
    alone: TestClient, tmp_path: Path
) -> None:
    loaded = alone.get("/v1/namespaces/db/tables/t").json()
    forged = tmp_path / "alone" / "forged.metadata.json"
    forged.write_text(json.dumps({**loaded["metadata"], "location": str(tmp_path / "outside")}))
    response = alone.post("/v1/namespaces/db/register",
                          json={"name": "forged", "metadata-location": str(forged)})
    assert_error_model(response, 400, "BadRequestException")
    assert alone.head("/v1/namespaces/db/tables/forged").status_code == 404


def test_a_create_without_a_schema_is_400(alone: TestClient) -> None:
    empty_create = {"table-changes": [{"identifier": {"namespace": ["db"], "name": "new"},
                                       "requirements": [{"type": "assert-create"}],
                                       "updates": []}]}
    assert_error_model(alone.post("/v1/transactions/commit", json=empty_create), 400,
                       "BadRequestException")
    assert alone.head("/v1/namespaces/db/tables/new").status_code == 404


def test_the_catalog_imports_nothing_of_the_governed_pipeline() -> None:
    probe = ("import sys, proxy.catalog; "
             "print(' '.join(m for m in sys.modules if m.startswith('proxy')))")
    loaded = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True,
                            text=True, cwd=Path(__file__).resolve().parents[2]).stdout.split()
    governed = {"proxy.edge", "proxy.gate", "proxy.admission", "proxy.commits", "proxy.policy",
                "proxy.identity", "proxy.audit", "proxy.forward", "proxy.settings"}
    assert "proxy.catalog" in loaded
    assert not governed & {m if m.count(".") < 2 else m.rsplit(".", 1)[0] for m in loaded}


def test_a_location_that_is_a_file_is_400_and_creates_nothing(http: TestClient,
                                                               tmp_path: Path) -> None:
    created = create(http, "holder")
    junk = created["metadata-location"]  # a file inside the warehouse
    response = http.post("/v1/namespaces/db/tables",
                         json={"name": "onfile", "schema": SCHEMA, "location": junk})
    error = assert_error_model(response, 400)
    assert "Errno" not in error["message"] and str(tmp_path) not in error["message"]
    assert http.get("/v1/namespaces/db/tables/onfile").status_code == 404


def test_tables_java_could_not_load_are_refused(http: TestClient) -> None:
    duplicated = {**SCHEMA, "fields": [*SCHEMA["fields"],
                                        {**SCHEMA["fields"][0], "name": "again"}]}
    response = http.post("/v1/namespaces/db/tables", json={"name": "dup", "schema": duplicated})
    assert "more than once" in assert_error_model(response, 400)["message"]
    v3 = http.post("/v1/namespaces/db/tables", json={
        "name": "v3", "schema": SCHEMA, "properties": {"format-version": "3"}})
    assert_error_model(v3, 400)  # not a 5xx: the caller asked for something unsupported
    created = create(http, "evolving")
    uuid = created["metadata"]["table-uuid"]
    commit = http.post("/v1/namespaces/db/tables/evolving", json={
        "requirements": [{"type": "assert-table-uuid", "uuid": uuid}],
        "updates": [{"action": "add-schema", "schema": {**duplicated, "schema-id": 1}}]})
    assert_error_model(commit, 400)
    assert http.get("/v1/namespaces/db/tables/dup").status_code == 404
