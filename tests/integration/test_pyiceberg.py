"""pyiceberg 0.12 RestCatalog through the proxy, against both backing catalogs."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError
from pyiceberg.expressions import EqualTo
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from tests.support.settings import ADMIN


@pytest.fixture()
def catalog(proxy_url: str) -> RestCatalog:
    return RestCatalog("proxy", uri=proxy_url, credential=ADMIN)


@pytest.fixture()
def namespace(catalog: RestCatalog) -> Iterator[str]:
    name = f"ns_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(name)
    yield name
    for identifier in catalog.list_tables(name):
        catalog.drop_table(identifier)
    catalog.drop_namespace(name)


SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "region", StringType(), required=False),
)
ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "region": ["eu", "us", "eu"]})


def rows(table: object) -> list[tuple[object, ...]]:
    arrow = table.scan().to_arrow()  # type: ignore[attr-defined]
    return sorted(zip(*(arrow.column(n).to_pylist() for n in arrow.column_names), strict=True))


def test_namespaces_round_trip(catalog: RestCatalog) -> None:
    name = f"ns_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(name)
    try:
        assert (name,) in catalog.list_namespaces()
        with pytest.raises(NamespaceAlreadyExistsError):
            catalog.create_namespace(name)
    finally:
        catalog.drop_namespace(name)
    assert (name,) not in catalog.list_namespaces()


def test_table_lifecycle(catalog: RestCatalog, namespace: str) -> None:
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "region"))
    table = catalog.create_table(f"{namespace}.events", SCHEMA, partition_spec=spec)
    assert catalog.list_tables(namespace) == [(namespace, "events")]
    assert table.spec().fields[0].name == "region"

    table.append(ROWS)
    assert rows(catalog.load_table(f"{namespace}.events")) == [(1, "eu"), (2, "us"), (3, "eu")]

    with table.update_schema() as update:
        update.add_column("score", LongType())
    table = catalog.load_table(f"{namespace}.events")
    assert [f.name for f in table.schema().fields] == ["id", "region", "score"]

    replacement = pa.table({"id": pa.array([10], pa.int64()), "region": ["ap"],
                            "score": pa.array([7], pa.int64())})
    table.overwrite(replacement)
    assert rows(catalog.load_table(f"{namespace}.events")) == [(10, "ap", 7)]

    table.append(pa.table({"id": pa.array([11, 12], pa.int64()), "region": ["ap", "eu"],
                           "score": pa.array([1, 2], pa.int64())}))
    table.delete(EqualTo("region", "eu"))
    table = catalog.load_table(f"{namespace}.events")
    assert rows(table) == [(10, "ap", 7), (11, "ap", 1)]
    assert [s.summary.operation.value for s in table.snapshots()] == [
        "append", "delete", "append", "append", "delete"]

    catalog.drop_table(f"{namespace}.events")
    with pytest.raises(NoSuchTableError):
        catalog.load_table(f"{namespace}.events")
