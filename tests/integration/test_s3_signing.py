"""S3 remote signing through icegov (issue 23): engines with no storage credentials read
through icegov's signatures, each only what its view of the table lists.

The store is moto's S3 server behind the tests' S3 gateway (``tests.support.s3_gateway``), which
enforces authentication: a request without a valid SigV4 signature made with the store's keys
is refused (403) before it reaches moto. icegov serves its embedded catalog on it with
``ICEGOV__SIGNING__ENABLED`` and signs with its own ``file_io`` keys. The clients are pyiceberg
with the fsspec FileIO (s3fs) and *no* storage credentials: every request they send carries
icegov's signature (``S3V4RestSigner``), so what they read and write is what icegov signed
(reads, an append, a multipart upload), and the same client without the signer is refused by
the store. The tests turn fsspec's instance cache off: pyiceberg's signer is not safe on an S3
client shared between FileIOs (``one_s3_client_per_file_io``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import SignError
from pyiceberg.io.fsspec import FsspecFileIO
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from proxy.app import create_app
from tests.conftest import RunningProxy
from tests.support.errors import assert_error_model
from tests.support.http import as_principal, audit_records
from tests.support.read_tables import EU_ANALYST
from tests.support.s3 import REGION, S3Store, embedded_on_s3
from tests.support.s3_gateway import S3Gateway, gated_s3_server
from tests.support.servers import serve
from tests.support.settings import ADMIN, settings_for_tests

# pyiceberg's signer runs in its fsspec FileIO only
S3FileSystem = pytest.importorskip("s3fs").S3FileSystem

WRITER = "writer:writer-secret"
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False),
                NestedField(2, "region", StringType(), required=False))
SPEC = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "region"))
SIGNED = "pyiceberg.io.fsspec.FsspecFileIO"


@pytest.fixture(scope="module", autouse=True)
def one_s3_client_per_file_io() -> Iterator[None]:
    """pyiceberg registers its signer on the S3 client of an s3fs filesystem that fsspec
    shares between every FileIO with the same endpoint (in every thread), unregistering and
    registering it again each time a thread first uses a FileIO: requests sent meanwhile go
    out unsigned, and one principal's signer signs for another's FileIO. Without fsspec's
    instance cache each FileIO (per thread) has its own client and signer."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(S3FileSystem, "cachable", False)
        yield


@pytest.fixture(scope="module")
def gated() -> Iterator[tuple[S3Store, S3Gateway]]:
    with gated_s3_server() as running:
        yield running


@pytest.fixture(scope="module")
def store(gated: tuple[S3Store, S3Gateway]) -> S3Store:
    return gated[0]


@pytest.fixture(scope="module")
def gateway(gated: tuple[S3Store, S3Gateway]) -> S3Gateway:
    return gated[1]


@pytest.fixture(scope="module")
def proxy(store: S3Store, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningProxy]:
    workdir = tmp_path_factory.mktemp("s3-signing")
    settings = settings_for_tests(workdir, **embedded_on_s3(store, workdir),
                                  signing={"enabled": True})
    with serve(create_app(settings)) as url:
        yield RunningProxy(url, workdir)


@pytest.fixture(scope="module")
def orders(proxy: RunningProxy, store: S3Store) -> Table:
    """demo.orders, written by the admin with storage credentials: one file per region."""
    admin = RestCatalog("admin", uri=proxy.url, credential=ADMIN, **store.properties)
    admin.create_namespace_if_not_exists("demo")
    table = admin.create_table("demo.orders", SCHEMA, partition_spec=SPEC)
    for region in ("eu", "us"):
        table.append(pa.table({"id": pa.array([1, 2], pa.int64()), "region": [region] * 2}))
    return admin.load_table("demo.orders")


def signed_client(proxy: RunningProxy, store: S3Store, credential: str) -> RestCatalog:
    """pyiceberg through icegov holding no storage credentials: it reaches the store's
    endpoint, and icegov signs each request."""
    return RestCatalog("signed", uri=proxy.url, credential=credential,
                       **{"py-io-impl": SIGNED, "s3.endpoint": store.endpoint,
                          "s3.region": REGION})


