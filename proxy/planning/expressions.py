"""Scan filters on the wire: the REST spec's ``Predicate`` JSON to and from pyiceberg expressions.

Accepted on input (``parse_filter``), in any mix:

* bare ``true`` / ``false`` and the deprecated ``{"type": "true"}`` / ``{"type": "false"}``;
* the legacy form Java clients send: ``{"type": "eq", "term": "c", "value": 5}``,
  ``{"type": "in", "term": "c", "values": [1, 2]}``, ``{"type": "is-null", "term": "c"}``,
  ``and`` / ``or`` with ``left`` / ``right``, ``not`` with ``child``; a term is a column name,
  ``{"type": "reference", "term": "c"}`` (Java) or a transform
  ``{"type": "transform", "transform": "day", "term": "ts"}``;
* the spec's newer form: ``{"type": "lt", "left": <value>, "right": <value>}`` where a value is
  ``{"type": "reference", "name": "c"}``, a bare literal, ``{"type": "literal", "value": v}`` or
  ``{"type": "apply", ...}``; unary and set predicates name their operand as ``child``; set
  values may be ``{"type": "literals", "values": [...]}``.

Literal types come from binding (``bind_filter``), never from the JSON.

**What cannot be translated weakens, never narrows.** pyiceberg binds only plain column
references. A predicate over a transform other than ``identity`` (``day(ts) = ...``), a function
application, or a comparison of two columns becomes ``AlwaysTrue`` where it appears positively and
``AlwaysFalse`` under an odd number of ``not``: the parsed filter is then *implied by* the
client's filter, so it prunes only files the client's filter could not match either. The
client applies its own filter to the rows it reads, so the answer stays correct; ``exact`` says
whether this happened. Columns named anywhere, translated or not, are in ``columns`` (for the
policy check).

On output (``filter_to_json``) the legacy form is written, which is the only form Java 1.11 reads.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
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
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNaN,
    IsNull,
    LessThan,
    LessThanOrEqual,
    LiteralPredicate,
    Not,
    NotEqualTo,
    NotIn,
    NotNaN,
    NotNull,
    NotStartsWith,
    Or,
    Reference,
    SetPredicate,
    StartsWith,
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

MAX_NODES = 1000  # predicates and terms in one filter
MAX_DEPTH = 100  # nesting of and / or / not
MAX_VALUES = 100_000  # literals in all set predicates of one filter

_Make = Callable[..., BooleanExpression]
UNARY: dict[str, _Make] = {"is-null": IsNull, "not-null": NotNull, "is-nan": IsNaN,
                          "not-nan": NotNaN}
COMPARISON: dict[str, _Make] = {"lt": LessThan, "lt-eq": LessThanOrEqual, "gt": GreaterThan,
              "gt-eq": GreaterThanOrEqual, "eq": EqualTo, "not-eq": NotEqualTo,
              "starts-with": StartsWith, "not-starts-with": NotStartsWith}
SETS: dict[str, _Make] = {"in": In, "not-in": NotIn}
_MIRRORED = {"lt": "gt", "lt-eq": "gt-eq", "gt": "lt", "gt-eq": "lt-eq", "eq": "eq",
             "not-eq": "not-eq"}


@dataclass(frozen=True)
class ParsedFilter:
    """A parsed filter: ``expression`` (unbound), every column name it mentions as written
    (``columns``) and whether ``expression`` is exactly the client's filter (``exact``) or a
    weaker one (see the module docstring)."""

    expression: BooleanExpression
    columns: frozenset[str]
    exact: bool


def parse_filter(obj: Any) -> BooleanExpression:
    """The unbound pyiceberg expression of a wire filter; ``BadRequest`` when malformed."""
    return parse_filter_detailed(obj).expression


def parse_filter_detailed(obj: Any) -> ParsedFilter:
    """``parse_filter`` with the columns the filter names and whether it was translated exactly."""
    parser = _Parser()
    expression = parser.predicate(obj, depth=0, positive=True)
    return ParsedFilter(expression, frozenset(parser.columns), parser.exact)


def _bad(message: str) -> BadRequest:
    return BadRequest(f"invalid filter: {message}")


def _kind(value: Any) -> str:
    """A short description of a JSON value for messages (never the value itself)."""
    if isinstance(value, Mapping):
        kind = value.get("type")
        return f"an object of type {kind!r:.40}" if isinstance(kind, str) else "an object"
    return type(value).__name__


class _Term:
    """A parsed operand: a column (``name``), a literal (``value``) or something pyiceberg cannot
    evaluate (``opaque``: a non-identity transform or a function application)."""

    __slots__ = ("name", "opaque", "value")

    def __init__(self, name: str | None = None, value: Any = None, opaque: bool = False) -> None:
        self.name, self.value, self.opaque = name, value, opaque


class _Parser:
    def __init__(self) -> None:
        self.nodes = 0
        self.values = 0
        self.columns: set[str] = set()
        self.exact = True

    def _count(self) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise _bad(f"more than {MAX_NODES} nodes")

    def _weakened(self, positive: bool) -> BooleanExpression:
        self.exact = False
        return AlwaysTrue() if positive else AlwaysFalse()

    def _enter(self, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise _bad(f"nested deeper than {MAX_DEPTH}")
        self._count()

    def predicate(self, node: Any, depth: int, positive: bool) -> BooleanExpression:
        self._enter(depth)
        if isinstance(node, bool):
            return AlwaysTrue() if node else AlwaysFalse()
        if not isinstance(node, Mapping) or not isinstance(node.get("type"), str):
            raise _bad(f"a predicate must be true, false or an object with a type, not "
                       f"{_kind(node)}")
        kind: str = node["type"]
        if kind in ("true", "false"):
            _only(node, set(), kind)
            return AlwaysTrue() if kind == "true" else AlwaysFalse()
        if kind in ("and", "or"):
            _only(node, {"left", "right"}, kind, required={"left", "right"})
            left = self.predicate(node["left"], depth + 1, positive)
            right = self.predicate(node["right"], depth + 1, positive)
            return And(left, right) if kind == "and" else Or(left, right)
        if kind == "not":
            _only(node, {"child"}, kind, required={"child"})
            return Not(self.predicate(node["child"], depth + 1, not positive))
        if kind in UNARY:
            return self._unary(node, kind, positive, depth)
        if kind in COMPARISON:
            return self._comparison(node, kind, positive, depth)
        if kind in SETS:
            return self._set(node, kind, positive, depth)
        raise _bad(f"unknown predicate type {kind!r:.40}")

    def _unary(self, node: Mapping[str, Any], kind: str, positive: bool,
               depth: int) -> BooleanExpression:
        _only(node, {"term", "child"}, kind)
        term = self._operand(node, "term", "child", kind, depth)
        if term.name is None:
            if term.opaque:
                return self._weakened(positive)
            raise _bad(f"{kind} needs a column, not a literal")
        return UNARY[kind](term.name)

    def _comparison(self, node: Mapping[str, Any], kind: str, positive: bool,
                    depth: int) -> BooleanExpression:
        if "left" in node or "right" in node:
            _only(node, {"left", "right"}, kind, required={"left", "right"})
            left = self.value(node["left"], kind, depth + 1)
            right = self.value(node["right"], kind, depth + 1)
        else:
            _only(node, {"term", "value"}, kind, required={"term", "value"})
            left = self.term(node["term"], kind, depth + 1)
            right = _Term(value=_literal(node["value"], kind))
        if left.name is None and right.name is not None and kind in _MIRRORED:
            left, right, kind = right, left, _MIRRORED[kind]
        if left.opaque or right.opaque or (left.name is not None and right.name is not None):
            return self._weakened(positive)
        if left.name is None:
            raise _bad(f"{kind} needs a column operand")
        if right.value is None:
            raise _bad(f"{kind} needs a non-null literal")
        return COMPARISON[kind](left.name, right.value)

    def _set(self, node: Mapping[str, Any], kind: str, positive: bool,
             depth: int) -> BooleanExpression:
        _only(node, {"term", "child", "values"}, kind, required={"values"})
        term = self._operand(node, "term", "child", kind, depth)
        values = self._values(node["values"], kind)
        if term.opaque:
            return self._weakened(positive)
        if term.name is None:
            raise _bad(f"{kind} needs a column operand")
        return SETS[kind](term.name, values)

    def _values(self, raw: Any, kind: str) -> list[Any]:
        if isinstance(raw, Mapping) and raw.get("type") == "literals":
            _only(raw, {"values", "data-type"}, "literals", required={"values"})
            raw = raw["values"]
        if not isinstance(raw, list):
            raise _bad(f"{kind} values must be a list")
        self.values += len(raw)
        if self.values > MAX_VALUES:
            raise _bad(f"more than {MAX_VALUES} literal values")
        return [_literal(v, kind) for v in raw]

    def _operand(self, node: Mapping[str, Any], legacy: str, modern: str, kind: str,
                 depth: int) -> _Term:
        if (legacy in node) == (modern in node):
            raise _bad(f"{kind} needs exactly one of {legacy!r} and {modern!r}")
        if legacy in node:
            return self.term(node[legacy], kind, depth + 1)
        return self.value(node[modern], kind, depth + 1)

    def term(self, raw: Any, kind: str, depth: int) -> _Term:
        """A legacy term: a name, ``{"type": "reference", ...}`` or a transform."""
        self._enter(depth)
        if isinstance(raw, str):
            return self._column(raw)
        if isinstance(raw, Mapping) and raw.get("type") == "transform":
            _only(raw, {"transform", "term"}, "transform", required={"transform", "term"})
            transform, inner = raw["transform"], self.term(raw["term"], kind, depth + 1)
            if not isinstance(transform, str) or inner.name is None:
                raise _bad("a transform term needs a transform name and a column")
            if transform.strip().lower() == "identity":
                return inner
            return _Term(opaque=True)
        if isinstance(raw, Mapping) and raw.get("type") == "reference":
            return self._reference(raw)
        raise _bad(f"{kind} has a term that is {_kind(raw)}")

    def value(self, raw: Any, kind: str, depth: int) -> _Term:
        """A newer-form value expression: reference, literal or function application."""
        self._enter(depth)
        if isinstance(raw, Mapping):
            node_type = raw.get("type")
            if node_type == "reference":
                return self._reference(raw)
            if node_type == "literal":
                _only(raw, {"value", "data-type"}, "literal", required={"value"})
                return _Term(value=_literal(raw["value"], kind))
            if node_type == "apply":
                self._apply_columns(raw, kind, depth)
                return _Term(opaque=True)
            if node_type == "transform":
                return self.term(raw, kind, depth)
        return _Term(value=_literal(raw, kind))

    def _reference(self, raw: Mapping[str, Any]) -> _Term:
        names = [raw[k] for k in ("name", "term") if k in raw]
        if "id" in raw:
            raise _bad("references by field id are not accepted here; name the column")
        _only(raw, {"name", "term"}, "reference")
        if len(names) != 1 or not isinstance(names[0], str):
            raise _bad("a reference needs one column name")
        return self._column(names[0])

    def _column(self, name: str) -> _Term:
        if not name or len(name) > 1024:
            raise _bad("a column name must be 1 to 1024 characters")
        self.columns.add(name)
        return _Term(name=name)

    def _apply_columns(self, raw: Mapping[str, Any], kind: str, depth: int) -> None:
        """Record the columns a function application names (it is weakened, not evaluated)."""
        arguments = raw.get("arguments")
        if not isinstance(arguments, list):
            raise _bad("a function application needs a list of arguments")
        for argument in arguments:
            if isinstance(argument, bool) or (isinstance(argument, Mapping) and argument.get(
                    "type") in {"true", "false", "and", "or", "not"} | set(UNARY) | set(COMPARISON)
                    | set(SETS)):
                self.predicate(argument, depth + 1, positive=True)
            else:
                self.value(argument, kind, depth + 1)


def _only(node: Mapping[str, Any], allowed: set[str], kind: str,
          required: set[str] | None = None) -> None:
    unknown = [str(k) for k in node if k != "type" and k not in allowed]
    if unknown:
        raise _bad(f"{kind} has unexpected fields {', '.join(sorted(unknown))[:80]}")
    missing = sorted((required or set()) - set(node))
    if missing:
        raise _bad(f"{kind} needs {', '.join(missing)}")


def _literal(value: Any, kind: str) -> Any:
    """A JSON literal as a Python value pyiceberg makes a literal of (its type comes later)."""
    if isinstance(value, Mapping) and value.get("type") == "literal":
        _only(value, {"value", "data-type"}, "literal", required={"value"})
        value = value["value"]
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise _bad(f"{kind} has an integer literal out of the long range")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _bad(f"{kind} has a literal that is not a finite number")
        return value
    raise _bad(f"{kind} literals must be strings, numbers or booleans, not {_kind(value)}")


def canonical_json(obj: Any) -> str:
    """Compact JSON with sorted keys: the one spelling of a JSON value."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# ---- writing: the legacy form Java 1.11 reads ----------------------------------------------

