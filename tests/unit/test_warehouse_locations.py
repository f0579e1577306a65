"""The embedded catalog's warehouse confinement (``proxy.catalog.locations``) for object stores,
the ``warehouse`` setting that chooses it, and ``open_catalog`` on an ``s3://`` warehouse.

No object store is contacted: confinement is decided on the location's text alone, and a
SqlCatalog opens on an ``s3://`` warehouse without reaching it (tests/integration/
test_object_storage.py runs the catalog against an S3 server).
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import unquote

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table.update import SetPropertiesUpdate
from pyiceberg.types import LongType, NestedField

from proxy.catalog.locations import ObjectStoreRoot, Warehouse, warehouse_root
from proxy.catalog.store import TableChange, commit_atomically, open_catalog
from proxy.errors import BadRequest
from proxy.settings import SettingsError, load_settings

ROOT = "s3://bucket/wh"
INSIDE = [
    "s3://bucket/wh", "s3://bucket/wh/", "s3://bucket/wh/ns/t",
    "s3://bucket/wh/ns/t/metadata/00001-0a1b.metadata.json", "s3://bucket/wh/a%20b/t",
    "s3://bucket/wh/100%/t", "s3://bucket/wh/ns/t/data/region=eu/x.parquet",
    "s3://bucket/wh/..x/t", "s3://bucket/wh/x../t", "s3://bucket/wh/.hidden",
]
HOSTILE = [
    "s3://other/wh/t", "s3://bucket/wh2/t", "s3://bucket/wh-x/t", "s3://bucket/w", "s3://bucket",
    "s3://bucket/", "s3://bucket/elsewhere", "s3://bucket/wh/../x", "s3://bucket/wh/./x",
    "s3://bucket/wh/..", "s3://bucket/wh/t/../../x", "s3://bucket/wh//x", "s3://bucket//wh/x",
    "s3://bucket/wh/x//", "s3://bucket/wh/%2E%2E/x", "s3://bucket/wh/%2e%2e/x",
    "s3://bucket/wh/%2e./x", "s3://bucket/wh/%2E", "s3://bucket/wh/%252e%252e/x",
    "s3://bucket/wh/%25252e%25252e/x", "s3://bucket/wh/%2525252525252e/x",
    "s3://bucket/wh/%2F%2E%2E%2Fx", "s3://bucket/wh/x%2F..%2F..%2Fy", "s3://bucket/wh%2F..%2Fx",
    "s3://bucket/wh/%00", "s3://bucket/wh/x\\..\\..\\y", "s3://bucket/wh/x?/../../y",
    "s3://bucket/wh/x#/../../y", "s3://bucket/wh/x\x00", "s3://bucket/wh/x\n",
    "s3://bucket/wh/%0a", "S3://bucket/wh/x", "s3a://bucket/wh/x", "s3n://bucket/wh/x",
    "gs://bucket/wh/x", "file:///bucket/wh/x", "s3://BUCKET/wh/x", "s3://user@bucket/wh/x",
    "s3://bucket:443/wh/x", "s3://bucket%2Fwh/x", "s3://b%75cket/wh/x", "s3:/bucket/wh/x",
    "s3:///bucket/wh/x", "s3://", "/bucket/wh/x", "bucket/wh/x", "wh/x", "", " s3://bucket/wh/x",
    "s3://bucket/WH/x", "s3://bucket/wh /x",
]


class FakeCatalog(SqlCatalog):
    """Just enough of a SqlCatalog for ``Warehouse``: its properties."""

    def __init__(self, warehouse: str) -> None:  # no super(): nothing is opened
        self.properties = {"warehouse": warehouse}


def object_store() -> Warehouse:
    return Warehouse(FakeCatalog(ROOT))


@pytest.mark.parametrize("location", INSIDE)
def test_locations_under_the_prefix_are_inside(location: str) -> None:
    assert object_store().contains(location)
    object_store().check(location, "table location")
    assert object_store().may_read(location)


@pytest.mark.parametrize("location", HOSTILE)
def test_hostile_spellings_are_outside_and_the_refusal_names_only_the_field(
        location: str) -> None:
    warehouse = object_store()
    assert not warehouse.contains(location)
    assert not warehouse.may_read(location)
    with pytest.raises(BadRequest) as refused:
        warehouse.check(location, "table location")
    assert refused.value.message == "table location must be a location in this catalog's warehouse"


SEGMENT_ALPHABET = st.sampled_from(["a", "wh", ".", "..", "%", "2", "5", "e", "E", "F", "f",
                                    "%2e", "%2F", "%25", "/", "?", "#", "\\", "x", "-", "_"])


@given(st.lists(st.lists(SEGMENT_ALPHABET, max_size=8).map("".join), max_size=5),
       st.sampled_from(["s3://bucket/", "s3://bucket/wh/", "s3://bucket/wh", "s3://bucket//"]))
def test_what_is_inside_stays_inside_however_a_reader_decodes_it(
        segments: list[str], start: str) -> None:
    location = start + "/".join(segments)
    if not object_store().contains(location):
        return
    form = location
    for _ in range(8):  # every reader, however many times it percent-decodes, lands inside
        assert form.startswith("s3://bucket/wh")
        key = form.removeprefix("s3://bucket/")
        assert posixpath.normpath(key).split("/")[0] == "wh", location
        assert not {"?", "#", "\\"} & set(form), location
        form = unquote(form)


@given(st.lists(st.text("abcxyz0129_-=", min_size=1, max_size=6), max_size=5))
def test_every_plain_key_under_the_prefix_is_inside(segments: list[str]) -> None:
    assert object_store().contains("/".join([ROOT, *segments]))


@pytest.mark.parametrize("uri", ["s3://bucket/wh/../x", "s3://bucket/w%41", "gs://bucket/wh",
                                 "s3://", "s3://bucket/wh?x", "hdfs://nn/wh"])
def test_a_warehouse_uri_must_be_a_plain_object_store_prefix(uri: str) -> None:
    with pytest.raises(ValueError):
        warehouse_root(uri)


def test_the_warehouse_uri_is_canonical_and_the_bucket_root_is_a_warehouse() -> None:
    assert ObjectStoreRoot.of("s3://bucket/wh/").uri == ROOT
    whole_bucket = Warehouse(FakeCatalog("s3a://bucket"))
    assert whole_bucket.contains("s3a://bucket/any/thing")
    assert not whole_bucket.contains("s3a://bucket2/any")
    assert not whole_bucket.contains("s3://bucket/any")


@pytest.mark.parametrize("key", ["s3.endpoint", "s3.access-key-id", "py-io-impl",
                                 "client.region", "gcs.project-id", "adls.account-name",
                                 "write.py-location-provider.impl", "DEFAULT_SCHEME"])
def test_table_properties_may_not_configure_the_catalogs_storage(key: str) -> None:
    with pytest.raises(BadRequest) as refused:
        object_store().check_table_properties({key: "x"})
    assert refused.value.message.startswith(f"table property {key} may not be set")


def test_ordinary_table_properties_pass_and_paths_are_confined() -> None:
    object_store().check_table_properties({
        "owner": "me", "write.format.default": "parquet", "write.data.path": f"{ROOT}/t/data",
        "s3_like_but_not.endpoint": "x"})
    with pytest.raises(BadRequest):
        object_store().check_table_properties({"write.data.path": "s3://bucket/wh2/data"})
    with pytest.raises(BadRequest):
        object_store().check_namespace_properties({"location": "s3://other/wh"})


# --- settings and open_catalog ---------------------------------------------------------------

@pytest.fixture()
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[pytest.MonkeyPatch]:
    for name in list(os.environ):
        if name.startswith("ICEGOV__"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    yield monkeypatch


def test_an_object_store_warehouse_needs_a_catalog_database(
        clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("ICEGOV__WAREHOUSE", "s3://bucket/wh/")
    with pytest.raises(SettingsError) as refused:
        load_settings()
    assert "ICEGOV__CATALOG_DB_URI must be set" in str(refused.value)
    clean_env.setenv("ICEGOV__CATALOG_DB_URI", "sqlite:///catalog.db")
    settings = load_settings()
    assert settings.object_store_warehouse == ROOT and settings.warehouse == ROOT
    assert settings.embedded_db_uri() == "sqlite:///catalog.db"


def test_forwarding_needs_no_database_but_the_embedded_catalog_still_would(
        clean_env: pytest.MonkeyPatch) -> None:
    settings = load_settings(warehouse="s3://bucket/wh", catalog_uri="http://catalog")
    with pytest.raises(SettingsError, match="ICEGOV__CATALOG_DB_URI"):
        settings.embedded_db_uri()


@pytest.mark.parametrize("value", ["gs://bucket/wh", "s3://bucket/../wh", "hdfs://nn/wh",
                                   "s3://bucket/wh?versionId=1"])
def test_an_unsupported_warehouse_uri_is_a_settings_error(
        clean_env: pytest.MonkeyPatch, value: str) -> None:
    clean_env.setenv("ICEGOV__WAREHOUSE", value)
    with pytest.raises(SettingsError) as refused:
        load_settings(catalog_db_uri="sqlite:///c.db")
    assert str(refused.value).startswith("ICEGOV__WAREHOUSE: ")


def test_a_uri_mangled_by_a_path_type_is_refused_not_made_a_directory(
        clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings(warehouse=Path("s3://bucket/wh"), catalog_db_uri="sqlite:///c.db")
    assert str(refused.value).startswith("ICEGOV__WAREHOUSE: a URI given as a path")
    assert list(tmp_path.iterdir()) == []


def test_a_local_warehouse_is_a_path_as_before(clean_env: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    assert load_settings().warehouse == Path("warehouse")
    clean_env.setenv("ICEGOV__WAREHOUSE", "data/wh")
    settings = load_settings()
    assert settings.warehouse == Path("data/wh") and settings.object_store_warehouse is None
    assert settings.embedded_db_uri() == f"sqlite:///{tmp_path / 'data/wh/catalog.db'}"
    assert load_settings(warehouse=(tmp_path / "x").as_uri()).warehouse == tmp_path / "x"


def test_open_catalog_on_an_object_store_takes_its_file_io(tmp_path: Path) -> None:
    file_io = {"s3.endpoint": "http://minio:9000", "uri": "sqlite:///elsewhere.db",
               "warehouse": "s3://other/wh"}
    catalog = open_catalog(f"sqlite:///{tmp_path / 'c.db'}", "s3://bucket/wh/", file_io)
    try:
        assert catalog.properties["warehouse"] == ROOT  # file_io cannot move it
        assert catalog.properties["uri"] == f"sqlite:///{tmp_path / 'c.db'}"
        assert catalog.properties["s3.endpoint"] == "http://minio:9000"
        assert isinstance(Warehouse(catalog).root, ObjectStoreRoot)
    finally:
        catalog.engine.dispose()
    assert not (tmp_path / "wh").exists() and not Path("s3:").exists()
    with pytest.raises(ValueError, match="py-io-impl"):
        open_catalog(f"sqlite:///{tmp_path / 'c.db'}", ROOT, {"py-io-impl": "os.system"})
    with pytest.raises(ValueError):
        open_catalog(f"sqlite:///{tmp_path / 'c.db'}", "s3://bucket/wh/../x")


class RecordingIO:
    """A FileIO class a hostile table property names: it must never be loaded."""

    loaded: ClassVar[list[Any]] = []

    def __init__(self, properties: Any) -> None:
        RecordingIO.loaded.append(properties)


def test_a_commit_naming_a_file_io_class_is_refused_before_anything_loads_it(
        tmp_path: Path) -> None:
    catalog = open_catalog(f"sqlite:///{tmp_path / 'c.db'}", tmp_path / "wh")
    catalog.create_namespace("db")
    catalog.create_table(("db", "t"), Schema(NestedField(1, "id", LongType(), required=False)))
    before = catalog.load_table(("db", "t")).metadata_location
    hostile = {"py-io-impl": f"{__name__}.RecordingIO",
               "write.py-location-provider.impl": f"{__name__}.RecordingIO"}
    for key, value in hostile.items():
        change = TableChange(("db", "t"), (), (SetPropertiesUpdate(updates={key: value}),))
        with pytest.raises(BadRequest):
            commit_atomically(catalog, [change])
    assert RecordingIO.loaded == []
    assert catalog.load_table(("db", "t")).metadata_location == before
    catalog.engine.dispose()
