"""One reader of a table's current state at the backing catalog, shared by commit
classification, planning and server-side commits: metadata, its location and a FileIO."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any
from urllib.parse import quote

import httpx
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil

from proxy.commits import UnverifiableCommit
from proxy.errors import BackingUnavailable
from proxy.resources import Resource
from proxy.routes import NAMESPACE_SEPARATOR

Headers = tuple[tuple[bytes, bytes], ...]
Fetch = Callable[[bytes, bytes, Headers], Awaitable[httpx.Response]]


@dataclass(frozen=True)
class TableState:
    """A table as the backing catalog last served it."""

    resource: Resource
    metadata: TableMetadata
    metadata_location: str | None
    io: FileIO
    config: dict[str, str]
    document: dict[str, Any] | None = None  # the LoadTableResult as the backing sent it


class BackingRefused(Exception):
    """The backing catalog would not serve the table: its answer goes back to the caller."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"backing catalog answered {response.status_code}")
        self.response = response


def table_path(prefix: str | None, resource: Resource) -> bytes:
    """The REST path of a table, percent-encoded (namespace levels joined by ``%1F``)."""
    assert resource.table is not None
    parts = ["/v1"] + ([quote(prefix, safe="")] if prefix else [])
    parts += ["namespaces", quote(NAMESPACE_SEPARATOR.join(resource.namespace), safe=""),
              "tables", quote(resource.table, safe="")]
    return "/".join(parts).encode("ascii")


NO_FILE_IO: Mapping[str, str] = MappingProxyType({})


def parse_table_state(resource: Resource, body: bytes,
                      file_io: Mapping[str, str] = NO_FILE_IO) -> TableState:
    """A LoadTableResult body as a ``TableState``; unreadable metadata is unverifiable (400).

    Its FileIO reads the table's files with icegov's own ``file_io`` settings (an object
    store's endpoint, region, credentials) under the catalog's per-table ``config``."""
    try:
        loaded = json.loads(body)
        metadata = TableMetadataUtil.parse_obj(loaded["metadata"])
        location = loaded.get("metadata-location")
        config = {str(k): str(v) for k, v in (loaded.get("config") or {}).items()}
        document = {"metadata-location": location, "metadata": loaded["metadata"]}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UnverifiableCommit("cannot read the table's current metadata") from exc
    io = load_file_io(io_properties(file_io, config), location or metadata.location)
    return TableState(resource, metadata, location, io, config, document)


def io_properties(file_io: Mapping[str, str],
                  config: Mapping[str, str] = NO_FILE_IO) -> dict[str, str]:
    """FileIO settings: icegov's own ``file_io`` with the catalog's answer (its ``config``) on
    top, never table properties: anyone with ALTER writes those, and must not choose where
    icegov reads a commit's evidence (another endpoint, other credentials). Neither source
    chooses what Python code icegov loads (``py-io-impl`` is dropped)."""
    merged = {**file_io, **config}
    return {k: v for k, v in merged.items() if not k.startswith(FORBIDDEN_IO_PREFIX)}


FORBIDDEN_IO_PREFIX = "py-io-impl"
"""The FileIO property naming a Python class to load: never taken from settings or answers."""


async def fetch_table(fetch: Fetch, prefix: str | None, resource: Resource,
                      headers: Headers) -> httpx.Response:
    """The backing's answer to loading ``resource`` (read in full)."""
    return await fetch(table_path(prefix, resource), b"", headers)


async def load_table_state(fetch: Fetch, prefix: str | None, resource: Resource,
                           headers: Headers, file_io: Mapping[str, str] = NO_FILE_IO
                           ) -> TableState:
    """The table's current state at the backing catalog, as the caller would see it: a
    backing server error is 503 (its text stays in icegov's log), any other refusal (404…) is
    relayed (``BackingRefused``); metadata icegov cannot read is ``UnverifiableCommit``."""
    response = await fetch_table(fetch, prefix, resource, headers)
    if response.status_code >= 500:
        raise BackingUnavailable(
            f"backing catalog answered {response.status_code} loading {resource.name}")
    if response.status_code != 200:
        raise BackingRefused(response)
    return parse_table_state(resource, response.content, file_io)
