"""loadTable projection for a restricted principal (``proxy.reads.projection``): what the
answer keeps, removes, refuses and declares, and that pyiceberg still reads it."""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import TableResponse
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import (
    AlwaysFalse,
    And,
    BooleanExpression,
    EqualTo,
    GreaterThanOrEqual,
    In,
    IsNull,
    Not,
    NotIn,
    NotNull,
    Or,
    StartsWith,
)
from pyiceberg.expressions.visitors import bind
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadataUtil, new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortField, SortOrder
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyiceberg.types import (
    DateType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    UUIDType,
)

from proxy.errors import Forbidden
from proxy.reads.projection import (
    project_load_result,
    projected_schema,
    removed_columns,
)
from proxy.reads.restrictions_json import bound_filter_json, read_restrictions
from proxy.resources import Resource
from proxy.restrictions import Mask, MaskAction, ReadView, RowFilter, unrestricted

TABLE = Resource("icegov", ("demo",), "customers")

# top-level ids 1..7 come first, so pyiceberg's fresh-id assignment keeps these ids
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "region", StringType(), required=False),
    NestedField(3, "addr", StructType(
        NestedField(8, "city", StringType(), required=False),
        NestedField(9, "zip", StringType(), required=True),
    ), required=True),
    NestedField(4, "ssn", StringType(), required=False),
    NestedField(5, "name", StringType(), required=False),
    NestedField(6, "born", DateType(), required=False),
    NestedField(7, "ref", UUIDType(), required=False),
    identifier_field_ids=[1, 9],
)


def metadata(spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
             order: SortOrder = UNSORTED_SORT_ORDER, version: int = 2) -> dict[str, Any]:
    built = new_table_metadata(SCHEMA, spec, order, "file:///warehouse/demo/customers",
                               {"format-version": str(version)})
    dumped: dict[str, Any] = json.loads(built.model_dump_json())
    assert [f["id"] for f in dumped["schemas"][0]["fields"]] == [1, 2, 3, 4, 5, 6, 7]
    return dumped


def load_result(meta: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"metadata-location": "file:///warehouse/demo/customers/metadata/v1.metadata.json",
            "metadata": meta if meta is not None else metadata(),
            "config": {"client.region": "eu-west-1"}}


def view(denied: tuple[str, ...] = (), masks: dict[str, Mask] | None = None,
         row_filter: BooleanExpression | None = None) -> ReadView:
    rows = None if row_filter is None else RowFilter(row_filter, str(row_filter))
    return ReadView(TABLE, denied=frozenset(denied), masks=masks or {}, row_filter=rows)


def field_ids(schema_json: dict[str, Any]) -> list[int]:
    return [f["id"] for f in schema_json["fields"]]


def parses(result: dict[str, Any]) -> TableResponse:
    """The projected answer as pyiceberg's REST client reads it."""
    return TableResponse.model_validate(json.loads(json.dumps(result)))


# -- identity and columns -----------------------------------------------------------------------

def test_an_unrestricted_view_gets_the_very_same_object() -> None:
    result = load_result()
    assert project_load_result(result, unrestricted(TABLE), applies_masks=False) is result


def test_denied_columns_leave_the_schema_and_the_rest_keep_their_ids() -> None:
    result = load_result()
    before = copy.deepcopy(result)
    projected = project_load_result(result, view(denied=("ssn", "addr")), applies_masks=False)
    assert result == before  # the input is never mutated
    schema = projected["metadata"]["schemas"][0]
    assert field_ids(schema) == [1, 2, 5, 6, 7]
    assert schema["schema-id"] == before["metadata"]["schemas"][0]["schema-id"]
    assert projected["metadata"]["last-column-id"] == before["metadata"]["last-column-id"]
    assert projected["metadata-location"] == result["metadata-location"]
    table = parses(projected).metadata
    assert [f.name for f in table.schema().fields] == ["id", "region", "name", "born", "ref"]


def test_identifier_fields_lose_the_ids_nested_in_a_removed_column() -> None:
    projected = project_load_result(load_result(), view(denied=("addr",)), applies_masks=False)
    assert projected["metadata"]["schemas"][0]["identifier-field-ids"] == [1]
    assert parses(projected).metadata.schema().identifier_field_ids == [1]


