"""One real PySpark 3.5 session with the Iceberg 1.10.2 runtime, catalogs added per proxy."""

from __future__ import annotations

import os
import sys
from typing import Any

from tests.support.jars import iceberg_runtime_jar

EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"


def start_spark() -> Any:
    """A local SparkSession that knows Iceberg; catalogs are added with ``add_rest_catalog``."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    return (
        SparkSession.builder.master("local[2]")
        .appName("icegov-tests")
        .config("spark.jars", str(iceberg_runtime_jar()))
        .config("spark.sql.extensions", EXTENSIONS)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )


def add_rest_catalog(spark: Any, name: str, uri: str, **options: str) -> None:
    """Register (or re-point) Spark catalog ``name`` at an Iceberg REST ``uri``.

    Table caching is off: several catalogs (one per principal) see the same tables, and every
    read must show the catalog's current state, not a copy cached by an earlier statement.
    """
    prefix = f"spark.sql.catalog.{name}"
    spark.conf.set(prefix, "org.apache.iceberg.spark.SparkCatalog")
    spark.conf.set(f"{prefix}.type", "rest")
    spark.conf.set(f"{prefix}.uri", uri)
    spark.conf.set(f"{prefix}.cache-enabled", "false")
    for key, value in options.items():
        spark.conf.set(f"{prefix}.{key}", value)
