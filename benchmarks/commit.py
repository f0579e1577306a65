"""Commit cost of the proxy: pyiceberg appends and a copy-on-write DELETE, direct and via icegov.

Starts the embedded catalog standalone (``icegov catalog``) and a governed icegov proxy in front of
it (``icegov serve --catalog-uri``), each in its own process on a loopback port, like
``passthrough.py``. Every table is created directly against the catalog by the benchmark; then:

1. **Appends**: two tables grown the same way, one appended to directly, one through icegov as
   the demo ``writer``; rounds alternate which arm goes first, so both tables always have the
   same number of snapshots and both arms see the same machine state. Reports the whole
   ``table.append`` (write a Parquet file, a manifest and a manifest list, then commit) and the
   commit request alone (the POST, as the client timed it).
2. **Copy-on-write DELETE**: two tables with the same seeded ~``--mb`` MB of Parquet in several
   files; ``DELETE WHERE bucket = 3`` touches every file, so pyiceberg rewrites all of them. One
   is committed directly, the other through icegov as the demo ``deleter``, who holds DELETE but
   not INSERT: icegov allows it only if its row check proves every added row is one of the
   removed rows. The row check itself is then timed in-process: ``classify_commit`` on the same
   commit body and base, with the configured row budget and with a budget of 0 (no rows read).

Run: ``python benchmarks/commit.py`` (``--quick`` for a smoke run in well under a minute).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import ForbiddenError
from pyiceberg.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from passthrough import REPO, free_port, icegov_server

SEED = 20261121
NAMESPACE = "demo"  # the demo policy grants writer INSERT and deleter DELETE on icegov.demo.*
DELETED_BUCKET = 3
BUCKETS = 32


def governed_env(tmp: Path) -> dict[str, str]:
    """icegov's settings: demo principals and policy, audit to a file."""
    return {
        "ICEGOV__IDENTITY__SIGNING_KEY": "benchmark-signing-key-of-at-least-32-bytes",
        "ICEGOV__IDENTITY__PRINCIPALS_FILE": str(REPO / "policies" / "principals.yaml"),
        "ICEGOV__POLICY__MODEL_PATH": str(REPO / "policies" / "model.conf"),
        "ICEGOV__POLICY__POLICY_PATH": str(REPO / "policies" / "policy.csv"),
        "ICEGOV__AUDIT__STDOUT": "false",
        "ICEGOV__AUDIT__FILE": str(tmp / "audit.log"),
        "ICEGOV__LOG_LEVEL": "warning",
    }


@dataclass
class CommitTimer:
    """Times each commit POST a catalog's HTTP session sends (``requests``' ``elapsed``) and
    keeps the last commit body."""

    millis: list[float] = field(default_factory=list)
    last_body: bytes | None = None

    def attach(self, catalog: RestCatalog) -> RestCatalog:
        catalog._session.hooks["response"].append(self._record)
        return catalog

    def _record(self, response: Any, *_: Any, **__: Any) -> None:
        request = response.request
        if request.method == "POST" and "/tables/" in request.url:
            self.millis.append(response.elapsed.total_seconds() * 1000)
            body = request.body
            self.last_body = body.encode() if isinstance(body, str) else body


def catalog(url: str, principal: str | None = None) -> RestCatalog:
    """A pyiceberg REST catalog client; ``principal`` signs in with its demo secret."""
    properties = {"uri": url}
    if principal is not None:
        properties["credential"] = f"{principal}:{principal}-secret"
    return RestCatalog(f"bench-{principal or 'direct'}", **properties)


# -- 1. appends ------------------------------------------------------------------------------


@dataclass
class Arm:
    """One side of the comparison: a table, how long each append took, its commit POSTs."""

    name: str
    table: Table
    timer: CommitTimer
    append_ms: list[float] = field(default_factory=list)

    def append(self, rows: pa.Table, record: bool) -> None:
        start = time.perf_counter()
        self.table.append(rows)
        if record:
            self.append_ms.append((time.perf_counter() - start) * 1000)
        else:
            self.timer.millis.pop()


