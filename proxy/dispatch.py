"""The Iceberg REST entry point: route table → inbound request → owned handler or forward."""

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

from proxy.audit import AuditRecord
from proxy.commit_intents import BackingAnswer
from proxy.context import request_id
from proxy.enforce import Gate
from proxy.errors import (
    IcebergError,
    MethodNotAllowed,
    NotFound,
    error_body,
    error_response,
)
from proxy.inbound import InboundRequest, check_json, read_body
from proxy.routes import RouteTable

log = structlog.get_logger("icegov")

Handler = Callable[[InboundRequest], Awaitable[Response]]


class IcebergDispatcher:
    """Pure ASGI app for the Iceberg REST routes: handlers by endpoint name, else ``fallback``.

    The proxy's fallback forwards to the backing catalog; the embedded catalog's refuses with 501.
    A request for no known endpoint is refused here and never reaches either.
    """

    def __init__(
        self, routes: RouteTable, handlers: Mapping[str, Handler], fallback: Handler,
        max_body_bytes: int, gate: Gate | None = None,
    ) -> None:
        self._routes = routes
        self._handlers = dict(handlers)
        self._fallback = fallback
        self._max_body = max_body_bytes
        self._gate = gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._gate is None:
            inbound = await self._read(scope, receive)
            response = await self._handler(inbound)(inbound)
            await response(scope, receive, send)
            return
        record = _record(scope)
        try:
            response = await self._governed(scope, receive, self._gate, record)
            record.status = response.status_code
            await response(scope, receive, send)
        except IcebergError as exc:
            record.status = exc.status
            raise
        finally:
            self._gate.audit.write(record)

    async def _governed(self, scope: Scope, receive: Receive, gate: Gate,
                        record: AuditRecord) -> Response:
        inbound = await self._read(scope, receive)
        record.endpoint = inbound.route.endpoint.name
        try:
            admission = await gate.admit(inbound, record)
        except BackingAnswer as answer:  # the table could not be loaded to classify a commit
            return Response(answer.body, answer.status, media_type=answer.content_type)
        if admission.intent.listing:
            return await gate.listing(inbound, admission)
        return await self._handler(inbound)(inbound)

    def _handler(self, inbound: InboundRequest) -> Handler:
        return self._handlers.get(inbound.route.endpoint.name, self._fallback)

    async def _read(self, scope: Scope, receive: Receive) -> InboundRequest:
        method = scope["method"]
        raw_path: bytes = scope.get("raw_path") or scope["path"].encode("utf-8")
        path = raw_path.decode("latin-1")
        route = self._routes.match(method, path)
        if route is None:
            if self._routes.path_known(path):
                raise MethodNotAllowed(f"{method} is not allowed on {path}")
            raise NotFound(f"no Iceberg REST endpoint {method} {path}")
        body = await read_body(scope, receive, self._max_body)
        if route.endpoint.json_body:
            check_json(body)
        return InboundRequest(
            method=method, raw_path=raw_path, query_string=scope.get("query_string", b""),
            headers=tuple(scope["headers"]), body=body, route=route,
        )


def _record(scope: Scope) -> AuditRecord:
    headers = dict(scope["headers"])
    raw_path: bytes = scope.get("raw_path") or scope["path"].encode("utf-8")

    def text(name: bytes) -> str | None:
        value = headers.get(name)
        return value.decode("latin-1") if value is not None else None

    return AuditRecord(
        request_id=request_id(scope), method=scope["method"], path=raw_path.decode("latin-1"),
        endpoint="unknown", user_agent=text(b"user-agent"),
        client_version=text(b"x-client-version"),
    )


def iceberg_app(
    dispatcher: IcebergDispatcher, routes: Sequence[BaseRoute] = (),
    middleware: Sequence[Middleware] = (), lifespan: Lifespan[Starlette] | None = None,
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
    log.exception("unexpected error", path=request.url.path, error=repr(exc))
    return JSONResponse(error_body(500, "ServiceFailureException", "internal error in icegov"),
                        status_code=500)
