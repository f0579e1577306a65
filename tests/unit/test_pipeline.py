"""The governed pipeline against a fake backing: what is forwarded, names, prefixes, commit
outcomes, pins, and failures inside icegov."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx
import pytest
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.types import LongType, NestedField

from proxy.backing.tables import parse_table_state
from proxy.edge.pipeline import UnhandledEndpoint, check_owned_handled
from proxy.gate.listing import READ_SIZE
from proxy.resources import Resource
from proxy.routes import PLANNING_SPECS
from tests.support.errors import assert_error_model
from tests.support.upstream import ALL_ENDPOINTS, Upstream, client_for, icegov_token

TABLE = "/v1/namespaces/db/tables/t"


def loaded_table(tmp: Path) -> dict[str, object]:
    """A LoadTableResult of an empty table (no snapshot) whose files live under ``tmp``."""
    schema = Schema(NestedField(1, "id", LongType(), required=False))
    metadata = new_table_metadata(schema, UNPARTITIONED_PARTITION_SPEC, UNSORTED_SORT_ORDER,
                                  str(tmp / "t"), {}, table_uuid=uuid.UUID(int=7))
    return {"metadata-location": str(tmp / "t" / "metadata" / "v1.json"),
            "metadata": json.loads(metadata.model_dump_json()), "config": {}}


def table_backing(tmp: Path, commit_answer: httpx.Response) -> Upstream:
    """A backing that serves one table and answers its commit with ``commit_answer``."""
    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, json=loaded_table(tmp))
        return commit_answer
    return Upstream(answer)


ALTER = {"updates": [{"action": "set-properties", "updates": {"k": "v"}}]}


@pytest.mark.parametrize("path", [
    "/v1/namespaces/demo%1F..%1Fsecret/tables/t",
    "/v1/namespaces/demo%1F/tables/payroll",
    "/v1/namespaces/demo/tables/x%2F..%2Fpayroll",
    "/v1/namespaces/demo/tables/%2E%2E",
    "/v1/namespaces/%2E%2E/tables/t",
    "/v1/namespaces/demo/tables/a%5Cb",
    "/v1/namespaces/demo/tables/a%00b",
    "/v1/namespaces/demo/tables/a%0Ab",
    "/v1/namespaces/demo/tables/%FF",
    "/v1/namespaces/%1Fdemo",
])
def test_invalid_names_in_the_path_are_400_and_never_forwarded(path: str) -> None:
    upstream = Upstream()
    with client_for(upstream) as client:
        assert_error_model(client.get(path), 400, "BadRequestException")
    assert upstream.seen == []


@pytest.mark.parametrize("method,path,body", [
    ("POST", "/v1/namespaces", {"namespace": ["demo", "..", "secret"]}),
    ("POST", "/v1/namespaces", {"namespace": ["a/b"]}),
    ("POST", "/v1/namespaces", {"namespace": []}),
    ("POST", "/v1/namespaces/demo/tables", {"name": "../x", "schema": {}}),
    ("POST", "/v1/namespaces/demo/register", {"name": ".", "metadata-location": "/x"}),
    ("POST", "/v1/tables/rename", {"source": {"namespace": ["demo"], "name": "t"},
                                   "destination": {"namespace": ["..", "x"], "name": "t"}}),
    ("POST", "/v1/transactions/commit", {"table-changes": [
        {"identifier": {"namespace": ["demo", ".."], "name": "t"}, "updates": []}]}),
    ("GET", "/v1/namespaces?parent=demo%1F..", None),
])
def test_invalid_names_in_bodies_and_queries_are_400(method: str, path: str,
                                                      body: object) -> None:
    upstream = Upstream()
    with client_for(upstream) as client:
        response = client.request(method, path, json=body)
    assert_error_model(response, 400, "BadRequestException")
    assert upstream.seen == []


def test_an_unmapped_prefix_is_404_and_mapped_ones_select_their_catalog(tmp_path: Path) -> None:
    upstream = Upstream()
    with client_for(upstream, tmp_path, catalogs={"wh2": "other"}) as client:
        assert_error_model(client.get("/v1/nope/namespaces/db"), 404)
        assert client.get("/v1/cat/namespaces/db").status_code == 200  # the backing's prefix
        assert client.get("/v1/wh2/namespaces/db").status_code == 200
    assert [r.url.path for r in upstream.seen] == [
        "/catalog/v1/cat/namespaces/db", "/catalog/v1/wh2/namespaces/db"]
    records = [json.loads(line) for line in (tmp_path / "audit.log").read_text().splitlines()]
    assert records[-1]["resources"] == ["other.db"]
    assert records[-2]["resources"] == ["icegov.db"]


def test_endpoints_the_backing_does_not_advertise_are_refused_not_forwarded() -> None:
    upstream = Upstream(config={"endpoints": [
        e for e in ALL_ENDPOINTS if "/metrics" not in e and "/credentials" not in e]})
    with client_for(upstream) as client:
        metrics = client.post(f"{TABLE}/metrics", json={})
        credentials = client.get(f"{TABLE}/credentials?planId=x")
        assert client.get(TABLE).status_code == 200
    assert_error_model(metrics, 404)
    assert_error_model(credentials, 404)
    assert [r.method for r in upstream.seen] == ["GET"]


def test_planning_is_served_by_icegov_whatever_the_backing_advertises() -> None:
    upstream = Upstream(config={"endpoints": ["GET /v1/{prefix}/namespaces"]})
    with client_for(upstream) as client:
        config = client.get("/v1/config").json()
        plan = client.post(f"{TABLE}/plan", json={})
    assert set(config["endpoints"]) >= PLANNING_SPECS
    assert plan.status_code != 404 or "not offered" not in plan.text
    assert all("/plan" not in r.url.path for r in upstream.seen)  # never forwarded


def test_config_lists_only_what_the_backing_advertises() -> None:
    advertised = ["GET /v1/{prefix}/namespaces", "GET /v1/{prefix}/namespaces/{namespace}"]
    with client_for(Upstream(config={"endpoints": [*advertised, "GET /v1/unknown"]})) as client:
        config = client.get("/v1/config").json()
    assert config["endpoints"] == sorted({*advertised, *PLANNING_SPECS})


@pytest.mark.parametrize("answer,status", [
    (httpx.Response(503, text="upstream busy"), 502),
    (httpx.Response(500, json={"error": {"message": "x", "type": "T", "code": 500}}), 502),
    (httpx.Response(502, text="<html>bad gateway</html>"), 502),
    (httpx.Response(504, text="timeout"), 504),
    (httpx.Response(400, text="not json"), 502),
])
def test_unknown_commit_outcomes_become_commit_state_unknown(
        tmp_path: Path, answer: httpx.Response, status: int) -> None:
    with client_for(table_backing(tmp_path, answer)) as client:
        response = client.post(TABLE, json=ALTER)
    error = assert_error_model(response, status, "CommitStateUnknownException")
    assert str(answer.status_code) in error["message"]


def test_a_conflict_that_is_error_model_passes_through(tmp_path: Path) -> None:
    conflict = {"error": {"message": "stale", "type": "CommitFailedException", "code": 409}}
    with client_for(table_backing(tmp_path, httpx.Response(409, json=conflict))) as client:
        response = client.post(TABLE, json=ALTER)
    assert response.status_code == 409 and response.json() == conflict


def test_commits_are_pinned_to_the_base_they_were_judged_on(tmp_path: Path) -> None:
    upstream = table_backing(tmp_path, httpx.Response(200, json={}))
    body = {"updates": [{"action": "remove-snapshot-ref", "ref-name": "audit"},
                        {"action": "set-properties", "updates": {"k": "v"}}]}
    with client_for(upstream) as client:
        assert client.post(TABLE, json=body).status_code == 200
    sent = json.loads(upstream.seen[-1].content)
    assert sent["updates"] == body["updates"]
    assert sent["requirements"] == [
        {"type": "assert-table-uuid", "uuid": str(uuid.UUID(int=7))},
        {"type": "assert-ref-snapshot-id", "ref": "audit", "snapshot-id": None}]


def test_a_fully_pinned_commit_goes_out_byte_for_byte(tmp_path: Path) -> None:
    upstream = table_backing(tmp_path, httpx.Response(200, json={}))
    body = (b'{"requirements": [{"type": "assert-table-uuid", "uuid": "'
            + str(uuid.UUID(int=7)).encode() + b'"}],  "updates": []}')
    with client_for(upstream) as client:
        client.post(TABLE, content=body, headers={"content-type": "application/json"})
    assert upstream.seen[-1].content == body


def test_too_many_updates_are_refused_before_the_table_is_loaded(tmp_path: Path) -> None:
    upstream = table_backing(tmp_path, httpx.Response(200, json={}))
    body = {"updates": [{"action": "set-properties", "updates": {"k": "v"}}] * 3000}
    with client_for(upstream) as client:
        assert_error_model(client.post(TABLE, json=body), 413)
    assert upstream.seen == []


def test_a_failure_inside_icegov_is_a_500_with_request_id_and_audited(tmp_path: Path) -> None:
    def explode(_: httpx.Request) -> httpx.Response:
        raise RuntimeError("secret-token-in-message")

    with client_for(Upstream(explode), tmp_path) as client:
        response = client.get("/v1/namespaces/db", headers={"x-request-id": "req-1"})
    error = assert_error_model(response, 500)
    assert "secret" not in error["message"]
    assert response.headers["x-request-id"] == "req-1"
    record = json.loads((tmp_path / "audit.log").read_text().splitlines()[-1])
    assert record["status"] == 500 and record["request_id"] == "req-1"


def test_start_up_fails_when_an_owned_endpoint_has_no_handler() -> None:
    with pytest.raises(UnhandledEndpoint, match="commit_table"):
        check_owned_handled({})


def test_a_name_given_twice_in_the_query_is_refused() -> None:
    upstream = Upstream()
    with client_for(upstream) as client:
        assert_error_model(client.get("/v1/namespaces?parent=demo&parent=secret"), 400)
        assert_error_model(client.get("/v1/namespaces?parent=%FF"), 400)
    assert upstream.seen == []


def test_a_commit_body_naming_another_table_than_its_url_is_refused(tmp_path: Path) -> None:
    upstream = table_backing(tmp_path, httpx.Response(200, json={}))
    body = {**ALTER, "identifier": {"namespace": ["secret"], "name": "t"}}
    with client_for(upstream) as client:
        assert_error_model(client.post(TABLE, json=body), 400)
        same = {**ALTER, "identifier": {"namespace": ["db"], "name": "t"}}
        assert client.post(TABLE, json=same).status_code == 200
    assert [r.method for r in upstream.seen] == ["GET", "POST"]


def test_method_override_and_forwarding_headers_never_reach_the_backing() -> None:
    upstream = Upstream()
    smuggled = {"x-http-method-override": "DELETE", "x-http-method": "DELETE",
                "x-method-override": "DELETE", "x-original-url": "/v1/namespaces/secret",
                "forwarded": "for=1.2.3.4", "x-forwarded-for": "1.2.3.4"}
    with client_for(upstream) as client:
        assert client.get("/v1/namespaces/db", headers=smuggled).status_code == 200
    [seen] = upstream.seen
    assert not set(smuggled) & {k.lower() for k in seen.headers}


def test_a_plus_in_a_path_is_a_space_as_java_servers_and_clients_read_it(tmp_path: Path) -> None:
    upstream = Upstream()
    with client_for(upstream, tmp_path) as client:
        assert client.get("/v1/namespaces/demo/tables/q3+payroll").status_code == 200
        assert client.get("/v1/namespaces/demo/tables/q3%2Bpayroll").status_code == 200
    records = [json.loads(line) for line in (tmp_path / "audit.log").read_text().splitlines()]
    assert [r["resources"] for r in records[-2:]] == [
        ['icegov.demo."q3 payroll"'], ["icegov.demo.q3+payroll"]]


@pytest.mark.parametrize("requirements", [
    [{"type": "assert-ref-snapshot-id", "ref": ["main"], "snapshot-id": 1}],
    [{"type": "assert-ref-snapshot-id", "ref": {}, "snapshot-id": None}],
    [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": "1"}],
    [{"type": "assert-table-uuid", "uuid": 7}],
    [{"type": "ASSERT-CREATE"}],
    [{"type": "assert-everything-is-fine"}],
])
def test_malformed_requirements_are_400_not_500(tmp_path: Path,
                                                requirements: list[object]) -> None:
    upstream = table_backing(tmp_path, httpx.Response(200, json={}))
    with client_for(upstream) as client:
        response = client.post(TABLE, json={**ALTER, "requirements": requirements})
        transaction = client.post("/v1/transactions/commit", json={"table-changes": [
            {"identifier": {"namespace": ["db"], "name": "t"}, **ALTER,
             "requirements": requirements}]})
    assert_error_model(response, 400)
    assert_error_model(transaction, 400)
    assert all(r.method == "GET" for r in upstream.seen)


def test_an_upper_case_update_action_is_400(tmp_path: Path) -> None:
    upstream = table_backing(tmp_path, httpx.Response(200, json={}))
    body = {"updates": [{"action": "SET-SNAPSHOT-REF", "ref-name": "main", "snapshot-id": 1,
                         "type": "branch"}]}
    with client_for(upstream) as client:
        assert_error_model(client.post(TABLE, json=body), 400)
    assert upstream.seen == []


def test_file_io_settings_come_from_the_catalogs_config_never_table_properties(
        tmp_path: Path) -> None:
    loaded = loaded_table(tmp_path)
    metadata = dict(loaded["metadata"])  # type: ignore[call-overload]
    metadata["properties"] = {"py-io-impl": "tests.nowhere.Evil", "s3.endpoint": "http://evil"}
    body = json.dumps({**loaded, "metadata": metadata,
                       "config": {"s3.region": "eu-1", "py-io-impl": "tests.nowhere.Evil"}})
    state = parse_table_state(Resource("icegov", ("db",), "t"), body.encode())
    assert state.io.properties == {"s3.region": "eu-1"}


def test_a_backing_server_error_outside_commits_reveals_nothing() -> None:
    answer = httpx.Response(500, json={"error": {
        "message": "Failed to get file system for path s3://internal-bucket/x", "type": "X",
        "code": 500}})
    with client_for(Upstream(lambda _: answer)) as client:
        response = client.get("/v1/namespaces/db")
    error = assert_error_model(response, 502, "BadGatewayException")
    assert "internal-bucket" not in response.text and "500" in error["message"]


def test_bodies_on_get_head_and_delete_are_never_forwarded() -> None:
    upstream = Upstream()
    with client_for(upstream) as client:
        client.request("GET", "/v1/namespaces/db", content=b'{"smuggled": true}')
        client.request("DELETE", "/v1/namespaces/db/tables/t", content=b'{"smuggled": true}')
    assert [r.content for r in upstream.seen] == [b"", b""]


def test_pages_of_only_hidden_entries_are_skipped_not_shown_empty() -> None:
    pages = {None: ([["secret"], ["vault"]], "p2"), "p2": ([["hr"]], "p3"),
             "p3": ([["demo"]], "p4"), "p4": ([["x"]], None)}

    def answer(request: httpx.Request) -> httpx.Response:
        token = request.url.params.get("pageToken")
        entries, following = pages[token]
        return httpx.Response(200, json={"namespaces": entries, "next-page-token": following})

    upstream = Upstream(answer)
    with client_for(upstream) as client:
        analyst = icegov_token(client, "analyst:analyst-secret")
        auth = {"authorization": f"Bearer {analyst}"}
        response = client.get("/v1/namespaces?pageSize=2", headers=auth)
        # demo is the only visible entry: the page is filled from every page up to the end
        assert response.json() == {"namespaces": [["demo"]], "next-page-token": None}
    assert [r.url.params.get("pageToken") for r in upstream.seen] == [None, "p2", "p3", "p4"]
    # read at icegov's own size, whatever the caller's: hidden runs cost few fetches
    assert all(r.url.params.get("pageSize") == str(READ_SIZE) for r in upstream.seen)


def test_walking_pages_yields_every_visible_entry_once_in_full_pages() -> None:
    """Backing pages of three (whatever pageSize says), hidden entries interleaved: every
    answer but the last holds exactly pageSize entries, resuming inside a backing page."""
    listing = [{"namespace": ["hr" if i % 3 == 1 else "demo"], "name": f"t{i:02d}"}
               for i in range(20)]

    def answer(request: httpx.Request) -> httpx.Response:
        at = int(request.url.params.get("pageToken") or 0)
        following = str(at + 3) if at + 3 < len(listing) else None
        return httpx.Response(200, json={"identifiers": listing[at:at + 3],
                                         "next-page-token": following})

    with client_for(Upstream(answer)) as client:
        auth = {"authorization": f"Bearer {icegov_token(client, 'analyst:analyst-secret')}"}
        pages: list[list[str]] = []
        params = {"pageSize": "2"}
        while True:
            page = client.get("/v1/namespaces/demo/tables", params=params, headers=auth).json()
            pages.append([entry["name"] for entry in page["identifiers"]])
            if page["next-page-token"] is None:
                break
            params = {"pageSize": "2", "pageToken": page["next-page-token"]}
    visible = [e["name"] for e in listing if e["namespace"] == ["demo"]]
    assert [name for page in pages for name in page] == visible
    assert all(len(page) == 2 for page in pages[:-1]) and 1 <= len(pages[-1]) <= 2


def test_page_tokens_open_only_for_their_caller_and_listing() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        following = None if request.url.params.get("pageToken") else "backing-token"
        return httpx.Response(200, json={"namespaces": [["demo"]],
                                         "next-page-token": following})

    upstream = Upstream(answer)
    with client_for(upstream) as client:
        analyst = {"authorization": f"Bearer {icegov_token(client, 'analyst:analyst-secret')}"}
        admin = {"authorization": f"Bearer {icegov_token(client)}"}
        sealed = client.get("/v1/namespaces?pageSize=1", headers=analyst).json()[
            "next-page-token"]
        seen = len(upstream.seen)
        for headers, path, token in [
                (admin, "/v1/namespaces", sealed),  # another caller's token
                (analyst, "/v1/namespaces/demo/tables", sealed),  # another listing's
                (analyst, "/v1/namespaces", "backing-token"),  # the backing's own
                (analyst, "/v1/namespaces", sealed[:-2] + "AA"),  # edited
                (analyst, "/v1/namespaces", "icg1." + "A" * 5000)]:  # huge
            assert_error_model(client.get(path, params={"pageToken": token}, headers=headers),
                               400)
        assert_error_model(client.get("/v1/namespaces", params={
            "parent": "demo", "pageToken": sealed}, headers=analyst), 400)  # another parent's
        assert len(upstream.seen) == seen, "a token that does not open is never forwarded"
        assert client.get("/v1/namespaces", params={"pageToken": sealed},
                          headers=analyst).status_code == 200
        assert client.get("/v1/namespaces", params={"pageToken": ""},
                          headers=analyst).status_code == 200  # Java's first page


def test_page_skipping_never_loops_on_empty_or_repeated_pages() -> None:
    def answer(_: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"namespaces": [], "next-page-token": "0"})

    upstream = Upstream(answer)
    with client_for(upstream) as client:
        analyst = icegov_token(client, "analyst:analyst-secret")
        auth = {"authorization": f"Bearer {analyst}"}
        assert client.get("/v1/namespaces?pageSize=5", headers=auth).json()["namespaces"] == []
        for size in ("0", "-1", "x", "100000"):
            assert_error_model(client.get(f"/v1/namespaces?pageSize={size}", headers=auth), 400)
    assert len(upstream.seen) == 2  # the repeated token ends the listing


def test_a_repeated_page_token_stops_the_skipping() -> None:
    def answer(_: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"namespaces": [["secret"]], "next-page-token": "t"})

    upstream = Upstream(answer)
    with client_for(upstream) as client:
        analyst = icegov_token(client, "analyst:analyst-secret")
        client.get("/v1/namespaces", headers={"authorization": f"Bearer {analyst}"})
    assert [r.url.params.get("pageToken") for r in upstream.seen] == [None, "t"]
