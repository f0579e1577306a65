"""Imported Parquet files with INT96 timestamps (what Spark and Hive wrote before Iceberg) pass
the footer checks: Iceberg reads an INT96 column as ``timestamptz``."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from pyiceberg.catalog.rest import RestCatalog

from tests.conftest import RunningProxy
from tests.support.read_tables import table_state
from tests.support.settings import ADMIN
from tests.support.spark import add_rest_catalog


def imported(spark: Any, proxy: RunningProxy, catalog: str, name: str) -> None:
    """``name`` created, and two rows written by Spark as INT96 Parquet under its location
    added with ``add_files``."""
    spark.sql(f"CREATE TABLE {catalog}.{name} (id BIGINT, ts TIMESTAMP) USING iceberg")
    location = RestCatalog("admin", uri=proxy.url, credential=ADMIN).load_table(name).location()
    folder = f"{location}/data/imported-{uuid.uuid4().hex[:6]}"
    spark.conf.set("spark.sql.parquet.outputTimestampType", "INT96")
    try:
        spark.sql("SELECT 1L AS id, TIMESTAMP '2024-01-02 03:04:05' AS ts UNION ALL "
                  "SELECT 2L, TIMESTAMP '2024-02-03 04:05:06'").coalesce(1) \
            .write.parquet(folder)
    finally:
        spark.conf.unset("spark.sql.parquet.outputTimestampType")
    spark.sql(f"CALL {catalog}.system.add_files(table => '{name}', "
              f"source_table => '`parquet`.`{folder}`')").collect()


@pytest.mark.spark
def test_spark_add_files_of_int96_parquet_lands(spark: Any, backend: str,
                                                proxy: RunningProxy) -> None:
    catalog = f"int96_{backend}"
    add_rest_catalog(spark, catalog, proxy.url, credential=ADMIN)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.db")
    name = f"db.t{uuid.uuid4().hex[:8]}"
    imported(spark, proxy, catalog, name)
    assert [r[0] for r in spark.sql(f"SELECT id FROM {catalog}.{name} ORDER BY id").collect()] \
        == [1, 2]
    assert len(table_state(proxy.url, name)[0]) == 2


@pytest.mark.spark
def test_a_copy_on_write_delete_over_int96_files_is_a_delete(spark: Any, backend: str,
                                                             proxy: RunningProxy) -> None:
    """The row checks read the INT96 file the DELETE rewrites, as Iceberg reads it."""
    catalog, deleter = f"int96_{backend}", f"int96_deleter_{backend}"
    add_rest_catalog(spark, catalog, proxy.url, credential=ADMIN)
    add_rest_catalog(spark, deleter, proxy.url, credential="deleter:deleter-secret")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.demo")
    name = f"demo.t{uuid.uuid4().hex[:8]}"
    imported(spark, proxy, catalog, name)
    spark.sql(f"ALTER TABLE {catalog}.{name} SET TBLPROPERTIES "
              "('write.delete.mode'='copy-on-write')")
    spark.sql(f"DELETE FROM {deleter}.{name} WHERE id = 1").collect()
    assert [r[0] for r in spark.sql(f"SELECT id FROM {catalog}.{name}").collect()] == [2]
