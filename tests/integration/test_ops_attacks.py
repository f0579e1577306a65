"""An attacker's review of issue 9's views and metrics, against real proxies on both backings.

Each test states the behaviour icegov has: every attack here is refused today (the findings once
pinned as strict xfails were fixed and un-marked), so a regression fails its test.

The proxies here use one policy of their own (``POLICY``): ``analyst`` may browse namespace
``vleak`` and read only the views ``a``, ``c`` and ``vcol`` and the table ``tcol`` (but not its
column ``secret_col``) in it; ``writer`` may read and ALTER anything in
``vatk`` but holds no REGISTER_TABLE (the right to place files over another table's).
"""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import BACKENDS, RunningProxy, proxy_for
from tests.support.errors import assert_error_model
from tests.support.http import as_principal
from tests.support.settings import ADMIN

ANALYST = "analyst:analyst-secret"
WRITER = "writer:writer-secret"
POLICY = """\
p, admin, *, *, allow
p, analyst, icegov, BROWSE, allow
p, analyst, icegov.vleak, BROWSE, allow
p, analyst, icegov.vleak.a, READ, allow
p, analyst, icegov.vleak.c, READ, allow
p, analyst, icegov.vleak.tcol, READ, allow
p, analyst, icegov.vleak.tcol.secret_col, SELECT, deny
p, analyst, icegov.vleak.vcol, READ, allow
p, analyst, icegov.vleak.valias, READ, allow
p, analyst, icegov.vleak.vok, READ, allow
p, writer, icegov, BROWSE, allow
p, writer, icegov.vatk, BROWSE, allow
p, writer, icegov.vatk.*, READ, allow
p, writer, icegov.vatk.*, ALTER, allow
"""
ID_SCHEMA = {"type": "struct", "schema-id": 0, "fields": [
    {"id": 1, "name": "id", "type": "long", "required": False}]}
_ids = itertools.count()


def fresh(prefix: str) -> str:
    return f"{prefix}{next(_ids)}_{uuid.uuid4().hex[:6]}"


def view_body(name: str, namespace: str, sql: str = "SELECT 1 AS id") -> dict[str, Any]:
    return {"name": name, "schema": ID_SCHEMA, "properties": {}, "view-version": {
        "version-id": 1, "timestamp-ms": 1_700_000_000_000, "schema-id": 0, "summary": {},
        "default-namespace": [namespace],
        "representations": [{"type": "sql", "sql": sql, "dialect": "spark"}]}}


class Attack:
    """A proxy with ``POLICY``, the admin's client and one client per attacker."""

    def __init__(self, proxy: RunningProxy) -> None:
        self.proxy = proxy
        self.admin = as_principal(proxy.url, ADMIN)
        self.analyst = as_principal(proxy.url, ANALYST)
        self.writer = as_principal(proxy.url, WRITER)
        for namespace in ("vleak", "vatk"):
            self.admin.post("/v1/namespaces", json={"namespace": [namespace]})

    def view(self, namespace: str, name: str, sql: str = "SELECT 1 AS id") -> dict[str, Any]:
        created = self.admin.post(f"/v1/namespaces/{namespace}/views",
                                  json=view_body(name, namespace, sql))
        assert created.status_code == 200, created.text
        return dict(created.json())

    def table(self, namespace: str, name: str) -> dict[str, Any]:
        created = self.admin.post(f"/v1/namespaces/{namespace}/tables",
                                  json={"name": name, "schema": ID_SCHEMA})
        assert created.status_code == 200, created.text
        return dict(created.json())

    def scrape(self) -> dict[str, float]:
        """Every sample of /metrics (fetched without a token), by its series."""
        text = httpx.get(f"{self.proxy.url}/metrics").text
        samples = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                series, value = line.rsplit(" ", 1)
                samples[series] = float(value)
        return samples

    def close(self) -> None:
        for client in (self.admin, self.analyst, self.writer):
            client.close()


