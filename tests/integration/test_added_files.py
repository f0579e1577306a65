"""Added files must be what their manifest entries claim, against real proxies on both backings
(the embedded catalog and the Java reference catalog): an INSERT-only writer's pyiceberg client
commits crafted data files through icegov; each bad one is refused (400) with the table's rows
and snapshots unchanged, and honest files still land. Spark's own INSERTs are covered by
``test_classify_spark.py`` and the benchmark in ``benchmarks/footers.py``.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.conversions import to_bytes
from pyiceberg.exceptions import BadRequestError
from pyiceberg.io.pyarrow import parquet_file_to_data_file, schema_to_pyarrow
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table import Table
from pyiceberg.typedef import Record
from pyiceberg.types import LongType

from tests.conftest import BACKENDS, RunningProxy, proxy_for
from tests.support.errors import assert_error_model
from tests.support.http import as_principal
from tests.support.settings import ADMIN

WRITER = "writer:writer-secret"  # the demo policy: READ on icegov.demo.*, plus INSERT there
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.string())])
ROWS = pa.table({"id": [1, 2, 3], "name": ["a", "b", None]}, schema=SCHEMA)
_ids = itertools.count()


@pytest.fixture(scope="module", params=BACKENDS)
def governed(request: pytest.FixtureRequest,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningProxy]:
    workdir = tmp_path_factory.mktemp(f"added-{request.param}")
    with proxy_for(str(request.param), workdir) as running:
        RestCatalog("admin", uri=running.url, credential=ADMIN).create_namespace("demo")
        yield running


@pytest.fixture()
def admin(governed: RunningProxy) -> RestCatalog:
    return RestCatalog("admin", uri=governed.url, credential=ADMIN)


@pytest.fixture()
def writer(governed: RunningProxy) -> RestCatalog:
    return RestCatalog("writer", uri=governed.url, credential=WRITER)


def new_table(admin: RestCatalog) -> str:
    name = f"demo.added{next(_ids)}_{uuid.uuid4().hex[:6]}"
    admin.create_table(name, SCHEMA).append(ROWS)
    return name


def state(table: Table) -> tuple[list[Any], list[int]]:
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    return rows, [s.snapshot_id for s in table.metadata.snapshots]


def write(table: Table, rows: pa.Table, name: str, measure: bool = True) -> DataFile:
    """A Parquet file of ``rows`` under the table, with the metrics pyiceberg measures (or,
    for columns pyiceberg cannot measure, none)."""
    path = f"{table.location()}/data/{name}-{uuid.uuid4().hex[:8]}.parquet"
    with table.io.new_output(path).create() as out:
        pq.write_table(rows, out)
    if measure:
        return parquet_file_to_data_file(table.io, table.metadata, path)
    return DataFile.from_args(content=DataFileContent.DATA, file_path=path,
                              file_format=FileFormat.PARQUET, partition=Record(),
                              record_count=rows.num_rows,
                              file_size_in_bytes=len(table.io.new_input(path)))


def entry(data: DataFile, **claims: Any) -> DataFile:
    """``data``'s entry with ``claims`` instead of what was measured."""
    fields = {"content": DataFileContent.DATA, "file_path": data.file_path,
              "file_format": FileFormat.PARQUET, "partition": Record(),
              "record_count": data.record_count, "file_size_in_bytes": data.file_size_in_bytes,
              "value_counts": data.value_counts, "null_value_counts": data.null_value_counts,
              "lower_bounds": data.lower_bounds, "upper_bounds": data.upper_bounds}
    return DataFile.from_args(**{**fields, **claims})


def append(table: Table, data: DataFile) -> None:
    with table.transaction() as transaction, \
            transaction.update_snapshot().fast_append() as snapshot:
        snapshot.append_data_file(data)


def _field_ids(table: Table) -> pa.Schema:
    return schema_to_pyarrow(table.schema())


def _lying_count(table: Table) -> DataFile:
    return entry(write(table, ROWS.cast(_field_ids(table)), "count"), record_count=1000)


def _future_column(table: Table) -> DataFile:
    rows = ROWS.cast(_field_ids(table)).append_column(
        pa.field("later", pa.int64(), True, {b"PARQUET:field_id": b"9"}), pa.array([1, 2, 3]))
    return write(table, rows, "future", measure=False)


def _wrong_type(table: Table) -> DataFile:
    rows = pa.table({"id": ["1", "2", "3"]}, schema=pa.schema([
        pa.field("id", pa.string(), True, {b"PARQUET:field_id": b"1"})]))
    return write(table, rows, "typed", measure=False)


def _hidden_rows(table: Table) -> DataFile:
    data = write(table, pa.table({"id": [50, 60], "name": ["x", "y"]}).cast(_field_ids(table)),
                 "bounds")  # claims ids 50..51: a filter on id = 60 would skip the file
    return entry(data, upper_bounds={**data.upper_bounds, 1: to_bytes(LongType(), 51)})


def _resized(table: Table) -> DataFile:
    data = write(table, ROWS.cast(_field_ids(table)), "sized")
    return entry(data, file_size_in_bytes=data.file_size_in_bytes + 7)


@pytest.mark.parametrize("crafted", [_lying_count, _future_column, _wrong_type, _hidden_rows,
                                     _resized])
def test_a_crafted_data_file_is_refused_and_nothing_lands(
        admin: RestCatalog, writer: RestCatalog, crafted: Callable[[Table], DataFile]) -> None:
    name = new_table(admin)
    before = state(admin.load_table(name))
    table = writer.load_table(name)
    with pytest.raises(BadRequestError):
        append(table, crafted(table))
    assert state(admin.load_table(name)) == before


