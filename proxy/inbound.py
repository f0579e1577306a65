"""The inbound request, read once from ASGI into an immutable value, its JSON body parsed once.

JSON bodies are checked before anything else looks at them (before authentication), cheaply:

- size: ``max_body_bytes`` (413), enforced while the body is read;
- nesting: at most ``MAX_JSON_DEPTH`` levels of arrays/objects, counted on the raw bytes without
  recursion, so a deeply nested body never reaches a recursive parser (400);
- encoding: UTF-8 only (RFC 8259), no byte-order mark, no unpaired UTF-16 surrogate escapes;
- values: no ``NaN``/``Infinity`` literals and no number that overflows to infinity (Python's
  ``json`` accepts them, JSON does not); integers must fit in a signed 64-bit long (Iceberg has
  no wider integer);
- keys: **duplicate keys are refused**. icegov decides on its parse of a body but forwards the
  original bytes; a backing catalog whose parser keeps the first of two duplicate keys (Python's
  keeps the last) would act on something that was never authorized.

Bodies over ``OFF_LOOP_BYTES`` are parsed in a worker thread so that a multi-megabyte body does
not stall the event loop.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any
from urllib.parse import parse_qs, unquote_plus

from anyio import to_thread
from starlette.types import Receive, Scope

from proxy.errors import BadRequest, MalformedJson, MethodNotAllowed, NotFound, PayloadTooLarge
from proxy.routes import MalformedPath, RouteMatch, RouteTable

MAX_JSON_DEPTH = 64
OFF_LOOP_BYTES = 256 * 1024
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


class _Unparsed:
    """Marks an ``InboundRequest`` whose body has not been parsed yet."""

    def __repr__(self) -> str:
        return "<unparsed>"


UNPARSED: Any = _Unparsed()


@dataclass(frozen=True)
class InboundRequest:
    """What a caller sent, byte for byte, plus the route it matched.

    ``parsed`` is the body as JSON when the reader already parsed it (``read_request`` does);
    otherwise ``json()`` parses it on first use, with the same limits, and keeps the value.
    """

    method: str
    raw_path: bytes
    query_string: bytes
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes
    route: RouteMatch
    parsed: Any = field(default=UNPARSED, compare=False, repr=False)

    def header(self, name: bytes) -> bytes | None:
        """The first value of a header (``name`` in lowercase)."""
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None

    def query(self, name: str) -> str | None:
        """A decoded query-string parameter, or None; 400 when it is given more than once (a
        backing that takes the last value must not act on another one than was checked) or is
        not valid UTF-8."""
        try:
            values = parse_qs(self.query_string.decode("latin-1"), keep_blank_values=True,
                              errors="strict").get(name, [])
        except UnicodeDecodeError as exc:
            raise BadRequest(f"query parameter {name!r} is not valid UTF-8") from exc
        if len(values) > 1:
            raise BadRequest(f"query parameter {name!r} given more than once")
        return values[0] if values else None

    def json(self) -> Any:
        """The body as JSON (None when empty), parsed once; 400 if it is not acceptable JSON."""
        if self.parsed is UNPARSED:
            object.__setattr__(self, "parsed", check_json(self.body))
        return self.parsed


async def read_routed(routes: RouteTable, scope: Scope, receive: Receive,
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
    check_query_names(scope.get("query_string", b""))
    return await read_request(scope, receive, route, max_body)


QUERY_NAMES = {name.lower(): name for name in (
    "purgeRequested", "pageToken", "pageSize", "parent", "planId", "snapshots", "warehouse",
    "referenced-by")}
"""The REST spec's query parameters, by their lower-cased names."""


def check_query_names(query: bytes) -> None:
    """400 for a query string some servers read otherwise than icegov: a ``;`` (a separator to
    some, e.g. Quarkus), or a spec parameter spelled in another case (some servers match names
    case-insensitively), which icegov would not see as that parameter."""
    if not query:
        return
    if b";" in query:
        raise BadRequest("a query string may not hold ';'")
    for pair in query.split(b"&"):
        name = unquote_plus(pair.partition(b"=")[0].decode("latin-1"))
        spelled = QUERY_NAMES.get(name.lower())
        if spelled is not None and spelled != name:
            raise BadRequest(f"query parameter {name!r} must be spelled {spelled!r}")


