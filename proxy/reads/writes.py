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
"""

from __future__ import annotations

from collections.abc import Iterable

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

SCHEMA_UPDATES: frozenset[str] = frozenset({"add-schema", "set-current-schema"})
"""Table update actions that change the table's schema."""


def changes_schema(updates: object) -> bool:
    """True when a commit's ``updates`` list adds a schema or sets the current one (anything
    that is not a list of update objects changes nothing here; its shape is judged elsewhere)."""
    if not isinstance(updates, list):
        return False
    return any(isinstance(u, dict) and u.get("action") in SCHEMA_UPDATES for u in updates)


def write_refusal(view: ReadView, actions: frozenset[Action], schema: Schema, *,
                  changes_schema: bool) -> str | None:
    """None when ``view``'s principal may commit ``actions`` to a table whose current schema is
    ``schema``; otherwise the 403 message. ``changes_schema``: the commit adds or selects a
    schema (see ``changes_schema``)."""
    return (_column_refusal(view, actions, schema, changes_schema)
            or _row_refusal(view, actions))


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


def _row_refusal(view: ReadView, actions: frozenset[Action]) -> str | None:
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
