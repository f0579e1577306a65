"""Bloom-filter indexes through icegov with PyIceberg server-side planning, on both backings.

A table of 100 files (one per ``shard`` partition) whose random user ids are spread over every
file, so neither partitions nor min/max statistics can prune a point lookup on ``user_id``. With
``icegov.index.bloom-filter-columns=user_id`` a point lookup planned by icegov lists at most the
files holding that id plus the filters' false positives, and reads the same rows as local
planning; files appended later are indexed within a bound; a restarted icegov (same
``indexes.key``: filters are sealed) reuses the stored filters (none is written again).
Waiting is polling with a deadline, never a fixed sleep.
"""

from __future__ import annotations

import contextlib
import random
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import SecretStr
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import BadRequestError
from pyiceberg.expressions import EqualTo, In
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from proxy.app import create_app
from proxy.commits.index_property import BLOOM_FILTER_COLUMNS
from proxy.indexes.settings import IndexSettings
from proxy.indexes.status import index_status
from tests.support.servers import serve
from tests.support.settings import ADMIN, settings_for_tests

FILES = 100
ROWS_PER_FILE = 40
FALSE_POSITIVES_ALLOWED = 5  # 1% filters over ~100 files: about 1 expected
BOUND_SECONDS = 120.0

SCHEMA = Schema(NestedField(1, "shard", LongType(), required=False),
                NestedField(2, "user_id", LongType(), required=False),
                NestedField(3, "payload", StringType(), required=False))
SPEC = PartitionSpec(PartitionField(1, 1000, IdentityTransform(), "shard"))


@contextlib.contextmanager
def restartable(backend: str, workdir: Path) -> Iterator[Callable[[], Any]]:
    """A function starting an icegov (a context manager yielding its URL) over one backing
    catalog that outlives it."""
    sealed = IndexSettings(key=SecretStr("index-filters-test-key-" + "k" * 20))
    if backend == "embedded":
        yield lambda: serve(create_app(settings_for_tests(workdir, indexes=sealed)))
        return
    from tests.support.reference_catalog import reference_catalog

    with reference_catalog(workdir) as catalog_uri:
        yield lambda: serve(create_app(settings_for_tests(workdir, catalog_uri=catalog_uri,
                                                          indexes=sealed)))


def rows_for(shards: range, rng: random.Random, ids: list[int]) -> pa.Table:
    shard_col, user_col = [], []
    for shard in shards:
        for _ in range(ROWS_PER_FILE):
            shard_col.append(shard)
            user_col.append(ids.pop())
    return pa.table({"shard": pa.array(shard_col, pa.int64()),
                     "user_id": pa.array(user_col, pa.int64()),
                     "payload": [f"p{u}" for u in user_col]})


def planned(catalog: RestCatalog, identifier: str, user_id: int) -> set[str]:
    scan = catalog.load_table(identifier).scan(row_filter=EqualTo("user_id", user_id))
    return {task.file.file_path for task in scan.plan_files()}


def rows(catalog: RestCatalog, identifier: str, user_id: int) -> list[tuple[Any, ...]]:
    arrow = catalog.load_table(identifier).scan(row_filter=EqualTo("user_id", user_id)).to_arrow()
    return sorted(zip(*(arrow.column(n).to_pylist() for n in arrow.column_names), strict=True))


def holding(catalog: RestCatalog, identifier: str, user_id: int) -> set[str]:
    """The files that really hold ``user_id`` (read whole, locally)."""
    table = catalog.load_table(identifier)
    found = set()
    for task in table.scan().plan_files():
        data = table.io.new_input(task.file.file_path)
        with data.open() as stream:
            if user_id in pq.read_table(stream, columns=["user_id"]).column(0).to_pylist():
                found.add(task.file.file_path)
    return found


