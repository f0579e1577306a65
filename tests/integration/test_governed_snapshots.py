"""Governed snapshots with real clients (issue 21): Spark 3.5 (Iceberg 1.10.2) and PyIceberg in
both planning modes read exactly what the row filter and the masks let through, on both backing
catalogs.

``demo.orders`` is *not* partitioned by region and every data file mixes EU, US and AP rows, so
``eu-analyst`` can only read EU rows if icegov serves it governed copies. Admin then deletes and
updates rows (Spark), ``eu-analyst`` inserts EU and US rows (Spark) and appends (PyIceberg), and
``eu-writer`` (the same filter, write rights) tries a DELETE and an UPDATE: refused, nothing
landed. Every read is compared with what admin reads of the base table. Finally ``demo.orders``
is rebuilt partitioned by region: every EU file is proven, so no governed data file is written.

Spark DML costs 16-30 s here: five statements for the whole module, all reads cheap.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from pyiceberg.catalog.rest import RestCatalog

from tests.support.governed_reads import (
    MIXED_APPENDS,
    build_mixed_orders,
    eu,
    file_regions,
    governed_tree,
    listed_data_files,
    local_path,
    orders_arrow,
    paths_in,
    rows_of,
    same_file,
)
from tests.support.http import as_principal, audit_records
from tests.support.plan_tables import Row, ordered
from tests.support.read_tables import (
    ANALYST,
    CUSTOMERS,
    EU_ANALYST,
    EU_WRITER,
    ORDERS,
    Served,
    build_customers,
    build_orders,
    customer_rows,
    order_row,
    served,
    table_state,
)
from tests.support.settings import ADMIN
from tests.support.spark import add_rest_catalog

pytestmark = pytest.mark.spark

ORDERS_PATH = "/v1/namespaces/demo/tables/orders"
MASKED_EMAILS = ["xxx@xxxxxxx.org", "xxx@xxxxxxx.org", "xxx@xxxxxxx.org", "xxx@xxxxxxx.org"]
"""``show-last-4`` of every customer's ``<3 letters>@example.org``: the last 4 code points
kept, letters before them ``x``, ``@`` kept."""


@dataclass
class Orders:
    """The proxy, one Spark catalog per principal, and what happened to ``demo.orders``."""

    served: Served
    cats: dict[str, str]
    first_snapshot: int = 0
    first_rows: list[Row] = field(default_factory=list)

    def admin_rows(self) -> list[Row]:
        return table_state(self.served.url, ORDERS)[0]

    def spark_rows(self, spark: Any, who: str, suffix: str = "") -> list[Row]:
        frame = spark.sql(f"SELECT order_id, region, amount FROM {self.cats[who]}.{ORDERS}"
                          f"{suffix}")
        return ordered(tuple(r) for r in frame.collect())

    def catalog(self, credential: str, **properties: str) -> RestCatalog:
        return RestCatalog(credential.split(":")[0], uri=self.served.url, credential=credential,
                           **properties)


@pytest.fixture(scope="module")
def orders(spark: Any, backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Orders]:
    """A proxy with the test-local policy, mixed ``demo.orders`` and ``demo.customers``, and a
    Spark catalog per principal."""
    with served(backend, tmp_path_factory.mktemp(f"governed-{backend}")) as running:
        admin = RestCatalog("admin", uri=running.url, credential=ADMIN)
        table = build_mixed_orders(admin)
        build_customers(admin)
        cats = {}
        for credential in (ADMIN, EU_ANALYST, ANALYST, EU_WRITER):
            who = credential.split(":")[0]
            cats[who] = f"gov_{backend}_{who.replace('-', '_')}"
            add_rest_catalog(spark, cats[who], running.url, credential=credential)
        first = table.snapshots()[0]
        yield Orders(running, cats, first.snapshot_id,
                     [order_row(i) for i in MIXED_APPENDS[0]])


def read_all_ways(orders: Orders, spark: Any) -> None:
    """Spark, PyIceberg planning locally and PyIceberg planning on the server, as eu-analyst,
    read exactly the EU rows of what admin reads."""
    expected = eu(orders.admin_rows())
    assert expected, "the table holds EU rows"
    assert orders.spark_rows(spark, "eu-analyst") == expected
    local = orders.catalog(EU_ANALYST).load_table(ORDERS)
    assert rows_of(local.scan().to_arrow()) == expected
    remote = orders.catalog(EU_ANALYST, **{"scan-planning-mode": "server"}).load_table(ORDERS)
    assert rows_of(remote.scan().to_arrow()) == expected


def test_every_client_reads_exactly_the_eu_rows_of_mixed_files(orders: Orders,
                                                               spark: Any) -> None:
    admin = orders.catalog(ADMIN).load_table(ORDERS)
    assert all(len(file_regions(task.file.file_path)) == 3
               for task in admin.scan().plan_files()), "every base file mixes regions"
    assert orders.admin_rows() == ordered(order_row(i) for ids in MIXED_APPENDS for i in ids)
    read_all_ways(orders, spark)


def test_after_a_delete_and_an_update_every_client_reads_the_new_eu_rows(
        orders: Orders, spark: Any) -> None:
    admin = f"{orders.cats['admin']}.{ORDERS}"
    spark.sql(f"DELETE FROM {admin} WHERE order_id IN (3, 4)").collect()  # one EU, one US row
    spark.sql(f"UPDATE {admin} SET amount = amount + 1000 "
              f"WHERE order_id IN (6, 9, 11)").collect()  # EU 6, 9 (AP is 11 % 3 == 2)
    rows = orders.admin_rows()
    assert (6, "eu", 1060) in rows and (4, "us", 40) not in rows and (3, "eu", 30) not in rows
    read_all_ways(orders, spark)


def test_an_older_snapshot_reads_its_own_eu_rows(orders: Orders, spark: Any) -> None:
    expected = eu(orders.first_rows)
    version = f" VERSION AS OF {orders.first_snapshot}"
    assert orders.spark_rows(spark, "eu-analyst", version) == expected
    local = orders.catalog(EU_ANALYST).load_table(ORDERS)
    assert rows_of(local.scan(snapshot_id=orders.first_snapshot).to_arrow()) == expected


def test_the_files_table_lists_no_file_holding_a_us_row(orders: Orders, spark: Any) -> None:
    listed = [r[0] for r in spark.sql(
        f"SELECT file_path FROM {orders.cats['eu-analyst']}.{ORDERS}.files").collect()]
    assert listed
    for path in listed:
        assert file_regions(path) == {"eu"}, path


def test_analyst_reads_email_masked_and_ssn_does_not_exist(orders: Orders, spark: Any) -> None:
    from pyspark.errors import AnalysisException

    customers = f"{orders.cats['analyst']}.{CUSTOMERS}"
    emails = spark.sql(f"SELECT email FROM {customers} ORDER BY id").collect()
    assert [r[0] for r in emails] == MASKED_EMAILS
    with pytest.raises(AnalysisException, match="ssn"):
        spark.sql(f"SELECT ssn FROM {customers}").collect()
    table = orders.catalog(ANALYST).load_table(CUSTOMERS)
    assert "ssn" not in [f.name for f in table.schema().fields]
    read = table.scan().to_arrow()
    assert sorted(zip(read.column("id").to_pylist(), read.column("email").to_pylist(),
                      strict=True)) == list(zip(range(1, 5), MASKED_EMAILS, strict=True))
    assert rows_of(read.select(["id", "name", "region"])) == customer_rows(("id", "name",
                                                                           "region"))


def test_an_insert_by_eu_analyst_lands_and_its_us_row_is_then_invisible_to_it(
        orders: Orders, spark: Any) -> None:
    before = orders.admin_rows()
    spark.sql(f"INSERT INTO {orders.cats['eu-analyst']}.{ORDERS} "
              f"VALUES (100, 'eu', 1000), (101, 'us', 1010)").collect()
    after = orders.admin_rows()
    assert after == ordered([*before, (100, "eu", 1000), (101, "us", 1010)])
    read_all_ways(orders, spark)


def test_a_delete_or_update_by_a_filtered_writer_is_refused_with_nothing_landed(
        orders: Orders, spark: Any) -> None:
    writer = f"{orders.cats['eu-writer']}.{ORDERS}"
    before = table_state(orders.served.url, ORDERS)
    for statement in (f"DELETE FROM {writer} WHERE order_id = 1",
                      f"UPDATE {writer} SET amount = 0 WHERE order_id = 7"):
        with pytest.raises(Exception, match="Forbidden"):
            spark.sql(statement).collect()
        assert table_state(orders.served.url, ORDERS) == before


def _answers(client: httpx.Client, response: httpx.Response) -> list[Any]:
    """A plan answer and every plan task's answer it leads to."""
    assert response.status_code == 200, response.text
    answer = response.json()
    found: list[Any] = [answer]
    for task in answer.get("plan-tasks") or ():
        tasks = client.post(f"{ORDERS_PATH}/tasks", json={"plan-task": task})
        assert tasks.status_code == 200, tasks.text
        found.append(tasks.json())
    return found