@pytest.fixture(scope="module", params=BACKENDS)
def attack(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Attack]:
    workdir = tmp_path_factory.mktemp(f"ops-{request.param}")
    policy = workdir / "policy.csv"
    policy.write_text(POLICY)
    with proxy_for(str(request.param), workdir, policy={"policy_path": policy}) as proxy:
        world = Attack(proxy)
        world.backend = str(request.param)  # type: ignore[attr-defined]
        try:
            yield world
        finally:
            world.close()


def backend_of(attack: Attack) -> str:
    return str(attack.backend)  # type: ignore[attr-defined]


# ----------------------------------------------------------------- views: listing leakage


@pytest.fixture(scope="module")
def leaky_namespace(attack: Attack) -> str:
    """``vleak`` holding views ``a``, ``b_secret`` (hidden from analyst) and ``c``."""
    for name in ("a", "b_secret", "c"):
        attack.view("vleak", name)
    return "vleak"


def test_a_filtered_view_listing_names_only_what_the_caller_may_see(
        attack: Attack, leaky_namespace: str) -> None:
    listed = attack.analyst.get(f"/v1/namespaces/{leaky_namespace}/views")
    assert listed.status_code == 200, listed.text
    names = [i["name"] for i in listed.json()["identifiers"]]
    assert [n for n in names if not n.startswith("v")] == ["a", "c"]  # v…: other tests' views
    assert "b_secret" not in listed.text


def test_view_page_tokens_never_name_a_hidden_view(attack: Attack,
                                                   leaky_namespace: str) -> None:
    """The embedded catalog's view listing uses the last name of a page as its
    ``next-page-token``: icegov hands out only sealed tokens (``proxy.gate.page_tokens``), so no
    page names ``b_secret``, and following the tokens lists exactly what the caller sees."""
    for size in (1, 2, 3):
        names, token, pages = [], None, 0
        while pages < 10:
            params: dict[str, Any] = {"pageSize": size}
            if token:
                params["pageToken"] = token
            page = attack.analyst.get(f"/v1/namespaces/{leaky_namespace}/views", params=params)
            assert page.status_code == 200, page.text
            assert "b_secret" not in page.text
            names += [i["name"] for i in page.json()["identifiers"]]
            token, pages = page.json().get("next-page-token"), pages + 1
            if not token:
                break
        assert [n for n in names if not n.startswith("v")] == ["a", "c"], (size, names)


def test_a_hidden_view_and_a_missing_view_answer_alike(attack: Attack,
                                                       leaky_namespace: str) -> None:
    """No 403/404 oracle, in the answer or in /metrics, for a view the caller may not see."""
    base = f"/v1/namespaces/{leaky_namespace}/views"

    def probe(name: str) -> tuple[list[tuple[int, str]], dict[str, float]]:
        before = attack.scrape()
        answers = []
        for method in ("GET", "HEAD", "DELETE"):
            response = attack.analyst.request(method, f"{base}/{name}")
            answers.append((response.status_code,
                            response.text.replace(name, "NAME") if response.text else ""))
        after = attack.scrape()
        return answers, counter_moves(before, after)

    hidden = probe("b_secret")
    missing = probe("no_such_view")
    assert hidden == missing
    assert {status for status, _ in hidden[0]} == {404}


