"""Two icegov processes on one PostgreSQL-backed embedded catalog (issue 9 §3).

A real PostgreSQL server (tests/support/postgres.py) holds the embedded catalog and the
idempotency store; two ``icegov serve`` subprocesses (tests/support/replicas.py) share it, one
warehouse directory, the token signing key and the plan-task key, and nothing else. Clients'
own commit retries are off (``commit.retry.num-retries=0``): every concurrent append that
lands does so because the replica that took it rebased it over what the other replica committed.

Races between replicas that pyiceberg's SqlCatalog loses (check, then insert) are made certain
with a row another session has inserted but not committed; icegov answers them as the client
expects (409, or no server error), which the tests assert.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.catalog.sql import IcebergNamespaceProperties, SqlCatalogBaseTable
from sqlalchemy import create_engine, insert, text

from proxy.catalog.store import open_catalog
from tests.support.appends import (
    NO_CLIENT_RETRIES,
    SCHEMA,
    assert_one_line_of_history,
    id_rows,
    run_together,
    table_ids,
)
from tests.support.errors import assert_error_model
from tests.support.faults import FaultProxy, fault_proxy
from tests.support.http import as_principal, audit_records, token, wait_for
from tests.support.plan_tables import many_files
from tests.support.postgres import postgres_server
from tests.support.replicas import Replica, SharedState, running_replicas
from tests.support.settings import ADMIN
from tests.support.spark import add_rest_catalog

NAMESPACE = "replicated"
PYICEBERG_APPENDERS = 16
SPARK_JOBS = 4
ROWS_PER_WRITER = 3


# -- fixtures ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pg_uri() -> Iterator[str]:
    with postgres_server() as uri:
        yield uri


def fresh_database(pg_uri: str) -> str:
    """A new, empty database on the server; its SQLAlchemy URI."""
    name = f"db_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_uri.replace("postgresql+psycopg://", "postgresql://"),
                         autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {name}")
    return f"{pg_uri.rsplit('/', 1)[0]}/{name}"


@pytest.fixture(scope="module")
def catalog_db(pg_uri: str) -> str:
    """The replicas' embedded catalog database."""
    return fresh_database(pg_uri)


