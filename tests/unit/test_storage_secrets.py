"""No storage secret reaches a principal that some column or row rule restricts, on any path
that relays a backing's answer — and the answer keeps the shape an unrestricted one has.

The backing vends credentials the way Polaris and Lakekeeper do: FileIO keys in every
LoadTableResult's (and LoadViewResult's) ``config``, ``storage-credentials`` with the table's
prefix and ``client.region``, and keys in the catalog config's ``defaults``. ``analyst`` is the
demo policy's (``demo.customers.ssn`` denied, ``email`` masked): table ``demo.t`` has neither
column, so its view of ``t`` hides nothing — whether no rule names ``t`` ("elsewhere") or a
wildcard rule does (``demo.*.ssn``, a column ``t`` lacks). ``admin`` is restricted nowhere.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from proxy.reads.disclosure import EVERY_SECRET, disclosed
from tests.support.audit import no_icegov_environment  # noqa: F401
from tests.support.http import wait_for
from tests.support.settings import POLICIES
from tests.support.upstream import ALL_ENDPOINTS, Upstream, client_for, icegov_token
from tests.unit.test_page_tokens_view_guard_keys_verify import view_answer
from tests.unit.test_pipeline import ALTER, loaded_table
from tests.unit.test_restricted_planning_config_and_views import (
    ID_SSN,
    customers,
    id_ssn_row,
    served,
)

pytestmark = pytest.mark.usefixtures("no_icegov_environment")

ANALYST = "analyst:analyst-secret"
ADMIN = "admin:admin-secret"
TABLES = "/v1/cat/namespaces/demo/tables"
TABLE = f"{TABLES}/t"
SECRETS = ("AKIA-VENDED", "SECRET-VENDED", "SESSION-VENDED", "WAREHOUSE-SECRET")
VENDED_CONFIG = {"s3.access-key-id": "AKIA-VENDED", "s3.secret-access-key": "SECRET-VENDED",
                 "s3.session-token": "SESSION-VENDED", "s3.region": "eu-west-1",
                 "s3.endpoint": "http://storage:9000", "s3.path-style-access": "true"}
PUBLIC_CONFIG = {"s3.region": "eu-west-1", "s3.endpoint": "http://storage:9000",
                 "s3.path-style-access": "true"}
CREDENTIAL_CONFIG = {"s3.access-key-id": "AKIA-VENDED", "s3.secret-access-key": "SECRET-VENDED",
                     "s3.session-token": "SESSION-VENDED", "client.region": "eu-west-1"}
POLICIES_OF_T = {
    "elsewhere": "p, analyst, icegov.demo.t, ALTER, allow\n",
    "absent-column": ("p, analyst, icegov.demo.t, ALTER, allow\n"
                      "p, analyst, icegov.demo.*.ssn, SELECT, deny\n"),
}


def vended(tmp: Path) -> dict[str, Any]:
    """A LoadTableResult of ``demo.t`` (one column, ``id``) with vended credentials."""
    answer = loaded_table(tmp)
    location = str(tmp / "t")
    answer["config"] = dict(VENDED_CONFIG)
    answer["storage-credentials"] = [{"prefix": location, "config": dict(CREDENTIAL_CONFIG)}]
    return answer


class VendingBacking(Upstream):
    """A backing that vends credentials on every answer that can carry them."""

    def __init__(self, tmp: Path) -> None:
        table = vended(tmp)
        view = {**view_answer("SELECT id FROM demo.t", ["id"]), "config": dict(VENDED_CONFIG)}

        def answer(request: httpx.Request) -> httpx.Response:
            path = request.url.path
            if path.endswith("/credentials"):
                return httpx.Response(200, json={
                    "storage-credentials": table["storage-credentials"]})
            if "/views" in path:
                return httpx.Response(200, json=view)
            return httpx.Response(200, json=table)

        super().__init__(answer, config={
            "defaults": {"s3.secret-access-key": "WAREHOUSE-SECRET", "s3.region": "eu-west-1"},
            "overrides": {"prefix": "cat"}, "endpoints": ALL_ENDPOINTS})


@pytest.fixture(params=sorted(POLICIES_OF_T))
def client(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TestClient]:
    policy = tmp_path / "policy.csv"
    policy.write_text((POLICIES / "policy.csv").read_text() + "\n" + POLICIES_OF_T[request.param]
                      + "p, analyst, icegov.demo.t, CREATE_TABLE, allow\n"
                      + "p, analyst, icegov.demo.v, CREATE_TABLE, allow\n"
                      + "p, analyst, icegov.demo.v, ALTER, allow\n"
                      + "p, analyst, icegov.demo.t, REGISTER_TABLE, allow\n")
    with client_for(VendingBacking(tmp_path), tmp_path, policy={"policy_path": policy},
                    idempotency={"db_uri": f"sqlite:///{tmp_path / 'keys.db'}"}) as running:
        yield running


def as_(client: TestClient, credential: str) -> dict[str, str]:
    return {"authorization": f"Bearer {icegov_token(client, credential)}"}


CREATE = {"name": "t", "schema": {"type": "struct", "schema-id": 0, "fields": [
    {"id": 1, "name": "id", "type": "long", "required": False}]}}
CREATE_VIEW = {"name": "v", "schema": {"type": "struct", "schema-id": 0, "fields": [
    {"id": 1, "name": "id", "type": "long", "required": False}]},
    "view-version": {"version-id": 1, "timestamp-ms": 0, "schema-id": 0, "summary": {},
                     "default-namespace": ["demo"],
                     "representations": [{"type": "sql", "sql": "SELECT id FROM demo.t",
                                          "dialect": "spark"}]},
    "properties": {}}
REPLACE_VIEW = {"requirements": [], "updates": [
    {"action": "set-properties", "updates": {"k": "v"}}]}

PATHS: dict[str, tuple[str, str, dict[str, Any] | None]] = {
    "loadTable": ("GET", TABLE, None),
    "commit": ("POST", TABLE, ALTER),
    "create": ("POST", TABLES, CREATE),
    "stage-create": ("POST", TABLES, {**CREATE, "stage-create": True}),
    "loadView": ("GET", "/v1/cat/namespaces/demo/views/v", None),
    "createView": ("POST", "/v1/cat/namespaces/demo/views", CREATE_VIEW),
    "replaceView": ("POST", "/v1/cat/namespaces/demo/views/v", REPLACE_VIEW),
}


def call(client: TestClient, path: str, headers: dict[str, str]) -> httpx.Response:
    method, url, body = PATHS[path]
    response: httpx.Response = client.request(method, url, json=body, headers={
        **headers, "X-Iceberg-Access-Delegation": "vended-credentials"})
    assert response.status_code == 200, (path, response.text)
    return response


@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_restricted_principal_gets_no_storage_secret_and_the_same_shape(
        client: TestClient, path: str) -> None:
    restricted = call(client, path, as_(client, ANALYST))
    unrestricted = call(client, path, as_(client, ADMIN))
    assert not [s for s in SECRETS if s in restricted.text], restricted.text
    assert "SECRET-VENDED" in unrestricted.text  # the admin still gets what the backing vends
    assert shape(restricted.json()) == shape(unrestricted.json())


def shape(answer: dict[str, Any]) -> dict[str, Any]:
    """What a client configures storage from: the non-secret config and each storage
    credential's prefix and non-secret config."""
    public = set(PUBLIC_CONFIG) | {"client.region"}
    return {"config": {k: v for k, v in (answer.get("config") or {}).items() if k in public},
            "storage-credentials": [
                (c["prefix"], {k: v for k, v in c["config"].items() if k in public})
                for c in answer.get("storage-credentials") or []]}


