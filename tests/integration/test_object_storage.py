"""icegov's embedded catalog on an ``s3://`` warehouse, and icegov reading table files there with
its ``file_io`` setting (issue 9 §4).

The object store is moto's S3 server on a loopback port (``tests.support.s3``). icegov serves its
own embedded catalog with ``ICEGOV__WAREHOUSE=s3://<bucket>/wh``: pyiceberg creates, writes and
reads tables through it, their metadata, manifests and data all on S3, and a location outside the
warehouse prefix (another bucket, a sibling prefix, ``..`` in any spelling) is refused before
anything is written. icegov classifies each commit from the manifests it reads on S3 (a delete
disguised as an append is still a DELETE) and plans scans from them. In forwarding mode, an icegov
in front of that catalog whose ``file_io`` points elsewhere cannot read that evidence and refuses
the commit: the setting, not the client's own properties, is what icegov reads with.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import ForbiddenError
from pyiceberg.expressions import EqualTo
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType
from starlette.testclient import TestClient

from proxy.app import Backing, create_app
from proxy.backing.tables import parse_table_state
from proxy.catalog import EmbeddedCatalog
from proxy.resources import Resource
from proxy.settings import Settings, SettingsError, load_settings
from tests.conftest import RunningProxy
from tests.support.commit_capture import wire_json
from tests.support.errors import assert_error_model
from tests.support.http import as_principal, audit_records
from tests.support.s3 import SECRET_KEY, S3Store, embedded_on_s3, s3_server
from tests.support.servers import free_port, serve
from tests.support.settings import ADMIN, settings_for_tests

BACKING_URL = "http://s3-backing"
WRITER = "writer:writer-secret"
DELETER = "deleter:deleter-secret"
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False),
                NestedField(2, "region", StringType(), required=False))
SPEC = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "region"))
REST_SCHEMA = {"type": "struct", "schema-id": 0, "fields": [
    {"id": 1, "name": "id", "type": "long", "required": False}]}
OTHER_BUCKET = "icegov-other"
Row = tuple[Any, ...]


@pytest.fixture(scope="module")
def store() -> Iterator[S3Store]:
    with s3_server() as running:
        running.create_bucket(OTHER_BUCKET)
        yield running


@pytest.fixture(scope="module")
def embedded_settings(store: S3Store, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """icegov serving its embedded catalog, its warehouse on the store."""
    workdir = tmp_path_factory.mktemp("s3-icegov")
    return settings_for_tests(workdir, **embedded_on_s3(store, workdir))


@pytest.fixture(scope="module")
def proxy(embedded_settings: Settings) -> Iterator[RunningProxy]:
    with serve(create_app(embedded_settings)) as url:
        yield RunningProxy(url, Path(str(embedded_settings.audit.file)).parent)


@contextlib.contextmanager
def forwarding_proxy(embedded_settings: Settings, workdir: Path,
                     file_io: dict[str, str]) -> Iterator[RunningProxy]:
    """icegov forwarding to the embedded catalog on S3 served alone (as ``icegov catalog`` does,
    on the same database and warehouse), reading table files with ``file_io``."""
    catalog = EmbeddedCatalog.from_settings(embedded_settings)
    settings = settings_for_tests(workdir, catalog_uri=BACKING_URL, file_io=file_io)
    backing = Backing(httpx.ASGITransport(app=catalog.app), BACKING_URL, [catalog.aclose])
    with serve(create_app(settings, backing)) as url:
        yield RunningProxy(url, workdir)


def client(proxy: RunningProxy, store: S3Store, credential: str, **extra: str) -> RestCatalog:
    """pyiceberg through icegov; it reaches the store with its own properties."""
    return RestCatalog("s3-client", uri=proxy.url, credential=credential, **store.properties,
                       **extra)


@pytest.fixture()
def table(proxy: RunningProxy, store: S3Store) -> Table:
    """A demo table created through icegov, one data file per region."""
    admin = client(proxy, store, ADMIN)
    admin.create_namespace_if_not_exists("demo")
    created = admin.create_table(f"demo.s3_{uuid.uuid4().hex[:8]}", SCHEMA, partition_spec=SPEC)
    for region in ("eu", "us"):
        created.append(pa.table({"id": pa.array([1, 2], pa.int64()), "region": [region] * 2}))
    return admin.load_table(created.name())


def rows(catalog: RestCatalog, table: Table) -> list[Row]:
    arrow = catalog.load_table(table.name()).scan().to_arrow()
    return sorted(zip(arrow["id"].to_pylist(), arrow["region"].to_pylist(), strict=True))


def commit_path(table: Table) -> str:
    namespace, name = table.name()
    return f"/v1/namespaces/{namespace}/tables/{name}"


def staged_delete_of_eu(catalog: RestCatalog, table: Table) -> dict[str, Any]:
    """The REST body of a real whole-partition delete (manifests written to S3), not sent,
    labelled ``append``: only its manifests say what it does."""
    tx = catalog.load_table(table.name()).transaction()
    tx.delete(EqualTo("region", "eu"))
    body = {"requirements": [wire_json(r) for r in tx._requirements],
            "updates": [wire_json(u) for u in tx._updates]}
    for update in body["updates"]:
        if update["action"] == "add-snapshot":
            update["snapshot"]["summary"]["operation"] = "append"
    return body


def commit_records(proxy: RunningProxy, table: Table, principal: str) -> list[dict[str, Any]]:
    return [r for r in audit_records(proxy.audit_log) if r["principal"] == principal
            and r["path"] == commit_path(table) and r["endpoint"] == "commit_table"]


def test_pyiceberg_creates_appends_and_reads_back_through_the_embedded_catalog_on_s3(
        proxy: RunningProxy, store: S3Store) -> None:
    admin = client(proxy, store, ADMIN)
    admin.create_namespace_if_not_exists("fresh")
    name = f"t_{uuid.uuid4().hex[:8]}"
    created = admin.create_table(("fresh", name), SCHEMA)
    created.append(pa.table({"id": pa.array([7, 8], pa.int64()), "region": ["eu", "us"]}))
    loaded = admin.load_table(("fresh", name))
    assert loaded.metadata_location.startswith(f"{store.warehouse}/fresh/{name}/metadata/")
    keys = store.keys(f"wh/fresh/{name}/")
    assert loaded.metadata_location.removeprefix(f"s3://{store.bucket}/") in keys
    assert sum(k.endswith(".metadata.json") for k in keys) == 2  # create, then the append
    assert rows(admin, loaded) == [(7, "eu"), (8, "us")]
    assert not (proxy.workdir / "warehouse").exists()  # nothing went to a local directory


def test_tables_live_on_s3(proxy: RunningProxy, store: S3Store, table: Table) -> None:
    admin = client(proxy, store, ADMIN)
    loaded = admin.load_table(table.name())
    assert loaded.metadata_location.startswith(f"{store.warehouse}/demo/")
    assert isinstance(loaded.io, PyArrowFileIO)
    keys = store.keys(f"wh/demo/{table.name()[1]}/")
    assert any(k.endswith(".avro") for k in keys) and any(k.endswith(".parquet") for k in keys)
    assert rows(admin, table) == [(1, "eu"), (1, "us"), (2, "eu"), (2, "us")]
    with as_principal(proxy.url, ADMIN) as http:
        answer = http.get(commit_path(table))
    assert answer.status_code == 200 and SECRET_KEY not in answer.text  # icegov's keys stay
    records = commit_records(proxy, table, "admin")
    assert [r["evidence"][0]["classification"] for r in records] == ["INSERT", "INSERT"]


def test_a_delete_labelled_append_is_classified_from_its_manifests_on_s3(
        proxy: RunningProxy, store: S3Store, table: Table) -> None:
    writer = client(proxy, store, WRITER)
    body = staged_delete_of_eu(writer, table)
    with as_principal(proxy.url, WRITER) as http:
        response = http.post(commit_path(table), json=body)
    error = assert_error_model(response, 403, "ForbiddenException")
    assert "DELETE" in error["message"]
    assert rows(writer, table) == [(1, "eu"), (1, "us"), (2, "eu"), (2, "us")]
    [record] = commit_records(proxy, table, "writer")
    [evidence] = record["evidence"]
    assert evidence["classification"] == "DELETE" and evidence["operations"] == ["append"]
    assert evidence["mismatch"] and evidence["removed_data_files"] == 1


def test_a_delete_lands_for_a_deleter_and_is_refused_to_a_writer(
        proxy: RunningProxy, store: S3Store, table: Table) -> None:
    with pytest.raises(ForbiddenError):
        client(proxy, store, WRITER).load_table(table.name()).delete(EqualTo("region", "us"))
    deleter = client(proxy, store, DELETER)
    deleter.load_table(table.name()).delete(EqualTo("region", "eu"))
    assert rows(deleter, table) == [(1, "us"), (2, "us")]
    [record] = [r for r in commit_records(proxy, table, "deleter") if r["decision"] == "allow"]
    assert record["status"] == 200
    assert record["evidence"][0]["classification"] == "DELETE"
    assert record["evidence"][0]["removed_data_files"] == 1


def test_server_side_planning_reads_the_manifests_on_s3(
        proxy: RunningProxy, store: S3Store, table: Table) -> None:
    server = client(proxy, store, ADMIN, **{"scan-planning-mode": "server"})
    assert server.supports_server_side_planning()
    loaded = server.load_table(table.name())
    tasks = list(loaded.scan(row_filter=EqualTo("region", "us")).plan_files())
    assert [t.file.file_path.startswith(f"{store.warehouse}/") for t in tasks] == [True]
    arrow = loaded.scan(row_filter=EqualTo("region", "us")).to_arrow()
    assert sorted(arrow["id"].to_pylist()) == [1, 2]
    plans = [r for r in audit_records(proxy.audit_log) if r["endpoint"] == "plan_table_scan"
             and r["path"] == f"{commit_path(table)}/plan"]
    assert plans and all(r["status"] == 200 for r in plans)


def test_forwarding_icegov_reads_with_its_own_settings_not_the_clients(
        proxy: RunningProxy, store: S3Store, embedded_settings: Settings, table: Table,
        tmp_path: Path) -> None:
    with forwarding_proxy(embedded_settings, tmp_path / "reads", store.properties) as reads:
        body = staged_delete_of_eu(client(reads, store, WRITER), table)
        with as_principal(reads.url, WRITER) as http:
            response = http.post(commit_path(table), json=body)
        assert "DELETE" in assert_error_model(response, 403, "ForbiddenException")["message"]
    elsewhere = {**store.properties, "s3.endpoint": f"http://127.0.0.1:{free_port()}",
                 "s3.connect-timeout": "1", "s3.request-timeout": "1"}
    with forwarding_proxy(embedded_settings, tmp_path / "blind", elsewhere) as blind:
        body = staged_delete_of_eu(client(blind, store, ADMIN), table)
        with as_principal(blind.url, ADMIN) as http:
            response = http.post(commit_path(table), json=body)
    error = assert_error_model(response, 400, "BadRequestException")
    assert "cannot verify the commit" in error["message"] and "127.0.0.1" not in response.text
    assert rows(client(proxy, store, ADMIN), table) == [(1, "eu"), (1, "us"), (2, "eu"),
                                                          (2, "us")]


def test_the_catalogs_table_config_wins_and_no_source_loads_code(store: S3Store) -> None:
    metadata = {"format-version": 2, "table-uuid": str(uuid.uuid4()),
                "location": f"{store.warehouse}/demo/t", "last-sequence-number": 0,
                "last-updated-ms": 0, "last-column-id": 0, "current-schema-id": 0,
                "schemas": [{"type": "struct", "schema-id": 0, "fields": []}],
                "default-spec-id": 0, "partition-specs": [{"spec-id": 0, "fields": []}],
                "last-partition-id": 999, "default-sort-order-id": 0,
                "sort-orders": [{"order-id": 0, "fields": []}],
                "properties": {"s3.endpoint": "http://table-property.invalid"}}
    answer = {"metadata": metadata, "config": {
        "s3.access-key-id": "vended", "py-io-impl": "os.system"}}
    state = parse_table_state(Resource("icegov", ("demo",), "t"), json.dumps(answer).encode(),
                              {**store.properties, "s3.region": "eu-west-1"})
    assert isinstance(state.io, PyArrowFileIO)
    assert state.io.properties["s3.access-key-id"] == "vended"  # the catalog's config wins
    assert state.io.properties["s3.endpoint"] == store.endpoint  # never a table property
    assert state.io.properties["s3.region"] == "eu-west-1"
    assert "py-io-impl" not in state.io.properties


def escapes(store: S3Store) -> list[str]:
    """Locations outside ``s3://<bucket>/wh``, however they are spelled."""
    bucket = store.bucket
    return [f"s3://{OTHER_BUCKET}/wh/t", f"s3://{bucket}/elsewhere/t", f"s3://{bucket}/wh2/t",
            f"s3://{bucket}/wh/../t", f"s3://{bucket}/wh/%2E%2E/t", f"s3://{bucket}/wh/%252e%252e/t",
            f"s3://{bucket}//wh/t", f"s3://{bucket}/wh//t", f"s3a://{bucket}/wh/t",
            f"S3://{bucket}/wh/t", f"s3://{bucket}/wh/t?x=/../../t", f"s3://user@{bucket}/wh/t",
            f"s3://{bucket}/wh/t#/../../t", "file:///tmp/icegov-escape", "/tmp/icegov-escape"]


