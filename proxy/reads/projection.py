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
* ``config`` gains ``scan-planning-mode: server``, and with it the region the table's storage
  credentials name when it names none (``REGION_KEYS``): a client that configures storage from
  a ``config`` that is not empty (DuckDB) needs a region there, and the backing's empty
  ``config`` had left it to the credentials. ``read-restrictions`` (the REST spec's field)
  declares masks of kept columns and the row filter (``proxy.reads.restrictions_json``).

``properties``, ``last-column-id``, snapshots and ``metadata-location`` are left as they are
(properties may still name hidden columns, e.g. ``write.metadata.metrics.column.*``). The
returned dict is new down to every changed object; unchanged sub-objects are shared with the
input, which is never mutated.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from pyiceberg.schema import Schema, index_by_id

from proxy.errors import BackingFailed, Forbidden
from proxy.reads.restrictions_json import (
    declared_masks,
    merge_read_restrictions,
    read_restrictions,
)
from proxy.restrictions import ReadView

Json = dict[str, Any]

SCAN_PLANNING_MODE = "scan-planning-mode"
READ_RESTRICTIONS = "read-restrictions"


def removed_columns(view: ReadView, schema: Schema, *, applies_masks: bool) -> frozenset[str]:
    """The top-level columns a client must not be shown: ``view.hidden(applies_masks)`` plus,
    for a client that applies masks, every masked column whose action cannot be declared for
    its type or that the current ``schema`` lacks."""
    declared = declared_masks(view, schema, applies_masks=applies_masks)
    return view.hidden(applies_masks) | frozenset(n for n in view.masks if n not in declared)


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
    config = _object(result.get("config") or {})
    projected["config"] = {**credentials_region(result, config), **config,
                           SCAN_PLANNING_MODE: "server"}
    ours = read_restrictions(view, schema, applies_masks=applies_masks)
    merged = merge_read_restrictions(result.get(READ_RESTRICTIONS), ours)
    if merged is not None:
        projected[READ_RESTRICTIONS] = merged
    return projected


REGION_KEYS = ("client.region", "s3.region", "region")
"""Where FileIO (Java's and PyIceberg's) and DuckDB read a storage region."""


def credentials_region(result: Json, config: Json) -> Json:
    """The region properties of ``result``'s storage credentials when ``config`` has none
    and the credentials agree on them (else none)."""
    if any(key in config for key in REGION_KEYS):
        return {}
    credentials = result.get("storage-credentials")
    found: dict[str, set[Any]] = {}
    for credential in credentials if isinstance(credentials, list) else ():
        properties = credential.get("config") if isinstance(credential, dict) else None
        for key in REGION_KEYS:
            if isinstance(properties, dict) and isinstance(properties.get(key), str):
                found.setdefault(key, set()).add(properties[key])
    return {key: next(iter(values)) for key, values in found.items() if len(values) == 1}


# -- which field ids leave -----------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Removal:
    """The removed top-level columns: every field id they hold (nested ones too, in any
    schema) → the top-level name policy knows the column by."""

    owners: Mapping[int, str]
    top_ids: frozenset[int]
    names: frozenset[str] = frozenset()  # every name the removed columns have had

    @staticmethod
    def of(schemas: Sequence[Json], names: frozenset[str]) -> _Removal:
        tops: dict[int, str] = {}
        for schema in schemas:  # the current schema comes first: its names win
            for field in _fields(schema):
                if field.get("name") in names:
                    tops.setdefault(field["id"], field["name"])
        owners: dict[int, str] = dict(tops)
        had: set[str] = set()
        for schema in schemas:
            for field in _fields(schema):
                if field.get("id") in tops:
                    owners.update(dict.fromkeys(_nested_ids(field.get("type")),
                                                tops[field["id"]]))
                    had.add(str(field.get("name")))
        return _Removal(owners, frozenset(tops), frozenset(had))

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
    if isinstance(metadata.get("properties"), dict):
        projected["properties"] = _project_properties(metadata["properties"], removal)
    return projected


NAME_MAPPING = "schema.name-mapping.default"


def _project_properties(properties: Json, removal: _Removal) -> Json:
    """Table properties without the ones about removed columns (``….column.<name>`` settings)
    and with the removed fields cut from the default name mapping."""
    names = removal.names | set(removal.owners.values())
    kept = {k: v for k, v in properties.items()
            if not any(k.endswith(f".column.{n}") or f".column.{n}." in k for n in names)}
    if isinstance(kept.get(NAME_MAPPING), str):
        kept[NAME_MAPPING] = _project_name_mapping(kept[NAME_MAPPING], removal)
    return kept


def _project_name_mapping(text: str, removal: _Removal) -> str:
    """The JSON name mapping without the removed fields (an unreadable one is dropped)."""
    try:
        mapping = json.loads(text)
    except ValueError:
        return "[]"

    def cut(fields: Any) -> list[Any]:
        if not isinstance(fields, list):
            return []
        return [{**f, **({"fields": cut(f["fields"])} if "fields" in f else {})}
                for f in fields
                if isinstance(f, dict) and f.get("field-id") not in removal.owners]

    return json.dumps(cut(mapping), separators=(",", ":"))


def _project_schema(schema: Json, removal: _Removal) -> Json:
    hidden = {name.lower() for name in removal.names | set(removal.owners.values())}
    projected = {**schema, "fields": [_without_telling_docs(f, hidden) for f in _fields(schema)
                                      if f.get("id") not in removal.top_ids]}
    identifiers = schema.get("identifier-field-ids")
    if isinstance(identifiers, list):
        projected["identifier-field-ids"] = [i for i in identifiers if i not in removal.owners]
    return projected


def _without_telling_docs(field: Json, hidden: set[str]) -> Json:
    """``field`` (and the fields nested in it) without a ``doc`` that names a hidden column."""
    kept = dict(field)
    doc = kept.get("doc")
    if isinstance(doc, str) and not hidden.isdisjoint(w.lower() for w in _WORD.findall(doc)):
        del kept["doc"]
    kind = kept.get("type")
    if isinstance(kind, dict):
        kept["type"] = _type_without_telling_docs(kind, hidden)
    return kept


def _type_without_telling_docs(kind: Json, hidden: set[str]) -> Json:
    projected = dict(kind)
    if isinstance(kind.get("fields"), list):
        projected["fields"] = [_without_telling_docs(f, hidden) if isinstance(f, dict) else f
                               for f in kind["fields"]]
    for key in ("element", "key", "value"):
        if isinstance(kind.get(key), dict):
            projected[key] = _type_without_telling_docs(kind[key], hidden)
    return projected


_WORD = re.compile(r"[^\W\d][\w$]*")


def _refuse_hidden_partitions(metadata: Json, removal: _Removal, view: ReadView) -> None:
    specs = [s for s in metadata.get("partition-specs") or [] if isinstance(s, dict)]
    if isinstance(metadata.get("partition-spec"), list):  # format v1's current spec
        specs.append({"fields": metadata["partition-spec"]})
    for spec in specs:
        for field in spec.get("fields") or []:
            for source in _sources(field):
                if source in removal.owners:
                    raise Forbidden(partition_refusal(removal.owners[source], view))


def partition_refusal(column: str, view: ReadView) -> str:
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
