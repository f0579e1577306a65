"""What a restricted principal's loadTable answer says: the table as that principal may see it.

Clients that plan themselves (Spark 1.10, Trino, metadata tables, incremental scans) read only
what loadTable says, so the answer carries the restriction:

* **Columns.** The hidden top-level columns (``removed_columns``: the view's hidden ones, plus
  masked ones whose action the spec does not allow on their type) leave *every* schema, field
  ids of the rest unchanged. Hidden names are resolved to field ids in every schema (the
  current one first), so a column renamed or dropped since keeps its id hidden in old schemas
  (time travel reads old schemas), and a stale rule naming a column by its old name hides it
  under its new name too (fail closed; ``removed_columns`` lists current names only).
  ``identifier-field-ids`` lose the removed ids.
* **Sort orders** are cut before their first field on a removed column: a prefix of a true
  order is still true, a gap is not (``a, hidden, c`` does not mean sorted by ``a, c``). An
  order cut to nothing is dropped (Java refuses an empty order with an id other than 0); if it
  was the default, the default becomes 0, the unsorted order.
* **Partition specs** (all of them: old files keep old specs) over a removed column: 403. A
  partition column cannot be hidden, its values are in every manifest and file path.
* **Statistics**: Puffin blob metadata over a removed field is dropped; a statistics file left
  without blobs is dropped. Partition statistics name no column and stay.
* ``config`` gains ``scan-planning-mode: server``; ``read-restrictions`` (the REST spec's field)
  declares masks of kept columns and the row filter (see ``read_restrictions``).

``properties``, ``last-column-id``, snapshots and ``metadata-location`` are left as they are
(properties may still name hidden columns, e.g. ``write.metadata.metrics.column.*``). The
returned dict is new down to every changed object; unchanged sub-objects are shared with the
input, which is never mutated.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from pyiceberg import expressions as ex
from pyiceberg.conversions import to_json
from pyiceberg.expressions import AlwaysFalse, AlwaysTrue, And, BooleanExpression, Not, Or
from pyiceberg.schema import Schema, index_by_id
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

from proxy.errors import BackingFailed, Forbidden
from proxy.restrictions import Mask, MaskAction, ReadView
from proxy.scan_access import bound_row_filter

Json = dict[str, Any]

SCAN_PLANNING_MODE = "scan-planning-mode"
READ_RESTRICTIONS = "read-restrictions"

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


def removed_columns(view: ReadView, schema: Schema, *, applies_masks: bool) -> frozenset[str]:
    """The top-level columns a client must not be shown: ``view.hidden(applies_masks)`` plus,
    for a client that applies masks, every masked column whose action cannot be declared for
    its type or that the current ``schema`` lacks."""
    hidden = set(view.hidden(applies_masks))
    for name, mask in view.masks.items():
        field = _top_field(schema, name)
        if field is None or not mask_applies(mask, field):
            hidden.add(name)
    return frozenset(hidden)


def projected_schema(schema: Schema, hidden: frozenset[str]) -> Schema:
    """``schema`` without the top-level fields named in ``hidden``: ids, schema id and the
    remaining identifier fields unchanged."""
    removed = [field for field in schema.fields if field.name in hidden]
    if not removed:
        return schema
    gone = set(index_by_id(Schema(*removed)))
    return Schema(
        *(field for field in schema.fields if field.name not in hidden),
        schema_id=schema.schema_id,
        identifier_field_ids=[i for i in schema.identifier_field_ids if i not in gone],
    )


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
    removed = removed_columns(view, schema, applies_masks=applies_masks)
    restrictions: Json = {}
    projections = _column_projections(view, schema, removed)
    if projections:
        restrictions["required-column-projections"] = projections
    row_filter = _row_filter_json(view, schema)
    if row_filter is not None:
        restrictions["required-row-filter"] = row_filter
    return restrictions or None


def project_load_result(result: Json, view: ReadView, *, applies_masks: bool) -> Json:
    """``result`` (a parsed LoadTableResult) as ``view``'s principal may see it; ``result``
    itself when the view restricts nothing. 403 when a partition spec uses a hidden column or
    the row filter does not apply to the table."""
    if not view.restricted:
        return result
    metadata = _object(result.get("metadata"))
    schema = _current_schema(metadata)
    try:
        removal = _Removal.of(_schemas(metadata),
                              removed_columns(view, schema, applies_masks=applies_masks))
        projected_metadata = _project_metadata(metadata, removal, view)
    except (KeyError, TypeError, AttributeError) as exc:  # a shape pyiceberg let through
        raise BackingFailed("the backing catalog's table metadata cannot be read") from exc
    projected = dict(result)
    projected["metadata"] = projected_metadata
    projected["config"] = {**_object(result.get("config") or {}), SCAN_PLANNING_MODE: "server"}
    ours = read_restrictions(view, schema, applies_masks=applies_masks)
    merged = _merge_restrictions(result.get(READ_RESTRICTIONS), ours)
    if merged is not None:
        projected[READ_RESTRICTIONS] = merged
    return projected


# -- which field ids leave -----------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Removal:
    """The removed top-level columns: every field id they hold (nested ones too, in any
    schema) → the top-level name policy knows the column by."""

    owners: Mapping[int, str]
    top_ids: frozenset[int]

    @staticmethod
    def of(schemas: Sequence[Json], names: frozenset[str]) -> _Removal:
        tops: dict[int, str] = {}
        for schema in schemas:  # the current schema comes first: its names win
            for field in _fields(schema):
                if field.get("name") in names:
                    tops.setdefault(field["id"], field["name"])
        owners: dict[int, str] = dict(tops)
        for schema in schemas:
            for field in _fields(schema):
                if field.get("id") in tops:
                    owners.update(dict.fromkeys(_nested_ids(field.get("type")),
                                                tops[field["id"]]))
        return _Removal(owners, frozenset(tops))

    def __bool__(self) -> bool:
        return bool(self.top_ids)


def _nested_ids(kind: object) -> Iterator[int]:
    """Every field id inside a JSON type (struct fields, list elements, map keys and values)."""
    if not isinstance(kind, dict):
        return
    if kind.get("type") == "struct":
        for field in kind.get("fields") or []:
            yield field["id"]
            yield from _nested_ids(field.get("type"))
    elif kind.get("type") == "list":
        yield kind["element-id"]
        yield from _nested_ids(kind.get("element"))
    elif kind.get("type") == "map":
        yield from (kind["key-id"], kind["value-id"])
        yield from _nested_ids(kind.get("key"))
        yield from _nested_ids(kind.get("value"))


# -- the metadata, projected -----------------------------------------------------------------

def _project_metadata(metadata: Json, removal: _Removal, view: ReadView) -> Json:
    if not removal:
        return metadata
    _refuse_hidden_partitions(metadata, removal, view)
    projected = dict(metadata)
    if isinstance(metadata.get("schemas"), list):
        projected["schemas"] = [_project_schema(s, removal) for s in metadata["schemas"]]
    if isinstance(metadata.get("schema"), dict):  # format v1's current schema
        projected["schema"] = _project_schema(metadata["schema"], removal)
    if isinstance(metadata.get("sort-orders"), list):
        orders, default = _project_sort_orders(metadata["sort-orders"],
                                               metadata.get("default-sort-order-id"), removal)
        projected["sort-orders"] = orders
        if default is not None:
            projected["default-sort-order-id"] = default
    if isinstance(metadata.get("statistics"), list):
        projected["statistics"] = _project_statistics(metadata["statistics"], removal)
    return projected


def _project_schema(schema: Json, removal: _Removal) -> Json:
    projected = {**schema, "fields": [f for f in _fields(schema)
                                      if f.get("id") not in removal.top_ids]}
    identifiers = schema.get("identifier-field-ids")
    if isinstance(identifiers, list):
        projected["identifier-field-ids"] = [i for i in identifiers if i not in removal.owners]
    return projected


def _refuse_hidden_partitions(metadata: Json, removal: _Removal, view: ReadView) -> None:
    specs = [s for s in metadata.get("partition-specs") or [] if isinstance(s, dict)]
    if isinstance(metadata.get("partition-spec"), list):  # format v1's current spec
        specs.append({"fields": metadata["partition-spec"]})
    for spec in specs:
        for field in spec.get("fields") or []:
            for source in _sources(field):
                if source in removal.owners:
                    raise Forbidden(_partition_refusal(removal.owners[source], view))


def _partition_refusal(column: str, view: ReadView) -> str:
    """Names the column only when the principal may know it exists (masked, not denied)."""
    which = (f"column {column!r}, which policy hides from you" if column not in view.denied
             else "a column that policy hides from you")
    return (f"table {view.table.name} is partitioned by {which}: a partition column cannot be "
            "hidden (its values are in every manifest and file path)")


def _project_sort_orders(orders: list[Any], default: object,
                         removal: _Removal) -> tuple[list[Any], object]:
    projected: list[Any] = []
    for order in orders:
        fields = (order.get("fields") or []) if isinstance(order, dict) else []
        kept = _prefix_before_removed(fields, removal)
        if len(kept) == len(fields):
            projected.append(order)
        elif kept:
            projected.append({**order, "fields": kept})
    if len(projected) == len(orders):
        return projected, default
    if default not in {o.get("order-id") for o in projected if isinstance(o, dict)}:
        default = 0
        if not any(isinstance(o, dict) and o.get("order-id") == 0 for o in projected):
            projected.insert(0, {"order-id": 0, "fields": []})
    return projected, default


def _prefix_before_removed(fields: list[Any], removal: _Removal) -> list[Any]:
    for position, field in enumerate(fields):
        if any(source in removal.owners for source in _sources(field)):
            return fields[:position]
    return fields


def _project_statistics(files: list[Any], removal: _Removal) -> list[Any]:
    projected: list[Any] = []
    for stats in files:
        blobs = stats.get("blob-metadata") if isinstance(stats, dict) else None
        if not isinstance(blobs, list) or not blobs:
            projected.append(stats)
            continue
        kept = [b for b in blobs if not any(i in removal.owners for i in b.get("fields") or [])]
        if len(kept) == len(blobs):
            projected.append(stats)
        elif kept:
            projected.append({**stats, "blob-metadata": kept})
    return projected


# -- read-restrictions -------------------------------------------------------------------------

def _column_projections(view: ReadView, schema: Schema, removed: frozenset[str]) -> list[Json]:
    projections: list[Json] = []
    for name, mask in view.masks.items():
        field = _top_field(schema, name)
        if name in removed or field is None:
            continue
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


def _merge_restrictions(theirs: object, ours: Json | None) -> Json | None:
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


# -- small readers -----------------------------------------------------------------------------

def _object(value: object) -> Json:
    if not isinstance(value, dict):
        raise BackingFailed("the backing catalog's table metadata cannot be read")
    return value


def _schemas(metadata: Json) -> list[Json]:
    """Every schema of the table, the current one first (v1's ``schema`` included)."""
    schemas = [s for s in metadata.get("schemas") or [] if isinstance(s, dict)]
    if isinstance(metadata.get("schema"), dict):
        schemas.append(metadata["schema"])
    current = metadata.get("current-schema-id")
    return sorted(schemas, key=lambda s: s.get("schema-id") != current)


def _current_schema(metadata: Json) -> Schema:
    schemas = _schemas(metadata)
    try:
        return Schema.model_validate(schemas[0])
    except (IndexError, ValidationError) as exc:
        raise BackingFailed("the backing catalog's table metadata cannot be read") from exc


def _fields(schema: Json) -> list[Json]:
    return [f for f in schema.get("fields") or [] if isinstance(f, dict)]


def _sources(field: object) -> list[int]:
    """The source field ids of a partition or sort field (``source-id``, or v3's
    ``source-ids`` for multi-argument transforms)."""
    if not isinstance(field, dict):
        return []
    sources = field.get("source-ids")
    ids = sources if isinstance(sources, list) else [field.get("source-id")]
    return [i for i in ids if isinstance(i, int)]


def _top_field(schema: Schema, name: str) -> NestedField | None:
    return next((field for field in schema.fields if field.name == name), None)
