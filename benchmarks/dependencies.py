"""Column dependencies (issue 22): the seed's store_sales query planned with and without one.

Three store_sales-like tables, identical rows, partitioned by ``identity(ss_sold_month)`` (a
string ``MM``), with ``ss_sold_date_sk`` a string date ``MM-DD-YYYY`` (the seed's form: its
first two characters are the month):

* **dependency**: ``icegov.column-dependencies=ss_sold_date_sk=ss_sold_month:truncate[2]`` (the
  seed's) and no column metrics for ``ss_sold_date_sk``
  (``write.metadata.metrics.column.ss_sold_date_sk=none``, as for a source whose metrics do not
  follow the partitioning);
* **no dependency**: the same table without the dependency property;
* **no dep., metrics**: without the property and with the default metrics for
  ``ss_sold_date_sk``. This encoding sorts by month, so its min/max already prune by month:
  shown so the first two rows are not read as the only way to prune this data.

Each is written through icegov (``icegov catalog`` embedded, ``icegov serve`` in front, demo
``admin``) by PyIceberg in ``--files`` appends of one file per month (``--months`` months,
``--rows`` rows per file); every append to the first table is verified and stamped by icegov
(checked). icegov runs with its plan and answer caches off (``ICEGOV__PLANNING__PLAN_CACHE_PLANS``
and ``ANSWER_CACHE_BYTES`` = 0): every plan is planned from the (warm) manifest cache.

Queries filter on the source column only (``=``, ``IN``, a range, an ``OR``). For each query
and table: partitions and files planned by icegov's server-side planning (PyIceberg
``scan-planning-mode=server``), rows returned (checked equal to PyIceberg's local planning of
the same table, by ``ss_item_sk``), and the plan time (``plan_files()`` through icegov, list
materialised, p50 of ``--repeats`` after one untimed plan); local planning's files and time
beside them.

Run: ``python benchmarks/dependencies.py`` (12 months x 20 files, ~1 min; ``--quick``: 3 files
a month, seconds).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.expressions import (
    And,
    BooleanExpression,
    EqualTo,
    GreaterThanOrEqual,
    In,
    LessThan,
    Or,
)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DecimalType, IntegerType, NestedField, StringType

sys.path.insert(0, str(Path(__file__).resolve().parent))
from passthrough import REPO, free_port, icegov_server

sys.path.insert(0, str(REPO))

from proxy.commits.dependencies import PROPERTY, VERIFIED

SCHEMA = Schema(
    NestedField(1, "ss_item_sk", IntegerType(), required=False),
    NestedField(2, "ss_quantity", IntegerType(), required=False),
    NestedField(3, "ss_sales_price", DecimalType(7, 2), required=False),
    NestedField(4, "ss_sold_month", StringType(), required=False),
    NestedField(5, "ss_sold_date_sk", StringType(), required=False),
)
BY_MONTH = PartitionSpec(PartitionField(4, 1000, IdentityTransform(), "ss_sold_month"))
SEED = "ss_sold_date_sk=ss_sold_month:truncate[2]"
NO_METRICS = {"write.metadata.metrics.column.ss_sold_date_sk": "none"}
TABLES = {  # name -> (label, properties)
    "with_dep": ("dependency", {PROPERTY: SEED, **NO_METRICS}),
    "without_dep": ("no dependency", dict(NO_METRICS)),
    "metrics_only": ("no dep., metrics", {}),
}
NAMESPACE = "bench"
DECIMAL = pa.decimal128(7, 2)


def settings(tmp: Path) -> dict[str, str]:
    """icegov's settings: demo principals and policy, audit to a file, plan caches off."""
    return {
        "ICEGOV__IDENTITY__SIGNING_KEY": "benchmark-signing-key-of-at-least-32-bytes",
        "ICEGOV__IDENTITY__PRINCIPALS_FILE": str(REPO / "policies" / "principals.yaml"),
        "ICEGOV__POLICY__MODEL_PATH": str(REPO / "policies" / "model.conf"),
        "ICEGOV__POLICY__POLICY_PATH": str(REPO / "policies" / "policy.csv"),
        "ICEGOV__AUDIT__STDOUT": "false",
        "ICEGOV__AUDIT__FILE": str(tmp / "audit.log"),
        "ICEGOV__LOG_LEVEL": "warning",
        "ICEGOV__PLANNING__PLAN_CACHE_PLANS": "0",
        "ICEGOV__PLANNING__ANSWER_CACHE_BYTES": "0",
    }


# -- the tables --------------------------------------------------------------------------------


def batch(append: int, months: int, rows: int, rng: random.Random) -> pa.Table:
    """One append's rows: ``rows`` per month, random days of 2019 and 2020 (one file a month)."""
    items, months_col, dates = [], [], []
    for month in range(1, months + 1):
        first = (append * months + month - 1) * rows
        items += range(first, first + rows)
        months_col += [f"{month:02d}"] * rows
        dates += [f"{month:02d}-{rng.randint(1, 28):02d}-{rng.choice((2019, 2020))}"
                  for _ in range(rows)]
    return pa.table({
        "ss_item_sk": pa.array(items, pa.int32()),
        "ss_quantity": pa.array([i % 100 for i in items], pa.int32()),
        "ss_sales_price": pa.array([None] * len(items), DECIMAL),
        "ss_sold_month": pa.array(months_col, pa.string()),
        "ss_sold_date_sk": pa.array(dates, pa.string()),
    }, schema=SCHEMA.as_arrow())


