"""The tables a view's SQL reads, as the names a reader must be able to see.

A view's definition names the tables it reads (``SELECT name, salary FROM hr.payroll``); a
reader who may load the view but not see ``hr.payroll`` would learn that table's name and
columns from it. Every SQL representation of every version is parsed (sqlglot, in the
representation's dialect when sqlglot knows it) and each table reference is turned into the
tables it may denote:

- ``t`` is ``t`` in the version's ``default-namespace``;
- ``a.b.t`` is namespace ``a.b``, or (the first part naming the engine's catalog) ``b``;
- ``…t.snapshots`` (a metadata table's name last) may read table ``…t``: tried too.

A reference is seen when the reader can see one of those tables. Names defined by the query
itself (common table expressions) and table functions are not references. SQL that does not
parse, or that is past ``MAX_PARSED_CHARS`` for the view, is judged by every dotted name in it
(columns and keywords included): only a reader who can see each of them gets the view (fail
closed).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.optimizer.scope import Scope, traverse_scope

from proxy.resources import Resource

Name = tuple[str, ...]
"""A dotted table reference, part by part (``("hr", "payroll")``)."""

MAX_PARSED_CHARS = 64 * 1024
"""SQL parsed per view, all versions together; beyond it, SQL is scanned for dotted names."""
MAX_SCANNED_NAMES = 10_000
"""Distinct dotted names a scan considers; more is read as a name nobody can see."""
UNREADABLE: Name = ("",)
"""A name no table has: what SQL that cannot be read in bounds refers to (fail closed)."""
_DIALECTS = frozenset(d.value for d in sqlglot.Dialects if d.value)
_NAME = r'(?:`(?:[^`]|``)*`|"(?:[^"]|"")*"|[^\W\d][\w$]*)'
_DOTTED = re.compile(_NAME + r"(?:\s*\.\s*" + _NAME + ")*")
_PART = re.compile(_NAME)
METADATA_TABLES = frozenset({
    "all_data_files", "all_delete_files", "all_entries", "all_files", "all_manifests",
    "data_files", "delete_files", "entries", "files", "history", "manifests",
    "metadata_log_entries", "partitions", "position_deletes", "refs", "snapshots",
})
"""Iceberg's metadata tables: ``db.t.snapshots`` may read table ``db.t``."""


def unseen_reference(metadata: dict[str, Any], catalog: str,
                     can_see: Callable[[Resource], bool]) -> Name | None:
    """The first table reference of the view ``metadata`` that names no table the reader can
    see (``can_see``), or None when it can see what every version reads."""
    reader = _SqlReader()
    for version in _versions(metadata):
        default = _default_namespace(version)
        for name in reader.references(version):
            if not any(can_see(table) for table in denoted(name, default, catalog)):
                return name
    return None


def sql_references(sql: str, dialect: Any = None) -> Iterator[Name]:
    """The table references of one SQL text; every dotted name when it does not parse or is
    longer than ``MAX_PARSED_CHARS``."""
    return _SqlReader().read(sql, dialect)


class _SqlReader:
    """Reads the SQL of one view: each (text, dialect) once, at most ``MAX_PARSED_CHARS``
    parsed in all (the rest is scanned for dotted names, which is linear and fast)."""

    def __init__(self) -> None:
        self._budget = MAX_PARSED_CHARS
        self._seen: set[tuple[str, str | None]] = set()

    def references(self, version: dict[str, Any]) -> Iterator[Name]:
        """The table references of every SQL representation of one view version."""
        for representation in version.get("representations") or ():
            if isinstance(representation, dict) and isinstance(representation.get("sql"), str):
                yield from self.read(representation["sql"], representation.get("dialect"))

    def read(self, sql: str, dialect: Any) -> Iterator[Name]:
        read = _dialect(dialect)
        if (sql, read) in self._seen:
            return iter(())
        self._seen.add((sql, read))
        if len(sql) > self._budget:
            self._budget = 0
            return dotted_names(sql)
        self._budget -= len(sql)
        try:
            trees = sqlglot.parse(sql, read=read)
        except Exception:  # a parser's failure on hostile text: read its dotted names
            return dotted_names(sql)
        return (name for tree in trees if tree is not None for name in _tables(tree))


