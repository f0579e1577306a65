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

Literal types come from binding (``proxy.planning.filter_json.bind_filter``), never from
the JSON.

**What cannot be translated weakens, never narrows.** pyiceberg binds only plain column
references. A predicate over a transform other than ``identity`` (``day(ts) = ...``), a function
application, or a comparison of two columns becomes ``AlwaysTrue`` where it appears positively and
``AlwaysFalse`` under an odd number of ``not``: the parsed filter is then *implied by* the
client's filter, so it prunes only files the client's filter could not match either. The
client applies its own filter to the rows it reads, so the answer stays correct; ``exact`` says
whether this happened. Columns named anywhere, translated or not, are in ``columns`` (for the
policy check).

Writing filters back to the wire and binding them: ``proxy.planning.filter_json``; cache keys
and implication between filters: ``proxy.planning.implication``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyiceberg.expressions import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    BooleanExpression,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNaN,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    NotEqualTo,
    NotIn,
    NotNaN,
    NotNull,
    NotStartsWith,
    Or,
    StartsWith,
)

from proxy.errors import BadRequest

MAX_NODES = 1000  # predicates and terms in one filter
MAX_DEPTH = 100  # nesting of and / or / not
MAX_VALUES = 10_000  # literals in all set predicates of one filter

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
