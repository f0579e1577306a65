"""Snapshot timestamps and sequence numbers in order: refusals and which status they get."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table.metadata import TableMetadata

from proxy.commits import UnverifiableCommit
from proxy.commits.snapshots import ClaimedSnapshot
from proxy.commits.timeline import check_snapshot_order
from proxy.errors import CommitFailed


@pytest.fixture()
def base(tmp_path: Path) -> TableMetadata:
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=tmp_path.as_uri())
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", pa.schema([("id", pa.int64())]))
    for _ in range(2):
        table.append(pa.table({"id": pa.array([1], pa.int64())}))
    return catalog.load_table("db.t").metadata


def body(*snapshots: dict[str, int]) -> list[ClaimedSnapshot]:
    """The commit's new snapshots, in commit order."""
    return [ClaimedSnapshot(snapshot_id=i, parent_id=None, manifest_list="unused",
                            timestamp_ms=s["timestamp-ms"], sequence_number=s["sequence-number"])
            for i, s in enumerate(snapshots)]


def test_a_stale_client_gets_a_conflict_even_with_an_old_timestamp(base: TableMetadata) -> None:
    last_log = base.snapshot_log[-1].timestamp_ms
    stale = {"sequence-number": base.last_sequence_number, "timestamp-ms": last_log - 120_000}
    with pytest.raises(CommitFailed):
        check_snapshot_order(body(stale), base, last_log)


def test_fresh_snapshots_out_of_time_order_are_refused(base: TableMetadata) -> None:
    now = base.snapshot_log[-1].timestamp_ms + 1_000
    sequence = base.last_sequence_number
    ok = {"sequence-number": sequence + 1, "timestamp-ms": now}
    check_snapshot_order(body(ok), base, now)
    for snapshots in (
            [{"sequence-number": sequence + 1, "timestamp-ms": now - 120_000}],
            [{"sequence-number": sequence + 1, "timestamp-ms": now + 120_000}],
            [{"sequence-number": sequence + 1, "timestamp-ms": now + 50_000},
             {"sequence-number": sequence + 2, "timestamp-ms": now - 30_000}]):
        with pytest.raises(UnverifiableCommit, match="out of order"):
            check_snapshot_order(body(*snapshots), base, now)
    with pytest.raises(CommitFailed):  # the second does not rise above the first
        check_snapshot_order(body(ok, {**ok, "timestamp-ms": now + 1}), base, now)
