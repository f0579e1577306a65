"""The verification's set-up caches are pure and bounded: pyiceberg's Avro reader set-up is kept
by header schema text (never anything read from a file), canonical locations by text."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import MANIFEST_LIST_FILE_SCHEMAS, ManifestContent, ManifestFile
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField

from proxy.commits import avro_readers, confine
from proxy.commits.avro_readers import open_avro
from proxy.commits.confine import canonical_location
from proxy.commits.lru import SizedLru


@pytest.fixture()
def table(tmp_path: Path) -> Table:
    catalog = SqlCatalog("c", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("d")
    created = catalog.create_table("d.t", Schema(NestedField(1, "id", LongType())))
    for value in (1, 2):
        created.append(pa.table({"id": pa.array([value], pa.int64())}))
    return created


def read_list(table: Table, path: str) -> list[ManifestFile]:
    with open_avro(table.io, path, "manifest list", MANIFEST_LIST_FILE_SCHEMAS[3],
                   {-1: ManifestFile}, {517: ManifestContent}) as reader:
        return list(reader)


def test_one_set_up_serves_every_file_of_one_header_schema(
        table: Table, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(avro_readers, "_SET_UPS", SizedLru(128))
    first, second = (s.manifest_list for s in table.snapshots())
    assert len(read_list(table, first)) == 1
    assert len(read_list(table, second)) == 2  # read from its own file, with the same set-up
    assert len(avro_readers._SET_UPS) == 1


def test_set_ups_are_bounded(table: Table, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(avro_readers, "_SET_UPS", SizedLru(128))
    monkeypatch.setattr(avro_readers, "_REMEMBERED_TEXT", 10)  # every real header is longer
    read_list(table, table.snapshots()[0].manifest_list)
    assert len(avro_readers._SET_UPS) == 0


def test_canonical_locations_are_remembered_within_bounds() -> None:
    confine._canonical_remembered.cache_clear()
    assert canonical_location("file:/t/a.parquet") == "file:///t/a.parquet"
    assert canonical_location("/t/" + "x" * 2000) == "file:///t/" + "x" * 2000  # not kept
    info = confine._canonical_remembered.cache_info()
    assert info.currsize == 1 and info.maxsize == 16_384
