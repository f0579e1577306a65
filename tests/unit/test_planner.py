"""The scan planner against pyiceberg's own local planning, on real SqlCatalog tables.

``events`` is written by pyiceberg appends (identity ``region`` and ``day(ts)`` partitions);
``crafted`` tables get manifests written with pyiceberg's writers (bucket partitions, delete
files, chosen sequence numbers): planning reads manifests only, so their data files need not
exist. Every comparison is on file paths, delete file paths and residuals.
"""

from __future__ import annotations

import gc
import itertools
import struct
import threading
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import (
    AlwaysTrue,
    And,
    BooleanExpression,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    Not,
    NotNull,
    Or,
)
from pyiceberg.io import FileIO, InputFile, OutputFile
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestEntryStatus
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask, Table
from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import DoubleType, LongType, NestedField, StringType, TimestampType

from proxy.errors import BadRequest, Forbidden, NotFound
from proxy.planning.manifest_cache import ManifestCache
from proxy.planning.planner import Plan, Planner, ScanSpec
from tests.support.commit_capture import Crafter
from tests.support.row_files import spec_manifest

ADDED = ManifestEntryStatus.ADDED
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "region", StringType(), required=False),
    NestedField(3, "ts", TimestampType(), required=False),
    NestedField(4, "amount", DoubleType(), required=False),
)
EVENTS_SPEC = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "region"))
DAILY_SPEC = PartitionSpec(
    PartitionField(2, 1000, IdentityTransform(), "region"),
    PartitionField(3, 1001, DayTransform(), "ts_day"))
DAY0 = datetime(2024, 3, 1)
_snapshot_ids = itertools.count(50_000)

Planned = dict[str, tuple[tuple[str, ...], str]]


# --- helpers shared by the planner test modules -------------------------------------------

def new_catalog(folder: Path) -> SqlCatalog:
    catalog = SqlCatalog("plans", uri=f"sqlite:///{folder}/c.db", warehouse=folder.as_uri())
    catalog.create_namespace("db")
    return catalog


def event_rows(ids: Iterable[int], region: str, day: int) -> pa.Table:
    ids = list(ids)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "region": pa.array([region] * len(ids), pa.string()),
        "ts": pa.array([DAY0 + timedelta(days=day, minutes=i) for i in ids], pa.timestamp("us")),
        "amount": pa.array([float(i) for i in ids], pa.float64()),
    })


def described(tasks: Iterable[FileScanTask]) -> Planned:
    """Each task as file path -> (its delete files' paths, its residual)."""
    return {t.file.file_path: (tuple(sorted(d.file_path for d in t.delete_files)),
                               str(t.residual)) for t in tasks}


def crafter_for(catalog: SqlCatalog, table: Table) -> Crafter:
    location = table.location().removeprefix("file://")
    folder = Path(location) / "metadata"
    return Crafter(catalog, table, folder)


def data_file(table: Table, name: str, partition: tuple[Any, ...] = (), records: int = 10,
              ids: tuple[int, int] | None = None,
              content: DataFileContent = DataFileContent.DATA, **fields: Any) -> DataFile:
    """A content file that exists only in manifests; ``ids`` are bounds of column ``id``."""
    if ids is not None:
        fields["lower_bounds"] = {1: struct.pack("<q", ids[0])}
        fields["upper_bounds"] = {1: struct.pack("<q", ids[1])}
    return DataFile.from_args(content=content, file_path=f"{table.location()}/data/{name}.parquet",
                              file_format=FileFormat.PARQUET, partition=Record(*partition),
                              record_count=records, file_size_in_bytes=100, **fields)


