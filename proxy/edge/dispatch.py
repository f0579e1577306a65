"""The Starlette app shell around an Iceberg REST dispatcher, with one mapping of exceptions to
ErrorModel answers. Nothing here governs: that is ``proxy.edge.pipeline``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import structlog
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Lifespan, Receive, Scope, Send

from proxy.errors import (
    IcebergError,
    error_body,
    error_response,
)

log = structlog.get_logger("icegov")



class FastLaneApp(Starlette):
    """A Starlette app whose unmatched requests go to ``dispatcher``, every error as ErrorModel,
    and whose catalog requests skip Starlette's own layers.

    Every HTTP request whose path is not one of ``routes`` (health, readiness, metrics) goes to
    ``dispatcher`` inside ``last_resort`` only: Starlette's error and exception middleware and
    its router cost a tenth of icegov's own time per request, and the dispatcher answers every
    error itself. ``last_resort`` (``RequestContextMiddleware``) answers whatever escapes."""

    def __init__(self, dispatcher: Callable[[Scope, Receive, Send], Awaitable[None]],
                 last_resort: Callable[[ASGIApp], ASGIApp], routes: Sequence[Route],
                 lifespan: Lifespan[Starlette] | None = None) -> None:
        super().__init__(
            routes=list(routes), middleware=[Middleware(last_resort)], lifespan=lifespan,
            exception_handlers={IcebergError: _iceberg_error, HTTPException: _http_error,
                                Exception: _unexpected_error})
        self.router.default = dispatcher
        self._lane = last_resort(dispatcher)
        self._own_paths = frozenset(route.path for route in routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in self._own_paths:
            scope["app"] = self
            await self._lane(scope, receive, send)
            return
        if scope["type"] == "websocket":  # the Iceberg REST API has none: refused (403)
            await send({"type": "websocket.close", "code": 1008})
            return
        await super().__call__(scope, receive, send)


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
