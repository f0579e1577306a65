"""Which delete files the planner attaches to each data file: position deletes (compared with
pyiceberg's own planning), deletion vectors and equality deletes (which pyiceberg refuses to plan,
so the expected sets are written out by the sequence-number rules).

Sequence numbers: every ``commit`` is one snapshot at the next sequence number, and every file it
adds carries that number as its data sequence number.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyiceberg.expressions import AlwaysTrue, EqualTo
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestEntryStatus
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record

from proxy.planning.manifest_cache import ManifestCache
from proxy.planning.planner import Planner
from tests.support.commit_capture import Crafter
from tests.support.row_files import v3_delete_manifest
from tests.unit.test_planner import (
    SCHEMA,
    commit,
    crafter_for,
    data_file,
    described,
    new_catalog,
    plan_of,
)

POSITION, EQUALITY = DataFileContent.POSITION_DELETES, DataFileContent.EQUALITY_DELETES
FILE_PATH = 2147483546
REGION_SPEC = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "region"))
_ids = itertools.count(90_000)


@pytest.fixture()
def planner() -> Iterator[Planner]:
    running = Planner(ManifestCache(10_000), threads=2)
    yield running
    running.close()


@pytest.fixture()
def flat(tmp_path: Path) -> Crafter:
    catalog = new_catalog(tmp_path)
    return crafter_for(catalog, catalog.create_table("db.flat", SCHEMA))


@pytest.fixture()
def regional(tmp_path: Path) -> Crafter:
    catalog = new_catalog(tmp_path)
    return crafter_for(catalog, catalog.create_table("db.reg", SCHEMA,
                                                     partition_spec=REGION_SPEC))


def positions(table: Table, name: str, target: DataFile | None = None,
              bounds: tuple[str, str] | None = None, partition: tuple[str, ...] = ()) -> DataFile:
    """A position delete file, scoped to ``target`` or with ``bounds`` on ``file_path``."""
    if target is not None:
        bounds = (target.file_path, target.file_path)
    fields = {} if bounds is None else {
        "lower_bounds": {FILE_PATH: bounds[0].encode()},
        "upper_bounds": {FILE_PATH: bounds[1].encode()}}
    return data_file(table, name, partition, content=POSITION, **fields)


def equality(table: Table, name: str, partition: tuple[str, ...] = (),
             region: str | None = None) -> DataFile:
    """An equality delete file on ``id`` (and ``region`` bounds when given)."""
    fields = {} if region is None else {"lower_bounds": {2: region.encode()},
                                        "upper_bounds": {2: region.encode()}}
    return data_file(table, name, partition, content=EQUALITY, equality_ids=[1], **fields)


def deletes_by_file(planner: Planner, table: Table, **spec: object) -> dict[str, set[str]]:
    """Each planned data file's name -> the names of the delete files attached to it."""
    return {Path(t.file.file_path).stem: {Path(d.file_path).stem for d in t.delete_files}
            for t in plan_of(planner, table, **spec).tasks}


# --- position deletes: the same as pyiceberg -----------------------------------------------

def test_position_deletes_follow_sequence_numbers_and_scopes(planner: Planner,
                                                             flat: Crafter) -> None:
    table = flat.table
    f1, f2 = data_file(table, "f1"), data_file(table, "f2")
    commit(flat, [f1, f2])  # seq 1
    commit(flat, deletes=[positions(table, "scoped-f1", f1),  # seq 2
                          positions(table, "bounded-f2", bounds=(f2.file_path, f2.file_path + "~")),
                          positions(table, "anywhere")], operation="delete")
    f3 = data_file(flat.table, "f3")
    commit(flat, [f3])  # seq 3: older deletes do not apply
    f4 = data_file(flat.table, "f4")
    commit(flat, [f4], [positions(flat.table, "scoped-f4", f4)], operation="overwrite")  # seq 4
    table = flat.table
    assert deletes_by_file(planner, table) == {
        "f1": {"scoped-f1", "anywhere"}, "f2": {"bounded-f2", "anywhere"}, "f3": set(),
        "f4": {"scoped-f4"}}
    assert described(plan_of(planner, table).tasks) == described(table.scan().plan_files())


def test_position_deletes_stay_in_their_partition(planner: Planner, regional: Crafter) -> None:
    table = regional.table
    commit(regional, [data_file(table, "eu1", ("eu",)), data_file(table, "us1", ("us",))])
    commit(regional, deletes=[positions(table, "eu-deletes", partition=("eu",))],
           operation="delete")
    table = regional.table
    assert deletes_by_file(planner, table) == {"eu1": {"eu-deletes"}, "us1": set()}
    assert described(plan_of(planner, table).tasks) == described(table.scan().plan_files())
    us_only = plan_of(planner, table, filter=EqualTo("region", "us"))
    assert described(us_only.tasks) == described(
        table.scan(row_filter=EqualTo("region", "us")).plan_files())


