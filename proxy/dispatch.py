"""Iceberg REST plumbing: reading a request against the route table (body bounded, JSON parsed
once) and the Starlette app shell. Nothing here governs: that is ``proxy.pipeline``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

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
from proxy.inbound import InboundRequest, read_request
from proxy.routes import MalformedPath, RouteTable

log = structlog.get_logger("icegov")



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
    return await read_request(scope, receive, route, max_body)


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
