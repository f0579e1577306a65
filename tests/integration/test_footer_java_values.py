"""Spark INSERTs of values Java writes its own way pass the footer checks.

* A float or double column holding NaN beside numbers: parquet-mr writes no min/max for the row
  group, Iceberg declares bounds from its writer; icegov refused the file (400, for every
  principal) as "bounds the footer's statistics cannot prove". It now reads that column's
  values to prove them.
* A ``decimal(38, s)`` value of more than 28 digits: icegov's comparison rounded the declared
  bound to 28 digits (``Decimal.scaleb``) and refused the file as a bound above the footer's
  least value.

A lie stays refused: bounds that do not enclose the values (see ``test_added_files``).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.conftest import RunningProxy
from tests.support.settings import ADMIN
from tests.support.spark import add_rest_catalog

VALUES = {
    "floats with NaN": ("f FLOAT, d DOUBLE",
                        "(float('NaN'), double('NaN')), (1.5F, -2.5D), (float('-Infinity'), 0.0D)"),
    "nested floats with NaN": ("s STRUCT<x: DOUBLE>",
                               "(named_struct('x', double('NaN'))), (named_struct('x', 3.0D))"),
    "wide decimals": ("w DECIMAL(38,10)",
                      "(12345678901234567890.0123456789BD), (99999999999999999999.9999999999BD)"),
}


@pytest.mark.spark
@pytest.mark.parametrize("case", sorted(VALUES))
def test_spark_insert_lands(spark: Any, backend: str, proxy: RunningProxy, case: str) -> None:
    catalog = f"values_{backend}"
    add_rest_catalog(spark, catalog, proxy.url, credential=ADMIN)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.db")
    columns, rows = VALUES[case]
    name = f"db.v{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {catalog}.{name} ({columns}) USING iceberg")
    spark.sql(f"INSERT INTO {catalog}.{name} SELECT /*+ REPARTITION(1) */ * FROM VALUES {rows}")
    assert spark.sql(f"SELECT count(*) FROM {catalog}.{name}").collect()[0][0] \
        == rows.count("), (") + 1
