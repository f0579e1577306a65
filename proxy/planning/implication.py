"""Cache keys of filters and implication between them (sound, not complete).

``normalized_key`` spells equal filters alike; ``conjuncts`` keys the top-level conjuncts;
``implies`` says True only when it is sure one filter's rows are a subset of another's.
"""

from __future__ import annotations

from typing import Any

from pyiceberg.expressions import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    BooleanExpression,
    BoundPredicate,
    BoundReference,
    Not,
    Or,
    Reference,
    UnboundPredicate,
)

from proxy.planning.expressions import canonical_json
from proxy.planning.filter_json import (
    WIRE_TYPE_OF,
    filter_to_json,
    predicate_literals,
    predicate_parts,
)


def normalized_key(expr: BooleanExpression) -> str:
    """A canonical string of ``expr`` for cache keys: nested ``and`` / ``or`` are flattened
    and their operands sorted and deduplicated, set values sorted. Equal keys mean equal
    filters; different keys may still be equivalent filters."""
    return canonical_json(_canon(expr))


def _canon(expr: BooleanExpression) -> Any:
    if isinstance(expr, And | Or):
        kind = And if isinstance(expr, And) else Or
        operands = {canonical_json(_canon(e)) for e in _flatten(expr, kind)}
        return {"type": "and" if kind is And else "or", "of": sorted(operands)}
    if isinstance(expr, Not):
        return {"type": "not", "child": _canon(expr.child)}
    if isinstance(expr, BoundPredicate) and isinstance(expr.term, BoundReference):
        name, _, values = predicate_parts(expr, None)  # by field id: leaf names repeat
        return {"type": name, "field-id": expr.term.ref().field.field_id,
                "values": sorted(values, key=canonical_json)}
    return filter_to_json(expr)


def _flatten(expr: BooleanExpression, kind: type) -> list[BooleanExpression]:
    if isinstance(expr, kind) and isinstance(expr, And | Or):
        return _flatten(expr.left, kind) + _flatten(expr.right, kind)
    return [expr]


def conjuncts(expr: BooleanExpression) -> frozenset[str]:
    """The canonical keys of the top-level conjuncts of ``expr`` (``true`` has none)."""
    if isinstance(expr, AlwaysTrue):
        return frozenset()
    return frozenset(normalized_key(e) for e in _flatten(expr, And))


def implies(narrow: BooleanExpression, wide: BooleanExpression) -> bool:
    """True only when every row ``narrow`` accepts is certainly accepted by ``wide`` (both
    unbound over the same schema and case sensitivity, or both bound to the same schema).

    Sound, not complete: each conjunct of ``wide`` must follow from one conjunct of ``narrow``
    (the same predicate; ``x = 5`` ⇒ ``x in (5, 6)``; ``x > 10`` ⇒ ``x >= 3`` for integer
    literals; ``starts-with 'ab'`` ⇒ ``starts-with 'a'``; any comparison ⇒ ``not-null``), or
    from one of its disjuncts being so implied."""
    if isinstance(wide, AlwaysTrue) or isinstance(narrow, AlwaysFalse):
        return True
    narrow_parts = _flatten(narrow, And)
    return all(any(_implies_atom(n, w) for n in narrow_parts) for w in _flatten(wide, And))


def _implies_atom(narrow: BooleanExpression, wide: BooleanExpression) -> bool:
    if isinstance(wide, AlwaysTrue) or isinstance(narrow, AlwaysFalse):
        return True
    if normalized_key(narrow) == normalized_key(wide):
        return True
    if isinstance(wide, Or):
        return any(_implies_atom(narrow, w) for w in _flatten(wide, Or))
    if isinstance(narrow, Or):
        return all(_implies_atom(n, wide) for n in _flatten(narrow, Or))
    if isinstance(narrow, And):
        return any(_implies_atom(n, wide) for n in _flatten(narrow, And))
    n, w = _atom(narrow), _atom(wide)
    if n is None or w is None or n[1] != w[1]:
        return False
    return _predicate_implies(n[0], n[2], w[0], w[2])


def _atom(expr: BooleanExpression) -> tuple[str, tuple[str, Any], list[Any]] | None:
    """(wire type, term identity, raw literal values) of a plain predicate."""
    key: tuple[str, Any]
    if isinstance(expr, UnboundPredicate) and isinstance(expr.term, Reference):
        kind, key = WIRE_TYPE_OF.get(type(expr)), ("name", expr.term.name)
    elif isinstance(expr, BoundPredicate) and isinstance(expr.term, BoundReference):
        kind, key = WIRE_TYPE_OF.get(expr.as_unbound), ("id", expr.term.ref().field.field_id)
    else:
        return None
    if kind is None:
        return None
    return kind, key, [lit.value for lit in predicate_literals(expr)]


_RANGES = {"lt", "lt-eq", "gt", "gt-eq"}
_NOT_NULL_WHEN = {"eq", "in", "starts-with"} | _RANGES


def _predicate_implies(n_kind: str, n_values: list[Any], w_kind: str, w_values: list[Any]) -> bool:
    n_set = {_value_key(v) for v in n_values}
    w_set = {_value_key(v) for v in w_values}
    if w_kind == "not-null":
        return n_kind in _NOT_NULL_WHEN and bool(n_values)
    if n_kind in ("eq", "in") and w_kind in ("eq", "in"):
        return bool(n_set) and n_set <= w_set
    if n_kind in ("eq", "in") and w_kind in ("not-eq", "not-in"):
        return bool(n_set) and not n_set & w_set
    if n_kind == w_kind == "starts-with":
        return _all_str(n_values + w_values) and n_values[0].startswith(w_values[0])
    if w_kind in _RANGES and n_kind in _RANGES | {"eq", "in"}:
        return _range_implies(n_kind, n_values, w_kind, w_values[0])
    return False


def _value_key(value: Any) -> str:
    """Literal identity: ``1``, ``1.0`` and ``true`` stay distinct."""
    return f"{type(value).__name__}:{value!r}"


def _all_str(values: list[Any]) -> bool:
    return all(isinstance(v, str) for v in values)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _range_implies(n_kind: str, n_values: list[Any], w_kind: str, bound: Any) -> bool:
    """Range reasoning with integer literals only: they convert exactly to every numeric,
    date and time type, so comparing them as numbers compares the bound values."""
    if not n_values or not all(_is_int(v) for v in [*n_values, bound]):
        return False
    low = high = None
    low_open = high_open = False
    if n_kind in ("eq", "in"):
        low, high = min(n_values), max(n_values)
    elif n_kind in ("gt", "gt-eq"):
        low, low_open = n_values[0], n_kind == "gt"
    else:
        high, high_open = n_values[0], n_kind == "lt"
    if w_kind in ("gt", "gt-eq"):
        return low is not None and (low > bound or (low == bound and (low_open
                                                                        or w_kind == "gt-eq")))
    return high is not None and (high < bound or (high == bound and (high_open
                                                                     or w_kind == "lt-eq")))
