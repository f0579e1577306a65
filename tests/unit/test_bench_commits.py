"""The concurrent-appends benchmark's own pieces: the Java retry emulation, rows, verification."""

from __future__ import annotations

import argparse
import importlib.util
import random
import sys
from pathlib import Path
from types import ModuleType

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "commits.py"


def load_benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_commits", BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_commits"] = module
    spec.loader.exec_module(module)
    return module


bench = load_benchmark()


class FlakyCommit:
    """Fails with a conflict the first ``conflicts`` times, then succeeds."""

    def __init__(self, conflicts: int) -> None:
        self.conflicts, self.calls = conflicts, 0

    def __call__(self) -> None:
        self.calls += 1
        if self.calls <= self.conflicts:
            raise CommitFailedException("branch moved")


def test_java_backoff_doubles_from_100ms_with_under_ten_percent_jitter_capped_at_60s() -> None:
    retries, rng = bench.JavaRetries(), random.Random(7)
    for attempt, base in ((1, 100), (2, 200), (3, 400), (4, 800), (10, 51_200), (11, 60_000),
                          (30, 60_000)):
        delays = {retries.delay_ms(attempt, rng) for _ in range(200)}
        assert min(delays) >= base
        assert max(delays) < base + base // 10
        assert len(delays) > 1  # jittered


def test_java_retries_make_five_attempts_then_give_up() -> None:
    slept: list[float] = []
    succeeds_last = FlakyCommit(conflicts=4)
    attempts = bench.JavaRetries().run(succeeds_last, random.Random(1), sleep=slept.append)
    assert attempts == 5
    assert [round(s, 1) for s in slept] == [0.1, 0.2, 0.4, 0.8]

    never = FlakyCommit(conflicts=5)
    with pytest.raises(CommitFailedException):
        bench.JavaRetries().run(never, random.Random(1), sleep=slept.append)
    assert never.calls == 5


def test_java_retries_only_retry_conflicts() -> None:
    calls = []

    def broken() -> None:
        calls.append(1)
        raise ValueError("not a conflict")

    with pytest.raises(ValueError):
        bench.JavaRetries().run(broken, random.Random(1), sleep=lambda _: None)
    assert len(calls) == 1


def test_java_retries_stop_when_the_time_budget_is_spent_after_the_second_attempt() -> None:
    now = [0.0]

    def clock() -> float:
        now[0] += 1000.0  # every look at the clock: 1000 s later
        return now[0]

    flaky = FlakyCommit(conflicts=10)
    with pytest.raises(CommitFailedException):
        bench.JavaRetries().run(flaky, random.Random(1), sleep=lambda _: None, clock=clock)
    assert flaky.calls == 2  # the first failure always retries, as in Java's Tasks


def test_rows_parse_and_refuse_nonsense() -> None:
    assert bench.parse_rows("5x20, 30x2000") == [(5, 20), (30, 2000)]
    for bad in ("0x5", "10x5", "5by20"):
        with pytest.raises(argparse.ArgumentTypeError):
            bench.parse_rows(bad)
    assert bench.parse_args(["--quick"]).rows == [(5, 20)]


@pytest.fixture
def table(tmp_path: Path):  # type: ignore[no-untyped-def]
    catalog = SqlCatalog("bench", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("demo")
    created = catalog.create_table("demo.t", bench.SCHEMA)
    for row_id in (1, 2, 3):
        created.append(bench.one_row(row_id))
    return created


def test_verification_accepts_exactly_the_acknowledged_rows(table) -> None:  # type: ignore[no-untyped-def]
    assert bench.verify(table, {1, 2, 3}) == []


def test_verification_reports_lost_and_unacknowledged_rows(table) -> None:  # type: ignore[no-untyped-def]
    problems = bench.verify(table, {1, 2, 3, 4})
    assert "1 acknowledged appends missing" in problems
    assert "main has 3 snapshots for 4 appends" in problems
    assert "1 rows from appends reported failed" in bench.verify(table, {1, 2})


def test_verification_reports_duplicated_rows(table) -> None:  # type: ignore[no-untyped-def]
    table.append(pa.concat_tables([bench.one_row(3)]))
    problems = bench.verify(table, {1, 2, 3})
    assert "1 duplicated rows" in problems
    assert "main has 4 snapshots for 3 appends" in problems
