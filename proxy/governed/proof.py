"""What a governed build may conclude about a data file without reading its rows.

``FileProver.verdict`` says of one live data file, under a governed view's row filter:

* ``NONE``: no row can be permitted (its partition, or its bounds, exclude the filter) — the
  governed snapshot leaves it out;
* ``ALL``: every row is permitted — its partition values (the filter's strict projection onto
  the file's spec) or the bounds its own Parquet footer states say so, *and* the file's own
  values of the filter's columns (read by field id) are all permitted: the file may be
  referenced in place;
* ``SOME``: anything else — its permitted rows are copied into a governed file.

Without a row filter every file is ``ALL``. Partition values and footer statistics are what a
writer chose (an INSERT is not checked against its partition values, and a footer's statistics
are not checked against its pages), so they only pick the candidates: the values decide. A file
whose filter columns are missing, nested or lack field ids is ``SOME`` (the copy reads it as
readers do). Copies check the partition values (``copies``), so a file whose entry lies fails
its build instead.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

import pyarrow.parquet as pq
from pyiceberg.expressions import BooleanExpression
from pyiceberg.expressions.visitors import (
    _InclusiveMetricsEvaluator,
    _StrictMetricsEvaluator,
    bind,
    expression_evaluator,
    extract_field_ids,
    inclusive_projection,
    strict_projection,
)
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import (
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    expression_to_pyarrow,
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
        candidate = False
        if evaluators is not None:
            may, must = evaluators
            if not may(data_file.partition):
                return Verdict.NONE
            candidate = must(data_file.partition)
        if not candidate and not self._may.eval(data_file):
            return Verdict.NONE
        candidate = candidate or self._footer_proves(data_file)
        return Verdict.ALL if candidate and self._values_prove(data_file) else Verdict.SOME

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


    def _values_prove(self, data_file: DataFile) -> bool:
        """True when every row of the file, as its own columns (by field id) hold the
        filter's fields, is permitted (NULL is not)."""
        if data_file.file_format != FileFormat.PARQUET or self._filter is None:
            return False
        try:
            bound = bind(self._schema, self._filter, case_sensitive=True)
            wanted = extract_field_ids(bound)
            with self._io.new_input(data_file.file_path).open() as stream:
                parquet = pq.ParquetFile(stream)
                by_id = {i: p for p, i in _path_ids(parquet.metadata).items()}
                if not wanted <= by_id.keys():
                    return False
                values = parquet.read(columns=[by_id[i] for i in sorted(wanted)])
            values = values.rename_columns(
                [self._schema.find_column_name(i) or "" for i in sorted(wanted)])
            return bool(values.num_rows == data_file.record_count
                        == values.filter(expression_to_pyarrow(bound, self._schema)).num_rows)
        except Exception:
            return False


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
