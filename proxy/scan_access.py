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

from proxy.errors import Forbidden
from proxy.restrictions import ReadView


def top_level(name: str, schema: Schema, case_sensitive: bool) -> str | None:
    """The top-level column a (possibly nested, dotted) name lies in, as the schema spells it;
    None when the schema has no such column."""
    wanted = name if case_sensitive else name.lower()
    for candidate in _prefixes(wanted):
        for top in schema.fields:
            spelled = top.name if case_sensitive else top.name.lower()
            if spelled == candidate:
                return top.name
    return None


def _prefixes(name: str) -> list[str]:
    """``a.b.c`` → ``a.b.c``, ``a.b``, ``a``: a top-level name may itself contain dots."""
    parts = name.split(".")
    return [".".join(parts[:n]) for n in range(len(parts), 0, -1)]


def refuse_hidden(names: Iterable[str], schema: Schema, view: ReadView, *,
                  applies_masks: bool, case_sensitive: bool, what: str) -> None:
    """403 naming the first name that lies in a column hidden from the principal."""
    hidden = view.hidden(applies_masks)
    for name in names:
        column = top_level(name, schema, case_sensitive)
        if column is None or column not in hidden:
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
