"""DuckDB's Iceberg extension (from PyPI: ``duckdb`` and the ``duckdb-extension-*`` wheels of
the same version) attaches to icegov as any principal with the same ``ATTACH``.

The backing vends credentials as Lakekeeper does (``tests.support.vending``): the table
``config`` says nothing of storage, every ``storage-credentials`` entry carries the keys,
endpoint, path-style access and ``client.region``. icegov hands a principal restricted by
column rules (the demo policy's ``analyst``) those credentials without their keys, and its
projected answer's ``config`` (``scan-planning-mode``) with the credentials' region: DuckDB
configures storage from a non-empty ``config`` and refused one without a region ("No region
was provided via the vended credentials").

The store is moto's S3 server, which does not check request signatures: the analyst's key-less
reads reach it, so the test also sees the analyst's rows (a real store would refuse them; that
is the point of withholding the key). What the test holds icegov to is the attach, the listing,
the projected columns, and that no key reaches the analyst.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import httpx
import pyarrow as pa
import pytest
from duckdb_extensions import import_extension
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from proxy.app import EMBEDDED_BASE_URL, Backing, create_app
from proxy.catalog import EmbeddedCatalog
from tests.support.s3 import ACCESS_KEY, SECRET_KEY, S3Store, embedded_on_s3, s3_server
from tests.support.servers import serve
from tests.support.settings import ADMIN, settings_for_tests
from tests.support.vending import VendingTransport

ANALYST = "analyst:analyst-secret"
EXTENSIONS = ("httpfs", "avro", "iceberg")
CUSTOMERS = Schema(NestedField(1, "id", LongType(), required=False),
                   NestedField(2, "ssn", StringType(), required=False),
                   NestedField(3, "email", StringType(), required=False))
ORDERS = Schema(NestedField(1, "id", LongType(), required=False),
                NestedField(2, "region", StringType(), required=False))


@pytest.fixture(scope="module")
def store() -> Iterator[S3Store]:
    with s3_server() as running:
        yield running


@pytest.fixture(scope="module")
def icegov(store: S3Store, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """icegov in front of a vending catalog on the store, with ``demo.customers`` and
    ``demo.orders`` written by the admin through it."""
    workdir = tmp_path_factory.mktemp("duckdb-icegov")
    settings = settings_for_tests(workdir, **embedded_on_s3(store, workdir))
    catalog = EmbeddedCatalog.from_settings(settings)
    transport = VendingTransport(httpx.ASGITransport(app=catalog.app), store)
    backing = Backing(transport, EMBEDDED_BASE_URL, [transport.aclose, catalog.aclose])
    with serve(create_app(settings, backing)) as url:
        admin = RestCatalog("admin", uri=url, credential=ADMIN, **store.properties)
        admin.create_namespace("demo")
        admin.create_table("demo.customers", CUSTOMERS).append(pa.table({
            "id": pa.array([1, 2], pa.int64()), "ssn": ["111-22-3333", "222-33-4444"],
            "email": ["a@example.com", "b@example.com"]}))
        admin.create_table("demo.orders", ORDERS).append(pa.table({
            "id": pa.array([7, 8], pa.int64()), "region": ["eu", "us"]}))
        yield url


@pytest.fixture(scope="module")
def extensions() -> Iterator[Path]:
    """An extension directory with the wheels' extensions installed (no download)."""
    with tempfile.TemporaryDirectory(prefix="duckdb-ext-") as directory:
        connection = duckdb.connect(config={"extension_directory": directory})
        for name in EXTENSIONS:
            import_extension(name, con=connection)
        connection.close()
        yield Path(directory)


