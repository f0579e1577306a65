"""The plan cache: exact hits, subset reuse through ``Planner.narrow`` (whose result must equal a
fresh plan of the narrower scan), keys that must never share a plan, and its bounds."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.expressions import (
    AlwaysTrue,
    And,
    BooleanExpression,
    EqualTo,
    GreaterThan,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask, Table
from pyiceberg.typedef import Record

from proxy.planning.manifest_cache import ManifestCache
from proxy.planning.plan_cache import PlanCache, PlanKey
from proxy.planning.planner import Plan, Planner, ScanSpec
from tests.support.commit_capture import Crafter
from tests.unit.test_planner import (
    DAY0,
    SCHEMA,
    CountingIO,
    commit,
    crafter_for,
    daily,  # noqa: F401  (fixture)
    data_file,
    described,
    new_catalog,
)
from tests.unit.test_planner_deletes import equality

EU = EqualTo("region", "eu")
LATE = GreaterThan("ts", (DAY0 + timedelta(days=1, hours=12)).isoformat())


def implies(narrow: BooleanExpression, wide: BooleanExpression) -> bool:
    """Enough for these tests: anything implies true; ``a AND b`` implies ``a`` and ``b``."""
    if wide == AlwaysTrue() or narrow == wide:
        return True
    return isinstance(narrow, And) and wide in (narrow.left, narrow.right)


@pytest.fixture()
def planner() -> Iterator[Planner]:
    running = Planner(ManifestCache(10_000), threads=2)
    yield running
    running.close()


def key_for(table: Table, spec: ScanSpec, view: tuple[object, ...] = ((), (), None),
            select: tuple[str, ...] | None = None) -> PlanKey:
    return PlanKey.for_scan(table.metadata, spec, str(spec.filter), select, None, view)


class Calls:
    """Planning callables that count how often the cache used them."""

    def __init__(self, planner: Planner, table: Table, spec: ScanSpec,
                 io: CountingIO | None = None) -> None:
        self.fresh_calls = self.narrow_calls = 0
        self._planner, self._table, self._spec = planner, table, spec
        self._io = io or table.io

    def fresh(self) -> Plan:
        self.fresh_calls += 1
        return self._planner.plan(self._table.metadata, self._io, self._spec)

    def narrow(self, wide: Plan) -> Plan:
        self.narrow_calls += 1
        return self._planner.narrow(self._table.metadata, self._spec, wide)


def cached(cache: PlanCache, planner: Planner, table: Table, spec: ScanSpec,
           io: CountingIO | None = None, **key: Any) -> tuple[Plan, Calls]:
    calls = Calls(planner, table, spec, io)
    plan = cache.plan(key_for(table, spec, **key), calls.fresh, calls.narrow)
    return plan, calls


def test_a_repeated_scan_is_a_hit(planner: Planner, daily: Crafter) -> None:  # noqa: F811
    cache = PlanCache(8, implies)
    first, calls = cached(cache, planner, daily.table, ScanSpec(filter=EU))
    again, repeat = cached(cache, planner, daily.table, ScanSpec(filter=EU))
    assert again is first and calls.fresh_calls == 1 and repeat.fresh_calls == 0
    assert cache.stats.hits == 1 and cache.stats.misses == 1 and cache.stats.reuses == 0


@pytest.mark.parametrize("wide, narrow", [
    (AlwaysTrue(), EU), (AlwaysTrue(), LATE), (EU, And(EU, LATE)), (LATE, And(EU, LATE))],
    ids=str)
def test_a_narrower_scan_is_planned_from_the_cached_plan(
        planner: Planner, daily: Crafter,  # noqa: F811
        wide: BooleanExpression, narrow: BooleanExpression) -> None:
    table = daily.table
    cache = PlanCache(8, implies)
    wide_plan, _ = cached(cache, planner, table, ScanSpec(filter=wide))
    io = CountingIO(table.io)
    narrowed, calls = cached(cache, planner, table, ScanSpec(filter=narrow), io)
    assert calls.fresh_calls == 0 and calls.narrow_calls == 1 and io.opened == []
    fresh = planner.plan(table.metadata, table.io, ScanSpec(filter=narrow))
    assert described(narrowed.tasks) == described(fresh.tasks)
    assert 0 < len(narrowed.tasks) < len(wide_plan.tasks)
    assert cache.stats.reuses == 1 and cache.stats.misses == 1
    again, repeat = cached(cache, planner, table, ScanSpec(filter=narrow))
    assert again is narrowed and repeat.narrow_calls == 0 and cache.stats.hits == 1


def test_narrowing_prunes_delete_files_like_a_fresh_plan(planner: Planner,
                                                         tmp_path: Path) -> None:
    catalog = new_catalog(tmp_path)
    crafter = crafter_for(catalog, catalog.create_table("db.t", SCHEMA))
    commit(crafter, [data_file(crafter.table, "mixed", lower_bounds={2: b"eu"},
                               upper_bounds={2: b"us"})])
    commit(crafter, deletes=[equality(crafter.table, "us-rows", region="us")],
           operation="delete")
    table, cache = crafter.table, PlanCache(8, implies)
    wide, _ = cached(cache, planner, table, ScanSpec())
    narrowed, calls = cached(cache, planner, table, ScanSpec(filter=EU))
    assert calls.narrow_calls == 1
    assert [len(t.delete_files) for t in wide.tasks] == [1]
    assert described(narrowed.tasks) == described(
        planner.plan(table.metadata, table.io, ScanSpec(filter=EU)).tasks)
    assert [len(t.delete_files) for t in narrowed.tasks] == [0]


@pytest.mark.parametrize("change", ["view", "select", "row filter", "snapshot", "case"])
def test_keys_that_differ_beyond_the_filter_never_share(planner: Planner, daily: Crafter,  # noqa: F811
                                                        change: str) -> None:
    table = daily.table
    cache = PlanCache(8, implies)
    cached(cache, planner, table, ScanSpec())
    spec, extra = ScanSpec(filter=EU), dict[str, Any]()
    if change == "view":
        extra = {"view": (("amount",), (), None)}
    elif change == "select":
        extra = {"select": ("id",)}
    elif change == "row filter":
        spec = ScanSpec(filter=EU, row_filter=LATE)
        extra = {"view": ((), (), "ts > late")}
    elif change == "snapshot":
        spec = ScanSpec(filter=EU, snapshot_id=table.snapshots()[0].snapshot_id)
    else:
        spec = ScanSpec(filter=EU, case_sensitive=False)
    _, calls = cached(cache, planner, table, spec, **extra)
    assert calls.fresh_calls == 1 and calls.narrow_calls == 0
    assert cache.stats.reuses == 0 and cache.stats.misses == 2


def test_a_commit_changes_the_key_of_a_scan_without_snapshot(daily: Crafter) -> None:  # noqa: F811
    before = key_for(daily.table, ScanSpec())
    commit(daily, [data_file(daily.table, "later", ("eu", 19800))])
    after = key_for(daily.table, ScanSpec())
    assert before != after and before.snapshot_id != after.snapshot_id
    assert key_for(daily.table, ScanSpec(snapshot_id=before.snapshot_id)) == before


def test_filters_that_are_not_implied_are_planned_afresh(planner: Planner,
                                                         daily: Crafter) -> None:  # noqa: F811
    cache = PlanCache(8, implies)
    cached(cache, planner, daily.table, ScanSpec(filter=EU))
    _, calls = cached(cache, planner, daily.table, ScanSpec(filter=LATE))
    assert calls.fresh_calls == 1 and cache.stats.misses == 2

    def broken(narrow: BooleanExpression, wide: BooleanExpression) -> bool:
        raise ValueError("cannot tell")

    failing = PlanCache(8, broken)
    cached(failing, planner, daily.table, ScanSpec())
    _, calls = cached(failing, planner, daily.table, ScanSpec(filter=EU))
    assert calls.fresh_calls == 1 and failing.stats.reuses == 0


def plan_with(tasks: int) -> Plan:
    files = (DataFile.from_args(content=DataFileContent.DATA, file_path=f"file:///t/f{i}",
                                file_format=FileFormat.PARQUET, partition=Record(),
                                record_count=1, file_size_in_bytes=1) for i in range(tasks))
    return Plan(1, Schema(), tuple(FileScanTask(f) for f in files))


def fixed_key(name: str) -> PlanKey:
    return PlanKey("uuid", 1, name, None, True, None, (), filter=EqualTo("id", name))


def test_the_cache_is_bounded_by_plans_and_tasks() -> None:
    never: Callable[[Plan], Plan] = lambda _: pytest.fail("nothing narrows")  # noqa: E731
    cache = PlanCache(2, lambda n, w: False, max_tasks=10)
    for name in ("a", "b", "c"):
        cache.plan(fixed_key(name), lambda: plan_with(2), never)
    assert cache.get(fixed_key("a")) is None, "the least recently used plan is evicted"
    assert cache.get(fixed_key("b")) is not None and cache.get(fixed_key("c")) is not None
    cache.put(fixed_key("big"), plan_with(9))
    assert cache.get(fixed_key("big")) is not None
    assert cache.get(fixed_key("b")) is None and cache.get(fixed_key("c")) is None
    cache.put(fixed_key("huge"), plan_with(11))
    assert cache.get(fixed_key("huge")) is None, "a plan larger than the budget is not kept"
    off = PlanCache(0, lambda n, w: True)
    off.plan(fixed_key("a"), lambda: plan_with(1), never)
    assert off.get(fixed_key("a")) is None
