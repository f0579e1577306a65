"""Table endpoints of the embedded catalog."""

from __future__ import annotations

import json
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NoSuchNamespaceError, TableAlreadyExistsError
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import CommitTableResponse
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortOrder
from pyiceberg.table.update import TableRequirement, TableUpdate
from pyiceberg.typedef import Identifier
from starlette.responses import JSONResponse, Response

from proxy.catalog import store
from proxy.catalog.errors import run_catalog
from proxy.catalog.namespaces import json_object
from proxy.errors import BadRequest
from proxy.inbound import InboundRequest

_REQUIREMENTS = TypeAdapter(tuple[TableRequirement, ...])
_UPDATES = TypeAdapter(tuple[TableUpdate, ...])


def table_identifier(inbound: InboundRequest) -> Identifier:
    """(namespace levels..., table) from the request path."""
    return (*inbound.route.namespace, inbound.route.params["table"])


def identifier_from_json(value: Any) -> Identifier:
    """A TableIdentifier object ``{"namespace": [...], "name": ...}`` as a tuple."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        raise BadRequest(f"invalid table identifier: {value!r}")
    return (*value.get("namespace", []), value["name"])


def parse_change(identifier: Identifier, body: dict[str, Any]) -> store.TableChange:
    """A commit body (requirements, updates) as a typed change; unknown types are a 400."""
    try:
        return store.TableChange(
            identifier,
            _REQUIREMENTS.validate_python(body.get("requirements") or []),
            _UPDATES.validate_python(body.get("updates") or []),
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        raise BadRequest(f"invalid commit for {'.'.join(identifier)}: {first['msg']}") from exc


def table_result(metadata: bytes, location: str | None) -> Response:
    """A LoadTableResult / CommitTableResponse around metadata JSON that is already serialised
    (``location`` None for a staged create, which has no metadata file yet)."""
    head = b"{" if location is None else (
        b'{"metadata-location":' + json.dumps(location).encode() + b",")
    return Response(head + b'"metadata":' + metadata + b',"config":{}}',
                    media_type="application/json")


def committed_result(result: CommitTableResponse) -> Response:
    return table_result(result.metadata.model_dump_json().encode(), result.metadata_location)


class TableHandlers:
    """list / create / load / exists / commit / drop / rename / register / metrics for tables."""

    def __init__(self, catalog: SqlCatalog) -> None:
        self._catalog = catalog

    async def list_tables(self, inbound: InboundRequest) -> Response:
        found = await run_catalog(self._catalog.list_tables, inbound.route.namespace)
        identifiers = [{"namespace": list(i[:-1]), "name": i[-1]} for i in sorted(found)]
        return JSONResponse({"identifiers": identifiers})

    async def create_table(self, inbound: InboundRequest) -> Response:
        body = json_object(inbound)
        identifier = (*inbound.route.namespace, str(body.get("name", "")))
        return await run_catalog(self._create, identifier, body)

    async def load_table(self, inbound: InboundRequest) -> Response:
        identifier = table_identifier(inbound)
        snapshots = inbound.query("snapshots") or "all"
        return await run_catalog(self._load, identifier, snapshots)

    async def table_exists(self, inbound: InboundRequest) -> Response:
        exists = await run_catalog(self._catalog.table_exists, table_identifier(inbound))
        return Response(status_code=204 if exists else 404)

    async def commit_table(self, inbound: InboundRequest) -> Response:
        change = parse_change(table_identifier(inbound), json_object(inbound))
        [result] = await run_catalog(store.commit_atomically, self._catalog, [change])
        return committed_result(result)

    async def commit_transaction(self, inbound: InboundRequest) -> Response:
        body = json_object(inbound)
        changes = [parse_change(identifier_from_json(c.get("identifier")), c)
                   for c in body.get("table-changes") or []]
        if len({c.identifier for c in changes}) != len(changes):
            raise BadRequest("a transaction may change each table only once")
        await run_catalog(store.commit_atomically, self._catalog, changes)
        return Response(status_code=204)

    async def drop_table(self, inbound: InboundRequest) -> Response:
        purge = (inbound.query("purgeRequested") or "false").lower() == "true"
        drop = self._catalog.purge_table if purge else self._catalog.drop_table
        await run_catalog(drop, table_identifier(inbound))
        return Response(status_code=204)

    async def rename_table(self, inbound: InboundRequest) -> Response:
        body = json_object(inbound)
        source = identifier_from_json(body.get("source"))
        destination = identifier_from_json(body.get("destination"))
        await run_catalog(self._catalog.rename_table, source, destination)
        return Response(status_code=204)

    async def register_table(self, inbound: InboundRequest) -> Response:
        body = json_object(inbound)
        identifier = (*inbound.route.namespace, str(body.get("name", "")))
        location = body.get("metadata-location")
        if not isinstance(location, str):
            raise BadRequest("'metadata-location' is required")
        await run_catalog(self._catalog.register_table, identifier, location,
                          bool(body.get("overwrite", False)))
        return await run_catalog(self._load, identifier, "all")

    async def report_metrics(self, _: InboundRequest) -> Response:
        return Response(status_code=204)

    def _load(self, identifier: Identifier, snapshots: str) -> Response:
        location = store.metadata_location(self._catalog, identifier)
        metadata = store.read_metadata_bytes(self._catalog, location)
        if snapshots == "refs":
            metadata = _only_referenced_snapshots(metadata)
        elif snapshots != "all":
            raise BadRequest(f"snapshots must be 'all' or 'refs', not {snapshots!r}")
        return table_result(metadata, location)

    def _create(self, identifier: Identifier, body: dict[str, Any]) -> Response:
        if not body.get("name"):
            raise BadRequest("'name' is required")
        if not self._catalog.namespace_exists(identifier[:-1]):
            raise NoSuchNamespaceError(f"Namespace does not exist: {'.'.join(identifier[:-1])}")
        if self._catalog.table_exists(identifier):
            raise TableAlreadyExistsError(f"Table already exists: {'.'.join(identifier)}")
        args = _create_arguments(body)
        if body.get("stage-create"):
            staged = self._catalog._create_staged_table(identifier, **args)
            return table_result(staged.metadata.model_dump_json().encode(), None)
        self._catalog.create_table(identifier, **args)
        return self._load(identifier, "all")


def _create_arguments(body: dict[str, Any]) -> dict[str, Any]:
    if "schema" not in body:
        raise BadRequest("'schema' is required")
    spec = body.get("partition-spec")
    order = body.get("write-order")
    return {
        "schema": Schema.model_validate(body["schema"]),
        "location": body.get("location"),
        "partition_spec": (
            PartitionSpec.model_validate(spec) if spec else UNPARTITIONED_PARTITION_SPEC),
        "sort_order": SortOrder.model_validate(order) if order else UNSORTED_SORT_ORDER,
        "properties": body.get("properties") or {},
    }


def _only_referenced_snapshots(metadata: bytes) -> bytes:
    """Metadata whose snapshot list keeps only snapshots that some ref points at."""
    parsed = json.loads(metadata)
    referenced = {ref["snapshot-id"] for ref in parsed.get("refs", {}).values()}
    parsed["snapshots"] = [s for s in parsed.get("snapshots", []) if s["snapshot-id"] in referenced]
    return json.dumps(parsed).encode()


