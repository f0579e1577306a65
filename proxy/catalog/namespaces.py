"""Namespace endpoints of the embedded catalog."""

from __future__ import annotations

from pyiceberg.catalog.sql import IcebergNamespaceProperties, SqlCatalog
from sqlalchemy.exc import IntegrityError
from starlette.responses import JSONResponse, Response

from proxy.catalog import view_store
from proxy.catalog.errors import run_catalog
from proxy.catalog.locations import Warehouse
from proxy.catalog.wire import (
    CreateNamespaceRequest,
    UpdateNamespacePropertiesRequest,
    parent_namespace,
    parse_body,
    path_namespace,
)
from proxy.errors import AlreadyExists, BadRequest, NamespaceNotEmpty
from proxy.inbound import InboundRequest

_MINIMAL = set(IcebergNamespaceProperties.NAMESPACE_MINIMAL_PROPERTIES)


class NamespaceHandlers:
    """list / create / load / exists / drop / update-properties for namespaces."""

    def __init__(self, catalog: SqlCatalog) -> None:
        self._catalog = catalog

    async def list_namespaces(self, inbound: InboundRequest) -> Response:
        found = await run_catalog(self._catalog.list_namespaces, parent_namespace(inbound))
        return JSONResponse({"namespaces": [list(ns) for ns in sorted(found)]})

    async def create_namespace(self, inbound: InboundRequest) -> Response:
        request = parse_body(CreateNamespaceRequest, inbound)
        reserved = _MINIMAL & set(request.properties)
        if reserved:
            raise BadRequest(f"reserved namespace properties: {sorted(reserved)}")
        Warehouse(self._catalog).check_namespace_properties(request.properties)
        try:
            await run_catalog(self._catalog.create_namespace, request.namespace,
                              request.properties)
        except IntegrityError as exc:  # another replica created it between check and insert
            raise AlreadyExists(f"Namespace {'.'.join(request.namespace)} already exists") from exc
        return JSONResponse({"namespace": list(request.namespace),
                             "properties": request.properties})

    async def load_namespace(self, inbound: InboundRequest) -> Response:
        namespace = path_namespace(inbound)
        properties = await run_catalog(self._catalog.load_namespace_properties, namespace)
        return JSONResponse({"namespace": list(namespace), "properties": _visible(properties)})

    async def namespace_exists(self, inbound: InboundRequest) -> Response:
        exists = await run_catalog(self._catalog.namespace_exists, path_namespace(inbound))
        return Response(status_code=204 if exists else 404)

    async def drop_namespace(self, inbound: InboundRequest) -> Response:
        namespace = path_namespace(inbound)
        if await run_catalog(view_store.has_views, self._catalog, namespace):
            raise NamespaceNotEmpty(f"Namespace {'.'.join(namespace)} is not empty: it holds views")
        await run_catalog(self._catalog.drop_namespace, namespace)
        return Response(status_code=204)

    async def update_namespace_properties(self, inbound: InboundRequest) -> Response:
        namespace = path_namespace(inbound)
        request = parse_body(UpdateNamespacePropertiesRequest, inbound)
        removals, updates = set(request.removals), request.updates
        if removals & set(updates):
            raise BadRequest("a property may not be both updated and removed")
        if (removals | set(updates)) & _MINIMAL:
            raise BadRequest(f"reserved namespace properties: {sorted(_MINIMAL)}")
        Warehouse(self._catalog).check_namespace_properties(updates)
        try:
            summary = await run_catalog(
                self._catalog.update_namespace_properties, namespace, removals, updates)
        except IntegrityError:  # another replica set a property first: its row exists now
            summary = await run_catalog(
                self._catalog.update_namespace_properties, namespace, removals, updates)
        return JSONResponse({"updated": summary.updated, "removed": summary.removed,
                             "missing": summary.missing})


def _visible(properties: dict[str, str]) -> dict[str, str]:
    """Properties minus SqlCatalog's own bookkeeping marker."""
    return {k: v for k, v in properties.items() if k not in _MINIMAL}
