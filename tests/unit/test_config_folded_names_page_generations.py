"""Attacks, round 4: what earlier reviews had not reached (the config answer, names a backing
folds, listing page tokens across policy generations).

Every attack here is met today (refused or made harmless) and is a plain test (the findings once
pinned as strict xfails were fixed and un-marked). The integration half is
``tests/integration/test_history_undo_and_path_overlap.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from proxy.app import create_app
from proxy.governance import Action
from tests.support.commit_capture import Crafter
from tests.support.errors import assert_error_model
from tests.support.http import wait_for
from tests.support.settings import settings_for_tests
from tests.support.upstream import ALL_ENDPOINTS, Upstream, client_for, icegov_token
from tests.unit.test_purge_roots_pages_view_guard_fast_lane import PagingBacking

ANALYST = "analyst:analyst-secret"

# -- GET /v1/config: what the backing tells clients to do ---------------------------------------

CLIENT_STEERING = {
    "uri": "http://backing.internal:8181",  # pyiceberg re-points its catalog URI at this
    "oauth2-server-uri": "http://backing.internal/oauth/tokens",  # where secrets would be sent
    "token": "the-backings-own-bearer",
}


def config_answer(section: str) -> dict[str, Any]:
    """icegov's /v1/config answer when the backing's config puts ``CLIENT_STEERING`` in
    ``section`` (``defaults`` or ``overrides``)."""
    config: dict[str, Any] = {"defaults": {}, "overrides": {"prefix": "cat"},
                              "endpoints": ALL_ENDPOINTS}
    config[section] = {**config[section], **CLIENT_STEERING}
    with client_for(Upstream(config=config)) as client:
        answer = client.get("/v1/config")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_the_backings_config_never_steers_clients_away_from_icegov() -> None:
    config = config_answer("overrides")
    assert not set(CLIENT_STEERING) & set(config["overrides"])


def test_the_backings_defaults_never_carry_a_token_or_another_token_endpoint() -> None:
    config = config_answer("defaults")
    assert not {"token", "oauth2-server-uri"} & set(config["defaults"])


def test_the_config_answer_keeps_the_backings_prefix() -> None:
    assert config_answer("defaults")["overrides"]["prefix"] == "cat"


# -- names a case-insensitive backing folds -----------------------------------------------------

FOLD_POLICY = """\
p, admin, *, *, allow
p, analyst, icegov, BROWSE, allow
p, analyst, icegov.sales, BROWSE, allow
p, analyst, icegov.sales.*, READ, allow
p, analyst, icegov.sales.salaries, *, deny
"""


class FoldingBacking:
    """A backing that resolves names case-insensitively (as Hive, Glue and others do): every
    table it is asked for is its one table ``sales.salaries``."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        if request.url.path.lower().endswith("/namespaces/sales/tables/salaries"):
            return httpx.Response(200, json={"metadata-location": "s3://w/sales/salaries/m.json",
                                             "metadata": {"secret": True}, "config": {}})
        return httpx.Response(404, json={"error": {"message": "no", "type":
                                                   "NoSuchTableException", "code": 404}})


Folded = tuple[TestClient, dict[str, str], FoldingBacking]


def folding_world(tmp_path: Path, backing: FoldingBacking | None = None,
                  **settings: Any) -> Iterator[Folded]:
    """icegov in front of ``backing`` (the folding one by default); the analyst's headers."""
    policy = tmp_path / "policy.csv"
    policy.write_text(FOLD_POLICY)
    backing = backing or FoldingBacking()
    upstream = Upstream(backing, config={"defaults": {}, "overrides": {},
                                         "endpoints": ALL_ENDPOINTS})
    with client_for(upstream, tmp_path, policy={"policy_path": policy}, **settings) as client:
        yield client, {"authorization": f"Bearer {icegov_token(client, ANALYST)}"}, backing


@pytest.fixture()
def folded(tmp_path: Path) -> Iterator[Folded]:
    yield from folding_world(tmp_path)


