"""The column names a data operation's filters write, judged as a plan's are: in the writer's
view of the table's schema (``proxy.planning.scope.visible``), before icegov binds them.

A name outside the view — a column hidden from the writer, or one the table does not have —
is refused with the very answer the operation's parse gives a column the table lacks (400,
``UnverifiableCommit``: "<key> is not an Iceberg expression over the table's columns"), so the
answer never tells the two apart. A case-insensitive filter is handed on with its names as the
view spells them and ``case-sensitive: true``: a column hidden from the writer whose name
differs only by case (``ssn`` beside a readable ``SSN``) is never what the filter binds to.

Filters are read as the operation's parse reads them (pyiceberg's expression model); one it
cannot read is left to that parse, which refuses it the same way whatever it names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pyiceberg.expressions import BooleanExpression
from pyiceberg.schema import Schema

from proxy.commits.intent import UnverifiableCommit
from proxy.planning.filter_json import referenced_columns
from proxy.planning.scope import visible
from proxy.reads.scan_access import ColumnNames, NoSuchColumn
from proxy.restrictions import ReadView

FILTER_KEYS = ("row-filter", "conflict-filter")
_EXPRESSION: TypeAdapter[BooleanExpression] = TypeAdapter(BooleanExpression)


def judged_operation(update: Any, schema: Schema, view: ReadView) -> Any:
    """``update`` (one ``updates`` entry) with every filter name resolved in ``view``'s view of
    ``schema``; the same object when nothing had to be respelled. Raises ``UnverifiableCommit``
    for a name outside the view (hidden or missing alike)."""
    if not isinstance(update, Mapping):
        return update
    case_sensitive = update.get("case-sensitive", True) is not False
    shown = visible(schema, view.hidden(False))
    names = ColumnNames(shown)
    respelled: dict[str, Any] = {}
    for key in FILTER_KEYS:
        expression = _readable(update.get(key))
        if expression is None:
            continue
        spelling: dict[str, str] = {}
        for name in sorted(referenced_columns(expression)):
            try:
                field_id = names.field_id(key, name, case_sensitive)
            except NoSuchColumn:
                raise UnverifiableCommit(f"{key} is not an Iceberg expression over the "
                                         "table's columns") from None
            spelling[name] = shown.find_column_name(field_id) or name
        if not case_sensitive:
            respelled[key] = _renamed(update[key], spelling)
    if case_sensitive:
        return update
    return {**update, **respelled, "case-sensitive": True}


def _readable(raw: Any) -> BooleanExpression | None:
    """The filter as the operation's parse reads it; None when absent or unreadable."""
    if raw is None:
        return None
    try:
        return _EXPRESSION.validate_python(raw)
    except (ValidationError, ValueError, TypeError):
        return None


def _renamed(node: Any, spelling: Mapping[str, str]) -> Any:
    """A wire filter with every column term respelled (pyiceberg's model: terms are names)."""
    if isinstance(node, Mapping):
        return {key: spelling.get(value, value) if key == "term" and isinstance(value, str)
                else _renamed(value, spelling) for key, value in node.items()}
    if isinstance(node, list):
        return [_renamed(item, spelling) for item in node]
    return node
