"""What table commits need: the table's current metadata from the backing catalog, classified.

For ``POST .../tables/{t}`` and each entry of ``POST .../transactions/commit`` this loads the
table (with icegov's own credentials, through the one forwarding path), then asks
``proxy.commits.classify_commit`` what the commit really does, reading the manifests it adds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from pyiceberg.io import FileIO, load_file_io
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil
from starlette.concurrency import run_in_threadpool

from proxy.commits import CommitIntent, UnverifiableCommit, classify_commit, creates_table
from proxy.errors import BadRequest
from proxy.forward import Forwarder
from proxy.governance import resource_path
from proxy.inbound import InboundRequest
from proxy.routes import NAMESPACE_SEPARATOR


@dataclass(frozen=True)
class TableCommit:
    """One table's part of a commit request, with what it was classified as."""

    resource: str
    intent: CommitIntent


class BackingAnswer(Exception):
    """The backing catalog refused to load the table: its answer goes back unchanged."""

    def __init__(self, status: int, body: bytes, content_type: str) -> None:
        super().__init__(f"backing catalog answered {status}")
        self.status = status
        self.body = body
        self.content_type = content_type


class CommitClassifier:
    """Classifies table commits against the backing catalog's current table state."""

    def __init__(self, forwarder: Forwarder, catalog: str) -> None:
        self._forwarder = forwarder
        self._catalog = catalog

    async def classify(self, inbound: InboundRequest) -> list[TableCommit]:
        """Every table a commit request changes, each with its classified intent."""
        if inbound.route.endpoint.name == "commit_table":
            namespace = inbound.route.namespace
            table = inbound.route.params["table"]
            return [await self._one(inbound, namespace, table, _object(inbound.json()))]
        changes = _object(inbound.json()).get("table-changes")
        if not isinstance(changes, list) or not changes:
            raise BadRequest("'table-changes' must be a non-empty list")
        return [await self._change(inbound, _object(change)) for change in changes]

    async def _change(self, inbound: InboundRequest, change: dict[str, Any]) -> TableCommit:
        identifier = _object(change.get("identifier"))
        namespace = tuple(str(x) for x in identifier.get("namespace") or [])
        name = identifier.get("name")
        if not isinstance(name, str) or not namespace:
            raise BadRequest(f"invalid table identifier in table-changes: {identifier!r}")
        return await self._one(inbound, namespace, name, change)

    async def _one(self, inbound: InboundRequest, namespace: tuple[str, ...], table: str,
                   body: dict[str, Any]) -> TableCommit:
        resource = resource_path(self._catalog, namespace, table)
        if creates_table(body):
            intent = await run_in_threadpool(classify_commit, body, None, _DEFAULT_IO)
            return TableCommit(resource, intent)
        base, io = await self._load(inbound, namespace, table)
        return TableCommit(resource, await run_in_threadpool(classify_commit, body, base, io))

    async def _load(self, inbound: InboundRequest, namespace: tuple[str, ...],
                    table: str) -> tuple[TableMetadata, FileIO]:
        response = await self._forwarder.fetch(
            _table_path(inbound, namespace, table), b"", inbound.headers)
        if response.status_code != 200:
            raise BackingAnswer(response.status_code, response.content,
                                response.headers.get("content-type", "application/json"))
        try:
            loaded = json.loads(response.content)
            metadata = TableMetadataUtil.parse_obj(loaded["metadata"])
            location = loaded.get("metadata-location")
        except (ValueError, KeyError, TypeError) as exc:
            raise UnverifiableCommit(f"cannot read the table's current metadata: {exc}") from exc
        properties = {**metadata.properties, **(loaded.get("config") or {})}
        return metadata, load_file_io(properties, location or metadata.location)


def _table_path(inbound: InboundRequest, namespace: tuple[str, ...], table: str) -> bytes:
    prefix = inbound.route.params.get("prefix")
    parts = ["/v1"] + ([quote(prefix, safe="")] if prefix else [])
    parts += ["namespaces", quote(NAMESPACE_SEPARATOR.join(namespace), safe=""),
              "tables", quote(table, safe="")]
    return "/".join(parts).encode("ascii")


def _object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadRequest("expected a JSON object")
    return value


_DEFAULT_IO: FileIO = load_file_io({}, None)