def location_attempts(location: str, table_uuid: str) -> list[tuple[str, dict[str, Any]]]:
    """Every request that asks the catalog to place something at ``location``."""
    return [
        ("/v1/namespaces/demo/tables", {"name": "escape", "schema": REST_SCHEMA,
                                        "location": location}),
        ("/v1/namespaces/demo/tables", {"name": "escape", "schema": REST_SCHEMA,
                                        "stage-create": True,
                                        "properties": {"write.metadata.path": location}}),
        ("/v1/namespaces", {"namespace": ["escape"], "properties": {"location": location}}),
        ("/v1/namespaces/demo/properties", {"updates": {"location": location}}),
        ("/v1/namespaces/demo/tables/holder", {
            "requirements": [{"type": "assert-table-uuid", "uuid": table_uuid}],
            "updates": [{"action": "set-location", "location": location}]}),
    ]


def bucket_contents(store: S3Store) -> tuple[list[str], list[str]]:
    return store.keys(), store.keys(bucket=OTHER_BUCKET)


@pytest.mark.parametrize("through_icegov", [True, False], ids=["governed", "catalog-alone"])
def test_locations_outside_the_warehouse_prefix_are_400_and_write_nothing(
        through_icegov: bool, proxy: RunningProxy, store: S3Store,
        embedded_settings: Settings) -> None:
    with contextlib.ExitStack() as stack:
        if through_icegov:
            http: Any = stack.enter_context(as_principal(proxy.url, ADMIN))
        else:
            catalog = EmbeddedCatalog.from_settings(embedded_settings)
            stack.callback(catalog.catalog.engine.dispose)
            http = stack.enter_context(TestClient(catalog.app))
        http.post("/v1/namespaces", json={"namespace": ["demo"]})
        holder = http.post("/v1/namespaces/demo/tables",
                           json={"name": "holder", "schema": REST_SCHEMA})
        if holder.status_code == 409:
            holder = http.get("/v1/namespaces/demo/tables/holder")
        table_uuid = holder.json()["metadata"]["table-uuid"]
        before = bucket_contents(store)
        for location in escapes(store):
            for path, body in location_attempts(location, table_uuid):
                response = http.post(path, json=body)
                assert_error_model(response, 400, "BadRequestException")
                assert SECRET_KEY not in response.text
        assert bucket_contents(store) == before
        assert http.head("/v1/namespaces/demo/tables/escape").status_code == 404
        assert http.get("/v1/namespaces/demo").json()["properties"].get("location") is None
        loaded = http.get("/v1/namespaces/demo/tables/holder").json()
        assert loaded["metadata"]["location"] == f"{store.warehouse}/demo/holder"