def test_the_denied_table_under_its_own_name_is_hidden(
        folded: tuple[TestClient, dict[str, str], FoldingBacking]) -> None:
    client, analyst, backing = folded
    answer = client.get("/v1/namespaces/sales/tables/salaries", headers=analyst)
    assert answer.status_code == 404
    assert backing.paths == []


@pytest.fixture()
def folded_lower(tmp_path: Path) -> Iterator[Folded]:
    """The folding backing, with icegov told so (``name_case: lower``)."""
    yield from folding_world(tmp_path, name_case="lower")


@pytest.mark.parametrize("spelling", [
    "/v1/namespaces/sales/tables/SALARIES", "/v1/namespaces/SALES/tables/salaries",
    "/v1/namespaces/sales/tables/Salaries", "/v1/namespaces/sales/tables/salaries%E2%84%AA",
    "/v1/namespaces/sales/tables/stra%C3%9Fe"])
def test_another_spelling_of_a_denied_table_is_refused_too(
        folded_lower: tuple[TestClient, dict[str, str], FoldingBacking], spelling: str) -> None:
    client, analyst, backing = folded_lower
    answer = client.get(spelling, headers=analyst)
    assert_error_model(answer, 400)
    assert backing.paths == []


def test_other_spellings_in_a_body_are_refused_too(
        folded_lower: tuple[TestClient, dict[str, str], FoldingBacking]) -> None:
    client, analyst, backing = folded_lower
    renamed = client.post("/v1/tables/rename", headers=analyst, json={
        "source": {"namespace": ["sales"], "name": "other"},
        "destination": {"namespace": ["sales"], "name": "SALARIES"}})
    assert_error_model(renamed, 400)
    assert backing.paths == []


def test_lower_case_names_are_served_as_before(
        folded_lower: tuple[TestClient, dict[str, str], FoldingBacking]) -> None:
    client, analyst, _ = folded_lower
    assert client.get("/v1/namespaces/sales/tables/salaries", headers=analyst).status_code == 404
    admin = {"authorization": f"Bearer {icegov_token(client, 'admin:admin-secret')}"}
    assert client.get("/v1/namespaces/sales/tables/salaries", headers=admin).status_code == 200


# -- path parameters a JAX-RS backing strips ------------------------------------------------------


