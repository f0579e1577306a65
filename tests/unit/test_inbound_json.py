"""JSON bodies: parsed once, within limits, refused with 400 before anything else reads them."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from proxy.errors import MalformedJson
from proxy.inbound import MAX_JSON_DEPTH, InboundRequest, check_json, read_request
from proxy.routes import RouteTable


@pytest.mark.parametrize("body", [
    b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1),
    b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    b"[" * 1_000_000,  # unbalanced: still refused for depth, never parsed
    b'{"a": NaN}', b'{"a": Infinity}', b"[-Infinity]", b"1e999", b"[-1e400]",
    b"9223372036854775808", b"-9223372036854775809", b"1" * 5000,
    b'{"a": 1, "a": 1}', b'{"x": {"b": 1, "c": 2, "b": 3}}',
    b'"\\ud800"', b'{"\\udc00": 1}', b'["\\ud83d"]',
    b"\xff\xfe[\x00]\x00", b"\xef\xbb\xbf{}", b'"\xc3"',
    b"{", b"[1,]", b"nul", b"{'a': 1}",
])
def test_refused_bodies(body: bytes) -> None:
    with pytest.raises(MalformedJson) as refused:
        check_json(body)
    assert refused.value.status == 400
    assert "sys." not in refused.value.message and "\\x" not in refused.value.message


@pytest.mark.parametrize(("body", "value"), [
    (b"", None),
    (b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH, json.loads(b"[" * 64 + b"]" * 64)),
    (b'["' + b"[" * 500 + b'", "\\"{{{{"]', ["[" * 500, '"{{{{']),
    (b"9223372036854775807", 2**63 - 1), (b"-9223372036854775808", -(2**63)),
    (b'"1234567890123456789012345"', "1234567890123456789012345"),
    (b"1.7976931348623157e308", 1.7976931348623157e308),
    (b'"\\ud83d\\ude00"', "\U0001f600"), (b'"\\\\ud800"', "\\ud800"),
    (b'{"a": {"a": 1}, "b": [{"a": 2}, {"a": 3}]}', {"a": {"a": 1}, "b": [{"a": 2}, {"a": 3}]}),
])
def test_accepted_bodies(body: bytes, value: Any) -> None:
    assert check_json(body) == value


def _request(body: bytes) -> InboundRequest:
    route = RouteTable().match("POST", "/v1/namespaces")
    assert route is not None
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return messages.pop()

    scope = {"type": "http", "method": "POST", "path": "/v1/namespaces", "headers": [],
             "query_string": b""}
    return anyio.run(read_request, scope, receive, route, 1 << 24)


def test_the_body_is_parsed_once_by_the_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    request = _request(b'{"namespace": ["a"]}')
    monkeypatch.setattr(json, "loads", lambda *_, **__: pytest.fail("parsed twice"))
    assert request.json() == {"namespace": ["a"]}
    assert request.json() is request.json()


def test_a_big_body_is_parsed_the_same_off_the_event_loop() -> None:
    body = {"namespace": ["a"], "properties": {f"k{i}": "v" * 64 for i in range(20_000)}}
    assert _request(json.dumps(body).encode()).json() == body
    with pytest.raises(MalformedJson):
        _request(json.dumps(body).encode()[:-1] + b', "namespace": 1}')


def test_a_request_built_without_a_parsed_body_parses_it_on_first_use() -> None:
    route = RouteTable().match("POST", "/v1/namespaces")
    assert route is not None
    request = InboundRequest("POST", b"/v1/namespaces", b"", (), b'{"a": [1]}', route)
    assert request.json() == {"a": [1]} and request.json() is request.json()
    with pytest.raises(MalformedJson):
        InboundRequest("POST", b"/v1/namespaces", b"", (), b'{"a": NaN}', route).json()
