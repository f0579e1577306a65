"""Index backfills on real PySpark (``proxy.indexes.spark_build``): the same filters as built in
icegov's own threads, written where a restart finds them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from proxy.commits.index_property import BLOOM_FILTER_COLUMNS
from proxy.indexes.service import IndexService
from proxy.indexes.settings import IndexSettings
from proxy.indexes.status import index_status
from proxy.planning.manifest_cache import ManifestCache

pytestmark = pytest.mark.spark


def _table(tmp_path: Path) -> Any:
    tmp_path.mkdir(parents=True)
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=tmp_path.as_uri())
    catalog.create_namespace("ns")
    schema = Schema(NestedField(1, "user_id", LongType()), NestedField(2, "email", StringType()))
    table = catalog.create_table("ns.t", schema,
                                 properties={BLOOM_FILTER_COLUMNS: "user_id,email"})
    for f in range(4):
        ids = list(range(f, 400, 4))
        table.append(pa.table({"user_id": pa.array(ids, pa.int64()),
                               "email": [f"u{i}@x" for i in ids]}))
    return catalog.load_table("ns.t")


def _filters(service: IndexService, metadata: Any) -> dict[Any, bytes]:
    table = service._tables[str(metadata.table_uuid)]
    return {key: bloom.to_bytes() for key, (_, bloom) in table.filters.items()}


def test_a_backfill_on_spark_builds_the_filters_icegov_builds(spark: Any, tmp_path: Path) -> None:
    here = _table(tmp_path / "local")
    local = IndexService(IndexSettings(), ManifestCache(10_000), {})
    local.want(here.metadata, here.io)
    assert local.wait_idle(120) and local.stats.built == 8

    there = _table(tmp_path / "spark")
    on_spark = IndexService(IndexSettings(spark_above_bytes=0), ManifestCache(10_000), {})
    on_spark.want(there.metadata, there.io)
    assert on_spark.wait_idle(600) and on_spark.stats.built == 8, on_spark.stats
    assert [s.indexed for s in index_status(there.metadata, there.io)] == [4, 4]
    assert sorted(_filters(on_spark, there.metadata).values()) == sorted(
        _filters(local, here.metadata).values())
