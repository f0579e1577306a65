"""The reference Iceberg REST catalog (Apache Iceberg's CatalogHandlers over a HadoopCatalog),
driven directly with pyiceberg and raw HTTP: no proxy involved. These tests pin down that the
reference catalog is a faithful, independent Iceberg REST catalog before other suites rely on it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urlparse

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DoubleType, LongType, NestedField, StringType

from tests.support import reference_catalog as reference_module
from tests.support.reference_catalog import compile_reference_catalog, reference_catalog

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "category", StringType(), required=False),
    NestedField(3, "name", StringType(), required=False),
)
BY_CATEGORY = PartitionSpec(
    PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="category")
)
ARROW_SCHEMA = pa.schema([("id", pa.int64()), ("category", pa.string()), ("name", pa.string())])


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    workdir = tmp_path_factory.mktemp("reference-catalog")
    with reference_catalog(workdir) as uri:
        yield uri, workdir / "reference-warehouse"


@pytest.fixture(scope="module")
def uri(reference: tuple[str, Path]) -> str:
    return reference[0]


@pytest.fixture(scope="module")
def warehouse(reference: tuple[str, Path]) -> Path:
    return reference[1]


@pytest.fixture
def catalog(uri: str) -> RestCatalog:
    return RestCatalog("ref", uri=uri)


@pytest.fixture
def http(uri: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=uri, timeout=30) as client:
        yield client


def rows(table: Table) -> list[dict[str, object]]:
    """All rows of the table's current snapshot, as dicts sorted by id."""
    return sorted(table.scan().to_arrow().to_pylist(), key=lambda row: row["id"])


def arrow(records: list[tuple[int, str, str]]) -> pa.Table:
    return pa.Table.from_pylist(
        [{"id": i, "category": c, "name": n} for i, c, n in records], schema=ARROW_SCHEMA
    )


def local_path(location: str) -> Path:
    """'file:/x' or 'file:///x' -> Path('/x')."""
    parsed = urlparse(location)
    assert parsed.scheme == "file", location
    return Path(parsed.path)


def table_path(namespace: tuple[str, ...], table: str) -> str:
    encoded_ns = "%1F".join(quote(level, safe="") for level in namespace)
    return f"/v1/namespaces/{encoded_ns}/tables/{quote(table, safe='')}"


def assert_error(response: httpx.Response, status: int, error_type: str) -> dict[str, object]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert {"message", "type", "code"} <= set(error)
    assert error["code"] == status
    assert error["type"] == error_type
    assert isinstance(error["message"], str) and error["message"]
    return error  # type: ignore[no-any-return]


# ------------------------------------------------------------------------------------ namespaces


def test_config_advertises_exactly_the_routed_endpoints(http: httpx.Client) -> None:
    response = http.get("/v1/config")
    assert response.status_code == 200
    body = response.json()
    assert body["defaults"] == {} and body["overrides"] == {}
    assert "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}" in body["endpoints"]
    assert "POST /v1/{prefix}/views/rename" in body["endpoints"]
    assert not any("/plan" in e or "register-view" in e for e in body["endpoints"])


def test_namespace_lifecycle(catalog: RestCatalog, http: httpx.Client) -> None:
    catalog.create_namespace("ns_life", {"owner": "alice", "team": "data"})
    with pytest.raises(NamespaceAlreadyExistsError):
        catalog.create_namespace("ns_life")

    assert ("ns_life",) in catalog.list_namespaces()
    props = catalog.load_namespace_properties("ns_life")
    assert props["owner"] == "alice" and props["team"] == "data"
    assert props["location"].endswith("/ns_life")

    summary = catalog.update_namespace_properties(
        "ns_life", removals={"team", "absent"}, updates={"owner": "bob", "tier": "gold"}
    )
    assert sorted(summary.removed) == ["team"]
    assert sorted(summary.updated) == ["owner", "tier"]
    assert summary.missing == ["absent"]
    props = catalog.load_namespace_properties("ns_life")
    assert props["owner"] == "bob" and props["tier"] == "gold" and "team" not in props

    assert http.head("/v1/namespaces/ns_life").status_code == 204
    missing = http.head("/v1/namespaces/ns_nope")
    assert missing.status_code == 404 and missing.content == b""

    catalog.drop_namespace("ns_life")
    assert ("ns_life",) not in catalog.list_namespaces()
    with pytest.raises(NoSuchNamespaceError):
        catalog.load_namespace_properties("ns_life")
    assert http.head("/v1/namespaces/ns_life").status_code == 404


