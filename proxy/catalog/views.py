"""View endpoints of the embedded catalog: list, create, load, exists, replace, drop, rename.

Answers follow the Iceberg REST spec: ``LoadViewResult`` (``metadata-location``, ``metadata`` as
view metadata, ``config``) for create, load and replace; 204 for exists, drop and rename;
``ListTablesResponse`` for list, paginated when ``pageSize`` is given (the ``next-page-token`` is
opaque to clients: the last name of the page). Missing namespaces and views are 404
(``NoSuchNamespaceException`` / ``NoSuchViewException``), a taken name or a failed
``assert-view-uuid`` 409, invalid bodies 400. Storage is ``proxy.catalog.view_store``; the
metadata rules are ``proxy.catalog.view_metadata``.
"""

from __future__ import annotations

import json

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.typedef import Identifier
from pyiceberg.view.metadata import ViewMetadata
from starlette.responses import JSONResponse, Response

from proxy.catalog import view_store
from proxy.catalog.errors import run_catalog
from proxy.catalog.locations import Warehouse
from proxy.catalog.view_metadata import apply_updates, check_requirements, new_view_metadata
from proxy.catalog.view_wire import (
    MAX_PAGE_SIZE,
    CommitViewRequest,
    CreateViewRequest,
    path_view,
)
from proxy.catalog.wire import RenameTableRequest, parse_body, path_namespace
from proxy.errors import BadRequest
from proxy.inbound import InboundRequest


def view_result(location: str, metadata: ViewMetadata) -> Response:
    """A ``LoadViewResult``."""
    body = (b'{"metadata-location":' + json.dumps(location).encode() + b',"metadata":'
            + metadata.model_dump_json().encode() + b',"config":{}}')
    return Response(body, media_type="application/json")


class ViewHandlers:
    """list / create / load / exists / replace / drop / rename for views."""

    def __init__(self, catalog: SqlCatalog) -> None:
        self._catalog = catalog

    async def list_views(self, inbound: InboundRequest) -> Response:
        namespace = path_namespace(inbound)
        size, after = _page(inbound)
        names = await run_catalog(view_store.list_views, self._catalog, namespace)
        if after is not None:
            names = [n for n in names if n > after]
        body: dict[str, object] = {}
        if size is not None and len(names) > size:
            names = names[:size]
            body["next-page-token"] = names[-1]
        body["identifiers"] = [{"namespace": list(namespace), "name": n} for n in names]
        return JSONResponse(body)

    async def create_view(self, inbound: InboundRequest) -> Response:
        namespace = path_namespace(inbound)
        request = parse_body(CreateViewRequest, inbound)
        return await run_catalog(self._create, (*namespace, request.name), request)

    async def load_view(self, inbound: InboundRequest) -> Response:
        location, metadata = await run_catalog(view_store.load, self._catalog, path_view(inbound))
        return view_result(location, metadata)

    async def view_exists(self, inbound: InboundRequest) -> Response:
        await run_catalog(view_store.metadata_location, self._catalog, path_view(inbound))
        return Response(status_code=204)

    async def replace_view(self, inbound: InboundRequest) -> Response:
        identifier = path_view(inbound)
        request = parse_body(CommitViewRequest, inbound)
        if request.identifier is not None and request.identifier.identifier != identifier:
            raise BadRequest("the commit's identifier names another view than its URL")
        return await run_catalog(self._replace, identifier, request)

    async def drop_view(self, inbound: InboundRequest) -> Response:
        await run_catalog(view_store.drop, self._catalog, path_view(inbound))
        return Response(status_code=204)

    async def rename_view(self, inbound: InboundRequest) -> Response:
        request = parse_body(RenameTableRequest, inbound)
        await run_catalog(view_store.rename, self._catalog, request.source.identifier,
                          request.destination.identifier)
        return Response(status_code=204)

    def _create(self, identifier: Identifier, request: CreateViewRequest) -> Response:
        namespace = Catalog.namespace_from(identifier)
        location = self._catalog._resolve_table_location(
            request.location, Catalog.namespace_to_string(namespace), identifier[-1])
        Warehouse(self._catalog).check(location, "view location")
        metadata = new_view_metadata(request, location)
        return view_result(view_store.create(self._catalog, identifier, metadata), metadata)

    def _replace(self, identifier: Identifier, request: CommitViewRequest) -> Response:
        base_location, base = view_store.load(self._catalog, identifier)
        check_requirements(base, request.requirements)
        metadata = apply_updates(base, request.updates, Warehouse(self._catalog))
        if metadata == base:
            return view_result(base_location, base)
        location = view_store.replace(self._catalog, identifier, base_location, metadata)
        return view_result(location, metadata)


def _page(inbound: InboundRequest) -> tuple[int | None, str | None]:
    """(page size or None, the token: the last name of the previous page, or None)."""
    raw = inbound.query("pageSize")
    size = None
    if raw is not None and raw != "":
        if not raw.isdigit() or not 0 < int(raw) <= MAX_PAGE_SIZE:
            raise BadRequest(f"pageSize must be an integer from 1 to {MAX_PAGE_SIZE}")
        size = int(raw)
    token = inbound.query("pageToken")
    return size, token or None
