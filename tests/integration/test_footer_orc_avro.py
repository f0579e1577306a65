"""Spark's ORC and Avro tables through icegov's footer checks.

icegov reads Parquet footers; an ORC or Avro data file may declare value counts but no bounds
(nothing proves them). Spark's merge-on-read DELETE on an ORC table writes ORC position delete
files whose entries declare ``file_path`` bounds (as every Java position delete does): icegov
reads those files' two columns and proves the bounds by their values
(``proxy/commits/orc_deletes.py``), so the DELETE lands.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.conftest import RunningProxy
from tests.support.settings import ADMIN
from tests.support.spark import add_rest_catalog


def spark_delete(spark: Any, backend: str, proxy: RunningProxy, fmt: str, mode: str) -> int:
    catalog = f"fmt_{backend}"
    add_rest_catalog(spark, catalog, proxy.url, credential=ADMIN)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.demo")
    name = f"demo.t{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {catalog}.{name} (id BIGINT, s STRING) USING iceberg "
              f"TBLPROPERTIES ('write.format.default'='{fmt}', 'format-version'='2', "
              f"'write.delete.mode'='{mode}', 'write.delete.format.default'='{fmt}')")
    spark.sql(f"INSERT INTO {catalog}.{name} VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    spark.sql(f"DELETE FROM {catalog}.{name} WHERE id = 2").collect()
    return int(spark.sql(f"SELECT count(*) FROM {catalog}.{name}").collect()[0][0])


@pytest.mark.spark
@pytest.mark.parametrize("fmt", ["orc", "avro"])
def test_spark_copy_on_write_delete_on_orc_and_avro_lands(spark: Any, backend: str,
                                                          proxy: RunningProxy, fmt: str) -> None:
    assert spark_delete(spark, backend, proxy, fmt, "copy-on-write") == 2


@pytest.mark.spark
def test_spark_merge_on_read_delete_on_avro_lands(spark: Any, backend: str,
                                                  proxy: RunningProxy) -> None:
    assert spark_delete(spark, backend, proxy, "avro", "merge-on-read") == 2


@pytest.mark.spark
def test_spark_merge_on_read_delete_on_orc_lands(spark: Any, backend: str,
                                                 proxy: RunningProxy) -> None:
    assert spark_delete(spark, backend, proxy, "orc", "merge-on-read") == 2
