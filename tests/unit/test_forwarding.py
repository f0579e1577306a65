"""The forwarding path, against a fake upstream (httpx.MockTransport)."""

from __future__ import annotations

import json
from collections.abc import Callable
from unittest.mock import patch

import httpx
import pytest
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.types import LongType, NestedField
from starlette.testclient import TestClient

from proxy.commits.operations import DATA_OPERATIONS
from proxy.routes import PLANNING_SPECS
from proxy.settings import Settings
from tests.support.errors import assert_error_model
from tests.support.upstream import Upstream, client_for, icegov_token


def test_raw_path_query_and_body_are_forwarded_byte_for_byte() -> None:
    upstream = Upstream()
    body = b'{"removals": [],  "updates": {"k": "v"}}'
    with client_for(upstream) as client:
        response = client.post("/v1/cat/namespaces/db%1Fsub/properties?a=1&b=%20", content=body,
                               headers={"content-type": "application/json", "x-custom": "kept"})
        loaded = client.get("/v1/cat/namespaces/db%1Fsub/tables/t%20x?snapshots=all")
    assert response.status_code == 200 and response.json() == {"ok": True}
    assert loaded.status_code == 200
    probe = b"/catalog/v1/cat/namespaces/db/tables/sub"  # ``db.sub`` a table? (gate.nesting)
    first, second = [seen for seen in upstream.seen if seen.url.raw_path != probe]
    assert first.url.raw_path == b"/catalog/v1/cat/namespaces/db%1Fsub/properties?a=1&b=%20"
    assert first.method == "POST"
    assert first.content == body
    assert "x-custom" not in first.headers  # not a header of the protocol's
    assert second.url.raw_path == b"/catalog/v1/cat/namespaces/db%1Fsub/tables/t%20x?snapshots=all"


def test_only_the_protocols_headers_and_the_configured_ones_reach_the_backing() -> None:
    upstream = Upstream()
    sent = {"content-type": "application/json", "x-client-version": "1.10.0",
            "x-iceberg-access-delegation": "vended-credentials", "traceparent": "00-a-b-01",
            "cookie": "session=someone-else", "x-forwarded-user": "admin",
            "polaris-realm": "other-tenant", "x-amz-date": "20261123T000000Z"}
    with client_for(upstream, forward_headers=["X-Amz-Date"]) as client:
        client.get("/v1/cat/namespaces/db", headers=sent)
    [seen] = upstream.seen
    passed = {k for k in sent if k in seen.headers}
    assert passed == {"content-type", "x-client-version", "x-iceberg-access-delegation",
                      "traceparent", "x-amz-date"}


def test_forward_headers_must_be_header_names() -> None:
    with pytest.raises(ValueError, match="not a header name"):
        Settings(forward_headers=["x-ok", "bad header"])


