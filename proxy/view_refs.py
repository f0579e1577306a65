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
parse is judged by every dotted name in it (columns included): only a reader who can see each
of them gets the view (fail closed); SQL that does not even tokenize, or is longer than
``MAX_SQL_CHARS``, is shown to nobody.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import sqlglot
from sqlglot import TokenType, exp
from sqlglot.errors import SqlglotError

from proxy.resources import Resource

Name = tuple[str, ...]
"""A dotted table reference, part by part (``("hr", "payroll")``)."""

_NAME_TOKENS = frozenset({TokenType.VAR, TokenType.IDENTIFIER})
MAX_SQL_CHARS = 256 * 1024
"""Longer SQL is not parsed (a view's definition is a query, not a program): fail closed."""
UNREADABLE: Name = ("",)
"""What SQL too long or too broken to read refers to: a name no table has."""
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
    for version in _versions(metadata):
        default = _default_namespace(version)
        for name in version_references(version):
            if not any(can_see(table) for table in denoted(name, default, catalog)):
                return name
    return None


def version_references(version: dict[str, Any]) -> Iterator[Name]:
    """The table references of every SQL representation of one view version."""
    for representation in version.get("representations") or ():
        if isinstance(representation, dict) and isinstance(representation.get("sql"), str):
            yield from sql_references(representation["sql"], representation.get("dialect"))


def sql_references(sql: str, dialect: Any = None) -> Iterator[Name]:
    """The table references of one SQL text; every dotted name when it does not parse; one
    name nobody can see when it is longer than ``MAX_SQL_CHARS`` (not read at all)."""
    if len(sql) > MAX_SQL_CHARS:
        yield UNREADABLE
        return
    read = _dialect(dialect)
    try:
        trees = sqlglot.parse(sql, read=read)
    except Exception:  # a parser's failure on hostile text: read it as tokens
        yield from _dotted_names(sql, read)
        return
    for tree in trees:
        if tree is not None:
            yield from _tables(tree)


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
    defined = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    for table in tree.find_all(exp.Table):
        parts = table.parts
        if not parts or not all(isinstance(part, exp.Identifier) for part in parts):
            continue  # a table function, VALUES, or a path
        name = tuple(part.name for part in parts)
        if len(name) == 1 and name[0].lower() in defined:
            continue
        yield name


def _dotted_names(sql: str, dialect: str | None) -> Iterator[Name]:
    """Every dotted name in ``sql`` (identifiers joined by dots), from its tokens alone; a
    text that does not even tokenize yields one name no reader can see."""
    try:
        tokens = sqlglot.tokenize(sql, read=dialect)
    except Exception:  # the tokenizer's failure on hostile text: fail closed
        yield UNREADABLE
        return
    current: list[str] = []
    joined = False
    for token in tokens:
        if token.token_type in _NAME_TOKENS and (joined or not current):
            current.append(token.text)
            joined = False
        elif token.token_type == TokenType.DOT and current:
            joined = True
        else:
            if current:
                yield tuple(current)
            current = [token.text] if token.token_type in _NAME_TOKENS else []
            joined = False
    if current:
        yield tuple(current)


def _dialect(name: Any) -> str | None:
    if not isinstance(name, str):
        return None
    try:
        sqlglot.Dialect.get_or_raise(name.lower())
    except (ValueError, SqlglotError):
        return None
    return name.lower()


def _versions(metadata: dict[str, Any]) -> Iterable[dict[str, Any]]:
    versions = metadata.get("versions")
    return [v for v in versions if isinstance(v, dict)] if isinstance(versions, list) else []


def _default_namespace(version: dict[str, Any]) -> Name:
    levels = version.get("default-namespace")
    if not isinstance(levels, list) or not all(isinstance(level, str) for level in levels):
        return ()
    return tuple(levels)
