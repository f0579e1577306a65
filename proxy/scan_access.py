"""What a scan may name: the columns a plan request selects, filters on or asks statistics for
must all be visible to the principal; the principal's row filter must apply to the schema.

A request naming a denied column is refused as one naming no column at all (400): the
principal's loadTable has no such column, and the answer must not tell a hidden column from a
missing one (the audit record says which it was). A masked column is refused the same way
unless the client applies masks itself: a plan hands out whole files, so a client that cannot
mask would read the raw values.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pyiceberg.exceptions import ResolveError
from pyiceberg.expressions import BooleanExpression
from pyiceberg.expressions.visitors import bind
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata

from proxy.errors import BadRequest, Forbidden
from proxy.planning.filter_json import referenced_columns
from proxy.restrictions import ReadView


def top_level(name: str, schema: Schema, case_sensitive: bool) -> str | None:
    """The top-level column a (possibly nested, dotted) name lies in, as the schema spells it;
    None when the schema has no such column."""
    found = top_levels(name, schema, case_sensitive)
    return found[0] if found else None


def top_levels(name: str, schema: Schema, case_sensitive: bool) -> list[str]:
    """Every top-level column a (possibly nested, dotted) name may lie in, as the schema spells
    them: without case sensitivity, ``Ssn`` may be ``SSN`` or ``ssn`` (readers disagree on
    which one they bind), so every one counts."""
    wanted = name if case_sensitive else name.lower()
    for candidate in _prefixes(wanted):
        found = [top.name for top in schema.fields
                 if (top.name if case_sensitive else top.name.lower()) == candidate]
        if found:
            return found
    return []


def _prefixes(name: str) -> list[str]:
    """``a.b.c`` → ``a.b.c``, ``a.b``, ``a``: a top-level name may itself contain dots."""
    parts = name.split(".")
    return [".".join(parts[:n]) for n in range(len(parts), 0, -1)]


UNKNOWN = {
    "select": "select: no column {name!r} in the scanned schema",
    "stats-fields": "stats-fields: no column {name!r} in this table",
    "filter": "the filter does not apply to the table's schema: Could not find field with "
              "name {name}, case_sensitive={case_sensitive}",
}
"""What a name that lies in no column is answered with, for each part of a plan request."""


def refuse_hidden(names: Iterable[str], schema: Schema, view: ReadView, *,
                  applies_masks: bool, case_sensitive: bool, what: str,
                  evidence: list[dict[str, Any]] | None = None) -> None:
    """400 for the first name that lies in a column hidden from the principal, worded as for a
    name that lies in no column at all: the table the principal is shown has no such column,
    and the answer must not tell a hidden column from a missing one. The truth (the column and
    the rule's verdict) goes to ``evidence``, the audit record's."""
    hidden = view.hidden(applies_masks)
    for name in names:
        column = next((c for c in top_levels(name, schema, case_sensitive) if c in hidden), None)
        if column is None:
            continue
        if evidence is not None:
            evidence.append({"refused": what, "column": column, "table": str(view.table),
                             "because": "denied" if column in view.denied else "masked"})
        raise BadRequest(UNKNOWN[what].format(name=name[:200], case_sensitive=case_sensitive))


def bound_row_filter(view: ReadView, schema: Schema) -> BooleanExpression:
    """The principal's row filter bound to ``schema``; 403 when it cannot be (fail closed)."""
    try:
        return bind(schema, view.filter_expression, case_sensitive=True)
    except (ValueError, TypeError, ArithmeticError, ResolveError) as exc:
        raise Forbidden(f"a row filter restricts what you may read of {view.table.name} and "
                        "it cannot be applied to this table's schema; ask the policy's "
                        "authors") from exc


def check_row_filter_history(view: ReadView, metadata: TableMetadata) -> None:
    """403 when the row filter names a column hidden from the principal (it would be declared
    to it in ``read-restrictions``), or a column that has named different fields over the
    table's schema history (renamed away and another added under its name): the filter's
    meaning moved, and which rows it admits is no longer what the policy's authors wrote."""
    if view.row_filter is None:
        return
    names = referenced_columns(view.row_filter.expression)
    if {name.split(".")[0] for name in names} & view.hidden(False):
        raise Forbidden(f"a row filter restricts what you may read of {view.table.name} by a "
                        "column hidden from you, which cannot be declared to you; ask the "
                        "policy's authors")
    for name in names:
        top = name.split(".")[0]
        ids = {f.field_id for schema in metadata.schemas for f in schema.fields
               if f.name in (name, top)}
        if len(ids) > 1:
            raise Forbidden(f"a row filter restricts what you may read of {view.table.name}, "
                            "and a column it names has meant different columns over the "
                            "table's history; ask the policy's authors")
