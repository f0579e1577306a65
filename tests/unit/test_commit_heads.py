"""The heads a replica's own commits left (``proxy.committer.heads``): when one may be judged on,
what a commit judged on it is pinned to, how it is derived and how many are kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField

from proxy.backing.tables import TableState
from proxy.committer.heads import KnownHeads, appended, head_pins, requirements_hold
from proxy.committer.pinning import pinned_requirements
from proxy.resources import Resource
from tests.support.commit_capture import wire_json

KEY = ("cat", ("demo",), "t")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture()
def table(tmp_path: Path) -> Table:
    catalog = SqlCatalog("c", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("demo")
    created = catalog.create_table("demo.t", Schema(NestedField(1, "id", LongType())))
    created.append(pa.table({"id": pa.array([1], pa.int64())}))
    return created


def state(table: Table) -> TableState:
    return TableState(Resource("cat", ("demo",), "t"), table.metadata,
                      table.metadata_location, table.io, {})


def append_body(table: Table) -> dict[str, Any]:
    tx = table.transaction()
    tx.append(pa.table({"id": pa.array([2], pa.int64())}))
    return {"requirements": [wire_json(r) for r in tx._requirements],
            "updates": [wire_json(u) for u in tx._updates]}


def test_a_young_head_whose_requirements_hold_is_used_an_old_one_is_not(table: Table) -> None:
    clock = Clock()
    heads = KnownHeads(2.0, clock)
    body = append_body(table)
    heads.learn(KEY, state(table), body, observed_at=clock.now)
    after = heads.usable(KEY, {"requirements": []})
    assert after is not None and after.state.metadata.current_snapshot_id == \
        body["updates"][0]["snapshot"]["snapshot-id"]
    assert heads.usable(KEY, body) is None  # it asserts the head before its own append
    clock.now += 2.5  # aged from the load it descends from
    assert heads.usable(KEY, {"requirements": []}) is None


def test_no_head_is_kept_when_switched_off_or_forgotten(table: Table) -> None:
    off = KnownHeads(0)
    off.learn(KEY, state(table), append_body(table), observed_at=0)
    assert off.usable(KEY, {}) is None
    heads = KnownHeads(60)
    heads.learn(KEY, state(table), append_body(table), observed_at=heads.clock())
    heads.forget(KEY)
    assert heads.usable(KEY, {}) is None


def test_only_a_plain_append_is_derived(table: Table) -> None:
    body = append_body(table)
    assert appended(table.metadata, body) is not None
    schema_change = {"updates": [{"action": "add-schema", "schema": {}},
                                 {"action": "set-current-schema", "schema-id": -1}]}
    assert appended(table.metadata, schema_change) is None
    tagged = {"updates": [body["updates"][0], {**body["updates"][1], "type": "tag"}]}
    assert appended(table.metadata, tagged) is None
    heads = KnownHeads(60)
    heads.learn(KEY, state(table), body, observed_at=heads.clock())
    heads.learn(KEY, state(table), schema_change, observed_at=heads.clock())
    assert heads.usable(KEY, {}) is None  # a commit it does not derive forgets the table


def test_unknown_or_failing_requirements_never_use_the_head(table: Table) -> None:
    metadata = table.metadata
    assert requirements_hold({"requirements": [
        {"type": "assert-current-schema-id", "current-schema-id": 0},
        {"type": "assert-table-uuid", "uuid": str(metadata.table_uuid)}]}, metadata)
    for failing in ({"type": "assert-current-schema-id", "current-schema-id": 1},
                    {"type": "assert-current-schema-id", "current-schema-id": False},
                    {"type": "assert-create"}, {"type": "assert-something-new"},
                    {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": None}):
        assert not requirements_hold({"requirements": [failing]}, metadata), failing


def test_a_commit_judged_on_a_head_is_pinned_to_everything_assertable(table: Table) -> None:
    metadata = table.metadata
    pins = {p["type"]: p for p in head_pins(metadata, ["audit"])}
    assert pins["assert-current-schema-id"]["current-schema-id"] == metadata.current_schema_id
    assert pins["assert-last-assigned-field-id"]["last-assigned-field-id"] == 1
    assert pins["assert-default-spec-id"]["default-spec-id"] == metadata.default_spec_id
    assert pins["assert-last-assigned-partition-id"]["last-assigned-partition-id"] == \
        metadata.last_partition_id
    assert pins["assert-default-sort-order-id"]["default-sort-order-id"] == \
        metadata.default_sort_order_id
    refs = {(p["ref"], p["snapshot-id"]) for p in head_pins(metadata, ["audit"])
            if p["type"] == "assert-ref-snapshot-id"}
    assert refs == {("main", metadata.current_snapshot_id), ("audit", None)}
    body = append_body(table)
    added = pinned_requirements(body, metadata, judged_on_head=True)
    kinds = [r["type"] for r in added]
    assert "assert-current-schema-id" in kinds and "assert-table-uuid" in kinds
    assert "assert-ref-snapshot-id" not in kinds  # the client asserted main: not repeated
    assert [r["type"] for r in pinned_requirements(body, metadata)] == ["assert-table-uuid"]


def test_heads_are_bounded_by_weight(table: Table) -> None:
    heads = KnownHeads(60)
    body = append_body(table)
    for i in range(450):  # each weighs its snapshots plus 500: at most 400 of these
        heads.learn(("cat", ("demo",), f"t{i}"), state(table), body, observed_at=heads.clock())
    assert len(heads._heads) <= 400
    assert heads.usable(("cat", ("demo",), "t0"), {}) is None  # the oldest went first
    assert heads.usable(("cat", ("demo",), "t449"), {}) is not None
