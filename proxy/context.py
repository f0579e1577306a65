"""Per-request context, as pure ASGI middleware (no BaseHTTPMiddleware: it fights streaming).

The request id is also bound in structlog's contextvars for the duration of the request, so every
log line written while handling it (in this task, its child tasks and its threadpool calls, which
copy the context) carries ``request_id``.
"""

from __future__ import annotations

import re
import uuid

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

REQUEST_ID_HEADER = b"x-request-id"
_SAFE_ID = re.compile(rb"^[A-Za-z0-9._:-]{1,128}$")


def request_id(scope: Scope) -> str:
    """The request id of this request (set by ``RequestContextMiddleware``)."""
    return str(scope.get("state", {}).get("request_id", ""))


class RequestContextMiddleware:
    """Gives every request an id (the caller's ``X-Request-ID`` if sane) and echoes it back."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = _incoming_id(scope) or uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = rid
        header = (REQUEST_ID_HEADER, rid.encode("ascii"))

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), header]
            await send(message)

        with structlog.contextvars.bound_contextvars(request_id=rid):
            await self.app(scope, receive, send_with_id)


def _incoming_id(scope: Scope) -> str | None:
    for key, value in scope["headers"]:
        if key == REQUEST_ID_HEADER and _SAFE_ID.match(value):
            return str(value.decode("ascii"))
    return None