def test_the_restricted_shape_keeps_region_endpoint_and_credential_prefixes(
        client: TestClient, tmp_path: Path) -> None:
    loaded = call(client, "loadTable", as_(client, ANALYST)).json()
    assert {k: loaded["config"][k] for k in PUBLIC_CONFIG} == PUBLIC_CONFIG
    assert loaded["storage-credentials"] == [
        {"prefix": str(tmp_path / "t"), "config": {"client.region": "eu-west-1"}}]
    assert loaded["metadata-location"]  # nothing hidden in t: its metadata file is no secret


def test_a_transaction_answer_carries_nothing_of_the_backings(client: TestClient) -> None:
    body = {"table-changes": [{"identifier": {"namespace": ["demo"], "name": "t"}, **ALTER}]}
    restricted = client.post("/v1/cat/transactions/commit", json=body,
                             headers=as_(client, ANALYST))
    unrestricted = client.post("/v1/cat/transactions/commit", json=body,
                               headers=as_(client, ADMIN))
    assert restricted.status_code == 204 and restricted.content == b""
    assert unrestricted.status_code == 200 and "SECRET-VENDED" in unrestricted.text


def test_credentials_are_refused_on_a_restricted_table_and_bare_elsewhere(
        client: TestClient, request: pytest.FixtureRequest) -> None:
    answer = client.get(f"{TABLE}/credentials", headers=as_(client, ANALYST))
    unrestricted = client.get(f"{TABLE}/credentials", headers=as_(client, ADMIN))
    assert "SECRET-VENDED" in unrestricted.text
    if "absent-column" in request.node.name:  # a rule names t: refused, as before
        assert answer.status_code == 403, answer.text
        return
    assert answer.status_code == 200, answer.text
    assert not [s for s in SECRETS if s in answer.text], answer.text
    assert shape(answer.json()) == shape(unrestricted.json())


