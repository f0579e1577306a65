"""The embedded Iceberg REST catalog: icegov's default backing catalog, over pyiceberg SqlCatalog.

It is a real REST catalog in its own right (``icegov catalog`` serves it alone); the proxy reaches
it through the same forwarding path as a remote catalog, in-process via httpx's ASGITransport.
It imports nothing of the governed pipeline (gate, intents, classification).

Room: it may import backing, planning, commits, ops, defaults and the shared vocabulary (in
practice only the vocabulary), nothing above.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyiceberg.catalog.sql import SqlCatalog
from starlette.responses import JSONResponse, Response

from proxy.catalog.app import CatalogApp, Handler
from proxy.catalog.namespaces import NamespaceHandlers
from proxy.catalog.store import open_catalog
from proxy.catalog.tables import TableHandlers
from proxy.catalog.views import ViewHandlers
from proxy.errors import NotSupported
from proxy.inbound import InboundRequest
from proxy.routes import ENDPOINTS

if TYPE_CHECKING:  # settings pull in the governed pipeline's configuration; the catalog need not
    from proxy.settings import Settings


@dataclass
class EmbeddedCatalog:
    """The embedded catalog: its ASGI app and the SqlCatalog behind it."""

    catalog: SqlCatalog
    app: CatalogApp

    @classmethod
    def from_settings(cls, settings: Settings) -> EmbeddedCatalog:
        """The catalog on the configured warehouse (a local directory, or an object store read
        and written with ``settings.file_io``) and database."""
        catalog = open_catalog(settings.embedded_db_uri(), settings.warehouse, settings.file_io)
        return cls(catalog, create_catalog_app(catalog, settings.max_body_bytes))

    async def aclose(self) -> None:
        self.catalog.engine.dispose()


def catalog_handlers(catalog: SqlCatalog) -> dict[str, Handler]:
    """Handlers by endpoint name for everything the embedded catalog implements."""
    namespaces = NamespaceHandlers(catalog)
    tables = TableHandlers(catalog)
    views = ViewHandlers(catalog)
    handlers: dict[str, Handler] = {
        endpoint.name: getattr(group, endpoint.name)
        for group in (namespaces, tables, views)
        for endpoint in ENDPOINTS if hasattr(group, endpoint.name)
    }
    implemented = sorted(e.spec for e in ENDPOINTS if e.name in handlers or e.name == "get_config")

    async def get_config(_: InboundRequest) -> Response:
        return JSONResponse({"defaults": {}, "overrides": {}, "endpoints": implemented})

    handlers["get_config"] = get_config
    return handlers


def create_catalog_app(catalog: SqlCatalog, max_body_bytes: int) -> CatalogApp:
    """The embedded catalog as an ASGI app; endpoints it does not implement answer 501."""
    return CatalogApp(catalog_handlers(catalog), _not_supported, max_body_bytes)


async def _not_supported(inbound: InboundRequest) -> Response:
    raise NotSupported(f"the embedded catalog does not implement {inbound.route.endpoint.spec}")
