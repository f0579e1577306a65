"""Scan filters back to the wire, and bound to a table's schema.

``filter_to_json`` writes the legacy form (bare ``true`` / ``false``, column names as terms),
which is the only form Java 1.11 reads; ``referenced_columns`` lists the columns an expression
names; ``bind_filter`` binds a parsed filter (``proxy.planning.expressions``) to a schema, which
is where literal types come from.
"""

from __future__ import annotations

from typing import Any

from pyiceberg.conversions import to_json
from pyiceberg.exceptions import ResolveError
from pyiceberg.expressions import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    BooleanExpression,
    BoundLiteralPredicate,
    BoundPredicate,
    BoundReference,
    BoundSetPredicate,
    LiteralPredicate,
    Not,
    Or,
    Reference,
    SetPredicate,
    UnboundPredicate,
)
from pyiceberg.expressions.literals import (
    BinaryLiteral,
    DateLiteral,
    Literal,
    StringLiteral,
    TimeLiteral,
)
from pyiceberg.expressions.visitors import bind
from pyiceberg.schema import Schema
from pyiceberg.types import BinaryType, DateType, FixedType, PrimitiveType, TimeType

from proxy.errors import BadRequest
from proxy.planning.expressions import COMPARISON, SETS, UNARY, canonical_json

# ---- writing: the legacy form Java 1.11 reads ----------------------------------------------

WIRE_TYPE_OF: dict[Any, str] = {cls: name for table in (UNARY, COMPARISON, SETS)
                                 for name, cls in table.items()}
"""Unbound pyiceberg predicate class → its wire ``type``."""


def filter_to_json(expr: BooleanExpression, schema: Schema | None = None) -> Any:
    """``expr`` in the legacy wire form (bare ``true`` / ``false``, column names as terms).

    Bound expressions are written by column name: the full dotted name when ``schema`` is given,
    else the field's own name. ``ValueError`` for an expression that has no wire form (a bound
    transform, a custom expression class): callers writing a residual fall back to ``true``.
    """
    if isinstance(expr, AlwaysTrue):
        return True
    if isinstance(expr, AlwaysFalse):
        return False
    if isinstance(expr, And | Or):
        return {"type": "and" if isinstance(expr, And) else "or",
                "left": filter_to_json(expr.left, schema),
                "right": filter_to_json(expr.right, schema)}
    if isinstance(expr, Not):
        return {"type": "not", "child": filter_to_json(expr.child, schema)}
    kind, term, values = predicate_parts(expr, schema)
    body: dict[str, Any] = {"type": kind, "term": term}
    if kind in COMPARISON:
        body["value"] = values[0]
    elif kind in SETS:
        body["values"] = sorted(values, key=canonical_json)
    return body


def predicate_parts(expr: BooleanExpression,
                    schema: Schema | None) -> tuple[str, str, list[Any]]:
    """(wire type, column name, JSON literal values) of one predicate; ``ValueError`` when it
    has no wire form."""
    if isinstance(expr, UnboundPredicate):
        kind = WIRE_TYPE_OF.get(type(expr))
        if kind is None or not isinstance(expr.term, Reference):
            raise ValueError(f"no wire form for {type(expr).__name__}")
        return kind, expr.term.name, [_unbound_value(lit) for lit in predicate_literals(expr)]
    if isinstance(expr, BoundPredicate):
        kind = WIRE_TYPE_OF.get(expr.as_unbound)
        if kind is None or not isinstance(expr.term, BoundReference):
            raise ValueError(f"no wire form for {type(expr).__name__}")
        field = expr.term.ref().field
        name = schema.find_column_name(field.field_id) if schema is not None else None
        values = [_bound_value(field.field_type, lit.value) for lit in predicate_literals(expr)]
        return kind, name or field.name, values
    raise ValueError(f"no wire form for {type(expr).__name__}")


def predicate_literals(expr: BooleanExpression) -> list[Literal[Any]]:
    """The literals of a predicate, bound or not (none for a unary one)."""
    if isinstance(expr, LiteralPredicate | BoundLiteralPredicate):
        return [expr.literal]
    if isinstance(expr, SetPredicate | BoundSetPredicate):
        return list(expr.literals)
    return []


