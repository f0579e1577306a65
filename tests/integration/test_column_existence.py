"""A column hidden from a principal answers exactly as a column the table does not have, on both
backing catalogs (icegov's embedded one and Iceberg's reference one): in every form a plan
filter takes, in ``select`` and ``stats-fields``, in plans answered with plan tasks and in
``submitted`` ones (submission, poll and every task fetch), and in a data operation's filter.

A test-local copy of the demo policy denies ``ssn`` of every ``demo`` table to ``analyst`` and
to ``deleter`` (who may DELETE). Planning runs with one manifest per shard: ``two_files`` is
answered with two plan tasks, ``three_files`` (above ``submit_above_files``) ``submitted``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from typing import Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from tests.conftest import RunningProxy, proxy_for
from tests.support.http import as_principal
from tests.support.settings import ADMIN, POLICIES

ANALYST = "analyst:analyst-secret"
DELETER = "deleter:deleter-secret"
MISSING = "nope"
SSNS = ["111-22-3333", "222-33-4444", "333-44-5555"]
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False),
                NestedField(2, "name", StringType(), required=False),
                NestedField(3, "ssn", StringType(), required=False))
TABLES = {"two_files": 2, "three_files": 3}  # tasks, submitted


def _ref(name: str) -> dict[str, Any]:
    return {"type": "reference", "name": name}


FORMS: dict[str, Any] = {
    "select": lambda c: {"select": ["id", c]},
    "stats-fields": lambda c: {"stats-fields": [c]},
    "eq": lambda c: {"filter": {"type": "eq", "term": c, "value": SSNS[0]}},
    "transform": lambda c: {"filter": {"type": "eq", "term": {
        "type": "transform", "transform": "bucket[4]", "term": c}, "value": 1}},
    "newer-form": lambda c: {"filter": {"type": "lt", "left": _ref(c), "right": "2"}},
    "column-to-column": lambda c: {"filter": {"type": "eq", "left": _ref(c),
                                              "right": _ref("name")}},
    "function": lambda c: {"filter": {"type": "eq", "left": {
        "type": "apply", "function": "length", "arguments": [_ref(c)]}, "right": 11}},
    "under-not": lambda c: {"filter": {"type": "not", "child": {"type": "is-null", "term": c}}},
    "case-insensitive": lambda c: {"case-sensitive": False,
                                   "filter": {"type": "starts-with", "term": c.upper(),
                                              "value": "1"}},
    "unknown-type": lambda c: {"filter": {"type": "frobnicate", "term": c}},
}


@pytest.fixture(scope="module")
def proxy(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningProxy]:
    workdir = tmp_path_factory.mktemp(f"existence-{backend}")
    policies = workdir / "policies"
    shutil.copytree(POLICIES, policies)
    with (policies / "policy.csv").open("a") as rules:
        rules.write("p, analyst, icegov.demo.*.ssn, SELECT, deny\n"
                    "p, deleter, icegov.demo.*.ssn, SELECT, deny\n")
    policy = {"model_path": policies / "model.conf", "policy_path": policies / "policy.csv"}
    planning = {"shard_files": 1, "submit_above_files": 2}
    with proxy_for(backend, workdir, policy=policy, planning=planning) as running:
        admin = RestCatalog("admin", uri=running.url, credential=ADMIN)
        admin.create_namespace_if_not_exists("demo")
        for name, files in TABLES.items():
            if admin.table_exists(f"demo.{name}"):
                admin.drop_table(f"demo.{name}")
            table = admin.create_table(f"demo.{name}", SCHEMA)
            for i in range(files):  # one file (and manifest) per append
                table.append(pa.table({"id": pa.array([i], pa.int64()), "name": [f"n{i}"],
                                       "ssn": [SSNS[i]]}))
        yield running


def exchange(client: httpx.Client, table: str, body: Any) -> list[tuple[str, int, Any]]:
    """Every step of a plan's exchange as a client walks it (submit, poll, fetch each task)."""
    path = f"/v1/namespaces/demo/tables/{table}"
    answer = client.post(f"{path}/plan", json=body)
    steps = [("plan", *_said(answer))]
    if answer.status_code == 200 and answer.json().get("status") == "submitted":
        answer = client.get(f"{path}/plan/{answer.json()['plan-id']}")
        steps.append(("poll", *_said(answer)))
    if answer.status_code == 200:
        for task in answer.json().get("plan-tasks", []):
            steps.append(("task", *_said(client.post(f"{path}/tasks",
                                                     json={"plan-task": task}))))
    return steps