@pytest.fixture(scope="module")
def replicas(pg_uri: str, catalog_db: str, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[list[Replica]]:
    root = tmp_path_factory.mktemp("replicas")
    shared = SharedState(catalog_db_uri=catalog_db, idempotency_db_uri=pg_uri,
                         warehouse=root / "warehouse")
    with running_replicas(shared, root) as running:
        RestCatalog("setup", uri=running[0].url, credential=ADMIN).create_namespace(NAMESPACE)
        yield running


@pytest.fixture()
def catalogs(replicas: list[Replica]) -> list[RestCatalog]:
    """One pyiceberg catalog per replica, as the admin."""
    return [RestCatalog(r.name, uri=r.url, credential=ADMIN) for r in replicas]


@pytest.fixture()
def table_name(catalogs: list[RestCatalog]) -> str:
    name = f"{NAMESPACE}.t_{uuid.uuid4().hex[:8]}"
    catalogs[0].create_table(name, SCHEMA, properties=NO_CLIENT_RETRIES)
    return name


# -- helpers ----------------------------------------------------------------------------------

def writer_ids(writer: int) -> list[int]:
    return [writer * 1000 + k for k in range(ROWS_PER_WRITER)]










def audited_commits(replica: Replica, table_name: str) -> list[dict[str, Any]]:
    """The commit_table records ``replica`` wrote for ``table_name``."""
    resource = f"icegov.{table_name}"
    return [r for r in audit_records(replica.audit_log) if r.get("endpoint") == "commit_table"
            and resource in (r.get("resources") or [])]


def wait_for_audited_commits(replica: Replica, table_name: str, count: int
                             ) -> list[dict[str, Any]]:
    """The replica's audited commits of the table, once ``count`` of them are written."""
    found: list[dict[str, Any]] = wait_for(
        lambda: (lambda got: got if len(got) >= count else None)(
            audited_commits(replica, table_name)),
        what=f"{count} audited commits on {replica.name}")
    return found


# -- the embedded catalog on PostgreSQL -------------------------------------------------------

def test_a_replica_opening_the_catalog_while_another_creates_its_tables_starts(
        pg_uri: str, tmp_path: Path) -> None:
    """The race made certain: another replica has created the tables but not yet committed."""
    uri = fresh_database(pg_uri)
    engine = create_engine(uri)
    opened: list[object] = []
    try:
        with engine.connect() as creator:
            creating = creator.begin()
            SqlCatalogBaseTable.metadata.create_all(creator)  # uncommitted: invisible to others
            opener = threading.Thread(target=lambda: opened.append(_open_or_error(uri, tmp_path)))
            opener.start()
            wait_for(lambda: _waiting_on_a_lock(creator), what="the opener to block on DDL")
            creating.commit()
            opener.join(timeout=30)
    finally:
        engine.dispose()
    assert opened and not isinstance(opened[0], Exception), opened


def _open_or_error(uri: str, warehouse: Path) -> object:
    try:
        catalog = open_catalog(uri, warehouse)
    except Exception as exc:  # the outcome under test
        return exc
    catalog.engine.dispose()
    return catalog


def _waiting_on_a_lock(connection: Any) -> bool:
    """True when some other session waits for a lock (the opener, on our uncommitted DDL)."""
    waiting = connection.execute(text(
        "SELECT count(*) FROM pg_locks WHERE NOT granted AND pid <> pg_backend_pid()")).scalar()
    return bool(waiting)


# -- another replica's write, not yet committed, meets this replica's ----------------------------

def against_uncommitted(db_uri: str, row: dict[str, str], request: Callable[[], httpx.Response]
                        ) -> httpx.Response:
    """``request``'s answer when another session (a replica mid-request) has inserted ``row``
    into the namespace table but not yet committed: the request's own insert of the same key
    waits on that one, which then commits. The race, made certain."""
    engine = create_engine(db_uri)
    try:
        with engine.connect() as other, ThreadPoolExecutor(1) as pool:
            holding = other.begin()
            other.execute(insert(IcebergNamespaceProperties).values(**row))
            answer = pool.submit(request)
            wait_for(lambda: answer.done() or _waiting_on_a_lock(other),
                     what="the request to meet the uncommitted row")
            holding.commit()
            return answer.result(timeout=30)
    finally:
        engine.dispose()


def namespace_row(namespace: str, key: str = "exists", value: str = "true") -> dict[str, str]:
    return {"catalog_name": "icegov", "namespace": namespace, "property_key": key,
            "property_value": value}


def test_creating_a_namespace_another_replica_is_creating_is_409(
        replicas: list[Replica], catalog_db: str) -> None:
    name = f"ns_{uuid.uuid4().hex[:8]}"
    with as_principal(replicas[1].url, ADMIN) as client:
        answer = against_uncommitted(catalog_db, namespace_row(name), lambda: client.post(
            "/v1/namespaces", json={"namespace": [name]}))
    assert_error_model(answer, 409, "AlreadyExistsException")


def test_setting_a_property_another_replica_is_setting_is_no_server_error(
        replicas: list[Replica], catalog_db: str, catalogs: list[RestCatalog]) -> None:
    name = f"ns_{uuid.uuid4().hex[:8]}"
    catalogs[0].create_namespace(name)
    with as_principal(replicas[1].url, ADMIN) as client:
        answer = against_uncommitted(
            catalog_db, namespace_row(name, "owner", "a"), lambda: client.post(
                f"/v1/namespaces/{name}/properties", json={"updates": {"owner": "b"}}))
    assert answer.status_code < 500, answer.text
    if answer.status_code == 200:  # the later write wins
        assert catalogs[0].load_namespace_properties(name)["owner"] == "b"


# -- pyiceberg through both replicas ----------------------------------------------------------

def test_sixteen_appends_alternating_between_replicas_each_land_once(
        replicas: list[Replica], catalogs: list[RestCatalog], table_name: str) -> None:
    """All 16 writers load the empty table first, then append at once, half through each
    replica: every append but the first meets a branch moved by the other replica or its own."""
    views = [RestCatalog(f"w{i}", uri=replicas[i % 2].url, credential=ADMIN).load_table(table_name)
             for i in range(PYICEBERG_APPENDERS)]
    start = threading.Barrier(PYICEBERG_APPENDERS)

    def append(writer: int) -> None:
        start.wait()
        views[writer].append(id_rows(writer_ids(writer)))

    assert run_together(PYICEBERG_APPENDERS, append) == []
    expected = sorted(i for w in range(PYICEBERG_APPENDERS) for i in writer_ids(w))
    for catalog in catalogs:  # both replicas list the table and read the same rows
        assert table_name.split(".")[1] in [t[-1] for t in catalog.list_tables(NAMESPACE)]
        table = catalog.load_table(table_name)
        assert table_ids(table) == expected
        assert_one_line_of_history(table, PYICEBERG_APPENDERS)
    evidence: list[dict[str, Any]] = []
    for replica in replicas:  # each replica took (and audited) its half, all answered 200
        commits = wait_for_audited_commits(replica, table_name, PYICEBERG_APPENDERS // 2)
        assert [c["status"] for c in commits] == [200] * (PYICEBERG_APPENDERS // 2)
        evidence += [e for c in commits for e in c["evidence"]]
    assert sum(e["rebased"] is True for e in evidence) == PYICEBERG_APPENDERS - 1, evidence


# -- shared keys ------------------------------------------------------------------------------

def test_a_token_issued_by_one_replica_is_accepted_by_the_other(replicas: list[Replica]) -> None:
    first, second = replicas
    issued = token(first.url, ADMIN)
    header, payload, signature = issued.split(".")
    forged = f"{header}.{payload}.{signature[:-4]}AAAA"
    with httpx.Client(base_url=second.url) as client:
        accepted = client.get("/v1/namespaces", headers={"authorization": f"Bearer {issued}"})
        refused = client.get("/v1/namespaces", headers={"authorization": f"Bearer {forged}"})
    assert accepted.status_code == 200, accepted.text
    assert [NAMESPACE] in accepted.json()["namespaces"]
    assert refused.status_code == 401  # the other replica does check the signature


def test_plan_tasks_planned_by_one_replica_are_served_by_the_other(
        replicas: list[Replica], catalogs: list[RestCatalog]) -> None:
    name = f"t_{uuid.uuid4().hex[:8]}"
    many_files(catalogs[0], f"{NAMESPACE}.{name}", 5)
    path = f"/v1/namespaces/{NAMESPACE}/tables/{name}"
    with as_principal(replicas[0].url, ADMIN) as first:
        answer = first.post(f"{path}/plan", json={}).json()
    tasks = answer["plan-tasks"]
    assert len(tasks) > 1 and not answer["file-scan-tasks"], answer
    files: list[str] = []
    with as_principal(replicas[1].url, ADMIN) as second:
        for task in tasks:
            fetched = second.post(f"{path}/tasks", json={"plan-task": task})
            assert fetched.status_code == 200, fetched.text
            files += [t["data-file"]["file-path"] for t in fetched.json()["file-scan-tasks"]]
        polled = second.get(f"{path}/plan/{answer['plan-id']}")
    assert polled.status_code == 200 and polled.json()["status"] == "completed", polled.text
    assert len(files) == len(set(files)) == 5


# -- Spark and pyiceberg together -------------------------------------------------------------

@pytest.fixture()
def gates(replicas: list[Replica]) -> Iterator[list[FaultProxy]]:
    """A fault proxy in front of each replica, used only for its gate."""
    with fault_proxy(replicas[0].url) as first, fault_proxy(replicas[1].url) as second:
        yield [first, second]


@pytest.mark.spark
def test_spark_inserts_and_pyiceberg_appends_through_both_replicas_all_land_once(
        spark: Any, replicas: list[Replica], gates: list[FaultProxy],
        catalogs: list[RestCatalog], table_name: str) -> None:
    """Spark INSERT INTO jobs alternate A, B; pyiceberg appends alternate B, A. In front of each
    replica a gate holds its four commits until all four have arrived, so each replica takes
    them at once, while the other replica takes its four."""
    spark_catalogs = [f"gated_{r.name[-1]}" for r in replicas]
    for spark_catalog, gate in zip(spark_catalogs, gates, strict=True):
        add_rest_catalog(spark, spark_catalog, gate.url, credential=ADMIN)
    appenders = [RestCatalog(f"p{i}", uri=gates[(i + 1) % 2].url, credential=ADMIN)
                 .load_table(table_name) for i in range(SPARK_JOBS)]
    held = [gate.gather(SPARK_JOBS, timeout_seconds=60) for gate in gates]

    def write(job: int) -> None:
        if job < SPARK_JOBS:
            values = ", ".join(f"({i})" for i in writer_ids(100 + job))
            spark.sql(f"INSERT INTO {spark_catalogs[job % 2]}.{table_name} VALUES {values}")
        else:
            appenders[job - SPARK_JOBS].append(id_rows(writer_ids(200 + job)))

    assert run_together(2 * SPARK_JOBS, write) == []
    assert [(g.arrived, g.timed_out) for g in held] == [(SPARK_JOBS, False)] * 2
    expected = sorted([i for j in range(SPARK_JOBS) for i in writer_ids(100 + j)]
                      + [i for j in range(SPARK_JOBS, 2 * SPARK_JOBS)
                         for i in writer_ids(200 + j)])
    for replica in replicas:  # Spark reads every row back through both replicas
        add_rest_catalog(spark, f"replica_{replica.name[-1]}", replica.url, credential=ADMIN)
        read = spark.sql(f"SELECT id FROM replica_{replica.name[-1]}.{table_name}").collect()
        assert sorted(row.id for row in read) == expected
    for catalog in catalogs:
        assert_one_line_of_history(catalog.load_table(table_name), 2 * SPARK_JOBS)
    for replica in replicas:  # four commits released together: three of them met a moved branch
        commits = wait_for_audited_commits(replica, table_name, SPARK_JOBS)
        assert [c["status"] for c in commits] == [200] * SPARK_JOBS
        assert sum(e["rebased"] is True for c in commits for e in c["evidence"]) >= SPARK_JOBS - 1
