"""REWRITE on format 3 keeps every row's lineage (``_row_id``, ``_last_updated_sequence_number``).

A compaction moves rows between files; on format 3 the rows must keep the ids and the
last-updated sequence numbers readers saw (Spark's ``rewrite_data_files`` writes them into the
new files). Before, icegov compared rows without their lineage and refused any added file that
held the lineage columns: Spark's honest v3 compaction by a REWRITE-only principal was a 403
(UPDATE), while a rewrite whose new file left the lineage out (every row given a new id and a
new last-updated sequence number: to incremental readers, every row changed) landed as REWRITE.

Format 3 needs the reference catalog (the embedded one cannot write v3 yet); admin writes the
table with Spark, ``compactor`` (test-local, REWRITE only) compacts.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestEntry,
    ManifestEntryStatus,
)
from pyiceberg.typedef import Record

from tests.conftest import RunningProxy
from tests.integration.test_rewrite_rows import (
    COMPACTOR,
    as_compactor,
    compacting_proxy,
    last_evidence,
)
from tests.support.errors import assert_error_model
from tests.support.http import as_principal
from tests.support.read_tables import table_state
from tests.support.row_files import V3DataManifestWriter, v3_manifest_list
from tests.support.settings import ADMIN
from tests.support.spark import add_rest_catalog

DELETER = "deleter:deleter-secret"
LINEAGE = "_row_id, _last_updated_sequence_number"


@pytest.fixture(scope="module")
def v3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningProxy]:
    with compacting_proxy("reference", tmp_path_factory.mktemp("lineage")) as running:
        RestCatalog("admin", uri=running.url, credential=ADMIN) \
            .create_namespace_if_not_exists("demo")
        yield running


def spark_table(spark: Any, proxy: RunningProxy) -> tuple[str, str, str]:
    """A v3 table of three files, one row deleted and one updated (lineage moved on); the
    admin's and the compactor's Spark catalogs."""
    admin, compactor = "lin_admin", "lin_compactor"
    add_rest_catalog(spark, admin, proxy.url, credential=ADMIN)
    add_rest_catalog(spark, compactor, proxy.url, credential=COMPACTOR)
    name = f"demo.l{uuid.uuid4().hex[:8]}"
    spark.sql(f"""CREATE TABLE {admin}.{name} (id BIGINT, region STRING) USING iceberg
                  TBLPROPERTIES ('format-version'='3', 'write.delete.mode'='merge-on-read',
                                 'write.update.mode'='merge-on-read')""")
    for first in (1, 4, 7):
        spark.sql(f"INSERT INTO {admin}.{name} SELECT /*+ REPARTITION(1) */ * FROM VALUES "
                  f"({first}, 'eu'), ({first + 1}, 'eu'), ({first + 2}, 'us') AS v(id, region)")
    spark.sql(f"DELETE FROM {admin}.{name} WHERE id = 2").collect()
    spark.sql(f"UPDATE {admin}.{name} SET region = 'xx' WHERE id = 8").collect()
    return name, admin, compactor


def lineage(spark: Any, catalog: str, name: str) -> list[Any]:
    return spark.sql(f"SELECT id, region, {LINEAGE} FROM {catalog}.{name} ORDER BY id").collect()


@pytest.mark.spark
def test_spark_v3_compaction_by_a_rewrite_only_principal_lands(spark: Any,
                                                               v3: RunningProxy) -> None:
    name, admin, compactor = spark_table(spark, v3)
    before = lineage(spark, admin, name)
    spark.sql(f"CALL {compactor}.system.rewrite_data_files(table => '{name}', "
              "options => map('min-input-files', '2'))").collect()
    rewritten = last_evidence(v3, name)
    assert rewritten["classification"] == "REWRITE", rewritten
    assert rewritten["removed_data_files"] == 4  # three inserts and the update's row
    assert lineage(spark, admin, name) == before


def crafted_replace(proxy: RunningProxy, name: str, added: list[DataFile]) -> Any:
    """As ``compactor``: a ``replace`` snapshot (v3 manifests and list, written under the
    table) removing every live data file and adding ``added``."""
    table = as_compactor(proxy, name)
    metadata, current = table.metadata, table.current_snapshot()
    assert current is not None and metadata.next_row_id is not None
    live = [e for m in current.manifests(table.io)
            for e in m.fetch_manifest_entry(table.io, discard_deleted=True)]
    assert all(e.data_file.content == DataFileContent.DATA for e in live)
    sid, sequence = random.getrandbits(62), metadata.last_sequence_number + 1
    folder = f"{table.location()}/metadata"
    out = table.io.new_output(f"{folder}/crafted-{uuid.uuid4()}.avro")
    with V3DataManifestWriter(metadata.spec(), metadata.schema(), out, sid, "null") as writer:
        for entry in live:
            writer.add_entry(ManifestEntry.from_args(
                _table_format_version=3, status=ManifestEntryStatus.DELETED, snapshot_id=sid,
                sequence_number=entry.sequence_number,
                file_sequence_number=entry.file_sequence_number,
                data_file=v3_file(entry.data_file)))
        for new in added:
            writer.add_entry(ManifestEntry.from_args(
                _table_format_version=3, status=ManifestEntryStatus.ADDED, snapshot_id=sid,
                data_file=v3_file(new)))
    path = f"{folder}/snap-{sid}-crafted.avro"
    v3_manifest_list(table.io, path, sid, current.snapshot_id, sequence,
                     [(writer.to_manifest_file(), metadata.next_row_id)])
    snapshot = {"snapshot-id": sid, "parent-snapshot-id": current.snapshot_id,
                "sequence-number": sequence, "timestamp-ms": int(time.time() * 1000),
                "manifest-list": path, "summary": {"operation": "replace"},
                "schema-id": metadata.current_schema_id, "first-row-id": metadata.next_row_id,
                "added-rows": sum(f.record_count for f in added)}
    body = {"requirements": [{"type": "assert-ref-snapshot-id", "ref": "main",
                              "snapshot-id": current.snapshot_id}],
            "updates": [{"action": "add-snapshot", "snapshot": snapshot},
                        {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch",
                         "snapshot-id": sid}]}
    namespace, table_name = name.split(".")
    with as_principal(proxy.url, COMPACTOR) as client:
        return client.post(f"/v1/namespaces/{namespace}/tables/{table_name}", json=body)


KEPT = ("column_sizes", "value_counts", "null_value_counts", "nan_value_counts",
        "lower_bounds", "upper_bounds", "key_metadata", "split_offsets", "sort_order_id")


def v3_file(file: DataFile) -> DataFile:
    """``file``'s entry, every field kept, as a v3 data file record."""
    return DataFile.from_args(
        _table_format_version=3, content=DataFileContent.DATA, file_path=file.file_path,
        file_format=FileFormat.PARQUET, partition=Record(), record_count=file.record_count,
        file_size_in_bytes=file.file_size_in_bytes,
        **{name: getattr(file, name) for name in KEPT})


