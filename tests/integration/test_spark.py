"""Real PySpark 3.5.9 + Iceberg 1.10.2 through the proxy, against both backing catalogs.

Every statement is followed by a check of the rows (or metadata) it should have produced.
"""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

import pytest

from tests.conftest import RunningProxy

pytestmark = pytest.mark.spark

_ids = itertools.count()


def rows(spark: Any, query: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in spark.sql(query).collect())


def new_table(spark: Any, cat: str, mode: str = "copy-on-write", partitioned: bool = True) -> str:
    """A fresh format-v2 table ``(id, region, amount)`` with the given row-level write mode."""
    name = f"{cat}.db.t{next(_ids)}_{int(time.time() * 1000) % 100000}"
    partitioning = "PARTITIONED BY (region)" if partitioned else ""
    spark.sql(f"""
        CREATE TABLE {name} (id BIGINT, region STRING, amount INT) USING iceberg {partitioning}
        TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='{mode}',
                       'write.update.mode'='{mode}', 'write.merge.mode'='{mode}')""")
    return name


def operations(spark: Any, table: str) -> list[str]:
    return [r[0] for r in spark.sql(
        f"SELECT operation FROM {table}.snapshots ORDER BY committed_at").collect()]


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_row_level_dml_cycle(spark: Any, cat: str, mode: str) -> None:
    t = new_table(spark, cat, mode)
    assert rows(spark, f"SELECT * FROM {t}") == []

    spark.sql(f"INSERT INTO {t} VALUES (1, 'eu', 10), (2, 'eu', 20), (3, 'us', 30), (4, 'us', 40)")
    assert rows(spark, f"SELECT * FROM {t}") == [
        (1, "eu", 10), (2, "eu", 20), (3, "us", 30), (4, "us", 40)]

    spark.sql(f"DELETE FROM {t} WHERE id = 2")
    assert rows(spark, f"SELECT id FROM {t}") == [(1,), (3,), (4,)]

    spark.sql(f"UPDATE {t} SET amount = amount + 1 WHERE region = 'us'")
    assert rows(spark, f"SELECT * FROM {t}") == [(1, "eu", 10), (3, "us", 31), (4, "us", 41)]

    spark.createDataFrame([(1, "eu", 99), (5, "ap", 50)], "id BIGINT, region STRING, amount INT") \
        .createOrReplaceTempView("changes")
    spark.sql(f"""
        MERGE INTO {t} t USING changes s ON t.id = s.id
        WHEN MATCHED THEN UPDATE SET t.amount = s.amount
        WHEN NOT MATCHED THEN INSERT *""")
    assert rows(spark, f"SELECT * FROM {t}") == [
        (1, "eu", 99), (3, "us", 31), (4, "us", 41), (5, "ap", 50)]

    ops = operations(spark, t)
    assert ops[0] == "append" and len(ops) == 4
    delete_files = rows(spark, f"SELECT count(*) FROM {t}.delete_files")[0][0]
    if mode == "merge-on-read":
        assert delete_files > 0, "merge-on-read must write delete files"
    else:
        assert delete_files == 0, "copy-on-write must rewrite data files instead"
    spark.sql(f"DROP TABLE {t}")


def test_insert_overwrite_static_and_dynamic(spark: Any, cat: str) -> None:
    t = new_table(spark, cat)
    spark.sql(f"INSERT INTO {t} VALUES (1, 'eu', 1), (2, 'us', 2), (3, 'ap', 3)")

    spark.sql(f"INSERT OVERWRITE {t} PARTITION (region = 'eu') SELECT 10, 100")
    assert rows(spark, f"SELECT * FROM {t}") == [(2, "us", 2), (3, "ap", 3), (10, "eu", 100)]

    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    try:
        spark.sql(f"INSERT OVERWRITE {t} SELECT 20, 'us', 200")
    finally:
        spark.conf.unset("spark.sql.sources.partitionOverwriteMode")
    assert rows(spark, f"SELECT * FROM {t}") == [(3, "ap", 3), (10, "eu", 100), (20, "us", 200)]
    summary = spark.sql(f"SELECT summary FROM {t}.snapshots ORDER BY committed_at").collect()[-1][0]
    assert summary.get("replace-partitions") == "true"
    assert operations(spark, t) == ["append", "overwrite", "overwrite"]
    spark.sql(f"DROP TABLE {t}")


