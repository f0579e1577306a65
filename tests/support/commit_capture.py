"""Record real table commits with the metadata they were made against, or craft them (test-only).

Two recorders, one record shape (``Captured``):

* ``RecordingSqlCatalog``: a pyiceberg ``SqlCatalog`` that keeps every ``commit_table`` call as the
  JSON a REST client would send, plus the metadata before it (None for a create).
* ``CommitRecorder``: an ASGI wrapper around a REST catalog app (the embedded catalog) that keeps
  every ``POST .../namespaces/{ns}/tables/{t}`` body, the metadata loaded just before forwarding
  it, and the status the catalog answered. Real Spark talks to it over a loopback port.

``Crafter`` writes commits by hand instead: manifests and manifest lists with pyiceberg's writers
(including delete manifests, which pyiceberg itself never writes), for cases no client produces.
"""

from __future__ import annotations

import atexit
import json
import re
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriterV2,
    write_manifest_list,
)
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.table import CommitTableResponse, Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertCreate,
    SetSnapshotRefUpdate,
    TableRequirement,
    TableUpdate,
)
from pyiceberg.typedef import Identifier, Record

from proxy.commits import CommitIntent, classify_commit
from proxy.commits.operations.writer import DeleteManifestWriter

_COMMIT_PATH = re.compile(r"^/v1/(?:[^/]+/)?namespaces/([^/]+)/tables/([^/]+)$")
_FILE_PATH_FIELD = 2147483546  # position delete files' file_path column


@dataclass(frozen=True)
class Captured:
    """One table commit as sent, with the metadata it was made against."""

    identifier: Identifier
    body: dict[str, Any]
    base: TableMetadata | None
    status: int = 200

    @property
    def update_actions(self) -> list[str]:
        return [u.get("action") for u in self.body.get("updates", [])]

    @property
    def operations(self) -> list[str]:
        return [u["snapshot"].get("summary", {}).get("operation")
                for u in self.body.get("updates", []) if u.get("action") == "add-snapshot"]


def wire_json(model: TableRequirement | TableUpdate) -> dict[str, Any]:
    """A pyiceberg requirement or update as REST JSON."""
    return dict(json.loads(model.model_dump_json(by_alias=True)))


class RecordingSqlCatalog(SqlCatalog):
    """A SqlCatalog that records each commit as REST JSON before applying it."""

    def __init__(self, name: str, **properties: str) -> None:
        super().__init__(name, **properties)
        self.commits: list[Captured] = []

    def commit_table(self, table: Table, requirements: tuple[TableRequirement, ...],
                     updates: tuple[TableUpdate, ...]) -> CommitTableResponse:
        creating = any(isinstance(r, AssertCreate) for r in requirements)
        body = {"requirements": [wire_json(r) for r in requirements],
                "updates": [wire_json(u) for u in updates]}
        base = None if creating else table.metadata
        self.commits.append(Captured(table.name(), body, base))
        return super().commit_table(table, requirements, updates)