def test_table_properties_cannot_reconfigure_the_catalogs_storage(
        proxy: RunningProxy, store: S3Store) -> None:
    before = bucket_contents(store)
    with as_principal(proxy.url, ADMIN) as http:
        http.post("/v1/namespaces", json={"namespace": ["demo"]})
        for key, value in (("s3.endpoint", "http://127.0.0.1:9"), ("py-io-impl", "os.system"),
                           ("client.region", "eu-west-1"),
                           ("write.py-location-provider.impl", "os.system")):
            response = http.post("/v1/namespaces/demo/tables", json={
                "name": "reconfigured", "schema": REST_SCHEMA, "properties": {key: value}})
            assert_error_model(response, 400, "BadRequestException")
    assert bucket_contents(store) == before


def test_register_takes_only_metadata_under_the_warehouse_prefix(
        proxy: RunningProxy, store: S3Store, table: Table) -> None:
    original = store._client().get_object(
        Bucket=store.bucket, Key=table.metadata_location.removeprefix(f"s3://{store.bucket}/"))
    metadata = original["Body"].read()
    forged = json.dumps({**json.loads(metadata), "location": f"s3://{OTHER_BUCKET}/t"}).encode()
    refused = [
        store.put("outside/copy.metadata.json", metadata),  # real metadata, outside the prefix
        store.put("wh2/copy.metadata.json", metadata),  # a sibling of the prefix
        f"s3://{store.bucket}/wh/../outside/copy.metadata.json",
        f"s3://{store.bucket}/wh/%2E%2E/outside/copy.metadata.json",
        f"{store.warehouse}/demo/missing.metadata.json",  # inside, missing
        store.put("wh/demo/notes.json", b'{"hello": "world"}'),  # inside, not metadata
        store.put("wh/demo/forged.metadata.json", forged),  # inside, its table outside
    ]
    messages = set()
    with as_principal(proxy.url, ADMIN) as http:
        for location in refused:
            response = http.post("/v1/namespaces/demo/register",
                                 json={"name": "registered", "metadata-location": location})
            messages.add(assert_error_model(response, 400, "BadRequestException")["message"])
            assert http.head("/v1/namespaces/demo/tables/registered").status_code == 404
        assert len(messages) == 1  # nothing learnt about what is stored where
        adopted = http.post("/v1/namespaces/demo/register", json={
            "name": "registered", "metadata-location": table.metadata_location})
        assert adopted.status_code == 200, adopted.text
    assert rows(client(proxy, store, ADMIN), table) == [(1, "eu"), (1, "us"), (2, "eu"),
                                                          (2, "us")]


