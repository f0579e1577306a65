"""Concurrent appends (issue 7): seed 002's rows, directly against a catalog and through icegov.

For each row (threads, appends total) and each mode, a fresh one-column table is created directly
on the backing catalog; ``threads`` Python threads, each with its own pyiceberg REST client, start
together and share the appends; every append commits one row in one tiny Parquet file
(``table.append``). Modes:

* **(a) direct**: against the catalog, with the Java client's default commit retries emulated
  around pyiceberg (``JavaRetries``: Iceberg's ``TableProperties`` defaults, 4 retries, 100 ms
  doubling up to 60 s, a 30 min budget, and ``util.Tasks``' jitter); pyiceberg's own retry loop
  is turned off on that table. Like Java's ``SnapshotProducer``, every attempt refreshes the
  table first. A failure is an append whose last attempt still failed.
* **(b) icegov rebase**: through a governed icegov (as the demo ``writer``) forwarding to the
  same catalog, which rebases conflicting pure appends; the client never retries
  (``commit.retry.num-retries=0``).
* **(c) icegov append-files**: through icegov with the ``append-files`` data operation, using
  icegov's shipped Python client (``proxy.client``); no client retries.

Reported per row: failures, commits/s (successful appends / wall time of the row), the (b)/(a)
and (c)/(a) throughput ratios, and "ok": the table holds exactly the rows whose appends
succeeded (no lost, no duplicated row), its snapshot ids are unique and its main branch has one
snapshot per successful append.

The catalog (``icegov catalog``, or ``--backing reference``: Apache Iceberg's own
``CatalogHandlers`` from the test suite) and icegov (``icegov serve --catalog-uri``) each run in
their own process on a loopback port, like ``commit.py``.

Run: ``python benchmarks/commits.py`` (all of seed 002's rows; the last two take long), ``--rows
5x20,10x50`` to choose, ``--quick`` for the smallest row only (well under a minute).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from commit import catalog, governed_env
from passthrough import REPO, free_port, icegov_server

NAMESPACE = "demo"  # the demo policy grants writer INSERT on icegov.demo.*
SEED_ROWS = ((5, 20), (10, 50), (20, 100), (25, 200), (30, 1000), (30, 2000))
# seed 002's failures per row: AWS Glue with 4 client retries, and its REST catalog with data
# commits (the catalog retries); the seed gives no throughput
SEED_FAILURES = {(5, 20): (5, 0), (10, 50): (23, 0), (20, 100): (72, 0), (25, 200): (152, 0),
                 (30, 1000): (813, 1), (30, 2000): (1643, 2)}
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False)])
NO_CLIENT_RETRIES = {"commit.retry.num-retries": "0"}


# -- the Java client's commit retries --------------------------------------------------------


@dataclass(frozen=True)
class JavaRetries:
    """Iceberg Java's default commit retries: ``TableProperties`` (``commit.retry.*``) and the
    backoff of ``util.Tasks`` (sleep ``min(min_wait * 2^(n-1), max_wait)`` after failed attempt
    n, plus a uniform integer jitter below a tenth of it; stop after ``retries + 1`` attempts, or
    once more than ``total_ms`` have passed after the second attempt)."""

    retries: int = 4
    min_wait_ms: int = 100
    max_wait_ms: int = 60_000
    total_ms: int = 1_800_000
    scale: float = 2.0

    def delay_ms(self, attempt: int, rng: random.Random) -> int:
        """The sleep after failed attempt number ``attempt`` (1-based)."""
        delay = int(min(self.min_wait_ms * self.scale ** (attempt - 1), self.max_wait_ms))
        return delay + rng.randrange(max(1, int(delay * 0.1)))

    def run(self, attempt_once: Callable[[], None], rng: random.Random,
            sleep: Callable[[float], None] = time.sleep,
            clock: Callable[[], float] = time.monotonic) -> int:
        """Run ``attempt_once`` until it does not raise ``CommitFailedException`` or the retries
        are spent (then the last one propagates); returns the attempts made."""
        start, attempt = clock(), 0
        while True:
            attempt += 1
            try:
                attempt_once()
                return attempt
            except CommitFailedException:
                elapsed_ms = (clock() - start) * 1000
                if attempt > self.retries or (elapsed_ms > self.total_ms and attempt > 1):
                    raise
                sleep(self.delay_ms(attempt, rng) / 1000)


class StatusCounter:
    """Counts the HTTP statuses of the commit POSTs a pyiceberg client sends (thread-safe)."""

    def __init__(self) -> None:
        self.counts: Counter[int] = Counter()
        self._lock = threading.Lock()

    def attach(self, client: RestCatalog) -> RestCatalog:
        client._session.hooks["response"].append(self._record)
        return client

    def _record(self, response: Any, *_: Any, **__: Any) -> None:
        request = response.request
        if request.method == "POST" and "/tables/" in request.url:
            with self._lock:
                self.counts[response.status_code] += 1


# -- modes -----------------------------------------------------------------------------------

Appender = Callable[[Any, str, pa.Table, random.Random], int]


def one_row(row_id: int) -> pa.Table:
    return pa.Table.from_pydict({"id": [row_id]}, schema=SCHEMA)


def append_with_java_retries(client: RestCatalog, name: str, rows: pa.Table,
                             rng: random.Random) -> int:
    """Mode (a): refresh and append, retried as the Java client would."""
    table = client.load_table(name)

    def attempt() -> None:
        table.refresh()
        table.append(rows)

    return JavaRetries().run(attempt, rng)


def append_once(client: RestCatalog, name: str, rows: pa.Table, _: random.Random) -> int:
    """Mode (b): load the table and append once; any conflict is a failure."""
    client.load_table(name).append(rows)
    return 1


def append_files_once(client: Any, name: str, rows: pa.Table, _: random.Random) -> int:
    """Mode (c): icegov's ``append-files`` through the shipped client, once."""
    client.append(name, rows)
    return 1


