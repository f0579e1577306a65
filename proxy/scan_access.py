"""What a scan may name: the columns a plan request selects, filters on or asks statistics for
must all be visible to the principal; the principal's row filter must apply to the schema.

A request naming a denied column is refused with 403 naming it (the caller named it, so the
answer reveals only that it is denied). A masked column is refused the same way unless the
client applies masks itself: a plan hands out whole files, so a client that cannot mask would
read the raw values.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyiceberg.exceptions import ResolveError
from pyiceberg.expressions import BooleanExpression
from pyiceberg.expressions.visitors import bind
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata

from proxy.errors import Forbidden
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


def refuse_hidden(names: Iterable[str], schema: Schema, view: ReadView, *,
                  applies_masks: bool, case_sensitive: bool, what: str) -> None:
    """403 naming the first name that lies in a column hidden from the principal."""
    hidden = view.hidden(applies_masks)
    for name in names:
        column = next((c for c in top_levels(name, schema, case_sensitive) if c in hidden), None)
        if column is None:
            continue
        if column in view.denied:
            raise Forbidden(f"column {name!r} of {view.table.name} is denied to you "
                            f"({what})")
        raise Forbidden(f"column {name!r} of {view.table.name} is masked for you and this "
                        f"client cannot apply masks ({what})")


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
