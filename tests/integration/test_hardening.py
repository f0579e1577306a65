"""Walking around the gate, as an attacker would, on both backing catalogs: names, endpoints the
backing never offered, the order of decisions, confinement, retention and stale commits.
After every refused write the table's rows and snapshots are unchanged."""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField

from tests.conftest import RunningProxy
from tests.support.commit_capture import wire_json
from tests.support.errors import assert_error_model
from tests.support.http import as_principal
from tests.support.settings import ADMIN

WRITER = "writer:writer-secret"
ANALYST = "analyst:analyst-secret"
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


def rows_of(batch: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(batch, pa.int64())})


@pytest.fixture()
def admin(proxy: RunningProxy) -> RestCatalog:
    catalog = RestCatalog("admin", uri=proxy.url, credential=ADMIN)
    for namespace in ("demo", "secret"):
        catalog.create_namespace_if_not_exists(namespace)
    return catalog


@pytest.fixture()
def demo_table(admin: RestCatalog) -> Table:
    table = admin.create_table(f"demo.g{uuid.uuid4().hex[:8]}", SCHEMA)
    table.append(rows_of([1, 2]))
    return admin.load_table(table.name())


@pytest.fixture()
def secret_table(admin: RestCatalog) -> Table:
    table = admin.create_table(f"secret.s{uuid.uuid4().hex[:8]}", SCHEMA)
    table.append(rows_of([42]))
    return admin.load_table(table.name())


@pytest.fixture()
def analyst(proxy: RunningProxy) -> Iterator[httpx.Client]:
    with as_principal(proxy.url, ANALYST) as client:
        yield client


@pytest.fixture()
def writer(proxy: RunningProxy) -> Iterator[httpx.Client]:
    with as_principal(proxy.url, WRITER) as client:
        yield client


def path_of(table: Table) -> str:
    namespace, name = table.name()
    return f"/v1/namespaces/{namespace}/tables/{name}"


def state(admin: RestCatalog, table: Table) -> tuple[list[int], list[int]]:
    """The table's rows and snapshot ids, as admin sees them now."""
    loaded = admin.load_table(table.name())
    ids = sorted(loaded.scan().to_arrow()["id"].to_pylist())
    return ids, [s.snapshot_id for s in loaded.snapshots()]


def staged_append(proxy: RunningProxy, credential: str, table: Table,
                  batch: list[int]) -> dict[str, Any]:
    """The REST body of a real append by ``credential``: manifests written, not committed."""
    loaded = RestCatalog("stager", uri=proxy.url, credential=credential).load_table(table.name())
    tx = loaded.transaction()
    tx.append(rows_of(batch))
    return {"requirements": [wire_json(r) for r in tx._requirements],
            "updates": [wire_json(u) for u in tx._updates]}


def snapshot_update(body: dict[str, Any]) -> dict[str, Any]:
    return next(u for u in body["updates"] if u["action"] == "add-snapshot")


# ----------------------------------------------------------------------------------- names


@pytest.mark.parametrize("path", [
    "/v1/namespaces/demo%1F..%1Fsecret/tables/{t}",
    "/v1/namespaces/demo%1F%2E%2E%1Fsecret/tables/{t}",
    "/v1/namespaces/secret%1F/tables/{t}",
    "/v1/namespaces/%1Fsecret/tables/{t}",
    "/v1/namespaces/demo/tables/x%2F..%2F..%2Fsecret%2F{t}",
    "/v1/namespaces/demo/tables/..%5Csecret%5C{t}",
    "/v1/namespaces/secret%00/tables/{t}",
])
def test_path_tricks_never_reach_a_hidden_table(analyst: httpx.Client, secret_table: Table,
                                                path: str) -> None:
    response = analyst.get(path.format(t=secret_table.name()[1]))
    assert_error_model(response, 400, "BadRequestException")
    # nothing of the table's metadata (its row holds 42; its random name may contain "42")
    assert "42" not in response.text.replace(secret_table.name()[1], "")
    assert "metadata" not in response.text


def test_a_writer_cannot_append_through_a_dot_dot_namespace(
        proxy: RunningProxy, admin: RestCatalog, writer: httpx.Client,
        secret_table: Table) -> None:
    before = state(admin, secret_table)
    body = staged_append(proxy, ADMIN, secret_table, [7])
    name = secret_table.name()[1]
    for path in (f"/v1/namespaces/demo%1F..%1Fsecret/tables/{name}",
                 f"/v1/namespaces/demo/tables/..%2Fsecret%2F{name}"):
        assert_error_model(writer.post(path, json=body), 400)
    transaction = {"table-changes": [
        {"identifier": {"namespace": ["demo", "..", "secret"], "name": name}, **body}]}
    assert_error_model(writer.post("/v1/transactions/commit", json=transaction), 400)
    assert state(admin, secret_table) == before