class MatrixStrippingBacking(FoldingBacking):
    """A backing that binds path parameters as JAX-RS servers (Jersey, RESTEasy: Polaris,
    Gravitino, Nessie) do: a segment's matrix parameters (``;k=v``) are not part of its value."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        raw = request.url.raw_path.decode("ascii").split("?")[0]
        stripped = "/".join(segment.split(";")[0] for segment in raw.split("/"))
        return super().__call__(httpx.Request(request.method, f"http://backing.test{stripped}"))


@pytest.fixture()
def matrix(tmp_path: Path) -> Iterator[Folded]:
    yield from folding_world(tmp_path, MatrixStrippingBacking())


def test_a_matrix_parameter_never_smuggles_a_denied_table_to_the_backing(
        matrix: tuple[TestClient, dict[str, str], FoldingBacking]) -> None:
    client, analyst, backing = matrix
    answer = client.get("/v1/namespaces/sales/tables/salaries;v=1", headers=analyst)
    assert answer.status_code in (400, 403, 404)
    assert not any(path.lower().endswith("/salaries") for path in backing.paths)


# -- listing page tokens across policy generations ----------------------------------------------

LIST_POLICY = """\
p, admin, *, *, allow
p, analyst, icegov, BROWSE, allow
p, analyst, icegov.r4, BROWSE, allow
p, analyst, icegov.r4.*, READ, allow
"""


@pytest.fixture()
def reloadable(tmp_path: Path) -> Iterator[tuple[TestClient, Path]]:
    policy = tmp_path / "policy.csv"
    policy.write_text(LIST_POLICY)
    settings = settings_for_tests(tmp_path, policy={"policy_path": policy,
                                                    "reload_interval_seconds": 0.01})
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client, policy


def login(client: TestClient, who: str) -> dict[str, str]:
    answer = client.post("/v1/oauth/tokens", data={
        "grant_type": "client_credentials", "client_id": who, "client_secret": f"{who}-secret"})
    return {"authorization": f"Bearer {answer.json()['access_token']}"}


def table_names(client: TestClient, who: dict[str, str], **params: Any) -> dict[str, Any]:
    answer = client.get("/v1/namespaces/r4/tables", params=params, headers=who)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_a_page_token_from_before_a_reload_never_shows_what_the_reload_hid(
        reloadable: tuple[TestClient, Path]) -> None:
    client, policy = reloadable
    admin, analyst = login(client, "admin"), login(client, "analyst")
    client.post("/v1/namespaces", json={"namespace": ["r4"]}, headers=admin)
    for name in ("a", "b", "c", "d"):
        created = client.post("/v1/namespaces/r4/tables", headers=admin, json={
            "name": name, "schema": {"type": "struct", "schema-id": 0, "fields": [
                {"id": 1, "name": "id", "type": "long", "required": False}]}})
        assert created.status_code == 200, created.text
    first = table_names(client, analyst, pageSize=1)
    assert [t["name"] for t in first["identifiers"]] == ["a"]
    token = first["next-page-token"]
    with policy.open("a") as rules:
        rules.write("p, analyst, icegov.r4.b, *, deny\np, analyst, icegov.r4.c, *, deny\n")
    wait_for(lambda: client.get("/v1/namespaces/r4/tables/b", headers=analyst).status_code
             == 404, what="the policy reload")
    rest = table_names(client, analyst, pageSize=5, pageToken=token)
    assert [t["name"] for t in rest["identifiers"]] == ["d"]
    assert not rest.get("next-page-token")


# -- table properties that drive snapshot expiry --------------------------------------------------

RETENTION_PROPERTIES = {"history.expire.max-snapshot-age-ms": "1",
                        "history.expire.min-snapshots-to-keep": "1",
                        "history.expire.max-ref-age-ms": "1"}


@pytest.fixture()
def crafter(tmp_path: Path) -> Crafter:
    return Crafter.with_two_appends(tmp_path)


def test_shortening_a_refs_retention_needs_manage_snapshots(crafter: Crafter) -> None:
    head = crafter.table.metadata.current_snapshot_id
    intent = crafter.classify({"requirements": [], "updates": [{
        "action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": head,
        "max-snapshot-age-ms": 1}]})
    assert Action.MANAGE_SNAPSHOTS in intent.actions


def test_shortening_the_tables_retention_needs_manage_snapshots(crafter: Crafter) -> None:
    intent = crafter.classify({"requirements": [], "updates": [{
        "action": "set-properties", "updates": RETENTION_PROPERTIES}]})
    assert Action.MANAGE_SNAPSHOTS in intent.actions


# -- a page token's presence past the per-answer budget ------------------------------------------


def first_page(names: list[str], tmp_path: Path) -> dict[str, Any]:
    tmp_path.mkdir()
    policy = tmp_path / "policy.csv"
    policy.write_text(LIST_POLICY)
    upstream = Upstream(PagingBacking(names), config={"defaults": {}, "overrides": {},
                                                      "endpoints": ALL_ENDPOINTS})
    with client_for(upstream, tmp_path, policy={"policy_path": policy}) as client:
        analyst = {"authorization": f"Bearer {icegov_token(client, ANALYST)}"}
        answer = client.get("/v1/namespaces", params={"pageSize": 1}, headers=analyst)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_a_token_after_a_long_hidden_run_does_not_tell_that_hidden_entries_follow(
        tmp_path: Path) -> None:
    hidden = [f"h{n:05d}" for n in range(49_999)]
    alone = first_page([*hidden, "r4"], tmp_path / "alone")
    followed = first_page([*hidden, "r4", "zz_hidden"], tmp_path / "followed")
    assert alone["namespaces"] == followed["namespaces"] == [["r4"]]
    assert bool(alone.get("next-page-token")) == bool(followed.get("next-page-token"))