def test_multi_level_namespaces(catalog: RestCatalog) -> None:
    catalog.create_namespace("org")
    catalog.create_namespace(("org", "sales"), {"owner": "carol"})
    catalog.create_namespace(("org", "hr"))

    assert sorted(catalog.list_namespaces("org")) == [("org", "hr"), ("org", "sales")]
    assert catalog.list_namespaces(("org", "sales")) == []
    assert catalog.load_namespace_properties(("org", "sales"))["owner"] == "carol"

    table = catalog.create_table(("org", "sales", "orders"), schema=SCHEMA)
    table.append(arrow([(1, "a", "x")]))
    assert catalog.list_tables(("org", "sales")) == [("org", "sales", "orders")]
    assert rows(catalog.load_table(("org", "sales", "orders"))) == [
        {"id": 1, "category": "a", "name": "x"}
    ]

    with pytest.raises(NamespaceNotEmptyError):
        catalog.drop_namespace(("org", "sales"))
    catalog.drop_table(("org", "sales", "orders"))
    catalog.drop_namespace(("org", "sales"))
    assert catalog.list_namespaces("org") == [("org", "hr")]


# ---------------------------------------------------------------------------------------- tables


def test_table_lifecycle(catalog: RestCatalog, warehouse: Path) -> None:
    catalog.create_namespace("shop", {"owner": "alice"})
    table = catalog.create_table("shop.items", schema=SCHEMA, partition_spec=BY_CATEGORY)
    with pytest.raises(TableAlreadyExistsError):
        catalog.create_table("shop.items", schema=SCHEMA)

    # The metadata lives in the Java HadoopCatalog's warehouse.
    assert table.metadata_location.startswith("file:")
    assert local_path(table.location()) == warehouse / "shop" / "items"
    assert table.spec().fields[0].name == "category"

    table.append(arrow([(1, "tools", "hammer"), (2, "tools", "saw"), (3, "food", "apple")]))
    reloaded = catalog.load_table("shop.items")
    assert rows(reloaded) == [
        {"id": 1, "category": "tools", "name": "hammer"},
        {"id": 2, "category": "tools", "name": "saw"},
        {"id": 3, "category": "food", "name": "apple"},
    ]
    partitions = {task.file.partition[0] for task in reloaded.scan().plan_files()}
    assert partitions == {"tools", "food"}

    # Schema evolution.
    with reloaded.update_schema() as update:
        update.add_column("price", DoubleType())
    evolved = catalog.load_table("shop.items")
    assert [f.name for f in evolved.schema().fields] == ["id", "category", "name", "price"]
    assert evolved.schema().schema_id == 1
    evolved.append(
        pa.Table.from_pylist(
            [{"id": 4, "category": "food", "name": "pear", "price": 1.5}],
            schema=ARROW_SCHEMA.append(pa.field("price", pa.float64())),
        )
    )
    assert rows(catalog.load_table("shop.items"))[-1] == {
        "id": 4,
        "category": "food",
        "name": "pear",
        "price": 1.5,
    }

    # Overwrite everything.
    current = catalog.load_table("shop.items")
    current.overwrite(
        pa.Table.from_pylist(
            [
                {"id": 10, "category": "toys", "name": "ball", "price": 3.0},
                {"id": 11, "category": "toys", "name": "kite", "price": 7.0},
                {"id": 12, "category": "food", "name": "plum", "price": 0.5},
            ],
            schema=ARROW_SCHEMA.append(pa.field("price", pa.float64())),
        )
    )
    assert [r["id"] for r in rows(catalog.load_table("shop.items"))] == [10, 11, 12]

    # Row-level delete.
    catalog.load_table("shop.items").delete("name = 'kite'")
    final = catalog.load_table("shop.items")
    assert rows(final) == [
        {"id": 10, "category": "toys", "name": "ball", "price": 3.0},
        {"id": 12, "category": "food", "name": "plum", "price": 0.5},
    ]
    # append, append, overwrite (= delete + append), delete (= copy-on-write overwrite)
    operations = [s.summary.operation.value for s in final.snapshots() if s.summary]
    assert operations == ["append", "append", "delete", "append", "overwrite"]
    # create, append, add column, append, overwrite, delete: one metadata version per commit
    assert final.metadata_location.endswith("/metadata/v6.metadata.json")

    assert catalog.list_tables("shop") == [("shop", "items")]
    assert catalog.table_exists("shop.items")

    catalog.drop_table("shop.items")
    assert catalog.list_tables("shop") == []
    assert not catalog.table_exists("shop.items")
    with pytest.raises(NoSuchTableError):
        catalog.load_table("shop.items")
    catalog.drop_namespace("shop")