def test_hop_by_hop_headers_are_stripped_both_ways() -> None:
    def answer(_: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"{}", headers={"connection": "close", "keep-alive": "x",
                                                           "x-upstream": "yes"})

    upstream = Upstream(answer)
    with client_for(upstream) as client:
        response = client.get("/v1/namespaces/db", headers={
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


TABLE_METADATA = new_table_metadata(
    Schema(NestedField(1, "id", LongType())), UNPARTITIONED_PARTITION_SPEC, UNSORTED_SORT_ORDER,
    "file:///tmp/icegov-unit/t", {})
ALTER_COMMIT = json.dumps({
    "requirements": [{"type": "assert-table-uuid", "uuid": str(TABLE_METADATA.table_uuid)}],
    "updates": [{"action": "set-properties", "updates": {"k": "v"}}]})
TRANSACTION = json.dumps({"table-changes": [
    {"identifier": {"namespace": ["db"], "name": "t"}, **json.loads(ALTER_COMMIT)}]})


def _commits_fail_with(exc: Exception) -> Callable[[httpx.Request], httpx.Response]:
    """Loading the table works (so the commit can be classified); the commit itself fails."""
    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            metadata = json.loads(TABLE_METADATA.model_dump_json())
            return httpx.Response(200, json={"metadata": metadata,
                                             "metadata-location": "file:///tmp/icegov-unit/m.json"})
        raise exc

    return answer


def test_unreachable_backing_outside_commits_is_503() -> None:
    with client_for(Upstream(_raise(httpx.ConnectError("refused")))) as client:
        assert_error_model(client.get("/v1/namespaces"), 503, "ServiceUnavailableException")


@pytest.mark.parametrize("path", ["/v1/namespaces/db/tables/t", "/v1/transactions/commit"])
def test_commit_that_cannot_reach_the_backing_has_unknown_outcome(path: str) -> None:
    upstream = Upstream(_commits_fail_with(httpx.ConnectError("refused")))
    body = ALTER_COMMIT if path.endswith("/t") else TRANSACTION
    with client_for(upstream) as client:
        response = client.post(path, content=body)
    assert_error_model(response, 502, "CommitStateUnknownException")
    # classified, the commit itself failed, then the table was reloaded to reconcile
    assert [r.method for r in upstream.seen][-2:] == ["POST", "GET"]


def test_backing_timeout_is_504() -> None:
    with client_for(Upstream(_raise(httpx.ReadTimeout("slow")))) as client:
        assert_error_model(client.get("/v1/namespaces/db/tables/t"), 504,
                           "GatewayTimeoutException")


def test_commit_timeout_is_504_never_409() -> None:
    upstream = Upstream(_commits_fail_with(httpx.ReadTimeout("slow")))
    with client_for(upstream) as client:
        response = client.post("/v1/namespaces/db/tables/t", content=ALTER_COMMIT)
    assert_error_model(response, 504, "CommitStateUnknownException")


def test_config_comes_from_the_backing_catalog_with_query() -> None:
    config = {"defaults": {"a": "1"}, "overrides": {"prefix": "p"}}
    upstream = Upstream(config=config)
    with client_for(upstream) as client:
        response = client.get("/v1/config?warehouse=wh")
    body = response.json()
    icegov_own = ("endpoints", "idempotency-key-lifetime", "defaults")
    assert {k: v for k, v in body.items() if k not in icegov_own} == \
        {k: v for k, v in config.items() if k not in icegov_own}
    # the backing's defaults, plus the data operations icegov commits itself
    assert body["defaults"] == {**config["defaults"],
                                "icegov.data-operations": ",".join(sorted(DATA_OPERATIONS))}
    # no endpoints listed: the spec's default set, which is what icegov will forward
    assert "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}" in body["endpoints"]
    assert not any(e.startswith("HEAD") for e in body["endpoints"])
    assert set(body["endpoints"]) >= PLANNING_SPECS  # served by icegov itself
    assert upstream.configs[-1].url.raw_path == b"/catalog/v1/config?warehouse=wh"


def test_static_backing_token_replaces_the_callers_credentials() -> None:
    upstream = Upstream()
    with client_for(upstream, catalog_token="svc-token") as client:
        token = icegov_token(client)
        client.get("/v1/namespaces", headers={"authorization": f"Bearer {token}"})
    assert upstream.seen[-1].headers.get_list("authorization") == ["Bearer svc-token"]


def test_the_callers_token_is_never_forwarded_by_default() -> None:
    upstream = Upstream()
    with client_for(upstream) as client:
        token = icegov_token(client)
        assert client.get("/v1/namespaces/db",
                          headers={"authorization": f"Bearer {token}"}).status_code == 200
    assert "authorization" not in upstream.seen[-1].headers


def test_the_callers_token_is_forwarded_when_pass_through_is_configured() -> None:
    upstream = Upstream()
    with client_for(upstream, identity={"pass_through_caller_token": True}) as client:
        token = icegov_token(client)
        client.get("/v1/namespaces", headers={"authorization": f"Bearer {token}"})
    assert upstream.seen[-1].headers["authorization"] == f"Bearer {token}"


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
    with client_for(Upstream(_raise(httpx.ConnectError("down")), config=False)) as client:
        assert_error_model(client.get("/readyz"), 503, "ServiceUnavailableException")


def test_readiness_probes_share_one_look_at_the_backing() -> None:
    """Anyone may probe /readyz: a flood of probes costs the backing one config request a
    second, and a backing that goes down shows within that second."""
    down = [False]

    def answer(request: httpx.Request) -> httpx.Response:
        if down[0]:
            raise httpx.ConnectError("down")
        return httpx.Response(200, json={"defaults": {}, "overrides": {}})

    upstream = Upstream(answer, config=False)  # config requests are recorded in ``seen``
    with client_for(upstream) as client:
        with patch("proxy.handlers.health.READY_CHECK_SECONDS", 3600.0):
            assert all(client.get("/readyz").status_code == 200 for _ in range(20))
            assert len(upstream.seen) == 1
            down[0] = True
            assert client.get("/readyz").status_code == 200  # the last look still stands
        with patch("proxy.handlers.health.READY_CHECK_SECONDS", 0.0):
            assert_error_model(client.get("/readyz"), 503, "ServiceUnavailableException")
        assert len(upstream.seen) == 2


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
        first = alice.get("/v1/namespaces/db")
    with client_for_same_app(alice) as bob:
        bob.get("/v1/namespaces/db")
    assert first.headers["set-cookie"] == "s=alice"  # relayed to the caller it was meant for
    assert all("cookie" not in seen.headers for seen in upstream.seen)


def client_for_same_app(client: TestClient) -> TestClient:
    """A second caller of the same proxy app, with its own (empty) cookie jar."""
    return TestClient(client.app, raise_server_exceptions=False)
