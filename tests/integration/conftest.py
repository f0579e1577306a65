"""Fixtures for the real-Spark suite: one SparkSession for the whole test session."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.settings import ADMIN
from tests.support.spark import add_rest_catalog, start_spark


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    session = start_spark()
    yield session
    session.stop()


@pytest.fixture(scope="session")
def cat(spark: Any, backend: str, proxy_url: str) -> str:
    """A Spark catalog named after the backend, pointed at the proxy; namespace ``db`` exists."""
    add_rest_catalog(spark, backend, proxy_url, credential=ADMIN)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {backend}.db")
    return backend
