"""Compaction yields to writers, per table property, against both backing catalogs.

A writer's DELETE is built on snapshot P; a compaction (a data-equivalent ``rewrite-files``) lands
on P before the DELETE is sent. With ``icegov.compaction.yield-to-writers=true`` icegov takes the
rewrite off the branch and lands the DELETE on P; without it the DELETE gets its 409 and nothing
of it lands. Anything else between P and the DELETE (an append) is never undone.
"""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField

from proxy.commits.compaction import YIELD_PROPERTY
from proxy.commits.operations import content_file_to_json
from tests.conftest import RunningProxy
from tests.support.commit_capture import wire_json
from tests.support.errors import assert_error_model
from tests.support.http import as_principal, audit_records
from tests.support.settings import ADMIN

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


def ids(*values: int) -> pa.Table:
    return pa.table({"id": pa.array(values, pa.int64())})


def table_with_two_files(catalog: RestCatalog, yields: bool) -> tuple[str, Table]:
    catalog.create_namespace_if_not_exists("yield")
    name = f"t{uuid.uuid4().hex[:8]}"
    properties = {YIELD_PROPERTY: "true"} if yields else {}
    table = catalog.create_table(f"yield.{name}", SCHEMA, properties=properties)
    table.append(ids(1, 2))
    table.append(ids(3))
    return name, catalog.load_table(f"yield.{name}")


def pending_delete(table: Table, expression: str) -> dict[str, Any]:
    tx = table.transaction()
    tx.delete(expression)
    return {"requirements": [wire_json(r) for r in tx._requirements],
            "updates": [wire_json(u) for u in tx._updates]}


def compact(url: str, name: str, table: Table) -> None:
    """Rewrite every data file of ``table`` into one, through icegov's ``rewrite-files``."""
    current = table.current_snapshot()
    assert current is not None
    old = [e.data_file.file_path for m in current.manifests(table.io)
           for e in m.fetch_manifest_entry(table.io)]
    new = list(_dataframe_to_data_files(table.metadata, table.scan().to_arrow(), table.io))
    body = {"updates": [{
        "action": "rewrite-files", "deleted-data-files": old,
        "added-data-files": [content_file_to_json(f, table.metadata.spec(),
                                                  table.metadata.schema()) for f in new]}]}
    with as_principal(url, ADMIN) as client:
        response = client.post(f"/v1/namespaces/yield/tables/{name}", json=body)
    assert response.status_code == 200, response.text


def send(url: str, name: str, body: dict[str, Any]) -> Any:
    with as_principal(url, ADMIN) as client:
        return client.post(f"/v1/namespaces/yield/tables/{name}", json=body)


def rows_of(catalog: RestCatalog, name: str) -> list[int]:
    return sorted(catalog.load_table(f"yield.{name}").scan().to_arrow()["id"].to_pylist())


def ancestry(table: Table) -> list[int]:
    chain, snapshot = [], table.current_snapshot()
    while snapshot is not None:
        chain.append(snapshot.snapshot_id)
        parent = snapshot.parent_snapshot_id
        snapshot = None if parent is None else table.snapshot_by_id(parent)
    return chain


def test_a_delete_lands_when_only_a_compaction_came_in_between(proxy: RunningProxy) -> None:
    catalog = RestCatalog("admin", uri=proxy.url, credential=ADMIN)
    name, table = table_with_two_files(catalog, yields=True)
    base = table.metadata.current_snapshot_id
    delete = pending_delete(table, "id == 3")
    compact(proxy.url, name, table)
    compacted = catalog.load_table(f"yield.{name}").metadata.current_snapshot_id

    response = send(proxy.url, name, delete)

    assert response.status_code == 200, response.text
    assert rows_of(catalog, name) == [1, 2]
    after = catalog.load_table(f"yield.{name}")
    chain = ancestry(after)
    assert chain[0] == delete["updates"][0]["snapshot"]["snapshot-id"] and chain[1] == base
    assert compacted not in chain and after.snapshot_by_id(compacted or 0) is not None
    record = [r for r in audit_records(proxy.audit_log) if r["endpoint"] == "commit_table"][-1]
    assert record["evidence"][0]["compaction_yielded"]["rewrite_snapshot_id"] == compacted


