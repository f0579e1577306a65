"""The governed pipeline: route → gate → handler (with the admission) → one audit record.

Every request to an Iceberg REST route gets exactly one audit record, written after its outcome
is known, whatever happened: refused by the route table, denied, hidden, failed in a handler or
inside icegov (a 500 that carries ``X-Request-ID`` like every other answer).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

import structlog
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from proxy.admission import Admission
from proxy.audit import AuditLog, AuditRecord
from proxy.backing.forward import relayed
from proxy.backing.tables import BackingRefused
from proxy.context import request_id
from proxy.dispatch import internal_error
from proxy.enforce import Gate
from proxy.errors import IcebergError, error_response
from proxy.inbound import InboundRequest, read_routed
from proxy.routes import ENDPOINTS, RouteTable

log = structlog.get_logger("icegov")

GovernedHandler = Callable[[InboundRequest, Admission], Awaitable[Response]]


class UnhandledEndpoint(RuntimeError):
    """An endpoint the route table says icegov owns has no handler: refuse to start."""


def check_owned_handled(handlers: Mapping[str, GovernedHandler]) -> None:
    """Fail start-up when an owned endpoint has no handler (it would silently be forwarded)."""
    missing = sorted(e.name for e in ENDPOINTS if e.owned and e.name not in handlers)
    if missing:
        raise UnhandledEndpoint(f"owned endpoints without a handler: {', '.join(missing)}")


class GovernedDispatcher:
    """Pure ASGI app: every Iceberg REST request through the gate to its handler, audited."""

    def __init__(self, routes: RouteTable, handlers: Mapping[str, GovernedHandler],
                 forward: GovernedHandler, gate: Gate, audit: AuditLog,
                 max_body_bytes: int) -> None:
        check_owned_handled(handlers)
        self._routes = routes
        self._handlers = dict(handlers)
        self._forward = forward
        self._gate = gate
        self._audit = audit
        self._max_body = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        record = _record(scope)
        response = await self._answer(scope, receive, record)
        record.status = response.status_code
        self._audit.write(record)  # before the answer leaves: a caller never outruns its record
        await response(scope, receive, send)

    async def _answer(self, scope: Scope, receive: Receive, record: AuditRecord) -> Response:
        try:
            return await self._governed(scope, receive, record)
        except IcebergError as exc:
            record.error = exc.message
            return error_response(exc)
        except BackingRefused as refused:
            return relayed(refused.response, refused.response.content)
        except Exception as exc:
            record.decision = "error"
            log.exception("unexpected error", error_type=type(exc).__name__,
                          endpoint=record.endpoint)
            return internal_error()

    async def _governed(self, scope: Scope, receive: Receive, record: AuditRecord) -> Response:
        inbound = await read_routed(self._routes, scope, receive, self._max_body)
        record.endpoint = inbound.route.endpoint.name
        admission = await self._gate.admit(inbound, record)
        handler = self._handlers.get(inbound.route.endpoint.name, self._forward)
        return await handler(inbound, admission)


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
