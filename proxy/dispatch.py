"""Iceberg REST plumbing shared by the proxy and the embedded catalog: reading a request against
the route table, an ungoverned dispatcher (the embedded catalog's), and the Starlette app shell.

Nothing here governs: the proxy's governed pipeline is ``proxy.pipeline``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence

import structlog
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute
from starlette.types import Lifespan, Receive, Scope, Send

from proxy.errors import (
    BadRequest,
    IcebergError,
    MethodNotAllowed,
    NotFound,
    error_body,
    error_response,
)
from proxy.inbound import InboundRequest, check_json, read_body
from proxy.routes import MalformedPath, RouteTable

log = structlog.get_logger("icegov")

Handler = Callable[[InboundRequest], Awaitable[Response]]


async def read_inbound(routes: RouteTable, scope: Scope, receive: Receive,
                       max_body: int) -> InboundRequest:
    """The request matched to its endpoint, body read (bounded) and JSON-checked."""
    method = scope["method"]
    raw_path: bytes = scope.get("raw_path") or scope["path"].encode("utf-8")
    path = raw_path.decode("latin-1")
    try:
        route = routes.match(method, path)
    except MalformedPath as exc:
        raise BadRequest(str(exc)) from exc
    if route is None:
        if routes.path_known(path):
            raise MethodNotAllowed(f"{method} is not allowed on this path")
        raise NotFound("no such Iceberg REST endpoint")
    body = await read_body(scope, receive, max_body)
    if route.endpoint.json_body:
        check_json(body)
    return InboundRequest(
        method=method, raw_path=raw_path, query_string=scope.get("query_string", b""),
        headers=tuple(scope["headers"]), body=body, route=route,
    )


class IcebergDispatcher:
    """Pure ASGI app for the Iceberg REST routes: handlers by endpoint name, else ``fallback``.

    The embedded catalog's fallback refuses with 501. A request for no known endpoint is refused
    here and never reaches either.
    """

    def __init__(self, routes: RouteTable, handlers: Mapping[str, Handler], fallback: Handler,
                 max_body_bytes: int) -> None:
        self._routes = routes
        self._handlers = dict(handlers)
        self._fallback = fallback
        self._max_body = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        inbound = await read_inbound(self._routes, scope, receive, self._max_body)
        handler = self._handlers.get(inbound.route.endpoint.name, self._fallback)
        response = await handler(inbound)
        await response(scope, receive, send)


def iceberg_app(
    dispatcher: Callable[[Scope, Receive, Send], Awaitable[None]],
    routes: Sequence[BaseRoute] = (), middleware: Sequence[Middleware] = (),
    lifespan: Lifespan[Starlette] | None = None,
) -> Starlette:
    """A Starlette app whose unmatched requests go to ``dispatcher``, every error as ErrorModel."""
    app = Starlette(
        routes=list(routes), middleware=list(middleware), lifespan=lifespan,
        exception_handlers={
            IcebergError: _iceberg_error, HTTPException: _http_error, Exception: _unexpected_error},
    )
    app.router.default = dispatcher
    return app


async def _iceberg_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, IcebergError)
    return error_response(exc)


async def _http_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return JSONResponse(error_body(exc.status_code, "HTTPException", exc.detail),
                        status_code=exc.status_code)


async def _unexpected_error(request: Request, exc: Exception) -> Response:
    log.exception("unexpected error", path=request.url.path, error_type=type(exc).__name__)
    return internal_error()


def internal_error() -> JSONResponse:
    """The one answer for a failure inside icegov: a 500 ErrorModel that reveals nothing."""
    return JSONResponse(error_body(500, "ServiceFailureException", "internal error in icegov"),
                        status_code=500)