def test_create_table_transaction_uses_stage_create(catalog: RestCatalog) -> None:
    """pyiceberg's create transaction: stage-create, then a commit with assert-create (as CTAS)."""
    catalog.create_namespace("staging")
    with catalog.create_table_transaction("staging.t", schema=SCHEMA) as tx:
        assert not catalog.table_exists("staging.t")  # staged only: nothing written yet
        tx.set_properties(stage="yes")
        tx.append(arrow([(1, "a", "one"), (2, "b", "two")]))
    table = catalog.load_table("staging.t")
    assert table.properties["stage"] == "yes"
    assert [r["name"] for r in rows(table)] == ["one", "two"]

    # A staged create whose table appeared meanwhile must be refused by Iceberg's handlers.
    stale = catalog.create_table_transaction("staging.race", schema=SCHEMA)
    catalog.create_table("staging.race", schema=SCHEMA)
    with pytest.raises((CommitFailedException, TableAlreadyExistsError)):
        stale.commit_transaction()
    catalog.drop_table("staging.race")
    catalog.drop_table("staging.t")
    catalog.drop_namespace("staging")


def test_register_table(catalog: RestCatalog) -> None:
    catalog.create_namespace("reg")
    source = catalog.create_table("reg.source", schema=SCHEMA)
    source.append(arrow([(1, "a", "x")]))
    source = catalog.load_table("reg.source")

    registered = catalog.register_table("reg.copy", source.metadata_location)
    assert rows(registered) == [{"id": 1, "category": "a", "name": "x"}]
    assert sorted(catalog.list_tables("reg")) == [("reg", "copy"), ("reg", "source")]


def test_rename_is_refused_by_hadoop_catalog(catalog: RestCatalog, http: httpx.Client) -> None:
    """HadoopCatalog cannot rename path-based tables; the reference reports Iceberg's answer."""
    catalog.create_namespace("ren")
    catalog.create_table("ren.a", schema=SCHEMA)
    response = http.post(
        "/v1/tables/rename",
        json={
            "source": {"namespace": ["ren"], "name": "a"},
            "destination": {"namespace": ["ren"], "name": "b"},
        },
    )
    assert_error(response, 406, "UnsupportedOperationException")
    assert catalog.list_tables("ren") == [("ren", "a")]


# ------------------------------------------------------------------------------ commits and HTTP


