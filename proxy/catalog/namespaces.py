"""Namespace endpoints of the embedded catalog."""

from __future__ import annotations

from typing import Any

from pyiceberg.catalog.sql import IcebergNamespaceProperties, SqlCatalog
from starlette.responses import JSONResponse, Response

from proxy.catalog.errors import run_catalog
from proxy.errors import BadRequest
from proxy.inbound import InboundRequest
from proxy.routes import NAMESPACE_SEPARATOR

_MINIMAL = set(IcebergNamespaceProperties.NAMESPACE_MINIMAL_PROPERTIES)


def json_object(inbound: InboundRequest) -> dict[str, Any]:
    """The body as a JSON object, or 400."""
    body = inbound.json()
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    return body


class NamespaceHandlers:
    """list / create / load / exists / drop / update-properties for namespaces."""

    def __init__(self, catalog: SqlCatalog) -> None:
        self._catalog = catalog

    async def list_namespaces(self, inbound: InboundRequest) -> Response:
        parent = inbound.query("parent")
        levels = tuple(parent.split(NAMESPACE_SEPARATOR)) if parent else ()
        found = await run_catalog(self._catalog.list_namespaces, levels)
        return JSONResponse({"namespaces": [list(ns) for ns in sorted(found)]})

    async def create_namespace(self, inbound: InboundRequest) -> Response:
        body = json_object(inbound)
        namespace = body.get("namespace")
        if not isinstance(namespace, list) or not namespace:
            raise BadRequest("'namespace' must be a non-empty list of strings")
        properties = body.get("properties") or {}
        await run_catalog(self._catalog.create_namespace, tuple(namespace), properties)
        return JSONResponse({"namespace": namespace, "properties": properties})

    async def load_namespace(self, inbound: InboundRequest) -> Response:
        namespace = inbound.route.namespace
        properties = await run_catalog(self._catalog.load_namespace_properties, namespace)
        return JSONResponse({"namespace": list(namespace), "properties": _visible(properties)})

    async def namespace_exists(self, inbound: InboundRequest) -> Response:
        exists = await run_catalog(self._catalog.namespace_exists, inbound.route.namespace)
        return Response(status_code=204 if exists else 404)

    async def drop_namespace(self, inbound: InboundRequest) -> Response:
        await run_catalog(self._catalog.drop_namespace, inbound.route.namespace)
        return Response(status_code=204)

    async def update_namespace_properties(self, inbound: InboundRequest) -> Response:
        body = json_object(inbound)
        removals = set(body.get("removals") or [])
        updates = body.get("updates") or {}
        summary = await run_catalog(
            self._catalog.update_namespace_properties, inbound.route.namespace, removals, updates)
        return JSONResponse({"updated": summary.updated, "removed": summary.removed,
                             "missing": summary.missing})


def _visible(properties: dict[str, str]) -> dict[str, str]:
    """Properties minus SqlCatalog's own bookkeeping marker."""
    return {k: v for k, v in properties.items() if k not in _MINIMAL}
