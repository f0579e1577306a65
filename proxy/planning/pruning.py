"""Which manifests and files can match an expression, and the residual a task carries.

Built on pyiceberg's own evaluators: partition summaries (``manifest_evaluator``), inclusive
partition projection evaluated on each file's partition (``inclusive_projection`` +
``expression_evaluator``), column metrics (``_InclusiveMetricsEvaluator``) and residuals
(``residual_evaluator_of``), exactly as ``DataScan.plan_files`` uses them; but verdicts and
residuals are computed once per partition rather than once per file, which is where most of
pyiceberg's planning time goes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from pyiceberg.exceptions import ResolveError
from pyiceberg.expressions import (
    AlwaysTrue,
    And,
    BooleanExpression,
    BoundNotStartsWith,
    BoundStartsWith,
    Not,
    Or,
)
from pyiceberg.expressions.visitors import (
    _InclusiveMetricsEvaluator,
    bind,
    expression_evaluator,
    inclusive_projection,
    manifest_evaluator,
    residual_evaluator_of,
)
from pyiceberg.manifest import DataFile, ManifestFile
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record
from pyiceberg.types import StringType

from proxy.errors import BadRequest, Forbidden
from proxy.planning.deletes import PartitionKey, partition_key

_ALWAYS_TRUE = AlwaysTrue()


def check_filters(schema: Schema, scan_filter: BooleanExpression,
                  row_filter: BooleanExpression, case_sensitive: bool) -> None:
    """``BadRequest`` when the scan filter does not bind to ``schema`` (an unknown column, a
    literal of the wrong type); ``Forbidden`` when the principal's row filter does not (rows
    it may read cannot be told apart, so none are handed out)."""
    try:
        bound = bind(schema, scan_filter, case_sensitive)
    except (ValueError, TypeError, ArithmeticError, ResolveError) as error:
        raise BadRequest(f"the filter does not apply to the table's schema: {error}") from None
    _check_prefix_predicates(bound)
    try:
        bind(schema, row_filter, True)  # policy names columns exactly, whatever the scan says
    except (ValueError, TypeError, ArithmeticError, ResolveError):
        raise Forbidden("the row filter that policy sets on this table names columns or "
                        "values the table's schema does not have") from None


def _check_prefix_predicates(bound: BooleanExpression) -> None:
    """``BadRequest`` for ``starts-with`` / ``not-starts-with`` on a column that is not a
    string (pyiceberg's evaluators would fail on its values)."""
    if isinstance(bound, And | Or):
        _check_prefix_predicates(bound.left)
        _check_prefix_predicates(bound.right)
    elif isinstance(bound, Not):
        _check_prefix_predicates(bound.child)
    elif isinstance(bound, BoundStartsWith | BoundNotStartsWith):
        field = bound.term.ref().field
        if not isinstance(field.field_type, StringType):
            raise BadRequest(f"starts-with applies to string columns; {field.name!r} is "
                             f"{field.field_type}")


class AllOf:
    """Prunes with several ``Pruner``s at once: a manifest or file is kept only if every one
    keeps it (the scan filter, bound as the client asked, and the row filter, bound exactly)."""

    def __init__(self, *pruners: Pruner) -> None:
        self._pruners = [p for p in pruners if not p.matches_all] or list(pruners[:1])
        self.matches_all = all(p.matches_all for p in pruners)

    def manifest_may_match(self, manifest: ManifestFile) -> bool:
        return all(p.manifest_may_match(manifest) for p in self._pruners)

    def keeps(self, data_file: DataFile) -> bool:
        return all(p.keeps(data_file) for p in self._pruners)

    def partition_may_match(self, data_file: DataFile) -> bool:
        return all(p.partition_may_match(data_file) for p in self._pruners)


class Pruner:
    """Decides which manifests and files may hold rows matching ``expression`` (unbound).

    ``keeps`` and ``partition_may_match`` may be called from several threads at once;
    ``manifest_may_match`` from one thread only (pyiceberg's manifest evaluator keeps state).
    """

    def __init__(self, specs: Mapping[int, PartitionSpec], schema: Schema,
                 expression: BooleanExpression, case_sensitive: bool) -> None:
        self._specs = specs
        self._schema = schema
        self._expression = expression
        self._case_sensitive = case_sensitive
        self.matches_all = expression == _ALWAYS_TRUE
        self._metrics = _InclusiveMetricsEvaluator(schema, expression, case_sensitive).eval
        self._manifests: dict[int, Callable[[ManifestFile], bool]] = {}
        self._partitions: dict[int, Callable[[Record], bool]] = {}
        self._verdicts: dict[PartitionKey, bool] = {}

    def manifest_may_match(self, manifest: ManifestFile) -> bool:
        """False when the manifest's partition summaries rule out every row."""
        if self.matches_all:
            return True
        evaluate = self._manifests.get(manifest.partition_spec_id)
        if evaluate is None:
            evaluate = self._manifests[manifest.partition_spec_id] = self._manifest_evaluator(
                manifest.partition_spec_id)
        return evaluate(manifest)

    def keeps(self, data_file: DataFile) -> bool:
        """False when the file's partition or column metrics rule out every row (empty files
        are never kept, as in Iceberg)."""
        if self.matches_all:
            return data_file.record_count != 0
        return self.partition_may_match(data_file) and self._metrics(data_file)

    def rejection(self, data_file: DataFile) -> str | None:
        """Why ``keeps`` drops the file: ``"partitions"`` (its partition) or ``"metrics"`` (its
        column metrics, an empty file); None when it is kept."""
        if self.matches_all:
            return None if data_file.record_count != 0 else "metrics"
        if not self.partition_may_match(data_file):
            return "partitions"
        return None if self._metrics(data_file) else "metrics"

    def partition_may_match(self, data_file: DataFile) -> bool:
        """The inclusive projection of the expression, evaluated on the file's partition."""
        key = partition_key(data_file)
        verdict = self._verdicts.get(key)
        if verdict is None:
            evaluate = self._partitions.get(key[0])
            if evaluate is None:
                evaluate = self._partitions[key[0]] = self._partition_evaluator(key[0])
            verdict = self._verdicts[key] = evaluate(data_file.partition)
        return verdict

    def _manifest_evaluator(self, spec_id: int) -> Callable[[ManifestFile], bool]:
        spec = self._specs.get(spec_id)
        if spec is None:
            return lambda _: True
        try:
            return manifest_evaluator(spec, self._schema, self._projected(spec),
                                      self._case_sensitive)
        except (ValueError, TypeError):  # a spec whose source columns this schema lacks
            return lambda _: True

    def _partition_evaluator(self, spec_id: int) -> Callable[[Record], bool]:
        spec = self._specs.get(spec_id)
        if spec is None:
            return lambda _: True
        try:
            partition_schema = Schema(*spec.partition_type(self._schema).fields)
            return expression_evaluator(partition_schema, self._projected(spec),
                                        self._case_sensitive)
        except (ValueError, TypeError):  # a spec whose source columns this schema lacks
            return lambda _: True

    def _projected(self, spec: PartitionSpec) -> BooleanExpression:
        """The expression's inclusive projection on ``spec``'s partition values."""
        return inclusive_projection(self._schema, spec, self._case_sensitive)(self._expression)


class Residuals:
    """The residual of ``expression`` for each file's partition (what is left to check row
    by row once the partition is known), computed once per partition; thread-safe."""

    def __init__(self, specs: Mapping[int, PartitionSpec], schema: Schema,
                 expression: BooleanExpression, case_sensitive: bool) -> None:
        self._specs = specs
        self._schema = schema
        self._expression = expression
        self._case_sensitive = case_sensitive
        self._trivial = expression == _ALWAYS_TRUE
        self._known: dict[PartitionKey, BooleanExpression] = {}
        self._lock = threading.Lock()

    def of(self, data_file: DataFile) -> BooleanExpression:
        """The residual for ``data_file``'s partition."""
        if self._trivial:
            return _ALWAYS_TRUE
        key = partition_key(data_file)
        found = self._known.get(key)
        if found is None:
            with self._lock:  # once per partition, however many threads ask
                found = self._known[key] = self._residual(key[0], data_file.partition)
        return found

    def _residual(self, spec_id: int, partition: Record) -> BooleanExpression:
        spec = self._specs.get(spec_id)
        if spec is None:
            return self._expression
        try:
            return residual_evaluator_of(spec, self._expression, self._case_sensitive,
                                         self._schema).residual_for(partition)
        except (ValueError, TypeError):  # a spec whose source columns this schema lacks
            return self._expression
