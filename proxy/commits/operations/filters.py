"""Which content files a row filter may match, or must match entirely, from what manifests say
(partition tuples and column metrics), the way Iceberg plans deletes and checks conflicts."""

from __future__ import annotations

from collections.abc import Callable

from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.expressions.visitors import (
    _InclusiveMetricsEvaluator,
    _StrictMetricsEvaluator,
    expression_evaluator,
    inclusive_projection,
    strict_projection,
)
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata

_Projection = Callable[..., Callable[[BooleanExpression], BooleanExpression]]


class FileFilter:
    """A row filter evaluated against content files' manifest information."""

    def __init__(self, expression: BooleanExpression, metadata: TableMetadata,
                 case_sensitive: bool = True) -> None:
        self.expression = expression
        self.matches_everything = isinstance(expression, AlwaysTrue)
        self._metadata = metadata
        self._schema = metadata.schema()
        self._case_sensitive = case_sensitive
        self._inclusive: dict[int, Callable[[DataFile], bool]] = {}
        self._strict: dict[int, Callable[[DataFile], bool]] = {}
        self._might = _InclusiveMetricsEvaluator(self._schema, expression, case_sensitive).eval
        self._must = _StrictMetricsEvaluator(self._schema, expression, case_sensitive).eval

    def might_match(self, data_file: DataFile) -> bool:
        """False only if no row of ``data_file`` can match (by partition or metrics). Metrics
        of delete files describe other columns, so only their partition is looked at."""
        if self.matches_everything:
            return True
        if not self._partition(self._inclusive, inclusive_projection, data_file):
            return False
        return data_file.content != DataFileContent.DATA or bool(self._might(data_file))

    def must_match(self, data_file: DataFile) -> bool:
        """True only if every row of ``data_file`` matches (by partition or metrics)."""
        if self.matches_everything:
            return True
        return self._partition(self._strict, strict_projection, data_file) \
            or bool(self._must(data_file))

    def _partition(self, cache: dict[int, Callable[[DataFile], bool]], project: _Projection,
                   data_file: DataFile) -> bool:
        spec_id = data_file.spec_id
        evaluate = cache.get(spec_id)
        if evaluate is None:
            spec = self._metadata.specs()[spec_id]
            projected = project(self._schema, spec, self._case_sensitive)(self.expression)
            partition_schema = Schema(*spec.partition_type(self._schema).fields)
            evaluator = expression_evaluator(partition_schema, projected, self._case_sensitive)
            evaluate = cache[spec_id] = lambda f: bool(evaluator(f.partition))
        return evaluate(data_file)
