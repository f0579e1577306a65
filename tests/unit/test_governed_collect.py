"""Collection of governed trees (``proxy.governed.collect``) over real governed snapshots built by
``SnapshotBuilder`` from a real pyiceberg table: expired snapshots and retired views go after the
grace, nothing orphaned, nothing referenced touched; storage isolation lists no base path."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import EqualTo
from pyiceberg.io import FileIO
from pyiceberg.manifest import read_manifest_list
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform

from proxy.governed.collect import MARKER, Collector, Uses, collect_table
from proxy.governed.copies import copy_governed
from proxy.governed.layout import TableTree
from proxy.governed.snapshots import BuildInputs, GovernedSnapshot, SnapshotBuilder
from proxy.governed.views import governed_view
from proxy.planning.manifest_cache import ManifestCache
from proxy.resources import Resource
from proxy.restrictions import ReadView, RowFilter
from tests.support.governed_copies import ROWS, SCHEMA

EU = ReadView(Resource("icegov", ("db",), "t"),
              row_filter=RowFilter(EqualTo("region", "EU"), "region = 'EU'"))
US = ReadView(Resource("icegov", ("db",), "t"),
              row_filter=RowFilter(EqualTo("region", "US"), "region = 'US'"))
BY_REGION = PartitionSpec(PartitionField(4, 1000, IdentityTransform(), "region"))


def make_table(folder: Path, spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC) -> Table:
    """``db.t``: three snapshots — two appends of mixed regions, then a delete that rewrites
    the first append's file (its governed copy is then referenced by old snapshots only)."""
    folder.mkdir(parents=True, exist_ok=True)
    catalog = SqlCatalog("c", uri=f"sqlite:///{folder}/c.db",
                         warehouse=(folder / "wh").as_uri())
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", SCHEMA, partition_spec=spec)
    table.append(ROWS)
    table.append(ROWS.set_column(0, "id", pa.array(range(10, 16), pa.int64())).cast(ROWS.schema))
    table.delete(EqualTo("id", 2))
    return catalog.load_table("db.t")


def build(table: Table, root: str, view: ReadView, copy_proven: bool = False
          ) -> tuple[str, dict[int, GovernedSnapshot]]:
    """Every snapshot of ``table`` governed under ``view``: (digest, built by snapshot id)."""
    metadata = table.metadata
    gview = governed_view(view, metadata)
    tree = TableTree(root, str(metadata.table_uuid)).view(gview.digest)
    inputs = BuildInputs(metadata, table.io, gview, tree, ManifestCache(100_000),
                         tuple(table.io.properties.items()), copy_proven)
    builder = SnapshotBuilder(inputs, lambda jobs: [copy_governed(j) for j in jobs])
    return gview.digest, {s.snapshot_id: builder.build(s) for s in metadata.snapshots}


def expire_all_but_current(table: Table) -> Table:
    current = table.metadata.current_snapshot_id
    old = [s.snapshot_id for s in table.metadata.snapshots if s.snapshot_id != current]
    table.maintenance.expire_snapshots().by_ids(old).commit()
    table = table.refresh()
    assert [s.snapshot_id for s in table.metadata.snapshots] == [current]
    return table


def local(path: str) -> str:
    return path.removeprefix("file://")


def files_under(directory: str) -> set[str]:
    return {os.path.join(d, f) for d, _, names in os.walk(local(directory)) for f in names}


def reached(io: FileIO, lists: list[str]) -> set[str]:
    """Every file the governed lists reach, walked with pyiceberg: the lists, their sidecars,
    their manifests and summaries, and the data files the manifests list."""
    found: set[str] = set()
    for path in lists:
        found |= {local(path), local(path) + ".json"}
        for manifest in read_manifest_list(io.new_input(path)):
            found |= {local(manifest.manifest_path),
                      local(manifest.manifest_path).removesuffix(".avro") + ".json"}
            found |= {local(e.data_file.file_path) for e in manifest.fetch_manifest_entry(io)}
    return found


def governed_rows(io: FileIO, governed: GovernedSnapshot) -> list[int]:
    ids: list[int] = []
    for manifest in read_manifest_list(io.new_input(governed.manifest_list)):
        for entry in manifest.fetch_manifest_entry(io):
            ids += pq.read_table(local(entry.data_file.file_path)).column("id").to_pylist()
    return sorted(ids)


@pytest.fixture
def table(tmp_path: Path) -> Table:
    return make_table(tmp_path / "t")


@pytest.fixture
def root(tmp_path: Path) -> str:
    return (tmp_path / "governed").as_uri()


