"""The embedded catalog's storage: pyiceberg's SqlCatalog plus what its public API lacks.

SqlCatalog keeps one row per table pointing at the current metadata file. Three things are added
here: reading a table's current metadata file as raw bytes (loadTable without re-serialising),
committing changes to several tables atomically in one SQL transaction (each row is swapped only
if it still points at the metadata the change was validated against), and registering a table
only once its metadata file has been read and parsed (a failed register registers nothing).
"""

from __future__ import annotations

import gzip
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import CommitTableResponse, Table
from pyiceberg.table.update import (
    AssertCreate,
    SetLocationUpdate,
    SetPropertiesUpdate,
    TableRequirement,
    TableUpdate,
)
from pyiceberg.typedef import EMPTY_DICT, Identifier, Properties
from sqlalchemy import insert, make_url, select, update
from sqlalchemy.exc import ArgumentError, IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session

from proxy.catalog.adoption import adoption_lock
from proxy.catalog.locations import ObjectStoreRoot, Warehouse
from proxy.errors import BadRequest

CATALOG_NAME = "icegov"


@dataclass(frozen=True)
class TableChange:
    """Requirements and updates for one table, parsed from a commit request."""

    identifier: Identifier
    requirements: tuple[TableRequirement, ...]
    updates: tuple[TableUpdate, ...]

    @property
    def creates(self) -> bool:
        """True for the create-transaction form (``assert-create``)."""
        return any(isinstance(r, AssertCreate) for r in self.requirements)


def open_catalog(db_uri: str, warehouse: Path | str,
                 file_io: Mapping[str, str] | None = None) -> SqlCatalog:
    """The SqlCatalog behind the embedded REST catalog, creating its tables if needed.

    ``warehouse`` is a local directory (created if missing) or an object-store URI
    (``s3://bucket/prefix``, ValueError if it is not a plain one); ``file_io`` are the FileIO
    properties the catalog reads and writes an object-store warehouse with (``py-io-impl``
    refused: icegov chooses the code it runs). Replicas starting together on a fresh database
    race to create the tables (SqlCatalog checks, then creates): the loser's error means the
    tables now exist, so it opens again."""
    properties = _catalog_properties(db_uri, warehouse, file_io or {})
    _check_driver(db_uri)
    try:
        return EmbeddedSqlCatalog(CATALOG_NAME, **properties)
    except SQLAlchemyError:
        return EmbeddedSqlCatalog(CATALOG_NAME, **properties)


def _check_driver(db_uri: str) -> None:
    """``CatalogDriverMissing`` unless SQLAlchemy knows the database and its driver imports."""
    try:
        make_url(db_uri).get_dialect().import_dbapi()
    except (ImportError, ArgumentError) as exc:
        reason = (f"its driver ({exc.name}) is not installed" if isinstance(exc, ImportError)
                  else "not a database SQLAlchemy knows")
        scheme = db_uri.split(":", 1)[0]
        raise CatalogDriverMissing(f"catalog database {scheme}: {reason}; postgresql:// uses "
                                   "psycopg 3, which icegov ships with") from None


class CatalogDriverMissing(ValueError):
    """The catalog database URI names a driver that is not installed (or no database)."""


class EmbeddedSqlCatalog(SqlCatalog):
    """pyiceberg's SqlCatalog, with a FileIO configured by the operator alone.

    SqlCatalog builds a table's FileIO from the catalog's properties *and the table's*, which
    any writer may set (``buffer-size``, ``s3.endpoint``...): here table properties never
    reach the FileIO the catalog reads and writes metadata with."""

    def _load_file_io(self, properties: Properties = EMPTY_DICT,
                      location: str | None = None) -> FileIO:
        return load_file_io(dict(self.properties), location)


def _catalog_properties(db_uri: str, warehouse: Path | str,
                        file_io: Mapping[str, str]) -> dict[str, str]:
    if isinstance(warehouse, Path):
        warehouse.mkdir(parents=True, exist_ok=True)
        return {"uri": db_uri, "warehouse": warehouse.resolve().as_uri()}
    if any(key.startswith("py-io-impl") for key in file_io):
        raise ValueError("py-io-impl may not be set (icegov chooses its FileIO)")
    location = ObjectStoreRoot.of(warehouse).uri
    return {**file_io, "uri": db_uri, "warehouse": location}


