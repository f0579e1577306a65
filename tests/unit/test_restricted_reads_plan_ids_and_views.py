"""Attacker's review, round 7 (unit): what a restricted principal reads through planning, plan
ids, the catalog config, loadTable and loadView.

Principals are the demo policy's: ``analyst`` (``demo.customers.ssn`` denied, ``email`` masked),
``eu-analyst`` (rows of ``demo.orders`` filtered to ``region = 'eu'``), ``writer`` (no column
or row rule anywhere). Tables are real (pyiceberg ``SqlCatalog`` in ``tmp_path``) behind a fake
backing that serves their metadata, as in round 6.

Every finding of the round is fixed; its test now asserts the fix. Attacks that were refused
from the start keep their passing tests, so that a regression shows."""

from __future__ import annotations

import base64
import copy
import json
import zlib
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest

from tests.support.audit import no_icegov_environment  # noqa: F401
from tests.support.errors import assert_error_model
from tests.support.upstream import ALL_ENDPOINTS, Upstream, client_for
from tests.unit.test_page_tokens_view_guard_keys_verify import (
    ViewWorld,
    bearer,
    table_answer,
    view_answer,
)
from tests.unit.test_restricted_planning_config_and_views import (
    ANALYST,
    CUSTOMERS,
    ID_SSN,
    WRITER,
    customers,
    id_ssn_row,
    plan,
    proxy_serving,
    renamed,
)

pytestmark = pytest.mark.usefixtures("no_icegov_environment")

ORDERS = "/v1/cat/namespaces/demo/tables/orders"


def token_claims(token: str) -> bytes:
    """What anyone holding a plan id or plan task reads in it without any key: the token is
    ``1.<base64url(zlib(JSON claims))>.<mac>``."""
    body = token.split(".")[1]
    return zlib.decompress(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))


# == 1. Plan ids and plan tasks are signed, not sealed ============================================

def test_a_plan_id_does_not_name_the_columns_hidden_from_its_holder(tmp_path: Path) -> None:
    """The analyst plans a scan of ``demo.customers`` selecting only ``id`` and base64-decodes
    and inflates the plan id it is handed (no key is needed: the MAC authenticates, nothing
    encrypts). The claims' ``v`` member is the read view's cache key: ``[["ssn", "tax_id"],
    [], null]`` — the denied column under its current and former names (on a table with an
    ``email`` column, also ``["email", "show-last-4", null]``: the masked column, removed
    from every non-masking client's schema, with its mask), although the projected loadTable
    has no such column and a plan naming ``ssn`` is answered exactly like one naming a column
    that does not exist. Plan tasks carry the same claims. Page tokens are AES-GCM sealed;
    plan tokens should be too (or carry a digest of the view key instead of the names)."""
    table = renamed(customers(tmp_path, ID_SSN, id_ssn_row))  # ssn is now called tax_id
    with proxy_serving(tmp_path, table.refresh()) as client:
        answer = plan(client, bearer(client, ANALYST), {"select": ["id"]})
    assert answer.status_code == 200, answer.text
    claims = token_claims(answer.json()["plan-id"])
    for hidden in (b"ssn", b"tax_id", b"email"):
        assert hidden not in claims, claims


# == 2. Plan errors: a hidden column answered before anything else ================================

NO_SNAPSHOT = 999  # no snapshot of the table has this id


@pytest.mark.parametrize("part", ["filter", "stats-fields"])
def test_an_unknown_snapshot_answers_alike_for_hidden_and_missing_columns(
        tmp_path: Path, part: str) -> None:
    """Round 6 made a plan naming ``ssn`` answer like one naming ``no_such_column`` (both 400,
    same wording). Add ``"snapshot-id": 999`` (no such snapshot): the hidden name is still
    refused by the access check that runs first (400), the missing name passes it and the
    planner answers 404 for the snapshot. A principal thus confirms, one guess per request,
    which names the policy hides from it on a table."""
    table = customers(tmp_path, ID_SSN, id_ssn_row)

    def body(name: str) -> dict[str, Any]:
        named = ({"filter": {"type": "eq", "term": name, "value": "x"}} if part == "filter"
                 else {"stats-fields": [name]})
        return {**named, "snapshot-id": NO_SNAPSHOT}

    with proxy_serving(tmp_path, table) as client:
        analyst = bearer(client, ANALYST)
        hidden = plan(client, analyst, body("ssn"))
        missing = plan(client, analyst, body("no_such_column"))
    assert hidden.status_code == missing.status_code, (hidden.text, missing.text)


