"""Concurrent appenders through icegov see no conflicts; a conflicting delete still does (issue 7,
items 1 and 6), against both backing catalogs.

Clients' own commit retries are off (table property ``commit.retry.num-retries=0``), so every
success is icegov's doing. The races are forced, not hoped for: pyiceberg appenders all load the
table before any of them commits, and Spark's commits are held by a gate in front of icegov until
all of them have arrived (tests/support/faults.py ``gather``), so every commit but one meets a
moved branch — the audit says icegov rebased exactly those. Afterwards the history must be one
straight line holding every append once, and every file the table's snapshots reference must
still exist.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table

from tests.conftest import RunningProxy
from tests.support.appends import (
    NO_CLIENT_RETRIES,
    SCHEMA,
    assert_one_line_of_history,
    id_rows,
    run_together,
    table_ids,
)
from tests.support.faults import FaultProxy, fault_proxy
from tests.support.http import audit_records, wait_for
from tests.support.settings import ADMIN
from tests.support.spark import add_rest_catalog

NAMESPACE = "concurrent"
PYICEBERG_THREADS = 16
SPARK_JOBS = 8
ROWS_PER_WRITER = 5


@pytest.fixture(scope="module")
def admin(proxy_url: str) -> RestCatalog:
    catalog = RestCatalog("admin", uri=proxy_url, credential=ADMIN)
    catalog.create_namespace_if_not_exists(NAMESPACE)
    return catalog


@pytest.fixture()
def table_name(admin: RestCatalog) -> str:
    name = f"{NAMESPACE}.t_{uuid.uuid4().hex[:8]}"
    admin.create_table(name, SCHEMA, properties=NO_CLIENT_RETRIES)
    return name


def writer_ids(writer: int) -> list[int]:
    return [writer * 1000 + k for k in range(ROWS_PER_WRITER)]








def commit_audits(proxy: RunningProxy, table_name: str, count: int) -> list[dict[str, Any]]:
    """The audit evidence of the table's ``count`` commits (with the request's status), in order."""
    resource = f"icegov.{table_name}"

    def found() -> list[dict[str, Any]] | None:
        evidence = [{**e, "status": r["status"]} for r in audit_records(proxy.audit_log)
                    if r.get("endpoint") == "commit_table"
                    for e in r.get("evidence") or [] if e.get("resource") == resource]
        return evidence if len(evidence) >= count else None

    evidence: list[dict[str, Any]] = wait_for(found, what=f"{count} audited commits")
    assert len(evidence) == count, evidence
    return evidence


def rebased(evidence: list[dict[str, Any]]) -> int:
    return sum(1 for e in evidence if e.get("rebased") is True)




def assert_referenced_files_exist(table: Table) -> None:
    """Every manifest list, manifest and data file any snapshot references is still there."""
    io = table.io
    for snapshot in table.snapshots():
        assert io.new_input(snapshot.manifest_list).exists(), snapshot.manifest_list
        for manifest in snapshot.manifests(io):
            assert io.new_input(manifest.manifest_path).exists(), manifest.manifest_path
            for entry in manifest.fetch_manifest_entry(io):
                path = entry.data_file.file_path
                assert io.new_input(path).exists(), path


def test_sixteen_pyiceberg_appenders_on_one_base_all_succeed(
        proxy: RunningProxy, proxy_url: str, admin: RestCatalog, table_name: str) -> None:
    """All 16 load the (empty) table first, then append at once: 15 meet a moved branch."""
    views = [RestCatalog(f"w{i}", uri=proxy_url, credential=ADMIN).load_table(table_name)
             for i in range(PYICEBERG_THREADS)]
    start = threading.Barrier(PYICEBERG_THREADS)

    def append(writer: int) -> None:
        start.wait()
        views[writer].append(id_rows(writer_ids(writer)))

    failures = run_together(PYICEBERG_THREADS, append)
    assert failures == []
    table = admin.load_table(table_name)
    assert table_ids(table) == sorted(i for w in range(PYICEBERG_THREADS) for i in writer_ids(w))
    assert_one_line_of_history(table, PYICEBERG_THREADS)
    assert_referenced_files_exist(table)
    evidence = commit_audits(proxy, table_name, PYICEBERG_THREADS)
    assert {e["status"] for e in evidence} == {200}
    assert rebased(evidence) == PYICEBERG_THREADS - 1  # all but the first met a moved branch


def test_a_delete_whose_base_moved_under_appends_still_gets_its_conflict(
        proxy: RunningProxy, proxy_url: str, admin: RestCatalog, table_name: str) -> None:
    """Appends are rebased; a delete is not: it fails with 409 and nothing of it lands."""
    admin.load_table(table_name).append(id_rows([1, 2, 3]))
    deleter = RestCatalog("deleter", uri=proxy_url, credential=ADMIN).load_table(table_name)
    appenders = [RestCatalog(f"a{i}", uri=proxy_url, credential=ADMIN).load_table(table_name)
                 for i in range(4)]
    start = threading.Barrier(len(appenders))

    def append(writer: int) -> None:
        start.wait()
        appenders[writer].append(id_rows(writer_ids(writer + 1)))

    assert run_together(len(appenders), append) == []
    with pytest.raises(CommitFailedException):
        deleter.delete("id <= 3")  # judged against the base before the appends
    table = admin.load_table(table_name)
    appended = [i for w in range(1, len(appenders) + 1) for i in writer_ids(w)]
    assert table_ids(table) == sorted([1, 2, 3, *appended])
    assert [s.summary.operation.value for s in table.snapshots()  # type: ignore[union-attr]
            ] == ["append"] * (1 + len(appenders))
    assert_one_line_of_history(table, 1 + len(appenders))
    *appends, delete = commit_audits(proxy, table_name, 2 + len(appenders))
    assert rebased(appends) == len(appenders) - 1
    assert (delete["status"], delete["rebased"], delete["operations"]) == (409, False, ["delete"])


@pytest.fixture()
def gathered(proxy_url: str) -> Iterator[FaultProxy]:
    """A fault proxy in front of icegov, used only for its gate."""
    with fault_proxy(proxy_url) as faults:
        yield faults


def test_spark_insert_jobs_on_one_base_all_succeed_and_keep_their_files(
        spark: Any, backend: str, proxy: RunningProxy, gathered: FaultProxy,
        admin: RestCatalog, table_name: str) -> None:
    """Concurrent INSERT INTO jobs from one SparkSession, commits held until all have arrived.

    Manifests merge from 2 on, so Spark's MergeAppend carries the parent's entries into its own
    new manifest (EXISTING entries): a rebase must not add those a second time.
    """
    table = admin.load_table(table_name)
    table.append(id_rows([0]))
    with table.transaction() as tx:
        tx.set_properties({"commit.manifest.min-count-to-merge": "2"})
    catalog = f"{backend}_gathered"
    add_rest_catalog(spark, catalog, gathered.url, credential=ADMIN)
    gate = gathered.gather(SPARK_JOBS)

    def insert(job: int) -> None:
        values = ", ".join(f"({i})" for i in writer_ids(job + 1))
        spark.sql(f"INSERT INTO {catalog}.{table_name} VALUES {values}")

    failures = run_together(SPARK_JOBS, insert)
    assert failures == []
    assert gate.arrived == SPARK_JOBS and not gate.timed_out  # the commits met on one base
    expected = sorted([0, *(i for job in range(SPARK_JOBS) for i in writer_ids(job + 1))])
    table = admin.load_table(table_name)
    assert table_ids(table) == expected
    assert_one_line_of_history(table, 1 + SPARK_JOBS)
    assert_referenced_files_exist(table)
    evidence = [e for e in commit_audits(proxy, table_name, 2 + SPARK_JOBS)
                if e["operations"] == ["append"]]  # the property change aside
    assert len(evidence) == 1 + SPARK_JOBS
    assert {e["status"] for e in evidence} == {200}
    assert rebased(evidence) == SPARK_JOBS - 1  # all but the first met a moved branch
    read_back = spark.sql(f"SELECT id FROM {catalog}.{table_name}").collect()
    assert sorted(row.id for row in read_back) == expected
