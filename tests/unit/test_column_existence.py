"""A column hidden from a principal and a column the table does not have answer alike, wherever
a plan request names one: same status, same message once the written name is swapped, at the
same step of the exchange (plan submission, result poll, or task fetch).

``analyst`` (demo policy) has ``ssn`` of ``demo.customers`` denied and ``email`` masked: the
masked column is served masked in governed snapshots (``proxy.governed``), so it is a column
the analyst sees and only ``ssn`` is hidden. The table is real (pyiceberg ``SqlCatalog``) behind a
fake backing that serves its metadata; three appends make three manifests, so with
``shard_files=1`` a plan is answered with plan tasks, and with ``submit_above_files=1``
``submitted``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField, StringType, StructType
from starlette.testclient import TestClient

from tests.support.audit import no_icegov_environment  # noqa: F401
from tests.unit.test_page_tokens_view_guard_keys_verify import bearer
from tests.unit.test_restricted_planning_config_and_views import (
    CUSTOMERS,
    SSNS,
    customers,
    proxy_serving,
)

pytestmark = pytest.mark.usefixtures("no_icegov_environment")

ANALYST = "analyst:analyst-secret"
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False),
                NestedField(2, "ssn", StringType(), required=False),
                NestedField(3, "email", StringType(), required=False),
                NestedField(4, "name", StructType(
                    NestedField(5, "first", StringType(), required=False)), required=False))
MISSING = "nope"


def _row(i: int, ssn: str) -> dict[str, Any]:
    return {"id": i, "ssn": ssn, "email": f"u{i}@example.org", "name": {"first": f"n{i}"}}


def _eq(name: str, value: Any = "111-22-3333") -> dict[str, Any]:
    return {"type": "eq", "term": name, "value": value}


def _ref(name: str) -> dict[str, Any]:
    return {"type": "reference", "name": name}


FORMS: dict[str, Any] = {
    "select": lambda c: {"select": ["id", c]},
    "select-nested": lambda c: {"select": [f"{c}.first"]},
    "stats-fields": lambda c: {"stats-fields": [c]},
    "eq": lambda c: {"filter": _eq(c)},
    "eq-wrong-literal-type": lambda c: {"filter": _eq(c, 5)},
    "reference-term": lambda c: {"filter": {"type": "eq", "term": {"type": "reference",
                                                                    "term": c}, "value": "x"}},
    "transform": lambda c: {"filter": {"type": "eq", "term": {
        "type": "transform", "transform": "bucket[4]", "term": c}, "value": 1}},
    "identity-transform": lambda c: {"filter": {"type": "eq", "term": {
        "type": "transform", "transform": "identity", "term": c}, "value": "x"}},
    "newer-form": lambda c: {"filter": {"type": "lt", "left": _ref(c), "right": "x"}},
    "newer-form-mirrored": lambda c: {"filter": {"type": "gt", "left": "x", "right": _ref(c)}},
    "column-to-column": lambda c: {"filter": {"type": "eq", "left": _ref(c),
                                              "right": _ref("id")}},
    "function": lambda c: {"filter": {"type": "eq", "left": {
        "type": "apply", "function": "length", "arguments": [_ref(c)]}, "right": 11}},
    "unary-child": lambda c: {"filter": {"type": "not-null", "child": _ref(c)}},
    "set": lambda c: {"filter": {"type": "in", "term": c, "values": ["a", "b"]}},
    "under-or-not-true": lambda c: {"filter": {"type": "or", "left": True, "right": {
        "type": "not", "child": {"type": "is-nan", "term": c}}}},
    "and-with-visible": lambda c: {"filter": {"type": "and", "left": _eq("id", 1),
                                              "right": _eq(c)}},
    "unknown-type": lambda c: {"filter": {"type": "frobnicate", "term": c}},
    "unknown-operand": lambda c: {"filter": {"type": "eq", "left": _ref(c),
                                             "right": {"type": "mystery"}}},
    "case-insensitive": lambda c: {"case-sensitive": False, "filter": _eq(c.upper()),
                                   "select": [c.title()]},
}

STEPS = {"completed": {"shard_files": 20_000},
         "sharded": {"shard_files": 1},
         "submitted": {"shard_files": 1, "submit_above_files": 1}}


def exchange(client: TestClient, headers: dict[str, str], body: Any) -> list[tuple[str, int, Any]]:
    """Every step of a plan's exchange as a client walks it (submit, poll, fetch each task):
    (step, status, what it said — the error, or the data files and statistics keys)."""
    steps: list[tuple[str, int, Any]] = []
    answer = client.post(f"{CUSTOMERS}/plan", json=body, headers=headers)
    steps.append(("plan", *_said(answer)))
    if answer.status_code == 200 and answer.json().get("status") == "submitted":
        plan_id = answer.json()["plan-id"]
        answer = client.get(f"{CUSTOMERS}/plan/{plan_id}", headers=headers)
        steps.append(("poll", *_said(answer)))
    if answer.status_code != 200:
        return steps
    for task in answer.json().get("plan-tasks", []):
        fetched = client.post(f"{CUSTOMERS}/tasks", json={"plan-task": task}, headers=headers)
        steps.append(("task", *_said(fetched)))
    return steps


def _said(answer: httpx.Response) -> tuple[int, Any]:
    body = answer.json()
    if answer.status_code != 200:
        return answer.status_code, body
    files = sorted((t["data-file"]["file-path"],
                    tuple(t["data-file"].get("lower-bounds", {}).get("keys", [])))
                   for t in body.get("file-scan-tasks", []))
    return 200, (body.get("status"), len(body.get("plan-tasks", [])), files)


def _swapped(steps: list[tuple[str, int, Any]], written: str, instead: str) -> str:
    """The steps as JSON with the name written (in any of the spellings the forms use)
    replaced by another."""
    text = json.dumps(steps)
    for spell in (str.upper, str.title, str.lower):
        text = text.replace(spell(written), spell(instead))
    return text


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Table:
    return customers(tmp_path_factory.mktemp("existence"), SCHEMA, _row)


@pytest.mark.parametrize("step", list(STEPS))
@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("hidden", ["ssn"])  # denied (a masked column is served, masked)
def test_a_hidden_column_answers_as_a_missing_one(table: Table, tmp_path: Path, step: str,
                                                  form: str, hidden: str) -> None:
    with proxy_serving(tmp_path, table, planning=STEPS[step]) as client:
        analyst = bearer(client, ANALYST)
        named_hidden = exchange(client, analyst, FORMS[form](hidden))
        named_missing = exchange(client, analyst, FORMS[form](MISSING))
    assert _swapped(named_hidden, hidden, MISSING) == json.dumps(named_missing), (
        named_hidden, named_missing)
    assert not any(ssn in json.dumps(named_hidden) for ssn in SSNS)


@pytest.mark.parametrize("step", list(STEPS))
@pytest.mark.parametrize("scan", ["time-travel", "incremental"])
def test_snapshot_schemas_answer_a_hidden_column_as_a_missing_one(tmp_path: Path, step: str,
                                                                  scan: str) -> None:
    """The hidden column renamed since: its old name, in the old schema a scan binds to with
    ``use-snapshot-schema``, answers as a name no schema ever had."""
    table = customers(tmp_path, SCHEMA, _row)
    with table.update_schema() as update:
        update.rename_column("ssn", "tax_id")
    table = table.refresh()
    first, _, last = (s.snapshot_id for s in table.metadata.snapshots)
    pinned = ({"snapshot-id": first} if scan == "time-travel"
              else {"start-snapshot-id": first, "end-snapshot-id": last})

    def body(column: str) -> dict[str, Any]:
        return {**pinned, "use-snapshot-schema": True, "filter": {"type": "eq", "term": {
            "type": "transform", "transform": "truncate[3]", "term": column}, "value": "111"},
                "stats-fields": ["id", column]}

    with proxy_serving(tmp_path, table, planning=STEPS[step]) as client:
        analyst = bearer(client, ANALYST)
        named_hidden = exchange(client, analyst, body("ssn"))
        named_missing = exchange(client, analyst, body(MISSING))
    assert _swapped(named_hidden, "ssn", MISSING) == json.dumps(named_missing)


TWINS = Schema(NestedField(1, "id", LongType(), required=False),
               NestedField(2, "SSN", StringType(), required=False),  # readable
               NestedField(3, "ssn", StringType(), required=False))  # denied to analyst


def test_a_hidden_twin_is_absent_to_a_case_insensitive_scan(tmp_path: Path) -> None:
    """``Ssn`` without case binds the readable ``SSN`` exactly as if ``ssn`` did not exist:
    the answer equals the case-sensitive one naming ``SSN``."""
    twins = customers(tmp_path, TWINS, lambda i, ssn: {"id": i, "SSN": f"p{i}", "ssn": ssn})
    with proxy_serving(tmp_path, twins, planning=STEPS["sharded"]) as client:
        analyst = bearer(client, ANALYST)
        for value in ("p1", SSNS[0]):
            folded = exchange(client, analyst, {
                "case-sensitive": False, "filter": _eq("Ssn", value), "select": ["sSN"],
                "stats-fields": ["ssn"]})
            exact = exchange(client, analyst, {"filter": _eq("SSN", value), "select": ["SSN"],
                                               "stats-fields": ["SSN"]})
            assert folded == exact, (value, folded, exact)