def test_a_badly_typed_predicate_answers_alike_beside_hidden_and_missing_columns(
        tmp_path: Path) -> None:
    """``id = 'abc'`` (not a long) AND ``<name> = 'x'``: for ``ssn`` icegov's access check
    answers first, naming the column as not found; for ``no_such_column`` pyiceberg binds the
    left predicate first and answers that ``abc`` is not a long. Same status, different
    message: the same one-guess-per-request oracle as with an unknown snapshot."""
    table = customers(tmp_path, ID_SSN, id_ssn_row)

    def message(client: Any, analyst: dict[str, str], name: str) -> tuple[int, str]:
        answer = plan(client, analyst, {"filter": {
            "type": "and", "left": {"type": "eq", "term": "id", "value": "abc"},
            "right": {"type": "eq", "term": name, "value": "x"}}})
        return answer.status_code, answer.text.replace(name, "<name>")

    with proxy_serving(tmp_path, table) as client:
        analyst = bearer(client, ANALYST)
        hidden = message(client, analyst, "ssn")
        missing = message(client, analyst, "no_such_column")
    assert hidden == missing


def test_a_foreign_snapshot_id_says_only_that_it_is_not_this_tables(tmp_path: Path) -> None:
    """A snapshot id of another table (or none at all) is 404 naming only the id sent."""
    table = customers(tmp_path, ID_SSN, id_ssn_row)
    with proxy_serving(tmp_path, table) as client:
        analyst = bearer(client, ANALYST)
        answers = [plan(client, analyst, body) for body in (
            {"snapshot-id": NO_SNAPSHOT},
            {"start-snapshot-id": NO_SNAPSHOT,
             "end-snapshot-id": table.metadata.current_snapshot_id})]
    for answer in answers:
        assert_error_model(answer, 404)


# == 3. The catalog config of a warehouse icegov does not serve ===================================

FINANCE = {"defaults": {"s3.secret-access-key": "FINANCE-SECRET"},
           "overrides": {"prefix": "finance"}, "endpoints": ALL_ENDPOINTS}