def dotted_names(sql: str) -> Iterator[Name]:
    """Every dotted name in ``sql`` (words and quoted names joined by dots: columns, keywords
    and tables alike), each once; past ``MAX_SCANNED_NAMES`` distinct ones, a name nobody can
    see (fail closed)."""
    seen: set[Name] = set()
    for match in _DOTTED.finditer(sql):
        name = tuple(_unquoted(part) for part in _PART.findall(match.group(0)))
        if name in seen:
            continue
        if len(seen) >= MAX_SCANNED_NAMES:
            yield UNREADABLE
            return
        seen.add(name)
        yield name


def denoted(name: Name, default: Name, catalog: str) -> Iterator[Resource]:
    """The tables ``name`` may denote (see the module's docstring)."""
    if not name or not all(name):
        return
    splits: list[tuple[Name, str]] = [(default, name[0])] if len(name) == 1 else [
        (name[:-1], name[-1])]
    if len(name) >= 3:
        splits.append((name[1:-1], name[-1]))  # the first part is a catalog
    if len(name) >= 2 and name[-1].lower() in METADATA_TABLES:
        splits.append((name[:-2] or default, name[-2]))
        if len(name) >= 4:
            splits.append((name[1:-2], name[-2]))
    for namespace, table in splits:
        if namespace:
            yield Resource(catalog, namespace, table)


def _tables(tree: exp.Expr) -> Iterator[Name]:
    """Every table the query names; only a one-part name that sqlglot's scopes resolve to a
    common table expression in scope is left out. A function in a table's place is read by
    its dotted names (``IDENTIFIER('hr.payroll')`` by the name it spells; with anything but a
    literal, a name nobody can see)."""
    defined = _cte_references(tree)
    for table in tree.find_all(exp.Table):
        if id(table) in defined:
            continue
        parts = table.parts
        if parts and all(isinstance(part, exp.Identifier) for part in parts):
            yield tuple(part.name for part in parts)
        else:
            yield from _function_names(table)


def _cte_references(tree: exp.Expr) -> set[int]:
    """The table nodes that are references to a common table expression in their scope
    (none when the scopes cannot be built: every name then counts as a table)."""
    try:
        scopes = traverse_scope(tree)
    except Exception:  # a scope sqlglot cannot build: count every name
        return set()
    return {id(table) for scope in scopes for table in scope.tables
            if len(table.parts) == 1 and isinstance(
                scope.sources.get(table.alias_or_name), Scope)}


def _function_names(table: exp.Table) -> Iterator[Name]:
    call = table.this
    if isinstance(call, exp.Anonymous) and str(call.name).lower() == "identifier":
        argument = call.expressions[0] if len(call.expressions) == 1 else None
        if isinstance(argument, exp.Literal) and argument.is_string:
            yield from dotted_names(argument.name)
        else:
            yield UNREADABLE
        return
    yield from dotted_names(table.sql())

def _dialect(name: Any) -> str | None:
    """The sqlglot dialect of a representation's ``dialect`` (None: sqlglot's own)."""
    return name.lower() if isinstance(name, str) and name.lower() in _DIALECTS else None


def _unquoted(part: str) -> str:
    if len(part) >= 2 and part[0] == part[-1] and part[0] in "`\"":
        return part[1:-1].replace(part[0] * 2, part[0])
    return part


def _versions(metadata: dict[str, Any]) -> Iterable[dict[str, Any]]:
    versions = metadata.get("versions")
    return [v for v in versions if isinstance(v, dict)] if isinstance(versions, list) else []


def _default_namespace(version: dict[str, Any]) -> Name:
    levels = version.get("default-namespace")
    if not isinstance(levels, list) or not all(isinstance(level, str) for level in levels):
        return ()
    return tuple(levels)
