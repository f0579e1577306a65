"""The inbound request, read once from ASGI into an immutable value."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from starlette.types import Receive, Scope

from proxy.errors import MalformedJson, PayloadTooLarge
from proxy.routes import RouteMatch


@dataclass(frozen=True)
class InboundRequest:
    """What a caller sent, byte for byte, plus the route it matched."""

    method: str
    raw_path: bytes
    query_string: bytes
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes
    route: RouteMatch

    def header(self, name: bytes) -> bytes | None:
        """The first value of a header (``name`` in lowercase)."""
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None

    def query(self, name: str) -> str | None:
        """A decoded query-string parameter (its first value), or None."""
        values = parse_qs(self.query_string.decode("latin-1")).get(name)
        return values[0] if values else None

    def json(self) -> Any:
        """The body as JSON (the route table has already checked it parses)."""
        return json.loads(self.body) if self.body else None


async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The whole request body, refusing anything over ``limit`` bytes with 413."""
    declared = _content_length(scope)
    if declared is not None and declared > limit:
        raise PayloadTooLarge(f"request body of {declared} bytes exceeds the limit of {limit}")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def check_json(body: bytes) -> None:
    """Refuse a body that is not JSON with 400 before anything is forwarded."""
    if not body:
        return
    try:
        json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedJson(f"request body is not valid JSON: {exc}") from exc


def _content_length(scope: Scope) -> int | None:
    for key, value in scope["headers"]:
        if key == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