def warehouses_backing() -> Upstream:
    """A multi-warehouse backing (Polaris, Lakekeeper): ``GET /v1/config`` answers the
    default warehouse (prefix ``cat``, which icegov serves), ``?warehouse=finance`` another
    one whose config holds a storage secret, anything else 404."""
    default = {"defaults": {}, "overrides": {"prefix": "cat"}, "endpoints": ALL_ENDPOINTS}

    def answer(request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith("/v1/config"):
            return httpx.Response(404, json={"error": {
                "message": "no", "type": "NoSuchTableException", "code": 404}})
        warehouse = parse_qs(request.url.query.decode()).get("warehouse", [None])[0]
        if warehouse is None:
            return httpx.Response(200, json=default)
        if warehouse == "finance":
            return httpx.Response(200, json=FINANCE)
        return httpx.Response(404, json={"error": {
            "message": f"warehouse {warehouse} not found", "type": "NotFoundException",
            "code": 404}})

    return Upstream(answer, config=False)


def test_the_config_of_a_warehouse_icegov_does_not_serve_hands_out_no_secret(
        tmp_path: Path) -> None:
    """The writer asks ``/v1/config?warehouse=finance``. icegov serves only the backing's
    default warehouse (``/v1/finance/...`` is 404 'no such catalog', nothing forwarded), yet
    the config endpoint relays the finance warehouse's config, ``s3.secret-access-key``
    included (the secret filter applies only to principals restricted somewhere): storage
    access to a whole catalog the policy never let the writer reach."""
    with client_for(warehouses_backing(), tmp_path) as client:
        writer = bearer(client, WRITER)
        refused = client.get("/v1/finance/namespaces", headers=writer)
        config = client.get("/v1/config", params={"warehouse": "finance"}, headers=writer)
    assert_error_model(refused, 404)
    assert "FINANCE-SECRET" not in config.text, config.text


def test_the_config_does_not_tell_which_other_warehouses_exist(tmp_path: Path) -> None:
    """Any principal (the analyst here) tells the backing's warehouses apart by the status of
    ``/v1/config?warehouse=<guess>``: 200 for ``finance``, 404 for ``nosuch``, though neither
    is a catalog icegov serves or the principal has any right in."""
    with client_for(warehouses_backing(), tmp_path) as client:
        analyst = bearer(client, ANALYST)
        exists = client.get("/v1/config", params={"warehouse": "finance"}, headers=analyst)
        absent = client.get("/v1/config", params={"warehouse": "nosuch"}, headers=analyst)
    assert exists.status_code == absent.status_code, (exists.text, absent.text)


# == 4. Storage secrets through what is not projected =============================================

WAREHOUSE_SECRET = {"s3.access-key-id": "AKIAWAREHOUSE", "s3.secret-access-key": "WH-SECRET"}


def test_a_restricted_principal_gets_no_warehouse_secret_through_an_unrestricted_table(
        tmp_path: Path) -> None:
    """The backing puts the same static S3 keys (not scoped to any prefix) in its catalog
    ``defaults`` and in every LoadTableResult ``config``. For the analyst, ``GET /v1/config``
    drops them (round 6: it is restricted somewhere), but ``GET …/tables/orders`` — a table
    no rule restricts for it — is forwarded byte for byte, keys included; with them the
    analyst reads ``demo.customers``'s Parquet files, ``ssn`` and all. Keys that are not
    scoped to the table's own location should be withheld from a principal restricted
    anywhere (``GET …/credentials`` of such a table is forwarded the same way)."""
    orders = table_answer(tmp_path, "id", "region")
    orders["config"] = dict(WAREHOUSE_SECRET)
    upstream = Upstream(lambda _: httpx.Response(200, json=orders), config={
        "defaults": dict(WAREHOUSE_SECRET), "overrides": {"prefix": "cat"},
        "endpoints": ALL_ENDPOINTS})
    with client_for(upstream, tmp_path) as client:
        analyst = bearer(client, ANALYST)
        config = client.get("/v1/config", headers=analyst)
        loaded = client.get(ORDERS, headers=analyst)
    assert "WH-SECRET" not in config.text  # round 6's fix holds
    assert loaded.status_code == 200, loaded.text
    assert "WH-SECRET" not in loaded.text, loaded.text


def test_load_view_config_drops_fileio_secrets_for_a_restricted_principal(
        tmp_path: Path) -> None:
    """A LoadViewResult has a ``config`` map like a LoadTableResult's. The analyst loads a
    view naming nothing hidden; the backing's answer carries ``s3.secret-access-key`` in
    ``config``; icegov checks the definition and relays the bytes unchanged, so the secret
    that round 6 took out of loadTable and ``/v1/config`` arrives through the view."""
    with ViewWorld(tmp_path) as world:
        view = view_answer("SELECT id FROM demo.customers", ["id"])
        view["config"] = {"s3.secret-access-key": "VIEW-SECRET", "s3.endpoint": "http://minio"}
        loaded = world.load(view)
    assert loaded.status_code == 200, loaded.text
    assert "VIEW-SECRET" not in loaded.text


# == 5. loadTable projection: a property under the hidden column's other name =====================

def test_properties_naming_a_hidden_column_by_its_other_name_are_cut(tmp_path: Path) -> None:
    """``ssn`` (denied to the analyst) was renamed ``tax_id``; the table keeps
    ``write.metadata.metrics.column.ssn``. The projection drops field 2 from every schema
    (both names are hidden) and the ``….column.tax_id`` property, but builds its list of
    names from the current schema first, so ``….column.ssn`` stays in the analyst's answer:
    the name the policy hides, in a table whose schemas no longer show it."""
    table = table_answer(tmp_path, "id", "ssn", "email")
    metadata = table["metadata"]
    current = copy.deepcopy(metadata["schemas"][0])
    current["schema-id"] = 1
    current["fields"][1]["name"] = "tax_id"
    metadata["schemas"].append(current)
    metadata["current-schema-id"] = 1
    metadata["properties"] = {"write.metadata.metrics.column.ssn": "full",
                              "write.metadata.metrics.column.tax_id": "full"}
    upstream = Upstream(lambda _: httpx.Response(200, json=table))
    with client_for(upstream, tmp_path) as client:
        loaded = client.get(CUSTOMERS, headers=bearer(client, ANALYST))
    assert loaded.status_code == 200, loaded.text
    names = [[f["name"] for f in s["fields"]] for s in loaded.json()["metadata"]["schemas"]]
    # both names of the hidden field are gone from schemas (the masked email is served, masked)
    assert names == [["id", "email"], ["id", "email"]]
    assert not any("ssn" in key or "tax_id" in key
                   for key in loaded.json()["metadata"]["properties"]), loaded.text


def test_a_visible_columns_doc_naming_a_hidden_column_is_not_shown(tmp_path: Path) -> None:
    """``demo.customers`` documents its ``id`` column as ``surrogate key, replaces ssn``. The
    analyst's loadTable drops ``ssn`` from every schema and keeps ``id`` with its doc, so
    the answer names the column the policy hides — the same leak round 6 closed for view
    schemas (``test_a_view_naming_a_denied_column_only_in_its_doc_or_nested_field_is_refused``)."""
    table = table_answer(tmp_path, "id", "ssn", "email")
    table["metadata"]["schemas"][0]["fields"][0]["doc"] = "surrogate key, replaces ssn"
    upstream = Upstream(lambda _: httpx.Response(200, json=table))
    with client_for(upstream, tmp_path) as client:
        loaded = client.get(CUSTOMERS, headers=bearer(client, ANALYST))
    assert loaded.status_code == 200, loaded.text
    fields = loaded.json()["metadata"]["schemas"][0]["fields"]
    assert [f["name"] for f in fields] == ["id", "email"]  # email: served masked
    assert "ssn" not in json.dumps(fields), fields
