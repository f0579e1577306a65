"""Which content files a row filter may match, or must match entirely, from what manifests say
(partition tuples and column metrics), the way Iceberg plans deletes and checks conflicts.

A filter is bound and type-checked when the operation is parsed (``bind_filter``); should an
evaluator still fail on some file or manifest, the operation is refused (400), never a 500.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

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
    _StrictMetricsEvaluator,
    bind,
    expression_evaluator,
    inclusive_projection,
    manifest_evaluator,
    strict_projection,
)
from pyiceberg.manifest import DataFile, DataFileContent, ManifestFile
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.types import StringType

from proxy.commits.intent import UnverifiableCommit
from proxy.commits.operations.specs import binding_schema

_Projection = Callable[..., Callable[[BooleanExpression], BooleanExpression]]
T = TypeVar("T")


def bind_filter(expression: BooleanExpression, schema: Schema, case_sensitive: bool,
                what: str) -> BooleanExpression:
    """``expression`` bound to ``schema``; refused (400) unless every predicate applies to its
    column's type (``starts-with`` to strings...). ``what`` names the filter in errors."""
    try:
        bound = bind(schema, expression, case_sensitive)
    except Exception as exc:  # unknown column, a literal of another type, ...
        raise UnverifiableCommit(f"{what} is not an Iceberg expression over the table's "
                                 "columns") from exc
    pending = [bound]
    while pending:
        node = pending.pop()
        if isinstance(node, And | Or):
            pending.extend((node.left, node.right))
        elif isinstance(node, Not):
            pending.append(node.child)
        elif isinstance(node, BoundStartsWith | BoundNotStartsWith) and not (
                isinstance(node.term.ref().field.field_type, StringType)
                and isinstance(node.literal.value, str)):
            raise UnverifiableCommit(f"{what}: starts-with applies to string columns only")
    return bound


def _evaluated(evaluate: Callable[[], T]) -> T:
    try:
        return evaluate()
    except UnverifiableCommit:
        raise
    except Exception as exc:  # an evaluator failing on some input: refused, not a 500
        raise UnverifiableCommit("the operation's filter could not be evaluated against the "
                                 "table's files") from exc


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
        return _evaluated(lambda: self._partition(self._inclusive, inclusive_projection,
                                                  data_file)
                          and (data_file.content != DataFileContent.DATA
                               or bool(self._might(data_file))))

    def must_match(self, data_file: DataFile) -> bool:
        """True only if every row of ``data_file`` matches (by partition or metrics)."""
        if self.matches_everything:
            return True
        return _evaluated(lambda: self._partition(self._strict, strict_projection, data_file)
                          or bool(self._must(data_file)))

    def might_match_manifest(self, manifest: ManifestFile) -> bool:
        """False only if no file of ``manifest`` can match (by its partition summaries)."""
        if self.matches_everything:
            return True

        def evaluate() -> bool:
            spec = self._metadata.specs()[manifest.partition_spec_id]
            projected = inclusive_projection(self._schema, spec, self._case_sensitive)(
                self.expression)
            typing = binding_schema(self._metadata, spec) or self._schema
            return bool(manifest_evaluator(spec, typing, projected,
                                           self._case_sensitive)(manifest))
        return _evaluated(evaluate)

    def _partition(self, cache: dict[int, Callable[[DataFile], bool]], project: _Projection,
                   data_file: DataFile) -> bool:
        spec_id = data_file.spec_id
        evaluate = cache.get(spec_id)
        if evaluate is None:
            spec = self._metadata.specs()[spec_id]
            projected = project(self._schema, spec, self._case_sensitive)(self.expression)
            typing = binding_schema(self._metadata, spec) or self._schema
            partition_schema = Schema(*spec.partition_type(typing).fields)
            evaluator = expression_evaluator(partition_schema, projected, self._case_sensitive)
            evaluate = cache[spec_id] = lambda f: bool(evaluator(f.partition))
        return evaluate(data_file)
