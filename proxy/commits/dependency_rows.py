"""Column dependencies checked at commit time: the property a commit leaves, and the rows it adds.

``commit_dependencies`` is the table's ``icegov.column-dependencies`` after a commit, validated
(400, ``InvalidDependencies``) whenever the commit sets it or changes the schema it names.
``check_added_rows`` reads the data files each new snapshot adds (only the columns the
dependencies name, through ``rowfiles.ContentReader``, within the commit's row budget) and
compares every row: a row that breaks a dependency refuses the commit (``DependencyBroken``,
400, nothing lands); a snapshot whose every added row was read and held gets a stamp
(``dependencies.VERIFIED``); one that could not be read whole (budget, unreadable file) gets
none, and planning never prunes its files by the dependencies — unless it rewrites history
(``SnapshotChange.rewrites_history``: its entries may date files to an older, stamped
snapshot), which is then refused (400).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.manifest import ManifestContent
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata

from proxy.commits.dependencies import (
    PROPERTY,
    Dependency,
    InvalidDependencies,
    digest,
    parse_dependencies,
)
from proxy.commits.diff import SnapshotChange
from proxy.commits.manifests import ManifestReader
from proxy.commits.rowfiles import ContentReader, RowBudget, RowCheckFailed, RowFile, row_file


class DependencyBroken(InvalidDependencies):
    """Rows a commit adds break a column dependency the table declares."""


def commit_dependencies(base: TableMetadata | None, updates: Sequence[Any]
                        ) -> tuple[Dependency, ...]:
    """The dependencies the table declares once ``updates`` apply to ``base`` (None: a
    create). Raises ``InvalidDependencies`` when the commit sets the property, or changes the
    schema while the property is set, and it does not hold for the resulting schema; an
    untouched invalid property declares none."""
    text = None if base is None else base.properties.get(PROPERTY)
    touched = False
    for update in updates:
        action = update.get("action") if isinstance(update, dict) else None
        if action == "set-properties" and isinstance(update.get("updates"), dict) \
                and PROPERTY in update["updates"]:
            text, touched = update["updates"][PROPERTY], True
        elif action == "remove-properties" and isinstance(update.get("removals"), list) \
                and PROPERTY in update["removals"]:
            text, touched = None, False
        elif action in ("add-schema", "set-current-schema"):
            touched = touched or text is not None
    if not text:
        return ()
    schema = _schema_after(base, updates)
    if schema is None:
        if touched:
            raise InvalidDependencies(f"{PROPERTY} cannot be checked: the commit's schema "
                                      "cannot be read")
        return ()
    try:
        return parse_dependencies(text, schema)
    except InvalidDependencies:
        if touched:
            raise
        return ()


def _schema_after(base: TableMetadata | None, updates: Sequence[Any]) -> Schema | None:
    """The current schema after ``updates`` (None when it cannot be told)."""
    schemas = {} if base is None else {s.schema_id: s for s in base.schemas}
    current = None if base is None else base.current_schema_id
    last_added = None
    try:
        for update in updates:
            if not isinstance(update, dict):
                continue
            if update.get("action") == "add-schema":
                schema = Schema.model_validate(update.get("schema"))
                schemas[schema.schema_id] = schema
                last_added = schema.schema_id
            elif update.get("action") == "set-current-schema":
                wanted = update.get("schema-id")
                current = last_added if wanted == -1 else wanted
    except (ValueError, TypeError):
        return None
    return schemas.get(current) if isinstance(current, int) else None


def check_added_rows(dependencies: Sequence[Dependency], changes: Iterable[SnapshotChange],
                     manifest_lists: Mapping[int, str], reader: ManifestReader,
                     base: TableMetadata | None, budget: RowBudget,
                     notes: list[str]) -> dict[int, str]:
    """The stamp (``digest``) of each new snapshot whose added rows all hold ``dependencies``;
    ``DependencyBroken`` when a row breaks one. Why a snapshot got no stamp goes to
    ``notes``."""
    if not dependencies or base is None:
        return {}
    stamp = digest(dependencies)
    schema = _projection(dependencies)
    stamps: dict[int, str] = {}
    for change in changes:
        keys = {f.key for f in change.added_data}
        try:
            files = _added_files(reader, manifest_lists[change.snapshot_id], keys)
            content = ContentReader(reader.io, base, budget)
            for file in files:
                _check_file(dependencies, content.data_rows(file, schema), file.path)
        except RowCheckFailed as failed:
            if change.rewrites_history:  # its entries may date files to verified snapshots
                raise InvalidDependencies(
                    f"commit refused: snapshot {change.snapshot_id} rewrites the table's "
                    f"history and its rows cannot be checked against the table's column "
                    f"dependencies ({failed})") from None
            notes.append(f"column dependencies not checked for snapshot "
                         f"{change.snapshot_id} ({failed}): its files are not pruned by them")
            continue
        stamps[change.snapshot_id] = stamp
        if keys:
            notes.append(f"column dependencies hold on the {len(keys)} data files snapshot "
                         f"{change.snapshot_id} adds")
    return stamps


def _projection(dependencies: Sequence[Dependency]) -> Schema:
    fields = {f.field_id: f for d in dependencies for f in (d.source, d.dependent)}
    return Schema(*fields.values())


def _added_files(reader: ManifestReader, manifest_list: str,
                 keys: set[Any]) -> list[RowFile]:
    files: list[RowFile] = []
    for manifest in reader.claimed_manifests(manifest_list):
        if manifest.content != ManifestContent.DATA:
            continue
        files += [row_file(e) for e in reader.entries(manifest)
                  if e.live and e.file.key in keys]
    if len({f.key for f in files}) != len(keys):
        raise RowCheckFailed("the added data files could not all be found in its manifests")
    return files


def _check_file(dependencies: Sequence[Dependency], rows: pa.Table, path: str) -> None:
    for dependency in dependencies:
        source = rows.column(dependency.source.name)
        dependent = rows.column(dependency.dependent.name)
        broken = _broken_rows(dependency, source, dependent)
        if broken:
            raise DependencyBroken(
                f"commit refused: {broken} rows of {path.rsplit('/', 1)[-1]} break the column "
                f"dependency {dependency} ({dependency.dependent.name} must be "
                f"{dependency.transform}({dependency.source.name}), null when it is null)")


def _broken_rows(dependency: Dependency, source: pa.ChunkedArray,
                 dependent: pa.ChunkedArray) -> int:
    """Rows where ``dependent`` is not ``transform(source)`` (nulls only match nulls)."""
    try:
        apply = dependency.transform.pyarrow_transform(dependency.source.field_type)
        expected = apply(source.combine_chunks()).cast(dependent.type)
    except Exception as exc:  # e.g. bucket[N] without pyiceberg-core: checked, never guessed
        raise RowCheckFailed(f"{dependency.transform} could not be computed") from exc
    actual = dependent.combine_chunks()
    same = pc.fill_null(pc.equal(expected, actual), False)
    both_null = pc.and_(pc.is_null(expected), pc.is_null(actual))
    held = pc.or_(same, both_null)
    if pa.types.is_floating(actual.type):
        held = pc.or_(held, pc.fill_null(pc.and_(pc.is_nan(expected), pc.is_nan(actual)),
                                         False))
    return len(actual) - pc.sum(held.cast(pa.int64())).as_py() if len(actual) else 0
