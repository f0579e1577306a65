"""The planner prunes by column dependencies only files icegov verified them on, keeps inferred
predicates out of residuals, and counts what each mechanism pruned (``Plan.pruned``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import AlwaysTrue, And, EqualTo, GreaterThanOrEqual, In, LessThan
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import IntegerType, NestedField, StringType

from proxy.commits.dependencies import PROPERTY, VERIFIED, digest, table_dependencies
from proxy.planning.manifest_cache import ManifestCache
from proxy.planning.plan_cache import PlanKey
from proxy.planning.planner import Planner, ScanSpec
from proxy.planning.sieve import MECHANISMS

SCHEMA = Schema(
    NestedField(1, "ss_item_sk", IntegerType(), required=False),
    NestedField(2, "ss_sold_date_sk", StringType(), required=False),
    NestedField(3, "ss_sold_month", StringType(), required=False),
)
BY_MONTH = PartitionSpec(PartitionField(3, 1000, IdentityTransform(), "ss_sold_month"))
DEPENDENCY = "ss_sold_date_sk=ss_sold_month:truncate[2]"
NO_SOURCE_METRICS = {"write.metadata.metrics.column.ss_sold_date_sk": "none"}
MONTHS = ("03", "09", "11")


def sales(month: str, items: range) -> pa.Table:
    return pa.table({
        "ss_item_sk": pa.array(list(items), pa.int32()),
        "ss_sold_date_sk": pa.array([f"{month}-{1 + i % 28:02d}-2019" for i in items]),
        "ss_sold_month": pa.array([month] * len(items)),
    })


@pytest.fixture
def planner() -> Iterator[Planner]:
    running = Planner(ManifestCache(100_000), threads=2)
    yield running
    running.close()


def store_sales(tmp_path: Path, *, stamped: bool) -> Table:
    """Three months appended one file each (every snapshot stamped as verified, or none)."""
    catalog = SqlCatalog("deps", uri=f"sqlite:///{tmp_path}/c.db", warehouse=tmp_path.as_uri())
    catalog.create_namespace("db")
    table = catalog.create_table("db.store_sales", SCHEMA, partition_spec=BY_MONTH,
                                 properties={PROPERTY: DEPENDENCY, **NO_SOURCE_METRICS})
    stamp = digest(table_dependencies(table.metadata))
    for number, month in enumerate(MONTHS):
        table.append(sales(month, range(number * 10, number * 10 + 10)),
                     snapshot_properties={VERIFIED: stamp} if stamped else {})
    return table


def months(plan_tasks: object) -> list[str]:
    return sorted(t.file.partition[0] for t in plan_tasks)  # type: ignore[attr-defined]


def test_a_filter_on_the_source_prunes_the_dependent_partitions(tmp_path: Path,
                                                                planner: Planner) -> None:
    table = store_sales(tmp_path, stamped=True)
    spec = ScanSpec(filter=EqualTo("ss_sold_date_sk", "09-12-2019"))
    plan = planner.plan(table.metadata, table.io, spec)
    assert months(plan.tasks) == ["09"]
    assert plan.pruned["dependencies"] == 2
    assert all(str(t.residual) == str(EqualTo("ss_sold_date_sk", "09-12-2019"))
               for t in plan.tasks), "inferred predicates never reach a residual"
    ranged = planner.plan(table.metadata, table.io, ScanSpec(filter=And(
        GreaterThanOrEqual("ss_sold_date_sk", "09-01-2019"), LessThan("ss_sold_date_sk",
                                                                      "11-15-2019"))))
    assert months(ranged.tasks) == ["09", "11"]
    listed = planner.plan(table.metadata, table.io,
                          ScanSpec(filter=In("ss_sold_date_sk", ["03-02-2019", "11-03-2019"])))
    assert months(listed.tasks) == ["03", "11"]


def test_unverified_files_are_never_pruned_by_dependencies(tmp_path: Path,
                                                           planner: Planner) -> None:
    table = store_sales(tmp_path, stamped=False)
    plan = planner.plan(table.metadata, table.io,
                        ScanSpec(filter=EqualTo("ss_sold_date_sk", "09-12-2019")))
    assert months(plan.tasks) == list(MONTHS)
    assert plan.pruned["dependencies"] == 0


def test_a_stamp_for_other_dependencies_does_not_count(tmp_path: Path,
                                                       planner: Planner) -> None:
    table = store_sales(tmp_path, stamped=True)
    with table.transaction() as change:
        change.set_properties({PROPERTY: "ss_sold_date_sk=ss_sold_month:truncate[3]"})
    plan = planner.plan(table.metadata, table.io,
                        ScanSpec(filter=EqualTo("ss_sold_date_sk", "09-12-2019")))
    assert len(plan.tasks) == 3  # and truncate[3] is not the dependent's type anyway


def test_governed_scans_leave_dependencies_off(tmp_path: Path, planner: Planner) -> None:
    table = store_sales(tmp_path, stamped=True)
    plan = planner.plan(table.metadata, table.io, ScanSpec(
        filter=EqualTo("ss_sold_date_sk", "09-12-2019"), dependencies=False))
    assert len(plan.tasks) == 3


def test_a_hidden_dependent_column_infers_nothing(tmp_path: Path, planner: Planner) -> None:
    table = store_sales(tmp_path, stamped=True)
    plan = planner.plan(table.metadata, table.io, ScanSpec(
        filter=EqualTo("ss_sold_date_sk", "09-12-2019"), hidden=frozenset({"ss_sold_month"})))
    assert len(plan.tasks) == 3


def test_counters_name_each_mechanism(tmp_path: Path, planner: Planner) -> None:
    table = store_sales(tmp_path, stamped=True)
    by_partition = planner.plan(table.metadata, table.io,
                                ScanSpec(filter=EqualTo("ss_sold_month", "03")))
    assert set(by_partition.pruned) == set(MECHANISMS)
    assert by_partition.pruned["partitions"] == 2 and len(by_partition.tasks) == 1
    by_metrics = planner.plan(table.metadata, table.io,
                              ScanSpec(filter=EqualTo("ss_item_sk", 15)))
    assert by_metrics.pruned["metrics"] == 2
    by_rows = planner.plan(table.metadata, table.io,
                           ScanSpec(row_filter=EqualTo("ss_sold_month", "11")))
    assert by_rows.pruned["row_filter"] == 2 and by_rows.pruned["partitions"] == 0
    everything = planner.plan(table.metadata, table.io, ScanSpec(filter=AlwaysTrue()))
    assert sum(everything.pruned.values()) == 0 and len(everything.tasks) == 3


def test_a_narrowed_plan_keeps_pruning_by_dependencies(tmp_path: Path,
                                                       planner: Planner) -> None:
    table = store_sales(tmp_path, stamped=True)
    wide = planner.plan(table.metadata, table.io, ScanSpec(filter=GreaterThanOrEqual(
        "ss_sold_date_sk", "09-01-2019")))
    assert months(wide.tasks) == ["09", "11"] and len(wide.dependable) == 2
    narrow = planner.narrow(table.metadata, ScanSpec(filter=EqualTo(
        "ss_sold_date_sk", "11-03-2019")), wide)
    assert months(narrow.tasks) == ["11"]
    assert narrow.pruned["dependencies"] == wide.pruned["dependencies"] + 1


def test_the_plan_cache_key_follows_the_property(tmp_path: Path) -> None:
    table = store_sales(tmp_path, stamped=True)
    spec = ScanSpec(filter=EqualTo("ss_sold_date_sk", "09-12-2019"))
    before = PlanKey.for_scan(table.metadata, spec, "k", None, None, ())
    with table.transaction() as change:
        change.remove_properties(PROPERTY)
    assert PlanKey.for_scan(table.metadata, spec, "k", None, None, ()) != before
