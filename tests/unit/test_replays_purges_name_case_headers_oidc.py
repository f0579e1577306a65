"""Attacker's review, round 5 (unit): around the gate through the day's changes — Idempotency-Key
replays that keep their rights, purges under the adoption lock, ``name_case: lower``, the
forwarded-header allowlist, OIDC names against local ones, nested namespaces.

Every attack here is met today (refused or made harmless) and keeps a passing test, so a regression
shows (the findings once pinned as strict xfails were fixed and un-marked)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pyarrow as pa
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from pyiceberg.catalog.sql import SqlCatalog
from starlette.testclient import TestClient

from proxy.catalog import store
from proxy.catalog.purge import purge_table
from tests.support.audit import no_icegov_environment  # noqa: F401
from tests.support.errors import assert_error_model
from tests.support.http import wait_for
from tests.support.settings import POLICIES
from tests.support.upstream import Upstream, client_for, icegov_token
from tests.unit.test_config_folded_names_page_generations import FoldingBacking, folding_world
from tests.unit.test_identity_authenticator import IDP, idp_token, jwks_document
from tests.unit.test_page_tokens_view_guard_keys_verify import view_answer
from tests.unit.test_pipeline import ALTER, loaded_table, table_backing

pytestmark = pytest.mark.usefixtures("no_icegov_environment")

NOT_FOUND = {"error": {"message": "no", "type": "NoSuchTableException", "code": 404}}


def path_of(request: httpx.Request) -> bytes:
    """The request's path below the backing's base URL."""
    return request.url.raw_path.split(b"?")[0].removeprefix(b"/catalog")


# -- 2. Purge: the files a live table names, whatever their spelling -------------------------------

def purge_catalog(tmp_path: Path) -> SqlCatalog:
    catalog = store.open_catalog(f"sqlite:///{tmp_path / 'catalog.db'}", tmp_path / "warehouse")
    catalog.create_namespace("demo")
    return catalog


def dropped_and_reader(tmp_path: Path, spelled: Any) -> tuple[SqlCatalog, list[str]]:
    """``demo.dropped`` with three rows, and ``demo.reader`` that took its data files with
    ``add_files``, naming them as ``spelled(path)`` does."""
    catalog = purge_catalog(tmp_path)
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    catalog.create_table(("demo", "dropped"), schema=rows.schema).append(rows)
    data = [task.file.file_path for task in catalog.load_table(("demo", "dropped"))
            .scan().plan_files()]
    reader = catalog.create_table(("demo", "reader"), schema=rows.schema)
    reader.add_files([spelled(path) for path in data])
    assert catalog.load_table(("demo", "reader")).scan().to_arrow().num_rows == 3
    return catalog, data


@pytest.mark.parametrize("spelled", [
    pytest.param(lambda p: p.removeprefix("file://"), id="a plain path"),
    pytest.param(lambda p: "file:" + p.removeprefix("file://"), id="file:/ with one slash"),
])
def test_a_purge_keeps_a_live_tables_data_files_named_with_another_spelling(
        tmp_path: Path, spelled: Any) -> None:
    catalog, data = dropped_and_reader(tmp_path, spelled)
    purge_table(catalog, ("demo", "dropped"))
    assert all(Path(p.removeprefix("file://")).exists() for p in data)
    assert catalog.load_table(("demo", "reader")).scan().to_arrow().num_rows == 3


def test_a_purge_keeps_a_live_tables_data_files_named_alike(tmp_path: Path) -> None:
    """The same spelling is kept (the baseline of the finding above)."""
    catalog, _ = dropped_and_reader(tmp_path, lambda p: p)
    purge_table(catalog, ("demo", "dropped"))
    assert catalog.load_table(("demo", "reader")).scan().to_arrow().num_rows == 3


def test_a_purge_keeps_the_files_of_a_table_whose_metadata_says_view_uuid(
        tmp_path: Path) -> None:
    catalog, data = dropped_and_reader(tmp_path, lambda p: p)
    current = Path(catalog.load_table(("demo", "reader")).metadata_location
                   .removeprefix("file://"))
    crafted = current.with_name("99999-crafted.metadata.json")
    crafted.write_text(json.dumps({**json.loads(current.read_text()), "view-uuid": "x"}))
    store.register_table(catalog, ("demo", "reader"), crafted.as_uri(), True)
    assert catalog.load_table(("demo", "reader")).scan().to_arrow().num_rows == 3
    purge_table(catalog, ("demo", "dropped"))
    assert all(Path(p.removeprefix("file://")).exists() for p in data)


def test_a_purge_deletes_nothing_while_a_live_tables_manifest_list_is_unreadable(
        tmp_path: Path) -> None:
    catalog, data = dropped_and_reader(tmp_path, lambda p: p)
    other = catalog.create_table(("demo", "other"), schema=pa.schema([("id", pa.int64())]))
    other.append(pa.table({"id": pa.array([9], pa.int64())}))
    manifest_list = catalog.load_table(("demo", "other")).current_snapshot()
    assert manifest_list is not None
    Path(manifest_list.manifest_list.removeprefix("file://")).unlink()
    catalog.drop_table(("demo", "reader"))  # nothing but 'other' would keep the files
    purge_table(catalog, ("demo", "dropped"))
    assert all(Path(p.removeprefix("file://")).exists() for p in data)


# -- 6 + 4. Nesting: icegov's own probe carries the caller's conditional headers -------------

VICTIM = b"/v1/cat/namespaces/demo/tables/victim"
ETAG = '"victim-v3"'


def etag_backing(request: httpx.Request) -> httpx.Response:
    """A backing whose one table is ``demo.victim``, answering its load with an ETag and 304 to
    ``If-None-Match`` naming it (the REST spec's loadTable; Iceberg's own server since 1.10);
    every other table is missing and every other request succeeds."""
    path = path_of(request)
    if request.method == "GET" and b"/tables/" in path:
        if path != VICTIM:
            return httpx.Response(404, json=NOT_FOUND)
        if request.headers.get("if-none-match") == ETAG:
            return httpx.Response(304, headers={"etag": ETAG})
        return httpx.Response(200, json={"metadata": {}, "config": {}}, headers={"etag": ETAG})
    return httpx.Response(200, json={"namespaces": [], "identifiers": []})


def test_an_etag_never_lets_a_namespace_inside_a_table_through() -> None:
    upstream = Upstream(etag_backing)
    with client_for(upstream) as client:
        loaded = client.get(VICTIM.decode())
        assert loaded.status_code == 200 and loaded.headers["etag"] == ETAG
        upstream.seen.clear()
        created = client.post("/v1/cat/namespaces/demo%1Fvictim/tables",
                              headers={"If-None-Match": loaded.headers["etag"]},
                              json={"name": "data", "schema": {"type": "struct", "fields": []}})
    assert created.status_code == 404, created.status_code
    assert [path_of(r) for r in upstream.seen if r.method == "POST"] == []


def test_without_the_etag_a_namespace_inside_a_table_is_not_found() -> None:
    upstream = Upstream(etag_backing)
    with client_for(upstream) as client:
        created = client.post("/v1/cat/namespaces/demo%1Fvictim/tables", json={
            "name": "data", "schema": {"type": "struct", "fields": []}})
    assert created.status_code == 404
    assert [r for r in upstream.seen if r.method == "POST"] == []


# -- 4. Headers: what reaches the backing -------------------------------------------------------

@pytest.mark.parametrize("name", [
    "Cookie", "COOKIE", "Polaris-Realm", "X-Forwarded-User", "x-forwarded-for", "Forwarded",
    "X-Tenant", "Proxy-Authorization",
])
def test_caller_headers_outside_the_allowlist_stop_at_icegov_in_any_case(name: str) -> None:
    upstream = Upstream()
    with client_for(upstream) as client:
        headers = {name: "00000000-0000-4000-8000-000000000000"}
        client.get("/v1/cat/namespaces/demo%1Fother/tables", headers=headers)  # probe + list
        client.post("/v1/cat/namespaces", json={"namespace": ["n"]}, headers=headers)
    assert len(upstream.seen) == 3
    for request in upstream.seen:
        assert name.lower() not in {k.lower() for k in request.headers}


def test_the_idempotency_key_stops_at_icegov_and_a_replay_reaches_no_backing(
        tmp_path: Path) -> None:
    upstream = Upstream()
    key = {"Idempotency-Key": str(uuid.uuid4())}
    with client_for(upstream, tmp_path,
                    idempotency={"db_uri": f"sqlite:///{tmp_path / 'keys.db'}"}) as client:
        first = client.post("/v1/cat/namespaces", json={"namespace": ["n"]}, headers=key)
        again = client.post("/v1/cat/namespaces", json={"namespace": ["n"]}, headers=key)
    assert first.status_code == again.status_code == 200
    assert again.headers["idempotent-replayed"] == "true"
    [request] = upstream.seen
    assert "idempotency-key" not in request.headers


def test_the_clients_protocol_headers_still_reach_the_backing() -> None:
    """What Iceberg's Java client and PyIceberg send is not dropped."""
    upstream = Upstream()
    sent = {"X-Client-Version": "Apache Iceberg 1.10.0", "X-Client-Git-Commit-Short": "abc",
            "X-Iceberg-Access-Delegation": "vended-credentials", "User-Agent": "PyIceberg/0.9"}
    with client_for(upstream) as client:
        client.get("/v1/cat/namespaces/demo/tables/t", headers=sent)
    [request] = upstream.seen
    assert {k: request.headers.get(k) for k in sent} == sent


