"""classify_commit on what real Spark 3.5 + Iceberg 1.10.2 sends, statement by statement.

Spark talks to the embedded catalog on a loopback port through ``CommitRecorder``, which keeps
each commit body with the table metadata loaded just before it. Every statement must come out
with the expected actions, and (Spark being honest) with summaries that match the manifests.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from pyiceberg.io import load_file_io

from proxy.catalog import create_catalog_app
from proxy.catalog.store import open_catalog
from proxy.commits import CommitIntent, classify_commit
from proxy.governance import Action
from tests.support.commit_capture import Captured, CommitRecorder
from tests.support.servers import serve
from tests.support.spark import add_rest_catalog

pytestmark = pytest.mark.spark

CAT = "classify"
INSERT, DELETE, UPDATE, REWRITE = Action.INSERT, Action.DELETE, Action.UPDATE, Action.REWRITE
_ids = itertools.count()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[CommitRecorder, str]]:
    """The embedded catalog behind a commit recorder, on a loopback port: (recorder, URL)."""
    warehouse = tmp_path_factory.mktemp("classify") / "warehouse"
    catalog = open_catalog(f"sqlite:///{warehouse.parent / 'catalog.db'}", warehouse)
    recorder = CommitRecorder(create_catalog_app(catalog, 64 * 1024 * 1024), catalog)
    with serve(recorder) as url:
        yield recorder, url
    catalog.engine.dispose()


@pytest.fixture(scope="module")
def sql(spark: Any, recorded: tuple[CommitRecorder, str]) -> Any:
    """Run a statement on the recorded catalog; returns the classified commits it made."""
    recorder, url = recorded
    add_rest_catalog(spark, CAT, url)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CAT}.db")
    recorder.take()

    def run(statement: str) -> list[tuple[Captured, CommitIntent]]:
        spark.sql(statement).collect()
        commits = recorder.take()
        assert all(c.status == 200 for c in commits), [(c.status, c.body) for c in commits]
        return [(c, classify_commit(c.body, c.base, load_file_io())) for c in commits]

    return run


def one(commits: list[tuple[Captured, CommitIntent]]) -> CommitIntent:
    """The intent of the one commit a statement made; Spark's summaries must hold."""
    assert len(commits) == 1, [c.update_actions for c, _ in commits]
    intent = commits[0][1]
    assert intent.evidence.verified, intent.evidence.mismatch
    return intent


def new_table(sql: Any, mode: str = "copy-on-write", partitioned: bool = True) -> str:
    """A format-v2 table with four rows (the embedded catalog cannot create v3 tables)."""
    name = f"{CAT}.db.t{next(_ids)}"
    sql(f"""CREATE TABLE {name} (id BIGINT, region STRING, amount INT) USING iceberg
            {"PARTITIONED BY (region)" if partitioned else ""}
            TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='{mode}',
                           'write.update.mode'='{mode}', 'write.merge.mode'='{mode}')""")
    sql(f"INSERT INTO {name} VALUES (1, 'eu', 10), (2, 'eu', 20), (3, 'us', 30), (4, 'us', 40)")
    return name


def merge_changes(spark: Any, matched: tuple[int, str]) -> None:
    """A ``changes`` view that updates row ``matched`` (id, region) and inserts a new one."""
    spark.createDataFrame([(*matched, 99), (5, "ap", 50)], "id BIGINT, region STRING, amount INT") \
        .createOrReplaceTempView("changes")


MERGE = """MERGE INTO {t} t USING changes s ON t.id = s.id
           WHEN MATCHED THEN UPDATE SET t.amount = s.amount WHEN NOT MATCHED THEN INSERT *"""


def test_insert(sql: Any) -> None:
    t = new_table(sql)
    intent = one(sql(f"INSERT INTO {t} VALUES (5, 'ap', 50), (6, 'eu', 60)"))
    assert intent.actions == {INSERT}
    assert intent.evidence.operations == ("append",)
    assert intent.evidence.counts.added_records == 2


def test_copy_on_write_dml(spark: Any, sql: Any) -> None:
    t = new_table(sql)
    partial = one(sql(f"DELETE FROM {t} WHERE id = 2"))
    # copy-on-write: the rewritten file keeps only rows it held, so the rows show a DELETE
    assert (partial.evidence.operations, partial.actions) == (("overwrite",), {DELETE})
    whole = one(sql(f"DELETE FROM {t} WHERE region = 'us'"))
    assert (whole.evidence.operations, whole.actions) == (("delete",), {DELETE})
    assert one(sql(f"UPDATE {t} SET amount = amount + 1 WHERE id = 1")).actions == {UPDATE}
    merge_changes(spark, (1, "eu"))
    assert one(sql(MERGE.format(t=t))).actions == {UPDATE}


