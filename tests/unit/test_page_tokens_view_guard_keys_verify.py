"""An attacker's review, round 2 (B): sealed listing page tokens, the loadView guard, keys and
``icegov audit verify``'s new options, against fake backings.

Each test states the behaviour icegov has: every attack here is refused today (the findings once
pinned as strict xfails were fixed and un-marked), so a regression fails its test. Round 1
(``test_ops_attacks.py``) is not repeated.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from pydantic import SecretStr
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.types import LongType, NestedField, StringType
from starlette.testclient import TestClient

from proxy.audit import AuditSettings
from proxy.audit.files import rotated_files
from proxy.cli import main
from proxy.errors import BadRequest
from proxy.gate.page_tokens import PageTokens
from proxy.identity import IdentitySettings
from proxy.keys import PUBLISHED_KEYS
from proxy.planning.settings import PlanningSettings
from proxy.planning.tokens import TaskClaims, seal, unseal
from proxy.policy import PolicySettings
from proxy.settings import Settings
from tests.support.audit import no_icegov_environment, written  # noqa: F401
from tests.support.errors import assert_error_model
from tests.support.settings import POLICIES, TEST_SIGNING_KEY
from tests.support.upstream import Upstream, client_for, icegov_token

pytestmark = pytest.mark.usefixtures("no_icegov_environment")  # no ICEGOV__* of the shell

ANALYST = "analyst:analyst-secret"
Answer = Callable[[httpx.Request], httpx.Response]


def bearer(client: TestClient, credential: str = ANALYST) -> dict[str, str]:
    return {"authorization": f"Bearer {icegov_token(client, credential)}"}


def namespaces(entries: list[list[str]], following: Any) -> httpx.Response:
    return httpx.Response(200, json={"namespaces": entries, "next-page-token": following})


# ================================================================ page tokens: findings


def test_a_raw_page_token_never_reaches_the_backing_behind_an_empty_one() -> None:
    upstream = Upstream(lambda _: namespaces([["demo"]], None))
    with client_for(upstream) as client:
        answer = client.get("/v1/namespaces?pageToken=&pageToken=b_secret&pageSize=2",
                            headers=bearer(client))
    reached = [v for r in upstream.seen for v in r.url.params.get_list("pageToken")]
    assert "b_secret" not in reached, reached
    assert answer.status_code == 400


def test_a_sealed_token_does_not_tell_the_length_of_what_it_seals() -> None:
    backing_tokens = iter(["b", "b_very_long_hidden_table_name_of_the_finance_team"])

    def answer(request: httpx.Request) -> httpx.Response:  # a visible entry on every page
        if request.url.params.get("pageToken"):
            return namespaces([["demo"]], None)
        return namespaces([["demo"]], next(backing_tokens))

    upstream = Upstream(answer)
    with client_for(upstream) as client:
        auth = bearer(client)
        short, long = (client.get("/v1/namespaces?pageSize=1", headers=auth).json()[
            "next-page-token"] for _ in range(2))
    assert len(short) == len(long), (len(short), len(long))


def test_a_page_never_comes_short_while_more_follow() -> None:
    pages = {None: ([["demo"], ["secret"]], "p2"), "p2": ([["hr"], ["payroll"]], "p3"),
             "p3": ([["x"]], None)}

    def answer(request: httpx.Request) -> httpx.Response:
        entries, following = pages[request.url.params.get("pageToken")]
        return namespaces(entries, following)

    with client_for(Upstream(answer)) as client:
        page = client.get("/v1/namespaces?pageSize=2", headers=bearer(client)).json()
    assert page["next-page-token"] is None or len(page["namespaces"]) == 2, page


@pytest.mark.parametrize("path", [
    "/v1/cat/namespaces", "/v1/cat/namespaces/demo/tables", "/v1/cat/namespaces/demo/views",
    "/v1/cat/namespaces/demo/views/v",  # loadView of a principal under column rules
    "/v1/cat/namespaces/demo/tables/customers",  # loadTable of a restricted principal
])
def test_a_backing_server_error_behind_an_owned_endpoint_reveals_nothing(path: str) -> None:
    failure = httpx.Response(500, json={"error": {
        "message": "fromIndex = -5 at s3://internal-bucket/warehouse", "type":
        "IndexOutOfBoundsException", "code": 500}})
    with client_for(Upstream(lambda _: failure)) as client:
        answer = client.get(path, headers=bearer(client))
    assert_error_model(answer, 502)
    assert "internal-bucket" not in answer.text and "IndexOutOfBounds" not in answer.text


# ================================================================ page tokens: refused


def listing_backing() -> Upstream:
    def answer(request: httpx.Request) -> httpx.Response:
        following = None if request.url.params.get("pageToken") else "backing-token"
        key = "namespaces" if request.url.path.endswith("/namespaces") else "identifiers"
        entries: list[Any] = [["demo"]] if key == "namespaces" else [
            {"namespace": ["demo"], "name": "orders"}]
        return httpx.Response(200, json={key: entries, "next-page-token": following})
    return Upstream(answer)


def test_a_token_opens_only_for_its_listing_kind_namespace_and_prefix() -> None:
    upstream = listing_backing()
    with client_for(upstream) as client:
        auth = bearer(client)
        tables = client.get("/v1/cat/namespaces/demo/tables?pageSize=1", headers=auth)
        sealed = tables.json()["next-page-token"]
        seen = len(upstream.seen)
        for path in ("/v1/cat/namespaces/demo/views",  # same namespace, the other kind
                     "/v1/cat/namespaces/demo%1Fsub/tables",  # a nested namespace
                     "/v1/namespaces/demo/tables",  # no prefix
                     "/v1/cat/namespaces?parent=demo"):  # the namespace listing beneath it
            assert_error_model(client.get(path, params={"pageToken": sealed}, headers=auth), 400)
        assert not any("pageToken" in sent.url.params for sent in upstream.seen[seen:])
        again = client.get("/v1/cat/namespaces/demo/tables",
                           params={"pageToken": sealed, "pageSize": "5"}, headers=auth)
        assert again.status_code == 200  # pageSize may change between pages
    assert upstream.seen[-1].url.params["pageToken"] == "backing-token"


def test_a_parent_token_does_not_open_for_another_parent() -> None:
    upstream = listing_backing()
    with client_for(upstream) as client:
        auth = bearer(client, "admin:admin-secret")  # sees every namespace: 400, never 404
        sealed = client.get("/v1/namespaces?parent=demo&pageSize=1",
                            headers=auth).json()["next-page-token"]
        for other in ("demo%1Fx", "demox", "Demo", "demo%20"):
            assert_error_model(client.get(f"/v1/namespaces?parent={other}&pageToken={sealed}",
                                          headers=auth), 400)
        assert client.get(f"/v1/namespaces?parent=%64emo&pageToken={sealed}",
                          headers=auth).status_code == 200  # the same parent, spelled otherwise


@pytest.mark.parametrize("token", [
    "icg1.", "icg1.A", "icg1." + "A" * 15, "icg1.====", "icg1.%FF%FE", "icg1.\u00e9\u00e9\u00e9",
    "ICG1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "icg1." + "A" * 4092, "icg1." + "_" * 40,
    "icg1.AAAA.BBBB", "\x00", "icg1.%00AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
])
def test_forged_truncated_and_odd_tokens_are_400_never_forwarded(token: str) -> None:
    upstream = listing_backing()
    with client_for(upstream) as client:
        answer = client.get("/v1/namespaces", params={"pageToken": token},
                            headers=bearer(client))
    assert_error_model(answer, 400)
    assert upstream.seen == []


def test_a_token_edited_anywhere_does_not_open() -> None:
    upstream = listing_backing()
    with client_for(upstream) as client:
        auth = bearer(client)
        sealed = client.get("/v1/namespaces?pageSize=1", headers=auth).json()["next-page-token"]
        body = sealed[len("icg1."):]
        for at in range(0, len(body), 7):
            flipped = body[:at] + ("B" if body[at] != "B" else "C") + body[at + 1:]
            assert client.get("/v1/namespaces", params={"pageToken": "icg1." + flipped},
                              headers=auth).status_code == 400
        assert len(upstream.seen) == 2  # the listing and its look-ahead; no edited token


@pytest.mark.parametrize(("backing", "sent_back"), [(123, "123"), ("a b/c?d&e=f", "a b/c?d&e=f")])
def test_a_backing_token_comes_back_to_the_backing_as_the_backing_wrote_it(
        backing: Any, sent_back: str) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return namespaces([["demo"]], None if request.url.params.get("pageToken") else backing)

    upstream = Upstream(answer)
    with client_for(upstream) as client:
        auth = bearer(client)
        sealed = client.get("/v1/namespaces", headers=auth).json()["next-page-token"]
        assert sealed.startswith("icg1.") and str(backing) not in sealed
        assert client.get("/v1/namespaces", params={"pageToken": sealed},
                          headers=auth).status_code == 200
    assert upstream.seen[-1].url.params.get_list("pageToken") == [sent_back]


# ================================================================ keys


def claims() -> TaskClaims:
    return TaskClaims(kind="task", principal="analyst", roles=("analyst",), catalog="icegov",
                      namespace=("demo",), table="t", table_uuid="u", snapshot_id=None,
                      policy_generation=1, expires_at=2e9)


def test_page_tokens_and_plan_tasks_under_one_key_never_stand_in_for_each_other() -> None:
    key = b"k" * 48
    pages = PageTokens(key)
    task = seal(claims(), key)
    page = pages.seal("backing-token", "binding")
    with pytest.raises(BadRequest):
        pages.open(task, "binding")
    with pytest.raises(BadRequest):
        pages.open("icg1." + task.split(".")[1], "binding")
    with pytest.raises(BadRequest):
        unseal(page, key, 0.0)
    with pytest.raises(BadRequest):
        PageTokens(b"j" * 48).open(page, "binding")


@pytest.mark.parametrize("variant", [" {}", "{}\n", "\t{} ", "{}\r\n"])
def test_published_keys_with_whitespace_around_are_refused(variant: str) -> None:
    for published in PUBLISHED_KEYS:
        with pytest.raises(ValueError):
            PlanningSettings(task_key=SecretStr(variant.format(published)))
        with pytest.raises(ValueError):
            IdentitySettings(signing_key=SecretStr(variant.format(published)))


def settings_with_keys(tmp: Path, signing: str, task: str, audit: str) -> Settings:
    return Settings(
        warehouse=tmp / "warehouse",
        identity=IdentitySettings(principals_file=POLICIES / "principals.yaml",
                                  signing_key=SecretStr(signing)),
        policy=PolicySettings(model_path=POLICIES / "model.conf",
                              policy_path=POLICIES / "policy.csv"),
        planning=PlanningSettings(task_key=SecretStr(task)),
        audit=AuditSettings(stdout=False, file=tmp / "audit.log", hmac_key=SecretStr(audit)))


def test_a_short_audit_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="audit hmac_key"):
        settings_with_keys(tmp_path, TEST_SIGNING_KEY, "t" * 40, "short-audit-key")


def test_the_audit_key_may_not_also_sign_tokens_or_plan_tasks(tmp_path: Path) -> None:
    shared = "one-key-for-everything-0123456789abcdef-xyz"
    with pytest.raises(ValueError):
        settings_with_keys(tmp_path, shared, "t" * 40, shared)
    with pytest.raises(ValueError):
        settings_with_keys(tmp_path, TEST_SIGNING_KEY, shared, shared)


# ================================================================ loadView guard


def table_answer(tmp: Path, *columns: str) -> dict[str, Any]:
    fields = [NestedField(i + 1, name, LongType() if name == "id" else StringType(),
                          required=False) for i, name in enumerate(columns)]
    metadata = new_table_metadata(Schema(*fields), UNPARTITIONED_PARTITION_SPEC,
                                  UNSORTED_SORT_ORDER, str(tmp / "t"), {},
                                  table_uuid=uuid.UUID(int=7))
    return {"metadata-location": str(tmp / "t" / "metadata" / "v1.json"),
            "metadata": json.loads(metadata.model_dump_json()), "config": {}}


def view_answer(sql: str, fields: list[str], properties: dict[str, str] | None = None,
                docs: dict[str, str] | None = None) -> dict[str, Any]:
    schema = [{"id": n + 1, "name": name, "type": "string", "required": False,
               **({"doc": docs[name]} if docs and name in docs else {})}
              for n, name in enumerate(fields)]
    return {"metadata-location": "file:///w/demo/v/metadata/v1.json", "config": {},
            "metadata": {
                "view-uuid": str(uuid.UUID(int=9)), "format-version": 1,
                "location": "file:///w/demo/v", "current-version-id": 1,
                "properties": properties or {},
                "schemas": [{"type": "struct", "schema-id": 0, "fields": schema}],
                "versions": [{"version-id": 1, "timestamp-ms": 0, "schema-id": 0, "summary": {},
                              "default-namespace": ["demo"], "representations": [
                                  {"type": "sql", "sql": sql, "dialect": "spark"}]}],
                "version-log": [{"version-id": 1, "timestamp-ms": 0}]}}


class ViewWorld:
    """A fake backing serving table ``demo.customers`` (``id``, ``ssn``, ``email``) and one view,
    in front of a proxy with the demo policy and ``extra_policy`` lines."""

    def __init__(self, tmp: Path, extra_policy: str = "", **settings: Any) -> None:
        self.view = view_answer("SELECT id FROM demo.customers", ["id"])
        table = table_answer(tmp, "id", "ssn", "email")

        def answer(request: httpx.Request) -> httpx.Response:
            if request.method == "HEAD":
                return httpx.Response(204)
            if "/views/" in request.url.path:
                return httpx.Response(200, json=self.view)
            return httpx.Response(200, json=table)

        policy = tmp / "policy.csv"
        policy.write_text((POLICIES / "policy.csv").read_text() + "\n" + extra_policy)
        self.upstream = Upstream(answer)
        self.client = client_for(self.upstream, tmp, policy={"policy_path": policy}, **settings)

    def __enter__(self) -> ViewWorld:
        self.client.__enter__()
        self.analyst = bearer(self.client)
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.__exit__(*exc)

    def load(self, view: dict[str, Any], headers: dict[str, str] | None = None
             ) -> httpx.Response:
        self.view = view
        loaded: httpx.Response = self.client.get("/v1/cat/namespaces/demo/views/v",
                                                 headers={**self.analyst, **(headers or {})})
        return loaded


@pytest.mark.parametrize("sql", [
    "SELECT id FROM demo.customers /* ssn */",
    "SELECT id, `SSN` AS x FROM demo.customers",
    "SELECT id, customers.`ssn` FROM demo.customers",
    "SELECT id FROM demo.customers WHERE\nSsN\tIS NOT NULL",
    "select id from (select id, ssn from demo.customers) q",
])
def test_views_naming_a_denied_column_in_any_spelling_are_refused(tmp_path: Path,
                                                                 sql: str) -> None:
    with ViewWorld(tmp_path) as world:
        refused = world.load(view_answer(sql, ["id", "x"]))
    assert_error_model(refused, 403)
    assert "ssn" not in refused.text.lower()


def test_head_on_a_refused_view_tells_nothing_more_than_it_exists(tmp_path: Path) -> None:
    with ViewWorld(tmp_path) as world:
        world.view = view_answer("SELECT ssn FROM demo.customers", ["ssn"])
        assert world.load(world.view).status_code == 403
        head = world.client.head("/v1/cat/namespaces/demo/views/v", headers=world.analyst)
    assert head.status_code == 204 and head.content == b""


def test_an_unrestricted_reader_loads_the_view_unchanged(tmp_path: Path) -> None:
    with ViewWorld(tmp_path) as world:
        eu = bearer(world.client, "eu-analyst:eu-analyst-secret")
        world.view = view_answer("SELECT id, ssn FROM demo.customers", ["id", "ssn"])
        loaded = world.client.get("/v1/cat/namespaces/demo/views/v", headers=eu)
    assert loaded.status_code == 200 and loaded.json() == world.view


SPARK_ALIASED_STAR = view_answer(  # what Spark writes for CREATE VIEW v (a, b, c) AS SELECT *
    "SELECT * FROM demo.customers", ["a", "b", "c"],
    properties={"spark.query-column-names": "id,ssn,email",
                "create_engine_version": "Spark 3.5.1"})


def test_a_spark_view_over_star_with_aliases_does_not_name_a_denied_column(
        tmp_path: Path) -> None:
    with ViewWorld(tmp_path) as world:
        loaded = world.load(SPARK_ALIASED_STAR)
    assert "ssn" not in loaded.text


def test_a_wildcard_column_deny_keeps_its_columns_out_of_views(tmp_path: Path) -> None:
    rule = "p, analyst, icegov.demo.customers.*, SELECT, deny\n"
    with ViewWorld(tmp_path, rule) as world:
        table = world.client.get("/v1/cat/namespaces/demo/tables/customers",
                                 headers=world.analyst)
        assert table.status_code == 200
        assert table.json()["metadata"]["schemas"][0]["fields"] == []
        loaded = world.load(view_answer("SELECT id FROM demo.customers", ["id"]))
    assert loaded.status_code == 403, loaded.text  # the column id, which loadTable hid


def test_a_replace_view_answer_does_not_name_what_load_view_refuses(tmp_path: Path) -> None:
    rule = "p, analyst, icegov.demo.v, ALTER, allow\n"
    with ViewWorld(tmp_path, rule) as world:
        world.view = view_answer("SELECT id, ssn FROM demo.customers", ["id", "x"])
        assert world.load(world.view).status_code == 403
        replaced = world.client.post("/v1/cat/namespaces/demo/views/v", headers=world.analyst,
                                     json={"requirements": [], "updates": []})
    assert "ssn" not in replaced.text, replaced.status_code


def test_a_mask_capable_client_loads_a_view_naming_a_column_it_sees_masked(
        tmp_path: Path) -> None:
    capable = {"x-client-version": "spark-masks 1.0"}
    with ViewWorld(tmp_path, planning=PlanningSettings(
            mask_capable_clients=("spark-masks",),
            mask_capable_principals=("analyst",))) as world:
        table = world.client.get("/v1/cat/namespaces/demo/tables/customers",
                                 headers={**world.analyst, **capable})
        fields = [f["name"] for f in table.json()["metadata"]["schemas"][0]["fields"]]
        assert "email" in fields and "ssn" not in fields
        loaded = world.load(view_answer("SELECT id, email FROM demo.customers",
                                        ["id", "email"]), capable)
    assert loaded.status_code == 200, loaded.text


def a_version(sql: str) -> dict[str, Any]:
    return {"version-id": 2, "timestamp-ms": 1, "schema-id": 0, "summary": {},
            "default-namespace": ["demo"],
            "representations": [{"type": "sql", "sql": sql, "dialect": "spark"}]}


def a_schema(*names: str) -> dict[str, Any]:
    return {"type": "struct", "schema-id": 0, "fields": [
        {"id": n + 1, "name": name, "type": "string", "required": False}
        for n, name in enumerate(names)]}


def test_a_view_property_key_naming_a_hidden_column_is_refused(tmp_path: Path) -> None:
    with ViewWorld(tmp_path) as world:
        refused = world.load(view_answer("SELECT id FROM demo.customers", ["id"],
                                         properties={"comment.ssn": "x"}))
    assert_error_model(refused, 403)


def test_creating_a_view_that_names_a_hidden_column_sends_nothing(tmp_path: Path) -> None:
    rule = "p, analyst, icegov.demo.w, CREATE_TABLE, allow\n"
    with ViewWorld(tmp_path, rule) as world:
        before = len(world.upstream.seen)
        created = world.client.post("/v1/cat/namespaces/demo/views", headers=world.analyst, json={
            "name": "w", "schema": a_schema("id"),
            "view-version": a_version("SELECT id FROM demo.customers WHERE ssn > 0"),
            "properties": {}})
        assert_error_model(created, 403)
        assert not [r for r in world.upstream.seen[before:] if r.method == "POST"]


@pytest.mark.parametrize("update", [
    {"action": "add-view-version", "view-version": a_version("SELECT ssn FROM demo.customers")},
    {"action": "add-schema", "schema": a_schema("id", "ssn")},
    {"action": "set-properties", "updates": {"spark.query-column-names": "id,ssn"}},
])
def test_a_replace_that_adds_a_hidden_name_sends_nothing(tmp_path: Path,
                                                          update: dict[str, Any]) -> None:
    rule = "p, analyst, icegov.demo.v, ALTER, allow\n"
    with ViewWorld(tmp_path, rule) as world:
        before = len(world.upstream.seen)
        replaced = world.client.post("/v1/cat/namespaces/demo/views/v", headers=world.analyst,
                                     json={"requirements": [], "updates": [update]})
        assert_error_model(replaced, 403)
        assert not [r for r in world.upstream.seen[before:] if r.method == "POST"]


def test_a_replace_of_a_view_naming_nothing_hidden_is_answered(tmp_path: Path) -> None:
    rule = "p, analyst, icegov.demo.v, ALTER, allow\n"
    with ViewWorld(tmp_path, rule) as world:
        replaced = world.client.post("/v1/cat/namespaces/demo/views/v", headers=world.analyst,
                                     json={"requirements": [], "updates": [
                                         {"action": "set-properties", "updates": {"k": "v"}}]})
        assert replaced.status_code == 200, replaced.text
        assert replaced.json()["metadata"]["versions"][0]["representations"][0]["sql"] == (
            "SELECT id FROM demo.customers")
        assert [r.method for r in world.upstream.seen[-2:]] == ["GET", "POST"]


# ================================================================ audit verify


def verify_cli(*args: str) -> Any:
    return CliRunner().invoke(main, ["audit", "verify", *args])


def last_link(log: Path) -> str:
    record = json.loads(log.read_bytes().splitlines()[-1])
    return f"{record['seq']}:{record['hash']}"


def test_a_crlf_copy_of_the_stream_is_named_not_passed(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 3)
    log.write_bytes(log.read_bytes().replace(b"\n", b"\r\n"))
    result = verify_cli(str(log))
    assert result.exit_code == 1 and f"{log}:1:" in result.output, result.output


def test_a_byte_order_mark_before_the_first_record_is_named(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 3)
    log.write_bytes(b"\xef\xbb\xbf" + log.read_bytes())
    result = verify_cli(str(log))
    assert result.exit_code == 1 and f"{log}:1:" in result.output, result.output


def test_an_anchor_in_a_deleted_rotated_file_fails_the_check(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 16, rotate_bytes=1600)
    chain = [*rotated_files(log), log]
    anchor = last_link(chain[0])
    chain[0].unlink()
    result = verify_cli("--anchor", anchor, *map(str, chain[1:]))
    assert result.exit_code == 1 and "earlier files" in result.output, result.output
    assert verify_cli(*map(str, chain[1:])).exit_code == 0  # without the anchor: begins later


def test_expect_last_on_an_emptied_live_file_fails(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 3)
    end = last_link(log)
    log.write_bytes(b"")
    result = verify_cli("--expect-last", end, str(log))
    assert result.exit_code == 1 and "cut" in result.output, result.output


def test_require_hmac_fails_a_plain_chain_and_passes_a_keyed_one(tmp_path: Path) -> None:
    plain = written(tmp_path / "plain.log", 2)
    keyed = written(tmp_path / "keyed.log", 2, hmac_key="k" * 40)
    assert verify_cli("--require-hmac", str(plain)).exit_code == 1
    assert verify_cli("--require-hmac", "--key", "k" * 40, str(keyed)).exit_code == 0
    assert verify_cli("--require-hmac", str(keyed)).exit_code == 2  # the key is needed


@pytest.mark.parametrize("anchor", ["0:" + "a" * 64, "1:" + "a" * 63, "1:" + "g" * 64, "x", "",
                                    "-1:" + "a" * 64, "1:" + "a" * 64 + ":2"])
def test_a_malformed_anchor_exits_2_before_reading(tmp_path: Path, anchor: str) -> None:
    log = written(tmp_path / "audit.log", 1)
    assert verify_cli("--anchor", anchor, str(log)).exit_code == 2
    assert verify_cli("--expect-last", anchor, str(log)).exit_code == 2


def test_an_anchor_with_the_wrong_hash_or_a_later_end_fails(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 3)
    seq, good = last_link(log).split(":")
    assert verify_cli("--anchor", f"{seq}:{'0' * 64}", str(log)).exit_code == 1
    assert verify_cli("--anchor", f"{seq}:{good.upper()}", str(log)).exit_code == 0
    first = json.loads(log.read_bytes().splitlines()[0])
    assert verify_cli("--expect-last", f"1:{first['hash']}", str(log)).exit_code == 1
