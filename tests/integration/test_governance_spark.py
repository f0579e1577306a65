"""Real Spark sessions for the four demo principals, through the proxy, against both catalogs.

Each principal has its own Spark catalog with its own ``credential=``. After every refused
statement the table's rows and snapshots are checked to be exactly what they were.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tests.conftest import RunningProxy
from tests.support.http import audit_records
from tests.support.spark import add_rest_catalog

pytestmark = pytest.mark.spark

PRINCIPALS = ("admin", "writer", "deleter", "analyst")
_ids = itertools.count()


@pytest.fixture(scope="module")
def cats(spark: Any, backend: str, proxy: RunningProxy) -> dict[str, str]:
    """Spark catalog name per demo principal; namespace ``demo`` exists (created by admin)."""
    names = {}
    for who in PRINCIPALS:
        names[who] = f"{backend}_{who}"
        add_rest_catalog(spark, names[who], proxy.url, credential=f"{who}:{who}-secret")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {names['admin']}.demo")
    return names


def rows(spark: Any, query: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in spark.sql(query).collect())


def demo_table(spark: Any, cats: dict[str, str], mode: str = "copy-on-write") -> str:
    """A fresh demo table (created by admin) with four rows; returns ``demo.<name>``."""
    name = f"demo.g{next(_ids)}"
    spark.sql(f"""
        CREATE TABLE {cats['admin']}.{name} (id BIGINT, region STRING, amount INT)
        USING iceberg PARTITIONED BY (region)
        TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='{mode}',
                       'write.update.mode'='{mode}', 'write.merge.mode'='{mode}')""")
    spark.sql(f"INSERT INTO {cats['admin']}.{name} VALUES "
              "(1, 'eu', 10), (2, 'eu', 20), (3, 'us', 30), (4, 'us', 40)")
    return name


def state(spark: Any, cats: dict[str, str], table: str) -> tuple[list[Any], list[Any]]:
    """(rows, snapshot ids) of a table, read as admin."""
    full = f"{cats['admin']}.{table}"
    snapshots = rows(spark, f"SELECT snapshot_id FROM {full}.snapshots")
    return rows(spark, f"SELECT * FROM {full}"), snapshots


def assert_refused(spark: Any, cats: dict[str, str], table: str, statement: str) -> None:
    """``statement`` fails with 403 Forbidden and the table is exactly as before."""
    before = state(spark, cats, table)
    with pytest.raises(Exception, match="Forbidden"):
        spark.sql(statement).collect()
    assert state(spark, cats, table) == before


def changes_view(spark: Any) -> None:
    spark.createDataFrame([(1, "eu", 99), (9, "ap", 90)], "id BIGINT, region STRING, amount INT") \
        .createOrReplaceTempView("changes")


def test_writer_can_insert_and_it_is_audited(spark: Any, cats: dict[str, str],
                                             proxy: RunningProxy) -> None:
    table = demo_table(spark, cats)
    spark.sql(f"INSERT INTO {cats['writer']}.{table} VALUES (5, 'ap', 50)")
    assert rows(spark, f"SELECT id FROM {cats['writer']}.{table}") == [(1,), (2,), (3,), (4,), (5,)]

    [record] = [r for r in audit_records(proxy.audit_log)
                if r["principal"] == "writer" and r["endpoint"] == "commit_table"
                and r["path"].endswith(table.split(".")[1])]
    assert record["decision"] == "allow" and record["status"] == 200
    assert record["actions"] == ["INSERT"]
    assert record["rules"][0]["rule"] == "p, writer, icegov.demo.*, INSERT, allow"
    [evidence] = record["evidence"]
    assert evidence["classification"] == "INSERT" and evidence["verified"] is True
    assert evidence["added_data_files"] == 1 and evidence["added_records"] == 1
    assert evidence["operations"] == ["append"] and evidence["mismatch"] is None
    assert record["roles"] == ["writer"] and "Iceberg" in (record["client"]["version"] or "")


MERGE = ("MERGE INTO {t} t USING changes s ON t.id = s.id "
         "WHEN MATCHED THEN UPDATE SET t.amount = s.amount WHEN NOT MATCHED THEN INSERT *")
COW, MOR = "copy-on-write", "merge-on-read"


@pytest.mark.parametrize(("mode", "statement"), [
    (COW, "DELETE FROM {t} WHERE id = 1"),
    (MOR, "DELETE FROM {t} WHERE id = 1"),
    (COW, "DELETE FROM {t} WHERE region = 'us'"),
    (COW, "UPDATE {t} SET amount = 0 WHERE id = 1"),
    (MOR, "UPDATE {t} SET amount = 0 WHERE id = 1"),
    (COW, MERGE),
    (MOR, MERGE),
    (COW, "INSERT OVERWRITE {t} SELECT 7, 'eu', 70"),
    (COW, "DROP TABLE {t}"),
])
def test_writer_cannot_remove_or_rewrite(spark: Any, cats: dict[str, str], mode: str,
                                         statement: str) -> None:
    table = demo_table(spark, cats, mode)
    changes_view(spark)
    assert_refused(spark, cats, table, statement.format(t=f"{cats['writer']}.{table}"))


def test_deleter_can_delete_merge_on_read_but_not_insert(spark: Any, cats: dict[str, str]) -> None:
    table = demo_table(spark, cats, "merge-on-read")
    spark.sql(f"DELETE FROM {cats['deleter']}.{table} WHERE id = 1")
    assert rows(spark, f"SELECT id FROM {cats['admin']}.{table}") == [(2,), (3,), (4,)]
    assert rows(spark, f"SELECT count(*) FROM {cats['admin']}.{table}.delete_files")[0][0] == 1
    assert_refused(spark, cats, table, f"INSERT INTO {cats['deleter']}.{table} VALUES (8, 'eu', 1)")


def test_analyst_reads_but_every_write_is_refused(spark: Any, cats: dict[str, str]) -> None:
    table = demo_table(spark, cats)
    full = f"{cats['analyst']}.{table}"
    assert rows(spark, f"SELECT id FROM {full} WHERE region = 'us'") == [(3,), (4,)]
    changes_view(spark)
    for statement in (f"INSERT INTO {full} VALUES (6, 'eu', 1)", f"DELETE FROM {full} WHERE id = 1",
                      f"UPDATE {full} SET amount = 1", f"ALTER TABLE {full} ADD COLUMN c INT",
                      f"DROP TABLE {full}"):
        assert_refused(spark, cats, table, statement)


def test_admin_can_do_everything(spark: Any, cats: dict[str, str]) -> None:
    table = demo_table(spark, cats, "merge-on-read")
    full = f"{cats['admin']}.{table}"
    spark.sql(f"DELETE FROM {full} WHERE id = 1")
    spark.sql(f"UPDATE {full} SET amount = 0 WHERE id = 2")
    spark.sql(f"ALTER TABLE {full} ADD COLUMN note STRING")
    assert rows(spark, f"SELECT * FROM {full}") == [(2, "eu", 0, None), (3, "us", 30, None),
                                                     (4, "us", 40, None)]
    spark.sql(f"INSERT OVERWRITE {full} SELECT 7, 'eu', 70, 'x'")  # static: replaces everything
    assert rows(spark, f"SELECT * FROM {full}") == [(7, "eu", 70, "x")]
    spark.sql(f"DROP TABLE {full}")
    assert table.split(".")[1] not in {
        r["tableName"] for r in spark.sql(f"SHOW TABLES IN {cats['admin']}.demo").collect()}


def test_tables_without_rights_are_invisible(spark: Any, cats: dict[str, str]) -> None:
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {cats['admin']}.secret")
    spark.sql(f"CREATE TABLE IF NOT EXISTS {cats['admin']}.secret.payroll (id BIGINT) "
              "USING iceberg")
    namespaces = {r[0] for r in spark.sql(f"SHOW NAMESPACES IN {cats['analyst']}").collect()}
    assert namespaces == {"demo"}
    assert "secret" in {r[0] for r in spark.sql(f"SHOW NAMESPACES IN {cats['admin']}").collect()}
    with pytest.raises(Exception, match="TABLE_OR_VIEW_NOT_FOUND"):
        spark.sql(f"SELECT * FROM {cats['analyst']}.secret.payroll").collect()


def test_deleter_copy_on_write_delete_lands_but_update_is_refused(
        spark: Any, cats: dict[str, str], proxy: RunningProxy) -> None:
    table = demo_table(spark, cats, COW)
    _, snapshots = state(spark, cats, table)
    spark.sql(f"DELETE FROM {cats['deleter']}.{table} WHERE id = 1")  # rewrites the eu file
    rows_after, snapshots_after = state(spark, cats, table)
    assert rows_after == [(2, "eu", 20), (3, "us", 30), (4, "us", 40)]
    assert len(snapshots_after) == len(snapshots) + 1
    [record] = [r for r in audit_records(proxy.audit_log)
                if r["principal"] == "deleter" and r["endpoint"] == "commit_table"
                and r["path"].endswith(table.split(".")[1])]
    assert record["decision"] == "allow" and record["actions"] == ["DELETE"]
    [evidence] = record["evidence"]
    assert evidence["operations"] == ["overwrite"] and evidence["removed_data_files"] == 1
    assert any("are all among" in check for check in evidence["row_checks"]), evidence
    assert_refused(spark, cats, table,
                   f"UPDATE {cats['deleter']}.{table} SET amount = 0 WHERE id = 2")