def commit(crafter: Crafter, data: Iterable[DataFile] = (), deletes: Iterable[DataFile] = (),
           operation: str = "append", spec: PartitionSpec | None = None) -> int:
    """A snapshot adding ``data`` and ``deletes`` (one manifest each) on top of the current one,
    at the next sequence number; its id."""
    sid = next(_snapshot_ids)
    spec = spec or crafter.table.spec()
    data, deletes = list(data), list(deletes)
    manifests = []
    if data:
        manifests.append(spec_manifest(crafter, sid, [(ADDED, f, 0) for f in data], spec))
    if deletes:
        manifests.append(spec_manifest(crafter, sid, [(ADDED, f, 0) for f in deletes], spec,
                                       deletes=True))
    parent = crafter.parent_manifests() if crafter.table.current_snapshot() else []
    crafter.apply(crafter.snapshot(sid, [*manifests, *parent], operation))
    return sid


def plan_of(planner: Planner, table: Table, **spec: Any) -> Plan:
    return planner.plan(table.metadata, table.io, ScanSpec(**spec))


class CountingIO(FileIO):
    """A FileIO that records every location opened for reading."""

    def __init__(self, inner: FileIO) -> None:
        super().__init__(inner.properties)
        self.inner = inner
        self.opened: list[str] = []
        self._lock = threading.Lock()

    def new_input(self, location: str) -> InputFile:
        with self._lock:
            self.opened.append(location)
        return self.inner.new_input(location)

    def new_output(self, location: str) -> OutputFile:
        return self.inner.new_output(location)

    def delete(self, location: str | InputFile | OutputFile) -> None:
        self.inner.delete(location)


@pytest.fixture()
def planner() -> Iterator[Planner]:
    running = Planner(ManifestCache(100_000), threads=3)
    yield running
    running.close()


# --- pyiceberg-written tables ---------------------------------------------------------------

@pytest.fixture()
def events(tmp_path: Path) -> Table:
    """Three appends: (eu day 0, us day 0), (eu day 1, ap day 2), (us day 2)."""
    table = new_catalog(tmp_path).create_table("db.events", SCHEMA, partition_spec=EVENTS_SPEC)
    table.append(pa.concat_tables([event_rows(range(0, 10), "eu", 0),
                                   event_rows(range(10, 20), "us", 0)]))
    table.append(pa.concat_tables([event_rows(range(20, 30), "eu", 1),
                                   event_rows(range(30, 40), "ap", 2)]))
    table.append(event_rows(range(40, 50), "us", 2))
    return table


FILTERS: list[BooleanExpression] = [
    AlwaysTrue(),
    EqualTo("region", "eu"),
    In("region", {"us", "ap"}),
    Not(EqualTo("region", "us")),
    GreaterThanOrEqual("ts", (DAY0 + timedelta(days=1)).isoformat()),
    And(EqualTo("region", "us"), LessThan("ts", (DAY0 + timedelta(days=1)).isoformat())),
    GreaterThan("amount", 25.0),
    Or(EqualTo("region", "ap"), LessThan("id", 5)),
    And(GreaterThan("id", 12), LessThan("id", 33)),
    NotNull("region"),
]


@pytest.mark.parametrize("scan_filter", FILTERS, ids=str)
def test_plans_what_local_planning_plans(planner: Planner, events: Table,
                                         scan_filter: BooleanExpression) -> None:
    expected = described(events.scan(row_filter=scan_filter).plan_files())
    plan = plan_of(planner, events, filter=scan_filter)
    assert described(plan.tasks) == expected
    assert plan.snapshot_id == events.metadata.current_snapshot_id


def test_selective_filters_prune(planner: Planner, events: Table) -> None:
    assert len(plan_of(planner, events).tasks) == 5
    eu = plan_of(planner, events, filter=EqualTo("region", "eu"))
    assert len(eu.tasks) == 2 and all("region=eu" in t.file.file_path for t in eu.tasks)
    assert plan_of(planner, events, filter=EqualTo("region", "nowhere")).tasks == ()


