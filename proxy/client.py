"""A small Python client for icegov's data operations: write Parquet, let icegov commit.

The client loads tables through icegov (a pyiceberg ``RestCatalog`` pointed at it), writes
Parquet files under the table's location with pyarrow (pyiceberg's writer: target file size,
partition split, column statistics), and sends one data operation (``append-files``,
``overwrite-files``, ``delete-files``) per table change. icegov validates it, writes the
manifests and snapshot, and retries on the moving head itself, so concurrent writers never see a
conflict for appends::

    client = IcegovClient("http://icegov:8181", token="...")
    client.append("db.events", arrow_table)
    client.delete_where("db.events", "day < '2024-01-01'")
    client.overwrite("db.events", arrow_table, "day = '2024-05-01'")
    with client.transaction() as tx:          # one atomic commit across tables
        tx.append("db.a", rows_a)
        tx.delete_files("db.b", [path])

Retries are safe: every operation carries a ``snapshot-id`` the client picks (random, not in
the table) and an ``Idempotency-Key``. When the answer is lost (a transport error) or is a 5xx
(502, 504, or icegov's own 500/503), the client reloads the table: its snapshot there, adding
exactly the files the client wrote and removing the ones it named, means the operation landed
(success); a snapshot with its id but other files is another commit's, so nothing of this one
landed or can (``CommitFailedException``); with no such snapshot it sends the same request again
(same id, same key), at most ``retries`` times. A snapshot id can be added once, so at most one
of the tries lands.

Failures raise pyiceberg's exceptions: ``CommitFailedException`` (409: a real conflict, nothing
landed), ``BadRequestError`` / ``ForbiddenError`` / ``NoSuchTableError``; then the files the
client wrote for the operation are removed. ``CommitStateUnknownException`` (retries exhausted)
means the commit may still land: the written files are kept, reload the table before acting
again.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import TypeAdapter
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import (
    BadRequestError,
    CommitFailedException,
    CommitStateUnknownException,
    ForbiddenError,
    NoSuchTableError,
    RESTError,
    UnauthorizedError,
)
from pyiceberg.expressions import AlwaysTrue, BooleanExpression, SerializableBooleanExpression
from pyiceberg.expressions.parser import parse
from pyiceberg.expressions.visitors import bind
from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files, expression_to_pyarrow
from pyiceberg.manifest import DataFile, DataFileContent, ManifestEntryStatus
from pyiceberg.table import CommitTableResponse, Table
from requests import RequestException

from proxy.commits.operations.wire import content_file_to_json

Filter = BooleanExpression | str
_EXPRESSION: TypeAdapter[Any] = TypeAdapter(SerializableBooleanExpression)
_ERRORS: dict[int, type[Exception]] = {400: BadRequestError, 401: UnauthorizedError,
                                       403: ForbiddenError, 404: NoSuchTableError,
                                       409: CommitFailedException}
_POSITION = "_icegov_position"
_OUTCOME_UNKNOWN = {500, 502, 503, 504}
_REMOVED_FILES = {"delete-files": "data-files", "overwrite-files": "deleted-data-files"}
_LANDED = None  # what ``_post`` answers when a reload found the operation's snapshot


def _new_snapshot_id(table: Table) -> int:
    taken = {s.snapshot_id for s in table.metadata.snapshots}
    while True:
        candidate = uuid.uuid4().int >> 65  # 63 random bits: a positive long
        if candidate and candidate not in taken:
            return candidate


@dataclass
class _Change:
    """One table's data operation, and the files written for it. The operation carries the
    ``snapshot-id`` its snapshot will get, so the client can tell whether it landed."""

    table: Table
    update: dict[str, Any]
    written: list[DataFile] = field(default_factory=list)
    snapshot_id: int = 0

    def __post_init__(self) -> None:
        self.snapshot_id = self.snapshot_id or _new_snapshot_id(self.table)
        self.update["snapshot-id"] = self.snapshot_id

    @property
    def named_files(self) -> tuple[set[str], set[str]]:
        """The data files the change adds (the ones written for it) and removes (by name)."""
        key = _REMOVED_FILES.get(str(self.update.get("action")))
        removed = self.update.get(key) if key is not None else None
        return {f.file_path for f in self.written}, set(removed or [])

    @property
    def empty(self) -> bool:
        """Nothing to add or remove (a filter that matched nothing): nothing to commit."""
        return not any(self.update.get(k) for k in (
            "data-files", "added-data-files", "deleted-data-files", "row-filter"))

    def body(self) -> dict[str, Any]:
        identifier = self.table.name()
        return {"identifier": {"namespace": list(identifier[:-1]), "name": identifier[-1]},
                "requirements": [{"type": "assert-table-uuid",
                                  "uuid": str(self.table.metadata.table_uuid)}],
                "updates": [self.update]}


class IcegovClient:
    """Commits data through icegov's data operations (thread-safe). ``retries``: how many
    times a request whose outcome is unknown is sent again; ``retry_backoff_s``: the pause
    before the first resend (doubling)."""

    def __init__(self, uri: str, *, retries: int = 3, retry_backoff_s: float = 0.2,
                 **properties: str) -> None:
        self.catalog = RestCatalog("icegov", uri=uri, **properties)
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self._lock = threading.Lock()

    def load(self, identifier: str | tuple[str, ...]) -> Table:
        """The table as icegov serves it now."""
        table: Table = self.catalog.load_table(identifier)
        return table

    def append(self, identifier: str | tuple[str, ...], rows: pa.Table) -> Table:
        """INSERT ``rows``: ``append-files`` (never conflicts; icegov rebuilds on the head)."""
        return self.commit(self.prepare_append(self.load(identifier), rows))

    def delete_files(self, identifier: str | tuple[str, ...], paths: Sequence[str]) -> Table:
        """Remove whole data files by location: ``delete-files``."""
        table = self.load(identifier)
        return self.commit(_Change(table, {"action": "delete-files", "data-files": list(paths),
                                            **_base(table)}))

    def delete_where(self, identifier: str | tuple[str, ...], row_filter: Filter,
                     isolation: str = "serializable") -> Table:
        """DELETE rows matching ``row_filter`` (copy-on-write): files it matches entirely are
        removed, files it matches in part are rewritten without those rows."""
        return self.commit(self.prepare_overwrite(self.load(identifier), None, row_filter,
                                                   isolation))

    def overwrite(self, identifier: str | tuple[str, ...], rows: pa.Table, row_filter: Filter,
                  isolation: str = "serializable") -> Table:
        """Replace the rows matching ``row_filter`` by ``rows``, in one ``overwrite-files``."""
        return self.commit(self.prepare_overwrite(self.load(identifier), rows, row_filter,
                                                   isolation))

    @contextmanager
    def transaction(self) -> Iterator[ClientTransaction]:
        """Operations on several tables, committed atomically on leaving the block (one table
        change each, through ``/v1/transactions/commit``)."""
        transaction = ClientTransaction(self)
        yield transaction
        transaction.commit()

    def prepare_append(self, table: Table, rows: pa.Table) -> _Change:
        written = self._write(table, rows)
        return _Change(table, {"action": "append-files", "data-files": _wire(table, written)},
                       written)

    def prepare_overwrite(self, table: Table, rows: pa.Table | None, row_filter: Filter,
                          isolation: str) -> _Change:
        expression = parse(row_filter) if isinstance(row_filter, str) else row_filter
        removed, kept = _matching_files(table, expression)
        parts = [*kept, *([rows] if rows is not None else [])]
        written = (self._write(table, pa.concat_tables(parts, promote_options="permissive"))
                   if parts else [])
        update = {"action": "overwrite-files", "added-data-files": _wire(table, written),
                  "deleted-data-files": [f.file_path for f in removed],
                  "conflict-filter": json.loads(_EXPRESSION.dump_json(expression)),
                  "isolation-level": isolation, **_base(table)}
        return _Change(table, update, written)

    def _write(self, table: Table, rows: pa.Table) -> list[DataFile]:
        if rows.num_rows == 0:
            return []
        return list(_dataframe_to_data_files(table.metadata, rows, table.io))

    def commit(self, change: _Change) -> Table:
        """Send one prepared change (``prepare_append`` / ``prepare_overwrite``); an empty one
        is not sent."""
        if change.empty:
            return change.table
        identifier = change.table.name()
        path = self.catalog._split_identifier_for_path(identifier)
        url = self.catalog.url("namespaces/{namespace}/tables/{table}", **path)
        answer = self._post(url, change.body(), [change])
        if answer is _LANDED:
            return self.load(identifier)
        response = CommitTableResponse.model_validate_json(answer)
        return Table(identifier, response.metadata, response.metadata_location, change.table.io,
                     self.catalog)

    def _post(self, url: str, body: dict[str, Any], changes: list[_Change]) -> str | None:
        """Send ``body`` until its outcome is known: the answer's text, or ``_LANDED`` when a
        reload found the changes' snapshots after an answer was lost."""
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json", "Idempotency-Key": str(uuid.uuid4())}
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.retry_backoff_s * 2 ** (attempt - 1))
            try:
                response = self.catalog._session.post(url, data=data, headers=headers)
            except RequestException:
                response = None  # the answer was lost: the operation may have landed
            if response is not None and response.status_code < 300:
                return str(response.text)
            unknown = response is None or response.status_code in _OUTCOME_UNKNOWN
            landed = self._landed(changes) if unknown or attempt else False
            if landed:  # this try or an earlier one landed
                return _LANDED
            if response is not None and not unknown:
                if landed is None:  # refused, but an earlier try may have landed
                    raise CommitStateUnknownException(
                        f"{response.status_code} after a retry, and the table(s) could not be "
                        "reloaded to tell whether an earlier try landed")
                for change in changes:  # nothing landed: the written files are nobody's
                    _remove(change)
                raise _error(response.status_code, response.text)
        raise CommitStateUnknownException(
            f"the outcome is unknown after {self.retries + 1} tries: reload the table(s)")

    def _landed(self, changes: list[_Change]) -> bool | None:
        """Did the changes' snapshots land? All: True; none: False; a table that cannot be
        read now: None; some of one transaction: cannot be told, raised as unknown."""
        found = []
        for change in changes:
            try:
                table = self.load(change.table.name())
            except (RESTError, RequestException):
                return None
            found.append(self._landed_here(table, change))
        if found and all(found):
            return True
        if any(f is False for f in found) and not any(found):
            for change in changes:  # nothing of it landed, and it cannot: the files are nobody's
                _remove(change)
            raise CommitFailedException("the operation's snapshot id is in the table, added by "
                                        "another commit: nothing of this operation landed")
        if any(f is not None for f in found):
            raise CommitStateUnknownException("part of the transaction's snapshots are in "
                                              "their tables: reload the tables")
        return False

    @staticmethod
    def _landed_here(table: Table, change: _Change) -> bool | None:
        return landed_here(table, change)


