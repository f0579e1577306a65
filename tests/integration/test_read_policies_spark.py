"""Column policies against real Spark 3.5 with Iceberg 1.10.2 (issue 8 §4).

Spark 1.10 plans its scans itself from what loadTable says, so the projected schema is all that
stands between ``analyst`` and ``demo.customers.ssn``: the denied column (and the masked
``email``, which Spark cannot mask) does not exist for it. ``analyst-writer`` (test-local: the
same column rules plus write rights) rewrites data files in a copy-on-write UPDATE, which would
drop the values it cannot see: refused, the table unchanged; its INSERT lands with the hidden
columns null. Both backing catalogs; one table, a few statements (Spark is slow).
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

    for column in ("ssn", "email"):
        with pytest.raises(AnalysisException, match=column):
            spark.sql(f"SELECT {column} FROM {cats['analyst']}.{CUSTOMERS}").collect()


def test_analyst_select_star_reads_the_permitted_columns(spark: Any,
                                                          cats: dict[str, str]) -> None:
    frame = spark.sql(f"SELECT * FROM {cats['analyst']}.{CUSTOMERS}")
    assert frame.columns == list(ANALYST_COLUMNS)
    assert sorted(tuple(r) for r in frame.collect()) == customer_rows(ANALYST_COLUMNS)


def test_a_copy_on_write_update_is_refused_and_an_insert_lands(
        spark: Any, cats: dict[str, str], policies: Served) -> None:
    writer = f"{cats['analyst-writer']}.{CUSTOMERS}"
    before = table_state(policies.url, CUSTOMERS)
    with pytest.raises(Exception, match="Forbidden") as refused:
        spark.sql(f"UPDATE {writer} SET name = 'changed' WHERE id = 1").collect()
    assert "would drop values" in str(refused.value)
    assert table_state(policies.url, CUSTOMERS) == before

    spark.sql(f"INSERT INTO {writer} VALUES (5, 'eve', 'us')").collect()
    rows, _, _ = table_state(policies.url, CUSTOMERS)
    assert rows == sorted([*customer_rows(), (5, "eve", None, None, "us")], key=repr)
