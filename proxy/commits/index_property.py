"""The table property that asks icegov for bloom-filter indexes, parsed and checked.

``icegov.index.bloom-filter-columns`` is a comma-separated list of top-level columns of
primitive types (not boolean: a filter over two values prunes nothing). Setting it is a
metadata change (ALTER); ``check_index_property`` refuses a commit (``check_create_request``
a table creation) that leaves it naming a
column the table's schema lacks, a nested or non-primitive column, or a name twice (400), judged
against the schema that is current once the commit applies. ``indexed_fields`` reads the
property of a table as it stands (a name that no longer resolves is left out: the column was
dropped or renamed since).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.types import BooleanType, NestedField, PrimitiveType

from proxy.commits.intent import UnverifiableCommit
from proxy.errors import BadRequest

BLOOM_FILTER_COLUMNS = "icegov.index.bloom-filter-columns"
MAX_INDEXED_COLUMNS = 16


def column_names(value: str) -> list[str]:
    """The names the property lists, stripped, empty ones dropped."""
    return [name.strip() for name in value.split(",") if name.strip()]


def indexed_fields(properties: Mapping[str, str], schema: Schema) -> dict[str, NestedField]:
    """The indexable top-level fields the property names that ``schema`` has, by name."""
    value = properties.get(BLOOM_FILTER_COLUMNS)
    if not value:
        return {}
    fields: dict[str, NestedField] = {}
    top = {f.name: f for f in schema.fields}
    for name in column_names(value)[:MAX_INDEXED_COLUMNS]:
        field = top.get(name)
        if field is not None and indexable(field):
            fields[name] = field
    return fields


def indexable(field: NestedField) -> bool:
    """A primitive column other than boolean."""
    return isinstance(field.field_type, PrimitiveType) and not isinstance(field.field_type,
                                                                          BooleanType)


def check_index_property(body: Mapping[str, Any], base: TableMetadata | None) -> None:
    """400 when the commit leaves the property naming columns that cannot be indexed in the
    schema current after it (the base's, or the one the commit makes current)."""
    raw = body.get("updates")
    updates = [u for u in raw if isinstance(u, dict)] if isinstance(raw, list) else []
    if not any(_touches(u) for u in updates):
        return
    value = _final_value(updates, None if base is None
                         else base.properties.get(BLOOM_FILTER_COLUMNS))
    if value is None:
        return
    schema = _final_schema(updates, base)
    if schema is None:
        raise UnverifiableCommit(f"{BLOOM_FILTER_COLUMNS} needs a table schema to apply to")
    check_columns(value, schema)


def check_create_request(body: Any) -> None:
    """400 when a CreateTableRequest sets the property to columns its schema cannot index."""
    properties = body.get("properties") if isinstance(body, Mapping) else None
    if not isinstance(properties, Mapping) or BLOOM_FILTER_COLUMNS not in properties:
        return
    value = properties[BLOOM_FILTER_COLUMNS]
    if not isinstance(value, str):
        raise BadRequest(f"{BLOOM_FILTER_COLUMNS} must be a string")
    try:
        schema = Schema.model_validate(body.get("schema"))
    except (ValueError, TypeError) as exc:
        raise BadRequest(f"{BLOOM_FILTER_COLUMNS} needs a readable table schema") from exc
    check_columns(value, schema)


def check_columns(value: str, schema: Schema) -> None:
    """400 unless every name in ``value`` is a distinct indexable top-level column."""
    names = column_names(value)
    if not names:
        raise BadRequest(f"{BLOOM_FILTER_COLUMNS} names no column; remove the property instead")
    if len(names) > MAX_INDEXED_COLUMNS:
        raise BadRequest(f"{BLOOM_FILTER_COLUMNS} names more than {MAX_INDEXED_COLUMNS} columns")
    if len(set(names)) != len(names):
        raise BadRequest(f"{BLOOM_FILTER_COLUMNS} names a column twice")
    top = {f.name: f for f in schema.fields}
    for name in names:
        field = top.get(name)
        if field is None:
            raise BadRequest(f"{BLOOM_FILTER_COLUMNS} names {name[:200]!r}, which is not a "
                             "top-level column of the table")
        if not indexable(field):
            raise BadRequest(f"{BLOOM_FILTER_COLUMNS}: column {name!r} is {field.field_type}; "
                             "bloom filters index primitive columns other than boolean")


def _touches(update: Mapping[str, Any]) -> bool:
    action = update.get("action")
    if action == "set-properties":
        updates = update.get("updates")
        return isinstance(updates, Mapping) and BLOOM_FILTER_COLUMNS in updates
    return action in ("add-schema", "set-current-schema")


def _final_value(updates: list[dict[str, Any]], value: str | None) -> str | None:
    for update in updates:
        action = update.get("action")
        if action == "set-properties" and isinstance(update.get("updates"), Mapping):
            if BLOOM_FILTER_COLUMNS in update["updates"]:
                value = update["updates"][BLOOM_FILTER_COLUMNS]
                if not isinstance(value, str):
                    raise BadRequest(f"{BLOOM_FILTER_COLUMNS} must be a string")
        elif (action == "remove-properties" and isinstance(update.get("removals"), list)
              and BLOOM_FILTER_COLUMNS in update["removals"]):
            value = None
    return value


def _final_schema(updates: list[dict[str, Any]], base: TableMetadata | None) -> Schema | None:
    known = list(base.schemas) if base is not None else []
    added: list[Schema] = []
    current = base.schema() if base is not None else None
    for update in updates:
        action = update.get("action")
        if action == "add-schema":
            try:
                added.append(Schema.model_validate(update.get("schema")))
            except (ValueError, TypeError) as exc:
                raise UnverifiableCommit("add-schema carries a schema that cannot be read") from exc
        elif action == "set-current-schema":
            wanted = update.get("schema-id")
            if wanted == -1 and added:
                current = added[-1]
            else:
                current = next((s for s in [*added, *known] if s.schema_id == wanted), current)
    return current
