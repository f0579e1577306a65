"""Column policies against real Spark 3.5 with Iceberg 1.10.2 (issue 8 §4).

Spark 1.10 plans its scans itself from what loadTable says, so ``analyst`` is served governed
snapshots of ``demo.customers``: the denied ``ssn`` does not exist for it, ``email`` reads
masked (show-last-4) from governed files. ``analyst-writer`` (test-local: the same column rules
plus write rights) would rewrite governed files in a copy-on-write UPDATE: refused, the table
unchanged; its INSERT lands on the real table with ``ssn`` null. Both backing catalogs; one
table, a few statements (Spark is slow).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.read_tables import (
    ANALYST,
    ANALYST_COLUMNS,
    ANALYST_WRITER,
    CUSTOMERS,
    Served,
    build_customers,
    customer_rows,
    served,
    table_state,
)
from tests.support.settings import ADMIN
from tests.support.spark import add_rest_catalog

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def policies(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A proxy with the test-local policy and a fresh ``demo.customers``."""
    with served(backend, tmp_path_factory.mktemp(f"spark-reads-{backend}")) as running:
        from pyiceberg.catalog.rest import RestCatalog

        build_customers(RestCatalog("admin", uri=running.url, credential=ADMIN))
        yield running


@pytest.fixture(scope="module")
def cats(spark: Any, backend: str, policies: Served) -> dict[str, str]:
    """A Spark catalog per principal, named after the backend and the principal."""
    names = {}
    for credential in (ANALYST, ANALYST_WRITER):
        who = credential.split(":")[0]
        names[who] = f"rp_{backend}_{who.replace('-', '_')}"
        add_rest_catalog(spark, names[who], policies.url, credential=credential)
    return names


def test_analyst_cannot_name_the_hidden_columns(spark: Any, cats: dict[str, str]) -> None:
    from pyspark.errors import AnalysisException

    for column in ("ssn",):
        with pytest.raises(AnalysisException, match=column):
            spark.sql(f"SELECT {column} FROM {cats['analyst']}.{CUSTOMERS}").collect()


def test_analyst_select_star_reads_the_permitted_columns(spark: Any,
                                                          cats: dict[str, str]) -> None:
    frame = spark.sql(f"SELECT * FROM {cats['analyst']}.{CUSTOMERS}")
    assert frame.columns == list(ANALYST_COLUMNS)
    masked = [(i, n, "xxx@xxxxxxx.org", r) for i, n, _, r in customer_rows(ANALYST_COLUMNS)]
    assert sorted(tuple(r) for r in frame.collect()) == sorted(masked)


def test_a_copy_on_write_update_is_refused_and_an_insert_lands(
        spark: Any, cats: dict[str, str], policies: Served) -> None:
    writer = f"{cats['analyst-writer']}.{CUSTOMERS}"
    before = table_state(policies.url, CUSTOMERS)
    with pytest.raises(Exception, match="Forbidden") as refused:
        spark.sql(f"UPDATE {writer} SET name = 'changed' WHERE id = 1").collect()
    assert "may only add rows" in str(refused.value)
    assert table_state(policies.url, CUSTOMERS) == before

    spark.sql(f"INSERT INTO {writer} VALUES (5, 'eve', 'e@x.org', 'us')").collect()
    rows, _, _ = table_state(policies.url, CUSTOMERS)
    assert rows == sorted([*customer_rows(), (5, "eve", "e@x.org", None, "us")], key=repr)