def test_a_dotted_top_level_namespace_is_not_governed_by_rules_for_its_prefix(
        admin: RestCatalog, analyst: httpx.Client) -> None:
    with as_principal(admin.uri, ADMIN) as root:
        created = root.post("/v1/namespaces", json={"namespace": ["demo.priv"]})
    assert created.status_code in (200, 400), created.text  # the embedded catalog refuses dots
    assert_error_model(analyst.get("/v1/namespaces/demo.priv"), 404, "NoSuchNamespaceException")
    assert_error_model(analyst.get("/v1/namespaces/demo.priv/tables"), 404)
    assert ["demo.priv"] not in analyst.get("/v1/namespaces").json()["namespaces"]


def test_an_unmapped_prefix_is_404(analyst: httpx.Client) -> None:
    assert_error_model(analyst.get("/v1/another-catalog/namespaces"), 404)
    assert_error_model(analyst.get("/v1/another-catalog/namespaces/demo"), 404)


# ------------------------------------------------------------- endpoints the backing never offered


def test_planning_endpoints_are_icegovs_own_and_refuse_garbage(
        admin: RestCatalog, analyst: httpx.Client, demo_table: Table) -> None:
    before = state(admin, demo_table)
    path = path_of(demo_table)
    assert_error_model(analyst.post(f"{path}/plan", json={"updates": []}), 400)
    assert_error_model(analyst.post(f"{path}/tasks", json={"plan-task": "x"}), 400)
    assert_error_model(analyst.get(f"{path}/plan/x"), 404, "NoSuchPlanIdException")
    assert_error_model(analyst.delete(f"{path}/plan/x?purgeRequested=true"), 404)
    assert state(admin, demo_table) == before
    assert "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/plan" in \
        analyst.get("/v1/config").json()["endpoints"]


# ---------------------------------------------------------------------- the order of decisions


def test_no_right_at_all_looks_the_same_for_a_hidden_and_a_missing_table(
        proxy: RunningProxy, admin: RestCatalog, analyst: httpx.Client,
        secret_table: Table) -> None:
    before = state(admin, secret_table)
    body = staged_append(proxy, ADMIN, secret_table, [7])
    answers = []
    for name in (secret_table.name()[1], "does_not_exist"):
        for manifest_list in ("/etc/passwd", "/nonexistent/x.avro"):
            forged = copy.deepcopy(body)
            snapshot_update(forged)["snapshot"]["manifest-list"] = manifest_list
            answers.append(analyst.post(f"/v1/namespaces/secret/tables/{name}", json=forged))
    errors = [assert_error_model(a, 404, "NoSuchTableException") for a in answers]
    assert len({e["message"].replace(secret_table.name()[1], "?").replace("does_not_exist", "?")
                for e in errors}) == 1
    huge = {"updates": [{"action": "set-properties", "updates": {"k": "v"}}] * 3000}
    assert_error_model(analyst.post(path_of(secret_table), json=huge), 404)
    assert state(admin, secret_table) == before


def test_no_write_right_is_403_before_any_file_is_read(
        proxy: RunningProxy, admin: RestCatalog, analyst: httpx.Client,
        demo_table: Table) -> None:
    before = state(admin, demo_table)
    body = staged_append(proxy, ADMIN, demo_table, [7])
    answers = []
    for manifest_list in ("/etc/passwd", "/nonexistent/x.avro"):
        snapshot_update(body)["snapshot"]["manifest-list"] = manifest_list
        answers.append(analyst.post(path_of(demo_table), json=body))
    first, second = (assert_error_model(a, 403, "ForbiddenException") for a in answers)
    assert first == second
    assert state(admin, demo_table) == before


def test_files_outside_the_table_are_refused_without_being_read(
        proxy: RunningProxy, admin: RestCatalog, writer: httpx.Client, demo_table: Table,
        secret_table: Table) -> None:
    before = state(admin, demo_table)
    body = staged_append(proxy, WRITER, demo_table, [7])
    foreign_list = admin.load_table(secret_table.name()).current_snapshot()
    assert foreign_list is not None
    messages = []
    for manifest_list in ("/etc/passwd", "/nonexistent/x.avro", foreign_list.manifest_list):
        forged = copy.deepcopy(body)
        snapshot_update(forged)["snapshot"]["manifest-list"] = manifest_list
        error = assert_error_model(writer.post(path_of(demo_table), json=forged), 400)
        messages.append(error["message"])
    assert all("not under the table's locations" in m for m in messages), messages
    assert not any(word in m for m in messages for word in ("Errno", "No such", "ermission"))
    assert state(admin, demo_table) == before