# -- 3. name_case: lower in front of a Hive metastore --------------------------------------------

class HiveLikeBacking(FoldingBacking):
    """A backing that resolves names as Hive's metastore does (``normalizeIdentifier``:
    ``identifier.trim().toLowerCase()``): every table it is asked for is its one table
    ``sales.salaries``."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        raw = request.url.raw_path.decode("ascii").split("?")[0]
        self.paths.append(raw)
        resolved = "/".join(unquote(segment).strip().lower() for segment in raw.split("/"))
        if resolved.endswith("/namespaces/sales/tables/salaries"):
            return httpx.Response(200, json={"metadata-location": "s3://w/sales/salaries/m.json",
                                             "metadata": {"secret": True}, "config": {}})
        return httpx.Response(404, json=NOT_FOUND)


@pytest.fixture()
def hive(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str], HiveLikeBacking]]:
    yield from folding_world(tmp_path, HiveLikeBacking(), name_case="lower")


@pytest.mark.parametrize("spelling", ["salaries%20", "%20salaries", "salaries%20%20"])
def test_a_name_the_metastore_trims_never_reaches_a_denied_table(
        hive: tuple[TestClient, dict[str, str], HiveLikeBacking], spelling: str) -> None:
    client, analyst, backing = hive
    answer = client.get(f"/v1/namespaces/sales/tables/{spelling}", headers=analyst)
    assert "secret" not in answer.text, answer.status_code
    assert backing.paths == []


@pytest.mark.parametrize("method,path,params,body", [
    ("GET", "/v1/namespaces", {"parent": "SALES"}, None),
    ("HEAD", "/v1/namespaces/sales/tables/SALARIES", None, None),
    ("GET", "/v1/namespaces/sales/tables/SALARIES/credentials", None, None),
    ("POST", "/v1/namespaces/sales/tables/SALARIES/metrics", None, {"report-type": "scan"}),
    ("POST", "/v1/namespaces/sales/tables/SALARIES/plan", None, {}),
    ("GET", "/v1/namespaces/sales/views/SALARIES", None, None),
    ("POST", "/v1/namespaces/sales/register", None,
     {"name": "SALARIES", "metadata-location": "s3://w/m.json"}),
    ("POST", "/v1/transactions/commit", None, {"table-changes": [
        {"identifier": {"namespace": ["sales"], "name": "SALARIES"}, "updates": [],
         "requirements": []}]}),
    ("POST", "/v1/namespaces/sales/tables/salaries", None,
     {"identifier": {"namespace": ["sales"], "name": "Salaries"}, "updates": [],
      "requirements": []}),
    ("POST", "/v1/views/rename", None, {"source": {"namespace": ["sales"], "name": "v"},
                                         "destination": {"namespace": ["SALES"], "name": "v"}}),
])
def test_other_spellings_are_refused_on_every_endpoint(
        hive: tuple[TestClient, dict[str, str], HiveLikeBacking], method: str, path: str,
        params: dict[str, str] | None, body: dict[str, Any] | None) -> None:
    client, analyst, backing = hive
    answer = client.request(method, path, params=params, json=body, headers=analyst)
    assert answer.status_code == 400, (answer.status_code, answer.text)
    assert backing.paths == []


# -- 5. OIDC: an issuer user named like a role ---------------------------------------------------

@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def oidc_client(tmp_path: Path, rsa_key: rsa.RSAPrivateKey, upstream: Upstream) -> TestClient:
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(jwks_document(rsa_key)))
    return client_for(upstream, tmp_path, identity={
        "oidc_issuer": IDP, "oidc_audience": "icegov", "oidc_jwks_file": jwks})


def issuer_user(rsa_key: rsa.RSAPrivateKey, name: str) -> dict[str, str]:
    return {"authorization": f"Bearer {idp_token(rsa_key, sub=name, groups=None)}"}


def test_an_issuer_user_named_like_a_role_gets_no_rights_of_it(
        tmp_path: Path, rsa_key: rsa.RSAPrivateKey) -> None:
    upstream = Upstream()
    with oidc_client(tmp_path, rsa_key, upstream) as client:
        answer = client.get("/v1/cat/namespaces/demo/tables/orders",
                            headers=issuer_user(rsa_key, "demo-reader"))
    assert answer.status_code in (401, 403, 404), answer.status_code
    assert upstream.seen == []


@pytest.mark.parametrize("name", ["admin", "analyst"])
def test_an_issuer_user_named_like_a_local_principal_is_401(
        tmp_path: Path, rsa_key: rsa.RSAPrivateKey, name: str) -> None:
    upstream = Upstream()
    with oidc_client(tmp_path, rsa_key, upstream) as client:
        for _ in range(2):  # the cached token too
            answer = client.get("/v1/cat/namespaces/demo/tables/orders",
                                headers=issuer_user(rsa_key, name))
            assert_error_model(answer, 401)
    assert upstream.seen == []


@pytest.mark.parametrize("name", ["Admin", "ADMIN", "\uff41dmin", "admin\u200b", "a\u0064min "])
def test_an_issuer_user_spelled_like_a_local_principal_holds_none_of_its_rules(
        tmp_path: Path, rsa_key: rsa.RSAPrivateKey, name: str) -> None:
    """Policy subjects match exactly: another spelling of ``admin`` is not admin."""
    upstream = Upstream()
    with oidc_client(tmp_path, rsa_key, upstream) as client:
        answer = client.get("/v1/cat/namespaces/demo/tables/orders",
                            headers=issuer_user(rsa_key, name))
    assert answer.status_code in (401, 403, 404), answer.status_code
    assert upstream.seen == []


# -- 1. Idempotency-Key replays ------------------------------------------------------------------

DEMO_TABLE = "/v1/cat/namespaces/demo/tables/t"


def keyed_world(tmp_path: Path, extra: str) -> tuple[TestClient, Path, Upstream]:
    """icegov with idempotency keys in front of a one-table backing (returned, to count what
    reached it), its policy the demo one plus ``extra``."""
    policy = tmp_path / "policy.csv"
    policy.write_text((POLICIES / "policy.csv").read_text() + "\n" + extra)
    keys = tmp_path / "keys.db"
    upstream = table_backing(tmp_path, httpx.Response(200, json=loaded_table(tmp_path)))
    client = client_for(upstream, tmp_path, policy={"policy_path": policy,
                                                    "reload_interval_seconds": 0.01},
                        idempotency={"db_uri": f"sqlite:///{keys}"})
    return client, policy, upstream


def commits_sent(upstream: Upstream) -> int:
    """How many commits (table or transaction) reached the backing."""
    return sum(1 for request in upstream.seen if request.method == "POST")


def revoke(client: TestClient, policy: Path, caller: dict[str, str], rule: str,
           status: int = 403) -> None:
    with policy.open("a") as rules:
        rules.write(rule)
    wait_for(lambda: client.post(DEMO_TABLE, json=ALTER, headers=caller).status_code == status,
             what="the policy reload")


def test_a_replay_after_the_table_was_hidden_is_404_like_the_request(tmp_path: Path) -> None:
    client, policy, _ = keyed_world(tmp_path, "p, writer, icegov.demo.t, ALTER, allow\n")
    key = {"Idempotency-Key": str(uuid.uuid4())}
    with client:
        writer = {"authorization": f"Bearer {icegov_token(client, 'writer:writer-secret')}"}
        assert client.post(DEMO_TABLE, json=ALTER, headers={**writer, **key}).status_code == 200
        revoke(client, policy, writer, "p, writer, icegov.demo.t, *, deny\n", 404)
        again = client.post(DEMO_TABLE, json=ALTER, headers={**writer, **key})
        plain = client.post(DEMO_TABLE, json=ALTER, headers=writer)
    assert again.status_code == plain.status_code
    assert "idempotent-replayed" not in again.headers


def test_a_key_is_never_replayed_to_another_principal(tmp_path: Path) -> None:
    client, _, upstream = keyed_world(tmp_path, "p, writer, icegov.demo.t, ALTER, allow\n"
                                                "p, deleter, icegov.demo.t, ALTER, allow\n")
    key = {"Idempotency-Key": str(uuid.uuid4())}
    with client:
        writer = {"authorization": f"Bearer {icegov_token(client, 'writer:writer-secret')}"}
        deleter = {"authorization": f"Bearer {icegov_token(client, 'deleter:deleter-secret')}"}
        assert client.post(DEMO_TABLE, json=ALTER, headers={**writer, **key}).status_code == 200
        other = client.post(DEMO_TABLE, json=ALTER, headers={**deleter, **key})
    assert_error_model(other, 422)
    assert commits_sent(upstream) == 1  # the writer's alone: the refused one reached nothing


def test_a_transaction_replay_needs_every_tables_right_still(tmp_path: Path) -> None:
    client, policy, upstream = keyed_world(tmp_path, "p, writer, icegov.demo.*, ALTER, allow\n")
    body = {"table-changes": [
        {"identifier": {"namespace": ["demo"], "name": name}, **ALTER} for name in ("t", "u")]}
    key = {"Idempotency-Key": str(uuid.uuid4())}
    with client:
        writer = {"authorization": f"Bearer {icegov_token(client, 'writer:writer-secret')}"}
        first = client.post("/v1/cat/transactions/commit", json=body, headers={**writer, **key})
        assert first.status_code in (200, 204), first.text
        with policy.open("a") as rules:
            rules.write("p, writer, icegov.demo.u, ALTER, deny\n")
        wait_for(lambda: client.post("/v1/cat/transactions/commit", json=body,
                                     headers=writer).status_code == 403,
                 what="the policy reload")
        sent = commits_sent(upstream)  # polls before the reload landed may have been forwarded
        again = client.post("/v1/cat/transactions/commit", json=body, headers={**writer, **key})
    assert_error_model(again, 403)
    assert commits_sent(upstream) == sent  # the refused replay reached nothing


def two_column_table(tmp: Path) -> dict[str, Any]:
    """``loaded_table`` with a second column, ``ssn``."""
    loaded = loaded_table(tmp)
    metadata = loaded["metadata"]
    assert isinstance(metadata, dict)
    for schema in metadata["schemas"]:
        schema["fields"].append({"id": 2, "name": "ssn", "type": "string", "required": False})
    metadata["last-column-id"] = 2
    return loaded


def test_a_replay_never_shows_a_column_hidden_since(tmp_path: Path) -> None:
    policy = tmp_path / "policy.csv"
    policy.write_text((POLICIES / "policy.csv").read_text()
                      + "\np, writer, icegov.demo.t, ALTER, allow\n")
    table = two_column_table(tmp_path)
    upstream = Upstream(lambda _: httpx.Response(200, json=table))
    client = client_for(upstream, tmp_path, policy={"policy_path": policy,
                                                    "reload_interval_seconds": 0.01},
                        idempotency={"db_uri": f"sqlite:///{tmp_path / 'keys.db'}"})
    key = {"Idempotency-Key": str(uuid.uuid4())}
    with client:
        writer = {"authorization": f"Bearer {icegov_token(client, 'writer:writer-secret')}"}
        first = client.post(DEMO_TABLE, json=ALTER, headers={**writer, **key})
        assert first.status_code == 200 and "ssn" in first.text, first.text
        with policy.open("a") as rules:
            rules.write("p, writer, icegov.demo.t.ssn, SELECT, deny\n")
        plain = wait_for(lambda: (lambda r: r if r.status_code == 200 and "ssn" not in r.text
                                  else None)(client.post(DEMO_TABLE, json=ALTER, headers=writer)),
                         what="the policy reload")
        again = client.post(DEMO_TABLE, json=ALTER, headers={**writer, **key})
    assert "ssn" not in plain.text
    assert "ssn" not in again.text, dict(again.headers)


# -- 4. Headers: a view's current definition, fetched with the caller's conditional headers --

VIEW = "/v1/cat/namespaces/demo/views/v"


def etag_view_world(tmp_path: Path) -> tuple[TestClient, Upstream]:
    """A backing with the view ``demo.v`` whose definition names ``ssn`` (hidden from the
    analyst), answering a load with an ETag and 304 to ``If-None-Match`` naming it; the analyst
    may ALTER the view."""
    view = view_answer("SELECT id, ssn FROM demo.customers", ["id", "x"])

    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.headers.get("if-none-match") == ETAG:
            return httpx.Response(304, headers={"etag": ETAG})
        return httpx.Response(200, json=view, headers={"etag": ETAG})

    policy = tmp_path / "policy.csv"
    policy.write_text((POLICIES / "policy.csv").read_text()
                      + "\np, analyst, icegov.demo.v, ALTER, allow\n")
    upstream = Upstream(answer)
    return client_for(upstream, tmp_path, policy={"policy_path": policy}), upstream


REPLACE = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"k": "v"}}]}


def test_an_etag_never_lets_a_restricted_principal_replace_a_view_naming_hidden_columns(
        tmp_path: Path) -> None:
    client, upstream = etag_view_world(tmp_path)
    with client:
        analyst = {"authorization": f"Bearer {icegov_token(client, 'analyst:analyst-secret')}"}
        replaced = client.post(VIEW, json=REPLACE, headers={**analyst, "If-None-Match": ETAG})
    assert replaced.status_code == 403
    assert [r for r in upstream.seen if r.method == "POST"] == []


def test_a_restricted_principal_may_not_replace_a_view_naming_hidden_columns(
        tmp_path: Path) -> None:
    client, upstream = etag_view_world(tmp_path)
    with client:
        analyst = {"authorization": f"Bearer {icegov_token(client, 'analyst:analyst-secret')}"}
        assert_error_model(client.post(VIEW, json=REPLACE, headers=analyst), 403)
    assert [r for r in upstream.seen if r.method == "POST"] == []