def test_time_travel_plans_the_snapshot(planner: Planner, events: Table) -> None:
    first, second, _ = events.snapshots()
    for snapshot in (first, second):
        expected = described(events.scan(snapshot_id=snapshot.snapshot_id).plan_files())
        plan = plan_of(planner, events, snapshot_id=snapshot.snapshot_id)
        assert described(plan.tasks) == expected and plan.snapshot_id == snapshot.snapshot_id
    assert len(plan_of(planner, events, snapshot_id=first.snapshot_id).tasks) == 2


def test_unknown_snapshot_is_not_found(planner: Planner, events: Table) -> None:
    with pytest.raises(NotFound, match="snapshot 42 does not exist"):
        plan_of(planner, events, snapshot_id=42)


def test_table_without_snapshot_plans_nothing(planner: Planner, tmp_path: Path) -> None:
    table = new_catalog(tmp_path).create_table("db.empty", SCHEMA)
    plan = plan_of(planner, table, filter=EqualTo("id", 1))
    assert plan == Plan(None, table.schema(), ())
    assert planner.plan_shards(table.metadata, table.io, ScanSpec(), 10) == []


def test_case_insensitive_filters_bind(planner: Planner, events: Table) -> None:
    expected = described(events.scan(row_filter=EqualTo("region", "eu")).plan_files())
    plan = plan_of(planner, events, filter=EqualTo("REGION", "eu"), case_sensitive=False)
    assert set(described(plan.tasks)) == set(expected)
    with pytest.raises(BadRequest, match="filter does not apply"):
        plan_of(planner, events, filter=EqualTo("REGION", "eu"))


def test_filters_that_do_not_bind_are_refused(planner: Planner, events: Table) -> None:
    with pytest.raises(BadRequest, match="filter does not apply"):
        plan_of(planner, events, filter=EqualTo("nope", 1))
    with pytest.raises(BadRequest, match="filter does not apply"):
        plan_of(planner, events, filter=EqualTo("id", "not a number"))
    with pytest.raises(Forbidden, match="row filter"):
        plan_of(planner, events, row_filter=EqualTo("gone", "eu"))


def test_row_filter_prunes_files_and_keeps_the_scan_residual(planner: Planner,
                                                             events: Table) -> None:
    scan_filter = GreaterThan("amount", 5.0)
    both = And(scan_filter, EqualTo("region", "eu"))
    plan = plan_of(planner, events, filter=scan_filter, row_filter=EqualTo("region", "eu"))
    expected_files = set(described(events.scan(row_filter=both).plan_files()))
    assert set(described(plan.tasks)) == expected_files and len(expected_files) == 2
    assert {str(t.residual) for t in plan.tasks} == {str(scan_filter)}
    assert all("region=eu" in t.file.file_path for t in plan.tasks)


def test_use_snapshot_schema_binds_to_the_snapshot_schema(planner: Planner,
                                                          events: Table) -> None:
    old = events.metadata.current_snapshot_id
    with events.update_schema() as update:
        update.rename_column("amount", "price")
    events.append(event_rows(range(50, 60), "eu", 3).rename_columns(
        ["id", "region", "ts", "price"]))
    as_of_old = events.metadata.model_copy(update={"current_schema_id": 0})
    expected = described(
        Table(events.name(), as_of_old, events.metadata_location, events.io, events.catalog)
        .scan(snapshot_id=old, row_filter=GreaterThan("amount", 25.0)).plan_files())
    plan = plan_of(planner, events, snapshot_id=old, filter=GreaterThan("amount", 25.0),
                   use_snapshot_schema=True)
    assert described(plan.tasks) == expected and plan.schema.schema_id == 0
    with pytest.raises(BadRequest):
        plan_of(planner, events, snapshot_id=old, filter=GreaterThan("amount", 25.0))
    current = plan_of(planner, events, filter=GreaterThan("price", 55.0))
    assert len(current.tasks) == 1 and current.schema.schema_id == 1


# --- incremental scans ----------------------------------------------------------------------

