"""Fuzzing every JSON endpoint and the path parameters through the whole governed app.

The app runs in-process on the embedded catalog, as ``admin`` (bodies reach the catalog), as
``writer`` (a low-privilege principal: the gate decides) and unauthenticated. Whatever is sent,
icegov never answers 5xx, every error is an Iceberg ErrorModel, and afterwards a table nobody
fuzzed still loads. Hypothesis runs derandomized, without a database and without deadlines, so
CI sees the same examples every time (well over 5,000 bodies in all).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlparse

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from proxy.app import create_app
from proxy.catalog import create_catalog_app
from proxy.catalog.store import open_catalog
from proxy.routes import ENDPOINTS, Endpoint
from tests.integration.fuzz_bodies import HOSTILE_NAMES, SCHEMA, body_for, mostly, random_json
from tests.support.errors import assert_error_model
from tests.support.settings import settings_for_tests

JSON_ENDPOINTS = tuple(e for e in ENDPOINTS if e.json_body)
SENTINEL = "/v1/namespaces/sentinel/tables/keep"
FUZZ = settings(derandomize=True, database=None, deadline=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@dataclass(frozen=True)
class Caller:
    """Who sends a request: the headers that say so."""

    name: str
    headers: dict[str, str]


@dataclass(frozen=True)
class Governed:
    """The governed app under fuzzing and its callers."""

    client: TestClient
    admin: Caller
    writer: Caller
    anonymous: Caller
    locations: dict[str, str]

    def encode(self, body: Any) -> bytes:
        """``body`` as JSON (NaN and Infinity literals included), table locations filled in."""
        text = json.dumps(body, allow_nan=True)
        for placeholder, location in self.locations.items():
            text = text.replace(placeholder, location)
        return text.encode()


def _token(client: TestClient, credential: str) -> dict[str, str]:
    client_id, secret = credential.split(":")
    response = client.post("/v1/oauth/tokens", data={
        "grant_type": "client_credentials", "client_id": client_id, "client_secret": secret,
        "scope": "catalog"})
    assert response.status_code == 200, response.text
    return {"authorization": f"Bearer {response.json()['access_token']}"}


@pytest.fixture(scope="module")
def governed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Governed]:
    with TestClient(create_app(settings_for_tests(tmp_path_factory.mktemp("fuzz")))) as client:
        admin = Caller("admin", _token(client, "admin:admin-secret"))
        locations = {}
        for namespace, table in (("sentinel", "keep"), ("db", "t"), ("demo", "t")):
            assert client.post("/v1/namespaces", json={"namespace": [namespace]},
                               headers=admin.headers).status_code == 200
            created = client.post(f"/v1/namespaces/{namespace}/tables",
                                  json={"name": table, "schema": SCHEMA}, headers=admin.headers)
            assert created.status_code == 200, created.text
            locations[f"@{namespace.upper()}@"] = _with_junk_files(
                created.json()["metadata"]["location"])
        yield Governed(client, admin, Caller("writer", _token(client, "writer:writer-secret")),
                       Caller("anonymous", {}), locations)


def _with_junk_files(location: str) -> str:
    """Fill the table's directory with files that are not what their names say."""
    root = Path(unquote(urlparse(location).path))
    (root / "data").mkdir(parents=True, exist_ok=True)
    (root / "metadata" / "folder").mkdir(parents=True, exist_ok=True)
    (root / "metadata" / "junk.avro").write_bytes(b"Obj\x01" + bytes(range(256)) * 4)
    (root / "metadata" / "empty.avro").write_bytes(b"")
    (root / "metadata" / "json.avro").write_text('{"format-version": 2}')
    (root / "data" / "junk.parquet").write_bytes(b"PAR1" + b"\xff" * 64 + b"PAR1")
    return location


def _quoted(name: str) -> str:
    return quote(name.encode("utf-8", "surrogatepass"), safe="")


def _encoded_namespace(levels: list[str]) -> str:
    return "%1F".join(_quoted(level) for level in levels)


RAW_SEGMENTS = st.sampled_from([
    "%1F", "%2F", "..", ".", "db%1F..%1Fsentinel", "demo%1F", "%1Fdemo", "x%2F..%2Fkeep",
    "%00", "%ZZ", "%C3%28", "%E2%80%AE", "db%1F%1Ft", "%2E%2E", "demo.t", "*", "%25",
])
NAMESPACE_SEGMENTS = mostly(st.sampled_from(["db", "demo"]), st.one_of(RAW_SEGMENTS,
    st.lists(st.one_of(st.sampled_from(["db", "demo", "t"]), HOSTILE_NAMES, st.text(max_size=8)),
             min_size=1, max_size=3).map(_encoded_namespace)), in_ten=3)
TABLE_SEGMENTS = mostly(st.just("t"), st.one_of(
    RAW_SEGMENTS, st.one_of(HOSTILE_NAMES, st.text(max_size=8)).map(_quoted)), in_ten=3)
PREFIXES = mostly(st.just(""), st.sampled_from(["/nope", "/%2E%2E", "/%1F"]))


@st.composite
def paths(draw: st.DrawFn, endpoint: Endpoint) -> str:
    """A request path for ``endpoint``, with (sometimes hostile) namespace and table segments."""
    path = endpoint.template.replace("/{prefix}", draw(PREFIXES))
    path = path.replace("{namespace}", draw(NAMESPACE_SEGMENTS) or "db")
    for name in ("{table}", "{view}", "{plan_id}", "{grant}"):
        path = path.replace(name, draw(TABLE_SEGMENTS) or "t")
    return path


