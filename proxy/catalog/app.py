"""The embedded catalog's own ASGI app: route table → handler, every failure an ErrorModel.

It shares the route table and the request reader with the proxy, and nothing of the governed
pipeline. No exception escapes it: an in-process transport (httpx's ``ASGITransport``) would
otherwise re-raise it inside the proxy instead of delivering an answer. An unexpected failure is
logged and answered 500 ``ServiceFailureException`` without its text.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

import structlog
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from proxy.errors import (
    IcebergError,
    error_body,
    error_response,
)
from proxy.inbound import InboundRequest, read_routed
from proxy.routes import RouteTable

log = structlog.get_logger("icegov.catalog")

Handler = Callable[[InboundRequest], Awaitable[Response]]


class CatalogApp:
    """Pure ASGI app serving ``handlers`` by endpoint name; other endpoints go to ``fallback``."""

    def __init__(self, handlers: Mapping[str, Handler], fallback: Handler, max_body_bytes: int,
                 routes: RouteTable | None = None) -> None:
        self._handlers = dict(handlers)
        self._fallback = fallback
        self._max_body = max_body_bytes
        self._routes = routes or RouteTable()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
        elif scope["type"] == "http":
            response = await self._respond(scope, receive)
            await response(scope, receive, send)

    async def _respond(self, scope: Scope, receive: Receive) -> Response:
        try:
            inbound = await read_routed(self._routes, scope, receive, self._max_body)
            handler = self._handlers.get(inbound.route.endpoint.name, self._fallback)
            return await handler(inbound)
        except IcebergError as exc:
            return error_response(exc)
        except Exception as exc:
            log.error("unexpected error in the embedded catalog", path=scope.get("path"),
                      error=type(exc).__name__, exc_info=exc)
            return JSONResponse(
                error_body(500, "ServiceFailureException", "internal error in the catalog"),
                status_code=500)


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