def pruned_within_bound(server: RestCatalog, identifier: str, user_id: int,
                        holders: set[str]) -> set[str]:
    """Poll icegov's plan of ``user_id`` until the index prunes it (at most the holders and
    the false positives allowed), within ``BOUND_SECONDS``; the files planned."""
    deadline = time.monotonic() + BOUND_SECONDS
    while True:
        files = planned(server, identifier, user_id)
        assert holders <= files  # never a wrong answer, indexed or not
        if len(files) <= len(holders) + FALSE_POSITIVES_ALLOWED:
            return files
        assert time.monotonic() < deadline, f"still {len(files)} files planned"
        time.sleep(0.2)


def puffin_files(workdir: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in workdir.rglob("bloom-*.puffin")}


def test_point_lookups_plan_only_indexed_candidates_and_survive_a_restart(
        backend: str, tmp_path: Path) -> None:
    rng = random.Random(22)
    ids = rng.sample(range(10_000_000), (FILES + 10) * ROWS_PER_FILE)
    with restartable(backend, tmp_path) as start:
        with start() as url:
            local = RestCatalog("local", uri=url, credential=ADMIN)
            server = RestCatalog("server", uri=url, credential=ADMIN,
                                 **{"scan-planning-mode": "server"})
            namespace = f"idx_{uuid.uuid4().hex[:8]}"
            local.create_namespace(namespace)
            identifier = f"{namespace}.events"
            with pytest.raises(BadRequestError, match="not a top-level column"):
                local.create_table(identifier, SCHEMA, partition_spec=SPEC,
                                   properties={BLOOM_FILTER_COLUMNS: "user_id,nope"})
            table = local.create_table(identifier, SCHEMA, partition_spec=SPEC,
                                       properties={BLOOM_FILTER_COLUMNS: "user_id"})
            table.append(rows_for(range(FILES), rng, ids))
            with (pytest.raises(BadRequestError, match="not a top-level column"),
                  table.transaction() as tx):
                tx.set_properties({BLOOM_FILTER_COLUMNS: "missing"})

            every = local.load_table(identifier).scan().to_arrow().column("user_id").to_pylist()
            user = next(u for u in every if 3_000_000 < u < 7_000_000)  # inside every file's range
            holders = holding(local, identifier, user)
            assert len(holders) == 1
            files = pruned_within_bound(server, identifier, user, holders)
            assert len(planned(local, identifier, user)) == FILES  # local planning cannot prune
            assert rows(server, identifier, user) == rows(local, identifier, user)
            many = In("user_id", {user, -1, -2})
            assert {t.file.file_path for t in server.load_table(identifier).scan(
                row_filter=many).plan_files()} >= holders

            # files added later are indexed within the bound
            local.load_table(identifier).append(rows_for(range(FILES, FILES + 10), rng, ids))
            shard = local.load_table(identifier).scan(row_filter=EqualTo("shard", FILES + 3))
            late = next(u for u in shard.to_arrow().column("user_id").to_pylist()
                        if 3_000_000 < u < 7_000_000)
            late_holders = holding(local, identifier, late)
            assert len(planned(local, identifier, late)) > FILES
            pruned_within_bound(server, identifier, late, late_holders)
            assert rows(server, identifier, late) == rows(local, identifier, late)
            loaded = local.load_table(identifier)
            deadline = time.monotonic() + BOUND_SECONDS
            while index_status(loaded.metadata, loaded.io)[0].indexed < FILES + 10:
                assert time.monotonic() < deadline
                time.sleep(0.2)
            stored = puffin_files(tmp_path)
            assert len(stored) == FILES + 10

        # a restarted icegov reuses the stored filters: none is written again
        with start() as url:
            server = RestCatalog("server", uri=url, credential=ADMIN,
                                 **{"scan-planning-mode": "server"})
            local = RestCatalog("local", uri=url, credential=ADMIN)
            again = pruned_within_bound(server, identifier, user, holders)
            assert again == files
            assert rows(server, identifier, user) == rows(local, identifier, user)
            assert puffin_files(tmp_path) == stored