def tree_of(table: Table, root: str) -> TableTree:
    return TableTree(root, str(table.metadata.table_uuid))


def test_expired_snapshots_leave_nothing_orphaned(table: Table, root: str) -> None:
    digest, built = build(table, root, EU)
    view = tree_of(table, root).view(digest)
    before = files_under(view.prefix)
    table = expire_all_but_current(table)
    current = built[table.metadata.current_snapshot_id]

    result = collect_table(table.io, tree_of(table, root), table.metadata, {digest},
                           grace_seconds=0)

    after = files_under(view.prefix)
    assert after == reached(table.io, [current.manifest_list])  # nothing orphaned
    gone = before - after
    assert {local(built[s].manifest_list) for s in built if built[s] is not current} <= gone
    assert any("/data/" in p for p in gone)  # the copy of the rewritten file
    assert result.removed and not result.retired and not result.unreadable
    assert governed_rows(table.io, current) == [0, 3, 5, 10, 12, 13, 15]


def test_nothing_goes_before_the_grace(table: Table, root: str) -> None:
    digest, _ = build(table, root, EU)
    table = expire_all_but_current(table)
    tree = tree_of(table, root)
    before = files_under(tree.view(digest).prefix)
    start = time.time() + 1  # every file is older than this

    first = collect_table(table.io, tree, table.metadata, {digest}, grace_seconds=100,
                          now=start)
    again = collect_table(table.io, tree, table.metadata, {digest}, grace_seconds=100,
                          now=start + 99)
    assert not first.removed and not again.removed and first.waiting
    assert files_under(tree.view(digest).prefix) == before
    marker = json.loads(Path(local(f"{tree.prefix}/{MARKER}")).read_text())
    assert set(marker["files"].values()) == {start}  # first seen, not last seen

    late = collect_table(table.io, tree, table.metadata, {digest}, grace_seconds=100,
                         now=start + 101)
    assert sorted(late.removed) == sorted(first.waiting)
    assert json.loads(Path(local(f"{tree.prefix}/{MARKER}")).read_text())["files"] == {}


def test_a_file_written_within_the_grace_stays(table: Table, root: str) -> None:
    digest, _ = build(table, root, EU)
    tree = tree_of(table, root)
    stray = local(tree.view(digest).data_file("being-written"))
    Path(stray).write_bytes(b"a build under way")
    Path(local(f"{tree.prefix}/{MARKER}")).write_text(json.dumps(
        {"files": {f"{digest}/data/being-written.parquet": 0.0}}))  # seen long ago
    result = collect_table(table.io, tree, table.metadata, {digest}, grace_seconds=60)
    assert os.path.exists(stray) and not result.removed
    old = time.time() - 120
    os.utime(stray, (old, old))
    result = collect_table(table.io, tree, table.metadata, {digest}, grace_seconds=60)
    assert not os.path.exists(stray) and result.removed == [
        f"{digest}/data/being-written.parquet"]


def test_a_retired_view_goes_whole_after_the_grace(table: Table, root: str) -> None:
    eu, built = build(table, root, EU)
    us, _ = build(table, root, US)
    tree = tree_of(table, root)
    later = time.time() + 1

    waiting = collect_table(table.io, tree, table.metadata, {eu}, grace_seconds=10, now=later)
    assert not waiting.retired and os.path.isdir(local(tree.view(us).prefix))
    retired = collect_table(table.io, tree, table.metadata, {eu}, grace_seconds=10,
                            now=later + 10)
    assert retired.retired == [us]
    assert not os.path.exists(local(tree.view(us).prefix))
    assert files_under(tree.view(eu).prefix) == reached(  # the view in use keeps all it serves
        table.io, [g.manifest_list for g in built.values()])


def test_a_view_used_again_is_not_retired(table: Table, root: str) -> None:
    eu, _ = build(table, root, EU)
    us, _ = build(table, root, US)
    tree = tree_of(table, root)
    later = time.time() + 1
    collect_table(table.io, tree, table.metadata, {eu}, grace_seconds=10, now=later)
    collect_table(table.io, tree, table.metadata, {eu, us}, grace_seconds=10, now=later + 5)
    result = collect_table(table.io, tree, table.metadata, {eu}, grace_seconds=10,
                           now=later + 11)  # unused again since later + 11 only
    assert not result.retired and os.path.isdir(local(tree.view(us).prefix))