def test_the_embedded_catalog_on_s3_from_the_environment(
        store: S3Store, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ICEGOV__WAREHOUSE", f"{store.bucket_uri}/env/")
    monkeypatch.setenv("ICEGOV__FILE_IO", json.dumps(store.properties))
    with pytest.raises(SettingsError) as no_database:
        load_settings()
    assert "ICEGOV__CATALOG_DB_URI" in str(no_database.value)
    monkeypatch.setenv("ICEGOV__CATALOG_DB_URI", f"sqlite:///{tmp_path / 'env.db'}")
    settings = load_settings()
    assert settings.object_store_warehouse == f"{store.bucket_uri}/env"
    catalog = EmbeddedCatalog.from_settings(settings)
    with TestClient(catalog.app) as http:
        assert http.post("/v1/namespaces", json={"namespace": ["ns"]}).status_code == 200
        created = http.post("/v1/namespaces/ns/tables", json={"name": "t", "schema": REST_SCHEMA})
    catalog.catalog.engine.dispose()
    location = created.json()["metadata-location"]
    assert location.startswith(f"{store.bucket_uri}/env/ns/t/metadata/")
    assert store.keys("env/ns/t/") == [location.removeprefix(f"{store.bucket_uri}/")]
    assert not (tmp_path / "warehouse").exists()


def test_file_io_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ICEGOV__FILE_IO", json.dumps({"s3.endpoint": "http://minio:9000"}))
    assert load_settings().file_io == {"s3.endpoint": "http://minio:9000"}
    monkeypatch.setenv("ICEGOV__FILE_IO", json.dumps({"py-io-impl": "x.Y"}))
    with pytest.raises(SettingsError) as refused:
        load_settings()
    assert str(refused.value).startswith("ICEGOV__FILE_IO: py-io-impl may not be set")