def test_a_link_to_another_tables_file_is_refused(admin: RestCatalog,
                                                  writer: RestCatalog) -> None:
    ours, theirs = new_table(admin), new_table(admin)
    [their_file] = [t.file for t in admin.load_table(theirs).scan().plan_files()]
    table = writer.load_table(ours)
    link = Path(urlparse(table.location()).path) / "data" / f"link-{uuid.uuid4().hex}.parquet"
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(urlparse(their_file.file_path).path, link)
    before = state(admin.load_table(ours))
    with pytest.raises(BadRequestError, match="not under the table's locations"):
        append(table, entry(their_file, file_path=f"file://{link}"))
    assert state(admin.load_table(ours)) == before


def test_honest_files_still_land(admin: RestCatalog, writer: RestCatalog) -> None:
    name = new_table(admin)
    table = writer.load_table(name)
    append(table, write(table, pa.table({"id": [7], "name": ["z"]}).cast(_field_ids(table)),
                        "honest"))
    writer.load_table(name).append(pa.table({"id": [8], "name": [None]}, schema=SCHEMA))
    rows, snapshots = state(admin.load_table(name))
    assert [r["id"] for r in rows] == [1, 2, 3, 7, 8] and len(snapshots) == 3


def test_spark_inserts_and_delete_files_still_land(spark: Any, cat: str, backend: str) -> None:
    """Spark's own files pass the checks: an INSERT of several files, then a merge-on-read
    DELETE and UPDATE that add delete files — deletion vectors on the reference catalog (format
    3), position delete files on the embedded one (pyiceberg writes no format 3)."""
    table = f"{cat}.db.footers_{uuid.uuid4().hex[:8]}"
    version = "3" if backend == "reference" else "2"
    spark.sql(f"CREATE TABLE {table} (id bigint, name string, score double) USING iceberg "
              f"TBLPROPERTIES ('format-version'='{version}', 'write.delete.mode'='merge-on-read', "
              "'write.update.mode'='merge-on-read')")
    spark.sql(f"INSERT INTO {table} SELECT /*+ REPARTITION(6) */ id, concat('n', id), id / 3.0 "
              "FROM range(60)")
    spark.sql(f"INSERT INTO {table} VALUES (100, 'nan', double('NaN')), (101, null, 2.5), "
              "(102, 'inf', double('-Infinity'))")  # NaN, nulls and infinities in one file
    spark.sql(f"DELETE FROM {table} WHERE id % 10 = 0")
    spark.sql(f"UPDATE {table} SET score = -1 WHERE id = 7")
    rows = spark.sql(f"SELECT count(*), sum(id), min(score) FROM {table}").first()
    assert (rows[0], rows[1]) == (56, sum(range(60)) - sum(range(0, 60, 10)) + 101 + 102)
    assert rows[2] == float("-inf")
    files = spark.sql(f"SELECT count(*) FROM {table}.delete_files").first()[0]
    assert files >= 1, "deletion vectors were committed"


def test_spark_nested_columns_pass_the_checks(spark: Any, cat: str) -> None:
    """Structs, lists and maps (with nulls and empty collections): Spark's metrics for their
    leaves agree with the footers it writes."""
    table = f"{cat}.db.nested_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {table} (id bigint, point struct<x: double, y: int>, "
              "tags array<string>, attrs map<string, bigint>, amount decimal(12, 2), "
              "day date, at timestamp, raw binary) USING iceberg")
    spark.sql(f"INSERT INTO {table} VALUES "
              "(1, named_struct('x', 1.5, 'y', 2), array('a', null), map('k', 1), 10.25, "
              "date'2026-01-02', timestamp'2026-01-02 03:04:05', X'00ff'), "
              "(2, null, array(), map(), -3.50, null, null, null), "
              "(3, named_struct('x', null, 'y', null), null, null, null, date'1969-12-31', "
              "timestamp'1960-01-01 00:00:00', X'')")
    assert spark.sql(f"SELECT count(*) FROM {table}").first()[0] == 3


def test_append_files_whose_bounds_the_footer_contradicts_is_refused(
        governed: RunningProxy, admin: RestCatalog) -> None:
    """The data operation path: the same checker, the same ErrorModel 400, nothing landed."""
    name = new_table(admin)
    table = admin.load_table(name)
    data = write(table, pa.table({"id": [50, 60], "name": ["x", "y"]}).cast(_field_ids(table)),
                 "op")
    before = state(admin.load_table(name))
    wire = {"content": "data", "file-path": data.file_path, "file-format": "parquet",
            "spec-id": 0, "partition": [], "record-count": 2,
            "file-size-in-bytes": data.file_size_in_bytes,
            "upper-bounds": {"keys": [1], "values": [to_bytes(LongType(), 51).hex()]}}
    namespace, short = name.split(".")
    with as_principal(governed.url, WRITER) as writer_http:
        answer = writer_http.post(f"/v1/namespaces/{namespace}/tables/{short}", json={
            "requirements": [], "updates": [{"action": "append-files", "data-files": [wire]}]})
    error = assert_error_model(answer, 400, "BadRequestException")
    assert "upper bound below the greatest value" in error["message"]
    assert state(admin.load_table(name)) == before
    honest = {**wire, "upper-bounds": {"keys": [1], "values": [to_bytes(LongType(), 60).hex()]}}
    with as_principal(governed.url, WRITER) as writer_http:
        landed = writer_http.post(f"/v1/namespaces/{namespace}/tables/{short}", json={
            "requirements": [], "updates": [{"action": "append-files", "data-files": [honest]}]})
    assert landed.status_code == 200, landed.text
    assert [r["id"] for r in state(admin.load_table(name))[0]] == [1, 2, 3, 50, 60]