def test_no_answer_to_eu_analyst_names_a_base_file_it_is_not_served(
        orders: Orders, spark: Any) -> None:
    said: list[Any] = []
    with as_principal(orders.served.url, EU_ANALYST) as client:
        loaded = client.get(ORDERS_PATH, params={"snapshots": "all"})
        assert loaded.status_code == 200, loaded.text
        said.append(loaded.json())
        said += _answers(client, client.post(f"{ORDERS_PATH}/plan", json={}))
        said += _answers(client, client.post(f"{ORDERS_PATH}/plan", json={
            "snapshot-id": orders.first_snapshot}))
        missing = client.post(f"{ORDERS_PATH}/plan", json={"snapshot-id": 1234567})
        assert missing.status_code in (400, 404), missing.text
        said.append(missing.json())
    sent: list[Any] = []

    def keep(response: Any) -> None:
        said.append(response.text)
        body = response.request.body
        sent.append(body.decode() if isinstance(body, bytes) else body or "")

    catalog = orders.catalog(EU_ANALYST)
    catalog._session.hooks["response"].append(lambda r, *a, **k: keep(r))
    catalog.load_table(ORDERS).append(orders_arrow([(102, "eu", 1020)]))
    assert (102, "eu", 1020) in orders.admin_rows()
    said += [r for r in audit_records(orders.served.proxy.audit_log)
             if r.get("principal") == "eu-analyst"]

    served = orders.catalog(EU_ANALYST).load_table(ORDERS)
    tree = governed_tree(loaded.json())
    listed = listed_data_files(served)
    own = paths_in(sent)
    found = paths_in(said)
    assert any(p.startswith(f"{tree.prefix}/data/") for p in found), "governed copies named"
    for path in found:
        if path.startswith(tree.root + "/") or any(same_file(path, o) for o in own):
            continue
        assert path.endswith(".parquet") and any(same_file(path, f) for f in listed), path


