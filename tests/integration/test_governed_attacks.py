"""Hostile commits and reads by governed principals (issue 21), through a running icegov on the
embedded catalog, with raw HTTP and PyIceberg only (no Spark).

Each test crafts what a hostile engine could send on top of the governed snapshot it was served
(its manifest list keeps every governed manifest, as a real engine's would) and checks that
nothing but an INSERT lands, and that what admin then reads of the base table is unchanged.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    write_manifest,
    write_manifest_list,
)
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.table import Table
from pyiceberg.typedef import Record

from proxy.commits.operations.writer import DeleteManifestWriter
from tests.support.governed_reads import build_mixed_orders, local_path, paths_in
from tests.support.http import as_principal
from tests.support.read_tables import (
    ANALYST_WRITER,
    CUSTOMERS,
    EU_ANALYST,
    ORDERS,
    Served,
    build_customers,
    build_orders,
    served,
)
from tests.support.settings import ADMIN

EMAIL_FIELD_ID = 3
ORDERS_PATH = "/v1/namespaces/demo/tables/orders"
_REFUSED = "may only add rows"


@pytest.fixture()
def proxy(tmp_path: Path) -> Iterator[Served]:
    with served("embedded", tmp_path) as running:
        admin = RestCatalog("admin", uri=running.url, credential=ADMIN)
        build_mixed_orders(admin)
        build_customers(admin)
        yield running


def _admin_ids(url: str, identifier: str) -> list[int]:
    table = RestCatalog("admin", uri=url, credential=ADMIN).load_table(identifier)
    return sorted(int(v) for v in table.scan(selected_fields=("id",)).to_arrow()
                  .column("id").to_pylist())


def _snapshot_ids(url: str, identifier: str) -> list[int]:
    table = RestCatalog("admin", uri=url, credential=ADMIN).load_table(identifier)
    return [s.snapshot_id for s in table.metadata.snapshots]


def _equality_delete(table: Table, field_id: int, name: str, value: str) -> DataFile:
    """An equality delete file (one value of one string column) under the table's location."""
    path = f"{table.location()}/data/eq-{uuid.uuid4()}.parquet"
    schema = pa.schema([pa.field(name, pa.string(), True,
                                 {b"PARQUET:field_id": str(field_id).encode()})])
    with table.io.new_output(path).create() as out:
        pq.write_table(pa.table({name: pa.array([value], pa.string())}, schema=schema), out)
    return DataFile.from_args(
        content=DataFileContent.EQUALITY_DELETES, file_path=path,
        file_format=FileFormat.PARQUET, partition=Record(), record_count=1,
        file_size_in_bytes=len(table.io.new_input(path)), equality_ids=[field_id])


def _delete_manifest(table: Table, snapshot_id: int, delete: DataFile) -> ManifestFile:
    path = f"{table.location()}/metadata/m-{uuid.uuid4()}.avro"
    with DeleteManifestWriter(UNPARTITIONED_PARTITION_SPEC, table.schema(),
                              table.io.new_output(path), snapshot_id, "null") as writer:
        writer.add_entry(ManifestEntry.from_args(
            status=ManifestEntryStatus.ADDED, snapshot_id=snapshot_id, data_file=delete))
    return writer.to_manifest_file()


def _on_governed(table: Table, added: list[ManifestFile], snapshot_id: int,
                 operation: str) -> dict[str, Any]:
    """A commit of one snapshot whose manifest list keeps every governed manifest of the
    governed current snapshot ``table`` was served, beside ``added``."""
    parent = table.current_snapshot()
    assert parent is not None
    governed = list(parent.manifests(table.io))
    sequence = table.metadata.last_sequence_number + 1
    listed = f"{table.location()}/metadata/snap-{snapshot_id}-{uuid.uuid4()}.avro"
    with write_manifest_list(2, table.io.new_output(listed), snapshot_id, parent.snapshot_id,
                             sequence, "null") as writer:
        writer.add_manifests([*added, *governed])
    snapshot = {"snapshot-id": snapshot_id, "parent-snapshot-id": parent.snapshot_id,
                "sequence-number": sequence, "timestamp-ms": int(time.time() * 1000),
                "manifest-list": listed, "summary": {"operation": operation},
                "schema-id": table.schema().schema_id}
    return {"requirements": [{"type": "assert-ref-snapshot-id", "ref": "main",
                              "snapshot-id": parent.snapshot_id}],
            "updates": [{"action": "add-snapshot", "snapshot": snapshot},
                        {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch",
                         "snapshot-id": snapshot_id}]}


def test_an_equality_delete_on_a_masked_column_built_on_a_governed_snapshot_is_refused(
        proxy: Served) -> None:
    """analyst-writer (email masked, DELETE allowed) may not delete by the real value of the
    masked column: a row vanishing would confirm its guess of a value it may not read."""
    before = _admin_ids(proxy.url, CUSTOMERS)
    table = RestCatalog("aw", uri=proxy.url, credential=ANALYST_WRITER).load_table(CUSTOMERS)
    snapshot_id = int(time.time() * 1000)
    delete = _equality_delete(table, EMAIL_FIELD_ID, "email", "bob@example.org")
    body = _on_governed(table, [_delete_manifest(table, snapshot_id, delete)], snapshot_id,
                        "delete")
    with as_principal(proxy.url, ANALYST_WRITER) as client:
        answer = client.post("/v1/namespaces/demo/tables/customers", json=body)
    assert answer.status_code == 403, answer.text
    assert _REFUSED in answer.json()["error"]["message"]
    assert _admin_ids(proxy.url, CUSTOMERS) == before


