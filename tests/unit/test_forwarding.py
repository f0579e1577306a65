"""The forwarding path, against a fake upstream (httpx.MockTransport)."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest
from starlette.testclient import TestClient

from proxy.app import Backing, create_app
from proxy.settings import Settings
from tests.support.errors import assert_error_model

UPSTREAM = "http://backing.test/catalog"


class Upstream:
    """A fake backing catalog that records what reached it."""

    def __init__(self, answer: Callable[[httpx.Request], httpx.Response] | None = None) -> None:
        self.seen: list[httpx.Request] = []
        self._answer = answer or (lambda _: httpx.Response(200, json={"ok": True}))

    def __call__(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.seen.append(request)
        return self._answer(request)


def client_for(upstream: Upstream, **settings: object) -> TestClient:
    app = create_app(Settings(catalog_uri=UPSTREAM, **settings),  # type: ignore[arg-type]
                     Backing(httpx.MockTransport(upstream), UPSTREAM))
    return TestClient(app, raise_server_exceptions=False)


def test_raw_path_query_and_body_are_forwarded_byte_for_byte() -> None:
    upstream = Upstream()
    body = b'{"requirements": [], "updates": []}'
    with client_for(upstream) as client:
        response = client.post("/v1/cat/namespaces/db%1Fsub/tables/t%2Fx?a=1&b=%20", content=body,
                                headers={"content-type": "application/json", "x-custom": "kept"})
    assert response.status_code == 200 and response.json() == {"ok": True}
    [seen] = upstream.seen
    assert seen.url.raw_path == b"/catalog/v1/cat/namespaces/db%1Fsub/tables/t%2Fx?a=1&b=%20"
    assert seen.method == "POST"
    assert seen.content == body
    assert seen.headers["x-custom"] == "kept"


def test_hop_by_hop_headers_are_stripped_both_ways() -> None:
    def answer(_: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"{}", headers={"connection": "close", "keep-alive": "x",
                                                           "x-upstream": "yes"})

    upstream = Upstream(answer)
    with client_for(upstream) as client:
        response = client.get("/v1/namespaces", headers={
            "keep-alive": "timeout=5", "te": "trailers", "proxy-authorization": "secret"})
    [seen] = upstream.seen
    assert "keep-alive" not in seen.headers and "te" not in seen.headers
    assert "proxy-authorization" not in seen.headers
    assert response.headers["x-upstream"] == "yes"
    assert "keep-alive" not in response.headers


def test_backing_errors_pass_through_unchanged() -> None:
    original = b'{"error": {"message": "nope", "type": "NoSuchTableException", "code": 404}}'
    upstream = Upstream(lambda _: httpx.Response(404, content=original,
                                                 headers={"content-type": "application/json"}))
    with client_for(upstream) as client:
        response = client.get("/v1/namespaces/db/tables/missing")
    assert response.status_code == 404
    assert response.content == original


def test_unknown_route_is_404_error_model_and_never_forwarded() -> None:
    upstream = Upstream()
    with client_for(upstream) as client:
        assert_error_model(client.get("/v1/namespaces/db/tables/t/secret-admin"), 404,
                           "NotFoundException")
        assert_error_model(client.get("/admin"), 404, "NotFoundException")
        assert_error_model(client.put("/v1/namespaces/db"), 405, "MethodNotAllowedException")
    assert upstream.seen == []


def test_malformed_json_is_400_and_never_forwarded() -> None:
    upstream = Upstream()
    with client_for(upstream) as client:
        response = client.post("/v1/namespaces", content=b'{"namespace": [')
    assert_error_model(response, 400, "BadRequestException")
    assert upstream.seen == []


def test_oversized_body_is_413() -> None:
    upstream = Upstream()
    with client_for(upstream, max_body_bytes=100) as client:
        response = client.post("/v1/namespaces", content=b"[" + b"1," * 100 + b"1]")
    assert_error_model(response, 413, "PayloadTooLargeException")
    assert upstream.seen == []


def _raise(exc: Exception) -> Callable[[httpx.Request], httpx.Response]:
    def answer(request: httpx.Request) -> httpx.Response:
        raise exc

    return answer


@pytest.mark.parametrize(("path", "method", "status", "error_type"), [
    ("/v1/namespaces", "GET", 503, "ServiceUnavailableException"),
    ("/v1/namespaces/db/tables/t", "POST", 502, "CommitStateUnknownException"),
    ("/v1/transactions/commit", "POST", 502, "CommitStateUnknownException"),
])
def test_unreachable_backing(path: str, method: str, status: int, error_type: str) -> None:
    upstream = Upstream(_raise(httpx.ConnectError("refused")))
    with client_for(upstream) as client:
        response = client.request(method, path, content=b"{}")
    assert_error_model(response, status, error_type)


@pytest.mark.parametrize(("path", "method", "error_type"), [
    ("/v1/namespaces/db/tables/t", "GET", "GatewayTimeoutException"),
    ("/v1/namespaces/db/tables/t", "POST", "CommitStateUnknownException"),
])
def test_backing_timeout_is_504_never_409(path: str, method: str, error_type: str) -> None:
    upstream = Upstream(_raise(httpx.ReadTimeout("slow")))
    with client_for(upstream) as client:
        response = client.request(method, path, content=b"{}")
    assert_error_model(response, 504, error_type)


def test_config_comes_from_the_backing_catalog_with_query() -> None:
    config = {"defaults": {"a": "1"}, "overrides": {"prefix": "p"}}
    upstream = Upstream(lambda _: httpx.Response(200, json=config))
    with client_for(upstream) as client:
        response = client.get("/v1/config?warehouse=wh")
    assert response.json() == config
    assert upstream.seen[0].url.raw_path == b"/catalog/v1/config?warehouse=wh"


def test_static_backing_token_replaces_the_callers_credentials() -> None:
    upstream = Upstream()
    with client_for(upstream, catalog_token="svc-token") as client:
        client.get("/v1/namespaces", headers={"authorization": "Bearer caller"})
    assert upstream.seen[0].headers.get_list("authorization") == ["Bearer svc-token"]


def test_without_backing_credentials_the_callers_header_passes_through() -> None:
    upstream = Upstream()
    with client_for(upstream) as client:
        client.get("/v1/namespaces", headers={"authorization": "Bearer caller"})
    assert upstream.seen[0].headers["authorization"] == "Bearer caller"


def test_client_credentials_are_exchanged_once_and_refreshed_after_401() -> None:
    issued: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/v1/oauth/tokens"):
            form = dict(x.split("=") for x in request.content.decode().split("&"))
            assert form["grant_type"] == "client_credentials" and form["client_id"] == "svc"
            issued.append(f"tok{len(issued)}")
            return httpx.Response(200, json={"access_token": issued[-1], "token_type": "bearer",
                                             "expires_in": 3600})
        if request.headers["authorization"] == "Bearer tok0" and len(issued) == 1 \
                and request.url.path.endswith("/revoked"):
            return httpx.Response(401, json={"error": {"message": "expired", "type": "x",
                                                       "code": 401}})
        return httpx.Response(200, json={})

    upstream = Upstream(answer)
    with client_for(upstream, catalog_credential="svc:s3cret") as client:
        client.get("/v1/namespaces")
        client.get("/v1/namespaces")
        assert issued == ["tok0"]
        client.get("/v1/namespaces/revoked")
        client.get("/v1/namespaces")
    assert issued == ["tok0", "tok1"]
    assert upstream.seen[-1].headers["authorization"] == "Bearer tok1"


def test_health_and_readiness() -> None:
    with client_for(Upstream()) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        assert client.get("/readyz").json()["status"] == "ready"
    with client_for(Upstream(_raise(httpx.ConnectError("down")))) as client:
        assert_error_model(client.get("/readyz"), 503, "ServiceUnavailableException")


def test_every_response_carries_a_request_id() -> None:
    with client_for(Upstream()) as client:
        echoed = client.get("/v1/namespaces", headers={"x-request-id": "abc-123"})
        fresh = client.get("/v1/namespaces")
    assert echoed.headers["x-request-id"] == "abc-123"
    assert len(fresh.headers["x-request-id"]) == 32


def test_unexpected_failure_is_a_500_error_model() -> None:
    upstream = Upstream(_raise(RuntimeError("boom")))
    with client_for(upstream) as client:
        response = client.get("/v1/namespaces")
    assert_error_model(response, 500, "ServiceFailureException")
    assert json.dumps(response.json()).count("boom") == 0


def test_cookies_set_by_the_backing_catalog_never_reach_another_caller() -> None:
    upstream = Upstream(lambda _: httpx.Response(200, json={}, headers={"set-cookie": "s=alice"}))
    with client_for(upstream) as alice:
        first = alice.get("/v1/namespaces")
    with client_for_same_app(alice) as bob:
        bob.get("/v1/namespaces")
    assert first.headers["set-cookie"] == "s=alice"  # relayed to the caller it was meant for
    assert all("cookie" not in seen.headers for seen in upstream.seen)


def client_for_same_app(client: TestClient) -> TestClient:
    """A second caller of the same proxy app, with its own (empty) cookie jar."""
    return TestClient(client.app, raise_server_exceptions=False)