def rest_client(url: str, principal: str | None, counter: StatusCounter) -> RestCatalog:
    return counter.attach(catalog(url, principal))


def icegov_client(url: str, principal: str | None, counter: StatusCounter) -> Any:
    from proxy.client import IcegovClient

    credential = {} if principal is None else {"credential": f"{principal}:{principal}-secret"}
    client = IcegovClient(url, retries=0, **credential)  # no client retries, as in (b)
    counter.attach(client.catalog)
    return client


@dataclass(frozen=True)
class Mode:
    key: str
    label: str
    url: str
    principal: str | None
    appender: Appender
    connect: Callable[[str, str | None, StatusCounter], Any] = rest_client
    properties: dict[str, str] = field(default_factory=lambda: dict(NO_CLIENT_RETRIES))

    def client(self, counter: StatusCounter) -> Any:
        """A new client of this mode (one per thread), counting its commit statuses."""
        return self.connect(self.url, self.principal, counter)


def client_available() -> bool:
    try:
        from proxy.client import IcegovClient  # noqa: F401
    except ImportError:
        return False
    return True


def build_modes(keys: str, direct: str, proxied: str) -> list[Mode]:
    modes = {
        "a": Mode("a", "direct, Java retries", direct, None, append_with_java_retries),
        "b": Mode("b", "icegov rebase", proxied, "writer", append_once),
        "c": Mode("c", "icegov append-files", proxied, "writer", append_files_once,
                  icegov_client),
    }
    if "c" in keys and not client_available():
        print("# mode (c) skipped: proxy.client (append-files) is not available", flush=True)
        keys = keys.replace("c", "")
    return [modes[key] for key in keys]


# -- one run ---------------------------------------------------------------------------------


@dataclass
class RunResult:
    """One (row, mode): what the clients saw, and what the table holds afterwards."""

    threads: int
    appends: int
    mode: str
    seconds: float = 0.0
    landed: set[int] = field(default_factory=set)
    errors: Counter[str] = field(default_factory=Counter)
    first_error: dict[str, str] = field(default_factory=dict)  # per error type, its first text
    attempts: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    server: str = ""  # how icegov landed the commits (from its audit log), for (b) and (c)

    @property
    def failures(self) -> int:
        return self.appends - len(self.landed)

    @property
    def rate(self) -> float:
        return len(self.landed) / self.seconds if self.seconds else 0.0


def worker(mode: Mode, client: Any, name: str, ids: list[int], start: threading.Barrier,
           result: RunResult, lock: threading.Lock) -> None:
    rng = random.Random(ids[0] if ids else 0)
    start.wait()
    for row_id in ids:
        try:
            attempts = mode.appender(client, name, one_row(row_id), rng)
        except Exception as exc:  # a failed append, whatever the client raised
            with lock:
                result.errors[type(exc).__name__] += 1
                result.first_error.setdefault(type(exc).__name__, str(exc)[:160])
            continue
        with lock:
            result.landed.add(row_id)
            result.attempts += attempts


