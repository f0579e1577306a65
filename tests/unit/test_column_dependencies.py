"""Column dependencies: the property's form and checks, what a filter infers, the commit stamp,
and the rows of added files compared (``proxy.commits.dependencies``, ``dependency_rows``,
``proxy.planning.inferred``)."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.expressions import (
    AlwaysTrue,
    And,
    EqualTo,
    GreaterThanOrEqual,
    In,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    NotEqualTo,
    Or,
    StartsWith,
)
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.sorting import SortOrder
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import (
    DateType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
)

from proxy.admission.intent import check_created_dependencies
from proxy.commits.classify import classify_commit
from proxy.commits.dependencies import (
    PROPERTY,
    VERIFIED,
    InvalidDependencies,
    digest,
    parse_dependencies,
    stamp_summaries,
    table_dependencies,
)
from proxy.commits.dependency_rows import (
    DependencyBroken,
    _check_file,
    check_added_rows,
    commit_dependencies,
)
from proxy.commits.diff import SnapshotChange
from proxy.commits.limits import CommitLimits
from proxy.commits.rowfiles import RowBudget, RowCheckFailed
from proxy.errors import BadRequest
from proxy.planning.inferred import inferred_filter, visible_dependencies
from tests.support.commit_capture import RecordingSqlCatalog

SALES = Schema(
    NestedField(1, "ss_item_sk", IntegerType()),
    NestedField(2, "ss_sold_date_sk", StringType()),
    NestedField(3, "ss_sold_month", StringType()),
    NestedField(4, "ss_sold_day", StringType()),
    NestedField(5, "date_num", IntegerType()),
    NestedField(6, "month_num", IntegerType()),
    NestedField(7, "ts", TimestampType()),
    NestedField(8, "ts_day", DateType()),
    NestedField(9, "ts_month", IntegerType()),
    NestedField(10, "bucketed", IntegerType()),
    NestedField(11, "nested", StructType(NestedField(12, "x", IntegerType()))),
    NestedField(13, "big", LongType()),
)
SEED = "ss_sold_date_sk=ss_sold_month:truncate[2],ss_sold_date_sk=ss_sold_day:truncate[4]"


def metadata(properties: dict[str, str], schema: Schema = SALES) -> Any:
    return new_table_metadata(schema, PartitionSpec(), SortOrder(), "file:///t", properties)


# --- the property ---------------------------------------------------------------------------

def test_the_seeds_dependencies_parse() -> None:
    parsed = parse_dependencies(SEED, SALES)
    assert [str(d) for d in parsed] == ["ss_sold_date_sk=ss_sold_month:truncate[2]",
                                        "ss_sold_date_sk=ss_sold_day:truncate[4]"]
    assert parsed[0].key == "2=3:truncate[2]"


@pytest.mark.parametrize("text", [
    "date_num=month_num:truncate[100]", "ts=ts_day:day", "ts=ts_month:month",
    "ts=ts_month:hour", "ts=ts_month:year", "date_num=bucketed:bucket[16]",
    "ss_sold_date_sk=ss_sold_month:identity", " ss_item_sk = date_num : identity ".replace(
        " ", ""), ""])
def test_valid_dependencies(text: str) -> None:
    parse_dependencies(text, SALES)


@pytest.mark.parametrize(("text", "says"), [
    ("nope=ss_sold_month:truncate[2]", "no top-level column 'nope'"),
    ("ss_sold_date_sk=nope:identity", "no top-level column 'nope'"),
    ("ss_sold_date_sk=ss_sold_date_sk:identity", "to itself"),
    ("ss_sold_date_sk=ss_sold_month:truncate[0]", "is not one of"),
    ("ss_sold_date_sk=ss_sold_month:void", "is not one of"),
    ("ss_sold_date_sk=ss_sold_month:truncate", "is not one of"),
    ("ss_sold_date_sk=ss_sold_month", "is not source=dependent:transform"),
    ("ss_sold_date_sk=month_num:truncate[2]", "truncate[2] of ss_sold_date_sk is string"),
    ("ss_sold_date_sk=ss_sold_month:day", "day does not apply to ss_sold_date_sk"),
    ("ts=ts_month:day", "day of ts is date, but ts_month is int"),
    ("date_num=big:identity", "identity of date_num is int, but big is long"),
    ("nested=date_num:identity", "is not a primitive column"),
    ("a=b:c=d:e", "is not source=dependent:transform"),
])
def test_invalid_dependencies_say_why(text: str, says: str) -> None:
    with pytest.raises(InvalidDependencies) as refused:
        parse_dependencies(text, SALES)
    assert says in str(refused.value)
    assert isinstance(refused.value, BadRequest)


def test_a_property_that_is_not_a_string_or_too_long_is_refused() -> None:
    with pytest.raises(InvalidDependencies):
        parse_dependencies(3, SALES)
    with pytest.raises(InvalidDependencies):
        parse_dependencies(",".join(["ss_sold_date_sk=ss_sold_month:truncate[2]"] * 65), SALES)


def test_digest_ignores_order_and_duplicates_and_follows_field_ids() -> None:
    one = parse_dependencies(SEED, SALES)
    other = parse_dependencies(",".join(reversed(SEED.split(","))) + "," + SEED, SALES)
    assert digest(one) == digest(other) and digest(()) == ""
    renamed = Schema(*(NestedField(f.field_id, "sold" if f.name == "ss_sold_date_sk" else f.name,
                                   f.field_type) for f in SALES.fields))
    assert digest(parse_dependencies(SEED.replace("ss_sold_date_sk", "sold"), renamed)) == \
        digest(one)
    assert digest(parse_dependencies("ss_sold_date_sk=ss_sold_month:truncate[3]", SALES)) != \
        digest(one[:1])


def test_table_dependencies_are_none_when_the_property_does_not_hold() -> None:
    assert len(table_dependencies(metadata({PROPERTY: SEED}))) == 2
    assert table_dependencies(metadata({PROPERTY: "ss_sold_date_sk=gone:identity"})) == ()
    assert table_dependencies(metadata({})) == ()


# --- commits that set it ------------------------------------------------------------------

def set_property(value: str) -> dict[str, Any]:
    return {"action": "set-properties", "updates": {PROPERTY: value}}


def test_a_commit_setting_an_invalid_property_is_refused() -> None:
    with pytest.raises(InvalidDependencies, match="no top-level column"):
        commit_dependencies(metadata({}), [set_property("x=ss_sold_month:identity")])
    assert len(commit_dependencies(metadata({}), [set_property(SEED)])) == 2
    assert commit_dependencies(metadata({PROPERTY: SEED}),
                               [{"action": "remove-properties", "removals": [PROPERTY]}]) == ()


def test_a_schema_change_that_breaks_the_property_is_refused() -> None:
    without_month = Schema(*(f for f in SALES.fields if f.name != "ss_sold_month"), schema_id=1)
    updates = [{"action": "add-schema", "schema": without_month.model_dump(by_alias=True)},
               {"action": "set-current-schema", "schema-id": -1}]
    with pytest.raises(InvalidDependencies, match="ss_sold_month"):
        commit_dependencies(metadata({PROPERTY: SEED}), updates)
    # the same schema change on a table without dependencies is none of their business
    assert commit_dependencies(metadata({}), updates) == ()


def test_an_untouched_invalid_property_declares_nothing() -> None:
    stale = metadata({PROPERTY: "ss_sold_date_sk=gone:identity"})
    assert commit_dependencies(stale, [{"action": "set-properties", "updates": {"a": "b"}}]) == ()


def test_a_create_with_an_invalid_property_is_refused() -> None:
    body = {"name": "t", "schema": SALES.model_dump(by_alias=True),
            "properties": {PROPERTY: "ss_sold_date_sk=ss_sold_month:bucket[2]"}}
    with pytest.raises(InvalidDependencies, match="bucket"):
        check_created_dependencies(body)
    check_created_dependencies({**body, "properties": {PROPERTY: SEED}})
    with pytest.raises(BadRequest, match="schema cannot be read"):
        check_created_dependencies({**body, "schema": "nope"})


# --- the stamp ------------------------------------------------------------------------------

def add_snapshot(snapshot_id: int, summary: dict[str, str] | None) -> dict[str, Any]:
    snapshot: dict[str, Any] = {"snapshot-id": snapshot_id, "manifest-list": "m"}
    if summary is not None:
        snapshot["summary"] = summary
    return {"action": "add-snapshot", "snapshot": snapshot}


def test_a_clients_stamp_is_stripped_and_icegovs_written() -> None:
    body = {"updates": [add_snapshot(1, {"operation": "append", VERIFIED: "forged"}),
                        add_snapshot(2, {"operation": "append"}),
                        set_property(SEED)]}
    stamped = stamp_summaries(body, {2: "abc"})
    summaries = [u["snapshot"]["summary"] for u in stamped["updates"][:2]]
    assert summaries == [{"operation": "append"}, {"operation": "append", VERIFIED: "abc"}]
    assert body["updates"][0]["snapshot"]["summary"][VERIFIED] == "forged"  # not changed


def test_a_body_without_stamps_is_the_same_object() -> None:
    body = {"updates": [add_snapshot(1, {"operation": "append"}), add_snapshot(2, None)]}
    assert stamp_summaries(body, {}) is body
    assert stamp_summaries({"updates": "x"}, {1: "a"}) == {"updates": "x"}


# --- rows -----------------------------------------------------------------------------------

def rows_of(**columns: pa.Array) -> pa.Table:
    return pa.table(columns)


def test_rows_that_hold_the_dependencies_pass() -> None:
    dependencies = parse_dependencies(SEED + ",ts=ts_day:day,date_num=month_num:truncate[100]",
                                      SALES)
    _check_file(dependencies, rows_of(
        ss_sold_date_sk=pa.array(["09-12-2019", None]), ss_sold_month=pa.array(["09", None]),
        ss_sold_day=pa.array(["09-1", None]),
        ts=pa.array([datetime(2020, 1, 1, 5), None], pa.timestamp("us")),
        ts_day=pa.array([date(2020, 1, 1), None], pa.date32()),
        date_num=pa.array([20190912, None], pa.int32()),
        month_num=pa.array([20190900, None], pa.int32())), "f.parquet")


@pytest.mark.parametrize(("source", "dependent"), [
    (["09-12-2019", "10-01-2019"], ["09", "09"]),
    (["09-12-2019"], [None]),
    ([None], ["09"]),
])
def test_a_row_that_breaks_a_dependency_is_refused(source: list[Any],
                                                   dependent: list[Any]) -> None:
    dependencies = parse_dependencies("ss_sold_date_sk=ss_sold_month:truncate[2]", SALES)
    with pytest.raises(DependencyBroken, match=r"1 rows of f\.parquet break the column "
                       r"dependency ss_sold_date_sk=ss_sold_month:truncate"):
        _check_file(dependencies, rows_of(ss_sold_date_sk=pa.array(source, pa.string()),
                                          ss_sold_month=pa.array(dependent, pa.string())),
                    "s3://b/t/data/f.parquet")


# --- inference ------------------------------------------------------------------------------

MONTH = parse_dependencies("ss_sold_date_sk=ss_sold_month:truncate[2]", SALES)
BUCKET = parse_dependencies("date_num=bucketed:bucket[4]", SALES)


def infer(expression: Any, dependencies: Any = MONTH) -> Any:
    return inferred_filter(expression, dependencies, SALES, True)


def test_equality_and_in_infer_the_dependent_value() -> None:
    assert infer(EqualTo("ss_sold_date_sk", "09-12-2019")) == EqualTo("ss_sold_month", "09")
    assert infer(In("ss_sold_date_sk", ["09-12-2019", "10-01-2019"])) == \
        In("ss_sold_month", ["09", "10"])
    bucket = BucketTransform(4).transform(IntegerType())(7)
    assert infer(EqualTo("date_num", 7), BUCKET) == EqualTo("bucketed", bucket)


def test_ranges_infer_through_order_preserving_transforms_only() -> None:
    ranged = And(GreaterThanOrEqual("ss_sold_date_sk", "03-01-2019"),
                 LessThan("ss_sold_date_sk", "05-01-2019"))
    assert infer(ranged) == And(GreaterThanOrEqual("ss_sold_month", "03"),
                                LessThanOrEqual("ss_sold_month", "05"))
    assert infer(LessThan("date_num", 7), BUCKET) == AlwaysTrue()
    assert infer(StartsWith("ss_sold_date_sk", "09-1")) == StartsWith("ss_sold_month", "09")


def test_or_infers_only_when_both_sides_do() -> None:
    both = Or(EqualTo("ss_sold_date_sk", "09-12-2019"), EqualTo("ss_sold_date_sk", "01-02-2020"))
    assert infer(both) == Or(EqualTo("ss_sold_month", "09"), EqualTo("ss_sold_month", "01"))
    assert infer(Or(EqualTo("ss_sold_date_sk", "09-12-2019"), EqualTo("ss_item_sk", 3))) == \
        AlwaysTrue()
    assert infer(And(EqualTo("ss_sold_date_sk", "09-12-2019"), EqualTo("ss_item_sk", 3))) == \
        EqualTo("ss_sold_month", "09")


def test_negations_and_nulls() -> None:
    assert infer(NotEqualTo("ss_sold_date_sk", "09-12-2019")) == AlwaysTrue()
    assert infer(Not(NotEqualTo("ss_sold_date_sk", "09-12-2019"))) == \
        EqualTo("ss_sold_month", "09")
    assert infer(IsNull("ss_sold_date_sk")) == IsNull("ss_sold_month")


def test_a_dependency_on_a_hidden_column_infers_nothing() -> None:
    hidden_month = Schema(*(f for f in SALES.fields if f.name != "ss_sold_month"))
    assert visible_dependencies(MONTH, hidden_month) == ()
    assert visible_dependencies(MONTH, SALES) == MONTH


# --- a commit's rows, as classification reads them -----------------------------------------

def recorded_sales(tmp_path: Any) -> tuple[RecordingSqlCatalog, Any]:
    catalog = RecordingSqlCatalog("deps", uri=f"sqlite:///{tmp_path}/c.db",
                                  warehouse=tmp_path.as_uri())
    catalog.create_namespace("db")
    schema = Schema(NestedField(1, "ss_sold_date_sk", StringType(), required=False),
                    NestedField(2, "ss_sold_month", StringType(), required=False))
    table = catalog.create_table("db.sales", schema, properties={
        PROPERTY: "ss_sold_date_sk=ss_sold_month:truncate[2]"})
    return catalog, table


def sold(dates: list[str], months: list[str]) -> pa.Table:
    return pa.table({"ss_sold_date_sk": pa.array(dates, pa.string()),
                     "ss_sold_month": pa.array(months, pa.string())})


def test_a_verified_append_gets_a_stamp_and_an_over_budget_one_none(tmp_path: Any) -> None:
    catalog, table = recorded_sales(tmp_path)
    table.append(sold(["09-12-2019", "11-01-2020"], ["09", "11"]))
    captured = catalog.commits[-1]
    intent = classify_commit(captured.body, captured.base, table.io)
    [snapshot_id] = intent.evidence.snapshot_ids
    assert intent.dependency_stamps == {snapshot_id: digest(table_dependencies(table.metadata))}
    assert any("column dependencies hold" in c for c in intent.evidence.row_checks)
    starved = classify_commit(captured.body, captured.base, table.io,
                              limits=CommitLimits(row_bytes_budget=10))
    assert starved.dependency_stamps == {}
    assert any("not checked" in c for c in starved.evidence.row_checks)


def test_an_append_breaking_the_dependency_is_refused(tmp_path: Any) -> None:
    catalog, table = recorded_sales(tmp_path)
    table.append(sold(["09-12-2019", "11-01-2020"], ["09", "12"]))
    captured = catalog.commits[-1]
    with pytest.raises(DependencyBroken, match="1 rows of"):
        classify_commit(captured.body, captured.base, table.io)


class Unreadable:
    """A manifest reader whose manifests cannot be read for row checks."""

    io = None

    def claimed_manifests(self, manifest_list: str) -> Any:
        raise RowCheckFailed("row budget exhausted")


def test_an_unchecked_snapshot_that_rewrites_history_is_refused() -> None:
    dependencies = parse_dependencies(SEED, SALES)
    notes: list[str] = []
    plain = SnapshotChange(7)
    assert check_added_rows(dependencies, [plain], {7: "m"}, Unreadable(),  # type: ignore[arg-type]
                            metadata({}), RowBudget(0), notes) == {}
    assert "not checked for snapshot 7" in notes[0]
    with pytest.raises(InvalidDependencies, match="rewrites the table's history"):
        check_added_rows(dependencies, [SnapshotChange(8, rewrites_history=True)], {8: "m"},
                         Unreadable(), metadata({}), RowBudget(0), [])  # type: ignore[arg-type]