# --- deletion vectors -----------------------------------------------------------------------

def test_a_deletion_vector_applies_to_its_data_file_only(planner: Planner, flat: Crafter) -> None:
    table = flat.table
    f1, f2 = data_file(table, "f1"), data_file(table, "f2")
    commit(flat, [f1, f2])
    vector = DataFile.from_args(
        _table_format_version=3, content=POSITION, file_path=f"{table.location()}/data/dv.puffin",
        file_format=FileFormat.PUFFIN, partition=Record(), record_count=1, file_size_in_bytes=60,
        referenced_data_file=f1.file_path, content_offset=4, content_size_in_bytes=40)
    sid = next(_ids)
    manifest = v3_delete_manifest(flat, sid, [(ManifestEntryStatus.ADDED, vector, 0)])
    flat.apply(flat.snapshot(sid, [manifest, *flat.parent_manifests()], "delete"))
    commit(flat, deletes=[positions(flat.table, "old-style")], operation="delete")
    plan = plan_of(planner, flat.table)
    assert deletes_by_file(planner, flat.table) == {"f1": {"dv"}, "f2": {"old-style"}}
    [attached] = next(t.delete_files for t in plan.tasks if t.file.file_path == f1.file_path)
    assert attached.file_format == FileFormat.PUFFIN
    assert attached._data[17:20] == [f1.file_path, 4, 40], "offsets survive the manifest cache"


# --- equality deletes -------------------------------------------------------------------------

def test_equality_deletes_apply_to_strictly_older_data(planner: Planner, flat: Crafter) -> None:
    table = flat.table
    commit(flat, [data_file(table, "f1")])  # seq 1
    commit(flat, [data_file(flat.table, "f2")], [equality(flat.table, "e2")],
           operation="overwrite")  # seq 2: e2 applies to f1, not to f2 (same sequence)
    commit(flat, [data_file(flat.table, "f3")])  # seq 3
    commit(flat, deletes=[equality(flat.table, "e4")], operation="delete")  # seq 4
    assert deletes_by_file(planner, flat.table) == {
        "f1": {"e2", "e4"}, "f2": {"e4"}, "f3": {"e4"}}


def test_partitioned_equality_deletes_stay_in_their_partition(planner: Planner,
                                                              regional: Crafter) -> None:
    table = regional.table
    commit(regional, [data_file(table, "eu1", ("eu",)), data_file(table, "us1", ("us",))])
    commit(regional, deletes=[equality(table, "eu-eq", ("eu",))], operation="delete")
    commit(regional, [data_file(regional.table, "eu3", ("eu",))])
    assert deletes_by_file(planner, regional.table) == {
        "eu1": {"eu-eq"}, "us1": set(), "eu3": set()}


def test_unpartitioned_equality_deletes_are_global(planner: Planner, flat: Crafter) -> None:
    unpartitioned = flat.table.spec()
    with flat.table.update_spec() as update:
        update.add_identity("region")
    flat.table = flat.catalog.load_table(flat.table.name())
    regional_spec = flat.table.spec()
    commit(flat, [data_file(flat.table, "eu1", ("eu",)), data_file(flat.table, "us1", ("us",))],
           spec=regional_spec)
    commit(flat, deletes=[equality(flat.table, "everywhere")], operation="delete",
           spec=unpartitioned)
    commit(flat, deletes=[equality(flat.table, "eu-only", ("eu",))], operation="delete",
           spec=regional_spec)
    assert deletes_by_file(planner, flat.table) == {
        "eu1": {"everywhere", "eu-only"}, "us1": {"everywhere"}}


# --- which delete files the filters may prune ------------------------------------------------

def test_the_row_filter_never_withholds_a_delete_file(planner: Planner, flat: Crafter) -> None:
    table = flat.table
    mixed = data_file(table, "mixed", lower_bounds={2: b"eu"}, upper_bounds={2: b"us"})
    commit(flat, [mixed])
    commit(flat, deletes=[equality(flat.table, "us-rows", region="us")], operation="delete")
    row_filtered = deletes_by_file(planner, flat.table, row_filter=EqualTo("region", "eu"))
    assert row_filtered == {"mixed": {"us-rows"}}, "clients do not apply the row filter"
    scan_filtered = deletes_by_file(planner, flat.table, filter=EqualTo("region", "eu"))
    assert scan_filtered == {"mixed": set()}, "rows the scan filter drops need no deletes"
    assert deletes_by_file(planner, flat.table, filter=AlwaysTrue()) == {"mixed": {"us-rows"}}
