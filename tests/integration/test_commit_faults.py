"""Faults between icegov and the backing catalog during a commit: no lost or duplicated commit, and
a status the client can trust (issue 7, items 2 and 6).

A fault proxy (tests/support/faults.py) sits between icegov (in forwarding mode) and each backing
catalog: the embedded one served on its own port, and Iceberg's reference catalog. Commits are
made by pyiceberg (its manifests, its snapshot ids) and sent to icegov as pyiceberg sends them; a
fault is armed for exactly the next commit. What must hold:

* a commit that landed answers 200 with the current metadata, never 409;
* a pure append that provably did not land is retried by icegov and answers 200;
* an outcome icegov cannot learn answers 502/504 ``CommitStateUnknownException``;
* afterwards the table holds each append at most once (exactly once after a 200) and no
  snapshot id twice.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table, Transaction
from pyiceberg.types import LongType, NestedField

from proxy.app import create_app
from proxy.catalog import EmbeddedCatalog
from proxy.commits.retry import CommitRetry
from proxy.settings import Timeouts
from tests.support.commit_capture import wire_json
from tests.support.errors import assert_error_model
from tests.support.faults import (
    Fault,
    FaultProxy,
    drop_after_commit,
    fault_proxy,
    reset_after,
    reset_before,
    status_after,
    status_before,
    table_load,
    timeout_after_commit,
    transaction_commit,
)
from tests.support.http import token
from tests.support.servers import serve
from tests.support.settings import ADMIN, settings_for_tests

NAMESPACE = "faults"
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))
NO_CLIENT_RETRIES = {"commit.retry.num-retries": "0"}
SHORT_READ_TIMEOUT = 2.0  # icegov's read timeout in the instance that meets timeout_after_commit
SHORT_RETRIES = CommitRetry(max_attempts=3)  # and its tries of one commit
CLIENT_TIMEOUT = 180.0

LANDED_FIRST = [drop_after_commit(), status_after(500), status_after(502), status_after(503),
                reset_after()]
NOT_LANDED = [status_before(500), status_before(502), status_before(503), reset_before()]


@contextlib.contextmanager
def backing_catalog(backend: str, workdir: Path) -> Iterator[str]:
    """The backing catalog on its own loopback port: the embedded one, or the reference one."""
    if backend == "embedded":
        embedded = EmbeddedCatalog.from_settings(settings_for_tests(workdir))
        try:
            with serve(embedded.app) as url:
                yield url
        finally:
            embedded.catalog.engine.dispose()
        return
    from tests.support.reference_catalog import reference_catalog

    with reference_catalog(workdir) as url:
        yield url


@dataclass(frozen=True)
class FaultStack:
    """icegov → fault proxy → backing catalog; ``short_url`` is an icegov with a short read
    timeout and few tries in front of the same fault proxy."""

    faults: FaultProxy
    url: str
    short_url: str


@pytest.fixture(scope="module")
def stack(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultStack]:
    workdir = tmp_path_factory.mktemp(f"faults-{backend}")
    (workdir / "short").mkdir()
    with backing_catalog(backend, workdir) as upstream, fault_proxy(upstream) as faults:
        icegov = create_app(settings_for_tests(workdir, catalog_uri=faults.url))
        short = create_app(settings_for_tests(
            workdir / "short", catalog_uri=faults.url,
            timeouts=Timeouts(read=SHORT_READ_TIMEOUT), commit_retry=SHORT_RETRIES))
        with serve(icegov) as url, serve(short) as short_url:
            RestCatalog("setup", uri=url, credential=ADMIN).create_namespace_if_not_exists(
                NAMESPACE)
            yield FaultStack(faults, url, short_url)


@pytest.fixture()
def faults(stack: FaultStack) -> Iterator[FaultProxy]:
    stack.faults.disarm_all()
    stack.faults.reset_log()
    yield stack.faults
    stack.faults.disarm_all()


@pytest.fixture()
def catalog(stack: FaultStack) -> RestCatalog:
    return RestCatalog("faults", uri=stack.url, credential=ADMIN)


@pytest.fixture()
def table(catalog: RestCatalog, faults: FaultProxy) -> Table:
    """A fresh table holding one append of ids 1..3 (made before any fault is armed; the fault
    proxy's log starts after it)."""
    created = catalog.create_table(f"{NAMESPACE}.t_{uuid.uuid4().hex[:8]}", SCHEMA,
                                   properties=NO_CLIENT_RETRIES)
    created.append(ids(1, 2, 3))
    faults.reset_log()
    return catalog.load_table(created.name())


def ids(*values: int) -> pa.Table:
    return pa.table({"id": pa.array(values, pa.int64())})


@dataclass(frozen=True)
class PreparedCommit:
    """A commit as pyiceberg would send it, not sent yet."""

    body: dict[str, Any]

    @property
    def snapshot_ids(self) -> list[int]:
        return [u["snapshot"]["snapshot-id"] for u in self.body["updates"]
                if u["action"] == "add-snapshot"]

    @property
    def manifest_lists(self) -> list[str]:
        return [u["snapshot"]["manifest-list"] for u in self.body["updates"]
                if u["action"] == "add-snapshot"]


def prepared(tx: Transaction) -> PreparedCommit:
    """The body pyiceberg's ``commit_transaction`` would send for ``tx``."""
    requirements = [wire_json(r) for r in tx._requirements]
    requirements.append({"type": "assert-table-uuid", "uuid": str(tx.table_metadata.table_uuid)})
    return PreparedCommit({"requirements": requirements,
                           "updates": [wire_json(u) for u in tx._updates]})


def prepared_append(table: Table, *values: int) -> PreparedCommit:
    tx = table.transaction()
    tx.append(ids(*values))
    return prepared(tx)


def send(url: str, table: Table, commit: PreparedCommit) -> httpx.Response:
    """POST the commit to icegov as the admin, at the path pyiceberg would use."""
    namespace, name = table.name()[-2:]
    return post(url, f"namespaces/{namespace}/tables/{name}", commit.body)


def post(url: str, path: str, body: dict[str, Any]) -> httpx.Response:
    """POST ``body`` to ``/v1/{prefix}/{path}`` on icegov as the admin."""
    headers = {"authorization": f"Bearer {token(url, ADMIN)}"}
    with httpx.Client(base_url=url, headers=headers, timeout=CLIENT_TIMEOUT) as http:
        prefix = http.get("/v1/config").json().get("overrides", {}).get("prefix")
        root = f"/v1/{prefix}" if prefix else "/v1"
        return http.post(f"{root}/{path}", json=body)


def table_ids(catalog: RestCatalog, table: Table) -> list[int]:
    return sorted(catalog.load_table(table.name()).scan().to_arrow()["id"].to_pylist())


def snapshot_ids(catalog: RestCatalog, table: Table) -> list[int]:
    """Every snapshot id of the table as it is now, asserted unique."""
    found = [s.snapshot_id for s in catalog.load_table(table.name()).snapshots()]
    assert len(found) == len(set(found)), f"duplicate snapshot ids: {found}"
    return found


def assert_landed_once(response: httpx.Response, catalog: RestCatalog, table: Table,
                       commit: PreparedCommit) -> None:
    """200 with the current metadata, and the commit's snapshot in the table exactly once."""
    assert response.status_code == 200, (response.status_code, response.text)
    [snapshot_id] = commit.snapshot_ids
    assert response.json()["metadata"]["current-snapshot-id"] == snapshot_id
    assert snapshot_ids(catalog, table).count(snapshot_id) == 1


def assert_unknown(response: httpx.Response) -> None:
    assert response.status_code in (502, 504), (response.status_code, response.text)
    assert_error_model(response, response.status_code, "CommitStateUnknownException")


@pytest.mark.parametrize("fault", LANDED_FIRST, ids=str)
def test_an_append_that_landed_before_the_fault_answers_200_once(
        stack: FaultStack, faults: FaultProxy, catalog: RestCatalog, table: Table,
        fault: Fault) -> None:
    commit = prepared_append(table, 10, 11)
    armed = faults.arm(fault)
    response = send(stack.url, table, commit)
    assert armed.fired == 1
    assert_landed_once(response, catalog, table, commit)
    assert table_ids(catalog, table) == [1, 2, 3, 10, 11]
    assert len(faults.forwarded()) == 1  # reconciled by a reload, not sent again


@pytest.mark.parametrize("fault", NOT_LANDED, ids=str)
def test_an_append_that_did_not_land_is_retried_and_answers_200(
        stack: FaultStack, faults: FaultProxy, catalog: RestCatalog, table: Table,
        fault: Fault) -> None:
    commit = prepared_append(table, 10, 11)
    armed = faults.arm(fault)
    response = send(stack.url, table, commit)
    assert armed.fired == 1
    assert_landed_once(response, catalog, table, commit)
    assert table_ids(catalog, table) == [1, 2, 3, 10, 11]
    assert len(faults.forwarded()) == 1  # the faulted attempt never reached the backing


def test_an_append_whose_answer_times_out_after_it_landed_answers_200_once(
        stack: FaultStack, faults: FaultProxy, catalog: RestCatalog, table: Table) -> None:
    commit = prepared_append(table, 10, 11)
    armed = faults.arm(timeout_after_commit())
    response = send(stack.short_url, table, commit)
    assert armed.fired == 1
    assert_landed_once(response, catalog, table, commit)
    assert table_ids(catalog, table) == [1, 2, 3, 10, 11]
    assert len(faults.forwarded()) == 1


@pytest.mark.parametrize("fault", [drop_after_commit(), status_after(502), reset_before()],
                         ids=str)
def test_pyiceberg_appends_through_a_fault_without_an_error(
        faults: FaultProxy, catalog: RestCatalog, table: Table, fault: Fault) -> None:
    armed = faults.arm(fault)
    table.append(ids(10, 11))  # the client's own retries are off: icegov must answer 200
    assert armed.fired == 1
    assert table_ids(catalog, table) == [1, 2, 3, 10, 11]
    assert len(snapshot_ids(catalog, table)) == 2


def test_an_unknowable_outcome_is_a_commit_state_unknown_and_lands_at_most_once(
        stack: FaultStack, faults: FaultProxy, catalog: RestCatalog, table: Table) -> None:
    """The answer is lost and every reload fails too: icegov cannot know, and says so."""
    commit = prepared_append(table, 10, 11)

    def reloads_fail() -> None:
        faults.arm(status_before(503), times=10_000, match=table_load)

    armed = faults.arm(drop_after_commit(), on_fire=reloads_fail)
    response = send(stack.url, table, commit)
    faults.disarm_all()
    assert armed.fired == 1
    assert_unknown(response)
    [snapshot_id] = commit.snapshot_ids
    assert snapshot_ids(catalog, table).count(snapshot_id) == 1  # it did land, once
    assert table_ids(catalog, table) == [1, 2, 3, 10, 11]


def test_an_append_that_never_reaches_the_backing_is_never_reported_landed(
        stack: FaultStack, faults: FaultProxy, catalog: RestCatalog, table: Table) -> None:
    """Every attempt is refused before the backing: bounded retries, then an honest failure."""
    commit = prepared_append(table, 10, 11)
    armed = faults.arm(status_before(503), times=10_000)
    response = send(stack.short_url, table, commit)
    faults.disarm_all()
    assert armed.fired == SHORT_RETRIES.max_attempts
    assert not faults.forwarded()
    if response.status_code == 409:  # allowed: nothing landed
        assert_error_model(response, 409, "CommitFailedException")
    else:
        assert_unknown(response)
    assert commit.snapshot_ids[0] not in snapshot_ids(catalog, table)
    assert table_ids(catalog, table) == [1, 2, 3]


@pytest.mark.parametrize("fault", [drop_after_commit(), status_after(502), reset_after()],
                         ids=str)
def test_a_delete_that_landed_before_the_fault_answers_200(
        stack: FaultStack, faults: FaultProxy, catalog: RestCatalog, table: Table,
        fault: Fault) -> None:
    tx = table.transaction()
    tx.delete("id <= 3")
    commit = prepared(tx)
    armed = faults.arm(fault)
    response = send(stack.url, table, commit)
    assert armed.fired == 1
    assert_landed_once(response, catalog, table, commit)
    assert table_ids(catalog, table) == []


@pytest.mark.parametrize("fault", [status_before(502), reset_before()], ids=str)
def test_a_delete_that_did_not_land_is_never_reported_as_a_conflict_that_landed(
        stack: FaultStack, faults: FaultProxy, catalog: RestCatalog, table: Table,
        fault: Fault) -> None:
    """Not a pure append: icegov may resend it unchanged (200), or answer 409 (nothing landed)
    or CommitStateUnknown; whichever it answers, the table must agree."""
    tx = table.transaction()
    tx.delete("id <= 3")
    commit = prepared(tx)
    armed = faults.arm(fault)
    response = send(stack.url, table, commit)
    assert armed.fired == 1
    [snapshot_id] = commit.snapshot_ids
    landed = snapshot_ids(catalog, table).count(snapshot_id)
    if response.status_code == 200:
        assert_landed_once(response, catalog, table, commit)
    elif response.status_code == 409:
        assert_error_model(response, 409, "CommitFailedException")
        assert landed == 0
        assert table_ids(catalog, table) == [1, 2, 3]
    else:
        assert_unknown(response)
        assert landed <= 1


@pytest.mark.parametrize("fault", [drop_after_commit(), status_after(500)], ids=str)
def test_a_metadata_only_commit_whose_state_holds_answers_200(
        stack: FaultStack, faults: FaultProxy, catalog: RestCatalog, table: Table,
        fault: Fault) -> None:
    tx = table.transaction()
    tx.set_properties({"owner-team": "faults"})
    commit = prepared(tx)
    armed = faults.arm(fault)
    response = send(stack.url, table, commit)
    assert armed.fired == 1
    assert response.status_code == 200, (response.status_code, response.text)
    assert response.json()["metadata"]["properties"]["owner-team"] == "faults"
    reloaded = catalog.load_table(table.name())
    assert reloaded.properties["owner-team"] == "faults"
    assert len(faults.forwarded()) == 1


@pytest.mark.parametrize("fault", [drop_after_commit(), status_after(502), status_before(503)],
                         ids=str)
def test_a_transaction_of_two_appends_through_a_fault_lands_once(
        stack: FaultStack, faults: FaultProxy, catalog: RestCatalog, table: Table,
        fault: Fault) -> None:
    other = catalog.create_table(f"{NAMESPACE}.t_{uuid.uuid4().hex[:8]}", SCHEMA,
                                 properties=NO_CLIENT_RETRIES)
    commits = [(table, prepared_append(table, 10)), (other, prepared_append(other, 20))]
    changes = [{"identifier": {"namespace": [NAMESPACE], "name": t.name()[-1]}, **c.body}
               for t, c in commits]
    armed = faults.arm(fault, match=transaction_commit)
    response = post(stack.url, "transactions/commit", {"table-changes": changes})
    assert armed.fired == 1
    assert response.status_code == 204, (response.status_code, response.text)
    for t, commit in commits:
        assert snapshot_ids(catalog, t).count(commit.snapshot_ids[0]) == 1
    assert table_ids(catalog, table) == [1, 2, 3, 10]
    assert table_ids(catalog, other) == [20]
    assert len(faults.forwarded(transaction_commit)) == 1


def test_an_unknown_outcome_is_not_reconciled_by_another_commits_snapshot(
        stack: FaultStack, faults: FaultProxy, catalog: RestCatalog, table: Table,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """While this commit's outcome is unknown, another writer's commit that used the same
    snapshot id lands on the backing: the id in the table is not this commit's landing (its
    manifest list is not one icegov sent), so the answer is a 409 with nothing of it landed,
    never a 200 "reconciled" without its rows."""
    commit = prepared_append(table, 10, 11)
    [taken] = commit.snapshot_ids
    with monkeypatch.context() as patched:
        patched.setattr(type(table.metadata), "new_snapshot_id", lambda _: taken)
        impostor = prepared_append(table, 99)
    assert impostor.snapshot_ids == [taken]

    def impostor_lands() -> None:
        assert post_to_backing(faults.upstream, table, impostor).status_code == 200

    armed = faults.arm(status_before(502), on_fire=impostor_lands)
    response = send(stack.url, table, commit)
    assert armed.fired == 1, response.text
    assert_error_model(response, 409, "CommitFailedException")
    assert table_ids(catalog, table) == [1, 2, 3, 99]
    assert [s.manifest_list for s in catalog.load_table(table.name()).snapshots()
            if s.snapshot_id == taken] == [impostor.manifest_lists[0]]


def post_to_backing(upstream: str, table: Table, commit: PreparedCommit) -> httpx.Response:
    """POST the commit straight to the backing catalog (no icegov, no fault proxy)."""
    namespace, name = table.name()[-2:]
    with httpx.Client(base_url=upstream, timeout=CLIENT_TIMEOUT) as http:
        prefix = http.get("/v1/config").json().get("overrides", {}).get("prefix")
        root = f"/v1/{prefix}" if prefix else "/v1"
        return http.post(f"{root}/namespaces/{namespace}/tables/{name}", json=commit.body)
