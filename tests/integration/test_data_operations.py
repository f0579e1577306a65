"""Data operations from the shipped Python client (``proxy.client``) through a real proxy, in
front of both backing catalogs: icegov builds and commits them; rows are read back exactly."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.exceptions import (
    BadRequestError,
    CommitFailedException,
    CommitStateUnknownException,
)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    Transform,
    TruncateTransform,
    VoidTransform,
    YearTransform,
)
from pyiceberg.types import LongType, NestedField, StringType, TimestampType

from proxy.client import IcegovClient
from tests.conftest import RunningProxy
from tests.support.faults import (
    FaultProxy,
    drop_after_commit,
    fault_proxy,
    status_after,
    status_before,
    table_commit,
    transaction_commit,
)
from tests.support.settings import ADMIN

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False),
                NestedField(2, "p", StringType(), required=False))
SPEC = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "p"))
THREADS, APPENDS_EACH = 8, 3


def batch(ids: list[int], p: str = "a") -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "p": [p] * len(ids)})


@pytest.fixture()
def client(proxy: RunningProxy) -> IcegovClient:
    return IcegovClient(proxy.url, credential=ADMIN)


@pytest.fixture()
def namespace(client: IcegovClient) -> Iterator[str]:
    name = f"ops_{uuid.uuid4().hex[:8]}"
    client.catalog.create_namespace(name)
    yield name
    for identifier in client.catalog.list_tables(name):
        client.catalog.drop_table(identifier)
    client.catalog.drop_namespace(name)


def new_table(client: IcegovClient, namespace: str, name: str = "t") -> str:
    client.catalog.create_table(f"{namespace}.{name}", SCHEMA, partition_spec=SPEC)
    return f"{namespace}.{name}"


def rows(client: IcegovClient, identifier: str) -> list[tuple[Any, ...]]:
    scanned = client.load(identifier).scan().to_arrow()
    return sorted(zip(scanned["id"].to_pylist(), scanned["p"].to_pylist(), strict=True))


def live_files(table: Table) -> set[str]:
    snapshot = table.current_snapshot()
    assert snapshot is not None
    return {e.data_file.file_path for m in snapshot.manifests(table.io)
            for e in m.fetch_manifest_entry(table.io)}


def audited_classifications(audit_log: Path, table: str) -> list[Any]:
    """The classification of each landed data operation on ``table``, from the audit log."""
    found = []
    for line in audit_log.read_text().splitlines():
        record = json.loads(line)
        if record.get("status") == 200 and record.get("method") == "POST" \
                and any(r.endswith(table) for r in record.get("resources", [])):
            found.extend(e.get("classification") for e in record.get("evidence", []))
    return found


def test_append_delete_and_overwrite_read_back_exactly(client: IcegovClient, namespace: str,
                                                       proxy: RunningProxy) -> None:
    table = new_table(client, namespace)
    client.append(table, batch([1, 2, 3]))
    client.append(table, batch([4], "b"))
    assert rows(client, table) == [(1, "a"), (2, "a"), (3, "a"), (4, "b")]
    client.delete_where(table, "id = 99")  # matches nothing: nothing is committed
    client.delete_where(table, "id = 2")  # part of a file: rewritten without the row
    assert rows(client, table) == [(1, "a"), (3, "a"), (4, "b")]
    landed = client.overwrite(table, batch([40], "b"), "p = 'b'")
    assert rows(client, table) == [(1, "a"), (3, "a"), (40, "b")]
    assert landed.current_snapshot() is not None
    assert audited_classifications(proxy.audit_log, f"{namespace}.t") == [
        "INSERT", "INSERT", "DELETE", "UPDATE"]


TRANSFORMS: list[tuple[int, Transform[Any, Any]]] = [
    (1, BucketTransform(4)), (2, TruncateTransform(2)), (1, TruncateTransform(10)),
    (3, YearTransform()), (3, MonthTransform()), (3, DayTransform()), (3, HourTransform()),
    (2, IdentityTransform()), (1, VoidTransform())]


@pytest.mark.parametrize(("source", "transform"), TRANSFORMS, ids=lambda v: str(v))
def test_every_partition_transform_appends_and_deletes(
        client: IcegovClient, namespace: str, source: int, transform: Transform[Any, Any]
        ) -> None:
    """What ``pip install icegov`` brings writes a table partitioned by any transform
    (pyiceberg's bucket and truncate need pyiceberg-core)."""
    schema = Schema(*SCHEMA.fields, NestedField(3, "ts", TimestampType(), required=False))
    spec = PartitionSpec(PartitionField(source, 1000, transform, "part"))
    table = f"{namespace}.by_{type(transform).__name__.lower()}"
    client.catalog.create_table(table, schema, partition_spec=spec)
    stamps = pa.array([1_700_000_000_000_000 + i * 7_200_000_000 for i in range(4)],
                      pa.timestamp("us"))
    client.append(table, pa.table({"id": pa.array([1, 2, 3, 4], pa.int64()),
                                   "p": ["aa", "ab", "ba", "bb"], "ts": stamps}))
    client.delete_where(table, "id = 2")
    scanned = client.load(table).scan().to_arrow()
    assert sorted(zip(scanned["id"].to_pylist(), scanned["p"].to_pylist(), strict=True)) == [
        (1, "aa"), (3, "ba"), (4, "bb")]


def test_delete_files_by_name(client: IcegovClient, namespace: str) -> None:
    table = new_table(client, namespace)
    client.append(table, batch([1]))
    before = live_files(client.load(table))
    client.append(table, batch([2], "b"))
    [added] = live_files(client.load(table)) - before
    client.delete_files(table, [added])
    assert rows(client, table) == [(1, "a")]


def test_concurrent_appends_all_land(client: IcegovClient, namespace: str) -> None:
    table = new_table(client, namespace)
    failures: list[BaseException] = []

    def appender(thread: int) -> None:
        for i in range(APPENDS_EACH):
            try:
                client.append(table, batch([thread * 100 + i], f"p{thread % 3}"))
            except BaseException as exc:  # every failure is counted
                failures.append(exc)

    workers = [threading.Thread(target=appender, args=(t,)) for t in range(THREADS)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert failures == []
    expected = sorted(t * 100 + i for t in range(THREADS) for i in range(APPENDS_EACH))
    assert [r[0] for r in rows(client, table)] == expected
    snapshots = client.load(table).metadata.snapshots
    assert len(snapshots) == THREADS * APPENDS_EACH
    assert len({s.snapshot_id for s in snapshots}) == len(snapshots)


def test_serializable_overwrite_conflicting_with_an_append_gets_409(
        client: IcegovClient, namespace: str) -> None:
    table = new_table(client, namespace)
    client.append(table, batch([1]))
    change = client.prepare_overwrite(client.load(table), batch([10]), "p = 'a'",
                                      "serializable")
    client.append(table, batch([2]))  # lands after the overwrite read the table
    with pytest.raises(CommitFailedException):
        client.commit(change)
    assert rows(client, table) == [(1, "a"), (2, "a")]
    for data_file in change.written:  # the client removed what it wrote for it
        assert not change.table.io.new_input(data_file.file_path).exists()


def test_bad_file_is_refused_and_nothing_lands(client: IcegovClient, namespace: str) -> None:
    table = new_table(client, namespace)
    client.append(table, batch([1]))
    loaded = client.load(table)
    change = client.prepare_append(loaded, batch([2]))
    change.update["data-files"][0]["record-count"] = 99
    with pytest.raises(BadRequestError, match="not the declared 99"):
        client.commit(change)
    assert client.load(table).metadata.current_snapshot_id == loaded.metadata.current_snapshot_id


def test_transaction_across_two_tables(client: IcegovClient, namespace: str) -> None:
    orders, archive = new_table(client, namespace, "orders"), new_table(client, namespace, "arc")
    client.append(orders, batch([1, 2]))
    with client.transaction() as tx:
        tx.append(archive, batch([1, 2]))
        tx.overwrite(orders, None, "id >= 1")
    assert rows(client, archive) == [(1, "a"), (2, "a")]
    assert rows(client, orders) == []


def test_failed_transaction_changes_neither_table(client: IcegovClient, namespace: str) -> None:
    one, two = new_table(client, namespace, "one"), new_table(client, namespace, "two")
    client.append(one, batch([1]))
    with pytest.raises(BadRequestError), client.transaction() as tx:
        tx.append(one, batch([2]))
        tx.delete_files(two, ["file:///nowhere/not-a-file.parquet"])
    assert rows(client, one) == [(1, "a")]
    assert client.load(two).current_snapshot() is None


@pytest.fixture()
def faulty(proxy: RunningProxy) -> Iterator[tuple[IcegovClient, FaultProxy]]:
    """A client reaching icegov through a fault proxy (answers lost or replaced on the way)."""
    with fault_proxy(proxy.url) as faults:
        yield IcegovClient(faults.url, credential=ADMIN, retry_backoff_s=0.0), faults


def test_lost_answers_neither_duplicate_nor_fail_an_append(
        faulty: tuple[IcegovClient, FaultProxy], namespace: str) -> None:
    client, faults = faulty
    table = new_table(client, namespace)
    dropped = faults.arm(drop_after_commit())  # icegov commits, the answer never arrives
    client.append(table, batch([1]))
    replaced = faults.arm(status_after(504))  # icegov commits, a gateway answers 504
    client.append(table, batch([2]))
    assert dropped.fired == replaced.fired == 1
    assert len(faults.forwarded(table_commit)) == 2  # found by reloading: never sent again
    assert rows(client, table) == [(1, "a"), (2, "a")]
    assert len(client.load(table).metadata.snapshots) == 2


def test_a_request_that_never_arrived_is_sent_again_with_its_snapshot_id(
        faulty: tuple[IcegovClient, FaultProxy], namespace: str) -> None:
    client, faults = faulty
    table = new_table(client, namespace)
    armed = faults.arm(status_before(502), times=2)  # nothing reached icegov, twice
    change = client.prepare_append(client.load(table), batch([1]))
    landed = client.commit(change)
    assert armed.fired == 2
    assert landed.metadata.current_snapshot_id == change.snapshot_id
    assert len(faults.forwarded(table_commit)) == 1
    assert rows(client, table) == [(1, "a")]


def test_retries_give_up_unknown_and_keep_the_files(
        faulty: tuple[IcegovClient, FaultProxy], namespace: str) -> None:
    client, faults = faulty
    table = new_table(client, namespace)
    armed = faults.arm(status_before(502), times=client.retries + 1)
    change = client.prepare_append(client.load(table), batch([1]))
    with pytest.raises(CommitStateUnknownException):
        client.commit(change)
    assert armed.fired == client.retries + 1
    assert client.load(table).current_snapshot() is None
    assert all(change.table.io.new_input(f.file_path).exists() for f in change.written)


def test_a_transaction_whose_answer_was_lost_lands_once(
        faulty: tuple[IcegovClient, FaultProxy], namespace: str) -> None:
    client, faults = faulty
    one, two = new_table(client, namespace, "one"), new_table(client, namespace, "two")
    armed = faults.arm(drop_after_commit(), match=transaction_commit)
    with client.transaction() as tx:
        tx.append(one, batch([1]))
        tx.append(two, batch([2]))
    assert armed.fired == 1
    assert len(faults.forwarded(transaction_commit)) == 1
    assert rows(client, one) == [(1, "a")] and rows(client, two) == [(2, "a")]


def test_another_commits_snapshot_under_the_same_id_is_not_this_operations_landing(
        faulty: tuple[IcegovClient, FaultProxy], namespace: str, proxy: RunningProxy,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The answer is lost, and meanwhile another writer's operation landed with the same
    snapshot id: the client must not report success for rows that are not there."""
    client, faults = faulty
    table = new_table(client, namespace)
    direct = IcegovClient(proxy.url, credential=ADMIN)
    monkeypatch.setattr("proxy.client._new_snapshot_id", lambda _: 4242)
    change = client.prepare_append(client.load(table), batch([1]))
    armed = faults.arm(status_before(502),
                       on_fire=lambda: direct.append(table, batch([99], "z")))
    with pytest.raises(CommitFailedException, match="another commit"):
        client.commit(change)
    assert armed.fired == 1
    assert rows(client, table) == [(99, "z")]
    assert not any(change.table.io.new_input(f.file_path).exists() for f in change.written)
