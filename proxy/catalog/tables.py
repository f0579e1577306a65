"""Table endpoints of the embedded catalog."""

from __future__ import annotations

import json
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NoSuchNamespaceError, TableAlreadyExistsError
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.table import CommitTableResponse
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.typedef import Identifier
from starlette.responses import JSONResponse, Response

from proxy.catalog import store
from proxy.catalog.errors import run_catalog
from proxy.catalog.locations import Warehouse
from proxy.catalog.purge import purge_table
from proxy.catalog.wire import (
    CommitTableRequest,
    CommitTransactionRequest,
    CreateTableRequest,
    RegisterTableRequest,
    RenameTableRequest,
    ReportMetricsRequest,
    parse_body,
    path_namespace,
    path_table,
)
from proxy.errors import BadRequest
from proxy.inbound import InboundRequest


def table_result(metadata: bytes, location: str | None) -> Response:
    """A LoadTableResult / CommitTableResponse around metadata JSON that is already serialised
    (``location`` None for a staged create, which has no metadata file yet)."""
    head = b"{" if location is None else (
        b'{"metadata-location":' + json.dumps(location).encode() + b",")
    return Response(head + b'"metadata":' + metadata + b',"config":{}}',
                    media_type="application/json")


def committed_result(result: CommitTableResponse) -> Response:
    return table_result(result.metadata.model_dump_json().encode(), result.metadata_location)


def table_change(identifier: Identifier, request: CommitTableRequest) -> store.TableChange:
    """A commit for ``identifier`` (from the URL or the transaction entry) as a store change."""
    return store.TableChange(identifier, request.requirements, request.updates)


class TableHandlers:
    """list / create / load / exists / commit / drop / rename / register / metrics for tables."""

    def __init__(self, catalog: SqlCatalog) -> None:
        self._catalog = catalog

    async def list_tables(self, inbound: InboundRequest) -> Response:
        found = await run_catalog(self._catalog.list_tables, path_namespace(inbound))
        identifiers = [{"namespace": list(i[:-1]), "name": i[-1]} for i in sorted(found)]
        return JSONResponse({"identifiers": identifiers})

    async def create_table(self, inbound: InboundRequest) -> Response:
        namespace = path_namespace(inbound)
        request = parse_body(CreateTableRequest, inbound)
        return await run_catalog(self._create, (*namespace, request.name), request)

    async def load_table(self, inbound: InboundRequest) -> Response:
        identifier = path_table(inbound)
        snapshots = inbound.query("snapshots") or "all"
        if snapshots not in ("all", "refs"):
            raise BadRequest("snapshots must be 'all' or 'refs'")
        return await run_catalog(self._load, identifier, snapshots)

    async def table_exists(self, inbound: InboundRequest) -> Response:
        exists = await run_catalog(self._catalog.table_exists, path_table(inbound))
        return Response(status_code=204 if exists else 404)

    async def commit_table(self, inbound: InboundRequest) -> Response:
        identifier = path_table(inbound)
        change = table_change(identifier, parse_body(CommitTableRequest, inbound))
        [result] = await run_catalog(store.commit_atomically, self._catalog, [change])
        return committed_result(result)

    async def commit_transaction(self, inbound: InboundRequest) -> Response:
        request = parse_body(CommitTransactionRequest, inbound)
        changes = [table_change(c.identifier.identifier, c) for c in request.table_changes]
        if len({c.identifier for c in changes}) != len(changes):
            raise BadRequest("a transaction may change each table only once")
        await run_catalog(store.commit_atomically, self._catalog, changes)
        return Response(status_code=204)

    async def drop_table(self, inbound: InboundRequest) -> Response:
        identifier = path_table(inbound)
        purge = (inbound.query("purgeRequested") or "false").lower() == "true"
        if purge:
            await run_catalog(purge_table, self._catalog, identifier)
        else:
            await run_catalog(self._catalog.drop_table, identifier)
        return Response(status_code=204)

    async def rename_table(self, inbound: InboundRequest) -> Response:
        request = parse_body(RenameTableRequest, inbound)
        await run_catalog(self._catalog.rename_table, request.source.identifier,
                          request.destination.identifier)
        return Response(status_code=204)

    async def register_table(self, inbound: InboundRequest) -> Response:
        namespace = path_namespace(inbound)
        request = parse_body(RegisterTableRequest, inbound)
        identifier = (*namespace, request.name)
        await run_catalog(store.register_table, self._catalog, identifier,
                          request.metadata_location, request.overwrite)
        return await run_catalog(self._load, identifier, "all")

    async def report_metrics(self, inbound: InboundRequest) -> Response:
        path_table(inbound)
        parse_body(ReportMetricsRequest, inbound)
        return Response(status_code=204)

    def _load(self, identifier: Identifier, snapshots: str) -> Response:
        location = store.metadata_location(self._catalog, identifier)
        metadata = store.read_metadata_bytes(self._catalog, location)
        if snapshots == "refs":
            metadata = _only_referenced_snapshots(metadata)
        return table_result(metadata, location)

    def _create(self, identifier: Identifier, request: CreateTableRequest) -> Response:
        if not self._catalog.namespace_exists(identifier[:-1]):
            raise NoSuchNamespaceError(f"Namespace does not exist: {'.'.join(identifier[:-1])}")
        if self._catalog.table_exists(identifier):
            raise TableAlreadyExistsError(f"Table already exists: {'.'.join(identifier)}")
        args = _create_arguments(request)
        warehouse = Warehouse(self._catalog)
        warehouse.check(self._catalog._resolve_table_location(
            request.location, Catalog.namespace_to_string(identifier[:-1]), identifier[-1]),
            "table location")
        warehouse.check_table_properties(request.properties)
        if request.stage_create:
            staged = self._catalog._create_staged_table(identifier, **args)
            return table_result(staged.metadata.model_dump_json().encode(), None)
        self._catalog.create_table(identifier, **args)
        return self._load(identifier, "all")


def _create_arguments(request: CreateTableRequest) -> dict[str, Any]:
    return {
        "schema": request.table_schema,
        "location": request.location,
        "partition_spec": request.partition_spec or UNPARTITIONED_PARTITION_SPEC,
        "sort_order": request.write_order or UNSORTED_SORT_ORDER,
        "properties": request.properties,
    }


def _only_referenced_snapshots(metadata: bytes) -> bytes:
    """Metadata whose snapshot list keeps only snapshots that some ref points at."""
    parsed = json.loads(metadata)
    referenced = {ref["snapshot-id"] for ref in parsed.get("refs", {}).values()}
    parsed["snapshots"] = [s for s in parsed.get("snapshots", []) if s["snapshot-id"] in referenced]
    return json.dumps(parsed).encode()
