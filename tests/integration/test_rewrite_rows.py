"""REWRITE is compaction, verified to the rows, against both backing catalogs.

``compactor`` (test-local) reads the demo tables and holds only REWRITE: the right a platform
hands its maintenance jobs. Spark's own compactions (``rewrite_data_files``,
``rewrite_position_delete_files``) and an honest ``rewrite-files`` land for it; a rewrite that
changes rows — as a ``rewrite-files`` data operation or as a ``replace`` snapshot pyiceberg
builds — keeps the record counts of a compaction but is an UPDATE: 403, and the table's rows and
snapshots are unchanged.
"""

from __future__ import annotations

import contextlib
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.io.pyarrow import _dataframe_to_data_files
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _OverwriteFiles
from pyiceberg.types import LongType, NestedField

from proxy.app import create_app
from proxy.commits.operations import content_file_to_json
from proxy.identity.hashing import hash_secret
from tests.conftest import RunningProxy
from tests.support.commit_capture import wire_json
from tests.support.errors import assert_error_model
from tests.support.http import as_principal, audit_records
from tests.support.read_tables import table_state
from tests.support.servers import serve
from tests.support.settings import ADMIN, POLICIES, settings_for_tests
from tests.support.spark import add_rest_catalog

COMPACTOR = "compactor:compactor-secret"
RULES = """
# test-local: a maintenance job that may only compact the demo tables
g, compactor, demo-reader
p, compactor, icegov.demo.*, REWRITE, allow
"""
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


@contextlib.contextmanager
def compacting_proxy(backend: str, workdir: Path) -> Iterator[RunningProxy]:
    """A proxy in front of ``backend`` whose policy adds ``compactor``."""
    policies = workdir / "policies"
    shutil.copytree(POLICIES, policies)
    with (policies / "policy.csv").open("a") as rules:
        rules.write(RULES)
    principals_file = policies / "principals.yaml"
    principals = yaml.safe_load(principals_file.read_text())
    name, secret = COMPACTOR.split(":", 1)
    principals["principals"].append({"name": name, "roles": [name],
                                     "secret_hash": hash_secret(secret)})
    principals_file.write_text(yaml.safe_dump(principals))
    settings: dict[str, Any] = {
        "policy": {"model_path": policies / "model.conf",
                   "policy_path": policies / "policy.csv"},
        "identity": {"principals_file": principals_file}}
    if backend == "embedded":
        with serve(create_app(settings_for_tests(workdir, **settings))) as url:
            yield RunningProxy(url, workdir)
        return
    from tests.support.reference_catalog import reference_catalog

    with reference_catalog(workdir) as catalog_uri:
        app = create_app(settings_for_tests(workdir, catalog_uri=catalog_uri, **settings))
        with serve(app) as url:
            yield RunningProxy(url, workdir)