def test_a_restricted_principal_registers_nothing_and_so_reads_no_answer(
        client: TestClient) -> None:
    body = {"name": "t", "metadata-location": "/w/t/metadata/v1.json"}
    refused = client.post("/v1/cat/namespaces/demo/register", json=body,
                          headers=as_(client, ANALYST))
    registered = client.post("/v1/cat/namespaces/demo/register", json=body,
                             headers=as_(client, ADMIN))
    assert refused.status_code == 403, refused.text
    assert not [s for s in SECRETS if s in refused.text]
    assert registered.status_code == 200 and "SECRET-VENDED" in registered.text


def test_the_catalog_config_keeps_its_public_defaults(client: TestClient) -> None:
    restricted = client.get("/v1/config", headers=as_(client, ANALYST))
    unrestricted = client.get("/v1/config", headers=as_(client, ADMIN))
    assert "WAREHOUSE-SECRET" not in restricted.text
    assert unrestricted.json()["defaults"]["s3.secret-access-key"] == "WAREHOUSE-SECRET"
    assert restricted.json()["defaults"]["s3.region"] == "eu-west-1"


def test_a_replay_keeps_its_header_and_holds_no_secret(client: TestClient) -> None:
    analyst = {**as_(client, ANALYST), "Idempotency-Key": str(uuid.uuid4())}
    first = client.post(TABLE, json=ALTER, headers=analyst)
    again = client.post(TABLE, json=ALTER, headers=analyst)
    assert first.status_code == again.status_code == 200, again.text
    assert again.headers["idempotent-replayed"] == "true"
    assert again.headers["content-type"] == "application/json"
    assert not [s for s in SECRETS if s in again.text], again.text


def test_a_projected_replay_keeps_its_headers(tmp_path: Path) -> None:
    """A rule hides ``ssn`` of ``t`` from the analyst after its commit was answered: the
    replay of the stored answer is projected, and still says it is a replay."""
    table = vended(tmp_path)
    for schema in table["metadata"]["schemas"]:
        schema["fields"].append({"id": 2, "name": "ssn", "type": "string", "required": False})
    table["metadata"]["last-column-id"] = 2
    policy = tmp_path / "policy.csv"
    policy.write_text((POLICIES / "policy.csv").read_text()
                      + "\np, analyst, icegov.demo.t, ALTER, allow\n")
    backing = Upstream(lambda _: httpx.Response(200, json=table))
    key = {"Idempotency-Key": str(uuid.uuid4())}
    with client_for(backing, tmp_path, idempotency={"db_uri": f"sqlite:///{tmp_path / 'k.db'}"},
                    policy={"policy_path": policy, "reload_interval_seconds": 0.01}) as client:
        analyst = as_(client, ANALYST)
        first = client.post(TABLE, json=ALTER, headers={**analyst, **key})
        assert first.status_code == 200 and "ssn" in first.text, first.text
        with policy.open("a") as rules:
            rules.write("p, analyst, icegov.demo.t.ssn, SELECT, deny\n")
        wait_for(lambda: "ssn" not in client.get(TABLE, headers=analyst).text,
                 what="the policy reload")
        again = client.post(TABLE, json=ALTER, headers={**analyst, **key})
    assert again.status_code == 200, again.text
    assert again.headers["idempotent-replayed"] == "true"
    assert again.headers["content-type"] == "application/json"
    assert "ssn" not in again.text
    assert not [s for s in SECRETS if s in again.text], again.text