def test_a_masked_column_is_removed_for_a_client_that_cannot_mask() -> None:
    masks = {"name": Mask(MaskAction.SHOW_FIRST_4)}
    projected = project_load_result(load_result(), view(masks=masks), applies_masks=False)
    assert field_ids(projected["metadata"]["schemas"][0]) == [1, 2, 3, 4, 6, 7]
    assert "read-restrictions" not in projected  # nothing left to declare
    assert projected["config"]["scan-planning-mode"] == "server"


def test_a_masked_column_is_kept_and_declared_for_a_client_that_masks() -> None:
    masks = {"name": Mask(MaskAction.SHOW_FIRST_4)}
    projected = project_load_result(load_result(), view(denied=("ssn",), masks=masks),
                                    applies_masks=True)
    assert field_ids(projected["metadata"]["schemas"][0]) == [1, 2, 3, 5, 6, 7]
    assert projected["read-restrictions"] == {
        "required-column-projections": [{"action": "show-first-4", "field-id": 5}],
    }


def test_config_asks_for_server_planning_and_keeps_the_rest() -> None:
    result = load_result()
    result["config"]["scan-planning-mode"] = "client"
    projected = project_load_result(result, view(denied=("ssn",)), applies_masks=False)
    assert projected["config"] == {"client.region": "eu-west-1", "scan-planning-mode": "server"}
    assert result["config"]["scan-planning-mode"] == "client"


def test_a_result_without_config_gets_one() -> None:
    result = load_result()
    del result["config"]
    projected = project_load_result(result, view(denied=("ssn",)), applies_masks=False)
    assert projected["config"] == {"scan-planning-mode": "server"}


def test_format_v1_metadata_projects_its_single_schema_too() -> None:
    projected = project_load_result(load_result(metadata(version=1)), view(denied=("ssn",)),
                                    applies_masks=False)
    assert 4 not in field_ids(projected["metadata"]["schema"])
    assert 4 not in field_ids(projected["metadata"]["schemas"][0])
    assert parses(projected).metadata.format_version == 1


# -- renamed and dropped columns in older schemas ---------------------------------------------

def evolved_table(tmp_path: Path) -> dict[str, Any]:
    """A real table whose ``ssn`` was renamed ``tax_id`` and whose ``note`` was dropped, with
    one snapshot written under the first schema."""
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("demo")
    table = catalog.create_table("demo.customers", Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "ssn", StringType(), required=False),
        NestedField(3, "note", StringType(), required=False),
    ))
    table.append(pa.table({"id": [1], "ssn": ["123"], "note": ["n"]}))
    with table.update_schema() as update:
        update.rename_column("ssn", "tax_id")
    with table.update_schema() as update:
        update.delete_column("note")
    dumped: dict[str, Any] = json.loads(table.metadata.model_dump_json())
    assert len(dumped["schemas"]) == 3
    return dumped


def test_a_renamed_column_stays_hidden_in_the_schemas_that_knew_it_by_its_old_name(
        tmp_path: Path) -> None:
    projected = project_load_result(load_result(evolved_table(tmp_path)),
                                    view(denied=("tax_id",)), applies_masks=False)
    for schema in projected["metadata"]["schemas"]:
        assert 2 not in field_ids(schema), schema
    table = parses(projected).metadata
    assert all(s.find_field(1) for s in table.schemas)


def test_a_rule_naming_a_column_by_its_old_name_still_hides_it(tmp_path: Path) -> None:
    projected = project_load_result(load_result(evolved_table(tmp_path)),
                                    view(denied=("ssn",)), applies_masks=False)
    assert [field_ids(s) for s in projected["metadata"]["schemas"]] == [[1, 3], [1, 3], [1]]


def test_a_dropped_column_named_by_policy_is_hidden_in_the_old_schemas(tmp_path: Path) -> None:
    projected = project_load_result(load_result(evolved_table(tmp_path)),
                                    view(denied=("note",)), applies_masks=False)
    schemas = projected["metadata"]["schemas"]
    assert [field_ids(s) for s in schemas] == [[1, 2], [1, 2], [1, 2]]
    assert parses(projected).metadata.snapshots  # snapshots untouched


# -- sort orders ---------------------------------------------------------------------------------

def sort_field(source_id: int) -> SortField:
    return SortField(source_id=source_id, transform=IdentityTransform())