# ------------------------------------------------------------------ retention and stale bases


def test_retention_cannot_ride_along_with_an_insert(
        proxy: RunningProxy, admin: RestCatalog, writer: httpx.Client,
        demo_table: Table) -> None:
    before = state(admin, demo_table)
    body = staged_append(proxy, WRITER, demo_table, [7])
    for update in body["updates"]:
        if update["action"] == "set-snapshot-ref":
            update["max-snapshot-age-ms"] = 1
            update["min-snapshots-to-keep"] = 1
    error = assert_error_model(writer.post(path_of(demo_table), json=body), 403)
    assert "MANAGE_SNAPSHOTS" in error["message"]
    assert state(admin, demo_table) == before

    plain = staged_append(proxy, WRITER, demo_table, [7])
    assert writer.post(path_of(demo_table), json=plain).status_code == 200
    assert state(admin, demo_table)[0] == [1, 2, 7]


def test_a_stale_unpinned_append_never_drops_a_concurrent_one(
        proxy: RunningProxy, admin: RestCatalog, writer: httpx.Client,
        demo_table: Table) -> None:
    stale = staged_append(proxy, WRITER, demo_table, [7])
    stale["requirements"] = []  # the client did not pin its base
    admin.load_table(demo_table.name()).append(rows_of([100]))
    landed = state(admin, demo_table)

    response = writer.post(path_of(demo_table), json=stale)
    assert response.status_code in (403, 409), response.text
    assert state(admin, demo_table) == landed


@pytest.mark.parametrize("stamp", [1, 10**13 * 9, "three minutes ahead"])
def test_a_snapshot_out_of_time_order_is_refused(proxy: RunningProxy, admin: RestCatalog,
                                                 writer: httpx.Client, demo_table: Table,
                                                 stamp: int | str) -> None:
    """Java readers refuse a snapshot log that goes back in time: one writer must not be able
    to make a table unloadable for everyone."""
    before = state(admin, demo_table)
    body = staged_append(proxy, WRITER, demo_table, [7])
    ahead = int(time.time() * 1000) + 3 * 60_000  # taken now: the test may run minutes later
    snapshot_update(body)["snapshot"]["timestamp-ms"] = ahead if isinstance(stamp, str) else stamp
    error = assert_error_model(writer.post(path_of(demo_table), json=body), 400)
    assert "out of order" in error["message"]
    assert state(admin, demo_table) == before


def test_snapshots_of_one_commit_are_ordered_among_themselves(
        proxy: RunningProxy, admin: RestCatalog, writer: httpx.Client,
        demo_table: Table) -> None:
    """A future-dated snapshot followed by a present one in the same commit: each alone is
    within tolerance of the base, together the log goes back in time."""
    before = state(admin, demo_table)
    first = staged_append(proxy, WRITER, demo_table, [7])
    snapshot = snapshot_update(first)["snapshot"]
    second = copy.deepcopy(snapshot_update(first))
    second["snapshot"].update({"snapshot-id": snapshot["snapshot-id"] + 1,
                               "parent-snapshot-id": snapshot["snapshot-id"],
                               "sequence-number": snapshot.get("sequence-number", 0) + 1})
    snapshot["timestamp-ms"] = int(time.time() * 1000) + 50_000
    second["snapshot"]["timestamp-ms"] = snapshot["timestamp-ms"] - 2 * 60_000
    first["updates"].append(second)
    first["updates"].append({"action": "set-snapshot-ref", "ref-name": "main", "type": "branch",
                             "snapshot-id": second["snapshot"]["snapshot-id"]})
    error = assert_error_model(writer.post(path_of(demo_table), json=first), 400)
    assert "out of order" in error["message"]
    assert state(admin, demo_table) == before


def test_a_sequence_number_that_does_not_rise_is_a_conflict(
        proxy: RunningProxy, admin: RestCatalog, writer: httpx.Client,
        demo_table: Table) -> None:
    before = state(admin, demo_table)
    body = staged_append(proxy, WRITER, demo_table, [7])
    snapshot_update(body)["snapshot"]["sequence-number"] = 1
    response = writer.post(path_of(demo_table), json=body)
    assert_error_model(response, 409, "CommitFailedException")
    assert state(admin, demo_table) == before