async def read_request(scope: Scope, receive: Receive, route: RouteMatch,
                       max_body_bytes: int) -> InboundRequest:
    """Read the body of a request matched to ``route``; JSON routes get their body parsed (and
    refused with 400/413) here, before anything else sees the request."""
    body = await read_body(scope, receive, max_body_bytes)
    parsed = await parse_json_body(body) if route.endpoint.json_body else UNPARSED
    raw_path: bytes = scope.get("raw_path") or scope["path"].encode("utf-8")
    return InboundRequest(
        method=scope["method"], raw_path=raw_path, query_string=scope.get("query_string", b""),
        headers=tuple(scope["headers"]), body=body, route=route, parsed=parsed,
    )


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


async def parse_json_body(body: bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``check_json``, in a worker thread when the body is big enough to stall the event loop."""
    if len(body) > OFF_LOOP_BYTES:
        return await to_thread.run_sync(check_json, body, max_depth)
    return check_json(body, max_depth)


def check_json(body: bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """The body parsed as JSON (None when empty); 400 when it breaks any rule of this module."""
    if not body:
        return None
    check_depth(body, max_depth)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedJson("request body is not valid UTF-8") from exc
    value = _loads(text, wide_ints=_MAYBE_WIDE_INT.search(body) is not None)
    if _SURROGATE_ESCAPE.search(body):
        _refuse_lone_surrogates(value)
    return value


def check_depth(body: bytes, max_depth: int = MAX_JSON_DEPTH) -> None:
    """400 when arrays/objects nest deeper than ``max_depth`` (brackets in strings don't count).

    Linear in the body, no recursion: strings are blanked out by one regular expression, every
    other byte but brackets is dropped, and the running depth is an accumulated sum.
    """
    if body.count(b"[") + body.count(b"{") <= max_depth:
        return
    brackets = _STRING.sub(b"", body).translate(None, _NOT_BRACKETS)
    deepest = max(accumulate(map(_STEP.__getitem__, brackets)), default=0)
    if deepest > max_depth:
        raise MalformedJson(f"request body nests deeper than {max_depth} levels")


def _loads(text: str, wide_ints: bool) -> Any:
    hooks: dict[str, Any] = {"parse_constant": _refuse_constant, "parse_float": _finite_float,
                             "object_pairs_hook": _unique_keys}
    if wide_ints:
        hooks["parse_int"] = _long
    try:
        return json.loads(text, **hooks)
    except json.JSONDecodeError as exc:
        raise MalformedJson(
            f"request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from exc
    except RecursionError as exc:  # depth is checked first; this is a second line of defence
        raise MalformedJson("request body nests too deeply") from exc
    except ValueError as exc:  # e.g. an integer literal longer than Python converts
        raise MalformedJson("request body is not valid JSON: a number is out of range") from exc


def _refuse_constant(name: str) -> Any:
    raise MalformedJson(f"request body is not valid JSON: {name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise MalformedJson("request body is not valid JSON: a number overflows to infinity")
    return value


def _long(text: str) -> int:
    value = int(text)
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise MalformedJson("request body has an integer outside the signed 64-bit range")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        keys = [key for key, _ in pairs]
        duplicate = next(key for index, key in enumerate(keys) if key in keys[:index])
        raise MalformedJson(f"request body has the key {duplicate[:64]!r} twice in one object")
    return value


def _refuse_lone_surrogates(value: Any) -> None:
    """400 when some string or key holds an unpaired surrogate (not encodable as UTF-8)."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item)
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise MalformedJson("request body has an unpaired UTF-16 surrogate") from exc


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = [1 if b in b"[{" else -1 if b in b"]}" else 0 for b in range(256)]
_MAYBE_WIDE_INT = re.compile(rb"\d{19}")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _content_length(scope: Scope) -> int | None:
    for key, value in scope["headers"]:
        if key == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