def test_without_the_property_the_delete_gets_its_conflict(proxy: RunningProxy) -> None:
    catalog = RestCatalog("admin", uri=proxy.url, credential=ADMIN)
    name, table = table_with_two_files(catalog, yields=False)
    delete = pending_delete(table, "id == 3")
    compact(proxy.url, name, table)
    before = catalog.load_table(f"yield.{name}").metadata

    assert_error_model(send(proxy.url, name, delete), 409, "CommitFailedException")
    after = catalog.load_table(f"yield.{name}").metadata
    assert rows_of(catalog, name) == [1, 2, 3]
    assert after.current_snapshot_id == before.current_snapshot_id
    assert len(after.snapshots) == len(before.snapshots)


@pytest.mark.parametrize("between", ["append", "two-compactions"])
def test_nothing_but_one_compaction_is_ever_undone(proxy: RunningProxy, between: str) -> None:
    catalog = RestCatalog("admin", uri=proxy.url, credential=ADMIN)
    name, table = table_with_two_files(catalog, yields=True)
    delete = pending_delete(table, "id == 3")
    if between == "append":
        compact(proxy.url, name, table)
        catalog.load_table(f"yield.{name}").append(ids(4))
    else:
        compact(proxy.url, name, table)
        compact(proxy.url, name, catalog.load_table(f"yield.{name}"))
    before = catalog.load_table(f"yield.{name}").metadata

    assert_error_model(send(proxy.url, name, delete), 409, "CommitFailedException")
    after = catalog.load_table(f"yield.{name}").metadata
    assert after.current_snapshot_id == before.current_snapshot_id
    assert rows_of(catalog, name) == ([1, 2, 3, 4] if between == "append" else [1, 2, 3])


DELETER = "deleter:deleter-secret"


@pytest.mark.parametrize("admin_rows", [(1, 2, 30), (1, 3)])
def test_a_rewrite_that_changed_rows_is_never_yielded_over(proxy: RunningProxy,
                                                           admin_rows: tuple[int, ...]) -> None:
    """An admin's ``rewrite-files`` that changes a row (or drops one) has a compaction's counts
    but is no REWRITE: a DELETE-only principal's stale commit gets its 409, and the admin's
    change stays — no row lost, none the admin removed back."""
    catalog = RestCatalog("admin", uri=proxy.url, credential=ADMIN)
    catalog.create_namespace_if_not_exists("demo")
    name = f"y{uuid.uuid4().hex[:8]}"
    table = catalog.create_table(f"demo.{name}", SCHEMA, properties={YIELD_PROPERTY: "true"})
    table.append(ids(1, 2))
    table.append(ids(3))
    table = catalog.load_table(f"demo.{name}")
    delete = pending_delete(table, "id == 3")
    current = table.current_snapshot()
    assert current is not None
    body = {"updates": [{
        "action": "rewrite-files",
        "deleted-data-files": [e.data_file.file_path for m in current.manifests(table.io)
                               for e in m.fetch_manifest_entry(table.io)],
        "added-data-files": [content_file_to_json(f, table.metadata.spec(),
                                                  table.metadata.schema())
                             for f in _dataframe_to_data_files(table.metadata, ids(*admin_rows),
                                                               table.io)]}]}
    with as_principal(proxy.url, ADMIN) as client:
        assert client.post(f"/v1/namespaces/demo/tables/{name}", json=body).status_code == 200
    before = catalog.load_table(f"demo.{name}").metadata

    with as_principal(proxy.url, DELETER) as client:
        stale = client.post(f"/v1/namespaces/demo/tables/{name}", json=delete)
    assert_error_model(stale, 409, "CommitFailedException")
    after = catalog.load_table(f"demo.{name}").metadata
    assert after.current_snapshot_id == before.current_snapshot_id
    assert len(after.snapshots) == len(before.snapshots)
    landed = catalog.load_table(f"demo.{name}").scan().to_arrow()["id"].to_pylist()
    assert sorted(landed) == list(admin_rows)