def _said(answer: httpx.Response) -> tuple[int, Any]:
    body = answer.json()
    if answer.status_code != 200:
        return answer.status_code, body
    files = sorted(t["data-file"]["file-path"] for t in body.get("file-scan-tasks", []))
    return 200, (body.get("status"), len(body.get("plan-tasks", [])), files)


def _swapped(said: Any, written: str, instead: str) -> str:
    text = json.dumps(said)
    for spell in (str.upper, str.lower):
        text = text.replace(spell(written), spell(instead))
    return text


@pytest.mark.parametrize("table", list(TABLES))
@pytest.mark.parametrize("form", list(FORMS))
def test_a_plan_naming_a_hidden_column_answers_as_for_a_missing_one(
        proxy: RunningProxy, table: str, form: str) -> None:
    with as_principal(proxy.url, ANALYST) as analyst:
        named_hidden = exchange(analyst, table, FORMS[form]("ssn"))
        named_missing = exchange(analyst, table, FORMS[form](MISSING))
    assert _swapped(named_hidden, "ssn", MISSING) == json.dumps(named_missing), (
        named_hidden, named_missing)
    assert named_hidden[0][0] == "plan"
    assert not any(ssn in json.dumps(named_hidden) for ssn in SSNS)


@pytest.mark.parametrize(("table", "steps"), [("two_files", ["plan", "task", "task"]),
                                              ("three_files", ["plan", "poll", *["task"] * 3])])
def test_a_readable_column_walks_every_step(proxy: RunningProxy, table: str,
                                            steps: list[str]) -> None:
    """The control: naming a readable column, the exchanges above reach the poll and the task
    fetches (so a refusal deferred to them would show)."""
    with as_principal(proxy.url, ANALYST) as analyst:
        walked = exchange(analyst, table, FORMS["transform"]("name"))
    assert [step for step, _, _ in walked] == steps
    assert all(status == 200 for _, status, _ in walked), walked


@pytest.mark.parametrize("row_filter", [
    {"type": "eq", "term": "COLUMN", "value": SSNS[0]},
    {"type": "and", "left": {"type": "gt", "term": "COLUMN", "value": "1"},
     "right": {"type": "not", "child": {"type": "is-null", "term": "COLUMN"}}},
], ids=["eq", "and-not"])
def test_a_delete_by_filter_on_a_hidden_column_answers_as_on_a_missing_one(
        proxy: RunningProxy, row_filter: dict[str, Any]) -> None:
    admin = RestCatalog("admin", uri=proxy.url, credential=ADMIN)
    before = admin.load_table("demo.two_files")
    answers = {}
    with as_principal(proxy.url, DELETER) as deleter:
        for column in ("ssn", MISSING):
            answer = deleter.post("/v1/namespaces/demo/tables/two_files", json={
                "requirements": [], "updates": [{"action": "delete-files", "row-filter":
                                                 json.loads(json.dumps(row_filter).replace(
                                                     "COLUMN", column))}]})
            answers[column] = (answer.status_code, answer.json())
    assert _swapped(answers["ssn"], "ssn", MISSING) == json.dumps(answers[MISSING]), answers
    assert answers["ssn"][0] == 400
    after = admin.load_table("demo.two_files")
    assert after.metadata.snapshots == before.metadata.snapshots  # nothing landed
    assert sorted(after.scan().to_arrow().column("ssn").to_pylist()) == SSNS[:2]


def test_a_case_insensitive_delete_filter_binds_the_readable_twin_only(
        proxy: RunningProxy) -> None:
    """``Ssn`` without case names the readable ``SSN`` for ``deleter``, exactly as if the
    hidden ``ssn`` did not exist: the file whose ``SSN`` matches goes, not the one whose
    hidden ``ssn`` does."""
    admin = RestCatalog("admin", uri=proxy.url, credential=ADMIN)
    if admin.table_exists("demo.twins"):
        admin.drop_table("demo.twins")
    twins = admin.create_table("demo.twins", Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "SSN", StringType(), required=False),
        NestedField(3, "ssn", StringType(), required=False)))
    for i, (readable, hidden) in enumerate((("a", "b"), ("b", "a"))):
        twins.append(pa.table({"id": pa.array([i], pa.int64()), "SSN": [readable],
                               "ssn": [hidden]}))
    with as_principal(proxy.url, DELETER) as deleter:
        answer = deleter.post("/v1/namespaces/demo/tables/twins", json={
            "requirements": [], "updates": [{
                "action": "delete-files", "case-sensitive": False,
                "row-filter": {"type": "eq", "term": "Ssn", "value": "a"}}]})
    assert answer.status_code == 200, answer.text
    left = admin.load_table("demo.twins").scan().to_arrow().to_pylist()
    assert left == [{"id": 1, "SSN": "b", "ssn": "a"}]