class ClientTransaction:
    """Changes to several tables, sent as one ``/v1/transactions/commit``."""

    def __init__(self, client: IcegovClient) -> None:
        self._client = client
        self._changes: dict[tuple[str, ...], _Change] = {}

    def append(self, identifier: str | tuple[str, ...], rows: pa.Table) -> None:
        self._add(self._client.prepare_append(self._client.load(identifier), rows))

    def overwrite(self, identifier: str | tuple[str, ...], rows: pa.Table | None,
                  row_filter: Filter, isolation: str = "serializable") -> None:
        table = self._client.load(identifier)
        self._add(self._client.prepare_overwrite(table, rows, row_filter, isolation))

    def delete_files(self, identifier: str | tuple[str, ...], paths: Sequence[str]) -> None:
        table = self._client.load(identifier)
        self._add(_Change(table, {"action": "delete-files", "data-files": list(paths),
                                  **_base(table)}))

    def _add(self, change: _Change) -> None:
        if change.empty:
            return
        name = change.table.name()
        if name in self._changes:
            raise ValueError(f"{'.'.join(name)} already has an operation in this transaction")
        self._changes[name] = change

    def commit(self) -> None:
        """Send every change at once; all land or none."""
        if not self._changes:
            return
        changes = list(self._changes.values())
        url = self._client.catalog.url("transactions/commit")
        self._client._post(url, {"table-changes": [c.body() for c in changes]}, changes)


