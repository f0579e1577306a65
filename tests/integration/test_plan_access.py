"""Restricted principals and the answers that carry table metadata or deletes (issue 8 §3).

``analyst`` (demo policy: ``ssn`` denied, ``email`` masked on ``icegov.demo.customers``) is
given INSERT on the demo tables in a test-local copy of the policy: its appends land, and the
answer to its commit — the table's whole metadata — is projected like its loadTable. An
equality delete keyed on a hidden column cannot be applied by a client that may not read the
column: the plan is refused rather than handed out.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import ForbiddenError
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from tests.conftest import RunningProxy, proxy_for
from tests.support.http import as_principal
from tests.support.plan_tables import RawPlanner, equality_delete, row_delta
from tests.support.settings import ADMIN, POLICIES

ANALYST = "analyst:analyst-secret"
CUSTOMERS = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "name", StringType(), required=False),
    NestedField(3, "email", StringType(), required=False),
    NestedField(4, "ssn", StringType(), required=False),
)


@pytest.fixture(scope="module")
def proxy(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningProxy]:
    workdir = tmp_path_factory.mktemp(f"access-{backend}")
    policies = workdir / "policies"
    shutil.copytree(POLICIES, policies)
    with (policies / "policy.csv").open("a") as rules:
        rules.write("p, analyst, icegov.demo.*, INSERT, allow\n"
                    "p, analyst, icegov.demo.*, CREATE_TABLE, allow\n"
                    "p, analyst, icegov.demo.*.ssn, SELECT, deny\n")
    policy = {"model_path": policies / "model.conf", "policy_path": policies / "policy.csv"}
    with proxy_for(backend, workdir, policy=policy) as running:
        yield running


@pytest.fixture()
def customers(proxy: RunningProxy) -> Iterator[Table]:
    admin = RestCatalog("admin", uri=proxy.url, credential=ADMIN)
    admin.create_namespace_if_not_exists("demo")
    if admin.table_exists("demo.customers"):
        admin.drop_table("demo.customers")
    table = admin.create_table("demo.customers", CUSTOMERS)
    table.append(pa.table({"id": pa.array([1, 2], pa.int64()), "name": ["a", "b"],
                           "email": ["a@x.org", "b@y.org"], "ssn": ["111", "222"]}))
    yield admin.load_table("demo.customers")
    admin.drop_table("demo.customers")


def _columns(table: Table) -> list[str]:
    return [f.name for f in table.schema().fields]


def test_a_restricted_principals_commit_answer_is_projected(proxy: RunningProxy,
                                                           customers: Table) -> None:
    analyst = RestCatalog("analyst", uri=proxy.url, credential=ANALYST)
    table = analyst.load_table("demo.customers")
    assert _columns(table) == ["id", "name", "email"]  # email: served masked
    table.append(pa.table({"id": pa.array([3], pa.int64()), "name": ["c"], "email": ["c@x"]}))
    # pyiceberg keeps the metadata the commit answered with: governed, still without ssn
    assert _columns(table) == ["id", "name", "email"]
    assert all(f.name != "ssn" for s in table.metadata.schemas for f in s.fields)
    assert all("/_icegov_governed/" in s.manifest_list for s in table.metadata.snapshots)
    rows = customers.refresh().scan().to_arrow().sort_by("id").to_pylist()
    assert rows[-1] == {"id": 3, "name": "c", "email": "c@x", "ssn": None}
    assert [r["ssn"] for r in rows[:2]] == ["111", "222"]  # the admin still sees everything


def test_equality_deletes_on_a_hidden_column_are_applied_in_governed_data(
        proxy: RunningProxy, customers: Table) -> None:
    """The analyst reads governed copies with the delete applied: its plan hands out no delete
    file (whose ``ssn`` values it may not see) and none of the deleted rows."""
    admin = RestCatalog("admin", uri=proxy.url, credential=ADMIN)
    row_delta(admin, customers, [equality_delete(customers, "ssn", ["111"])])
    analyst = RawPlanner(RestCatalog("analyst", uri=proxy.url, credential=ANALYST),
                         as_principal(proxy.url, ANALYST))
    plan = analyst.completed("demo.customers", {"select": ["id", "name"]})
    assert not plan.answers[0].get("delete-files")
    assert all("/_icegov_governed/" in path for path in plan.data_files())
    read = RestCatalog("analyst", uri=proxy.url, credential=ANALYST).load_table("demo.customers")
    assert sorted(read.scan().to_arrow().column("id").to_pylist()) == [2]
    admin_plan = RawPlanner(admin, as_principal(proxy.url, ADMIN)).completed(
        "demo.customers", {})
    assert admin_plan.answers[0].get("delete-files")  # the admin gets the delete to apply


def test_a_restricted_creator_gets_a_projected_answer_and_no_hidden_partitioning(
        proxy: RunningProxy) -> None:
    analyst = RestCatalog("analyst", uri=proxy.url, credential=ANALYST)
    RestCatalog("admin", uri=proxy.url, credential=ADMIN).create_namespace_if_not_exists("demo")
    spec = PartitionSpec(PartitionField(4, 1000, IdentityTransform(), "ssn"))
    with pytest.raises(ForbiddenError):
        analyst.create_table("demo.by_ssn", CUSTOMERS, partition_spec=spec)
    admin = RestCatalog("admin", uri=proxy.url, credential=ADMIN)
    assert not admin.table_exists("demo.by_ssn")  # refused before it was created
    created = analyst.create_table("demo.people", CUSTOMERS)
    try:
        assert _columns(created) == ["id", "name", "email"]  # ssn is hidden by the wildcard
        assert [f.name for f in admin.load_table("demo.people").schema().fields] == [
            "id", "name", "email", "ssn"]
    finally:
        admin.drop_table("demo.people")
