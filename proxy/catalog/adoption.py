"""Purges against the catalog writes that adopt files, one at a time.

A purge learns what the live tables and views hold (their roots, the files their metadata and
manifests name) and then deletes what only the dropped table held. A write that lands in
between — a table registered from the dropped table's metadata file (an undrop), a create at
its location, a commit adding its data files — would be unknown to the purge and lose its
files. So a purge runs alone: every catalog write that can adopt files holds the catalog's
adoption lock shared for the whole write (its checks included), a purge holds it exclusively
from what it learns to its last delete. A write that waits for a purge then finds the files
the purge deleted gone, and fails its own checks, instead of landing on nothing.

In one process the lock is a readers-writer lock that lets a waiting purge in before new
writes; across processes on one PostgreSQL catalog (replicas) it is also a PostgreSQL advisory
lock, session level, taken on a connection of its own. (SQLite catalogs are one process's.)
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from pyiceberg.catalog.sql import SqlCatalog
from sqlalchemy import Connection, Engine, create_engine, text


class _SharedOrAlone:
    """A readers-writer lock: many holders share it, or one holds it alone. A holder waiting
    to be alone goes before holders that come to share it after it."""

    def __init__(self) -> None:
        self._turn = threading.Condition()
        self._sharing = 0
        self._alone = False
        self._waiting_alone = 0

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._turn:
            self._turn.wait_for(lambda: not self._alone and not self._waiting_alone)
            self._sharing += 1
        try:
            yield
        finally:
            with self._turn:
                self._sharing -= 1
                self._turn.notify_all()

    @contextmanager
    def alone(self) -> Iterator[None]:
        with self._turn:
            self._waiting_alone += 1
            self._turn.wait_for(lambda: not self._alone and not self._sharing)
            self._waiting_alone -= 1
            self._alone = True
        try:
            yield
        finally:
            with self._turn:
                self._alone = False
                self._turn.notify_all()


class AdoptionLock:
    """The adoption lock of one catalog (see the module's docstring)."""

    def __init__(self, catalog: SqlCatalog) -> None:
        self._local = _SharedOrAlone()
        self._locks: Engine | None = None
        if catalog.engine.dialect.name == "postgresql":
            # connections of its own: a write holds one for its whole length, beside the ones
            # the catalog's pool lends it
            self._locks = create_engine(catalog.engine.url, pool_size=2, max_overflow=-1,
                                        pool_pre_ping=True)
        self._key = int.from_bytes(hashlib.sha256(
            f"icegov-adoption:{catalog.name}".encode()).digest()[:8], "big", signed=True)

    @contextmanager
    def adopting(self) -> Iterator[None]:
        """Held (shared) by a catalog write that may adopt files."""
        with self._local.shared(), self._advisory("pg_advisory_lock_shared",
                                                  "pg_advisory_unlock_shared"):
            yield

    @contextmanager
    def purging(self) -> Iterator[None]:
        """Held (alone) by a purge, from what it learns to its last delete."""
        with self._local.alone(), self._advisory("pg_advisory_lock", "pg_advisory_unlock"):
            yield

    @contextmanager
    def _advisory(self, take: str, give: str) -> Iterator[None]:
        if self._locks is None:
            yield
            return
        with self._locks.connect() as connection:
            connection.execute(text(f"SELECT {take}(:key)"), {"key": self._key})
            connection.commit()
            try:
                yield
            finally:
                _give_back(connection, give, self._key)


def _give_back(connection: Connection, give: str, key: int) -> None:
    """Release the advisory lock; a connection that cannot say so is closed, never pooled
    with the lock still held (closing the session releases it)."""
    try:
        connection.execute(text(f"SELECT {give}(:key)"), {"key": key})
        connection.commit()
    except Exception:
        connection.invalidate()
        raise


_LOCKS: dict[tuple[str, str], AdoptionLock] = {}
_LOCKS_LOCK = threading.Lock()


def adoption_lock(catalog: SqlCatalog) -> AdoptionLock:
    """The one adoption lock in this process of the catalog ``catalog`` opens (every catalog
    object on one database and catalog name shares it)."""
    key = (catalog.engine.url.render_as_string(hide_password=True), catalog.name)
    with _LOCKS_LOCK:
        lock = _LOCKS.get(key)
        if lock is None:
            lock = _LOCKS[key] = AdoptionLock(catalog)
        return lock