def build(admin: RestCatalog, args: Any) -> None:
    """The three tables, the same rows appended to each through icegov."""
    admin.create_namespace(NAMESPACE)
    tables = {name: admin.create_table(f"{NAMESPACE}.{name}", SCHEMA, partition_spec=BY_MONTH,
                                       properties=props)
              for name, (_, props) in TABLES.items()}
    rng = random.Random(22)
    for append in range(args.files):
        rows = batch(append, args.months, args.rows, rng)
        for table in tables.values():
            table.append(rows)
    stamped = admin.load_table(f"{NAMESPACE}.with_dep")
    stamps = [(s.summary or {}).get(VERIFIED) for s in stamped.snapshots()]
    assert len(stamps) == args.files and None not in stamps, "every append verified"


# -- the queries -------------------------------------------------------------------------------


def queries() -> list[tuple[str, BooleanExpression]]:
    column = "ss_sold_date_sk"
    return [
        ("= '09-11-2019'", EqualTo(column, "09-11-2019")),
        ("IN 3 dates, 2 months", In(column, ["01-02-2020", "11-03-2019", "11-04-2019"])),
        (">= '03-01-2019' AND < '05-01-2019'",
         And(GreaterThanOrEqual(column, "03-01-2019"), LessThan(column, "05-01-2019"))),
        ("= '03-05-2019' OR = '07-05-2020'",
         Or(EqualTo(column, "03-05-2019"), EqualTo(column, "07-05-2020"))),
    ]


@dataclass
class Measured:
    partitions: int
    files: int
    items: list[int]
    seconds: list[float]


def measure(table: Table, row_filter: BooleanExpression, repeats: int) -> Measured:
    """Plan ``row_filter`` ``repeats`` times (after one untimed plan) and read its rows once."""
    scan = table.scan(row_filter=row_filter)
    tasks = list(scan.plan_files())
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        list(table.scan(row_filter=row_filter).plan_files())
        seconds.append(time.perf_counter() - started)
    items = sorted(table.scan(row_filter=row_filter,
                              selected_fields=("ss_item_sk",)).to_arrow()
                   .column("ss_item_sk").to_pylist())
    return Measured(len({t.file.partition[0] for t in tasks}), len(tasks), items, seconds)


def run(url: str, args: Any) -> None:
    admin = RestCatalog("admin", uri=url, credential="admin:admin-secret")
    server = RestCatalog("server", uri=url, credential="admin:admin-secret",
                         **{"scan-planning-mode": "server"})
    assert server.supports_server_side_planning()
    started = time.perf_counter()
    build(admin, args)
    print(f"tables: 3 x {args.months} months x {args.files} files x {args.rows} rows, "
          f"written through icegov in {time.perf_counter() - started:.1f} s")
    total = args.months * args.files
    results: list[tuple[str, str, Measured, Measured]] = []
    for name in TABLES:  # warm icegov's manifest cache on a filter implying no query
        list(server.load_table(f"{NAMESPACE}.{name}").scan(
            row_filter=LessThan("ss_item_sk", 0)).plan_files())
    for label, row_filter in queries():
        for name, (arm, _) in TABLES.items():
            local = measure(admin.load_table(f"{NAMESPACE}.{name}"), row_filter, args.repeats)
            planned = measure(server.load_table(f"{NAMESPACE}.{name}"), row_filter,
                              args.repeats)
            assert planned.items == local.items, f"{label} on {name}: rows differ from local"
            assert planned.items, f"{label}: the query matches rows"
            results.append((label, arm, planned, local))
    report(results, total, args)


def report(results: list[tuple[str, str, Measured, Measured]], total: int, args: Any) -> None:
    p50 = statistics.median
    print(f"\n{total} files, {args.months} partitions; plan p50 of {args.repeats}, ms\n")
    print(f"{'query':<36} {'table':<17} {'parts':>5} {'files':>6} {'rows':>6} "
          f"{'plan ms':>8} {'files x':>8} {'time x':>7} {'local files':>11} {'local ms':>9}")
    for label, arm, planned, local in results:
        plain = next(p for q, a, p, _ in results if q == label and a == "no dependency")
        print(f"{label:<36} {arm:<17} {planned.partitions:>5} {planned.files:>6} "
              f"{len(planned.items):>6} {p50(planned.seconds) * 1e3:>8.1f} "
              f"{planned.files / plain.files:>8.3f} "
              f"{p50(planned.seconds) / p50(plain.seconds):>7.2f} "
              f"{local.files:>11} {p50(local.seconds) * 1e3:>9.1f}")
    print("\nfiles x, time x: against 'no dependency' (same query, server-side planning); "
          "rows: equal to local planning's in every row")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--months", type=int, default=12)
    parser.add_argument("--files", type=int, default=20, help="files per month (appends)")
    parser.add_argument("--rows", type=int, default=2_000, help="rows per file")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.months, args.files, args.rows, args.repeats = 12, 3, 200, 3
    with tempfile.TemporaryDirectory(prefix="icegov-bench-deps-") as name:
        tmp = Path(name)
        warehouse = ["catalog", "--warehouse", str(tmp / "wh")]
        with icegov_server(warehouse, free_port()) as direct_url, \
                icegov_server(["serve", "--catalog-uri", direct_url], free_port(),
                              settings(tmp)) as url:
            run(url, args)


if __name__ == "__main__":
    main()
