"""The demo tables of the column and row policies, and proxies to read them through (test-only).

``policies/policy.csv`` restricts two demo tables: ``analyst`` may not read
``demo.customers.ssn`` and reads ``demo.customers.email`` only masked (``show-last-4``);
``eu-analyst`` reads only the rows ``region = 'eu'`` of ``demo.orders``. The builders here create
those tables as ``admin`` through icegov, so they live in whichever backing catalog the proxy
fronts.

``served`` starts a proxy on the repository's policies plus a few test-local lines (written into
a copy of ``policies/``): principals that hold the same column or row rules *and* write rights
(``analyst-writer``, ``eu-writer``), so that what a restricted writer may commit can be tested
without changing the demo principals. It also tells the caller the backing catalog's own URI
(the reference catalog's), so answers can be compared with the backing's.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from proxy.app import create_app
from proxy.identity.hashing import hash_secret
from tests.conftest import RunningProxy
from tests.support.plan_tables import Row, ordered
from tests.support.servers import serve
from tests.support.settings import ADMIN, POLICIES, settings_for_tests

ANALYST = "analyst:analyst-secret"
EU_ANALYST = "eu-analyst:eu-analyst-secret"
ANALYST_WRITER = "analyst-writer:analyst-writer-secret"
EU_WRITER = "eu-writer:eu-writer-secret"

MASK_CAPABLE_CLIENT = "icegov-mask-test"
"""An X-Client-Version prefix the proxies of ``served`` treat as a client that applies masks."""
MASK_TRUSTED = "analyst"
"""The one principal whose client's ``MASK_CAPABLE_CLIENT`` claim the proxies of ``served`` take."""

LOCAL_RULES = """
# test-local: the analyst's column rules, with write rights on the demo tables
g, analyst-writer, demo-reader
p, analyst-writer, icegov.demo.*, INSERT, allow
p, analyst-writer, icegov.demo.*, UPDATE, allow
p, analyst-writer, icegov.demo.*, DELETE, allow
p, analyst-writer, icegov.demo.*, ALTER, allow
p, analyst-writer, icegov.demo.customers.ssn, SELECT, deny
p, analyst-writer, icegov.demo.customers.email, SELECT, mask:show-last-4

# test-local: the eu-analyst's row filter, with write rights on the demo tables
g, eu-writer, demo-reader
p, eu-writer, icegov.demo.*, INSERT, allow
p, eu-writer, icegov.demo.*, UPDATE, allow
p, eu-writer, icegov.demo.*, DELETE, allow
p, eu-writer, icegov.demo.orders, SELECT, filter:region = 'eu'
"""


# -- demo.customers: ssn denied to analyst, email masked ----------------------------------------

CUSTOMERS = "demo.customers"
CUSTOMER_COLUMNS = ("id", "name", "email", "ssn", "region")
ANALYST_COLUMNS = ("id", "name", "email", "region")
"""What analyst may read of customers: not ``ssn`` (denied); ``email`` it reads masked (governed
snapshots, ``proxy.governed``)."""
EMAIL_ID, SSN_ID = 3, 4


def customers_schema(*, ssn_required: bool = False) -> Schema:
    """``id`` (required), ``name``, ``email``, ``ssn``, ``region``: field ids 1..5."""
    return Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "name", StringType(), required=False),
        NestedField(EMAIL_ID, "email", StringType(), required=False),
        NestedField(SSN_ID, "ssn", StringType(), required=ssn_required),
        NestedField(5, "region", StringType(), required=False),
    )


CUSTOMER_BATCHES: tuple[tuple[Row, ...], ...] = (
    ((1, "ann", "ann@example.org", "111-11-1111", "eu"),
     (2, "bob", "bob@example.org", "222-22-2222", "us")),
    ((3, "cid", "cid@example.org", "333-33-3333", "eu"),
     (4, "dee", "dee@example.org", "444-44-4444", "ap")),
)
"""Two appends (two data files) of customer rows, columns as ``CUSTOMER_COLUMNS``."""


def customer_rows(columns: Iterable[str] = CUSTOMER_COLUMNS) -> list[Row]:
    """Every customer row, only ``columns`` of it, in canonical order."""
    picks = [CUSTOMER_COLUMNS.index(c) for c in columns]
    return ordered(tuple(row[i] for i in picks) for batch in CUSTOMER_BATCHES for row in batch)


def arrow_rows(table: Table, rows: Iterable[Row], columns: Iterable[str]) -> pa.Table:
    """``rows`` of ``columns`` as an Arrow table matching ``table``'s schema (required fields
    non-nullable, as pyiceberg insists)."""
    schema, names, listed = table.schema(), list(columns), list(rows)
    fields = [pa.field(n, pa.int64() if n == "id" else pa.string(),
                       nullable=not schema.find_field(n).required) for n in names]
    data = list(zip(*listed, strict=True)) if listed else [() for _ in names]
    return pa.table([pa.array(list(values), f.type) for values, f in zip(data, fields,
                                                                          strict=True)],
                    schema=pa.schema(fields))


def build_customers(catalog: RestCatalog, *, ssn_required: bool = False) -> Table:
    """``demo.customers`` created afresh (dropped first if present) with two data files."""
    catalog.create_namespace_if_not_exists("demo")
    if catalog.table_exists(CUSTOMERS):
        catalog.drop_table(CUSTOMERS)
    table = catalog.create_table(CUSTOMERS, customers_schema(ssn_required=ssn_required))
    for batch in CUSTOMER_BATCHES:
        table.append(arrow_rows(table, batch, CUSTOMER_COLUMNS))
    return catalog.load_table(CUSTOMERS)


