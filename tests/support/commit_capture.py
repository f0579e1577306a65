"""Record real table commits together with the table metadata they were made against (test-only).

Two recorders, one record shape (``Captured``):

* ``RecordingSqlCatalog``: a pyiceberg ``SqlCatalog`` that keeps every ``commit_table`` call as the
  JSON a REST client would send, plus the metadata before it (None for a create).
* ``CommitRecorder``: an ASGI wrapper around a REST catalog app (the embedded catalog) that keeps
  every ``POST .../namespaces/{ns}/tables/{t}`` body, the metadata loaded just before forwarding
  it, and the status the catalog answered. Real Spark talks to it over a loopback port.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import CommitTableResponse, Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import AssertCreate, TableRequirement, TableUpdate
from pyiceberg.typedef import Identifier

_COMMIT_PATH = re.compile(r"^/v1/(?:[^/]+/)?namespaces/([^/]+)/tables/([^/]+)$")


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
