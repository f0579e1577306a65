"""Column dependencies through icegov, on both backings (issue 22, item 1).

A store_sales-like table partitioned by a derived month column declares the seed's dependency
``ss_sold_date_sk=ss_sold_month:truncate[2]`` (dates written ``MM-DD-YYYY``, so the first two
characters are the month) and keeps no metrics for ``ss_sold_date_sk``: local planning cannot
prune a filter on the date at all, icegov's server-side planning prunes it to the month's
partition. PyIceberg appends through icegov (each verified and stamped); a write whose rows
break the dependency is refused with nothing landed; an invalid property is refused.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pyarrow as pa
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import BadRequestError
from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, In, LessThan, Or
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DecimalType, IntegerType, NestedField, StringType

from tests.conftest import RunningProxy
from tests.support.http import audit_records
from tests.support.settings import ADMIN

SCHEMA = Schema(
    NestedField(1, "ss_item_sk", IntegerType(), required=False),
    NestedField(2, "ss_quantity", IntegerType(), required=False),
    NestedField(3, "ss_sales_price", DecimalType(7, 2), required=False),
    NestedField(4, "ss_sold_month", StringType(), required=False),
    NestedField(5, "ss_sold_date_sk", StringType(), required=False),
)
BY_MONTH = PartitionSpec(PartitionField(4, 1000, IdentityTransform(), "ss_sold_month"))
SEED = "ss_sold_date_sk=ss_sold_month:truncate[2]"
PROPERTIES = {"icegov.column-dependencies": SEED,
              "write.metadata.metrics.column.ss_sold_date_sk": "none"}
MONTHS = ("01", "03", "09", "11")


def sales(month: str, start: int, rows: int = 12, *, wrong_month: str | None = None) -> pa.Table:
    days = [f"{month}-{1 + i % 28:02d}-{2019 + i % 2}" for i in range(rows)]
    return pa.Table.from_pylist([
        {"ss_item_sk": start + i, "ss_quantity": i, "ss_sales_price": None,
         "ss_sold_month": wrong_month or month, "ss_sold_date_sk": day}
        for i, day in enumerate(days)], schema=SCHEMA.as_arrow())


@pytest.fixture(scope="module")
def catalogs(proxy_url: str) -> tuple[RestCatalog, RestCatalog]:
    local = RestCatalog("local", uri=proxy_url, credential=ADMIN)
    server = RestCatalog("server", uri=proxy_url, credential=ADMIN,
                         **{"scan-planning-mode": "server"})
    assert server.supports_server_side_planning()
    return local, server


@pytest.fixture(scope="module")
def store_sales(catalogs: tuple[RestCatalog, RestCatalog]) -> Iterator[str]:
    local, _ = catalogs
    namespace = f"deps_{uuid.uuid4().hex[:8]}"
    local.create_namespace(namespace)
    identifier = f"{namespace}.store_sales"
    table = local.create_table(identifier, SCHEMA, partition_spec=BY_MONTH,
                               properties=PROPERTIES)
    for number, month in enumerate(MONTHS):
        table.append(sales(month, number * 100))
    yield identifier
    for name in local.list_tables(namespace):
        local.drop_table(name)
    local.drop_namespace(namespace)


def rows(table: Table, row_filter: Any) -> list[tuple[Any, ...]]:
    arrow = table.scan(row_filter=row_filter).to_arrow()
    return sorted(zip(*(arrow.column(n).to_pylist() for n in arrow.column_names), strict=True))


def planned_months(table: Table, row_filter: Any) -> list[str]:
    return sorted(t.file.partition[0] for t in table.scan(row_filter=row_filter).plan_files())


def pruned_by_dependencies(url: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    return sum(s.value for family in text_string_to_metric_families(text)
               for s in family.samples if s.name == "icegov_plan_files_pruned_total"
               and s.labels.get("mechanism") == "dependencies")


def test_every_verified_append_is_stamped(catalogs: tuple[RestCatalog, RestCatalog],
                                          store_sales: str) -> None:
    table = catalogs[0].load_table(store_sales)
    stamps = {s.summary.get("icegov.dependencies-verified")  # type: ignore[union-attr]
              for s in table.snapshots()}
    assert len(stamps) == 1 and None not in stamps


@pytest.mark.parametrize(("row_filter", "months"), [
    (EqualTo("ss_sold_date_sk", "09-11-2019"), ["09"]),
    (In("ss_sold_date_sk", ["01-02-2020", "11-03-2019", "11-04-2019"]), ["01", "11"]),
    (And(GreaterThanOrEqual("ss_sold_date_sk", "03-01-2019"),
         LessThan("ss_sold_date_sk", "09-30-2020")), ["03", "09"]),
    (Or(EqualTo("ss_sold_date_sk", "03-05-2019"), EqualTo("ss_sold_date_sk", "11-05-2019")),
     ["03", "11"]),
    (And(EqualTo("ss_sold_date_sk", "09-12-2020"), EqualTo("ss_quantity", 11)), ["09"]),
])
def test_a_filter_on_the_source_plans_only_its_months(
        catalogs: tuple[RestCatalog, RestCatalog], store_sales: str, proxy_url: str,
        row_filter: Any, months: list[str]) -> None:
    local, server = (c.load_table(store_sales) for c in catalogs)
    before = pruned_by_dependencies(proxy_url)
    expected = rows(local, row_filter)
    assert expected, "the filter matches some rows"
    assert rows(server, row_filter) == expected
    assert planned_months(local, row_filter) == sorted(MONTHS), "local planning prunes nothing"
    assert planned_months(server, row_filter) == months
    assert pruned_by_dependencies(proxy_url) > before


def test_the_plans_audit_evidence_counts_dependencies(
        catalogs: tuple[RestCatalog, RestCatalog], store_sales: str, proxy: RunningProxy) -> None:
    server = catalogs[1].load_table(store_sales)
    list(server.scan(row_filter=EqualTo("ss_sold_date_sk", "01-07-2020")).plan_files())
    plans = [e["plan"] for r in audit_records(proxy.audit_log)
             for e in r.get("evidence", []) if isinstance(e, dict) and "pruned" in
             e.get("plan", {})]
    assert plans and plans[-1]["pruned"]["dependencies"] == len(MONTHS) - 1


def test_a_write_breaking_the_dependency_is_refused(
        catalogs: tuple[RestCatalog, RestCatalog], store_sales: str) -> None:
    table = catalogs[0].load_table(store_sales)
    snapshots = [s.snapshot_id for s in table.snapshots()]
    before = rows(table, EqualTo("ss_sold_month", "09"))
    with pytest.raises(BadRequestError, match="break the column dependency"):
        table.append(sales("09", 900, wrong_month="10"))
    table = catalogs[0].load_table(store_sales)
    assert [s.snapshot_id for s in table.snapshots()] == snapshots
    assert rows(table, EqualTo("ss_sold_month", "09")) == before
    assert planned_months(table, EqualTo("ss_sold_month", "10")) == []


def test_an_invalid_dependency_is_refused(catalogs: tuple[RestCatalog, RestCatalog],
                                          store_sales: str) -> None:
    local = catalogs[0]
    namespace = store_sales.split(".")[0]
    with pytest.raises(BadRequestError, match="truncate\\[2\\] of ss_quantity"):
        local.create_table(f"{namespace}.bad", SCHEMA, properties={
            "icegov.column-dependencies": "ss_quantity=ss_sold_month:truncate[2]"})
    table = local.load_table(store_sales)
    with pytest.raises(BadRequestError, match="no top-level column 'ss_sold_year'"), \
            table.transaction() as change:
        change.set_properties({"icegov.column-dependencies": "ss_sold_date_sk=ss_sold_year:"
                                                             "truncate[4]"})
    assert local.load_table(store_sales).properties["icegov.column-dependencies"] == SEED


def test_a_clients_own_stamp_never_lands(catalogs: tuple[RestCatalog, RestCatalog],
                                         store_sales: str) -> None:
    local = catalogs[0]
    namespace = store_sales.split(".")[0]
    plain = local.create_table(f"{namespace}.plain", SCHEMA, partition_spec=BY_MONTH)
    plain.append(sales("09", 0), snapshot_properties={"icegov.dependencies-verified": "forged"})
    summary = local.load_table(f"{namespace}.plain").current_snapshot().summary  # type: ignore[union-attr]
    assert summary is not None and summary.get("icegov.dependencies-verified") is None
    assert summary.get("added-records") == "12"