def landed_here(table: Table, change: _Change) -> bool | None:
    """None: no snapshot has the change's id; True: the snapshot with its id adds exactly the
    data files the change wrote and removes every one it named; False: it is another commit's
    (a snapshot id alone proves nothing)."""
    snapshot = table.metadata.snapshot_by_id(change.snapshot_id)
    if snapshot is None:
        return None
    added: set[str] = set()
    removed: set[str] = set()
    for manifest in snapshot.manifests(table.io):
        if manifest.added_snapshot_id != change.snapshot_id:
            continue  # carried over: nothing in it is this snapshot's
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
            if entry.snapshot_id != change.snapshot_id \
                    or entry.data_file.content != DataFileContent.DATA:
                continue
            if entry.status == ManifestEntryStatus.ADDED:
                added.add(entry.data_file.file_path)
            elif entry.status == ManifestEntryStatus.DELETED:
                removed.add(entry.data_file.file_path)
    wrote, named = change.named_files
    return added == wrote and named <= removed


def _base(table: Table) -> dict[str, Any]:
    """The snapshot the client read: icegov validates concurrent changes since it."""
    return {"base-snapshot-id": table.metadata.current_snapshot_id}


def _wire(table: Table, files: list[DataFile]) -> list[dict[str, Any]]:
    spec, schema = table.metadata.spec(), table.schema()  # files are written with the default
    return [content_file_to_json(f, spec, schema) for f in files]


def _matching_files(table: Table, expression: BooleanExpression
                    ) -> tuple[list[DataFile], list[pa.Table]]:
    """The data files ``expression`` may match, and the rows of theirs it does not match."""
    removed: list[DataFile] = []
    kept: list[pa.Table] = []
    schema = table.schema()
    predicate = expression_to_pyarrow(bind(schema, expression, case_sensitive=True))
    for task in table.scan(row_filter=expression).plan_files():
        rows = ArrowScan(table.metadata, table.io, schema, AlwaysTrue()).to_table([task])
        positions = rows.append_column(_POSITION, pa.array(range(rows.num_rows), pa.int64()))
        matched = positions.filter(predicate)[_POSITION]
        if matched.length() == 0:
            continue
        removed.append(task.file)
        survivors = rows.filter(pc.invert(pc.is_in(positions[_POSITION], value_set=matched)))
        if survivors.num_rows:
            kept.append(survivors)
    return removed, kept


def _error(status: int, text: str) -> Exception:
    try:
        message = str(json.loads(text)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        message = text[:200]
    if status >= 500:
        return CommitStateUnknownException(f"{status}: {message}")
    return _ERRORS.get(status, RESTError)(message)


def _remove(change: _Change) -> None:
    for data_file in change.written:
        with suppress(OSError):
            change.table.io.delete(data_file.file_path)