def metadata_location(catalog: SqlCatalog, identifier: Identifier) -> str:
    """Where the table's current metadata file is; NoSuchTableError if there is no table."""
    namespace = Catalog.namespace_to_string(Catalog.namespace_from(identifier))
    stmt = select(IcebergTables.metadata_location).where(
        IcebergTables.catalog_name == catalog.name,
        IcebergTables.table_namespace == namespace,
        IcebergTables.table_name == Catalog.table_name_from(identifier),
    )
    if (only_tables := catalog._iceberg_type_filter()) is not None:  # a view is not a table
        stmt = stmt.where(only_tables)
    with Session(catalog.engine) as session:
        location = session.execute(stmt).scalar_one_or_none()
    if location is None:
        raise NoSuchTableError(f"Table does not exist: {'.'.join(identifier)}")
    return str(location)


def read_metadata_bytes(catalog: SqlCatalog, location: str) -> bytes:
    """The metadata file's JSON, exactly as stored (gunzipped if it was written compressed)."""
    io = catalog._load_file_io(location=location)
    with io.new_input(location).open() as stream:
        raw: bytes = stream.read()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


def register_table(catalog: SqlCatalog, identifier: Identifier, location: str,
                   overwrite: bool) -> None:
    """Point ``identifier`` at an existing metadata file, or change nothing.

    The file must lie under the warehouse and parse as table metadata (400 otherwise, with one
    message whatever the reason, so that a caller learns nothing about other files); only then
    is the row written (``overwrite``: an existing table's row is repointed). Held under the
    catalog's adoption lock, checks included (``proxy.catalog.adoption``).
    """
    with adoption_lock(catalog).adopting():
        _register(catalog, identifier, location, overwrite)


def _register(catalog: SqlCatalog, identifier: Identifier, location: str,
              overwrite: bool) -> None:
    _check_registrable(catalog, location)
    namespace_levels = Catalog.namespace_from(identifier)
    if not catalog.namespace_exists(namespace_levels):
        raise NoSuchNamespaceError(f"Namespace does not exist: {'.'.join(namespace_levels)}")
    namespace = Catalog.namespace_to_string(namespace_levels)
    name = Catalog.table_name_from(identifier)
    with Session(catalog.engine) as session:
        if overwrite and _repoint(catalog, session, namespace, name, location):
            session.commit()
            return
        try:
            session.execute(insert(IcebergTables).values(
                **catalog._create_table_row(namespace, name, location)))
            session.commit()
        except IntegrityError as exc:
            raise TableAlreadyExistsError(f"Table {namespace}.{name} already exists") from exc


def _check_registrable(catalog: SqlCatalog, location: str) -> None:
    unreadable = BadRequest("metadata-location is not a table metadata file in this catalog's "
                            "warehouse")
    warehouse = Warehouse(catalog)
    if not warehouse.may_read(location):
        raise unreadable
    try:
        io = catalog._load_file_io(location=location)
        metadata = FromInputFile.table_metadata(io.new_input(location))
    except Exception as exc:  # missing, unreadable or not metadata: the same answer either way
        raise unreadable from exc
    try:
        warehouse.check_metadata(metadata)
        warehouse.check_named_files(metadata)
    except BadRequest as exc:  # a file that names a place outside: the same answer again
        raise unreadable from exc


def _repoint(catalog: SqlCatalog, session: Session, namespace: str, name: str,
             location: str) -> bool:
    current = select(IcebergTables.metadata_location).where(
        IcebergTables.catalog_name == catalog.name, IcebergTables.table_namespace == namespace,
        IcebergTables.table_name == name)
    if (only_tables := catalog._iceberg_type_filter()) is not None:  # never repoint a view
        current = current.where(only_tables)
    previous = session.execute(current).scalar_one_or_none()
    if previous is None:
        return False
    session.execute(
        update(IcebergTables)
        .where(IcebergTables.catalog_name == catalog.name,
               IcebergTables.table_namespace == namespace, IcebergTables.table_name == name)
        .values(metadata_location=location, previous_metadata_location=previous))
    return True