def counter_moves(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Which counters (not timings) moved between two scrapes, and by how much."""
    timing = re.compile(r"_(bucket|sum)\{|_sum$|process_|_created")
    return {k: v - before.get(k, 0.0) for k, v in after.items()
            if not timing.search(k) and v != before.get(k, 0.0)}


def test_views_in_a_namespace_the_caller_cannot_see_are_not_listed(attack: Attack) -> None:
    hidden_ns = fresh("vhid")
    assert attack.admin.post("/v1/namespaces", json={"namespace": [hidden_ns]}).status_code == 200
    attack.view(hidden_ns, "inside")
    listed = attack.analyst.get(f"/v1/namespaces/{hidden_ns}/views")
    missing = attack.analyst.get("/v1/namespaces/no_such_ns_at_all/views")
    assert_error_model(listed, 404)
    assert (listed.status_code, listed.json()["error"]["type"]) == (
        missing.status_code, missing.json()["error"]["type"])
    assert "inside" not in listed.text


# ----------------------------------------------------------------- views: name collisions


def test_views_and_tables_never_stand_in_for_each_other(attack: Attack) -> None:
    table, view = fresh("ct"), fresh("cv")
    attack.table("vatk", table)
    attack.view("vatk", view)
    tables, views = "/v1/namespaces/vatk/tables", "/v1/namespaces/vatk/views"
    admin = attack.admin
    assert_error_model(admin.post(views, json=view_body(table, "vatk")), 409)
    assert_error_model(admin.post(tables, json={"name": view, "schema": ID_SCHEMA}), 409)
    onto_table = {"source": {"namespace": ["vatk"], "name": view},
                  "destination": {"namespace": ["vatk"], "name": table}}
    assert_error_model(admin.post("/v1/views/rename", json=onto_table), 409)
    onto_view = {"source": {"namespace": ["vatk"], "name": table},
                 "destination": {"namespace": ["vatk"], "name": view}}
    # the reference catalog renames no tables at all (406 "Cannot rename Hadoop tables")
    assert admin.post("/v1/tables/rename", json=onto_view).status_code in (406, 409)
    assert admin.delete(f"{tables}/{view}").status_code == 404  # drop-table on a view
    assert admin.delete(f"{views}/{table}").status_code == 404  # drop-view on a table
    assert_error_model(admin.get(f"{tables}/{view}"), 404)
    assert_error_model(admin.get(f"{views}/{table}"), 404)
    assert admin.head(f"{tables}/{table}").status_code == 204
    assert admin.head(f"{views}/{view}").status_code == 204


def test_view_renames_and_creates_are_governed_on_both_names(attack: Attack) -> None:
    view = fresh("gv")
    attack.view("vatk", view)
    away = {"source": {"namespace": ["vatk"], "name": view},
            "destination": {"namespace": ["vleak"], "name": fresh("moved")}}
    assert attack.writer.post("/v1/views/rename", json=away).status_code in (403, 404)
    assert_error_model(attack.writer.post("/v1/namespaces/vatk/views",
                                          json=view_body(fresh("w"), "vatk")), 403)
    register = {"name": fresh("reg"), "metadata-location": "/etc/passwd"}
    assert attack.writer.post("/v1/namespaces/vatk/register-view",
                              json=register).status_code in (403, 404)
    assert attack.admin.head(f"/v1/namespaces/vatk/views/{view}").status_code == 204


# ----------------------------------------------------------------- views: locations


def test_a_view_created_at_a_chosen_location_needs_register_table(attack: Attack) -> None:
    name = fresh("loc")
    body = {**view_body(name, "vatk"), "location": "/tmp/elsewhere"}
    # writer holds ALTER but neither CREATE_TABLE nor REGISTER_TABLE
    assert_error_model(attack.writer.post("/v1/namespaces/vatk/views", json=body), 403)
    assert attack.admin.head(f"/v1/namespaces/vatk/views/{name}").status_code == 404


def test_an_embedded_view_location_outside_the_warehouse_is_refused(attack: Attack,
                                                                    tmp_path: Path) -> None:
    if backend_of(attack) != "embedded":
        pytest.skip("the reference catalog places files where it is told (its own business)")
    outside = tmp_path / "outside"
    body = {**view_body(fresh("out"), "vatk"), "location": outside.as_uri()}
    assert_error_model(attack.admin.post("/v1/namespaces/vatk/views", json=body), 400)
    assert not outside.exists()


def test_moving_a_views_location_needs_register_table_like_a_tables(attack: Attack) -> None:
    table, view = fresh("victim"), fresh("mover")
    victim = attack.table("vatk", table)
    created = attack.view("vatk", view)
    replace = {"requirements": [{"type": "assert-view-uuid",
                                 "uuid": created["metadata"]["view-uuid"]}],
               "updates": [{"action": "set-location",
                            "location": victim["metadata"]["location"]}]}
    moved = attack.writer.post(f"/v1/namespaces/vatk/views/{view}", json=replace)
    assert_error_model(moved, 403)
    after = attack.admin.get(f"/v1/namespaces/vatk/views/{view}")
    assert after.status_code == 200, after.text
    assert after.json()["metadata-location"] == created["metadata-location"]
    assert after.json()["metadata"]["location"] == created["metadata"]["location"]


# ----------------------------------------------------------------- metrics and probes


def test_probes_and_metrics_name_no_table_namespace_principal_or_error(attack: Attack) -> None:
    secret_ns = fresh("metricsecret")
    attack.admin.post("/v1/namespaces", json={"namespace": [secret_ns]})
    attack.analyst.get(f"/v1/namespaces/{secret_ns}/tables/nope")
    attack.writer.post("/v1/namespaces/vatk/views", json=view_body("metricview", "vatk"))
    weird = httpx.Client(base_url=attack.proxy.url, headers={
        "x-client-version": "evil-client-" + secret_ns, "user-agent": "ua-" + secret_ns})
    with weird:
        for path in (f"/v1/{secret_ns}/namespaces", f"/{secret_ns}", "/v1/config"):
            weird.get(path)
        weird.request("PROPFIND", "/v1/config")
    for path in ("/metrics", "/healthz", "/readyz"):
        text = httpx.get(f"{attack.proxy.url}{path}").text
        for word in (secret_ns, "metricview", "analyst", "writer", "evil-client", "ua-"):
            assert word not in text, (path, word)


def test_odd_requests_do_not_grow_the_metric_series(attack: Attack) -> None:
    noisy = httpx.Client(base_url=attack.proxy.url)

    def series() -> set[str]:
        return {k for k in attack.scrape() if k.startswith("icegov_requests_total")}

    with noisy:
        for n in range(3):  # warm up every kind of odd request once
            odd(noisy, n)
        settled = series()
        for n in range(3, 40):
            odd(noisy, n)
    assert series() == settled


def odd(client: httpx.Client, n: int) -> None:
    """Unknown routes, methods, prefixes and client versions, each with a new value."""
    version = {"x-client-version": f"v{n}", "user-agent": f"agent-{n}"}
    client.get(f"/v1/unknown-{n}", headers=version)
    client.get(f"/v1/prefix-{n}/namespaces", headers=version)
    client.request(f"X{n}", "/v1/config", headers=version)
    client.get("/v1/config", headers={**version, "authorization": f"Bearer junk-{n}"})


# ----------------------------------------------------------------- views: odd bodies


def odd_view_bodies(namespace: str) -> dict[str, Any]:
    base = view_body(fresh("odd"), namespace)
    version = base["view-version"]
    return {
        "huge sql": {**base, "view-version": {**version, "representations": [
            {"type": "sql", "sql": "SELECT 1 AS id -- " + "x" * 4_000_000, "dialect": "spark"}]}},
        "unknown representation": {**base, "view-version": {**version, "representations": [
            {"type": "python", "code": "import os", "dialect": "spark"}]}},
        "no representation": {**base, "view-version": {**version, "representations": []}},
        "sql not a string": {**base, "view-version": {**version, "representations": [
            {"type": "sql", "sql": {"$ne": 1}, "dialect": "spark"}]}},
        "many dialects": {**base, "view-version": {**version, "representations": [
            {"type": "sql", "sql": "SELECT 1 AS id", "dialect": f"d{n}"} for n in range(2000)]}},
        "dialect of control characters": {**base, "view-version": {**version, "representations": [
            {"type": "sql", "sql": "SELECT 1 AS id", "dialect": "\u0000\n\u202e"}]}},
        "schema with duplicate ids": {**base, "schema": {"type": "struct", "schema-id": 0,
                                                         "fields": [ID_SCHEMA["fields"][0]] * 2}},
        "deep nesting": {**base, "properties": json_bomb(400)},
    }


def json_bomb(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"k": value}
    return value


ODD_VIEW_BODIES = sorted(odd_view_bodies("ns"))
BACKING_500 = frozenset({"no representation", "unknown representation"})


@pytest.mark.parametrize("what", ODD_VIEW_BODIES)
def test_odd_view_bodies_are_never_a_server_error(attack: Attack, what: str,
                                                  request: pytest.FixtureRequest) -> None:
    """Finding (reference backing): icegov forwards create-view bodies unchecked
    (proxy/admission/intent.py INTENTS['create_view'] reads only ``name``), Iceberg's handlers fail
    with 500 on a representation they cannot parse, and icegov answers 502: client input, 5xx."""
    body = odd_view_bodies("vatk")[what]
    created = attack.admin.post("/v1/namespaces/vatk/views", json=body)
    assert created.status_code < 500, created.text[:300]
    if what in BACKING_500:  # icegov judges the body itself, before any backing sees it
        assert created.status_code == 400, created.text[:300]
    if created.status_code == 200:
        loaded = attack.admin.get(f"/v1/namespaces/vatk/views/{body['name']}")
        assert loaded.status_code == 200, loaded.text[:300]


def test_a_view_replace_naming_another_view_in_its_body_changes_only_the_url_view(
        attack: Attack) -> None:
    mine, theirs = fresh("mine"), fresh("theirs")
    created = attack.view("vatk", mine)
    protected = attack.view("vleak", theirs)  # writer holds nothing in vleak
    replace = {"identifier": {"namespace": ["vleak"], "name": theirs},
               "requirements": [],
               "updates": [{"action": "set-properties", "updates": {"owned-by": "writer"}}]}
    answer = attack.writer.post(f"/v1/namespaces/vatk/views/{mine}", json=replace)
    assert answer.status_code in (200, 400, 403, 404), answer.text
    after = attack.admin.get(f"/v1/namespaces/vleak/views/{theirs}").json()
    assert after["metadata"] == protected["metadata"]
    assert created["metadata"]["view-uuid"] != after["metadata"]["view-uuid"]


def test_a_view_does_not_name_a_column_hidden_from_its_reader(attack: Attack) -> None:
    schema = {"type": "struct", "schema-id": 0, "fields": [
        {"id": 1, "name": "id", "type": "long", "required": False},
        {"id": 2, "name": "secret_col", "type": "string", "required": False}]}
    attack.admin.delete("/v1/namespaces/vleak/views/vcol")
    attack.admin.delete("/v1/namespaces/vleak/tables/tcol")
    table = attack.admin.post("/v1/namespaces/vleak/tables", json={"name": "tcol",
                                                                   "schema": schema})
    assert table.status_code == 200, table.text
    body = {**view_body("vcol", "vleak", "SELECT id, secret_col FROM vleak.tcol"),
            "schema": schema}
    assert attack.admin.post("/v1/namespaces/vleak/views", json=body).status_code == 200
    loaded_table = attack.analyst.get("/v1/namespaces/vleak/tables/tcol")
    assert loaded_table.status_code == 200 and "secret_col" not in loaded_table.text
    loaded_view = attack.analyst.get("/v1/namespaces/vleak/views/vcol")
    assert loaded_view.status_code == 403, loaded_view.text
    assert "secret_col" not in loaded_view.text
    aliased = {**view_body("valias", "vleak", "SELECT id, SECRET_COL AS x FROM vleak.tcol"),
               "schema": {**schema, "fields": [schema["fields"][0], {
                   "id": 2, "name": "x", "type": "string", "required": False}]}}
    attack.admin.delete("/v1/namespaces/vleak/views/valias")
    assert attack.admin.post("/v1/namespaces/vleak/views", json=aliased).status_code == 200
    assert attack.analyst.get("/v1/namespaces/vleak/views/valias").status_code == 403
    permitted = {**view_body("vok", "vleak", "SELECT id FROM vleak.tcol"),
                 "schema": {**schema, "fields": schema["fields"][:1]}}
    attack.admin.delete("/v1/namespaces/vleak/views/vok")
    assert attack.admin.post("/v1/namespaces/vleak/views", json=permitted).status_code == 200
    ok = attack.analyst.get("/v1/namespaces/vleak/views/vok")
    assert ok.status_code == 200 and ok.json()["metadata"]["versions"], ok.text