@pytest.fixture(scope="module")
def compacting(backend: str, tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[RunningProxy]:
    with compacting_proxy(backend, tmp_path_factory.mktemp(f"rewrite-{backend}")) as running:
        RestCatalog("admin", uri=running.url, credential=ADMIN) \
            .create_namespace_if_not_exists("demo")
        yield running


def ids(*values: int) -> pa.Table:
    return pa.table({"id": pa.array(values, pa.int64())})


def new_table(proxy: RunningProxy, *batches: tuple[int, ...]) -> str:
    """``demo.t…`` made by admin, one pyiceberg append (one data file) per batch."""
    name = f"demo.t{uuid.uuid4().hex[:8]}"
    table = RestCatalog("admin", uri=proxy.url, credential=ADMIN).create_table(name, SCHEMA)
    for batch in batches:
        table.append(ids(*batch))
    return name


def as_compactor(proxy: RunningProxy, name: str) -> Table:
    return RestCatalog("compactor", uri=proxy.url, credential=COMPACTOR).load_table(name)


def live_data(table: Table) -> list[DataFile]:
    snapshot = table.current_snapshot()
    assert snapshot is not None
    return [e.data_file for m in snapshot.manifests(table.io)
            for e in m.fetch_manifest_entry(table.io)]


def written(table: Table, rows: pa.Table) -> list[DataFile]:
    """Data files of ``rows`` written under ``table``'s location (not yet committed)."""
    return list(_dataframe_to_data_files(table.metadata, rows, table.io))


def rewrite_files(proxy: RunningProxy, name: str, rows: pa.Table) -> Any:
    """As ``compactor``: the ``rewrite-files`` data operation replacing every data file by a
    file of ``rows``."""
    table = as_compactor(proxy, name)
    body = {"updates": [{
        "action": "rewrite-files",
        "deleted-data-files": [f.file_path for f in live_data(table)],
        "added-data-files": [content_file_to_json(f, table.metadata.spec(),
                                                  table.metadata.schema())
                             for f in written(table, rows)]}]}
    namespace, table_name = name.split(".")
    with as_principal(proxy.url, COMPACTOR) as client:
        return client.post(f"/v1/namespaces/{namespace}/tables/{table_name}", json=body)


def last_evidence(proxy: RunningProxy, name: str) -> dict[str, Any]:
    """The evidence of the last commit that landed on ``name``, from the audit log."""
    table = name.split(".")[1]
    landed = [r for r in audit_records(proxy.audit_log) if r.get("status") == 200
              and r.get("method") == "POST" and any(x.endswith(table)
                                                     for x in r.get("resources", []))]
    return dict(landed[-1]["evidence"][0])


def last_classification(proxy: RunningProxy, name: str) -> Any:
    return last_evidence(proxy, name)["classification"]


@pytest.mark.parametrize("rows", [(1, 2, 3, 99), (1, 2)])
def test_a_rewrite_files_that_changes_rows_is_refused(compacting: RunningProxy,
                                                      rows: tuple[int, ...]) -> None:
    name = new_table(compacting, (1, 2), (3, 4))
    before = table_state(compacting.url, name)
    assert_error_model(rewrite_files(compacting, name, ids(*rows)), 403, "ForbiddenException")
    assert table_state(compacting.url, name) == before


def test_an_honest_rewrite_files_lands(compacting: RunningProxy) -> None:
    name = new_table(compacting, (1, 2), (3, 4))
    before, _, _ = table_state(compacting.url, name)
    response = rewrite_files(compacting, name, ids(4, 3, 2, 1))
    assert response.status_code == 200, response.text
    assert table_state(compacting.url, name)[0] == before
    assert last_classification(compacting, name) == "REWRITE"


def test_a_replace_snapshot_built_by_pyiceberg_that_changes_rows_is_refused(
        compacting: RunningProxy) -> None:
    """pyiceberg writes the manifests (it cannot summarise a ``replace`` itself: the snapshot
    is built as an overwrite and sent claiming ``replace``, as a compaction would)."""
    name = new_table(compacting, (1, 2), (3, 4))
    before = table_state(compacting.url, name)
    table = as_compactor(compacting, name)
    transaction = table.transaction()
    swap = _OverwriteFiles(operation=Operation.OVERWRITE, transaction=transaction, io=table.io)
    for old in live_data(table):
        swap.delete_data_file(old)
    for new in written(table, ids(1, 2, 3, 99)):
        swap.append_data_file(new)
    swap.commit()
    body = {"requirements": [wire_json(r) for r in transaction._requirements],
            "updates": [wire_json(u) for u in transaction._updates]}
    [added] = [u for u in body["updates"] if u["action"] == "add-snapshot"]
    added["snapshot"]["summary"]["operation"] = "replace"
    namespace, table_name = name.split(".")
    with as_principal(compacting.url, COMPACTOR) as client:
        response = client.post(f"/v1/namespaces/{namespace}/tables/{table_name}", json=body)
    assert_error_model(response, 403, "ForbiddenException")
    assert "UPDATE" in response.json()["error"]["message"], response.text
    assert table_state(compacting.url, name) == before


# Spark's own compactions ---------------------------------------------------------------------

@pytest.mark.spark
def test_spark_compactions_by_a_rewrite_only_principal_land(spark: Any, backend: str,
                                                             compacting: RunningProxy) -> None:
    admin, compactor = f"rw_admin_{backend}", f"rw_compactor_{backend}"
    add_rest_catalog(spark, admin, compacting.url, credential=ADMIN)
    add_rest_catalog(spark, compactor, compacting.url, credential=COMPACTOR)
    name = f"demo.s{uuid.uuid4().hex[:8]}"
    spark.sql(f"""CREATE TABLE {admin}.{name} (id BIGINT, region STRING) USING iceberg
                  TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read',
                                 'write.delete.granularity'='partition')""")
    for first in (1, 4, 7):
        spark.sql(f"INSERT INTO {admin}.{name} SELECT /*+ REPARTITION(1) */ * FROM VALUES "
                  f"({first}, 'eu'), ({first + 1}, 'eu'), ({first + 2}, 'us') AS v(id, region)")
    spark.sql(f"DELETE FROM {admin}.{name} WHERE id = 2").collect()
    spark.sql(f"DELETE FROM {admin}.{name} WHERE id = 8").collect()
    rows = table_state(compacting.url, name)[0]
    assert len(rows) == 7

    spark.sql(f"CALL {compactor}.system.rewrite_position_delete_files(table => '{name}', "
              "options => map('rewrite-all', 'true'))").collect()
    compacted = last_evidence(compacting, name)
    assert compacted["classification"] == "REWRITE", compacted
    assert (compacted["removed_delete_files"], compacted["added_delete_files"]) == (2, 1)
    assert "kept data files keep their deleted rows: REWRITE" in compacted["row_checks"][-1]
    assert table_state(compacting.url, name)[0] == rows
    spark.sql(f"CALL {compactor}.system.rewrite_data_files(table => '{name}', "
              "options => map('min-input-files', '2'))").collect()
    rewritten = last_evidence(compacting, name)
    assert rewritten["classification"] == "REWRITE", rewritten
    assert (rewritten["removed_data_files"], rewritten["added_records"]) == (3, 7)
    assert table_state(compacting.url, name)[0] == rows
    operations = [s.summary.operation.value for s in RestCatalog(
        "admin", uri=compacting.url, credential=ADMIN).load_table(name).snapshots()
        if s.summary is not None]
    assert operations[-2:] == ["replace", "replace"]
