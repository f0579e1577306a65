"""Tables written by real Spark (copy-on-write and merge-on-read row-level deletes and updates)
planned by icegov for pyiceberg 0.12: the same rows and files as Spark reads and as pyiceberg's
local planning (issue 8 §4)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.expressions import EqualTo

from tests.support.settings import ADMIN

pytestmark = pytest.mark.spark


def _rows(arrow: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in arrow.to_pylist())


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_spark_row_level_changes_plan_like_local_planning(spark: Any, cat: str, proxy_url: str,
                                                          mode: str) -> None:
    name = f"plan_{mode.replace('-', '_')}_{int(time.time() * 1000) % 100000}"
    table = f"{cat}.db.{name}"
    spark.sql(f"""
        CREATE TABLE {table} (id BIGINT, region STRING, amount INT) USING iceberg
        PARTITIONED BY (region)
        TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='{mode}',
                       'write.update.mode'='{mode}', 'write.merge.mode'='{mode}')""")
    spark.sql(f"INSERT INTO {table} VALUES (1, 'eu', 10), (2, 'eu', 20), (3, 'us', 30), "
              "(4, 'us', 40), (5, 'ap', 50)")
    spark.sql(f"INSERT INTO {table} VALUES (6, 'eu', 60), (7, 'us', 70)")
    spark.sql(f"DELETE FROM {table} WHERE id IN (2, 7)")
    spark.sql(f"UPDATE {table} SET amount = amount + 1 WHERE region = 'us'")
    expected = sorted(tuple(r) for r in spark.sql(f"SELECT * FROM {table}").collect())

    local = RestCatalog("local", uri=proxy_url, credential=ADMIN)
    server = RestCatalog("server", uri=proxy_url, credential=ADMIN,
                         **{"scan-planning-mode": "server"})
    identifier = f"db.{name}"
    for row_filter in (None, EqualTo("region", "us")):
        scan: dict[str, Any] = {} if row_filter is None else {"row_filter": row_filter}
        local_scan = local.load_table(identifier).scan(**scan)
        server_scan = server.load_table(identifier).scan(**scan)
        assert _rows(server_scan.to_arrow()) == _rows(local_scan.to_arrow())
        planned = {t.file.file_path: sorted(d.file_path for d in t.delete_files)
                   for t in server_scan.plan_files()}
        assert planned == {t.file.file_path: sorted(d.file_path for d in t.delete_files)
                           for t in local_scan.plan_files()}
        if mode == "merge-on-read":
            assert any(planned.values())  # Spark's position deletes are really in the plan
    assert _rows(server.load_table(identifier).scan().to_arrow()) == expected
    spark.sql(f"DROP TABLE {table}")
