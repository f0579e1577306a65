"""What the governed-snapshot suites read and check (test-only).

``build_mixed_orders`` creates ``demo.orders`` *not* partitioned by region, every data file
mixing EU, US and AP rows, so no file can be proven EU-only and every EU row a restricted
principal reads comes from a governed copy. The rest says what a governed answer may name:
``governed_tree`` is where the governed data of a table lies on disk (the answer's
``metadata-location`` tells its table uuid and view digest), ``listed_data_files`` the data
files the governed snapshots list, and ``paths_in`` every string in an answer, request or
audit record that looks like the path of a file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.table import Table

from proxy.governed.layout import GOVERNED_DIR
from tests.support.plan_tables import Row, ordered
from tests.support.read_tables import ORDERS, ORDERS_SCHEMA, order_row

MIXED_APPENDS = (range(1, 7), range(7, 13), range(13, 19))
"""Three appends of ``order_row``s: each one data file holding all three regions."""

_PATH = re.compile(r"(?:[a-z][a-z0-9+.-]*:)?/[^\s\"'\\,;]*\.(?:parquet|avro|orc|json)\b")


def orders_arrow(rows: Iterable[Row]) -> pa.Table:
    """``rows`` of ``demo.orders`` (order_id, region, amount) as Arrow."""
    listed = list(rows)
    return pa.table({
        "order_id": pa.array([r[0] for r in listed], pa.int64()),
        "region": pa.array([r[1] for r in listed], pa.string()),
        "amount": pa.array([r[2] for r in listed], pa.int64()),
    })


def build_mixed_orders(catalog: RestCatalog) -> Table:
    """``demo.orders`` afresh, unpartitioned, three appends each mixing every region."""
    catalog.create_namespace_if_not_exists("demo")
    if catalog.table_exists(ORDERS):
        catalog.drop_table(ORDERS)
    table = catalog.create_table(ORDERS, ORDERS_SCHEMA)
    for ids in MIXED_APPENDS:
        table.append(orders_arrow(order_row(i) for i in ids))
    return catalog.load_table(ORDERS)


def rows_of(arrow: pa.Table) -> list[Row]:
    """An Arrow table's rows as tuples, in canonical order."""
    return ordered(zip(*(arrow.column(n).to_pylist() for n in arrow.column_names), strict=True))


def eu(rows: Iterable[Row]) -> list[Row]:
    """The EU rows of ``demo.orders`` rows (region second), in canonical order."""
    return ordered(r for r in rows if r[1] == "eu")


def local_path(uri: str) -> Path:
    """A ``file:`` URI or plain path as a local path."""
    parsed = urlparse(uri)
    return Path(unquote(parsed.path)) if parsed.scheme == "file" else Path(uri)


def file_regions(uri: str) -> set[str]:
    """The regions of the rows of one local Parquet data file."""
    return set(pq.read_table(local_path(uri), columns=["region"]).column(0).to_pylist())


@dataclass(frozen=True)
class GovernedTree:
    """The governed tree of one table under one view: ``root/{table-uuid}/{digest}``."""

    root: str
    table_uuid: str
    digest: str

    @property
    def prefix(self) -> str:
        return f"{self.root.rstrip('/')}/{self.table_uuid}/{self.digest}"

    def data_dir(self) -> Path:
        return local_path(f"{self.prefix}/data")


def governed_tree(loaded: dict[str, Any]) -> GovernedTree:
    """The tree a governed loadTable answer's ``metadata-location`` lies in."""
    location = str(loaded["metadata-location"])
    head, sep, tail = location.partition(f"/{GOVERNED_DIR}/")
    assert sep, f"not a governed metadata location: {location}"
    table_uuid, digest, *_ = tail.split("/")
    assert table_uuid == loaded["metadata"]["table-uuid"]
    return GovernedTree(f"{head}/{GOVERNED_DIR}", table_uuid, digest)


def listed_data_files(table: Table) -> set[str]:
    """Every data file any snapshot of ``table`` (as its reader loaded it) lists."""
    listed: set[str] = set()
    for snapshot in table.snapshots():
        for manifest in snapshot.manifests(table.io):
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                listed.add(entry.data_file.file_path)
    return listed


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def paths_in(value: Any) -> set[str]:
    """Every substring of every string in ``value`` (JSON-like) that looks like a file path."""
    return {match.group(0) for text in _strings(value) for match in _PATH.finditer(text)}


def same_file(a: str, b: str) -> bool:
    """True when two spellings (``file:/x``, ``file:///x``, ``/x``) name the same file."""
    return local_path(a) == local_path(b)
