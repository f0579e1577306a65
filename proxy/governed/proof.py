"""What a governed build may conclude about a data file without reading its rows.

``FileProver.verdict`` says of one live data file, under a governed view's row filter:

* ``NONE``: no row can be permitted (its partition, or its bounds, exclude the filter) — the
  governed snapshot leaves it out;
* ``ALL``: every row is permitted — *proven* by its partition values (the filter's strict
  projection onto the file's spec) or by bounds read from the file's own Parquet footer (never
  the manifest's claims, which a writer chose): the file may be referenced in place;
* ``SOME``: anything else — its permitted rows are copied into a governed file.

Without a row filter every file is ``ALL``. Partition and footer bounds are sound bounds (a
truncated lower bound is a prefix of the minimum, a truncated upper bound lies above the
maximum), so a strict verdict on them holds for every row.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

import pyarrow.parquet as pq
from pyiceberg.expressions import BooleanExpression
from pyiceberg.expressions.visitors import (
    _InclusiveMetricsEvaluator,
    _StrictMetricsEvaluator,
    expression_evaluator,
    inclusive_projection,
    strict_projection,
)
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import (
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
)
from pyiceberg.manifest import DataFile, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Record

_FULL_METRICS = {"write.metadata.metrics.default": "full"}


class Verdict(Enum):
    NONE = "none"
    ALL = "all"
    SOME = "some"


class FileProver:
    """Verdicts on the data files of one table under one row filter (None: every row)."""

    def __init__(self, metadata: TableMetadata, row_filter: BooleanExpression | None,
                 io: FileIO) -> None:
        self._schema = metadata.schema()
        self._filter = row_filter
        self._io = io
        self._specs = metadata.specs()
        self._partition: dict[int, tuple[Callable[[Record], bool], Callable[[Record], bool]]] = {}
        if row_filter is not None:
            self._may = _InclusiveMetricsEvaluator(self._schema, row_filter)
            self._must = _StrictMetricsEvaluator(self._schema, row_filter)

    def verdict(self, data_file: DataFile) -> Verdict:
        """What ``data_file`` holds under the row filter."""
        if self._filter is None:
            return Verdict.ALL
        evaluators = self._partition_evaluators(data_file.spec_id)
        if evaluators is not None:
            may, must = evaluators
            if not may(data_file.partition):
                return Verdict.NONE
            if must(data_file.partition):
                return Verdict.ALL
        if not self._may.eval(data_file):
            return Verdict.NONE
        return Verdict.ALL if self._footer_proves(data_file) else Verdict.SOME

    def _partition_evaluators(
            self, spec_id: int) -> tuple[Callable[[Record], bool], Callable[[Record], bool]] | None:
        if spec_id in self._partition:
            return self._partition[spec_id]
        spec = self._specs.get(spec_id)
        if spec is None or spec.is_unpartitioned() or self._filter is None:
            return None
        struct = spec.partition_type(self._schema)
        partition_schema = Schema(*struct.fields)
        may = expression_evaluator(
            partition_schema, inclusive_projection(self._schema, spec)(self._filter), True)
        must = expression_evaluator(
            partition_schema, strict_projection(self._schema, spec)(self._filter), True)
        self._partition[spec_id] = (may, must)
        return may, must

    def _footer_proves(self, data_file: DataFile) -> bool:
        """True when the bounds the file's own footer states prove every row permitted."""
        if data_file.file_format != FileFormat.PARQUET:
            return False
        try:
            with self._io.new_input(data_file.file_path).open() as stream:
                footer = pq.ParquetFile(stream).metadata
            mapping = _path_ids(footer)
            plan = {i: c for i, c in compute_statistics_plan(self._schema, _FULL_METRICS).items()
                    if i in mapping.values()}
            mapping = {p: i for p, i in mapping.items() if i in plan}
            stats = data_file_statistics_from_parquet_metadata(footer, plan, mapping)
        except Exception:
            return False
        if footer.num_rows != data_file.record_count:
            return False
        facts = stats.to_serialized_dict()
        facts["record_count"] = footer.num_rows
        proven = DataFile.from_args(
            file_path=data_file.file_path, file_format=FileFormat.PARQUET,
            file_size_in_bytes=data_file.file_size_in_bytes, **facts)
        return bool(self._must.eval(proven))


def _path_ids(footer: pq.FileMetaData) -> dict[str, int]:
    """Top-level primitive Parquet columns of a footer, by path, with the field ids the file
    itself declares (a column without one is not used)."""
    found: dict[str, int] = {}
    schema = footer.schema
    for index in range(len(schema)):
        column = schema.column(index)
        if "." in column.path:
            continue
        field = schema.to_arrow_schema().field(column.path)
        raw = (field.metadata or {}).get(b"PARQUET:field_id")
        if raw is not None and raw.isdigit():
            found[column.path] = int(raw)
    return found