def commit_atomically(catalog: SqlCatalog, changes: list[TableChange]) -> list[CommitTableResponse]:
    """Apply every change or none: validate all, write new metadata, swap all rows in one txn;
    under the catalog's adoption lock (a commit may add any file to a table)."""
    with adoption_lock(catalog).adopting():
        return _commit_atomically(catalog, changes)


def _commit_atomically(catalog: SqlCatalog,
                       changes: list[TableChange]) -> list[CommitTableResponse]:
    staged = [_stage(catalog, change) for change in changes]
    written = [s for s in staged if s.changed]
    for s in written:
        catalog._write_metadata(s.new.metadata, s.new.io, s.new.metadata_location)
    try:
        with Session(catalog.engine) as session:
            for s in written:
                _swap_row(catalog, session, s)
            session.commit()
    except (CommitFailedException, TableAlreadyExistsError):
        for s in written:
            s.new.io.delete(s.new.metadata_location)
        raise
    return [s.response() for s in staged]


@dataclass
class _Staged:
    change: TableChange
    current_location: str | None
    new: Table
    changed: bool

    def response(self) -> CommitTableResponse:
        return CommitTableResponse.model_validate(
            {"metadata": self.new.metadata, "metadata-location": self.new.metadata_location})


def _stage(catalog: SqlCatalog, change: TableChange) -> _Staged:
    try:
        current = catalog.load_table(change.identifier)
    except NoSuchTableError:
        if not change.creates:
            raise
        current = None
    warehouse = Warehouse(catalog)
    _check_updates(warehouse, change.updates)
    try:
        staged = catalog._update_and_stage_table(current, change.identifier, change.requirements,
                                                 change.updates)
    except StopIteration as exc:  # pyiceberg looking up a schema, spec or order that is not there
        raise BadRequest(f"the commit for {'.'.join(change.identifier)} leaves the table without "
                         "a current schema, partition spec or sort order") from exc
    warehouse.check_metadata(staged.metadata)
    if current is not None and staged.metadata == current.metadata:
        return _Staged(change, current.metadata_location, current, changed=False)
    location = current.metadata_location if current is not None else None
    return _Staged(change, location, staged, changed=True)


def _check_updates(warehouse: Warehouse, updates: tuple[TableUpdate, ...]) -> None:
    """400 for a location or property update the warehouse refuses, before pyiceberg stages
    the change (staging already loads the FileIO and location provider the properties name)."""
    for table_update in updates:
        if isinstance(table_update, SetPropertiesUpdate):
            warehouse.check_table_properties(table_update.updates)
        elif isinstance(table_update, SetLocationUpdate):
            warehouse.check(table_update.location, "table location")


def _swap_row(catalog: SqlCatalog, session: Session, staged: _Staged) -> None:
    identifier = staged.change.identifier
    namespace = Catalog.namespace_to_string(Catalog.namespace_from(identifier))
    name = Catalog.table_name_from(identifier)
    new_location = staged.new.metadata_location
    if staged.current_location is None:
        try:
            with session.begin_nested():
                session.execute(insert(IcebergTables).values(
                    **catalog._create_table_row(namespace, name, new_location)))
        except IntegrityError as exc:
            raise TableAlreadyExistsError(f"Table {namespace}.{name} already exists") from exc
        return
    result = session.execute(
        update(IcebergTables)
        .where(
            IcebergTables.catalog_name == catalog.name,
            IcebergTables.table_namespace == namespace,
            IcebergTables.table_name == name,
            IcebergTables.metadata_location == staged.current_location,
        )
        .values(metadata_location=new_location, previous_metadata_location=staged.current_location)
    )
    if result.rowcount < 1:  # type: ignore[attr-defined]
        raise CommitFailedException(f"Table {namespace}.{name} was updated concurrently")