def with_lineage_columns(proxy: RunningProxy, name: str, rows: list[Any]) -> DataFile:
    """A Parquet file of ``rows`` (id, region, _row_id, _last_updated_sequence_number) with
    Iceberg field ids, under the table."""
    table = as_compactor(proxy, name)
    ids = {"id": 1, "region": 2, "_row_id": 2147483540,
           "_last_updated_sequence_number": 2147483539}
    schema = pa.schema([pa.field(n, pa.string() if n == "region" else pa.int64(),
                                 metadata={b"PARQUET:field_id": str(i).encode()})
                        for n, i in ids.items()])
    data = pa.table({n: [r[k] for r in rows] for k, n in enumerate(ids)}, schema=schema)
    path = f"{table.location()}/data/lineage-{uuid.uuid4().hex[:8]}.parquet"
    with table.io.new_output(path).create() as out:
        pq.write_table(data, out)
    return DataFile.from_args(content=DataFileContent.DATA, file_path=path,
                              file_format=FileFormat.PARQUET, partition=Record(),
                              record_count=data.num_rows,
                              file_size_in_bytes=len(table.io.new_input(path)))


def inserted_only(spark: Any, proxy: RunningProxy) -> tuple[str, str]:
    """A v3 table of three Spark inserts (no delete files); the admin's catalog."""
    admin = "lin_admin"
    add_rest_catalog(spark, admin, proxy.url, credential=ADMIN)
    name = f"demo.l{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {admin}.{name} (id BIGINT, region STRING) USING iceberg "
              "TBLPROPERTIES ('format-version'='3')")
    for first in (1, 4, 7):
        spark.sql(f"INSERT INTO {admin}.{name} SELECT /*+ REPARTITION(1) */ * FROM VALUES "
                  f"({first}, 'eu'), ({first + 1}, 'eu'), ({first + 2}, 'us') AS v(id, region)")
    return name, admin


