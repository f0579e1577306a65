"""The REST spec's ``read-restrictions`` of a restricted principal's loadTable answer.

``read_restrictions`` declares the masks a mask-applying client keeps
(``required-column-projections``, see ``declared_masks``) and the row filter bound to the
current schema (``required-row-filter``, written by ``bound_filter_json``); ``mask_applies``
says which mask actions the spec allows on which column types; ``merge_read_restrictions`` keeps
the backing catalog's own restrictions beside ours. The rest of the answer's projection is
``proxy.reads.projection``.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from typing import Any

from pyiceberg import expressions as ex
from pyiceberg.conversions import to_json
from pyiceberg.expressions import AlwaysFalse, AlwaysTrue, And, BooleanExpression, Not, Or
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    DateType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    NestedField,
    PrimitiveType,
    StringType,
    TimestampNanoType,
    TimestampType,
    TimestamptzNanoType,
    TimestamptzType,
    UUIDType,
)

from proxy.errors import Forbidden
from proxy.reads.scan_access import bound_row_filter
from proxy.restrictions import Mask, MaskAction, ReadView

Json = dict[str, Any]

_SPEC_ACTION: Mapping[MaskAction, str] = {action: action.value for action in MaskAction} | {
    # the spec has a deterministic and a per-query salted SHA-256; a policy's ``sha-256`` is the
    # deterministic one (same input, same output, across queries and engines)
    MaskAction.SHA_256: "sha-256-global",
}
"""Policy mask action → the spec's ``required-column-projections`` action."""

_DATES = (DateType, TimestampType, TimestamptzType, TimestampNanoType, TimestamptzNanoType)


def mask_applies(mask: Mask, field: NestedField) -> bool:
    """True when the spec allows ``mask``'s action on ``field`` (its "Applicable to" lists);
    a server must not declare any other, so such a column is removed instead (fail closed)."""
    kind = field.field_type
    match mask.action:
        case MaskAction.REPLACE_WITH_NULL:
            return not field.required
        case MaskAction.MASK_TO_FIXED_VALUE:
            return isinstance(kind, PrimitiveType)
        case MaskAction.MASK_ALPHANUM | MaskAction.SHOW_FIRST_4 | MaskAction.SHOW_LAST_4:
            return isinstance(kind, StringType)
        case MaskAction.TRUNCATE_TO_YEAR | MaskAction.TRUNCATE_TO_MONTH:
            return isinstance(kind, _DATES)
        case MaskAction.SHA_256:
            return isinstance(kind, StringType | IntegerType | LongType | BinaryType)
    return False


def declared_masks(view: ReadView, schema: Schema, *,
                   applies_masks: bool) -> dict[str, tuple[Mask, NestedField]]:
    """The masks ``read-restrictions`` declares, by column name, with the current ``schema``'s
    top-level field: those of columns the client keeps (``view.hidden(applies_masks)`` lacks
    them) whose action the spec allows on the field. Every other masked column is removed
    (``proxy.reads.projection.removed_columns``)."""
    hidden = view.hidden(applies_masks)
    declared: dict[str, tuple[Mask, NestedField]] = {}
    for name, mask in view.masks.items():
        field = _top_field(schema, name)
        if name not in hidden and field is not None and mask_applies(mask, field):
            declared[name] = (mask, field)
    return declared


def read_restrictions(view: ReadView, schema: Schema, *, applies_masks: bool) -> Json | None:
    """The spec's ``read-restrictions`` for ``view`` over the current ``schema``, None when
    there is nothing to declare.

    ``required-column-projections`` lists ``{"action", "field-id"}`` for the masked columns a
    mask-applying client keeps, by field id; ``mask-to-fixed-value`` also carries the policy's
    ``value`` (the spec fixes the value per type, so spec readers use theirs and ignore this
    member). ``required-row-filter`` is the row filter bound to ``schema``, in the spec's form
    (``left``/``right``/``child`` operands, ``{"type": "reference", "id": N}``); a filter the
    schema cannot bind is 403. A filter over a removed column still names its field id, which
    the projected schema lacks: a spec reader then fails, which is the safe outcome.
    """
    restrictions: Json = {}
    projections = _column_projections(declared_masks(view, schema, applies_masks=applies_masks))
    if projections:
        restrictions["required-column-projections"] = projections
    row_filter = _row_filter_json(view, schema)
    if row_filter is not None:
        restrictions["required-row-filter"] = row_filter
    return restrictions or None


def _column_projections(declared: Mapping[str, tuple[Mask, NestedField]]) -> list[Json]:
    projections: list[Json] = []
    for mask, field in declared.values():
        entry: Json = {"action": _SPEC_ACTION[mask.action], "field-id": field.field_id}
        if mask.action is MaskAction.MASK_TO_FIXED_VALUE and mask.value is not None:
            entry["value"] = mask.value
        projections.append(entry)
    return sorted(projections, key=lambda entry: int(entry["field-id"]))