def run_row(admin: RestCatalog, mode: Mode, threads: int, appends: int,
            audit_log: Path) -> RunResult:
    """Create the row's table, run ``appends`` appends on ``threads`` threads, verify."""
    name = f"{NAMESPACE}.t{threads}x{appends}_{mode.key}"
    admin.create_table(name, SCHEMA, properties=mode.properties)
    result, lock = RunResult(threads, appends, mode.key), threading.Lock()
    statuses = StatusCounter()
    clients = [mode.client(statuses) for _ in range(threads)]
    barrier = threading.Barrier(threads + 1)
    pool = [threading.Thread(target=worker, args=(mode, clients[t], name,
                                                  list(range(t, appends, threads)), barrier,
                                                  result, lock), daemon=True)
            for t in range(threads)]  # daemons: Ctrl-C ends the run and its servers
    for thread in pool:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in pool:
        thread.join()
    result.seconds = time.perf_counter() - started
    result.statuses = statuses.counts
    result.problems = verify(admin.load_table(name), result.landed)
    if mode.principal is not None:
        result.server = server_side(audit_log, name.split(".")[-1])
    return result


def ancestry(table: Table) -> list[int]:
    """Snapshot ids from the main branch's head back to its first snapshot."""
    chain, snapshot = [], table.current_snapshot()
    while snapshot is not None:
        chain.append(snapshot.snapshot_id)
        parent = snapshot.parent_snapshot_id
        snapshot = table.metadata.snapshot_by_id(parent) if parent is not None else None
    return chain


def verify(table: Table, landed: set[int]) -> list[str]:
    """What is wrong with the table after a run: rows lost or duplicated, rows from failed
    appends, duplicate snapshot ids, a branch that does not hold one snapshot per append."""
    ids: list[int] = table.scan(selected_fields=("id",)).to_arrow()["id"].to_pylist()
    problems = []
    if len(ids) != len(set(ids)):
        problems.append(f"{len(ids) - len(set(ids))} duplicated rows")
    if lost := landed - set(ids):
        problems.append(f"{len(lost)} acknowledged appends missing")
    if extra := set(ids) - landed:
        problems.append(f"{len(extra)} rows from appends reported failed")
    snapshot_ids = [snapshot.snapshot_id for snapshot in table.metadata.snapshots]
    if len(snapshot_ids) != len(set(snapshot_ids)):
        problems.append("duplicate snapshot ids")
    chain = ancestry(table)
    if len(chain) != len(set(chain)) or len(chain) != len(landed):
        problems.append(f"main has {len(chain)} snapshots for {len(landed)} appends")
    return problems


def server_side(audit_log: Path, table: str) -> str:
    """How icegov landed the commits to ``table``, from the ``evidence`` of its audit records:
    outcomes, how many were rebased, and the most tries one took."""
    outcomes: Counter[str] = Counter()
    rebased, most_tries = 0, 0
    for line in audit_log.read_text().splitlines():
        record = json.loads(line)
        if record.get("endpoint") != "commit_table" or not record["path"].endswith(f"/{table}"):
            continue
        for evidence in record.get("evidence") or []:
            outcomes[str(evidence.get("outcome"))] += 1
            rebased += bool(evidence.get("rebased"))
            most_tries = max(most_tries, int(evidence.get("tries") or 0))
    shown = ", ".join(f"{name}: {n}" for name, n in outcomes.most_common())
    return f"icegov outcomes {{{shown}}}, {rebased} rebased, at most {most_tries} tries"


# -- report ----------------------------------------------------------------------------------


def ratio(result: RunResult | None, baseline: RunResult | None) -> str:
    if result is None or baseline is None or not baseline.rate:
        return "-"
    return f"{result.rate / baseline.rate:.2f}"


def cells(result: RunResult | None) -> list[str]:
    if result is None:
        return ["-", "-"]
    return [str(result.failures), f"{result.rate:.1f}"]


