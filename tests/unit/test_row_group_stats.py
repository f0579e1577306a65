"""The files a REWRITE or a copy-on-write DELETE adds must not hide rows behind their
row-group statistics.

Java (``ParquetMetricsRowGroupFilter``) and pyarrow skip a row group whose statistics exclude
a filter's value. A compaction holding exactly the removed rows, whose footer claims ``id`` at
most 3 while it holds ``BIG``, reads the same in full (what the row checks compared) and loses
the row under ``WHERE id = BIG``: it is no REWRITE (and no DELETE), however its rows compare.
"""

from __future__ import annotations

import itertools
import struct
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.manifest import DataFile, ManifestEntryStatus

from proxy.commits import classify_commit
from proxy.commits.limits import CommitLimits
from proxy.governance import Action
from tests.support.row_files import RowTable

ADDED, DELETED = ManifestEntryStatus.ADDED, ManifestEntryStatus.DELETED
SCHEMA = pa.schema([pa.field("id", pa.int64(), False), ("name", pa.string())])
BIG = 987_654_321
_ids = itertools.count(7300)


def rows(*ids: int) -> pa.Table:
    return pa.table({"id": list(ids), "name": [f"n{i}" for i in ids]}, schema=SCHEMA)


@pytest.fixture()
def rt(tmp_path: Path) -> RowTable:
    return RowTable.create(tmp_path, SCHEMA, [rows(1, 2, 3, BIG)])


def lying(rt: RowTable, table: pa.Table) -> DataFile:
    """A data file of ``table`` whose footer says ``id``'s maximum is 3 (it holds ``BIG``)."""
    written = rt.write_data("lying", table)
    local = written.file_path.removeprefix("file://")
    raw = bytearray(Path(local).read_bytes())
    length = int.from_bytes(raw[-8:-4], "little")
    start = len(raw) - 8 - length
    footer = bytes(raw[start:-8]).replace(struct.pack("<q", BIG), struct.pack("<q", 3))
    assert footer != bytes(raw[start:-8])
    raw[start:-8] = footer
    Path(local).write_bytes(bytes(raw))
    stats = pq.ParquetFile(local).metadata.row_group(0).column(0).statistics
    assert stats.max == 3 and pq.read_table(local)["id"].to_pylist()[-1] == BIG
    return written


def classify(rt: RowTable, added: DataFile, operation: str) -> Any:
    [(f1, seq)] = rt.data_files()
    sid = next(_ids)
    manifest = rt.crafter.manifest(sid, [(DELETED, f1, seq), (ADDED, added, 0)])
    body = rt.crafter.body(rt.crafter.snapshot(sid, [manifest], operation))
    return classify_commit(body, rt.table.metadata, rt.table.io, limits=CommitLimits())


def test_a_compaction_whose_row_groups_hide_a_row_is_no_rewrite(rt: RowTable) -> None:
    intent = classify(rt, lying(rt, rows(1, 2, 3, BIG)), "replace")
    assert intent.actions == {Action.UPDATE, Action.REWRITE}, intent.evidence.row_checks
    assert "bounds that do not enclose its values" in " ".join(intent.evidence.row_checks)
    honest = classify(rt, rt.write_data("honest", rows(BIG, 3, 2, 1)), "replace")
    assert honest.actions == {Action.REWRITE}, honest.evidence.row_checks


def test_a_copy_on_write_delete_whose_row_groups_hide_a_row_is_no_delete(rt: RowTable) -> None:
    intent = classify(rt, lying(rt, rows(2, 3, BIG)), "overwrite")
    assert intent.actions == {Action.UPDATE}, intent.evidence.row_checks