def test_a_sort_order_is_cut_before_its_first_removed_column() -> None:
    meta = metadata(order=SortOrder(sort_field(1), sort_field(4), sort_field(2)))
    projected = project_load_result(load_result(meta), view(denied=("ssn",)), applies_masks=False)
    orders = projected["metadata"]["sort-orders"]
    assert [[f["source-id"] for f in o["fields"]] for o in orders] == [[1]]
    assert projected["metadata"]["default-sort-order-id"] == orders[0]["order-id"] == 1
    assert parses(projected).metadata.sort_order_by_id(1).fields == [sort_field(1)]


def test_a_default_order_cut_to_nothing_gives_way_to_the_unsorted_order() -> None:
    meta = metadata(order=SortOrder(sort_field(8), sort_field(1)))  # addr.city first
    projected = project_load_result(load_result(meta), view(denied=("addr",)),
                                    applies_masks=False)
    assert projected["metadata"]["sort-orders"] == [{"order-id": 0, "fields": []}]
    assert projected["metadata"]["default-sort-order-id"] == 0
    assert parses(projected).metadata.sort_order().is_unsorted


def test_sort_orders_without_removed_columns_are_left_alone() -> None:
    meta = metadata(order=SortOrder(sort_field(1), sort_field(2)))
    projected = project_load_result(load_result(meta), view(denied=("ssn",)), applies_masks=False)
    assert projected["metadata"]["sort-orders"] == meta["sort-orders"]
    assert projected["metadata"]["default-sort-order-id"] == 1


# -- partition specs -----------------------------------------------------------------------------

def by_region() -> PartitionSpec:
    return PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "region"))


def test_a_denied_partition_column_is_refused_without_naming_it() -> None:
    with pytest.raises(Forbidden) as refused:
        project_load_result(load_result(metadata(spec=by_region())), view(denied=("region",)),
                            applies_masks=False)
    assert "region" not in refused.value.message
    assert "demo.customers is partitioned by a column that policy hides" in refused.value.message
    assert refused.value.status == 403


def test_a_masked_partition_column_is_refused_by_name() -> None:
    masks = {"region": Mask(MaskAction.MASK_ALPHANUM)}
    with pytest.raises(Forbidden, match="partitioned by column 'region', which policy hides"):
        project_load_result(load_result(metadata(spec=by_region())), view(masks=masks),
                            applies_masks=False)


def test_an_old_partition_spec_over_a_hidden_column_is_refused_too() -> None:
    meta = metadata(spec=by_region())
    meta["partition-specs"].append({"spec-id": 1, "fields": [
        {"source-id": 6, "field-id": 1001, "transform": "day", "name": "born_day"}]})
    with pytest.raises(Forbidden, match="partitioned by a column"):
        project_load_result(load_result(meta), view(denied=("born",)), applies_masks=False)


def test_a_partition_source_nested_in_a_hidden_struct_is_refused() -> None:
    spec = PartitionSpec(PartitionField(8, 1000, IdentityTransform(), "city"))
    with pytest.raises(Forbidden):
        project_load_result(load_result(metadata(spec=spec)), view(denied=("addr",)),
                            applies_masks=False)


def test_a_v1_partition_spec_over_a_hidden_column_is_refused() -> None:
    meta = metadata(spec=by_region(), version=1)
    meta["partition-specs"] = []  # only the legacy field names it
    with pytest.raises(Forbidden):
        project_load_result(load_result(meta), view(denied=("region",)), applies_masks=False)


def test_partitioning_by_a_visible_column_is_fine() -> None:
    spec = PartitionSpec(PartitionField(6, 1000, DayTransform(), "born_day"))
    projected = project_load_result(load_result(metadata(spec=spec)), view(denied=("ssn",)),
                                    applies_masks=False)
    assert parses(projected).metadata.spec().fields[0].source_id == 6


# -- statistics ----------------------------------------------------------------------------------

def blob(*fields: int) -> dict[str, Any]:
    return {"type": "apache-datasketches-theta-v1", "snapshot-id": 7, "sequence-number": 1,
            "fields": list(fields), "properties": {"ndv": "3"}}