# -- demo.orders: identity(region), eu-analyst reads the EU rows --------------------------------

ORDERS = "demo.orders"
ORDERS_SCHEMA = Schema(
    NestedField(1, "order_id", LongType(), required=False),
    NestedField(2, "region", StringType(), required=False),
    NestedField(3, "amount", LongType(), required=False),
)
ORDERS_SPEC = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "region"))
REGION_FIELD_ID = 2
REGIONS = ("eu", "us", "ap")
ORDER_APPENDS = (range(1, 10), range(10, 19), range(19, 31))
"""Three appends; each writes one data file per region (nine files, three manifests)."""


def order_row(order_id: int) -> Row:
    return (order_id, REGIONS[order_id % 3], order_id * 10)


def order_rows(region: str | None = None) -> list[Row]:
    """Every order row (of one region), in canonical order."""
    rows = [order_row(i) for ids in ORDER_APPENDS for i in ids]
    return ordered(r for r in rows if region is None or r[1] == region)


def build_orders(catalog: RestCatalog) -> Table:
    """``demo.orders`` created afresh, partitioned by region, three appends of all regions."""
    catalog.create_namespace_if_not_exists("demo")
    if catalog.table_exists(ORDERS):
        catalog.drop_table(ORDERS)
    table = catalog.create_table(ORDERS, ORDERS_SCHEMA, partition_spec=ORDERS_SPEC)
    for ids in ORDER_APPENDS:
        rows = [order_row(i) for i in ids]
        table.append(pa.table({
            "order_id": pa.array([r[0] for r in rows], pa.int64()),
            "region": pa.array([r[1] for r in rows], pa.string()),
            "amount": pa.array([r[2] for r in rows], pa.int64()),
        }))
    return catalog.load_table(ORDERS)


def files_by_region(table: Table) -> dict[str, frozenset[str]]:
    """The live data files of ``table`` (as admin plans it locally), by region partition."""
    found: dict[str, set[str]] = {}
    for task in table.scan().plan_files():
        found.setdefault(task.file.partition[0], set()).add(task.file.file_path)
    return {region: frozenset(paths) for region, paths in found.items()}


# -- the state a refused write must leave behind ------------------------------------------------

def table_state(url: str, identifier: str) -> tuple[list[Row], list[int], int]:
    """(rows, snapshot ids, current schema id) of a table as ``admin`` reads it."""
    table = RestCatalog("admin-state", uri=url, credential=ADMIN).load_table(identifier)
    arrow = table.scan().to_arrow()
    rows = ordered(zip(*(arrow.column(n).to_pylist() for n in arrow.column_names), strict=True))
    return rows, [s.snapshot_id for s in table.snapshots()], table.schema().schema_id


# -- content files of a raw plan ----------------------------------------------------------------

STATS_MAPS = ("column-sizes", "value-counts", "null-value-counts", "nan-value-counts",
              "lower-bounds", "upper-bounds")


def stats_field_ids(content_file: Mapping[str, Any]) -> dict[str, frozenset[int]]:
    """The field ids each statistics map of a wire content file has entries for."""
    return {name: frozenset(content_file[name]["keys"]) for name in STATS_MAPS
            if content_file.get(name)}


# -- proxies with the test-local policy ---------------------------------------------------------

@dataclass(frozen=True)
class Served:
    """A running proxy, and the URI of its backing catalog when that is a separate server
    (the reference catalog; None for the embedded one)."""

    proxy: RunningProxy
    backing_uri: str | None

    @property
    def url(self) -> str:
        return self.proxy.url


def local_policies(workdir: Path) -> dict[str, Any]:
    """A copy of ``policies/`` with ``LOCAL_RULES`` and their principals added; the
    ``policy`` and ``identity`` settings that use it."""
    policies = workdir / "policies"
    shutil.copytree(POLICIES, policies)
    with (policies / "policy.csv").open("a") as rules:
        rules.write(LOCAL_RULES)
    principals_file = policies / "principals.yaml"
    principals = yaml.safe_load(principals_file.read_text())
    for credential in (ANALYST_WRITER, EU_WRITER):
        name, secret = credential.split(":", 1)
        principals["principals"].append(
            {"name": name, "roles": [name], "secret_hash": hash_secret(secret)})
    principals_file.write_text(yaml.safe_dump(principals))
    return {"policy": {"model_path": policies / "model.conf",
                       "policy_path": policies / "policy.csv"},
            "identity": {"principals_file": principals_file}}


@contextlib.contextmanager
def served(backend: str, workdir: Path, governed: dict[str, Any] | None = None,
           **planning: Any) -> Iterator[Served]:
    """A proxy in front of ``backend`` with the test-local policy; ``planning`` overrides
    planning settings (mask-capable clients: ``MASK_CAPABLE_CLIENT`` of ``MASK_TRUSTED``),
    ``governed`` the governed-snapshot settings."""
    settings = local_policies(workdir)
    settings["planning"] = {"mask_capable_clients": (MASK_CAPABLE_CLIENT,),
                            "mask_capable_principals": (MASK_TRUSTED,), **planning}
    if governed is not None:
        settings["governed"] = governed
        if backend != "embedded":
            settings["governed"].setdefault("root", (workdir / "_icegov_governed").as_uri())
    if backend == "embedded":
        with serve(create_app(settings_for_tests(workdir, **settings))) as url:
            yield Served(RunningProxy(url, workdir), None)
        return
    from tests.support.reference_catalog import reference_catalog

    with reference_catalog(workdir) as catalog_uri:
        app = create_app(settings_for_tests(workdir, catalog_uri=catalog_uri, **settings))
        with serve(app) as url:
            yield Served(RunningProxy(url, workdir), catalog_uri)