def test_failing_requirement_is_a_409_commit_failed(
    catalog: RestCatalog, http: httpx.Client
) -> None:
    catalog.create_namespace("raw")
    table = catalog.create_table("raw.t", schema=SCHEMA)
    table.append(arrow([(1, "a", "x")]))
    snapshot_id = catalog.load_table("raw.t").metadata.current_snapshot_id
    assert snapshot_id is not None
    path = table_path(("raw",), "t")

    response = http.post(
        path,
        json={
            "requirements": [
                {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": snapshot_id + 1}
            ],
            "updates": [{"action": "set-properties", "updates": {"touched": "yes"}}],
        },
    )
    error = assert_error(response, 409, "CommitFailedException")
    assert "main" in str(error["message"])
    assert "touched" not in catalog.load_table("raw.t").properties

    # The same commit with the right snapshot id goes through.
    response = http.post(
        path,
        json={
            "requirements": [
                {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": snapshot_id}
            ],
            "updates": [{"action": "set-properties", "updates": {"touched": "yes"}}],
        },
    )
    assert response.status_code == 200, response.text
    assert response.json()["metadata"]["properties"]["touched"] == "yes"
    assert catalog.load_table("raw.t").properties["touched"] == "yes"


def test_stale_writer_is_rejected(catalog: RestCatalog) -> None:
    catalog.create_namespace("stale")
    no_client_retry = {"commit.retry.num-retries": "0"}  # pyiceberg would rebase and retry
    catalog.create_table("stale.t", schema=SCHEMA, properties=no_client_retry).append(
        arrow([(1, "a", "x")])
    )
    first = catalog.load_table("stale.t")
    second = catalog.load_table("stale.t")

    first.append(arrow([(2, "a", "y")]))
    with pytest.raises(CommitFailedException):
        second.append(arrow([(3, "a", "z")]))
    assert [r["id"] for r in rows(catalog.load_table("stale.t"))] == [1, 2]


def test_concurrent_appends_lose_nothing(uri: str) -> None:
    RestCatalog("ref", uri=uri).create_namespace("conc")
    RestCatalog("ref", uri=uri).create_table("conc.t", schema=SCHEMA)
    writers, conflicts, errors = 8, [], []

    def append(i: int) -> None:
        catalog = RestCatalog("ref", uri=uri)
        try:
            for _ in range(50):
                try:
                    catalog.load_table("conc.t").append(arrow([(i, "c", f"w{i}")]))
                    return
                except CommitFailedException:
                    conflicts.append(i)
            errors.append(f"writer {i} never committed")
        except Exception as exc:  # surfaced below
            errors.append(repr(exc))

    threads = [threading.Thread(target=append, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    table = RestCatalog("ref", uri=uri).load_table("conc.t")
    assert [r["id"] for r in rows(table)] == list(range(writers))
    assert len(table.snapshots()) == writers


def test_multi_table_transaction(catalog: RestCatalog, http: httpx.Client) -> None:
    catalog.create_namespace("txn")
    catalog.create_table("txn.a", schema=SCHEMA)
    catalog.create_table("txn.b", schema=SCHEMA)

    def change(name: str, requirements: list[dict[str, object]]) -> dict[str, object]:
        return {
            "identifier": {"namespace": ["txn"], "name": name},
            "requirements": requirements,
            "updates": [{"action": "set-properties", "updates": {"txn": "1"}}],
        }

    uuid_a = catalog.load_table("txn.a").metadata.table_uuid
    bad = http.post(
        "/v1/transactions/commit",
        json={
            "table-changes": [
                change("a", [{"type": "assert-table-uuid", "uuid": str(uuid_a)}]),
                change("b", [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": 7}]),
            ]
        },
    )
    assert_error(bad, 409, "CommitFailedException")
    assert "txn" not in catalog.load_table("txn.a").properties
    assert "txn" not in catalog.load_table("txn.b").properties

    good = http.post(
        "/v1/transactions/commit",
        json={
            "table-changes": [
                change("a", [{"type": "assert-table-uuid", "uuid": str(uuid_a)}]),
                change("b", []),
            ]
        },
    )
    assert good.status_code == 204, good.text
    assert catalog.load_table("txn.a").properties["txn"] == "1"
    assert catalog.load_table("txn.b").properties["txn"] == "1"


def test_errors_and_misc_routes(catalog: RestCatalog, http: httpx.Client) -> None:
    catalog.create_namespace("misc")
    catalog.create_table("misc.t", schema=SCHEMA)

    assert_error(http.get("/v1/nowhere"), 404, "NotFoundException")
    assert_error(http.get("/v2/config"), 404, "NotFoundException")
    assert_error(http.get("/v1/namespaces/absent"), 404, "NoSuchNamespaceException")
    assert_error(http.get(table_path(("misc",), "absent")), 404, "NoSuchTableException")
    assert_error(http.post("/v1/namespaces", content=b"{not json"), 400, "BadRequestException")
    assert_error(
        http.post("/v1/namespaces", json={"namespace": ["misc"]}), 409, "AlreadyExistsException"
    )

    # Metadata tables (Spark loads `misc.t.snapshots` as table `snapshots` in namespace misc.t)
    # must be a plain missing *table*, not a missing namespace.
    assert_error(http.get(table_path(("misc", "t"), "snapshots")), 404, "NoSuchTableException")

    assert http.head(table_path(("misc",), "t")).status_code == 204
    assert http.head(table_path(("misc",), "absent")).status_code == 404

    metrics = http.post(
        table_path(("misc",), "t") + "/metrics",
        json={
            "report-type": "commit-report",
            "table-name": "misc.t",
            "snapshot-id": 1,
            "sequence-number": 1,
            "operation": "append",
            "metrics": {},
        },
    )
    assert metrics.status_code == 204 and metrics.content == b""

    # Purge really deletes the files.
    table = catalog.load_table("misc.t")
    table.append(arrow([(1, "a", "x")]))
    location = local_path(table.location())
    assert any(location.rglob("*.parquet"))
    response = http.delete(table_path(("misc",), "t"), params={"purgeRequested": "true"})
    assert response.status_code == 204
    assert not location.exists()
    assert_error(http.delete(table_path(("misc",), "t")), 404, "NoSuchTableException")


# --------------------------------------------------------------------------------- Python side


def test_compilation_is_cached() -> None:
    first = compile_reference_catalog()
    assert (first / ".complete").is_file()
    assert (first / "referencecatalog" / "ReferenceCatalog.class").is_file()
    assert compile_reference_catalog() == first
    assert first.parent == reference_module.CACHE_ROOT


def test_startup_failure_reports_stderr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reference_module, "MAIN_CLASS", "referencecatalog.DoesNotExist")
    with (
        pytest.raises(RuntimeError, match="exited with code") as failure,
        reference_catalog(tmp_path),
    ):
        pass
    assert "referencecatalog.DoesNotExist" in str(failure.value)
