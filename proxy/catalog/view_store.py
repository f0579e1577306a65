"""Where the embedded catalog keeps views: rows of SqlCatalog's ``iceberg_tables``, files in the
warehouse.

pyiceberg 0.12's SqlCatalog has no view support, but its schema (``v1``) has the
``iceberg_type`` column Java's JdbcCatalog uses to tell views from tables: a view is a row with
``iceberg_type = 'VIEW'`` pointing at its current view metadata file, written next to the view
(``<location>/metadata/NNNNN-<uuid>.metadata.json``). Tables and views share the row's key, so a
view can never take a table's name or the reverse (the database refuses the second row).
A replace swaps the row only if it still points at the metadata the change was applied to
(409 otherwise); a file written for a change that did not land is deleted.

A catalog database still on pyiceberg's ``v0`` schema (no ``iceberg_type``) cannot tell views
from tables: view endpoints answer 501 there.
"""

from __future__ import annotations

import uuid

from pyiceberg.catalog import Catalog, MetastoreCatalog
from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from pyiceberg.exceptions import NoSuchNamespaceError
from pyiceberg.typedef import Identifier
from pyiceberg.view.metadata import ViewMetadata
from sqlalchemy import ColumnElement, delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from proxy.catalog import store
from proxy.errors import AlreadyExists, BadRequest, CommitFailed, NotFound, NotSupported

VIEW_TYPE = "VIEW"
MAX_LOCATION = 1000


class NoSuchView(NotFound):
    error_type = "NoSuchViewException"


def _where(catalog: SqlCatalog, identifier: Identifier) -> tuple[ColumnElement[bool], ...]:
    _require_view_support(catalog)
    return (IcebergTables.catalog_name == catalog.name,
            IcebergTables.table_namespace == _namespace(identifier),
            IcebergTables.table_name == Catalog.table_name_from(identifier),
            IcebergTables.iceberg_type == VIEW_TYPE)


def metadata_location(catalog: SqlCatalog, identifier: Identifier) -> str:
    """Where the view's current metadata file is; 404 if there is no such view."""
    with Session(catalog.engine) as session:
        location = session.execute(
            select(IcebergTables.metadata_location).where(*_where(catalog, identifier))
        ).scalar_one_or_none()
    if location is None:
        raise NoSuchView(f"View does not exist: {'.'.join(identifier)}")
    return str(location)


def load(catalog: SqlCatalog, identifier: Identifier) -> tuple[str, ViewMetadata]:
    """(metadata location, metadata) of the view; 404 if there is no such view."""
    location = metadata_location(catalog, identifier)
    raw = store.read_metadata_bytes(catalog, location)
    return location, ViewMetadata.model_validate_json(raw)


def list_views(catalog: SqlCatalog, namespace: tuple[str, ...]) -> list[str]:
    """The names of the namespace's views, sorted; 404 if the namespace does not exist."""
    _require_view_support(catalog)
    _require_namespace(catalog, namespace)
    stmt = select(IcebergTables.table_name).where(
        IcebergTables.catalog_name == catalog.name,
        IcebergTables.table_namespace == Catalog.namespace_to_string(namespace),
        IcebergTables.iceberg_type == VIEW_TYPE,
    ).order_by(IcebergTables.table_name)
    with Session(catalog.engine) as session:
        return [str(name) for name in session.execute(stmt).scalars()]


def has_views(catalog: SqlCatalog, namespace: tuple[str, ...]) -> bool:
    """Does the namespace hold a view? (False on a ``v0`` database, which cannot hold one.)"""
    if getattr(catalog, "_schema_version", "v1") != "v1":
        return False
    stmt = select(IcebergTables.table_name).where(
        IcebergTables.catalog_name == catalog.name,
        IcebergTables.table_namespace == Catalog.namespace_to_string(namespace),
        IcebergTables.iceberg_type == VIEW_TYPE,
    ).limit(1)
    with Session(catalog.engine) as session:
        return session.execute(stmt).first() is not None


