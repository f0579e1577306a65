"""icegov's real plan answers, parsed by Iceberg's own Java parsers from the runtime jar.

The jar on this machine is Iceberg 1.10.2. Its parsers predate two spellings the REST spec (and
Java 1.11, and pyiceberg 0.12) use and icegov emits: lowercase ``content`` and ``partition`` as
an array. ``for_1_10`` rewrites exactly those two fields into 1.10's spelling (uppercase enum
names, an object keyed by partition field id) and nothing else (each answer is compared with its
rewrite field by field), so everything else icegov writes — bounds in Iceberg's binary form,
delete files and their references, deletion-vector fields, equality ids, residual filters, plan
tasks — is checked by Java's own code as sent.

The answers are also parsed as icegov sent them: without their content files they parse
unmodified; with them, Java gives up on exactly the two spellings and with 1.10's documented
errors, each one still failing when only the other is rewritten.
"""

from __future__ import annotations

import copy
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pyiceberg.catalog.rest import RestCatalog

from tests.support.http import as_principal
from tests.support.java_plans import (
    JAR_OVERRIDE_ENV,
    JavaParseError,
    PlanJob,
    java_parse_many,
    java_tools_available,
    metadata_json,
)
from tests.support.plan_tables import (
    BuiltTable,
    RawPlanner,
    build_equality_deletes,
    build_events,
    build_position_deletes,
)
from tests.support.settings import ADMIN

pytestmark = pytest.mark.skipif(not java_tools_available(), reason="needs java and javac")


SPELLINGS = frozenset({"content", "partition"})
"""The content-file fields whose spelling Iceberg 1.10.2 reads otherwise than icegov sends."""


def for_1_10(answer: dict[str, Any], metadata: dict[str, Any],
             spellings: frozenset[str] = SPELLINGS) -> dict[str, Any]:
    """``answer`` with ``spellings`` (by default both of ``SPELLINGS``) in Iceberg 1.10.2's
    spelling, in every content file; everything else as icegov sent it."""
    fields_by_spec = {spec["spec-id"]: [f["field-id"] for f in spec["fields"]]
                      for spec in metadata["partition-specs"]}
    translated = copy.deepcopy(answer)

    def respell(content_file: dict[str, Any]) -> None:
        if "content" in spellings:
            content_file["content"] = content_file["content"].upper().replace("-", "_")
        if "partition" in spellings:
            ids = fields_by_spec[content_file["spec-id"]]
            values = content_file.get("partition", [])
            content_file["partition"] = {str(i): v for i, v in zip(ids, values, strict=True)}

    for content_file in content_files(translated):
        respell(content_file)
    return translated