def test_ctas_and_add_column(spark: Any, cat: str) -> None:
    source = new_table(spark, cat)
    spark.sql(f"INSERT INTO {source} VALUES (1, 'eu', 5), (2, 'us', 6)")
    copy = f"{source}_ctas"
    spark.sql(f"CREATE TABLE {copy} USING iceberg AS SELECT id, amount FROM {source}")
    assert rows(spark, f"SELECT * FROM {copy}") == [(1, 5), (2, 6)]

    spark.sql(f"ALTER TABLE {copy} ADD COLUMN note STRING")
    spark.sql(f"INSERT INTO {copy} VALUES (3, 7, 'new')")
    assert rows(spark, f"SELECT id, amount, coalesce(note, '-') FROM {copy}") == [
        (1, 5, "-"), (2, 6, "-"), (3, 7, "new")]
    assert [f.name for f in spark.table(copy).schema.fields] == ["id", "amount", "note"]
    spark.sql(f"DROP TABLE {copy}")
    spark.sql(f"DROP TABLE {source}")


def test_rewrite_data_files_keeps_rows(spark: Any, cat: str) -> None:
    t = new_table(spark, cat, partitioned=False)
    for i in range(4):
        spark.sql(f"INSERT INTO {t} VALUES ({i}, 'eu', {i * 10})")
    before = rows(spark, f"SELECT * FROM {t}")
    assert rows(spark, f"SELECT count(*) FROM {t}.files")[0][0] == 4

    table_ref = t.split(".", 1)[1]
    result = spark.sql(
        f"CALL {cat}.system.rewrite_data_files(table => '{table_ref}', "
        "options => map('min-input-files', '2'))").collect()[0]
    assert result["rewritten_data_files_count"] == 4
    assert result["added_data_files_count"] == 1
    assert rows(spark, f"SELECT * FROM {t}") == before
    assert rows(spark, f"SELECT count(*) FROM {t}.files")[0][0] == 1
    assert operations(spark, t)[-1] == "replace"
    spark.sql(f"DROP TABLE {t}")


def test_time_travel_and_metadata_tables(spark: Any, cat: str) -> None:
    t = new_table(spark, cat)
    spark.sql(f"INSERT INTO {t} VALUES (1, 'eu', 1)")
    first = spark.sql(f"SELECT snapshot_id, committed_at FROM {t}.snapshots").collect()[0]
    spark.sql(f"INSERT INTO {t} VALUES (2, 'us', 2)")
    stamps = [r[0] for r in spark.sql(f"SELECT committed_at FROM {t}.snapshots").collect()]
    assert stamps[1] > stamps[0], "TIMESTAMP AS OF below needs distinct commit times"

    assert rows(spark, f"SELECT id FROM {t} VERSION AS OF {first['snapshot_id']}") == [(1,)]
    stamp = first["committed_at"].strftime("%Y-%m-%d %H:%M:%S.%f")
    assert rows(spark, f"SELECT id FROM {t} TIMESTAMP AS OF '{stamp}'") == [(1,)]
    assert rows(spark, f"SELECT id FROM {t}") == [(1,), (2,)]

    history = spark.sql(f"SELECT snapshot_id, is_current_ancestor FROM {t}.history").collect()
    assert len(history) == 2 and all(h["is_current_ancestor"] for h in history)
    assert history[0]["snapshot_id"] == first["snapshot_id"]
    files = rows(spark, f"SELECT partition.region, record_count FROM {t}.files")
    assert files == [("eu", 1), ("us", 1)]
    assert len(operations(spark, t)) == 2
    spark.sql(f"DROP TABLE {t}")


def test_drop_table_and_purge(spark: Any, cat: str) -> None:
    kept = new_table(spark, cat)
    purged = new_table(spark, cat)
    for t in (kept, purged):
        spark.sql(f"INSERT INTO {t} VALUES (1, 'eu', 1)")
    spark.sql(f"DROP TABLE {kept}")
    spark.sql(f"DROP TABLE {purged} PURGE")
    listed = {r["tableName"] for r in spark.sql(f"SHOW TABLES IN {cat}.db").collect()}
    assert kept.rsplit(".", 1)[1] not in listed
    assert purged.rsplit(".", 1)[1] not in listed
    with pytest.raises(Exception, match="TABLE_OR_VIEW_NOT_FOUND"):
        spark.sql(f"SELECT * FROM {kept}").collect()


def test_spark_scan_reports_are_accepted(spark: Any, cat: str, proxy: RunningProxy) -> None:
    """Spark's REST client reports each scan's metrics, naming the table as
    ``<spark catalog>.<namespace>.<table>``: icegov checks that name against the path, and
    Spark's own reports pass that check."""
    table = new_table(spark, cat, partitioned=False)
    spark.sql(f"INSERT INTO {table} VALUES (1, 'eu', 10)")
    assert rows(spark, f"SELECT id FROM {table}") == [(1,)]
    path_end = "/tables/" + table.rsplit(".", 1)[1] + "/metrics"
    reports = [json.loads(line) for line in proxy.audit_log.read_text().splitlines()
               if path_end in line]
    assert reports, "Spark sent no metrics report"
    assert {r["endpoint"] for r in reports} == {"report_metrics"}
    assert all(200 <= r["status"] < 300 for r in reports), [r["status"] for r in reports]
