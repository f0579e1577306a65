"""The durable store of Idempotency-Key claims and answers, on SQLAlchemy (SQLite, PostgreSQL).

One row per key in ``icegov_idempotency`` (named so it can live beside the embedded catalog's
tables). A request claims its key with one INSERT that does nothing on a conflict, so of two
requests — on one replica or on two sharing a PostgreSQL database — exactly one runs. The row
stays ``pending`` until the runner stores its final answer (``done``) or releases the claim
(the row is deleted). Every row has an expiry: a done row's is its lifetime, a pending row's is
the claim's lease, after which another request may take the key over (its runner died). Each
claim carries a random token, so a runner whose claim was taken over never overwrites the new
one. Times are epoch seconds from the replicas' clocks.

The methods are blocking; ``proxy.idempotency.guard`` calls them in worker threads.
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Column,
    Engine,
    Float,
    Integer,
    LargeBinary,
    MetaData,
    Row,
    String,
    Table,
    Text,
    create_engine,
    delete,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.sql.expression import Executable

TABLE_NAME = "icegov_idempotency"
PENDING = "pending"
DONE = "done"

_metadata = MetaData()
_keys = Table(
    TABLE_NAME, _metadata,
    Column("key", String(36), primary_key=True),
    Column("principal", String(512), nullable=False),
    Column("fingerprint", String(64), nullable=False),
    Column("state", String(8), nullable=False),
    Column("claim", String(36), nullable=False),
    Column("status", Integer, nullable=True),
    Column("content_type", String(255), nullable=True),
    Column("body", LargeBinary, nullable=True),
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False, index=True),
    Column("rights", Text, nullable=True),
)
ADDED_COLUMNS = {"rights": "TEXT"}
"""Columns added since the table was first shipped: added to an older table on first use."""


@dataclass(frozen=True)
class StoredAnswer:
    """A final answer as kept for replay."""

    status: int
    content_type: str | None
    body: bytes
    rights: tuple[tuple[str, str], ...] | None = ()
    """The (action, resource) rights the answer was given on: a replay needs them still (None:
    kept by an older icegov, unknown)."""


@dataclass(frozen=True)
class Claimed:
    """This request holds the key; ``token`` proves it when storing or releasing."""

    token: str


@dataclass(frozen=True)
class Existing:
    """Another request holds the key: its binding, and its answer once it is done."""

    principal: str
    fingerprint: str
    answer: StoredAnswer | None


class IdempotencyStore:
    """Claims, answers and expiry of Idempotency-Keys in one SQL table."""

    def __init__(self, uri: str) -> None:
        self._engine = _engine(uri)
        self._ready = False
        self._lock = threading.Lock()

    def claim(self, key: str, principal: str, fingerprint: str, now: float,
              lease: float) -> Claimed | Existing:
        """Claim ``key`` for this request, or describe the live request that holds it."""
        self._ensure_table()
        while True:
            token = str(uuid.uuid4())
            row = {"key": key, "principal": principal, "fingerprint": fingerprint,
                   "state": PENDING, "claim": token, "created_at": now,
                   "expires_at": now + lease}
            with self._engine.begin() as conn:
                if conn.execute(self._insert_new(row)).first() is not None:
                    return Claimed(token)
                found = conn.execute(select(_keys).where(_keys.c.key == key)).first()
                if found is not None and found.expires_at >= now:
                    return _existing(found)
                conn.execute(delete(_keys).where(_keys.c.key == key,
                                                 _keys.c.expires_at < now))

    def finish(self, key: str, token: str, answer: StoredAnswer, expires_at: float) -> bool:
        """Store the final answer of the claim ``token``; False if the claim was lost."""
        values = {"state": DONE, "status": answer.status, "content_type": answer.content_type,
                  "body": answer.body, "expires_at": expires_at,
                  "rights": json.dumps([list(r) for r in answer.rights or ()])}
        with self._engine.begin() as conn:
            result = conn.execute(update(_keys).where(
                _keys.c.key == key, _keys.c.claim == token, _keys.c.state == PENDING,
            ).values(**values))
            return bool(result.rowcount == 1)

    def release(self, key: str, token: str) -> None:
        """Give the key up without an answer (a retry will run the request again)."""
        with self._engine.begin() as conn:
            conn.execute(delete(_keys).where(
                _keys.c.key == key, _keys.c.claim == token, _keys.c.state == PENDING))

    def purge(self, now: float) -> int:
        """Delete every expired row; how many went."""
        self._ensure_table()
        with self._engine.begin() as conn:
            return int(conn.execute(delete(_keys).where(_keys.c.expires_at < now)).rowcount)

    def close(self) -> None:
        self._engine.dispose()

    def _insert_new(self, row: dict[str, object]) -> Executable:
        """INSERT that does nothing when the key exists, returning the key only when it
        inserted (drivers disagree on the row count of ``ON CONFLICT DO NOTHING``)."""
        if self._engine.dialect.name == "postgresql":
            return (postgresql.insert(_keys).values(**row).on_conflict_do_nothing()
                    .returning(_keys.c.key))
        return sqlite.insert(_keys).values(**row).on_conflict_do_nothing().returning(_keys.c.key)

    def _ensure_table(self) -> None:
        """Create the table on first use (two replicas may race: the loser finds it there)."""
        if self._ready:
            return
        with self._lock:
            if self._ready:
                return
            try:
                _metadata.create_all(self._engine)
            except SQLAlchemyError:
                _metadata.create_all(self._engine)  # created meanwhile by another replica
            self._add_missing_columns()
            self._ready = True

    def _add_missing_columns(self) -> None:
        """Bring a table created by an older icegov up to date (a replica racing this one may
        add a column first: what matters is that it is there afterwards)."""
        for name, kind in ADDED_COLUMNS.items():
            if name in _columns(self._engine):
                continue
            try:
                with self._engine.begin() as conn:
                    conn.execute(text(f"ALTER TABLE {TABLE_NAME} ADD COLUMN {name} {kind}"))
            except SQLAlchemyError:
                if name not in _columns(self._engine):
                    raise


def _columns(engine: Engine) -> set[str]:
    return {c["name"] for c in inspect(engine).get_columns(TABLE_NAME)}


def _existing(row: Row[Any]) -> Existing:
    found = row._mapping
    answer = None
    if found["state"] == DONE:
        answer = StoredAnswer(int(found["status"]), found["content_type"],
                              bytes(found["body"] or b""), _rights(found["rights"]))
    return Existing(str(found["principal"]), str(found["fingerprint"]), answer)


def _rights(stored: str | None) -> tuple[tuple[str, str], ...] | None:
    """The rights kept with an answer (None for an answer kept by an older icegov)."""
    if stored is None:
        return None
    return tuple((str(action), str(resource)) for action, resource in json.loads(stored))


class UnsupportedStore(ValueError):
    """A store URI of a database the store does not support."""


def _engine(uri: str) -> Engine:
    scheme = uri.split(":", 1)[0].split("+", 1)[0]
    if scheme not in ("sqlite", "postgresql"):
        raise UnsupportedStore("the idempotency store needs a sqlite:// or postgresql:// URI")
    if scheme == "sqlite":
        # the guard calls from worker threads; waits for SQLite's write lock instead of failing
        return create_engine(uri, connect_args={"check_same_thread": False, "timeout": 30})
    if uri.startswith("postgresql://"):
        uri = "postgresql+psycopg://" + uri.removeprefix("postgresql://")  # psycopg 3
    return create_engine(uri, pool_pre_ping=True)