def small_batch(rows: int) -> pa.Table:
    rng = random.Random(SEED)
    return pa.table({
        "id": pa.array(range(rows), pa.int64()),
        "name": [f"event-{rng.randrange(10**6)}" for _ in range(rows)],
        "amount": pa.array([rng.randrange(10**6) for _ in range(rows)], pa.int64()),
    })


def run_appends(admin: RestCatalog, direct: str, proxied: str, appends: int, warmup: int,
                rows: int) -> tuple[Arm, Arm]:
    """Alternate appends to two tables grown the same way; warm-up appends are not recorded."""
    batch = small_batch(rows)
    for name in ("append_direct", "append_proxied"):
        admin.create_table(f"{NAMESPACE}.{name}", batch.schema)
    direct_timer, proxied_timer = CommitTimer(), CommitTimer()
    arms = (
        Arm("direct", direct_timer.attach(catalog(direct)).load_table(
            f"{NAMESPACE}.append_direct"), direct_timer),
        Arm("icegov", proxied_timer.attach(catalog(proxied, "writer")).load_table(
            f"{NAMESPACE}.append_proxied"), proxied_timer),
    )
    for i in range(warmup + appends):
        for arm in arms if i % 2 == 0 else arms[::-1]:
            arm.append(batch, record=i >= warmup)
    return arms


# -- 2. copy-on-write DELETE -----------------------------------------------------------------


def seeded_chunk(index: int, rows: int) -> pa.Table:
    """Deterministic, incompressible rows: sequential ids, random payload and tag, and a bucket
    (0..31) spread evenly over every file so a bucket predicate touches each one."""
    rng = random.Random(SEED + index)
    payload = pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(rng.randbytes(8 * rows))])
    tag = pa.Array.from_buffers(pa.binary(16), rows, [None, pa.py_buffer(rng.randbytes(16 * rows))])
    return pa.table({
        "id": pa.array(range(index * rows, (index + 1) * rows), pa.int64()),
        "payload": payload,
        "tag": tag.cast(pa.binary()),
        "bucket": pc.bit_wise_and(payload, pa.scalar(BUCKETS - 1, pa.int64())).cast(pa.int32()),
    })


ROW_BYTES = 30  # Parquet bytes per row, measured (random payload and tag; ids and buckets pack)


def build_cow_table(admin: RestCatalog, name: str, megabytes: float, files: int) -> Table:
    """A table holding ~``megabytes`` MB of Parquet in ``files`` files (one append each)."""
    rows = max(BUCKETS, int(megabytes * 1024 * 1024 / ROW_BYTES / files))
    table = admin.create_table(f"{NAMESPACE}.{name}", seeded_chunk(0, 1).schema)
    for index in range(files):
        table.append(seeded_chunk(index, rows))
    return table


@dataclass
class DeleteRun:
    """One arm's copy-on-write DELETE: the whole operation, its commit POST, what it did."""

    total_ms: float
    commit_ms: float | None
    outcome: str
    base: Any  # the table metadata before the delete
    body: bytes | None


def run_delete(table: Table, timer: CommitTimer) -> DeleteRun:
    base = table.metadata
    start = time.perf_counter()
    try:
        table.delete(f"bucket = {DELETED_BUCKET}")
        outcome = "landed"
    except ForbiddenError:
        outcome = "refused (403)"
    total = (time.perf_counter() - start) * 1000
    return DeleteRun(total, timer.millis[-1] if timer.millis else None, outcome, base,
                     timer.last_body)


def snapshot_sizes(table: Table) -> tuple[int, int, int]:
    """Removed bytes, added bytes and rewritten files of the table's current snapshot."""
    snapshot = table.current_snapshot()
    summary = snapshot.summary if snapshot is not None and snapshot.summary else {}
    return (int(summary.get("removed-files-size", 0)), int(summary.get("added-files-size", 0)),
            int(summary.get("deleted-data-files", 0)))