def _send(governed: Governed, caller: Caller, method: str, path: str, body: bytes) -> None:
    response = governed.client.request(
        method, path, content=body, headers={**caller.headers, "content-type": "application/json"})
    context = (caller.name, method, path, body[:2000])
    assert response.status_code < 500, (*context, response.status_code, response.text)
    if response.status_code >= 400 and method != "HEAD":
        assert_error_model(response, response.status_code)


def _fuzz_endpoint(governed: Governed, caller: Caller, endpoint: Endpoint, examples: int) -> None:
    @settings(FUZZ, max_examples=examples)
    @given(st.data())
    def run(data: st.DataObject) -> None:
        path = data.draw(paths(endpoint), label="path")
        body = data.draw(body_for(endpoint.name), label="body")
        _send(governed, caller, endpoint.method, path, governed.encode(body))

    run()
    _assert_still_serving(governed)


def _assert_still_serving(governed: Governed) -> None:
    response = governed.client.get(SENTINEL, headers=governed.admin.headers)
    assert response.status_code == 200, response.text
    assert response.json()["metadata"]["current-schema-id"] == 0


@pytest.mark.parametrize("endpoint", JSON_ENDPOINTS, ids=lambda e: e.name)
def test_admin_bodies_never_crash(governed: Governed, endpoint: Endpoint) -> None:
    _fuzz_endpoint(governed, governed.admin, endpoint, 260)


@pytest.mark.parametrize("endpoint", JSON_ENDPOINTS, ids=lambda e: e.name)
def test_writer_bodies_never_crash(governed: Governed, endpoint: Endpoint) -> None:
    _fuzz_endpoint(governed, governed.writer, endpoint, 60)


@pytest.mark.parametrize("endpoint", JSON_ENDPOINTS, ids=lambda e: e.name)
def test_unauthenticated_bodies_never_crash(governed: Governed, endpoint: Endpoint) -> None:
    _fuzz_endpoint(governed, governed.anonymous, endpoint, 25)


def test_bytes_that_are_not_json_never_crash(governed: Governed) -> None:
    @settings(FUZZ, max_examples=300)
    @given(st.sampled_from(JSON_ENDPOINTS), st.one_of(
        st.binary(max_size=64), st.text(max_size=64).map(str.encode),
        random_json().map(lambda v: json.dumps(v).encode()[:-1]),
        st.integers(1, 200_000).map(lambda n: b"[" * n)))
    def run(endpoint: Endpoint, body: bytes) -> None:
        path = endpoint.template.replace("/{prefix}", "").replace("{namespace}", "db")
        path = path.replace("{table}", "t").replace("{view}", "v")
        _send(governed, governed.admin, endpoint.method, path, body)

    run()
    _assert_still_serving(governed)


QUERIES = mostly(st.just(""), st.sampled_from([
    "?snapshots=refs", "?snapshots=bogus", "?parent=db", "?parent=db%1F..", "?parent=%00",
    "?parent=%1F", "?parent=a.b", "?pageSize=-1", "?pageSize=99999999999999999999",
    "?pageToken=%FF", "?planId=x", "?purgeRequested=maybe", "?parent=db&parent=demo", "?%ZZ=1",
]), in_ten=4)


@pytest.mark.parametrize("caller", ["admin", "writer"])
def test_path_parameters_never_crash(governed: Governed, caller: str) -> None:
    who: Caller = getattr(governed, caller)
    without_body = [e for e in ENDPOINTS if not e.json_body and
                    ("{namespace}" in e.template or e.name == "list_namespaces")]

    @settings(FUZZ, max_examples=250)
    @given(st.data())
    def run(data: st.DataObject) -> None:
        endpoint = data.draw(st.sampled_from(without_body), label="endpoint")
        if endpoint.method == "DELETE" and who is governed.admin:
            endpoint = next(e for e in ENDPOINTS if e.name == "load_table")
        path = data.draw(paths(endpoint), label="path") + data.draw(QUERIES, label="query")
        _send(governed, who, endpoint.method, path, b"")

    run()
    _assert_still_serving(governed)


@pytest.fixture(scope="module")
def catalog_alone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Governed]:
    """The embedded catalog served on its own (``icegov catalog``): no gate shields it."""
    workdir = tmp_path_factory.mktemp("alone")
    catalog = open_catalog(f"sqlite:///{workdir / 'catalog.db'}", workdir / "warehouse")
    with TestClient(create_catalog_app(catalog, 1 << 20)) as client:
        locations = {}
        for namespace, table in (("sentinel", "keep"), ("db", "t"), ("demo", "t")):
            client.post("/v1/namespaces", json={"namespace": [namespace]})
            created = client.post(f"/v1/namespaces/{namespace}/tables",
                                  json={"name": table, "schema": SCHEMA})
            locations[f"@{namespace.upper()}@"] = _with_junk_files(
                created.json()["metadata"]["location"])
        nobody = Caller("anyone", {})
        yield Governed(client, nobody, nobody, nobody, locations)
    catalog.engine.dispose()


def test_the_catalog_alone_never_crashes(catalog_alone: Governed) -> None:
    offered = set(catalog_alone.client.get("/v1/config").json()["endpoints"])
    endpoints = [e for e in ENDPOINTS if e.spec in offered and e.method != "DELETE"]

    @settings(FUZZ, max_examples=600)
    @given(st.data())
    def run(data: st.DataObject) -> None:
        endpoint = data.draw(st.sampled_from(endpoints), label="endpoint")
        path = data.draw(paths(endpoint), label="path") + data.draw(QUERIES, label="query")
        body = data.draw(body_for(endpoint.name), label="body") if endpoint.json_body else b""
        encoded = catalog_alone.encode(body) if endpoint.json_body else b""
        _send(catalog_alone, catalog_alone.admin, endpoint.method, path, encoded)

    run()
    _assert_still_serving(catalog_alone)