class CommitRecorder:
    """ASGI wrapper that records table commits passing through to ``app``."""

    def __init__(self, app: Any, catalog: SqlCatalog) -> None:
        self.app = app
        self.catalog = catalog
        self.commits: list[Captured] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        match = _COMMIT_PATH.match(scope.get("path", "")) if scope["type"] == "http" else None
        if match is None or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive)
        identifier = (*unquote(match[1]).split("\x1f"), unquote(match[2]))
        parsed = json.loads(body)
        base = None if _creates(parsed) else self._load(identifier)
        statuses: list[int] = []

        pending = [body]

        async def replay() -> dict[str, Any]:
            if pending:
                return {"type": "http.request", "body": pending.pop(), "more_body": False}
            return dict(await receive())

        async def watch(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                statuses.append(message["status"])
            await send(message)

        await self.app(scope, replay, watch)
        self.commits.append(Captured(identifier, parsed, base, statuses[0] if statuses else 0))

    def _load(self, identifier: Identifier) -> TableMetadata | None:
        try:
            return self.catalog.load_table(identifier).metadata
        except NoSuchTableError:
            return None

    def take(self) -> list[Captured]:
        """The commits recorded since the last call (successful or not)."""
        taken, self.commits = self.commits, []
        return taken


def _creates(body: dict[str, Any]) -> bool:
    return any(r.get("type") == "assert-create" for r in body.get("requirements", []))


async def _read_body(receive: Any) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


_ADDED = ManifestEntryStatus.ADDED


CRAFTED_DATA_DIR = Path(tempfile.mkdtemp(prefix="icegov-crafted-"))
"""Where ``new_data`` writes its files (one folder per test process, removed at exit)."""
atexit.register(shutil.rmtree, CRAFTED_DATA_DIR, True)
_ID_FIELD = {b"PARQUET:field_id": b"1"}
_DELETE_SCHEMA = pa.schema([
    pa.field("file_path", pa.string(), False,
             {b"PARQUET:field_id": str(_FILE_PATH_FIELD).encode()}),
    pa.field("pos", pa.int64(), False, {b"PARQUET:field_id": b"2147483545"})])


def content_file(path: str, records: int, content: DataFileContent = DataFileContent.DATA,
                 target: str | None = None) -> DataFile:
    """A data or delete file of ``records`` rows, written at ``path`` (a local location) as
    its entry describes it (classification reads its footer): data files hold ``id`` (field id
    1); ``target`` makes a delete file file-scoped (its rows and path bounds name it)."""
    bounds = {_FILE_PATH_FIELD: target.encode()} if target else None
    local = Path(unquote(urlparse(path).path))
    local.parent.mkdir(parents=True, exist_ok=True)
    if content == DataFileContent.DATA:
        rows = pa.table([pa.array(range(records), pa.int64())],
                        schema=pa.schema([pa.field("id", pa.int64(), True, _ID_FIELD)]))
    else:
        rows = pa.table([[target or "file:///elsewhere/data.parquet"] * records,
                         pa.array(range(records), pa.int64())], schema=_DELETE_SCHEMA)
    pq.write_table(rows, local)
    return DataFile.from_args(content=content, file_path=path, file_format=FileFormat.PARQUET,
                              partition=Record(), record_count=records,
                              file_size_in_bytes=local.stat().st_size,
                              lower_bounds=bounds, upper_bounds=bounds)


def new_data(name: str, records: int) -> DataFile:
    """A data file of ``records`` rows in ``CRAFTED_DATA_DIR``, written for the commit that
    adds it."""
    return content_file(f"{CRAFTED_DATA_DIR.as_uri()}/{name}.parquet", records)


@dataclass
class Crafter:
    """Writes manifests and snapshots for ``table`` and commits them."""

    catalog: SqlCatalog
    table: Table
    folder: Path

    @classmethod
    def with_two_appends(cls, folder: Path) -> Crafter:
        """A SqlCatalog table ``db.t (id long)`` in ``folder`` with two appends: ``f1`` (2 rows,
        sequence 1) and ``f2`` (1 row, sequence 2), each in its own manifest."""
        catalog = SqlCatalog("crafted", uri=f"sqlite:///{folder}/c.db", warehouse=folder.as_uri())
        catalog.create_namespace("db")
        schema = pa.schema([("id", pa.int64())])
        table = catalog.create_table("db.t", schema)
        for ids in ([1, 2], [3]):
            table.append(pa.table({"id": ids}, schema=schema))
        return cls(catalog, table, folder)

    def live(self) -> tuple[tuple[DataFile, int], tuple[DataFile, int]]:
        """(f1, f2) with their data sequence numbers: the first and second append's files."""
        files = [(e.data_file, e.sequence_number or 0) for m in self.parent_manifests()
                 for e in m.fetch_manifest_entry(self.table.io)
                 if e.data_file.content == DataFileContent.DATA]
        f1, f2 = sorted(files, key=lambda f: -f[0].record_count)
        return f1, f2

    def parent_manifests(self) -> list[ManifestFile]:
        """The manifests of the current snapshot."""
        snapshot = self.table.current_snapshot()
        assert snapshot is not None
        return snapshot.manifests(self.table.io)

    def manifest(self, snapshot_id: int, entries: list[tuple[ManifestEntryStatus, DataFile, int]],
                 deletes: bool = False, entry_snapshot: int | None = None) -> ManifestFile:
        """A manifest of (status, file, data sequence number) entries, added by ``snapshot_id``."""
        out = self.table.io.new_output(str(self.folder / f"m-{uuid.uuid4()}.avro"))
        writer_class = DeleteManifestWriter if deletes else ManifestWriterV2
        with writer_class(UNPARTITIONED_PARTITION_SPEC, self.table.schema(), out, snapshot_id,
                          "null") as writer:
            for status, file, sequence in entries:
                writer.add_entry(ManifestEntry.from_args(
                    status=status, snapshot_id=entry_snapshot or snapshot_id,
                    sequence_number=None if status == _ADDED else sequence,
                    file_sequence_number=None if status == _ADDED else sequence, data_file=file))
        return writer.to_manifest_file()

    def snapshot(self, snapshot_id: int, manifests: list[ManifestFile], operation: str,
                 **summary: str) -> dict[str, Any]:
        """An add-snapshot ``snapshot`` object on top of the current snapshot."""
        parent = self.table.metadata.current_snapshot_id
        sequence = self.table.metadata.last_sequence_number + 1
        path = str(self.folder / f"snap-{snapshot_id}.avro")
        with write_manifest_list(2, self.table.io.new_output(path), snapshot_id, parent, sequence,
                                 "null") as writer:
            writer.add_manifests(manifests)
        return {"snapshot-id": snapshot_id, "parent-snapshot-id": parent,
                "sequence-number": sequence, "timestamp-ms": 1, "manifest-list": path,
                "summary": {"operation": operation, **summary}, "schema-id": 0}

    def body(self, snapshot: dict[str, Any], ref: str | None = "main") -> dict[str, Any]:
        """A commit adding ``snapshot`` and pointing ``ref`` at it (None: staged, no ref)."""
        updates: list[dict[str, Any]] = [{"action": "add-snapshot", "snapshot": snapshot}]
        if ref is not None:
            updates.append({"action": "set-snapshot-ref", "ref-name": ref, "type": "branch",
                            "snapshot-id": snapshot["snapshot-id"]})
        asserted = {"type": "assert-ref-snapshot-id", "ref": ref or "main",
                    "snapshot-id": self.table.metadata.current_snapshot_id}
        return {"requirements": [asserted], "updates": updates}

    def classify(self, body: dict[str, Any]) -> CommitIntent:
        """classify_commit against the table as it is now."""
        return classify_commit(body, self.table.metadata, self.table.io)

    def apply(self, snapshot: dict[str, Any]) -> None:
        """Commit ``snapshot`` to the table's main branch, so later commits build on it."""
        self.catalog.commit_table(self.table, (), (
            AddSnapshotUpdate(snapshot=Snapshot.model_validate(snapshot)),
            SetSnapshotRefUpdate(ref_name="main", type="branch",
                                 snapshot_id=snapshot["snapshot-id"])))
        self.table = self.catalog.load_table(self.table.name())
