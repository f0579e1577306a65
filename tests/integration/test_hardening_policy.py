"""Walking around a table-level deny and adopting other tables' files, on both backing catalogs.

The policy here is the demo one plus: `builder` may create, alter, drop and write tables in
`demo` (but not choose where files go: no REGISTER_TABLE), and `analyst` and `builder` are denied
everything on two tables, one with a space in its name.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from tests.conftest import RunningProxy, proxy_for
from tests.support.errors import assert_error_model
from tests.support.http import as_principal
from tests.support.settings import ADMIN, POLICIES

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))
SCHEMA_JSON = {"type": "struct", "schema-id": 0,
               "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
EXTRA_RULES = """
g, builder, writer
p, builder, icegov.demo.*, CREATE_TABLE, allow
p, builder, icegov.demo.*, DROP_TABLE, allow
p, builder, icegov.demo.*, ALTER, allow
p, builder, icegov.*, CREATE_NAMESPACE, allow
p, builder, icegov.demo, ALTER_NAMESPACE, allow
p, analyst, icegov.demo."q3 payroll", *, deny
p, builder, icegov.demo."q3 payroll", *, deny
p, analyst, icegov.demo.payroll, *, deny
p, builder, icegov.demo.payroll, *, deny
"""
BUILDER = "builder:builder-secret"
ANALYST = "analyst:analyst-secret"


@pytest.fixture(scope="module")
def guarded(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningProxy]:
    workdir = tmp_path_factory.mktemp(f"guarded-{backend}")
    policies = workdir / "policies"
    shutil.copytree(POLICIES, policies)
    with (policies / "policy.csv").open("a") as policy:
        policy.write(EXTRA_RULES)
    principals = policies / "principals.yaml"
    principals.write_text(principals.read_text().replace(
        "principals:\n", "principals:\n" + _builder_entry(), 1))
    with proxy_for(backend, workdir,
                   policy={"model_path": policies / "model.conf",
                           "policy_path": policies / "policy.csv"},
                   identity={"principals_file": principals}) as running:
        admin = RestCatalog("admin", uri=running.url, credential=ADMIN)
        admin.create_namespace_if_not_exists("demo")
        admin.create_namespace_if_not_exists("secret")
        for name in ("demo.q3 payroll", "demo.payroll", "secret.vault"):
            admin.create_table(name, SCHEMA).append(pa.table({"id": pa.array([1], pa.int64())}))
        yield running


def _builder_entry() -> str:
    from proxy.identity.hashing import hash_secret

    return (f"  - name: builder\n    roles: [builder]\n"
            f"    secret_hash: {hash_secret('builder-secret')}\n")


def snapshots(proxy: RunningProxy, name: str) -> list[int]:
    table = RestCatalog("admin", uri=proxy.url, credential=ADMIN).load_table(name)
    return [s.snapshot_id for s in table.snapshots()]


@pytest.fixture()
def analyst(guarded: RunningProxy) -> Iterator[httpx.Client]:
    with as_principal(guarded.url, ANALYST) as client:
        yield client


@pytest.fixture()
def builder(guarded: RunningProxy) -> Iterator[httpx.Client]:
    with as_principal(guarded.url, BUILDER) as client:
        yield client


def test_a_plus_never_reaches_a_denied_table_with_a_space(
        guarded: RunningProxy, analyst: httpx.Client, builder: httpx.Client) -> None:
    for path in ("/v1/namespaces/demo/tables/q3+payroll",
                 "/v1/namespaces/demo/tables/q3%20payroll"):
        assert_error_model(analyst.get(path), 404, "NoSuchTableException")
        assert analyst.head(path).status_code == 404
        assert_error_model(builder.delete(f"{path}?purgeRequested=true"), 404)
    assert snapshots(guarded, "demo.q3 payroll")  # still there


def test_a_denied_tables_directory_is_not_a_namespace_one_may_use(
        guarded: RunningProxy, analyst: httpx.Client, builder: httpx.Client) -> None:
    before = snapshots(guarded, "demo.payroll")
    inside = "/v1/namespaces/demo%1Fpayroll/tables"
    created = builder.post(inside, json={"name": "metadata", "schema": SCHEMA_JSON})
    assert created.status_code in (403, 404), created.text
    assert builder.delete(f"{inside}/metadata?purgeRequested=true").status_code == 404
    for metadata_table in ("files", "snapshots", "entries", "nothere"):
        assert analyst.head(f"{inside}/{metadata_table}").status_code == 404
        assert_error_model(analyst.get(f"{inside}/{metadata_table}"), 404)
    assert snapshots(guarded, "demo.payroll") == before


def vault_location(guarded: RunningProxy) -> str:
    return RestCatalog("admin", uri=guarded.url, credential=ADMIN).load_table(
        "secret.vault").location()


def test_creating_a_table_over_another_tables_files_needs_register_table(
        guarded: RunningProxy, builder: httpx.Client) -> None:
    name = f"loc{uuid.uuid4().hex[:6]}"
    location = vault_location(guarded)
    for body in ({"name": name, "schema": SCHEMA_JSON, "location": location},
                 {"name": name, "schema": SCHEMA_JSON, "location": location,
                  "stage-create": True},
                 {"name": name, "schema": SCHEMA_JSON,
                  "properties": {"write.data.path": f"{location}/data"}}):
        error = assert_error_model(builder.post("/v1/namespaces/demo/tables", json=body), 403)
        assert "REGISTER_TABLE" in error["message"]
    register = {"name": name, "metadata-location": f"{location}/metadata/v1.metadata.json"}
    assert_error_model(builder.post("/v1/namespaces/demo/register", json=register), 403)
    assert builder.get(f"/v1/namespaces/demo/tables/{name}").status_code == 404
    plain = builder.post("/v1/namespaces/demo/tables", json={"name": name, "schema": SCHEMA_JSON})
    assert plain.status_code == 200, plain.text  # where the catalog puts it: fine


def test_a_create_commit_cannot_set_someone_elses_location(
        guarded: RunningProxy, builder: httpx.Client) -> None:
    name = f"ctas{uuid.uuid4().hex[:6]}"
    catalog = RestCatalog("builder", uri=guarded.url, credential=BUILDER)
    staged = catalog.create_table_transaction(f"demo.{name}", SCHEMA)
    staged.append(pa.table({"id": pa.array([5], pa.int64())}))
    staged.commit_transaction()  # the location the catalog assigned: allowed
    assert snapshots(guarded, f"demo.{name}")

    other = f"ctas{uuid.uuid4().hex[:6]}"
    body = {"requirements": [{"type": "assert-create"}], "updates": [
        {"action": "assign-uuid", "uuid": str(uuid.uuid4())},
        {"action": "upgrade-format-version", "format-version": 2},
        {"action": "add-schema", "schema": SCHEMA_JSON},
        {"action": "set-current-schema", "schema-id": -1},
        {"action": "set-location", "location": vault_location(guarded)}]}
    error = assert_error_model(builder.post(f"/v1/namespaces/demo/tables/{other}", json=body), 403)
    assert "REGISTER_TABLE" in error["message"]
    assert builder.get(f"/v1/namespaces/demo/tables/{other}").status_code == 404


def test_moving_an_existing_tables_files_needs_register_table(
        guarded: RunningProxy, builder: httpx.Client) -> None:
    name = f"mv{uuid.uuid4().hex[:6]}"
    assert builder.post("/v1/namespaces/demo/tables",
                        json={"name": name, "schema": SCHEMA_JSON}).status_code == 200
    path = f"/v1/namespaces/demo/tables/{name}"
    before = builder.get(path).json()
    for update in ({"action": "set-location", "location": vault_location(guarded)},
                   {"action": "set-properties",
                    "updates": {"write.data.path": vault_location(guarded)}}):
        error = assert_error_model(builder.post(path, json={"updates": [update]}), 403)
        assert "REGISTER_TABLE" in error["message"]
    after = builder.get(path).json()
    assert after["metadata-location"] == before["metadata-location"]
    assert after["metadata"]["location"] == before["metadata"]["location"]
    assert "write.data.path" not in after["metadata"].get("properties", {})
    assert builder.post(path, json={"updates": [
        {"action": "set-properties", "updates": {"comment": "fine"}}]}).status_code == 200


def test_a_namespace_location_that_places_new_tables_needs_register_table(
        guarded: RunningProxy, builder: httpx.Client) -> None:
    """A namespace's ``location`` is where its new tables' files go by default: setting it is
    choosing where files go, over another table's if one likes."""
    name = f"nx{uuid.uuid4().hex[:6]}"
    placed = {"namespace": [name], "properties": {"location": vault_location(guarded)}}
    error = assert_error_model(builder.post("/v1/namespaces", json=placed), 403)
    assert "REGISTER_TABLE" in error["message"]
    listed = RestCatalog("admin", uri=guarded.url, credential=ADMIN).list_namespaces()
    assert ("demo",) in listed and (name,) not in listed
    assert builder.post("/v1/namespaces", json={"namespace": [name]}).status_code == 200
    before = builder.get("/v1/namespaces/demo").json()["properties"]
    for change in ({"updates": {"location": vault_location(guarded)}},
                   {"removals": ["location"]}):
        refused = builder.post("/v1/namespaces/demo/properties", json=change)
        assert "REGISTER_TABLE" in assert_error_model(refused, 403)["message"]
        assert builder.get("/v1/namespaces/demo").json()["properties"] == before
    plain = builder.post("/v1/namespaces/demo/properties", json={"updates": {"team": "x"}})
    assert plain.status_code == 200, plain.text