def test_incremental_range_plans_appended_files(planner: Planner, events: Table) -> None:
    first, second, third = (s.snapshot_id for s in events.snapshots())
    cases = [(first, third), (first, second), (second, third), (None, second)]
    for start, end in cases:
        scan = events.incremental_append_scan(to_snapshot_id_inclusive=end)
        if start is not None:
            scan = scan.from_snapshot_id_exclusive(start)
        expected = described(scan.plan_files())
        plan = plan_of(planner, events, start_snapshot_id=start, end_snapshot_id=end)
        assert described(plan.tasks) == expected, (start, end)
        assert plan.snapshot_id == end
    assert len(plan_of(planner, events, start_snapshot_id=first, end_snapshot_id=third).tasks) \
        == 3
    assert plan_of(planner, events, start_snapshot_id=third, end_snapshot_id=third).tasks == ()
    eu = plan_of(planner, events, start_snapshot_id=first, filter=EqualTo("region", "eu"))
    assert len(eu.tasks) == 1


def test_incremental_skips_non_append_snapshots(planner: Planner, tmp_path: Path) -> None:
    catalog = new_catalog(tmp_path)
    crafter = crafter_for(catalog, catalog.create_table("db.i", SCHEMA))
    start = commit(crafter, [data_file(crafter.table, "first")])
    commit(crafter, [data_file(crafter.table, "rewritten")], operation="overwrite")
    commit(crafter, [data_file(crafter.table, "appended")])
    table = crafter.table
    plan = plan_of(planner, table, start_snapshot_id=start)
    assert [Path(t.file.file_path).name for t in plan.tasks] == ["appended.parquet"]
    expected = table.incremental_append_scan().from_snapshot_id_exclusive(start).plan_files()
    assert described(plan.tasks) == described(expected)


def test_incremental_range_errors(planner: Planner, events: Table) -> None:
    first, _, third = (s.snapshot_id for s in events.snapshots())
    with pytest.raises(BadRequest, match="not an ancestor"):
        plan_of(planner, events, start_snapshot_id=third, end_snapshot_id=first)
    with pytest.raises(NotFound, match="start snapshot 7"):
        plan_of(planner, events, start_snapshot_id=7, end_snapshot_id=third)
    with pytest.raises(NotFound, match="end snapshot 8"):
        plan_of(planner, events, start_snapshot_id=first, end_snapshot_id=8)
    with pytest.raises(BadRequest, match="cannot be combined"):
        plan_of(planner, events, snapshot_id=third, start_snapshot_id=first)


# --- crafted manifests: day and bucket partitions, shards ---------------------------------

def micros(moment: datetime) -> int:
    return (moment - datetime(1970, 1, 1)) // timedelta(microseconds=1)


@pytest.fixture()
def daily(tmp_path: Path) -> Crafter:
    """``region`` and ``day(ts)`` partitions; three appends of files spanning an hour each."""
    catalog = new_catalog(tmp_path)
    crafter = crafter_for(catalog, catalog.create_table("db.d", SCHEMA,
                                                        partition_spec=DAILY_SPEC))
    day = DayTransform().transform(TimestampType())
    for batch, regions in enumerate((["eu", "us"], ["eu", "ap"], ["us"])):
        files = []
        for i, region in enumerate(regions):
            for hour in (3, 23):
                start = micros(DAY0 + timedelta(days=batch + i, hours=hour))
                end = start + 3_600_000_000
                files.append(data_file(crafter.table, f"d{batch}-{region}-{hour}",
                                       (region, day(start)),
                                       lower_bounds={3: struct.pack("<q", start)},
                                       upper_bounds={3: struct.pack("<q", end)}))
        commit(crafter, files)
    return crafter


