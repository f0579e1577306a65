"""icegov reads table metadata and manifests on ``s3://`` with its ``file_io`` setting (issue 9 §4).

The object store is moto's S3 server on a loopback port (``tests.support.s3``); the backing
catalog keeps its warehouse on it. pyiceberg writes through icegov; icegov classifies each commit
from the manifests it reads on S3 (a delete disguised as an append is still a DELETE), plans scans
from them, and pyiceberg reads the rows back. A second icegov in front of the same catalog whose
``file_io`` points elsewhere cannot read that evidence and refuses the commit: the setting, not
the client's own properties, is what icegov reads with.
"""

from __future__ import annotations

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

from proxy.app import Backing, create_app
from proxy.backing.tables import parse_table_state
from proxy.catalog.app import CatalogApp
from proxy.resources import Resource
from proxy.settings import SettingsError, load_settings
from tests.conftest import RunningProxy
from tests.support.commit_capture import wire_json
from tests.support.errors import assert_error_model
from tests.support.http import as_principal, audit_records
from tests.support.s3 import (
    SECRET_KEY,
    S3Store,
    confine_to_object_store,
    s3_catalog,
    s3_catalog_app,
    s3_server,
)
from tests.support.servers import free_port, serve
from tests.support.settings import ADMIN, settings_for_tests

BACKING_URL = "http://s3-backing"
WRITER = "writer:writer-secret"
DELETER = "deleter:deleter-secret"
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False),
                NestedField(2, "region", StringType(), required=False))
SPEC = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "region"))
Row = tuple[Any, ...]


@pytest.fixture(scope="module")
def store() -> Iterator[S3Store]:
    with s3_server() as running:
        yield running


@pytest.fixture(scope="module")
def backing(store: S3Store, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CatalogApp]:
    """The backing REST catalog, its warehouse on the store."""
    catalog = s3_catalog(store, tmp_path_factory.mktemp("s3-backing") / "catalog.db")
    with pytest.MonkeyPatch.context() as patch:
        confine_to_object_store(patch)
        yield s3_catalog_app(catalog)
    catalog.engine.dispose()


def proxy_in_front(backing: CatalogApp, workdir: Path,
                   file_io: dict[str, str]) -> Any:
    """icegov forwarding to ``backing`` in-process, reading table files with ``file_io``."""
    settings = settings_for_tests(workdir, catalog_uri=BACKING_URL, file_io=file_io)
    return create_app(settings, Backing(httpx.ASGITransport(app=backing), BACKING_URL))


@pytest.fixture(scope="module")
def proxy(store: S3Store, backing: CatalogApp,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningProxy]:
    workdir = tmp_path_factory.mktemp("s3-icegov")
    with serve(proxy_in_front(backing, workdir, store.properties)) as url:
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


def test_icegov_reads_with_its_own_settings_not_the_clients(
        proxy: RunningProxy, store: S3Store, backing: CatalogApp, table: Table,
        tmp_path: Path) -> None:
    elsewhere = {**store.properties, "s3.endpoint": f"http://127.0.0.1:{free_port()}",
                 "s3.connect-timeout": "1", "s3.request-timeout": "1"}
    with serve(proxy_in_front(backing, tmp_path, elsewhere)) as url:
        blind = RunningProxy(url, tmp_path)
        body = staged_delete_of_eu(client(blind, store, ADMIN), table)
        with as_principal(url, ADMIN) as http:
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


def test_file_io_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ICEGOV__FILE_IO", json.dumps({"s3.endpoint": "http://minio:9000"}))
    assert load_settings().file_io == {"s3.endpoint": "http://minio:9000"}
    monkeypatch.setenv("ICEGOV__FILE_IO", json.dumps({"py-io-impl": "x.Y"}))
    with pytest.raises(SettingsError) as refused:
        load_settings()
    assert str(refused.value).startswith("ICEGOV__FILE_IO: py-io-impl may not be set")