def attached(url: str, credential: str, extensions: Path) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with icegov attached as ``cat`` for ``credential`` — the same
    statements for every principal, no region or storage setting of its own."""
    client_id, client_secret = credential.split(":")
    connection = duckdb.connect(config={"extension_directory": str(extensions)})
    for name in EXTENSIONS:
        connection.sql(f"LOAD {name}")
    connection.sql(f"CREATE SECRET icegov (TYPE ICEBERG, CLIENT_ID '{client_id}', "
                   f"CLIENT_SECRET '{client_secret}', "
                   f"OAUTH2_SERVER_URI '{url}/v1/oauth/tokens')")
    connection.sql(f"ATTACH 'icegov' AS cat (TYPE ICEBERG, ENDPOINT '{url}', SECRET icegov)")
    return connection


def tables(connection: duckdb.DuckDBPyConnection) -> dict[str, list[str]]:
    """Each table of ``cat`` with the columns DuckDB sees (loadTable's schema)."""
    names = connection.sql("SELECT schema, name FROM (SHOW ALL TABLES) "
                           "WHERE database = 'cat' ORDER BY name").fetchall()
    return {f"{schema}.{name}": [row[0] for row in connection.sql(
        f"SELECT column_name FROM (DESCRIBE cat.{schema}.{name})").fetchall()]
        for schema, name in names}


def test_duckdb_attaches_and_reads_as_an_unrestricted_principal(
        icegov: str, extensions: Path) -> None:
    with attached(icegov, ADMIN, extensions) as connection:
        assert tables(connection) == {"demo.customers": ["id", "ssn", "email"],
                                      "demo.orders": ["id", "region"]}
        assert connection.sql("SELECT id, ssn FROM cat.demo.customers ORDER BY id").fetchall() \
            == [(1, "111-22-3333"), (2, "222-33-4444")]


def test_duckdb_attaches_as_a_restricted_principal_with_the_same_attach(
        icegov: str, extensions: Path) -> None:
    with attached(icegov, ANALYST, extensions) as connection:
        assert tables(connection) == {"demo.customers": ["id", "email"],
                                      "demo.orders": ["id", "region"]}
        # reading a table (governed or not) configures storage from what icegov answered
        assert connection.sql("SELECT * FROM cat.demo.customers ORDER BY id").fetchall() \
            == [(1, "x@xxxxxxx.com"), (2, "x@xxxxxxx.com")]  # email: show-last-4
        assert connection.sql("SELECT * FROM cat.demo.orders ORDER BY id").fetchall() \
            == [(7, "eu"), (8, "us")]


def test_the_restricted_answer_holds_no_key_and_keeps_the_storage_shape(
        icegov: str, store: S3Store) -> None:
    def load(credential: str, table: str) -> dict[str, Any]:
        client_id, secret = credential.split(":")
        token = httpx.post(f"{icegov}/v1/oauth/tokens", data={
            "grant_type": "client_credentials", "client_id": client_id,
            "client_secret": secret}).json()["access_token"]
        answer = httpx.get(f"{icegov}/v1/namespaces/demo/tables/{table}", headers={
            "authorization": f"Bearer {token}",
            "x-iceberg-access-delegation": "vended-credentials"})
        assert answer.status_code == 200, answer.text
        loaded: dict[str, Any] = answer.json()
        return loaded

    for table in ("customers", "orders"):
        restricted, unrestricted = load(ANALYST, table), load(ADMIN, table)
        assert ACCESS_KEY not in json.dumps(restricted) and SECRET_KEY not in json.dumps(
            restricted)
        assert SECRET_KEY in json.dumps(unrestricted)
        bare = [{"prefix": c["prefix"], "config": {
            k: v for k, v in c["config"].items() if k not in ("s3.access-key-id",
                                                              "s3.secret-access-key")}}
            for c in unrestricted["storage-credentials"]]
        if table == "customers":  # governed (email masked): the governed tree's settings too
            tree = restricted["metadata-location"].rsplit("/metadata/", 1)[0]
            bare.append({**bare[0], "prefix": tree})
        assert restricted["storage-credentials"] == bare
        assert bare[0]["config"]["s3.endpoint"] == store.endpoint