@dataclass
class RowCheckTiming:
    first_ms: float  # the first classification with rows (cold caches, as icegov's was)
    with_rows_ms: float  # the median of the repeats
    without_rows_ms: float
    actions: str
    row_checks: list[str]


def time_row_check(run: DeleteRun, io: Any, repeats: int) -> RowCheckTiming:
    """``classify_commit`` in-process on the delete's body and base: with the configured row
    budget, and with a budget of 0 (the row check gives up before reading a byte)."""
    from proxy.commits import classify_commit
    from proxy.commits.limits import CommitLimits

    assert run.body is not None
    body = json.loads(run.body)

    def timed(limits: CommitLimits) -> tuple[list[float], Any]:
        samples, intent = [], None
        for _ in range(repeats):
            start = time.perf_counter()
            intent = classify_commit(body, run.base, io, limits=limits)
            samples.append((time.perf_counter() - start) * 1000)
        return samples, intent

    with_rows, intent = timed(CommitLimits())
    without_rows, _ = timed(CommitLimits(row_bytes_budget=0))
    actions = "+".join(sorted(str(a) for a in intent.actions))
    return RowCheckTiming(with_rows[0], statistics.median(with_rows),
                          statistics.median(without_rows), actions,
                          list(intent.evidence.row_checks))


def audited_commit(audit_log: Path, table: str) -> dict[str, Any] | None:
    """The audit record of the last commit to ``table``."""
    found = None
    for line in audit_log.read_text().splitlines():
        record = json.loads(line)
        if record.get("endpoint") == "commit_table" and record["path"].endswith(f"/{table}"):
            found = record
    return found


# -- report ----------------------------------------------------------------------------------


def quantile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def stats_row(label: str, direct: list[float], proxied: list[float]) -> str:
    cells = []
    for measure in (statistics.median, lambda s: quantile(s, 0.9), statistics.fmean):
        d, p = measure(direct), measure(proxied)
        cells += [f"{d:.1f}", f"{p:.1f}", f"{p / d:.2f}", f"{p - d:+.1f}"]
    return f"| {label} | " + " | ".join(cells) + " |"


