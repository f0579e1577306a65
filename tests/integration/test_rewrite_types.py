"""Spark's compaction of a table of every common type is a REWRITE for a REWRITE-only principal:
the row checks (rows, lineage on v3, row-group statistics of the files it adds) accept what
Java writes — NaN and -0.0, decimals, dates and timestamps with and without zone, unicode,
binary, booleans, structs with nulls, lists and maps."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pyiceberg.catalog.rest import RestCatalog

from tests.conftest import RunningProxy
from tests.integration.test_rewrite_rows import COMPACTOR, compacting_proxy, last_evidence
from tests.support.read_tables import table_state
from tests.support.settings import ADMIN
from tests.support.spark import add_rest_catalog

COLUMNS = ("i INT, l BIGINT, f FLOAT, d DOUBLE, m DECIMAL(10,2), w DECIMAL(38,10), dt DATE, "
           "ts TIMESTAMP, tn TIMESTAMP_NTZ, s STRING, b BINARY, o BOOLEAN, "
           "st STRUCT<a: INT, b: STRING>, ar ARRAY<INT>, mp MAP<STRING, INT>")
BATCHES = [
    "(1, 10L, float('NaN'), -0.0D, 1.50BD, 12345678901234567890.0123456789BD, DATE'2024-01-01', "
    "TIMESTAMP'2024-01-01 00:00:00', TIMESTAMP_NTZ'2024-01-01 00:00:00', 'é😀', X'00FF', true, "
    "named_struct('a', 1, 'b', null), array(1, null), map('k', 1))",
    "(null, -9223372036854775808L, 0.0F, double('NaN'), -0.01BD, 0BD, DATE'1970-01-01', "
    "TIMESTAMP'1969-12-31 23:59:59.999999', TIMESTAMP_NTZ'2100-01-01 00:00:00', "
    "'\\uFFFF\\uFFFF', X'', false, null, null, null)",
    "(2147483647, null, float('-Infinity'), double('Infinity'), null, null, null, null, null, "
    "'" + "z" * 40 + "', null, null, named_struct('a', null, 'b', 'x'), array(), map())",
]


@pytest.fixture(scope="module", params=["2", "3"])
def version(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def compacting(backend: str, tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[RunningProxy]:
    with compacting_proxy(backend, tmp_path_factory.mktemp(f"types-{backend}")) as running:
        RestCatalog("admin", uri=running.url, credential=ADMIN) \
            .create_namespace_if_not_exists("demo")
        yield running


@pytest.mark.spark
def test_spark_compaction_of_every_type_is_a_rewrite(spark: Any, backend: str, version: str,
                                                     compacting: RunningProxy) -> None:
    if backend == "embedded" and version == "3":
        pytest.skip("the embedded catalog cannot write format 3 yet")
    admin, compactor = f"ty_admin_{backend}", f"ty_compactor_{backend}"
    add_rest_catalog(spark, admin, compacting.url, credential=ADMIN)
    add_rest_catalog(spark, compactor, compacting.url, credential=COMPACTOR)
    name = f"demo.y{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {admin}.{name} ({COLUMNS}) USING iceberg "
              f"TBLPROPERTIES ('format-version'='{version}')")
    for batch in BATCHES:
        spark.sql(f"INSERT INTO {admin}.{name} VALUES {batch}")
    before = table_state(compacting.url, name)[0]
    spark.sql(f"CALL {compactor}.system.rewrite_data_files(table => '{name}', "
              "options => map('min-input-files', '2'))").collect()
    rewritten = last_evidence(compacting, name)
    assert rewritten["classification"] == "REWRITE", rewritten
    assert repr(table_state(compacting.url, name)[0]) == repr(before)  # NaN != NaN