def create(catalog: SqlCatalog, identifier: Identifier, metadata: ViewMetadata) -> str:
    """Write the view's first metadata file and its row; 409 if the name is taken."""
    _require_view_support(catalog)
    _require_namespace(catalog, Catalog.namespace_from(identifier))
    location = _write(catalog, metadata, None)
    row = catalog._create_table_row(_namespace(identifier), Catalog.table_name_from(identifier),
                                    location)
    row["iceberg_type"] = VIEW_TYPE
    try:
        with Session(catalog.engine) as session:
            session.execute(insert(IcebergTables).values(**row))
            session.commit()
    except IntegrityError as exc:
        _delete_file(catalog, location)
        raise AlreadyExists(f"A table or view named {'.'.join(identifier)} already exists") \
            from exc
    return location


def replace(catalog: SqlCatalog, identifier: Identifier, base_location: str,
            metadata: ViewMetadata) -> str:
    """Point the view at new metadata if it still points at ``base_location``; else 409."""
    location = _write(catalog, metadata, base_location)
    with Session(catalog.engine) as session:
        result = session.execute(
            update(IcebergTables)
            .where(*_where(catalog, identifier),
                   IcebergTables.metadata_location == base_location)
            .values(metadata_location=location, previous_metadata_location=base_location))
        session.commit()
    if result.rowcount < 1:  # type: ignore[attr-defined]
        _delete_file(catalog, location)
        raise CommitFailed(f"View {'.'.join(identifier)} was changed or dropped concurrently")
    return location


def drop(catalog: SqlCatalog, identifier: Identifier) -> None:
    """Forget the view (its files stay, as for a table dropped without purge); 404 if absent."""
    with Session(catalog.engine) as session:
        result = session.execute(delete(IcebergTables).where(*_where(catalog, identifier)))
        session.commit()
    if result.rowcount < 1:  # type: ignore[attr-defined]
        raise NoSuchView(f"View does not exist: {'.'.join(identifier)}")


def rename(catalog: SqlCatalog, source: Identifier, destination: Identifier) -> None:
    """Move the view's row to ``destination``; 404 if either namespace or the view is missing,
    409 if a table or view already has the new name."""
    _require_namespace(catalog, Catalog.namespace_from(destination))
    try:
        with Session(catalog.engine) as session:
            result = session.execute(
                update(IcebergTables).where(*_where(catalog, source))
                .values(table_namespace=_namespace(destination),
                        table_name=Catalog.table_name_from(destination)))
            session.commit()
    except IntegrityError as exc:
        raise AlreadyExists(f"A table or view named {'.'.join(destination)} already exists") \
            from exc
    if result.rowcount < 1:  # type: ignore[attr-defined]
        raise NoSuchView(f"View does not exist: {'.'.join(source)}")


def _write(catalog: SqlCatalog, metadata: ViewMetadata, previous: str | None) -> str:
    version = 0 if previous is None else MetastoreCatalog._parse_metadata_version(previous) + 1
    location = f"{metadata.location}/metadata/{version:05d}-{uuid.uuid4()}.metadata.json"
    if len(location) > MAX_LOCATION:  # the row's column holds at most 1000 characters
        raise BadRequest("the view location is too long")
    io = catalog._load_file_io(location=location)
    try:
        with io.new_output(location).create(overwrite=False) as stream:
            stream.write(metadata.model_dump_json().encode())
    except OSError as exc:  # never echo the OS error: it may name host paths
        raise BadRequest("the view location cannot hold metadata files") from exc
    return location


def _delete_file(catalog: SqlCatalog, location: str) -> None:
    catalog._load_file_io(location=location).delete(location)


def _namespace(identifier: Identifier) -> str:
    return Catalog.namespace_to_string(Catalog.namespace_from(identifier))


def _require_namespace(catalog: SqlCatalog, namespace: tuple[str, ...]) -> None:
    if not catalog.namespace_exists(namespace):
        raise NoSuchNamespaceError(f"Namespace does not exist: {'.'.join(namespace)}")


def _require_view_support(catalog: SqlCatalog) -> None:
    if getattr(catalog, "_schema_version", "v1") != "v1":
        raise NotSupported("the embedded catalog's database predates view support (pyiceberg "
                           "schema v0): views are unavailable until it is migrated to v1")