def test_merge_on_read_dml(spark: Any, sql: Any) -> None:
    t = new_table(sql, "merge-on-read")
    first = one(sql(f"DELETE FROM {t} WHERE id = 2"))
    assert (first.evidence.operations, first.actions) == (("delete",), {DELETE})
    assert first.evidence.counts.added_delete_files == 1
    again = one(sql(f"DELETE FROM {t} WHERE id = 1"))  # same data file: deletes are merged
    assert again.actions == {DELETE}, again.evidence
    update = one(sql(f"UPDATE {t} SET amount = amount + 1 WHERE region = 'us'"))
    assert (update.evidence.operations, update.actions) == (("overwrite",), {UPDATE})
    assert update.evidence.counts.added_delete_files >= 1
    merge_changes(spark, (3, "us"))
    merged = one(sql(MERGE.format(t=t)))
    assert merged.actions == {UPDATE}
    assert merged.evidence.counts.added_delete_files >= 1


def test_insert_overwrite_static_and_dynamic(spark: Any, sql: Any) -> None:
    t = new_table(sql)
    static = one(sql(f"INSERT OVERWRITE {t} PARTITION (region = 'eu') SELECT 10, 100"))
    assert (static.evidence.operations, static.actions) == (("overwrite",), {UPDATE})
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    try:
        dynamic = one(sql(f"INSERT OVERWRITE {t} SELECT 20, 'us', 200"))
    finally:
        spark.conf.unset("spark.sql.sources.partitionOverwriteMode")
    assert (dynamic.evidence.operations, dynamic.actions) == (("overwrite",), {UPDATE})


def test_ctas_and_alter(sql: Any) -> None:
    source = new_table(sql)
    ctas = one(sql(f"CREATE TABLE {source}_copy USING iceberg AS SELECT id, amount FROM {source}"))
    assert ctas.actions == {Action.CREATE_TABLE, INSERT}
    assert ctas.evidence.counts.added_records == 4
    alter = one(sql(f"ALTER TABLE {source}_copy ADD COLUMN note STRING"))
    assert alter.actions == {Action.ALTER} and alter.evidence.snapshot_ids == ()


def test_replace_table_as_select(sql: Any) -> None:
    t = new_table(sql)
    replaced = one(sql(f"CREATE OR REPLACE TABLE {t} USING iceberg AS SELECT 7 AS id"))
    assert replaced.actions == {Action.ALTER, UPDATE}


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_rewrite_data_files(sql: Any, mode: str) -> None:
    t = new_table(sql, mode, partitioned=False)
    for i in range(3):
        sql(f"INSERT INTO {t} SELECT /*+ REPARTITION(1) */ * FROM VALUES ({10 + i}, 'eu', {i}), "
            f"({20 + i}, 'eu', {i}) AS v(id, region, amount)")  # two rows in one file
    sql(f"DELETE FROM {t} WHERE id = 11")  # part of a file: a position delete in merge-on-read
    ref = t.split(".", 1)[1]
    rewrite = one(sql(f"CALL {CAT}.system.rewrite_data_files(table => '{ref}', "
                      "options => map('min-input-files', '2'))"))
    assert (rewrite.evidence.operations, rewrite.actions) == (("replace",), {REWRITE})
    counts = rewrite.evidence.counts
    assert (counts.added_data_files, counts.added_records) == (1, 9)
    # merge-on-read: the rewrite applies the position delete (10 rows in, 9 out) and leaves the
    # now-dangling delete file in place
    assert counts.deleted_records == (10 if mode == "merge-on-read" else 9)


def test_rollback_and_expire(spark: Any, sql: Any) -> None:
    t = new_table(sql)
    first = spark.sql(f"SELECT snapshot_id FROM {t}.snapshots ORDER BY committed_at") \
        .collect()[0][0]
    sql(f"INSERT INTO {t} VALUES (9, 'eu', 90)")
    ref = t.split(".", 1)[1]
    rollback = one(sql(f"CALL {CAT}.system.rollback_to_snapshot('{ref}', {first})"))
    assert rollback.actions == {Action.MANAGE_SNAPSHOTS}
    expire = sql(f"CALL {CAT}.system.expire_snapshots(table => '{ref}', "
                 "older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1)")
    assert one(expire).actions == {Action.MANAGE_SNAPSHOTS}


def test_insert_into_every_partition_transform(sql: Any) -> None:
    """Spark's files under days, bucket, truncate and identity fields hold the rows their
    partitions declare: the partition proof reads them and the INSERT lands as one."""
    name = f"{CAT}.db.t{next(_ids)}"
    sql(f"""CREATE TABLE {name} (id BIGINT, s STRING, region STRING, ts TIMESTAMP) USING iceberg
            PARTITIONED BY (days(ts), bucket(16, id), truncate(2, s), region)
            TBLPROPERTIES ('format-version'='2')""")
    intent = one(sql(f"""INSERT INTO {name} VALUES
        (1, 'abc', 'eu', TIMESTAMP '2026-11-28 06:00:00'),
        (2, 'abd', 'eu', TIMESTAMP '2026-11-28 07:00:00'),
        (3, 'xyz', 'us', TIMESTAMP '2999-12-31 23:59:59'),
        (4, NULL, NULL, NULL), (-5, 'é€', 'ap', TIMESTAMP '1960-01-01 00:00:00')"""))
    assert intent.actions == {INSERT}
    assert intent.evidence.counts.added_records == 5
