"""What a restricted principal may commit: writes that cannot lose what it cannot see.

A principal with hidden columns (denied or masked) writes through a projected schema, so every
file it writes lacks those columns:

* an INSERT is allowed only when every hidden column is optional (the new rows hold null);
* anything that rewrites data files (UPDATE: copy-on-write DELETE/UPDATE/MERGE and overwrite;
  REWRITE: compaction) or changes the schema would drop the hidden values: refused. A pure
  DELETE (whole files removed, or delete files added) loses nothing else and is allowed.

A principal with a row filter sees only some rows, so a commit that removes or rewrites data
(DELETE, UPDATE, REWRITE, MANAGE_SNAPSHOTS) could change rows outside its filter: refused. Its
INSERTs are allowed.

Messages never name a denied column (that would reveal it exists); a masked column may be
named, the principal knows it from ``read-restrictions``.

Data operations (``proxy.commits.operations``) are judged twice: before icegov builds them
(their filters' names resolved in the principal's view, a hidden column answered as a missing
one: ``proxy.reads.operation_names``; ``operation_refusal``: equality deletes must not reach
hidden columns, whose values the build's answers would otherwise reveal), and
``write_refusal`` on what was built.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pyiceberg.schema import Schema

from proxy.governance import Action
from proxy.restrictions import ReadView

REWRITES_DATA: frozenset[Action] = frozenset({Action.UPDATE, Action.REWRITE})
"""Actions whose commits write data files in place of others (the rewritten rows lose the
columns the writer could not read)."""

CHANGES_ROWS: frozenset[Action] = frozenset({
    Action.DELETE, Action.UPDATE, Action.REWRITE, Action.MANAGE_SNAPSHOTS,
})
"""Actions whose commits may remove or change existing rows (a snapshot rollback included)."""

SCHEMA_UPDATES: frozenset[str] = frozenset({"add-schema", "set-current-schema", "remove-schemas"})
"""Table update actions that change the table's schema."""


NAME_MAPPING = "schema.name-mapping.default"
"""The table property that binds columns of files written without field ids to the schema's
fields: rewriting it can bind a hidden column's values to a visible field."""


def changes_schema(updates: object) -> bool:
    """True when a commit's ``updates`` list adds, selects or removes schemas (removing old
    schemas forgets what a renamed hidden column was called) or sets or removes the table's
    name mapping (which file column is which field); anything that is not a list of update
    objects changes nothing here (its shape is judged elsewhere)."""
    if not isinstance(updates, list):
        return False
    return any(isinstance(u, dict) and (u.get("action") in SCHEMA_UPDATES or _maps_names(u))
               for u in updates)


def _maps_names(update: dict[str, Any]) -> bool:
    action = update.get("action")
    if action == "set-properties":
        changed = update.get("updates")
        return isinstance(changed, dict) and NAME_MAPPING in changed
    if action == "remove-properties":
        removed = update.get("removals")
        return isinstance(removed, list) and NAME_MAPPING in removed
    return False


def write_refusal(view: ReadView, actions: frozenset[Action], schema: Schema, *,
                  changes_schema: bool) -> str | None:
    """None when ``view``'s principal may commit ``actions`` to a table whose current schema is
    ``schema``; otherwise the 403 message. ``changes_schema``: the commit adds or selects a
    schema (see ``changes_schema``)."""
    return (_column_refusal(view, actions, schema, changes_schema)
            or _row_refusal(view, actions, changes_schema))


def _column_refusal(view: ReadView, actions: frozenset[Action], schema: Schema,
                    schema_change: bool) -> str | None:
    hidden = view.hidden(False)
    if not hidden:
        return None
    table = view.table.name
    if actions & REWRITES_DATA or schema_change:
        what = "changing the schema of" if schema_change else "rewriting data files of"
        return (f"commit refused: {what} {table} would drop values of columns you cannot see"
                f"{_named(view, hidden)}")
    required = frozenset(f.name for f in schema.fields if f.required and f.name in hidden)
    if Action.INSERT in actions and required:
        masked = _masked(view, required)
        if masked:
            verb = "is" if len(masked) == 1 else "are"
            return (f"cannot insert into {table}: column {', '.join(masked)} {verb} required "
                    "and hidden from you")
        return f"cannot insert into {table}: a required column is hidden from you"
    return None


def _row_refusal(view: ReadView, actions: frozenset[Action],
                 schema_change: bool = False) -> str | None:
    if view.row_filter is not None and schema_change:
        return (f"commit refused: a row filter limits what you may read of {view.table.name}, "
                "and changing the schema could change what the filter's columns mean")
    changing = actions & CHANGES_ROWS
    if view.row_filter is None or not changing:
        return None
    names = ", ".join(sorted(a.value for a in changing))
    return (f"commit refused: a row filter limits what you may read of {view.table.name}, and "
            f"this commit ({names}) could change rows outside your row filter")


def _masked(view: ReadView, columns: Iterable[str]) -> list[str]:
    """The columns the principal may know exist: masked and not denied, sorted."""
    return sorted(c for c in columns if c in view.masks and c not in view.denied)


def _named(view: ReadView, hidden: frozenset[str]) -> str:
    masked = _masked(view, hidden)
    return f" ({', '.join(masked)})" if masked else ""


REMOVES_ROWS = frozenset({"delete-files", "overwrite-files", "row-delta", "rewrite-files"})
"""Data operations that can remove or rewrite rows."""


def operation_refusal(view: ReadView, update: Mapping[str, Any],
                      hidden_ids: frozenset[int]) -> str | None:
    """Why a data operation (one ``updates`` entry) is refused *before* icegov builds it, or
    None: an equality delete keyed on a hidden column would remove rows by values the
    principal may not read (and the build's answers would reveal them); a row-filtered
    principal may not remove rows at all (``write_refusal`` says so later for ordinary
    commits). Hidden columns are never named. (A filter naming a hidden column is refused
    before, as one naming a column the table lacks: ``proxy.reads.operation_names``.)"""
    action = update.get("action")
    if view.row_filter is not None and action in REMOVES_ROWS:
        return (f"commit refused: {action} could change rows of {view.table.name} outside "
                "your row filter")
    for delete_file in update.get("added-delete-files") or ():
        ids = delete_file.get("equality-ids") if isinstance(delete_file, Mapping) else None
        if isinstance(ids, list) and set(ids) & hidden_ids:
            return (f"commit refused: an equality delete of {action} is keyed on a column "
                    "hidden from you")
    return None


def spec_refusal(view: ReadView, updates: object, hidden_ids: frozenset[int]) -> str | None:
    """A partition spec or sort order over a hidden column, refused before it lands: a
    partition column's values are in every file path and manifest (and would lock restricted
    readers out of the table), a sort order's in every file's ordering."""
    if not isinstance(updates, list) or not hidden_ids:
        return None
    for update in updates:
        if not isinstance(update, Mapping):
            continue
        body = update.get("spec") if update.get("action") == "add-spec" else \
            update.get("sort-order") if update.get("action") == "add-sort-order" else None
        fields = body.get("fields") if isinstance(body, Mapping) else None
        for field in fields if isinstance(fields, list) else ():
            if isinstance(field, Mapping) and field.get("source-id") in hidden_ids:
                return (f"commit refused: {view.table.name} cannot be partitioned or sorted by "
                        "a column hidden from you")
    return None