_TYPE_OF: dict[Any, str] = {cls: name for table in (UNARY, COMPARISON, SETS)
                             for name, cls in table.items()}


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
    kind, term, values = _predicate_parts(expr, schema)
    body: dict[str, Any] = {"type": kind, "term": term}
    if kind in COMPARISON:
        body["value"] = values[0]
    elif kind in SETS:
        body["values"] = sorted(values, key=canonical_json)
    return body


def _predicate_parts(expr: BooleanExpression,
                     schema: Schema | None) -> tuple[str, str, list[Any]]:
    """(wire type, column name, JSON literal values) of one predicate."""
    if isinstance(expr, UnboundPredicate):
        kind = _TYPE_OF.get(type(expr))
        if kind is None or not isinstance(expr.term, Reference):
            raise ValueError(f"no wire form for {type(expr).__name__}")
        return kind, expr.term.name, [_unbound_value(lit) for lit in _literals(expr)]
    if isinstance(expr, BoundPredicate):
        kind = _TYPE_OF.get(expr.as_unbound)
        if kind is None or not isinstance(expr.term, BoundReference):
            raise ValueError(f"no wire form for {type(expr).__name__}")
        field = expr.term.ref().field
        name = schema.find_column_name(field.field_id) if schema is not None else None
        values = [_bound_value(field.field_type, lit.value) for lit in _literals(expr)]
        return kind, name or field.name, values
    raise ValueError(f"no wire form for {type(expr).__name__}")


def _literals(expr: BooleanExpression) -> list[Literal[Any]]:
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
    decoded = [_hex_literal(lit) for lit in _literals(expr)]
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


# ---- keys and implication (sound, not complete) -------------------------------------------


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
        name, _, values = _predicate_parts(expr, None)  # by field id: leaf names repeat
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
        kind, key = _TYPE_OF.get(type(expr)), ("name", expr.term.name)
    elif isinstance(expr, BoundPredicate) and isinstance(expr.term, BoundReference):
        kind, key = _TYPE_OF.get(expr.as_unbound), ("id", expr.term.ref().field.field_id)
    else:
        return None
    if kind is None:
        return None
    return kind, key, [lit.value for lit in _literals(expr)]


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