def rows(catalog: RestCatalog) -> list[tuple[Any, ...]]:
    arrow = catalog.load_table("demo.orders").scan().to_arrow()
    return sorted(zip(arrow["id"].to_pylist(), arrow["region"].to_pylist(), strict=True))


def grant_endpoint(proxy: RunningProxy, credential: str) -> str:
    with as_principal(proxy.url, credential) as http:
        config = http.get("/v1/namespaces/demo/tables/orders").json()["config"]
    assert config["s3.remote-signing-enabled"] == "true"
    return "/" + config["s3.signer.endpoint"]


def sign(proxy: RunningProxy, credential: str, endpoint: str, method: str,
         uri: str) -> Any:
    with as_principal(proxy.url, credential) as http:
        return http.post(endpoint, json={"region": REGION, "uri": uri, "method": method,
                                         "headers": {}})


def data_files(table: Table) -> dict[str, str]:
    return {task.file.partition[0]: task.file.file_path for task in table.scan().plan_files()}


def object_uri(store: S3Store, location: str) -> str:
    return f"{store.endpoint}/{location.removeprefix('s3://')}"


def test_a_client_without_storage_credentials_reads_through_signatures(
        proxy: RunningProxy, store: S3Store, gateway: S3Gateway, orders: Table) -> None:
    refused = len(gateway.refused)
    assert rows(signed_client(proxy, store, ADMIN)) == [(1, "eu"), (1, "us"), (2, "eu"),
                                                        (2, "us")]
    signing = [r for r in audit_records(proxy.workdir / "audit.log")
               if r["endpoint"] == "sign_s3_request"]
    assert signing and all(r["decision"] == "allow" for r in signing)
    # reads are aggregated: far fewer records than signed requests, one per window here
    assert len(signing) == 1
    assert gateway.refused[refused:] == []  # every request the store saw was validly signed


def test_the_same_client_without_the_signer_is_refused_by_the_store(
        store: S3Store, gateway: S3Gateway, orders: Table) -> None:
    unsigned = FsspecFileIO({"s3.endpoint": store.endpoint, "s3.region": REGION,
                             "s3.anonymous": "true"})
    refused = len(gateway.refused)
    with pytest.raises(PermissionError):
        unsigned.new_input(data_files(orders)["us"]).open().read()
    with pytest.raises(PermissionError):
        unsigned.new_output(f"{orders.location()}/data/planted.parquet").create().write(b"x")
    assert len(gateway.refused) > refused


def test_the_eu_analyst_reads_exactly_its_governed_rows(
        proxy: RunningProxy, store: S3Store, orders: Table) -> None:
    assert rows(signed_client(proxy, store, EU_ANALYST)) == [(1, "eu"), (2, "eu")]


def test_a_signing_request_for_a_base_file_it_may_not_read_is_403(
        proxy: RunningProxy, store: S3Store, orders: Table) -> None:
    endpoint = grant_endpoint(proxy, EU_ANALYST)
    us_file = data_files(orders)["us"]
    refused = sign(proxy, EU_ANALYST, endpoint, "GET", object_uri(store, us_file))
    assert_error_model(refused, 403)
    another = sign(proxy, ADMIN, endpoint, "GET", object_uri(store, us_file))
    assert_error_model(another, 403)  # the grant is the eu-analyst's alone


def test_a_writers_signed_put_outside_the_table_is_403(
        proxy: RunningProxy, store: S3Store, orders: Table) -> None:
    endpoint = grant_endpoint(proxy, WRITER)
    inside = sign(proxy, WRITER, endpoint, "PUT",
                  object_uri(store, f"{orders.location()}/data/new.parquet"))
    assert inside.status_code == 200
    assert inside.json()["headers"]["if-none-match"] == ["*"]
    outside = sign(proxy, WRITER, endpoint, "PUT",
                   object_uri(store, f"{store.warehouse}/demo/other/data/new.parquet"))
    assert_error_model(outside, 403)
    delete = sign(proxy, WRITER, endpoint, "DELETE",
                  object_uri(store, f"{orders.location()}/data/new.parquet"))
    assert_error_model(delete, 403)
    denied = [r for r in audit_records(proxy.workdir / "audit.log")
              if r["endpoint"] == "sign_s3_request" and r["status"] == 403]
    assert any(e.get("signing", {}).get("decision") == "deny" for r in denied
               for e in r["evidence"])