def test_a_build_that_fails_names_no_base_file_to_the_restricted_principal(
        proxy: Served) -> None:
    """Base data files that cannot be read fail their governed copies: eu-analyst gets 503, and
    neither its message nor anything else in the answer names a base file (its path is for the
    operator's log)."""
    admin = as_principal(proxy.url, ADMIN).get(ORDERS_PATH).json()
    table = RestCatalog("admin", uri=proxy.url, credential=ADMIN).load_table(ORDERS)
    base_files = {task.file.file_path for task in table.scan().plan_files()}
    for path in base_files:
        local_path(path).write_bytes(b"not parquet")
    with as_principal(proxy.url, EU_ANALYST) as client:
        answer = client.get(ORDERS_PATH)
    assert answer.status_code == 503, answer.text
    named = paths_in(answer.json()) | {p for p in base_files if local_path(p).name in answer.text}
    assert not named, f"the answer names base files: {named}"
    assert admin["metadata"]["location"] not in answer.text


def _lying_partition_manifest(table: Table, snapshot_id: int) -> ManifestFile:
    """A data manifest adding one file whose entry says region=eu of a US row."""
    rows = pa.table({"order_id": pa.array([666], pa.int64()), "region": ["us"],
                     "amount": pa.array([999], pa.int64())}).cast(schema_to_pyarrow(table.schema()))
    path = f"{table.location()}/data/region=eu/lie-{uuid.uuid4()}.parquet"
    with table.io.new_output(path).create() as out:
        pq.write_table(rows, out)
    data_file = DataFile.from_args(
        content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET,
        partition=Record("eu"), record_count=1, file_size_in_bytes=len(table.io.new_input(path)))
    data_file.spec_id = table.spec().spec_id
    manifest = f"{table.location()}/metadata/m-{uuid.uuid4()}.avro"
    with write_manifest(2, table.spec(), table.schema(), table.io.new_output(manifest),
                        snapshot_id, "null") as writer:
        writer.add_entry(ManifestEntry.from_args(
            status=ManifestEntryStatus.ADDED, snapshot_id=snapshot_id, data_file=data_file))
    return writer.to_manifest_file()


def test_an_insert_whose_partition_values_lie_is_refused(proxy: Served) -> None:
    """A file whose entry says region=eu but holds a US row is refused (400, nothing landed):
    it would hide the row from region = 'us' scans and fail every later governed build."""
    admin = RestCatalog("admin", uri=proxy.url, credential=ADMIN)
    build_orders(admin)
    table = RestCatalog("eu", uri=proxy.url, credential=EU_ANALYST).load_table(ORDERS)
    before = _snapshot_ids(proxy.url, ORDERS)
    snapshot_id = int(time.time() * 1000)
    body = _on_governed(table, [_lying_partition_manifest(table, snapshot_id)], snapshot_id,
                        "append")
    with as_principal(proxy.url, EU_ANALYST) as client:
        answer = client.post(ORDERS_PATH, json=body)
        assert answer.status_code == 400, answer.text
        assert "does not hold the rows its partition declares" in answer.json()["error"]["message"]
        assert _snapshot_ids(proxy.url, ORDERS) == before  # nothing landed
        loaded = client.get(ORDERS_PATH).json()
    properties = loaded["metadata"]["properties"]
    assert properties["icegov.governed.served-snapshot-id"] == \
        properties["icegov.governed.base-snapshot-id"]


def _garbage(table: Table, name: str) -> str:
    path = f"{table.location()}/metadata/{name}-{uuid.uuid4()}.avro"
    with table.io.new_output(path).create() as out:
        out.write(b"not avro")
    return path


def test_unreadable_manifests_in_a_commit_on_a_governed_snapshot_are_400(
        proxy: Served) -> None:
    """A manifest list or a manifest of the commit's own that is missing or no Avro file is
    the client's fault: 400, never a 5xx."""
    table = RestCatalog("eu", uri=proxy.url, credential=EU_ANALYST).load_table(ORDERS)
    snapshot_id = int(time.time() * 1000)
    own = ManifestFile.from_args(
        manifest_path=_garbage(table, "own"), manifest_length=8, partition_spec_id=0,
        content=0, sequence_number=-1, min_sequence_number=-1, added_snapshot_id=snapshot_id,
        added_files_count=1, existing_files_count=0, deleted_files_count=0, added_rows_count=1,
        existing_rows_count=0, deleted_rows_count=0)
    bodies = [_on_governed(table, [own], snapshot_id, "append")]
    for listed in (_garbage(table, "list"), f"{table.location()}/metadata/missing.avro"):
        body = _on_governed(table, [], snapshot_id, "append")
        body["updates"][0]["snapshot"]["manifest-list"] = listed
        bodies.append(body)
    with as_principal(proxy.url, EU_ANALYST) as client:
        for body in bodies:
            answer = client.post(ORDERS_PATH, json=body)
            assert answer.status_code == 400, answer.text