@pytest.mark.spark
@pytest.mark.parametrize("tamper", ["new ids", "swapped ids", "other sequence numbers"])
def test_a_rewrite_that_changes_row_lineage_is_refused(spark: Any, v3: RunningProxy,
                                                       tamper: str) -> None:
    name, admin = inserted_only(spark, v3)
    before = lineage(spark, admin, name)
    state = table_state(v3.url, name)
    rows = [tuple(r) for r in before]
    if tamper == "new ids":  # a writer that leaves lineage out: every row gets a new id
        table = as_compactor(v3, name)
        plain = pa.table({"id": [r[0] for r in rows], "region": [r[1] for r in rows]})
        added = list(_dataframe_to_data_files(table.metadata, plain, table.io))
    elif tamper == "swapped ids":
        rows[0], rows[1] = (*rows[0][:2], rows[1][2], rows[0][3]), \
            (*rows[1][:2], rows[0][2], rows[1][3])
        added = [with_lineage_columns(v3, name, rows)]
    else:  # rows written at sequence numbers 2 and 3 made to look as old as the first ones
        added = [with_lineage_columns(v3, name, [(*r[:3], 1) for r in rows])]
    response = crafted_replace(v3, name, added)
    assert_error_model(response, 403, "ForbiddenException")
    assert "UPDATE" in response.json()["error"]["message"], response.text
    assert table_state(v3.url, name) == state
    assert lineage(spark, admin, name) == before


@pytest.mark.spark
def test_an_honest_replace_keeping_lineage_lands(spark: Any, v3: RunningProxy) -> None:
    name, admin = inserted_only(spark, v3)
    before = lineage(spark, admin, name)
    added = [with_lineage_columns(v3, name, [tuple(r) for r in before])]
    response = crafted_replace(v3, name, added)
    assert response.status_code == 200, response.text
    assert last_evidence(v3, name)["classification"] == "REWRITE"
    assert lineage(spark, admin, name) == before


@pytest.mark.spark
def test_a_v3_copy_on_write_delete_by_a_delete_only_principal_lands(
        spark: Any, v3: RunningProxy) -> None:
    """Spark's copy-on-write DELETE on format 3 keeps the lineage of the rows it rewrites:
    the rows it adds are among the removed ones, lineage included: a DELETE."""
    name, admin = inserted_only(spark, v3)
    deleter = "lin_deleter"
    add_rest_catalog(spark, deleter, v3.url, credential=DELETER)
    spark.sql(f"ALTER TABLE {admin}.{name} SET TBLPROPERTIES "
              "('write.delete.mode'='copy-on-write')")
    expected = [r for r in lineage(spark, admin, name) if r[0] != 5]
    spark.sql(f"DELETE FROM {deleter}.{name} WHERE id = 5").collect()
    assert last_evidence(v3, name)["classification"] == "DELETE"
    assert lineage(spark, admin, name) == expected


@pytest.mark.spark
def test_compacting_rows_written_before_the_upgrade_to_v3_lands(spark: Any,
                                                                v3: RunningProxy) -> None:
    """Rows written on format 2 have no lineage: compacted by the first commit after the
    upgrade, Java gives them new ids (the new file's), which is no change of theirs."""
    admin, compactor = "lin_admin", "lin_compactor"
    add_rest_catalog(spark, admin, v3.url, credential=ADMIN)
    add_rest_catalog(spark, compactor, v3.url, credential=COMPACTOR)
    name = f"demo.u{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {admin}.{name} (id BIGINT, region STRING) USING iceberg "
              "TBLPROPERTIES ('format-version'='2')")
    for first in (1, 4):
        spark.sql(f"INSERT INTO {admin}.{name} SELECT /*+ REPARTITION(1) */ * FROM VALUES "
                  f"({first}, 'eu'), ({first + 1}, 'us') AS v(id, region)")
    spark.sql(f"ALTER TABLE {admin}.{name} SET TBLPROPERTIES ('format-version'='3')")
    rows = table_state(v3.url, name)[0]
    spark.sql(f"CALL {compactor}.system.rewrite_data_files(table => '{name}', "
              "options => map('min-input-files', '2'))").collect()
    assert last_evidence(v3, name)["classification"] == "REWRITE"
    assert table_state(v3.url, name)[0] == rows