def _bound_value(field_type: Any, value: Any) -> Any:
    if isinstance(field_type, BinaryType | FixedType) and isinstance(value, bytes):
        return value.hex().upper()  # the spec's hex is uppercase
    if isinstance(field_type, PrimitiveType):
        return to_json(field_type, value)
    raise ValueError("a predicate on a non-primitive column has no wire form")


def _unbound_value(lit: Literal[Any]) -> Any:
    """An unbound literal as Java's parser reads it back to the same value once bound."""
    value = lit.value
    if isinstance(lit, DateLiteral):
        return to_json(DateType(), value)
    if isinstance(lit, TimeLiteral):
        return to_json(TimeType(), value)
    if isinstance(value, bool | int | float | str):
        return value  # timestamps stay microseconds: Java and pyiceberg bind longs to them
    if isinstance(value, bytes):
        return value.hex().upper()
    return str(value)  # Decimal, UUID


def referenced_columns(expr: BooleanExpression) -> frozenset[str]:
    """The column names an expression names, as written (bound: the fields' own names).

    For a filter parsed from the wire prefer ``ParsedFilter.columns``: it also holds the columns
    of predicates that were weakened away. A dotted name is returned whole: the handler resolves
    it to its top-level column against the schema (a top-level name may itself contain dots).
    """
    names: set[str] = set()
    _walk(expr, lambda p: names.add(_term_name(p)))
    return frozenset(names)


def _term_name(predicate: BooleanExpression) -> str:
    if isinstance(predicate, UnboundPredicate) and isinstance(predicate.term, Reference):
        return predicate.term.name
    if isinstance(predicate, BoundPredicate):
        return predicate.term.ref().field.name
    raise ValueError(f"unexpected predicate {type(predicate).__name__}")


def _walk(expr: BooleanExpression, visit: Any) -> None:
    if isinstance(expr, And | Or):
        _walk(expr.left, visit)
        _walk(expr.right, visit)
    elif isinstance(expr, Not):
        _walk(expr.child, visit)
    elif isinstance(expr, UnboundPredicate | BoundPredicate):
        visit(expr)


# ---- binding --------------------------------------------------------------------------------


def bind_filter(expr: BooleanExpression, schema: Schema, case_sensitive: bool) -> BooleanExpression:
    """``expr`` bound to ``schema``; ``BadRequest`` when it names no column of the schema or a
    literal does not convert to its column's type. Hex strings (how Java writes binary and fixed
    literals) are decoded for binary and fixed columns first."""
    try:
        return bind(schema, _decode_binary(expr, schema, case_sensitive), case_sensitive)
    except (ValueError, TypeError, ArithmeticError, ResolveError) as exc:
        raise BadRequest(f"the filter does not apply to the table's schema: "
                         f"{str(exc)[:200]}") from exc


def _decode_binary(expr: BooleanExpression, schema: Schema,
                   case_sensitive: bool) -> BooleanExpression:
    if isinstance(expr, And | Or):
        left = _decode_binary(expr.left, schema, case_sensitive)
        right = _decode_binary(expr.right, schema, case_sensitive)
        return And(left, right) if isinstance(expr, And) else Or(left, right)
    if isinstance(expr, Not):
        return Not(_decode_binary(expr.child, schema, case_sensitive))
    if not isinstance(expr, LiteralPredicate | SetPredicate) or not isinstance(expr.term,
                                                                               Reference):
        return expr
    try:
        field = schema.find_field(expr.term.name, case_sensitive)
    except ValueError:
        return expr  # bind reports it
    if not isinstance(field.field_type, BinaryType | FixedType):
        return expr
    decoded = [_hex_literal(lit) for lit in predicate_literals(expr)]
    if isinstance(expr, LiteralPredicate):
        return type(expr)(expr.term, decoded[0])
    return type(expr)(expr.term, decoded)


def _hex_literal(lit: Literal[Any]) -> Literal[Any]:
    if not isinstance(lit, StringLiteral):
        return lit
    try:
        return BinaryLiteral(bytes.fromhex(lit.value))
    except ValueError:
        raise BadRequest("the filter compares a binary column with a value that is not "
                         "hexadecimal") from None
