"""Governed builds on PySpark: above ``ICEGOV__GOVERNED__SPARK_ABOVE_BYTES`` the governed copies
of a build run as a Spark job (here on the test session's own ``local`` Spark), icegov writes the
metadata, and the principal reads what an in-process build gives it: exactly the EU rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog.rest import RestCatalog

from tests.support.governed_reads import build_mixed_orders, eu, rows_of
from tests.support.read_tables import EU_ANALYST, ORDERS, served
from tests.support.settings import ADMIN

pytestmark = pytest.mark.spark


def _jobs(spark: Any) -> int:
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup())


@pytest.mark.parametrize("on_spark", [False, True], ids=["in-process", "pyspark"])
def test_a_governed_build_gives_the_same_rows_in_process_and_on_spark(
        spark: Any, tmp_path: Path, on_spark: bool) -> None:
    threshold = 0 if on_spark else 1 << 40
    with served("embedded", tmp_path, governed={"spark_above_bytes": threshold}) as proxy:
        admin = RestCatalog("admin", uri=proxy.url, credential=ADMIN)
        everything = rows_of(build_mixed_orders(admin).scan().to_arrow())
        before = _jobs(spark)
        table = RestCatalog("eu", uri=proxy.url, credential=EU_ANALYST).load_table(ORDERS)
        assert rows_of(table.scan().to_arrow()) == eu(everything)
        assert any("/_icegov_governed/" in t.file.file_path for t in table.scan().plan_files())
        assert (_jobs(spark) > before) == on_spark  # the copies ran as a Spark job, or not