def test_statistics_blobs_over_removed_fields_are_dropped() -> None:
    meta = metadata()
    meta["statistics"] = [
        {"snapshot-id": 7, "statistics-path": "file:///s/a.puffin", "file-size-in-bytes": 10,
         "file-footer-size-in-bytes": 5, "blob-metadata": [blob(1), blob(4), blob(9)]},
        {"snapshot-id": 8, "statistics-path": "file:///s/b.puffin", "file-size-in-bytes": 10,
         "file-footer-size-in-bytes": 5, "blob-metadata": [blob(4)]},
        {"snapshot-id": 9, "statistics-path": "file:///s/c.puffin", "file-size-in-bytes": 10,
         "file-footer-size-in-bytes": 5, "blob-metadata": [blob(2)]},
    ]
    meta["partition-statistics"] = [
        {"snapshot-id": 7, "statistics-path": "file:///s/p.parquet", "file-size-in-bytes": 3}]
    before = copy.deepcopy(meta)
    projected = project_load_result(load_result(meta), view(denied=("ssn", "addr")),
                                    applies_masks=False)
    stats = projected["metadata"]["statistics"]
    assert [s["statistics-path"] for s in stats] == ["file:///s/a.puffin", "file:///s/c.puffin"]
    assert stats[0]["blob-metadata"] == [blob(1)]
    assert stats[1] == before["statistics"][2]
    assert projected["metadata"]["partition-statistics"] == before["partition-statistics"]
    assert meta == before
    assert [s.statistics_path for s in parses(projected).metadata.statistics] == [
        "file:///s/a.puffin", "file:///s/c.puffin"]


# -- read-restrictions --------------------------------------------------------------------------

def test_every_mask_action_is_declared_in_the_spec_form() -> None:
    masks = {
        "name": Mask(MaskAction.MASK_TO_FIXED_VALUE, "REDACTED"),
        "ssn": Mask(MaskAction.SHA_256),
        "born": Mask(MaskAction.TRUNCATE_TO_YEAR),
        "region": Mask(MaskAction.REPLACE_WITH_NULL),
    }
    declared = read_restrictions(view(masks=masks), SCHEMA, applies_masks=True)
    assert declared == {"required-column-projections": [
        {"action": "replace-with-null", "field-id": 2},
        {"action": "sha-256-global", "field-id": 4},
        {"action": "mask-to-fixed-value", "field-id": 5, "value": "REDACTED"},
        {"action": "truncate-to-year", "field-id": 6},
    ]}


@pytest.mark.parametrize(("column", "mask"), [
    ("id", Mask(MaskAction.SHOW_LAST_4)),         # a string action on a long
    ("id", Mask(MaskAction.REPLACE_WITH_NULL)),   # null in a required column
    ("name", Mask(MaskAction.TRUNCATE_TO_MONTH)),  # a date action on a string
    ("born", Mask(MaskAction.SHA_256)),            # hashing a date
    ("addr", Mask(MaskAction.MASK_TO_FIXED_VALUE, "x")),  # a struct has no fixed value
])
def test_a_mask_the_spec_forbids_for_the_type_removes_the_column(column: str,
                                                                 mask: Mask) -> None:
    restricted = view(masks={column: mask})
    assert column in removed_columns(restricted, SCHEMA, applies_masks=True)
    projected = project_load_result(load_result(), restricted, applies_masks=True)
    assert column not in [f["name"] for f in projected["metadata"]["schemas"][0]["fields"]]
    assert "read-restrictions" not in projected


def test_the_row_filter_is_declared_by_field_id() -> None:
    row_filter = And(EqualTo("region", "eu"),
                     Or(GreaterThanOrEqual("born", "2000-01-01"), Not(IsNull("addr.city"))))
    projected = project_load_result(load_result(), view(row_filter=row_filter),
                                    applies_masks=False)
    assert projected["read-restrictions"] == {"required-row-filter": {
        "type": "and",
        "left": {"type": "eq", "left": {"type": "reference", "id": 2}, "right": "eu"},
        "right": {"type": "or",
                  "left": {"type": "gt-eq", "left": {"type": "reference", "id": 6},
                           "right": "2000-01-01"},
                  "right": {"type": "not", "child": {"type": "is-null",
                                                     "child": {"type": "reference", "id": 8}}}},
    }}
    assert field_ids(projected["metadata"]["schemas"][0]) == [1, 2, 3, 4, 5, 6, 7]
    assert projected["config"]["scan-planning-mode"] == "server"


def test_a_row_filter_alone_leaves_the_metadata_object_untouched() -> None:
    result = load_result()
    projected = project_load_result(result, view(row_filter=EqualTo("region", "eu")),
                                    applies_masks=False)
    assert projected["metadata"] is result["metadata"]