DAY_FILTERS: list[BooleanExpression] = [
    GreaterThanOrEqual("ts", (DAY0 + timedelta(days=1)).isoformat()),
    And(EqualTo("region", "eu"), LessThan("ts", (DAY0 + timedelta(days=1, hours=4)).isoformat())),
    EqualTo("ts", (DAY0 + timedelta(days=2, hours=23, minutes=30)).isoformat()),
    Or(EqualTo("region", "ap"), GreaterThan("ts", (DAY0 + timedelta(days=2)).isoformat())),
]


@pytest.mark.parametrize("scan_filter", DAY_FILTERS, ids=str)
def test_day_filters_match_local_planning(planner: Planner, daily: Crafter,
                                          scan_filter: BooleanExpression) -> None:
    table = daily.table
    expected = described(table.scan(row_filter=scan_filter).plan_files())
    plan = plan_of(planner, table, filter=scan_filter)
    assert described(plan.tasks) == expected
    assert 0 < len(plan.tasks) < 10


@pytest.fixture()
def bucketed(tmp_path: Path) -> Crafter:
    """``bucket(4, id)`` partitions; four appends of 5 files, each file holding 10 ids."""
    spec = PartitionSpec(PartitionField(1, 1000, BucketTransform(4), "id_bucket"))
    catalog = new_catalog(tmp_path)
    crafter = crafter_for(catalog, catalog.create_table("db.b", SCHEMA, partition_spec=spec))
    bucket = BucketTransform(4).transform(LongType())
    for batch in range(4):
        files = []
        for i in range(5):
            low = (batch * 5 + i) * 10
            files.append(data_file(crafter.table, f"b{batch}-{i}", (bucket(low),), ids=(low, low)))
        commit(crafter, files)
    return crafter


@pytest.mark.parametrize("scan_filter", [EqualTo("id", 70), In("id", {10, 20, 150}),
                                         Not(EqualTo("id", 30)), LessThan("id", 40)], ids=str)
def test_bucket_filters_match_local_planning(planner: Planner, bucketed: Crafter,
                                             scan_filter: BooleanExpression) -> None:
    table = bucketed.table
    expected = described(table.scan(row_filter=scan_filter).plan_files())
    assert described(plan_of(planner, table, filter=scan_filter).tasks) == expected


def test_shards_cover_the_plan_exactly(planner: Planner, bucketed: Crafter) -> None:
    table, spec = bucketed.table, ScanSpec(filter=LessThan("id", 150))
    shards = planner.plan_shards(table.metadata, table.io, spec, 10)
    assert [len(s) for s in shards] == [2, 2]
    parts = [planner.plan(table.metadata, table.io, spec, shard).tasks for shard in shards]
    whole = planner.plan(table.metadata, table.io, spec).tasks
    assert [t.file.file_path for p in parts for t in p] == [t.file.file_path for t in whole]
    assert [len(s) for s in planner.plan_shards(table.metadata, table.io, spec, 3)] == [1] * 4


def test_shards_leave_out_manifests_that_cannot_match(planner: Planner, events: Table) -> None:
    spec = ScanSpec(filter=EqualTo("region", "ap"))
    shards = planner.plan_shards(events.metadata, events.io, spec, 1)
    second_append = events.snapshots()[1].snapshot_id
    [ap_manifest] = [m.manifest_path for m in events.current_snapshot().manifests(events.io)
                     if m.added_snapshot_id == second_append]
    assert shards == [(ap_manifest,)], "the other manifests' summaries exclude 'ap'"
    assert [len(s) for s in planner.plan_shards(events.metadata, events.io, ScanSpec(), 1)] \
        == [1, 1, 1]
    tasks = planner.plan(events.metadata, events.io, spec, shards[0]).tasks
    assert described(tasks) == described(events.scan(row_filter=spec.filter).plan_files())
    row_filtered = ScanSpec(row_filter=EqualTo("region", "ap"))
    assert planner.plan_shards(events.metadata, events.io, row_filtered, 1) == shards


