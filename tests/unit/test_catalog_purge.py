"""Purging a table of the embedded catalog deletes the table's own files and nothing else."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from proxy.catalog import store
from proxy.catalog.purge import purge_table
from proxy.errors import BadRequest


def open_catalog(tmp_path: Path) -> SqlCatalog:
    catalog = store.open_catalog(f"sqlite:///{tmp_path / 'catalog.db'}", tmp_path / "warehouse")
    catalog.create_namespace("demo")
    return catalog


def table_with_rows(catalog: SqlCatalog, name: str) -> Table:
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    table = catalog.create_table(("demo", name), schema=rows.schema)
    table.append(rows)
    table.append(rows)
    return catalog.load_table(("demo", name))


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


def test_purge_deletes_every_file_of_the_table(tmp_path: Path) -> None:
    catalog = open_catalog(tmp_path)
    kept = table_with_rows(catalog, "kept")
    purged = table_with_rows(catalog, "purged")
    kept_files = files_under(Path(kept.location().removeprefix("file://")))
    purged_root = Path(purged.location().removeprefix("file://"))
    assert len(files_under(purged_root)) >= 8  # data, manifests, lists, metadata files

    purge_table(catalog, ("demo", "purged"))

    assert files_under(purged_root) == set()
    assert not catalog.table_exists(("demo", "purged"))
    assert files_under(Path(kept.location().removeprefix("file://"))) == kept_files
    assert catalog.load_table(("demo", "kept")).scan().to_arrow().num_rows == 6


def test_purging_a_registered_copy_of_another_table_keeps_the_other_tables_files(
        tmp_path: Path) -> None:
    catalog = open_catalog(tmp_path)
    victim = table_with_rows(catalog, "victim")
    victim_files = files_under(Path(victim.location().removeprefix("file://")))
    copy_root = tmp_path / "warehouse" / "demo" / "copy"
    crafted = json.loads(Path(victim.metadata_location.removeprefix("file://")).read_text())
    crafted["location"] = copy_root.as_uri()
    (copy_root / "metadata").mkdir(parents=True)
    copy_metadata = copy_root / "metadata" / "00000-copy.metadata.json"
    copy_metadata.write_text(json.dumps(crafted))
    store.register_table(catalog, ("demo", "copy"), copy_metadata.as_uri(), False)

    purge_table(catalog, ("demo", "copy"))

    assert files_under(Path(victim.location().removeprefix("file://"))) == victim_files
    assert catalog.load_table(("demo", "victim")).scan().to_arrow().num_rows == 6
    assert not copy_metadata.exists()  # its own file went


@pytest.mark.parametrize("placed_at", ["victim", "namespace", "warehouse"])
def test_a_registered_table_placed_over_another_purges_none_of_its_files(
        tmp_path: Path, placed_at: str) -> None:
    catalog = open_catalog(tmp_path)
    victim = table_with_rows(catalog, "victim")
    victim_root = Path(victim.location().removeprefix("file://"))
    victim_files = files_under(victim_root)
    location = {"victim": victim_root, "namespace": victim_root.parent,
                "warehouse": tmp_path / "warehouse"}[placed_at]
    crafted = json.loads(Path(victim.metadata_location.removeprefix("file://")).read_text())
    crafted["location"] = location.as_uri()
    own = tmp_path / "warehouse" / "demo" / "copy" / "metadata" / "00000-copy.metadata.json"
    own.parent.mkdir(parents=True)
    own.write_text(json.dumps(crafted))
    store.register_table(catalog, ("demo", "copy"), own.as_uri(), False)

    purge_table(catalog, ("demo", "copy"))

    assert files_under(victim_root) == victim_files
    assert catalog.load_table(("demo", "victim")).scan().to_arrow().num_rows == 6


def test_purging_a_table_whose_manifest_list_is_missing_still_drops_it(tmp_path: Path) -> None:
    catalog = open_catalog(tmp_path)
    table = table_with_rows(catalog, "broken")
    snapshot = table.current_snapshot()
    assert snapshot is not None
    Path(snapshot.manifest_list.removeprefix("file://")).unlink()

    purge_table(catalog, ("demo", "broken"))

    assert not catalog.table_exists(("demo", "broken"))
    assert not Path(table.metadata_location.removeprefix("file://")).exists()


def test_table_properties_never_configure_the_catalogs_file_io(tmp_path: Path) -> None:
    catalog = open_catalog(tmp_path)
    catalog.create_table(("demo", "t"), schema=pa.schema([("id", pa.int64())]),
                         properties={"buffer-size": "abc", "s3.endpoint": "http://evil"})
    io = catalog.load_table(("demo", "t")).io
    assert "buffer-size" not in io.properties and "s3.endpoint" not in io.properties


@pytest.mark.parametrize("field", ["metadata-log", "manifest-list", "statistics"])
def test_register_refuses_metadata_naming_files_outside_the_warehouse(
        tmp_path: Path, field: str) -> None:
    catalog = open_catalog(tmp_path)
    source = table_with_rows(catalog, "source")
    crafted = json.loads(Path(source.metadata_location.removeprefix("file://")).read_text())
    outside = (tmp_path / "outside.bin").as_uri()
    if field == "metadata-log":
        crafted["metadata-log"] = [{"metadata-file": outside, "timestamp-ms": 1}]
    elif field == "manifest-list":
        crafted["snapshots"][0]["manifest-list"] = outside
    else:
        crafted["statistics"] = [{"snapshot-id": crafted["snapshots"][0]["snapshot-id"],
                                  "statistics-path": outside, "file-size-in-bytes": 1,
                                  "file-footer-size-in-bytes": 1, "blob-metadata": []}]
    own = tmp_path / "warehouse" / "demo" / "crafted" / "metadata" / "00000-c.metadata.json"
    own.parent.mkdir(parents=True)
    own.write_text(json.dumps(crafted))
    with pytest.raises(BadRequest):
        store.register_table(catalog, ("demo", "crafted"), own.as_uri(), False)
    assert not catalog.table_exists(("demo", "crafted"))


def test_when_a_live_tables_roots_are_unknown_a_purge_deletes_nothing(tmp_path: Path) -> None:
    catalog = open_catalog(tmp_path)
    other = table_with_rows(catalog, "other")
    Path(other.metadata_location.removeprefix("file://")).unlink()  # its roots: unknown
    purged = table_with_rows(catalog, "purged")
    purged_root = Path(purged.location().removeprefix("file://"))
    before = files_under(purged_root)

    purge_table(catalog, ("demo", "purged"))

    assert not catalog.table_exists(("demo", "purged"))  # dropped all the same
    assert files_under(purged_root) == before


def test_a_gzipped_live_metadata_file_is_read_for_its_roots(tmp_path: Path) -> None:
    catalog = open_catalog(tmp_path)
    warehouse = (tmp_path / "warehouse").resolve()
    rows = pa.table({"id": pa.array([1], pa.int64())})
    victim = catalog.create_table(("demo", "victim"), schema=rows.schema, properties={
        "write.data.path": (warehouse / "elsewhere").as_uri()})
    victim.append(rows)
    plain = Path(catalog.load_table(("demo", "victim")).metadata_location.removeprefix("file://"))
    zipped = plain.with_name("00009-zipped.gz.metadata.json")
    zipped.write_bytes(gzip.compress(plain.read_bytes()))
    catalog.drop_table(("demo", "victim"))
    store.register_table(catalog, ("demo", "victim"), zipped.as_uri(), False)
    victim = catalog.load_table(("demo", "victim"))
    data = [task.file.file_path for task in victim.scan().plan_files()]
    thief = catalog.create_table(("demo", "thief"), schema=rows.schema, properties={
        "write.data.path": (warehouse / "elsewhere").as_uri()})
    thief.add_files(data)
    thief_root = Path(thief.location().removeprefix("file://"))

    purge_table(catalog, ("demo", "thief"))

    assert catalog.load_table(("demo", "victim")).scan().to_arrow().num_rows == 1
    assert files_under(thief_root) == set()  # the victim's roots were read: the purge ran