def report_appends(arms: tuple[Arm, Arm], args: argparse.Namespace) -> None:
    direct, proxied = arms
    print(f"# appends: {args.appends} per arm of {args.rows} rows, after {args.warmup} warm-up "
          f"each, alternating arms; tables end with {args.warmup + args.appends} snapshots; "
          f"{os.cpu_count()} cores")
    print("| measure | direct p50 ms | icegov p50 ms | p50 ratio | added p50 ms "
          "| direct p90 ms | icegov p90 ms | p90 ratio | added p90 ms "
          "| direct mean ms | icegov mean ms | mean ratio | added mean ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    print(stats_row("table.append", direct.append_ms, proxied.append_ms))
    print(stats_row("commit POST", direct.timer.millis, proxied.timer.millis), flush=True)


def report_delete(direct: DeleteRun, proxied: DeleteRun, sizes: tuple[int, int, int],
                  check: RowCheckTiming | None, audit: dict[str, Any] | None) -> None:
    removed, added, files = sizes
    mb = (removed + added) / 2**20
    print(f"\n# copy-on-write DELETE WHERE bucket = {DELETED_BUCKET}: {files} files rewritten, "
          f"{removed / 2**20:.1f} MB removed, {added / 2**20:.1f} MB added")
    print("| arm | outcome | whole delete ms | commit POST ms |")
    print("|---|---|---|---|")
    for name, run in (("direct", direct), ("icegov (deleter)", proxied)):
        commit = "-" if run.commit_ms is None else f"{run.commit_ms:.1f}"
        print(f"| {name} | {run.outcome} | {run.total_ms:.0f} | {commit} |")
    if direct.commit_ms is not None and proxied.commit_ms is not None:
        report_added(direct.commit_ms, proxied.commit_ms, mb, proxied.outcome == "landed")
    if audit is not None:
        evidence = audit.get("evidence") or [{}]
        print(f"audit: decision {audit['decision']}, actions {audit['actions']}, "
              f"status {audit['status']}, latency {audit['latency_ms']:.1f} ms")
        for line in evidence[0].get("row_checks", []):
            print(f"audit row check: {line}")
    if check is not None:
        row_ms = check.with_rows_ms - check.without_rows_ms
        rate = mb / (row_ms / 1000) if row_ms > 0 else float("inf")
        print(f"classify_commit in-process: {check.with_rows_ms:.0f} ms with the row check "
              f"(median; first {check.first_ms:.0f} ms; {check.actions}), "
              f"{check.without_rows_ms:.0f} ms without; row check {row_ms:.0f} ms over "
              f"{mb:.1f} MB read = {rate:.0f} MB/s")
    sys.stdout.flush()


def report_added(direct_ms: float, proxied_ms: float, mb: float, landed: bool) -> None:
    added_ms = proxied_ms - direct_ms
    rate = (f": {mb:.1f} MB of data files verified at {mb / (added_ms / 1000):.0f} MB/s as "
            "served" if landed and added_ms > 0 else "")
    print(f"\nicegov adds {added_ms:.1f} ms to the commit POST "
          f"({proxied_ms / direct_ms:.1f}x){rate}")


# -- main ------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--appends", type=int, default=200, help="recorded appends per arm")
    parser.add_argument("--warmup", type=int, default=20, help="unrecorded appends per arm")
    parser.add_argument("--rows", type=int, default=100, help="rows per append")
    parser.add_argument("--mb", type=float, default=100.0, help="MB of Parquet to delete from")
    parser.add_argument("--files", type=int, default=8, help="data files holding those MB")
    parser.add_argument("--repeats", type=int, default=3, help="in-process row check timings")
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.appends, args.warmup, args.mb, args.files, args.repeats = 20, 3, 4.0, 4, 1
    return args


def run_cow_delete(admin: RestCatalog, direct_url: str, proxied_url: str,
                   args: argparse.Namespace, audit_log: Path) -> None:
    for name in ("cow_direct", "cow_proxied"):
        build_cow_table(admin, name, args.mb, args.files)
    timers = CommitTimer(), CommitTimer()
    clients: tuple[Callable[[], RestCatalog], ...] = (
        lambda: timers[0].attach(catalog(direct_url)),
        lambda: timers[1].attach(catalog(proxied_url, "deleter")))
    runs = [run_delete(make().load_table(f"{NAMESPACE}.{name}"), timer)
            for make, name, timer in zip(clients, ("cow_direct", "cow_proxied"), timers,
                                         strict=True)]
    direct_table = admin.load_table(f"{NAMESPACE}.cow_direct")
    check = None
    if runs[0].body is not None:
        check = time_row_check(runs[0], direct_table.io, args.repeats)
    report_delete(runs[0], runs[1], snapshot_sizes(direct_table), check,
                  audited_commit(audit_log, "cow_proxied"))


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        warehouse = ["catalog", "--warehouse", str(tmp / "wh")]
        with icegov_server(warehouse, free_port()) as direct_url, \
                icegov_server(["serve", "--catalog-uri", direct_url], free_port(),
                       governed_env(tmp)) as proxied_url:
            admin = catalog(direct_url)
            admin.create_namespace(NAMESPACE)
            arms = run_appends(admin, direct_url, proxied_url, args.appends, args.warmup,
                               args.rows)
            report_appends(arms, args)
            run_cow_delete(admin, direct_url, proxied_url, args, tmp / "audit.log")
    print(f"\n(total {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