def test_busy_and_unreadable_views_are_left_alone(table: Table, root: str) -> None:
    digest, built = build(table, root, EU)
    table = expire_all_but_current(table)
    tree = tree_of(table, root)
    before = files_under(tree.view(digest).prefix)
    busy = collect_table(table.io, tree, table.metadata, {digest}, busy={digest},
                         grace_seconds=0)
    assert not busy.removed and files_under(tree.view(digest).prefix) == before

    current = built[table.metadata.current_snapshot_id]
    Path(local(current.manifest_list)).write_bytes(b"not avro")
    broken = collect_table(table.io, tree, table.metadata, {digest}, grace_seconds=0)
    assert broken.unreadable == [digest] and not broken.removed
    assert files_under(tree.view(digest).prefix) == before


def test_only_names_of_governed_trees_are_removed(table: Table, root: str) -> None:
    digest, _ = build(table, root, EU)
    tree = tree_of(table, root)
    foreign = [Path(local(tree.prefix)) / "notes" / "keep.txt",
               Path(local(tree.prefix)) / "keep.txt"]
    for path in foreign:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("not ours")
    result = collect_table(table.io, tree, table.metadata, set(), grace_seconds=0)
    assert result.retired == [digest]
    assert all(path.exists() for path in foreign)


def test_a_corrupt_marker_only_delays(table: Table, root: str) -> None:
    digest, _ = build(table, root, EU)
    table = expire_all_but_current(table)
    tree = tree_of(table, root)
    Path(local(f"{tree.prefix}/{MARKER}")).write_text('{"files": {"x": "soon"}, "views": 7')
    later = time.time() + 1
    first = collect_table(table.io, tree, table.metadata, {digest}, grace_seconds=5, now=later)
    assert not first.removed and first.waiting
    assert collect_table(table.io, tree, table.metadata, {digest}, grace_seconds=5,
                         now=later + 5).removed


@pytest.mark.parametrize("spec", [UNPARTITIONED_PARTITION_SPEC, BY_REGION],
                         ids=["unpartitioned", "by-region"])
def test_storage_isolation_lists_no_base_path(tmp_path: Path, root: str,
                                              spec: PartitionSpec) -> None:
    table = make_table(tmp_path / "t", spec)
    base = table.location()
    _, in_place = build(table, root, EU)
    _, isolated = build(table, root, EU, copy_proven=True)
    for built in (in_place, isolated):
        assert governed_rows(table.io, built[table.metadata.current_snapshot_id]) \
            == [0, 3, 5, 10, 12, 13, 15]
    listed = {sid: [e.data_file.file_path for m in read_manifest_list(
        table.io.new_input(g.manifest_list)) for e in m.fetch_manifest_entry(table.io)]
        for sid, g in isolated.items()}
    paths = [p for ps in listed.values() for p in ps]
    assert paths and all(p.startswith(root + "/") and not p.startswith(base) for p in paths)
    if spec is BY_REGION:  # proven files are referenced in place without the setting
        current = in_place[table.metadata.current_snapshot_id]
        kept = [e.data_file.file_path for m in read_manifest_list(
            table.io.new_input(current.manifest_list)) for e in m.fetch_manifest_entry(table.io)]
        assert kept and all(p.startswith(base) for p in kept)


def test_the_collector_runs_once_per_interval(table: Table, root: str) -> None:
    build(table, root, EU)
    table = expire_all_but_current(table)
    tree = tree_of(table, root)
    asked: list[int] = []
    told: list[str] = []

    def uses() -> Uses:
        asked.append(1)
        return Uses(frozenset(), frozenset(), table.metadata, table.io)

    async def twice() -> Collector:
        collector = Collector(30.0)
        collector.request(tree, uses, told.extend)
        collector.request(tree, uses, told.extend)
        while collector._running:
            await asyncio.sleep(0)
        collector.request(tree, uses, told.extend)
        return collector

    collector = asyncio.run(twice())
    assert len(asked) == 1 and collector.last is not None
    assert collector.last.waiting and not told  # retired only after its grace


def test_only_the_newest_governed_metadata_file_outlives_the_grace(table: Table,
                                                                   root: str) -> None:
    digest, _ = build(table, root, EU)
    view = tree_of(table, root).view(digest)
    older, newer = local(view.metadata("a")), local(view.metadata("b"))
    os.makedirs(os.path.dirname(older), exist_ok=True)
    for path, age in ((older, 200), (newer, 100)):
        Path(path).write_text("{}")
        os.utime(path, (time.time() - age, time.time() - age))
    result = collect_table(table.io, tree_of(table, root), table.metadata, {digest},
                           grace_seconds=0)
    assert not os.path.exists(older) and os.path.exists(newer)
    assert f"{digest}/metadata/a.metadata.json" in result.removed