def table_line(row: tuple[int, int], results: dict[str, RunResult]) -> str:
    a, b, c = (results.get(key) for key in "abc")
    glue, rest = SEED_FAILURES.get(row, ("-", "-"))
    ok = "yes" if all(not r.problems for r in results.values()) else "NO"
    parts = [f"({row[0]}, {row[1]})", str(glue), str(rest), *cells(a), *cells(b), ratio(b, a),
             *cells(c), ratio(c, a), ok]
    return "| " + " | ".join(parts) + " |"


def detail_line(result: RunResult) -> str:
    statuses = ", ".join(f"{status}: {n}" for status, n in sorted(result.statuses.items()))
    errors = ", ".join(f"{name} x{n}" + ("" if name == "CommitFailedException" else
                                          f" ({result.first_error[name]})")
                       for name, n in result.errors.most_common()) or "none"
    verdict = "; ".join(result.problems) or "ok"
    server = f"; {result.server}" if result.server else ""
    return (f"- ({result.threads}, {result.appends}) ({result.mode}): {len(result.landed)} landed "
            f"in {result.seconds:.2f} s ({result.rate:.2f}/s), {result.attempts} attempts for "
            f"them; commit POST statuses {{{statuses}}}; failures: {errors}{server}; "
            f"verification: {verdict}")


def report(results: dict[tuple[int, int], dict[str, RunResult]]) -> None:
    print(f"\n# concurrent appends, {os.cpu_count()} cores; commits/s = successful appends / wall "
          "time of the row; failures = appends that still failed")
    print("| (threads, appends) | seed Glue failures | seed REST failures | (a) failures "
          "| (a) commits/s | (b) failures | (b) commits/s | (b)/(a) | (c) failures "
          "| (c) commits/s | (c)/(a) | ok |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row, by_mode in results.items():
        print(table_line(row, by_mode))
    print()
    for by_mode in results.values():
        for result in by_mode.values():
            print(detail_line(result))
    sys.stdout.flush()


# -- main ------------------------------------------------------------------------------------


def parse_rows(text: str) -> list[tuple[int, int]]:
    """``"5x20,10x50"`` → ``[(5, 20), (10, 50)]`` (threads, appends in total)."""
    rows = []
    for item in text.split(","):
        threads, _, appends = item.strip().partition("x")
        if not (threads.isdigit() and appends.isdigit()) or not 1 <= int(threads) <= int(appends):
            raise argparse.ArgumentTypeError(f"bad row {item!r}: THREADSxAPPENDS, "
                                             "1 <= threads <= appends")
        rows.append((int(threads), int(appends)))
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rows", type=parse_rows,
                        default=list(SEED_ROWS), help="threadsxappends,... (default: seed 002's)")
    parser.add_argument("--modes", default="abc", help="which of a, b, c to run (default abc)")
    parser.add_argument("--backing", choices=("embedded", "reference"), default="embedded")
    parser.add_argument("--icegov-env", action="append", default=[], metavar="NAME=VALUE",
                        help="an extra ICEGOV__ setting for the proxy (repeatable)")
    parser.add_argument("--quick", action="store_true", help="the (5, 20) row only")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows = [(5, 20)]
    return args


@contextlib.contextmanager
def backing_catalog(kind: str, workdir: Path) -> Iterator[str]:
    """The catalog every mode ends at, in its own process; yields its URL."""
    if kind == "reference":
        sys.path.insert(0, str(REPO))
        from tests.support.reference_catalog import reference_catalog

        with reference_catalog(workdir) as url:
            yield url
        return
    with icegov_server(["catalog", "--warehouse", str(workdir / "wh")], free_port()) as url:
        yield url


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    extra_env = dict(item.split("=", 1) for item in args.icegov_env)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        with backing_catalog(args.backing, tmp) as direct_url, \
                icegov_server(["serve", "--catalog-uri", direct_url], free_port(),
                       {**governed_env(tmp), **extra_env}) as proxied_url:
            admin = catalog(direct_url)
            admin.create_namespace(NAMESPACE)
            modes = build_modes(args.modes, direct_url, proxied_url)
            results: dict[tuple[int, int], dict[str, RunResult]] = {}
            try:
                for row in args.rows:
                    for mode in modes:
                        result = run_row(admin, mode, *row, tmp / "audit.log")
                        results.setdefault(row, {})[mode.key] = result
                        print(detail_line(result), flush=True)
            except KeyboardInterrupt:
                print("# interrupted: the rows finished so far", flush=True)
            report(results)
    print(f"\n(backing: {args.backing}; total {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