def test_a_completed_plan_carries_no_storage_secret(tmp_path: Path) -> None:
    """icegov builds plans itself from the backing's metadata: a restricted principal's
    completed plan carries none of the credentials the backing vends with the table."""
    table = customers(tmp_path, ID_SSN, id_ssn_row)
    answer = {**served(table), "config": dict(VENDED_CONFIG), "storage-credentials": [
        {"prefix": table.location(), "config": dict(CREDENTIAL_CONFIG)}]}
    backing = Upstream(lambda _: httpx.Response(200, json=answer))
    with client_for(backing, tmp_path) as client:
        planned = client.post("/v1/cat/namespaces/demo/tables/customers/plan",
                              json={"select": ["id"]}, headers=as_(client, ANALYST))
    assert planned.status_code == 200 and planned.json()["status"] == "completed", planned.text
    assert not [s for s in SECRETS if s in planned.text], planned.text


def test_a_projected_config_names_the_region_its_credentials_name(tmp_path: Path) -> None:
    """The backing leaves ``config`` empty and names the region in its storage credentials
    only. The analyst's projected answer adds ``scan-planning-mode`` to ``config``: a client
    that configures storage from a non-empty config (DuckDB) finds the region there too."""
    table = loaded_table(tmp_path)
    for schema in table["metadata"]["schemas"]:
        schema["fields"].append({"id": 2, "name": "ssn", "type": "string", "required": False})
    table["metadata"]["last-column-id"] = 2
    table["storage-credentials"] = [{"prefix": str(tmp_path / "t"),
                                     "config": dict(CREDENTIAL_CONFIG)}]
    policy = tmp_path / "policy.csv"
    policy.write_text((POLICIES / "policy.csv").read_text()
                      + "\np, analyst, icegov.demo.t.ssn, SELECT, deny\n")
    backing = Upstream(lambda _: httpx.Response(200, json=table))
    with client_for(backing, tmp_path, policy={"policy_path": policy}) as client:
        loaded = client.get(TABLE, headers=as_(client, ANALYST)).json()
        plain = client.get(TABLE, headers=as_(client, ADMIN)).json()
    assert loaded["config"] == {"client.region": "eu-west-1", "scan-planning-mode": "server"}
    assert plain["config"] == {}  # an answer icegov does not project is the backing's
    assert loaded["storage-credentials"] == [{"prefix": str(tmp_path / "t"),
                                              "config": {"client.region": "eu-west-1"}}]


def test_an_answer_that_cannot_be_cleaned_is_not_relayed(tmp_path: Path) -> None:
    """A 200 loadTable answer icegov cannot read as a JSON object might still carry a key a
    lenient client finds: for a restricted principal it is a 502, never relayed."""
    backing = Upstream(lambda _: httpx.Response(200, text='["s3.secret-access-key", "K"]'))
    with client_for(backing, tmp_path) as client:
        orders = "/v1/cat/namespaces/demo/tables/orders"  # no rule restricts it for anyone
        refused = client.get(orders, headers=as_(client, ANALYST))
        relayed = client.get(orders, headers=as_(client, ADMIN))
    assert refused.status_code == 502 and "K" not in refused.json()["error"]["message"]
    assert relayed.status_code == 200


def test_metadata_files_go_only_where_the_view_restricts() -> None:
    answer = {"metadata-location": "s3://b/t/metadata/v2.json", "config": {"k": "v"},
              "metadata": {"metadata-log": [{"metadata-file": "s3://b/t/metadata/v1.json"}]}}
    loaded = disclosed(answer, EVERY_SECRET.and_metadata_files())
    committed = disclosed(answer, EVERY_SECRET.and_metadata_files(), keep_location=True)
    assert "metadata-location" not in loaded and loaded["metadata"]["metadata-log"] == []
    assert committed["metadata-location"] == answer["metadata-location"]
    assert disclosed(answer, EVERY_SECRET) == answer  # nothing secret, nothing projected