def test_a_writer_without_storage_credentials_appends_through_signatures(
        proxy: RunningProxy, store: S3Store, gateway: S3Gateway, orders: Table) -> None:
    """Data files, manifests and the manifest list are PUT with icegov's signatures; the
    admin then reads the rows and the eu-analyst exactly its governed ones (it adds rows to
    demo.orders: the reads above expect the original ones)."""
    refused, before = len(gateway.refused), set(store.keys("wh/demo/orders/"))
    table = signed_client(proxy, store, WRITER).load_table("demo.orders")
    table.append(pa.table({"id": pa.array([3, 4], pa.int64()), "region": ["eu", "us"]}))
    assert gateway.refused[refused:] == []
    written = set(store.keys("wh/demo/orders/")) - before
    assert any(k.startswith("wh/demo/orders/data/") for k in written)
    assert any(k.endswith(".avro") for k in written)  # manifests and the manifest list
    assert rows(signed_client(proxy, store, ADMIN)) == [
        (1, "eu"), (1, "us"), (2, "eu"), (2, "us"), (3, "eu"), (4, "us")]
    assert rows(signed_client(proxy, store, EU_ANALYST)) == [(1, "eu"), (2, "eu"), (3, "eu")]
    signing = [e["signing"] for r in audit_records(proxy.workdir / "audit.log")
               if r["endpoint"] == "sign_s3_request" and r["principal"] == "writer"
               for e in r["evidence"] if "signing" in e]
    assert {"put"} <= {s.get("operation") for s in signing if s.get("decision") == "allow"}


def test_the_writers_client_cannot_put_outside_the_table(
        proxy: RunningProxy, store: S3Store, gateway: S3Gateway, orders: Table) -> None:
    table = signed_client(proxy, store, WRITER).load_table("demo.orders")
    outside = f"{store.warehouse}/demo/other/data/planted.parquet"
    with pytest.raises(SignError), table.io.new_output(outside).create(overwrite=True) as out:
        out.write(b"not a table file")
    assert store.keys("wh/demo/other/") == []


def test_a_multipart_upload_goes_through_signatures(
        proxy: RunningProxy, store: S3Store, gateway: S3Gateway, orders: Table) -> None:
    """s3fs uploads a file larger than its block in parts (CreateMultipartUpload, UploadPart,
    CompleteMultipartUpload): each signed by icegov for the writer, under the table."""
    table = signed_client(proxy, store, WRITER).load_table("demo.orders")
    refused = len(gateway.refused)
    body = os.urandom(11 * 2**20)
    location = f"{orders.location()}/data/multipart.bin"
    filesystem = table.io.get_fs("s3")  # type: ignore[attr-defined]
    with filesystem.open(location.removeprefix("s3://"), "wb", block_size=5 * 2**20) as out:
        out.write(body)
    assert gateway.refused[refused:] == []
    assert table.io.new_input(location).open().read() == body
    operations = {e["signing"].get("operation") for r in audit_records(proxy.workdir / "audit.log")
                  if r["principal"] == "writer" for e in r["evidence"] if "signing" in e}
    assert {"create-upload", "upload-part", "complete-upload"} <= operations


def test_a_signed_put_never_replaces_an_existing_object(
        proxy: RunningProxy, store: S3Store, gateway: S3Gateway, orders: Table) -> None:
    table = signed_client(proxy, store, WRITER).load_table("demo.orders")
    existing = data_files(orders)["eu"]
    before = table.io.new_input(existing).open().read()
    # icegov signs every PUT with If-None-Match: * — the store answers 412, s3fs raises
    with pytest.raises(FileExistsError, match="pre-conditions"), \
            table.io.new_output(existing).create(overwrite=True) as out:
        out.write(b"overwritten")
    assert table.io.new_input(existing).open().read() == before
