"""Governed snapshots read by DuckDB 1.5.5's Iceberg extension (issue 21): ``eu-analyst`` reads
exactly the EU rows of a table whose every file mixes regions, also after admin deletes and
rewrites rows and at an older snapshot; ``analyst`` reads ``demo.customers.email`` masked
(``show-last-4``) and has no ``ssn``.

DuckDB attaches with the same statements for every principal (``test_duckdb_iceberg.attached``)
and plans locally from loadTable, so only governed metadata stands between it and the US rows.
Three backings: the embedded and the reference catalog on a local warehouse (DuckDB reads
``file:`` paths), and the embedded catalog on an S3 warehouse (moto) that vends credentials as
Lakekeeper does, the shape of a real deployment (governed data then lies in the bucket too).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import httpx
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.expressions import In

from proxy.app import EMBEDDED_BASE_URL, Backing, create_app
from proxy.catalog import EmbeddedCatalog
from tests.integration.test_duckdb_iceberg import attached, extensions, store  # noqa: F401 (fixtures)
from tests.support.governed_reads import (
    MIXED_APPENDS,
    build_mixed_orders,
    eu,
    orders_arrow,
)
from tests.support.plan_tables import Row, ordered
from tests.support.read_tables import (
    ANALYST,
    CUSTOMERS,
    EU_ANALYST,
    ORDERS,
    build_customers,
    customer_rows,
    local_policies,
    order_row,
    served,
    table_state,
)
from tests.support.s3 import S3Store, embedded_on_s3
from tests.support.servers import serve
from tests.support.settings import ADMIN, settings_for_tests
from tests.support.vending import VendingTransport

BACKINGS = ("embedded", "reference", "embedded-s3")
MASKED_EMAILS = [(1, "xxx@xxxxxxx.org"), (2, "xxx@xxxxxxx.org"), (3, "xxx@xxxxxxx.org"),
                 (4, "xxx@xxxxxxx.org")]
"""``show-last-4`` of every customer's ``<3 letters>@example.org``."""


@dataclass(frozen=True)
class Governed:
    """A proxy with the test-local policy, its admin catalog, and the first orders snapshot."""

    url: str
    admin: RestCatalog
    first_snapshot: int
    extensions: Path


@contextlib.contextmanager
def on_s3(workdir: Path, s3: S3Store) -> Iterator[tuple[str, dict[str, str]]]:
    """icegov (test-local policy) on its embedded catalog on ``s3``, vending credentials."""
    settings = settings_for_tests(workdir, **embedded_on_s3(s3, workdir),
                                  **local_policies(workdir))
    catalog = EmbeddedCatalog.from_settings(settings)
    transport = VendingTransport(httpx.ASGITransport(app=catalog.app), s3)
    backing = Backing(transport, EMBEDDED_BASE_URL, [transport.aclose, catalog.aclose])
    with serve(create_app(settings, backing)) as url:
        yield url, s3.properties


@pytest.fixture(scope="module", params=BACKINGS)
def governed(request: pytest.FixtureRequest,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Governed]:
    kind = str(request.param)
    workdir = tmp_path_factory.mktemp(f"governed-duckdb-{kind}")
    with contextlib.ExitStack() as stack:
        if kind == "embedded-s3":
            s3 = request.getfixturevalue("store")
            url, properties = stack.enter_context(on_s3(workdir, s3))
        else:
            url, properties = stack.enter_context(served(kind, workdir)).url, {}
        admin = RestCatalog("admin", uri=url, credential=ADMIN, **properties)
        table = build_mixed_orders(admin)
        build_customers(admin)
        yield Governed(url, admin, table.snapshots()[0].snapshot_id,
                       request.getfixturevalue("extensions"))


def duck_rows(governed: Governed, credential: str, query: str) -> list[Row]:
    with attached(governed.url, credential, governed.extensions) as connection:
        return ordered(tuple(r) for r in connection.sql(query).fetchall())


def eu_reads(governed: Governed, at: str = "") -> list[Row]:
    return duck_rows(governed, EU_ANALYST,
                     f"SELECT order_id, region, amount FROM cat.{ORDERS}{at}")


def test_eu_analyst_reads_exactly_the_eu_rows_of_mixed_files(governed: Governed) -> None:
    everything = ordered(order_row(i) for ids in MIXED_APPENDS for i in ids)
    assert duck_rows(governed, ADMIN, f"SELECT * FROM cat.{ORDERS}") == everything
    assert eu_reads(governed) == eu(everything)


def test_after_a_delete_and_a_rewrite_eu_analyst_reads_the_new_eu_rows(
        governed: Governed) -> None:
    table = governed.admin.load_table(ORDERS)
    table.delete(In("order_id", [3, 4]))  # one EU row, one US row
    table = governed.admin.load_table(ORDERS)
    table.overwrite(orders_arrow([(6, "eu", 1060), (9, "eu", 1090), (11, "ap", 1110)]),
                    overwrite_filter=In("order_id", [6, 9, 11]))
    rows = table_state(governed.url, ORDERS)[0]
    assert (6, "eu", 1060) in rows and (3, "eu", 30) not in rows and (4, "us", 40) not in rows
    assert eu_reads(governed) == eu(rows)


def test_an_older_snapshot_reads_its_own_eu_rows(governed: Governed) -> None:
    at = f" AT (VERSION => {governed.first_snapshot})"
    assert eu_reads(governed, at) == eu(order_row(i) for i in MIXED_APPENDS[0])


def test_analyst_reads_email_masked_and_ssn_does_not_exist(governed: Governed) -> None:
    with attached(governed.url, ANALYST, governed.extensions) as connection:
        columns = [r[0] for r in connection.sql(
            f"SELECT column_name FROM (DESCRIBE cat.{CUSTOMERS})").fetchall()]
        assert columns == ["id", "name", "email", "region"]
        with pytest.raises(duckdb.BinderException, match="ssn"):
            connection.sql(f"SELECT ssn FROM cat.{CUSTOMERS}").fetchall()
        assert connection.sql(f"SELECT id, email FROM cat.{CUSTOMERS} ORDER BY id").fetchall() \
            == MASKED_EMAILS
        assert ordered(tuple(r) for r in connection.sql(
            f"SELECT id, name, region FROM cat.{CUSTOMERS}").fetchall()) \
            == customer_rows(("id", "name", "region"))