def _row_filter_json(view: ReadView, schema: Schema) -> Any:
    if view.row_filter is None:
        return None
    bound = bound_row_filter(view, schema)
    if isinstance(bound, AlwaysTrue):
        return None
    try:
        return bound_filter_json(bound)
    except (TypeError, ValueError, NotImplementedError) as exc:
        raise Forbidden(f"a row filter restricts what you may read of {view.table.name} and it "
                        "cannot be declared to clients; ask the policy's authors") from exc


_PREDICATE_TYPES: Mapping[type[ex.BoundPredicate], str] = {
    ex.BoundIsNull: "is-null", ex.BoundNotNull: "not-null", ex.BoundIsNaN: "is-nan",
    ex.BoundNotNaN: "not-nan", ex.BoundEqualTo: "eq", ex.BoundNotEqualTo: "not-eq",
    ex.BoundLessThan: "lt", ex.BoundLessThanOrEqual: "lt-eq", ex.BoundGreaterThan: "gt",
    ex.BoundGreaterThanOrEqual: "gt-eq", ex.BoundStartsWith: "starts-with",
    ex.BoundNotStartsWith: "not-starts-with", ex.BoundIn: "in", ex.BoundNotIn: "not-in",
}


def bound_filter_json(expr: BooleanExpression) -> Any:
    """A *bound* pyiceberg expression in the REST spec's expression form, columns referenced by
    field id: bare ``true``/``false``; ``and``/``or`` with ``left``/``right``; ``not`` with
    ``child``; comparisons with ``left`` (reference) and ``right`` (the literal, in Iceberg's
    JSON single-value form); unary and set predicates with ``child`` (and ``values``).
    Raises ``TypeError`` for what it cannot express (unbound terms, non-finite floats)."""
    match expr:
        case AlwaysTrue():
            return True
        case AlwaysFalse():
            return False
        case And() | Or():
            return {"type": "and" if isinstance(expr, And) else "or",
                    "left": bound_filter_json(expr.left), "right": bound_filter_json(expr.right)}
        case Not():
            return {"type": "not", "child": bound_filter_json(expr.child)}
        case ex.BoundPredicate() if type(expr) in _PREDICATE_TYPES:
            return _predicate_json(expr)
    raise TypeError(f"cannot express {type(expr).__name__} as a filter")


def _predicate_json(predicate: ex.BoundPredicate) -> Json:
    term = predicate.term
    if not isinstance(term, ex.BoundReference):
        raise TypeError("only column references can be expressed")
    field = term.field
    out: Json = {"type": _PREDICATE_TYPES[type(predicate)]}
    reference = {"type": "reference", "id": field.field_id}
    if isinstance(predicate, ex.BoundLiteralPredicate):
        out["left"] = reference
        out["right"] = _literal_json(field.field_type, predicate.literal.value)
    elif isinstance(predicate, ex.BoundSetPredicate):
        out["child"] = reference
        values = sorted(literal.value for literal in predicate.literals)
        out["values"] = [_literal_json(field.field_type, value) for value in values]
    elif isinstance(predicate, ex.BoundUnaryPredicate):
        out["child"] = reference
    return out


def _literal_json(kind: IcebergType, value: Any) -> Any:
    if isinstance(kind, UUIDType) and isinstance(value, bytes):
        value = uuid.UUID(bytes=value)
    if isinstance(kind, FloatType | DoubleType) and not math.isfinite(value):
        raise TypeError("a non-finite float has no JSON form")
    if not isinstance(kind, PrimitiveType):
        raise TypeError("only primitive values can be expressed")
    return to_json(kind, value)


def merge_read_restrictions(theirs: object, ours: Json | None) -> Json | None:
    """The backing's own ``read-restrictions`` (if any) kept, ours added: row filters ANDed,
    projections for field ids the backing already restricts left as the backing has them."""
    if not isinstance(theirs, dict) or not theirs:
        return ours
    if ours is None:
        return theirs
    merged = dict(theirs)
    if "required-row-filter" in ours:
        filters = [f for f in (theirs.get("required-row-filter"), ours["required-row-filter"])
                   if f is not None]
        merged["required-row-filter"] = (filters[0] if len(filters) == 1 else
                                         {"type": "and", "left": filters[0], "right": filters[1]})
    listed = list(theirs.get("required-column-projections") or [])
    taken = {p.get("field-id") for p in listed if isinstance(p, dict)}
    extra = [p for p in ours.get("required-column-projections", []) if p["field-id"] not in taken]
    if extra:
        merged["required-column-projections"] = listed + extra
    return merged


def _top_field(schema: Schema, name: str) -> NestedField | None:
    return next((field for field in schema.fields if field.name == name), None)
