"""Pruning data files with bloom-filter indexes: ``=`` and ``IN`` on indexed columns.

``IndexPruner`` compiles a scan filter, bound to the schema the scan binds to (the principal's
view: a hidden column is absent from it, so its index can never be consulted), into probes: an
``=`` or ``IN`` on an indexed column becomes the hashed bytes of its literals (``bloom``'s
encoding, in the column's family). A file is excluded when its filter for that column contains
none of them; within ``AND`` when either side excludes it, within ``OR`` only when both do;
anything else (``NOT`` is pushed down first; ranges, nulls, other columns) never excludes. A
file with no filter for a column (not indexed yet, or indexed under another family) is never
excluded by a probe on it: an index can only ever drop files that cannot hold a matching row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyiceberg.expressions import (
    AlwaysTrue,
    And,
    BooleanExpression,
    BoundEqualTo,
    BoundIn,
    BoundReference,
    Or,
)
from pyiceberg.expressions.visitors import bind, rewrite_not
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema

from proxy.planning.bloom import BloomFilter, encoder, family, probes

Lookup = Callable[[DataFile, int, str], BloomFilter | None]
"""The filter of (data file, field id) built for a family; None when there is none."""


@dataclass(frozen=True, slots=True)
class _Probe:
    field_id: int
    family: str
    values: tuple[tuple[int, int], ...]  # each literal's ``bloom.probes``


@dataclass(frozen=True, slots=True)
class _Both:
    left: _Node
    right: _Node


@dataclass(frozen=True, slots=True)
class _Either:
    left: _Node
    right: _Node


_Node = _Probe | _Both | _Either | None  # None: never excludes


class IndexPruner:
    """Keeps the files an index cannot rule out for one scan (``planner.FileIndex``)."""

    def __init__(self, tree: _Node, lookup: Lookup) -> None:
        self._tree = tree
        self._lookup = lookup

    @classmethod
    def for_filter(cls, schema: Schema, expression: BooleanExpression, case_sensitive: bool,
                   indexed: frozenset[int], lookup: Lookup) -> IndexPruner | None:
        """The pruner of ``expression`` over the ``indexed`` field ids of ``schema``; None when
        no part of it can use an index (or it does not bind: the planner refuses it then)."""
        if expression == AlwaysTrue() or not indexed:
            return None
        try:
            bound = rewrite_not(bind(schema, expression, case_sensitive))
        except (ValueError, TypeError, ArithmeticError):
            return None
        tree = _compile(bound, indexed)
        return None if tree is None else cls(tree, lookup)

    def keeps(self, data_file: DataFile) -> bool:
        """False when an index proves the file holds no matching row."""
        return not _excludes(self._tree, data_file, self._lookup)


def _compile(expression: BooleanExpression, indexed: frozenset[int]) -> _Node:
    if isinstance(expression, And):
        left, right = _compile(expression.left, indexed), _compile(expression.right, indexed)
        if left is None or right is None:
            return left or right
        return _Both(left, right)
    if isinstance(expression, Or):
        left, right = _compile(expression.left, indexed), _compile(expression.right, indexed)
        return None if left is None or right is None else _Either(left, right)
    if isinstance(expression, BoundEqualTo):
        return _probe(expression.term, [expression.literal.value], indexed)
    if isinstance(expression, BoundIn):
        return _probe(expression.term, [lit.value for lit in expression.literals], indexed)
    return None


def _probe(term: object, values: list[object], indexed: frozenset[int]) -> _Probe | None:
    if not isinstance(term, BoundReference):
        return None
    field = term.ref().field
    name = family(field.field_type)
    if field.field_id not in indexed or name is None:
        return None
    encode = encoder(name)
    try:
        hashed = tuple(h for h in (encode(v) for v in values) if h is not None)
    except (ValueError, TypeError, ArithmeticError):
        return None
    return _Probe(field.field_id, name, tuple(probes(h) for h in hashed)) if hashed else None


def _excludes(node: _Node, data_file: DataFile, lookup: Lookup) -> bool:
    if node is None:
        return False
    if isinstance(node, _Both):
        return (_excludes(node.left, data_file, lookup)
                or _excludes(node.right, data_file, lookup))
    if isinstance(node, _Either):
        return (_excludes(node.left, data_file, lookup)
                and _excludes(node.right, data_file, lookup))
    bloom = lookup(data_file, node.field_id, node.family)
    return bloom is not None and not any(bloom.might_contain_probes(h1, h2)
                                         for h1, h2 in node.values)

