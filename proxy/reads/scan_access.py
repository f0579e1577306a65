"""What a scan may name: the columns a plan request selects, filters on or asks statistics for
must all be visible to the principal; the principal's row filter must apply to the schema.

Every name a caller writes is resolved in the caller's view of the schema (``refuse_unseen``,
``ColumnNames``): the schema without the columns hidden from it. A denied column is so refused
as a column the table does not have (``NoSuchColumn``, 400, one message for both): the
principal's loadTable has no such column, and the answer must not tell a hidden column from a
missing one (the audit record says which it was). A masked column is refused the same way
unless the client applies masks itself: a plan hands out whole files, so a client that cannot
mask would read the raw values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from pyiceberg.exceptions import ResolveError
from pyiceberg.expressions import BooleanExpression
from pyiceberg.expressions.visitors import bind
from pyiceberg.schema import Schema, index_by_name
from pyiceberg.table.metadata import TableMetadata

from proxy.errors import BadRequest, Forbidden
from proxy.planning.filter_json import referenced_columns
from proxy.restrictions import ReadView


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


class NoSuchColumn(BadRequest):
    """400 for a name that lies in no column the caller can see. One answer, worded the same
    whether the column is hidden from the caller or absent from the table: only the part of
    the request (``select``, ``filter``, ...) and the name as the caller wrote it vary."""

    def __init__(self, part: str, name: str) -> None:
        super().__init__(f"{part}: no column {name[:200]!r} in this table")


class ColumnNames:
    """Resolves caller-written column names (dotted for nested fields) in one schema — the
    caller's view of it (``proxy.planning.scope.visible``), never the table's whole schema —
    as pyiceberg binds them."""

    def __init__(self, schema: Schema) -> None:
        self._exact = index_by_name(schema)
        self._folded: dict[str, set[int]] = {}
        for name, field_id in self._exact.items():
            self._folded.setdefault(name.lower(), set()).add(field_id)

    def field_id(self, part: str, name: str, case_sensitive: bool) -> int:
        """The field id ``name`` names; ``NoSuchColumn`` when none, ``BadRequest`` when,
        case ignored, it names several (as Java's case-insensitive binding refuses)."""
        if case_sensitive:
            found = self._exact.get(name)
            if found is None:
                raise NoSuchColumn(part, name)
            return found
        ids = self._folded.get(name.lower(), set())
        if not ids:
            raise NoSuchColumn(part, name)
        if len(ids) > 1:
            raise BadRequest(f"{part}: {name[:200]!r} names more than one column when case "
                             "is ignored")
        return next(iter(ids))


Refusal = Callable[[str, str], None]
"""Told (part, name) of a name about to be refused, before it is (the audit's truth)."""


def refuse_unseen(parts: Iterable[tuple[str, Iterable[str]]], visible: Schema, *,
                  case_sensitive: bool, noted: Refusal | None = None) -> None:
    """``NoSuchColumn`` for the first name, part by part, that lies in no column of
    ``visible`` (the caller's view of the schema the request binds to). A column hidden from
    the caller is not in ``visible``, so it is refused exactly as a missing one: same status,
    same message, at the same step."""
    names = ColumnNames(visible)
    for part, written in parts:
        for name in written:
            try:
                names.field_id(part, name, case_sensitive)
            except NoSuchColumn:
                if noted is not None:
                    noted(part, name)
                raise


def hidden_column(name: str, metadata: TableMetadata, view: ReadView, *,
                  applies_masks: bool, case_sensitive: bool) -> str | None:
    """The hidden top-level column ``name`` may lie in, in any schema the table has had (for
    the audit record: never for the answer)."""
    hidden = view.hidden(applies_masks)
    for schema in metadata.schemas:
        for column in top_levels(name, schema, case_sensitive):
            if column in hidden:
                return column
    return None


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
