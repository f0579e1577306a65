"""Governed snapshots built directly (``proxy.governed.snapshots``/``metadata``/``service``) over
real tables in a temporary warehouse: what a governed snapshot lists, what it reuses, how fresh
an answer is, and what a commit built on one may do."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import EqualTo
from pyiceberg.manifest import ManifestContent
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from proxy.errors import Forbidden, NotReady
from proxy.governed.copies import CopiedFile, CopyJob, copy_governed
from proxy.governed.layout import TableTree
from proxy.governed.metadata import BASE_SNAPSHOT, Freshness, governed_metadata
from proxy.governed.service import GovernedSnapshots
from proxy.governed.settings import GovernedSettings
from proxy.governed.snapshots import BuildInputs, GovernedSnapshot, SnapshotBuilder
from proxy.governed.views import governed_view, governs
from proxy.planning.manifest_cache import ManifestCache
from proxy.resources import Resource
from proxy.restrictions import Mask, MaskAction, ReadView, RowFilter

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False),
                NestedField(2, "region", StringType(), required=False),
                NestedField(3, "email", StringType(), required=False))
TABLE = Resource("icegov", ("demo",), "orders")
EU = ReadView(TABLE, row_filter=RowFilter(EqualTo("region", "eu"), "region = 'eu'"))


def rows(ids: Sequence[int], regions: Sequence[str]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "region": pa.array(regions),
                     "email": pa.array([f"u{i}@example.org" for i in ids])})


def make_table(tmp: Path, *, partitioned: bool = False) -> Table:
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp}/c.db", warehouse=(tmp / "wh").as_uri())
    catalog.create_namespace("demo")
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "region")) \
        if partitioned else PartitionSpec()
    return catalog.create_table(("demo", "orders"), schema=SCHEMA, partition_spec=spec)


def builder(tmp: Path, table: Table, view: ReadView = EU,
            copies: list[CopyJob] | None = None) -> SnapshotBuilder:
    metadata = table.metadata
    gview = governed_view(view, metadata)
    root = (tmp / "governed").as_uri()
    tree = TableTree(root, str(metadata.table_uuid)).view(gview.digest)
    inputs = BuildInputs(metadata, table.io, gview, tree, ManifestCache(10_000), ())

    def run(jobs: Sequence[CopyJob]) -> list[CopiedFile]:
        if copies is not None:
            copies.extend(jobs)
        return [copy_governed(job) for job in jobs]
    return SnapshotBuilder(inputs, run)


def listed_files(table: Table, built: GovernedSnapshot) -> list[str]:
    io = table.io
    from pyiceberg.manifest import read_manifest_list
    return [e.data_file.file_path for m in read_manifest_list(io.new_input(built.manifest_list))
            for e in m.fetch_manifest_entry(io)]


def read_regions(table: Table, paths: list[str]) -> list[str]:
    regions: list[str] = []
    for path in paths:
        with table.io.new_input(path).open() as stream:
            regions += pq.read_table(stream).column("region").to_pylist()
    return regions


def test_a_mixed_file_is_copied_with_only_its_permitted_rows(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    table.append(rows([1, 2, 3], ["eu", "us", "eu"]))
    table = table.refresh()
    built = builder(tmp_path, table).build(table.current_snapshot())  # type: ignore[arg-type]
    paths = listed_files(table, built)
    assert len(paths) == 1 and "/governed/" in paths[0]
    assert read_regions(table, paths) == ["eu", "eu"]
    assert built.records == 2 and built.data_files == 1


def test_a_file_proven_by_its_footer_is_referenced_in_place(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    table.append(rows([1, 2], ["eu", "eu"]))
    table.append(rows([3], ["us"]))
    table = table.refresh()
    base_paths = [t.file.file_path for t in table.scan().plan_files()]
    copies: list[CopyJob] = []
    built = builder(tmp_path, table, copies=copies).build(table.current_snapshot())  # type: ignore[arg-type]
    paths = listed_files(table, built)
    assert paths == [p for p in base_paths if read_regions(table, [p]) == ["eu", "eu"]]
    assert copies == []  # the US-only file is left out unread, the EU-only one kept in place


def test_a_partition_aligned_filter_writes_no_data(tmp_path: Path) -> None:
    table = make_table(tmp_path, partitioned=True)
    table.append(rows([1, 2, 3, 4], ["eu", "us", "eu", "ap"]))
    table = table.refresh()
    copies: list[CopyJob] = []
    built = builder(tmp_path, table, copies=copies).build(table.current_snapshot())  # type: ignore[arg-type]
    assert copies == []
    assert read_regions(table, listed_files(table, built)) == ["eu", "eu"]
    assert not list((tmp_path / "governed").glob("**/data/*.parquet"))


def test_a_mask_copies_every_file_and_keeps_the_column(tmp_path: Path) -> None:
    table = make_table(tmp_path, partitioned=True)
    table.append(rows([1, 2], ["eu", "us"]))
    table = table.refresh()
    view = ReadView(TABLE, masks=MappingProxyType({"email": Mask(MaskAction.SHOW_LAST_4)}))
    built = builder(tmp_path, table, view).build(table.current_snapshot())  # type: ignore[arg-type]
    paths = listed_files(table, built)
    assert all("/governed/" in p for p in paths) and len(paths) == 2
    emails = []
    for path in paths:
        with table.io.new_input(path).open() as stream:
            emails += pq.read_table(stream).column("email").to_pylist()
    assert sorted(emails) == ["xn@xxxxxxx.org", "xn@xxxxxxx.org"]


def test_a_new_snapshot_reuses_the_governed_manifests_of_the_old(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    table.append(rows([1, 2], ["eu", "us"]))
    table = table.refresh()
    first = table.current_snapshot()
    copies: list[CopyJob] = []
    builder(tmp_path, table, copies=copies).build(first)  # type: ignore[arg-type]
    table.append(rows([3, 4], ["us", "eu"]))
    table = table.refresh()
    copies.clear()
    built = builder(tmp_path, table, copies=copies).build(table.current_snapshot())  # type: ignore[arg-type]
    assert [j.data.path for j in copies] == [
        f.file_path for f in _added(table)]  # only the appended file was read
    assert sorted(read_regions(table, listed_files(table, built))) == ["eu", "eu"]


def _added(table: Table) -> list[Any]:
    snapshot = table.current_snapshot()
    assert snapshot is not None
    return [e.data_file for m in snapshot.manifests(table.io)
            if m.content == ManifestContent.DATA and m.added_snapshot_id == snapshot.snapshot_id
            for e in m.fetch_manifest_entry(table.io)]


def test_deletes_are_applied_and_no_delete_file_is_listed(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    table.upgrade_table = None  # type: ignore[attr-defined]
    table.append(rows([1, 2, 3], ["eu", "eu", "us"]))
    table = table.refresh()
    table.delete(EqualTo("id", 1))  # copy-on-write by pyiceberg: a rewritten file
    table = table.refresh()
    built = builder(tmp_path, table).build(table.current_snapshot())  # type: ignore[arg-type]
    assert read_regions(table, listed_files(table, built)) == ["eu"]


def test_governed_metadata_lists_only_built_snapshots_and_no_base_files() -> None:
    base = {"format-version": 2, "current-snapshot-id": 2, "properties": {"a": "b"},
            "snapshots": [{"snapshot-id": 1, "manifest-list": "base/1.avro",
                           "summary": {"operation": "append", "total-records": "9"}},
                          {"snapshot-id": 2, "parent-snapshot-id": 1,
                           "manifest-list": "base/2.avro", "summary": {"operation": "append"}}],
            "refs": {"main": {"snapshot-id": 2, "type": "branch"},
                     "old": {"snapshot-id": 7, "type": "tag"}},
            "snapshot-log": [{"snapshot-id": 1}, {"snapshot-id": 2}],
            "metadata-log": [{"metadata-file": "base/v1.metadata.json"}],
            "statistics": [{"statistics-path": "base/x.stats"}]}
    built = {1: GovernedSnapshot(1, "gov/1.avro", 1, 3, 0)}
    document = governed_metadata(base, built, "d1", Freshness(1, 2, 12.0))
    text = str(document)
    assert "base/" not in text
    assert [s["snapshot-id"] for s in document["snapshots"]] == [1]
    assert document["refs"] == {"main": {"snapshot-id": 1, "type": "branch"}}
    assert document["current-snapshot-id"] == 1
    assert document["snapshots"][0]["summary"][BASE_SNAPSHOT] == "1"
    assert document["snapshots"][0]["summary"]["total-records"] == "3"
    assert document["properties"]["icegov.governed.stale-seconds"] == "12.000"


def test_a_mask_on_a_partition_column_fails_closed(tmp_path: Path) -> None:
    table = make_table(tmp_path, partitioned=True)
    view = ReadView(TABLE, masks=MappingProxyType({"region": Mask(MaskAction.SHA_256)}))
    with pytest.raises(Forbidden):
        governed_view(view, table.metadata)
    assert governs(view) and not governs(ReadView(TABLE, denied=frozenset({"email"})))


def test_a_format_3_table_fails_closed(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    v3 = table.metadata.model_copy(update={"format_version": 3})
    with pytest.raises(Forbidden, match="format-3"):
        governed_view(EU, v3)


def test_the_default_root_lies_outside_every_warehouse(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from proxy.governed.layout import default_root
    assert default_root("file:///w/demo/t", "file:///w") == "file:///w/_icegov_governed"
    assert default_root("s3://bucket/wh/demo/t", None) == "s3://bucket/_icegov_governed"
    monkeypatch.chdir(tmp_path)
    assert default_root("file:/elsewhere/wh/demo/t", None) == \
        (tmp_path / "_icegov_governed").as_uri()


# -- the service: freshness -----------------------------------------------------------------------

def _service(tmp: Path, **settings: Any) -> GovernedSnapshots:
    return GovernedSnapshots(GovernedSettings(root=(tmp / "governed").as_uri(), **settings),
                             ManifestCache(10_000), None)


def _base(table: Table) -> dict[str, Any]:
    import json
    return json.loads(table.metadata.model_dump_json())


def test_an_answer_past_the_wait_bound_serves_the_newest_complete_snapshot(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    table.append(rows([1, 2], ["eu", "us"]))
    table = table.refresh()
    first = table.current_snapshot()
    assert first is not None
    service = _service(tmp_path, wait_seconds=0.2)
    release = threading.Event()
    original = service._run_copies

    def slow(jobs: Sequence[CopyJob]) -> list[CopiedFile]:
        if slow.block:  # type: ignore[attr-defined]
            release.wait(10)
        return original(jobs)
    slow.block = False  # type: ignore[attr-defined]
    service._run_copies = slow  # type: ignore[method-assign]

    async def scenario() -> None:
        answer = await service.govern(_base(table), EU, table.metadata, table.io, {})
        assert answer.freshness.current
        table.append(rows([3, 4], ["eu", "us"]))
        fresh = table.refresh()
        slow.block = True  # type: ignore[attr-defined]
        stale = await service.govern(_base(fresh), EU, fresh.metadata, fresh.io, {})
        assert stale.freshness.served_snapshot_id == first.snapshot_id
        assert not stale.freshness.current
        assert stale.metadata["current-snapshot-id"] == first.snapshot_id
        assert float(stale.metadata["properties"]["icegov.governed.stale-seconds"]) >= 0
        release.set()
        slow.block = False  # type: ignore[attr-defined]
        for _ in range(200):
            done = await service.govern(_base(fresh), EU, fresh.metadata, fresh.io, {})
            if done.freshness.current:
                break
        assert done.freshness.current
        service.close()
    asyncio.run(scenario())


def test_nothing_complete_to_serve_is_503_with_retry_after(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    table.append(rows([1, 2], ["eu", "us"]))
    table = table.refresh()
    service = _service(tmp_path, wait_seconds=0.05)
    release = threading.Event()
    original = service._run_copies

    def blocked(jobs: Sequence[CopyJob]) -> list[CopiedFile]:
        release.wait(10)
        return original(jobs)
    service._run_copies = blocked  # type: ignore[method-assign]

    async def scenario() -> None:
        with pytest.raises(NotReady) as refused:
            await service.govern(_base(table), EU, table.metadata, table.io, {})
        assert refused.value.status == 503 and refused.value.retry_after > 0
        release.set()
        service.close()
    asyncio.run(scenario())


def test_a_build_over_its_byte_bound_is_refused_not_served(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    table.append(rows([1, 2], ["eu", "us"]))
    table = table.refresh()
    service = _service(tmp_path, wait_seconds=5, build_max_bytes=10)

    async def scenario() -> None:
        with pytest.raises(NotReady) as refused:
            await service.govern(_base(table), EU, table.metadata, table.io, {})
        assert "build_max_bytes" in refused.value.message
        service.close()
    asyncio.run(scenario())


def test_the_governed_root_may_not_lie_in_the_table(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    table.append(rows([1], ["eu"]))
    table = table.refresh()
    inside = f"{table.metadata.location}/governed"
    service = GovernedSnapshots(GovernedSettings(root=inside), ManifestCache(100), None)

    async def scenario() -> None:
        with pytest.raises(Forbidden):
            await service.govern(_base(table), EU, table.metadata, table.io, {})
        service.close()
    asyncio.run(scenario())