def test_set_predicates_list_their_values_sorted_and_typed() -> None:
    ref = uuid.UUID("12345678-1234-5678-1234-567812345678")
    row_filter = And(NotIn("id", [30, 10, 20]), In("ref", [str(ref), str(uuid.UUID(int=1))]))
    bound = read_restrictions(view(row_filter=row_filter), SCHEMA, applies_masks=False)
    assert bound == {"required-row-filter": {
        "type": "and",
        "left": {"type": "not-in", "child": {"type": "reference", "id": 1},
                 "values": [10, 20, 30]},
        "right": {"type": "in", "child": {"type": "reference", "id": 7},
                  "values": ["00000000-0000-0000-0000-000000000001", str(ref)]},
    }}


def test_a_filter_that_binds_to_nothing_declares_nothing_and_false_declares_false() -> None:
    always = view(row_filter=NotNull("id"))  # id is required: always true
    assert read_restrictions(always, SCHEMA, applies_masks=False) is None
    never = view(row_filter=AlwaysFalse())
    assert read_restrictions(never, SCHEMA, applies_masks=False) == {
        "required-row-filter": False}


def test_a_row_filter_over_a_missing_column_is_refused() -> None:
    with pytest.raises(Forbidden, match="row filter"):
        project_load_result(load_result(), view(row_filter=EqualTo("country", "fr")),
                            applies_masks=False)


def test_a_row_filter_with_an_unconvertible_value_is_refused() -> None:
    with pytest.raises(Forbidden, match="row filter"):
        project_load_result(load_result(), view(row_filter=EqualTo("born", "not a date")),
                            applies_masks=False)


def test_starts_with_and_timestamps_use_the_spec_value_forms() -> None:
    schema = Schema(NestedField(1, "s", StringType()), NestedField(2, "ts", TimestampType()))
    expr = bind(schema, And(StartsWith("s", "ab"), EqualTo("ts", "2024-01-02T03:04:05")), True)
    assert bound_filter_json(expr) == {
        "type": "and",
        "left": {"type": "starts-with", "left": {"type": "reference", "id": 1}, "right": "ab"},
        "right": {"type": "eq", "left": {"type": "reference", "id": 2},
                  "right": "2024-01-02T03:04:05"},
    }


def test_the_backings_own_restrictions_are_kept_and_ours_added() -> None:
    result = load_result()
    theirs = {"required-row-filter": {"type": "eq", "left": {"type": "reference", "id": 1},
                                      "right": 1},
              "required-column-projections": [{"action": "mask-alphanum", "field-id": 5}]}
    result["read-restrictions"] = theirs
    masks = {"name": Mask(MaskAction.SHOW_LAST_4), "ssn": Mask(MaskAction.SHOW_LAST_4)}
    projected = project_load_result(result, view(masks=masks, row_filter=EqualTo("region", "x")),
                                    applies_masks=True)
    declared = projected["read-restrictions"]
    assert declared["required-row-filter"]["type"] == "and"
    assert declared["required-row-filter"]["left"] == theirs["required-row-filter"]
    assert declared["required-column-projections"] == [
        {"action": "mask-alphanum", "field-id": 5}, {"action": "show-last-4", "field-id": 4}]


def test_the_whole_projected_answer_still_parses_with_pyiceberg() -> None:
    meta = metadata(spec=by_region(), order=SortOrder(sort_field(2), sort_field(5)))
    masks = {"name": Mask(MaskAction.MASK_ALPHANUM)}
    projected = project_load_result(load_result(meta),
                                    view(denied=("ssn", "addr"), masks=masks,
                                         row_filter=EqualTo("region", "eu")),
                                    applies_masks=False)
    parsed = parses(projected)
    table = TableMetadataUtil.parse_obj(projected["metadata"])
    assert parsed.metadata == table
    assert [f.field_id for f in table.schema().fields] == [1, 2, 6, 7]
    assert [f.source_id for f in table.sort_order().fields] == [2]
    assert parsed.config["scan-planning-mode"] == "server"


# -- projected_schema ----------------------------------------------------------------------------

def test_projected_schema_keeps_ids_and_schema_id() -> None:
    schema = Schema(*SCHEMA.fields, schema_id=3, identifier_field_ids=[1, 9])
    projected = projected_schema(schema, frozenset({"addr", "ssn"}))
    assert [f.field_id for f in projected.fields] == [1, 2, 5, 6, 7]
    assert projected.schema_id == 3
    assert projected.identifier_field_ids == [1]
    assert projected_schema(schema, frozenset({"absent"})) is schema
