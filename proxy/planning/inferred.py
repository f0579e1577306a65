"""Predicates inferred from a table's column dependencies, which only ever prune.

A dependency ``source=dependent:transform`` (``proxy.commits.dependencies``) says every row's
``dependent`` is ``transform(source)``. A scan filter on ``source`` then implies a filter on
``dependent``: Iceberg's inclusive projection of the predicate through the transform
(pyiceberg's ``Transform.project``, the one partition pruning uses), so ``=`` and ``IN``
project through every transform, ranges through the order-preserving ones (``identity``,
``truncate``, ``year`` / ``month`` / ``day`` / ``hour``; ``bucket`` projects only equality),
``starts-with`` through ``truncate`` of strings. Within ``AND`` each side infers what it can;
an ``OR`` infers only when both sides do.

The inferred filter prunes data files (partition values and column metrics of the dependent
column) next to the scan filter, and only files added by snapshots icegov verified
(``verified_snapshots``); it never enters a residual, so what clients evaluate row by row is
their own filter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyiceberg.expressions import (
    AlwaysTrue,
    And,
    BooleanExpression,
    BoundPredicate,
    Or,
)
from pyiceberg.expressions.visitors import bind, rewrite_not
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata

from proxy.commits.dependencies import (
    Dependency,
    digest,
    table_dependencies,
    verified_snapshots,
)

_TRUE = AlwaysTrue()


@dataclass(frozen=True)
class Inference:
    """What a scan may infer: the filter on dependent columns, and the snapshots whose added
    files it may prune."""

    filter: BooleanExpression
    verified: frozenset[int]


def inference(metadata: TableMetadata, schema: Schema, expression: BooleanExpression,
              case_sensitive: bool) -> Inference | None:
    """The inference for a scan of ``metadata`` bound to ``schema`` (the reader's view) with
    filter ``expression``; None when there is nothing to infer or no verified file to prune."""
    dependencies = table_dependencies(metadata)
    usable = visible_dependencies(dependencies, schema)
    if not usable or expression == _TRUE:
        return None
    inferred = inferred_filter(expression, usable, schema, case_sensitive)
    if inferred == _TRUE:
        return None
    verified = verified_snapshots(metadata, dependencies)
    return Inference(inferred, verified) if verified else None


def dependencies_key(metadata: TableMetadata) -> str:
    """What a cached plan's inference depended on (the table's dependencies' digest)."""
    return digest(table_dependencies(metadata))


def visible_dependencies(dependencies: Sequence[Dependency], schema: Schema
                         ) -> tuple[Dependency, ...]:
    """The dependencies whose both columns ``schema`` has as top-level columns of the same type
    (a column hidden from the reader is left out of it, and so is any inference on it),
    named as ``schema`` names them."""
    by_id = {f.field_id: f for f in schema.fields}
    usable = []
    for d in dependencies:
        source, dependent = by_id.get(d.source.field_id), by_id.get(d.dependent.field_id)
        if source is not None and dependent is not None \
                and source.field_type == d.source.field_type \
                and dependent.field_type == d.dependent.field_type:
            usable.append(Dependency(source, dependent, d.transform))
    return tuple(usable)


def inferred_filter(expression: BooleanExpression, dependencies: Sequence[Dependency],
                    schema: Schema, case_sensitive: bool) -> BooleanExpression:
    """The predicates on dependent columns every row matching ``expression`` satisfies given
    ``dependencies`` (unbound, named as in ``schema``); ``AlwaysTrue`` when none."""
    try:
        bound = bind(schema, rewrite_not(expression), case_sensitive)
    except (ValueError, TypeError, ArithmeticError):
        return _TRUE
    return _infer(bound, dependencies)


def _infer(bound: BooleanExpression, dependencies: Sequence[Dependency]) -> BooleanExpression:
    if isinstance(bound, And):
        return _and(_infer(bound.left, dependencies), _infer(bound.right, dependencies))
    if isinstance(bound, Or):
        left, right = _infer(bound.left, dependencies), _infer(bound.right, dependencies)
        return _TRUE if _TRUE in (left, right) else Or(left, right)
    if isinstance(bound, BoundPredicate):
        return _project(bound, dependencies)
    return _TRUE  # AlwaysTrue, AlwaysFalse (pruned by the filter itself), anything else


def _project(predicate: BoundPredicate, dependencies: Sequence[Dependency]
             ) -> BooleanExpression:
    field_id = predicate.term.ref().field.field_id
    inferred: BooleanExpression = _TRUE
    for dependency in dependencies:
        if dependency.source.field_id != field_id:
            continue
        try:
            projected = dependency.transform.project(dependency.dependent.name, predicate)
        except (ValueError, TypeError, ArithmeticError, NotImplementedError):
            projected = None
        if projected is not None:
            inferred = _and(inferred, projected)
    return inferred


def _and(left: BooleanExpression, right: BooleanExpression) -> BooleanExpression:
    if left == _TRUE:
        return right
    if right == _TRUE:
        return left
    return And(left, right)
