"""Row-level verification with a real client: pyiceberg's copy-on-write DELETE as ``deleter``.

pyiceberg rewrites a partly matching data file without the deleted rows (an ``overwrite``
snapshot that removes one data file and adds another). icegov reads both files' rows: every added
row is one of the removed rows, so the commit is a DELETE, which ``deleter`` holds. An overwrite
that changes rows is an UPDATE and is refused with the table unchanged. Both backing catalogs.
"""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import ForbiddenError
from pyiceberg.expressions import EqualTo
from pyiceberg.table import Table

from tests.conftest import RunningProxy
from tests.support.http import audit_records
from tests.support.settings import ADMIN

DELETER = "deleter:deleter-secret"
ROWS = pa.table({"id": pa.array([1, 2, 3, 4], pa.int64()),
                 "amount": pa.array([10.0, float("nan"), None, 40.0], pa.float64())})


@pytest.fixture()
def table(proxy: RunningProxy) -> Table:
    """A demo table (created by admin) whose four rows are in one data file."""
    admin = RestCatalog("admin", uri=proxy.url, credential=ADMIN)
    admin.create_namespace_if_not_exists("demo")
    created = admin.create_table(f"demo.r{uuid.uuid4().hex[:8]}", ROWS.schema)
    created.append(ROWS)
    return admin.load_table(created.name())


def state(proxy: RunningProxy, table: Table) -> tuple[list[Any], list[int]]:
    """(rows by id, NaN spelled out so that states compare; snapshot ids) as admin sees them."""
    loaded = RestCatalog("reader", uri=proxy.url, credential=ADMIN).load_table(table.name())
    arrow = loaded.scan().to_arrow().sort_by("id")
    rows = [(r["id"], "NaN" if r["amount"] != r["amount"] else r["amount"])
            for r in arrow.to_pylist()]
    return rows, [s.snapshot_id for s in loaded.snapshots()]


def commit_records(proxy: RunningProxy, table: Table) -> list[dict[str, Any]]:
    name = table.name()[-1]
    return [r for r in audit_records(proxy.audit_log) if r["principal"] == "deleter"
            and r["endpoint"] == "commit_table" and r["path"].endswith(f"/tables/{name}")]


def test_deleter_copy_on_write_delete_lands(proxy: RunningProxy, table: Table) -> None:
    _, snapshots = state(proxy, table)
    deleter = RestCatalog("deleter", uri=proxy.url, credential=DELETER)
    deleter.load_table(table.name()).delete(EqualTo("id", 3))

    rows, after = state(proxy, table)
    assert rows == [(1, 10.0), (2, "NaN"), (4, 40.0)]
    assert after[:len(snapshots)] == snapshots and len(after) == len(snapshots) + 1
    [record] = commit_records(proxy, table)
    assert record["decision"] == "allow" and record["actions"] == ["DELETE"]
    [evidence] = record["evidence"]
    assert evidence["operations"] == ["overwrite"] and evidence["classification"] == "DELETE"
    assert evidence["removed_data_files"] == 1 and evidence["added_data_files"] == 1
    assert any("3 added rows are all among the 4 live rows" in c
               for c in evidence["row_checks"]), evidence


def test_deleter_cannot_change_rows_by_rewriting_them(proxy: RunningProxy, table: Table) -> None:
    before = state(proxy, table)
    deleter = RestCatalog("deleter", uri=proxy.url, credential=DELETER)
    changed = pa.table({"id": pa.array([3], pa.int64()), "amount": pa.array([0.0])})
    with pytest.raises(ForbiddenError):
        deleter.load_table(table.name()).overwrite(changed, overwrite_filter=EqualTo("id", 3))
    assert state(proxy, table) == before
    [record] = commit_records(proxy, table)
    assert record["decision"] == "deny" and "UPDATE" in record["actions"]