def content_files(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The delete files and the tasks' data files of a plan or tasks answer."""
    return [*answer.get("delete-files", []),
            *(task["data-file"] for task in answer.get("file-scan-tasks", []))]


@pytest.fixture(scope="module")
def planner(proxy_url: str) -> RawPlanner:
    catalog = RestCatalog("java-compat", uri=proxy_url, credential=ADMIN)
    return RawPlanner(catalog, as_principal(proxy_url, ADMIN))


@pytest.fixture(scope="module")
def tables(planner: RawPlanner) -> Iterator[list[BuiltTable]]:
    namespace = f"java_{uuid.uuid4().hex[:8]}"
    planner.catalog.create_namespace(namespace)
    yield [build(planner.catalog, namespace)
           for build in (build_events, build_position_deletes, build_equality_deletes)]
    for identifier in planner.catalog.list_tables(namespace):
        planner.catalog.drop_table(identifier)
    planner.catalog.drop_namespace(namespace)


BODIES: list[dict[str, Any]] = [
    {},
    {"stats-fields": ["id"]},
    {"filter": {"type": "eq", "term": "id", "value": 5}, "select": ["id"]},
]


def test_java_parses_every_plan_icegov_answers(planner: RawPlanner,
                                               tables: list[BuiltTable]) -> None:
    jobs, expected = [], []
    for built in tables:
        table = planner.catalog.load_table(built.identifier)
        metadata = metadata_json(table.metadata)
        for body in BODIES:
            for answer in planner.completed(built.identifier, body).answers:
                rewritten = for_1_10(answer, metadata)
                assert _changed_fields(answer, rewritten) <= SPELLINGS  # all else as sent
                jobs.append(PlanJob("plan" if "status" in answer else "tasks",
                                    rewritten, metadata))
                expected.append(answer)
    parsed = java_parse_many(jobs)
    for answer, summary in zip(expected, parsed, strict=True):
        assert not isinstance(summary, Exception), (summary, answer)
        _same_files(answer, summary)
    tasks = [t for answer in expected for t in answer["file-scan-tasks"]]
    # what Java checked: delete references, bounds (asked for) and residuals were all sent
    assert any(t.get("delete-file-references") for t in tasks)
    assert any(t["data-file"].get("lower-bounds") for t in tasks)
    assert any(t["residual-filter"] is not True for t in tasks)


def _same_files(answer: dict[str, Any], summary: dict[str, Any]) -> None:
    """Java read back the data files, their delete files and the bounds icegov sent."""
    deletes = answer.get("delete-files", [])
    sent = {t["data-file"]["file-path"]: sorted(deletes[i]["file-path"]
                                                for i in t.get("delete-file-references", []))
            for t in answer["file-scan-tasks"]}
    read = {t["data-file"]["path"]: sorted(d["path"] for d in t["deletes"])
            for t in summary["file-scan-tasks"]}
    assert read == sent
    for task, java_task in zip(answer["file-scan-tasks"], summary["file-scan-tasks"],
                               strict=True):
        bounds = task["data-file"].get("lower-bounds", {}).get("keys", [])
        assert sorted(java_task["data-file"].get("lower-bounds") or {}) == sorted(
            str(k) for k in bounds)


FAILS_WITHOUT = {
    "content": "No enum constant org.apache.iceberg.FileContent.",
    "partition": "Cannot parse default as a struct<",
}
"""What Iceberg 1.10.2 says of a content file whose field of ``SPELLINGS`` is as icegov sends it
(it reads ``content`` first)."""


@pytest.mark.skipif(bool(os.environ.get(JAR_OVERRIDE_ENV)),
                    reason="pins what Iceberg 1.10.2 (the default runtime jar) rejects")
def test_java_parses_icegov_answers_as_sent_but_for_two_known_spellings(
        planner: RawPlanner, tables: list[BuiltTable]) -> None:
    """Java parses each answer as icegov sent it, less its content files; with them, it gives
    up on exactly the spellings ``for_1_10`` rewrites: with neither respelled or only
    ``partition`` respelled on ``content``, with only ``content`` respelled on ``partition``
    (with both, ``test_java_parses_every_plan_icegov_answers``, on nothing)."""
    cases: list[tuple[dict[str, Any], str | None]] = []
    jobs: list[PlanJob] = []
    for built in tables:
        metadata = metadata_json(planner.catalog.load_table(built.identifier).metadata)
        for body in BODIES:
            for answer in planner.completed(built.identifier, body).answers:
                kind = "plan" if "status" in answer else "tasks"
                assert content_files(answer), answer  # else it needs no respelling at all
                envelope = {k: v for k, v in answer.items()
                            if k not in ("file-scan-tasks", "delete-files")}
                cases.append((envelope, None))
                jobs.append(PlanJob(kind, envelope, metadata))
                for respelled, fails_on in ((frozenset(), "content"),
                                            (frozenset({"partition"}), "content"),
                                            (frozenset({"content"}), "partition")):
                    cases.append((answer, fails_on))
                    jobs.append(PlanJob(kind, for_1_10(answer, metadata, respelled), metadata))
    for (sent, fails_on), outcome in zip(cases, java_parse_many(jobs), strict=True):
        if fails_on is None:
            assert not isinstance(outcome, Exception), (outcome, sent)
            assert outcome["plan-id"] == sent.get("plan-id")
            assert outcome["plan-tasks"] == sent.get("plan-tasks")
            continue
        assert isinstance(outcome, JavaParseError), (fails_on, outcome)
        assert outcome.stage == "parse", outcome
        assert outcome.java_class == "java.lang.IllegalArgumentException", outcome
        assert outcome.java_message.startswith(FAILS_WITHOUT[fails_on]), (fails_on, outcome)


def _changed_fields(sent: Any, rewritten: Any) -> set[str]:
    """The names of the object fields whose values differ between two JSON documents of the
    same shape (the innermost name on each path; a changed top level is named ``""``)."""
    if isinstance(sent, dict) and isinstance(rewritten, dict) and sent.keys() == rewritten.keys():
        changed: set[str] = set()
        for key, value in sent.items():
            inner = _changed_fields(value, rewritten[key])
            changed |= {key} if inner == {""} else inner
        return changed
    if isinstance(sent, list) and isinstance(rewritten, list) and len(sent) == len(rewritten):
        return set().union(*(_changed_fields(a, b) for a, b in zip(sent, rewritten, strict=True)))
    return set() if sent == rewritten else {""}