def test_a_shard_naming_foreign_manifests_is_refused(planner: Planner,
                                                     bucketed: Crafter) -> None:
    table = bucketed.table
    with pytest.raises(BadRequest, match="does not scan"):
        planner.plan(table.metadata, table.io, ScanSpec(), ("file:///elsewhere/m.avro",))
    first = table.snapshots()[0].snapshot_id
    newest = planner.plan_shards(table.metadata, table.io, ScanSpec(), 5)[0]
    with pytest.raises(BadRequest):
        planner.plan(table.metadata, table.io, ScanSpec(snapshot_id=first), newest)


# --- the manifest cache ---------------------------------------------------------------------

def test_second_plan_reads_no_manifest(bucketed: Crafter) -> None:
    table = bucketed.table
    io = CountingIO(table.io)
    cache = ManifestCache(1_000)
    planner = Planner(cache, threads=2)
    first = planner.plan(table.metadata, io, ScanSpec())
    manifests = [m.manifest_path for m in table.current_snapshot().manifests(table.io)]
    assert sorted(io.opened) == sorted([*manifests, table.current_snapshot().manifest_list])
    assert cache.stats.misses == 4 and cache.stats.hits == 0
    io.opened.clear()
    second = planner.plan(table.metadata, io, ScanSpec(filter=EqualTo("id", 30)))
    assert io.opened == [] and cache.stats.misses == 4 and cache.stats.hits >= 3
    assert len(first.tasks) == 20 and len(second.tasks) == 1
    planner.close()


def test_manifest_cache_is_bounded_by_entries(bucketed: Crafter) -> None:
    table = bucketed.table
    io = CountingIO(table.io)
    planner = Planner(ManifestCache(12), threads=1)  # room for two manifests of 5 entries
    planner.plan(table.metadata, io, ScanSpec())
    io.opened.clear()
    planner.plan(table.metadata, io, ScanSpec())
    reread = [p for p in io.opened if "snap-" not in p]
    assert len(reread) >= 2, "manifests beyond the budget are read again"
    planner.close()


def test_concurrent_readers_decode_a_manifest_once(bucketed: Crafter) -> None:
    table = bucketed.table
    manifest = table.current_snapshot().manifests(table.io)[0]
    io = CountingIO(table.io)
    cache = ManifestCache(1_000)
    barrier = threading.Barrier(6)
    results: list[int] = []

    def read() -> None:
        barrier.wait()
        results.append(len(cache.entries(io, manifest)))

    threads = [threading.Thread(target=read) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [5] * 6 and io.opened == [manifest.manifest_path]


def test_planning_pauses_the_collector_and_restores_it(bucketed: Crafter,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    table = bucketed.table
    seen: list[bool] = []
    cache = ManifestCache(1_000, freeze_decoded=False)
    original = cache.entries

    def watched(io: FileIO, manifest: Any) -> Any:
        seen.append(gc.isenabled())
        return original(io, manifest)

    monkeypatch.setattr(cache, "entries", watched)
    planner = Planner(cache, threads=2)
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    assert len(planner.plan(table.metadata, table.io, ScanSpec()).tasks) == 20
    assert seen == [False] * 4 and gc.isenabled() and gc.get_freeze_count() == frozen
    gc.disable()
    try:
        planner.plan(table.metadata, table.io, ScanSpec())
        assert not gc.isenabled(), "a collector that was off stays off"
    finally:
        gc.enable()
    planner.close()


def test_a_large_decode_is_frozen_out_of_the_collector(bucketed: Crafter,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("proxy.planning.manifest_cache._FREEZE_MIN_OBJECTS", 1)
    planner = Planner(ManifestCache(1_000), threads=2)
    try:
        gc.unfreeze()
        plan = planner.plan(bucketed.table.metadata, bucketed.table.io, ScanSpec())
        assert len(plan.tasks) == 20
        assert gc.get_freeze_count() > 0 and gc.isenabled()
    finally:
        gc.unfreeze()
        planner.close()
