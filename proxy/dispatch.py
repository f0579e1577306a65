"""The Starlette app shell around an Iceberg REST dispatcher, with one mapping of exceptions to
ErrorModel answers. Nothing here governs: that is ``proxy.pipeline``."""

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
    IcebergError,
    error_body,
    error_response,
)

log = structlog.get_logger("icegov")



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
