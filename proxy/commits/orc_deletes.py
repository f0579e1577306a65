"""ORC position delete files: the metrics their entries declare, proven by their values.

Java declares ``file_path`` (and ``pos``) bounds for every position delete file it writes, in
every format. A Parquet file's footer proves them (``footstats``); ORC has no footer icegov
reads, so an ORC position delete file whose entry declares more than value counts has its two
columns read — by name: a position delete file's columns are fixed, ``file_path`` and ``pos`` —
with its whole size charged to the commit's footer budget, and every claim is proven from the
values as the row checks prove a file they read (``rowstats.metrics_problem``: counts equal,
bounds enclosing). Spark's merge-on-read DELETE on an ORC table lands this way. Other ORC files
and Avro files may still declare value counts only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO

import pyarrow as pa
import pyarrow.orc as orc
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from proxy.commits.confine import shown_path
from proxy.commits.intent import UnverifiableCommit
from proxy.commits.rowfiles import FileStats
from proxy.commits.rowstats import metrics_problem

FILE_PATH_ID, POS_ID = 2147483546, 2147483545
POSITION_SCHEMA = Schema(NestedField(FILE_PATH_ID, "file_path", StringType(), required=True),
                         NestedField(POS_ID, "pos", LongType(), required=True))


def orc_position_deletes(stream: IO[bytes], size: int, data_file: DataFile,
                         charge: Callable[[int], None]) -> pa.Table | None:
    """An ORC position delete file's ``file_path`` and ``pos`` values, when its entry declares
    metrics beyond value counts (None otherwise: nothing to prove)."""
    orc_deletes = (data_file.file_format == FileFormat.ORC
                   and data_file.content == DataFileContent.POSITION_DELETES)
    if not orc_deletes or not _claims_bounds(data_file):
        return None
    charge(size)
    try:
        stream.seek(0)
        rows = orc.ORCFile(stream).read(columns=["file_path", "pos"])
        return rows.cast(pa.schema([("file_path", pa.string()), ("pos", pa.int64())]))
    except Exception as exc:  # not ORC, no such columns, another type: refused alike
        raise UnverifiableCommit(f"position delete file {shown_path(data_file.file_path)} "
                                 "could not be read as ORC position deletes") from exc


def _claims_bounds(data_file: DataFile) -> bool:
    return bool(data_file.lower_bounds or data_file.upper_bounds
                or data_file.null_value_counts or data_file.nan_value_counts)


def position_metrics_problem(data_file: DataFile, rows: pa.Table) -> str | None:
    """Why the metrics the entry declares do not describe ``rows``; None if they do."""
    stats = FileStats(dict(data_file.value_counts or {}), dict(data_file.null_value_counts or {}),
                      dict(data_file.nan_value_counts or {}), dict(data_file.lower_bounds or {}),
                      dict(data_file.upper_bounds or {}))
    return metrics_problem(stats, POSITION_SCHEMA, rows)
