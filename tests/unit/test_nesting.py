"""A namespace whose levels pass through a table answers 404 and never reaches the backing;
the backing is asked only for namespaces of two levels or more."""

from __future__ import annotations

import httpx

from tests.support.upstream import Upstream, client_for

TABLE = "/v1/cat/namespaces/demo/tables/victim"


def path_of(request: httpx.Request) -> bytes:
    """The request's path below the backing's base URL."""
    return request.url.raw_path.split(b"?")[0].removeprefix(b"/catalog")


def backing_with_table_victim(request: httpx.Request) -> httpx.Response:
    """A backing whose one table is ``demo.victim``; every other request succeeds."""
    path = path_of(request)
    if b"/tables/" in path and request.method == "GET":
        if path == TABLE.encode():
            return httpx.Response(200, json={"metadata": {}})
        return httpx.Response(404, json={"error": {"message": "no", "type":
                                                   "NoSuchTableException", "code": 404}})
    return httpx.Response(200, json={"namespaces": [], "identifiers": []})


def test_a_namespace_inside_a_table_is_not_found() -> None:
    upstream = Upstream(backing_with_table_victim)
    with client_for(upstream) as client:
        listed = client.get("/v1/cat/namespaces", params={"parent": "demo\x1fvictim\x1fdata"})
        tables = client.get("/v1/cat/namespaces/demo%1Fvictim/tables")
        created = client.post("/v1/cat/namespaces/demo%1Fvictim/tables", json={
            "name": "data", "schema": {"type": "struct", "fields": []}})
    assert (listed.status_code, tables.status_code, created.status_code) == (404, 404, 404)
    assert listed.json()["error"]["type"] == "NoSuchNamespaceException"
    forwarded = [r for r in upstream.seen if path_of(r) != TABLE.encode()]
    assert forwarded == []  # only the existence checks reached the backing


def test_a_nested_namespace_beside_tables_is_served() -> None:
    upstream = Upstream(backing_with_table_victim)
    with client_for(upstream) as client:
        answer = client.get("/v1/cat/namespaces/demo%1Fother/tables")
    assert answer.status_code == 200
    asked = [path_of(r) for r in upstream.seen]
    assert asked == [b"/v1/cat/namespaces/demo/tables/other",
                     b"/v1/cat/namespaces/demo%1Fother/tables"]


def test_a_single_level_namespace_costs_no_check() -> None:
    upstream = Upstream(backing_with_table_victim)
    with client_for(upstream) as client:
        assert client.get("/v1/cat/namespaces/demo/tables").status_code == 200
    assert [path_of(r) for r in upstream.seen] == [b"/v1/cat/namespaces/demo/tables"]


def test_a_table_named_inside_a_table_is_no_such_table() -> None:
    """What Java clients (Spark) need to go on to the metadata table ``demo.victim.snapshots``."""
    upstream = Upstream(backing_with_table_victim)
    with client_for(upstream) as client:
        answer = client.get("/v1/cat/namespaces/demo%1Fvictim/tables/snapshots")
    assert answer.status_code == 404
    assert answer.json()["error"]["type"] == "NoSuchTableException"


def test_an_answer_that_loads_no_table_is_not_a_table() -> None:
    """Only a LoadTableResult proves a table: a 200 without ``metadata`` does not hide the
    namespace."""
    upstream = Upstream(lambda _: httpx.Response(200, json={"namespaces": [], "identifiers": []}))
    with client_for(upstream) as client:
        assert client.get("/v1/cat/namespaces/demo%1Fvictim/tables").status_code == 200


def test_a_backing_that_cannot_answer_the_check_is_503_not_a_missing_namespace() -> None:
    upstream = Upstream(lambda r: httpx.Response(500, json={"error": {
        "message": "down", "type": "ServerError", "code": 500}}) if b"/tables/" in path_of(r)
        else httpx.Response(200, json={"identifiers": []}))
    with client_for(upstream) as client:
        answer = client.get("/v1/cat/namespaces/demo%1Fvictim/tables")
    assert answer.status_code == 503
    assert [path_of(r) for r in upstream.seen] == [TABLE.encode()]
