"""Attacks on the planning building blocks that need no running proxy (issue 8 review).

Every attack here is met today (refused or made harmless) and is a plain test (the findings once
pinned as strict xfails were fixed and un-marked).
"""

from __future__ import annotations

import asyncio
import time

import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType, StructType

from proxy.errors import BadRequest
from proxy.planning.request import parse_scan_request
from proxy.planning.scope import visible
from proxy.planning.tokens import TaskClaims, seal, unseal
from proxy.plans.jobs import MAX_JOBS, PlanJobs
from proxy.reads.scan_access import NoSuchColumn, refuse_unseen
from proxy.resources import Resource
from proxy.restrictions import ReadView

KEY = b"k" * 32
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "ssn", StringType(), required=False),
    NestedField(3, "a.b", StringType(), required=False),
)
STRUCT = Schema(NestedField(4, "a", StructType(NestedField(5, "b", StringType(),
                                                           required=False)), required=False))


def _view(*denied: str) -> ReadView:
    return ReadView(Resource("icegov", ("demo",), "t"), denied=frozenset(denied))


def _refuse(names: list[str], schema: Schema, view: ReadView, case_sensitive: bool) -> None:
    refuse_unseen([("select", names)], visible(schema, view.hidden(False)),
                  case_sensitive=case_sensitive)


def _claims(scan: dict[str, object]) -> TaskClaims:
    return TaskClaims(kind="plan", principal="p", roles=(), catalog="icegov",
                      namespace=("demo",), table="t", table_uuid="u", snapshot_id=1,
                      policy_generation=1, expires_at=time.time() + 60, scan=scan)


@pytest.mark.parametrize(("name", "case_sensitive"), [
    ("ssn", True), ("SSN", False), ("sSn", False), ("a.b", True), ("A.B", False),
])
def test_hidden_names_are_refused_in_every_spelling(name: str, case_sensitive: bool) -> None:
    with pytest.raises(NoSuchColumn, match="no column"):
        _refuse([name], SCHEMA, _view("ssn", "a.b"), case_sensitive)


def test_a_struct_hidden_as_a_whole_hides_its_nested_fields() -> None:
    with pytest.raises(NoSuchColumn, match="no column"):
        _refuse(["a.b"], STRUCT, _view("a"), True)


def test_filters_name_the_columns_of_weakened_predicates() -> None:
    """A transform or function over a hidden column is weakened away, yet still named."""
    for term in ({"type": "transform", "transform": "bucket[8]", "term": "ssn"},
                 {"type": "apply", "function": "f",
                  "arguments": [{"type": "reference", "name": "ssn"}]}):
        body = {"filter": {"type": "not", "child": {"type": "eq", "left": term, "right": 1}}}
        assert "ssn" in parse_scan_request(body).filter_columns


def test_forged_claims_never_unseal() -> None:
    token = seal(_claims({"select": ["id"]}), KEY)
    with pytest.raises(BadRequest):
        unseal(token, b"x" * 32, time.time(), kind="plan")
    with pytest.raises(BadRequest):
        unseal(token, KEY, time.time(), kind="task")


def test_every_token_icegov_seals_it_can_unseal() -> None:
    values = [f"{n:08d}-{n * 7919 % 1_000_003:08d}" for n in range(9_000)]
    scan = parse_scan_request({"filter": {"type": "in", "term": "s", "values": values}})
    token = seal(_claims(scan.to_json()), KEY)
    assert unseal(token, KEY, time.time(), kind="plan").scan == scan.to_json()


def test_unpolled_finished_jobs_do_not_block_later_preparations() -> None:
    async def scenario() -> bool:
        jobs = PlanJobs()
        ran = asyncio.Event()

        async def nothing() -> None:
            return None

        async def mark() -> None:
            ran.set()

        for number in range(MAX_JOBS):
            jobs.start(f"plan-{number}", nothing())
        await asyncio.sleep(0)  # one loop turn: they all finish; nobody polls them
        jobs.start("late", mark())
        await asyncio.sleep(0)
        return ran.is_set()

    assert asyncio.run(scenario())
