"""Collection of governed trees through a real icegov (embedded catalog) and pyiceberg: after
admin expires old snapshots and a policy change retires eu-analyst's view, nothing of the expired
snapshots or the retired view remains, and eu-analyst still reads exactly the EU rows."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.expressions import EqualTo
from pyiceberg.io import FileIO
from pyiceberg.manifest import read_manifest_list
from pyiceberg.table import Table

from proxy.app import create_app
from tests.support.http import wait_for
from tests.support.read_tables import EU_ANALYST, ORDERS, ORDERS_SCHEMA, local_policies
from tests.support.servers import serve
from tests.support.settings import ADMIN, settings_for_tests

GRACE = 1.0
EU_FILTER = "filter:region = 'eu'"
BATCHES = [[(k * 10 + i, region) for i, region in enumerate(("eu", "us", "ap", "eu", "us", "eu"))]
           for k in range(3)]


@pytest.fixture()
def proxy(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """icegov on the embedded catalog, the policy reloading quickly, a short grace."""
    settings = local_policies(tmp_path)
    settings["policy"]["reload_interval_seconds"] = 0.05
    settings["governed"] = {"retain_unused_seconds": GRACE}
    with serve(create_app(settings_for_tests(tmp_path, **settings))) as url:
        yield url, Path(settings["policy"]["policy_path"])


def orders(admin: RestCatalog) -> Table:
    """demo.orders, unpartitioned: every data file mixes regions; then a delete rewrites one."""
    admin.create_namespace_if_not_exists("demo")
    table = admin.create_table(ORDERS, ORDERS_SCHEMA)
    for batch in BATCHES:
        table.append(pa.table({"order_id": pa.array([i for i, _ in batch], pa.int64()),
                               "region": pa.array([r for _, r in batch]),
                               "amount": pa.array([i * 10 for i, _ in batch], pa.int64())}))
    table.delete(EqualTo("order_id", 0))
    return admin.load_table(ORDERS)


def eu_ids() -> list[int]:
    return sorted(i for batch in BATCHES for i, r in batch if r == "eu" and i != 0)


def eu_read(url: str) -> Table:
    return RestCatalog("eu", uri=url, credential=EU_ANALYST).load_table(ORDERS)


def local(path: str) -> str:
    return path.removeprefix("file://")


def view_dir(table: Table) -> str:
    return local(table.metadata.snapshots[0].manifest_list).rsplit("/lists/", 1)[0]


def files_under(directory: str) -> set[str]:
    return {os.path.join(d, f) for d, _, names in os.walk(directory) for f in names}


def reached(io: FileIO, table: Table) -> set[str]:
    """What the governed snapshots ``table`` (a governed answer) serves reach, in its tree."""
    found: set[str] = set()
    for snapshot in table.metadata.snapshots:
        path = snapshot.manifest_list
        found |= {local(path), local(path) + ".json"}
        for manifest in read_manifest_list(io.new_input(path)):
            found |= {local(manifest.manifest_path),
                      local(manifest.manifest_path).removesuffix(".avro") + ".json"}
            found |= {local(e.data_file.file_path) for e in manifest.fetch_manifest_entry(io)}
    return found


def settled(url: str, io: FileIO) -> Table | None:
    """eu-analyst's table when its view's tree holds only what it serves and its newest
    governed metadata file (each load also gives collection its turn)."""
    table = eu_read(url)
    directory = view_dir(table)
    stored = {p for p in files_under(directory) if "/metadata/" not in p}
    metadata_files = [p for p in files_under(directory) if "/metadata/" in p]
    if stored == reached(io, table) and len(metadata_files) == 1:
        return table
    return None


def test_expired_snapshots_and_a_retired_view_are_collected(
        proxy: tuple[str, Path]) -> None:
    url, policy_csv = proxy
    admin = RestCatalog("admin", uri=url, credential=ADMIN)
    table = orders(admin)
    io = table.io
    eu = eu_read(url)
    assert sorted(eu.scan().to_arrow().column("order_id").to_pylist()) == eu_ids()
    old_view = view_dir(eu)
    first = files_under(old_view)
    assert len(eu.metadata.snapshots) == 4

    current = table.metadata.current_snapshot_id
    table.maintenance.expire_snapshots().by_ids(
        [s.snapshot_id for s in table.metadata.snapshots if s.snapshot_id != current]).commit()
    eu = wait_for(lambda: settled(url, io), 30.0, "the expired snapshots' files to go")
    assert [s.snapshot_id for s in eu.metadata.snapshots] == [current]
    gone = first - files_under(old_view)
    assert sum("/lists/" in p for p in gone) >= 6  # three lists and their sidecars
    assert any("/data/" in p for p in gone)  # the governed copy of the rewritten file
    assert sorted(eu.scan().to_arrow().column("order_id").to_pylist()) == eu_ids()

    original = policy_csv.read_text()
    assert EU_FILTER in original
    aside = policy_csv.with_suffix(".tmp")
    aside.write_text(original.replace(EU_FILTER, "filter:region IN ('eu')"))
    aside.replace(policy_csv)
    wait_for(lambda: view_dir(eu_read(url)) != old_view, 30.0, "the new policy's view")
    wait_for(lambda: eu_read(url) is not None and not os.path.exists(old_view), 30.0,
             "the retired view's tree to go")  # each load gives collection its turn

    eu = eu_read(url)
    assert sorted(eu.scan().to_arrow().column("order_id").to_pylist()) == eu_ids()
    assert set(eu.scan().to_arrow().column("region").to_pylist()) == {"eu"}
    table_dir = os.path.dirname(view_dir(eu))
    assert sorted(os.listdir(table_dir)) == sorted(
        [os.path.basename(view_dir(eu)), "_collect.json"])