def test_admin_and_unrestricted_principals_get_the_backing_answer(orders: Orders) -> None:
    writer = "writer:writer-secret"
    answers = {}
    for credential in (ADMIN, writer):
        with as_principal(orders.served.url, credential) as client:
            answers[credential] = client.get(ORDERS_PATH)
            assert answers[credential].status_code == 200
    loaded = answers[ADMIN].json()
    assert "_icegov_governed" not in json.dumps(loaded)
    assert answers[writer].json() == loaded
    if orders.served.backing_uri is None:  # embedded: the answer is the metadata file's
        written = json.loads(local_path(loaded["metadata-location"]).read_text())
        assert written == loaded["metadata"]
        return
    backing = httpx.get(f"{orders.served.backing_uri}{ORDERS_PATH}")
    assert backing.status_code == 200
    assert answers[ADMIN].content == backing.content
    assert answers[writer].content == backing.content


def test_a_table_partitioned_by_region_gets_no_governed_data_file(orders: Orders,
                                                                  spark: Any) -> None:
    admin = orders.catalog(ADMIN)
    build_orders(admin)
    read_all_ways(orders, spark)
    with as_principal(orders.served.url, EU_ANALYST) as client:
        loaded = client.get(ORDERS_PATH)
        assert loaded.status_code == 200, loaded.text
    tree = governed_tree(loaded.json())
    assert tree.table_uuid == admin.load_table(ORDERS).metadata.table_uuid.hex \
        or tree.table_uuid == str(admin.load_table(ORDERS).metadata.table_uuid)
    workdir = orders.served.proxy.workdir
    expected_root = workdir / "warehouse" / "_icegov_governed" \
        if orders.served.backing_uri is None else workdir / "_icegov_governed"
    assert local_path(tree.root).resolve() == expected_root.resolve()
    data = tree.data_dir()
    assert not data.exists() or not any(data.iterdir()), sorted(data.iterdir())
    assert data.parent.exists(), "the governed tree (manifests, metadata) was written"
