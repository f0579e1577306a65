"""Concurrent appenders for the concurrency tests: a one-column table of ids, each writer's
rows, and running writers together."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))
NO_CLIENT_RETRIES = {"commit.retry.num-retries": "0", "format-version": "2"}
"""Table properties that turn the client's own commit retries off: every append that lands
landed because icegov rebased it."""


def id_rows(values: list[int]) -> pa.Table:
    """Rows of the ``id`` column."""
    return pa.table({"id": pa.array(values, pa.int64())})


def run_together(count: int, job: Callable[[int], None]) -> list[BaseException]:
    """Run ``job(0..count-1)`` on ``count`` threads; the failures, if any."""
    with ThreadPoolExecutor(max_workers=count) as pool:
        futures = [pool.submit(job, i) for i in range(count)]
        outcomes = [f.exception() for f in futures]
    return [failure for failure in outcomes if failure is not None]


def table_ids(table: Table) -> list[int]:
    """Every id in the table, sorted."""
    return sorted(table.scan().to_arrow()["id"].to_pylist())


def assert_one_line_of_history(table: Table, expected_snapshots: int) -> None:
    """Unique snapshot ids, each one's parent the one before: no append lost or duplicated."""
    snapshots = table.snapshots()
    snapshot_ids = [s.snapshot_id for s in snapshots]
    assert len(snapshot_ids) == len(set(snapshot_ids)) == expected_snapshots, snapshot_ids
    by_id = {s.snapshot_id: s for s in snapshots}
    chain = []
    current = table.current_snapshot()
    while current is not None:
        chain.append(current.snapshot_id)
        current = by_id.get(current.parent_snapshot_id)  # type: ignore[arg-type]
    assert sorted(chain) == sorted(snapshot_ids), "the history is not one line"
    sequence_numbers = [by_id[i].sequence_number for i in reversed(chain)]
    assert sequence_numbers == sorted(set(sequence_numbers)), sequence_numbers
