"""icegov's real plan answers, parsed by Iceberg's own Java parsers from the runtime jar.

The jar on this machine is Iceberg 1.10.2. Its parsers predate two spellings the REST spec (and
Java 1.11, and pyiceberg 0.12) use and icegov emits: lowercase ``content`` and ``partition`` as
an array. ``for_1_10`` rewrites exactly those two fields into 1.10's spelling (uppercase enum
names, an object keyed by partition field id) and nothing else, so everything else icegov writes
— bounds in Iceberg's binary form, delete files and their references, deletion-vector fields,
equality ids, residual filters, plan tasks — is checked by Java's own code.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pyiceberg.catalog.rest import RestCatalog

from tests.support.http import as_principal
from tests.support.java_plans import (
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


def for_1_10(answer: dict[str, Any], metadata: dict[str, Any]) -> dict[str, Any]:
    """``answer`` with ``content`` and ``partition`` in Iceberg 1.10.2's spelling."""
    fields_by_spec = {spec["spec-id"]: [f["field-id"] for f in spec["fields"]]
                      for spec in metadata["partition-specs"]}
    translated = copy.deepcopy(answer)

    def respell(content_file: dict[str, Any]) -> None:
        content_file["content"] = content_file["content"].upper().replace("-", "_")
        ids = fields_by_spec[content_file["spec-id"]]
        values = content_file.get("partition", [])
        content_file["partition"] = {str(i): v for i, v in zip(ids, values, strict=True)}

    for delete_file in translated.get("delete-files", []):
        respell(delete_file)
    for task in translated.get("file-scan-tasks", []):
        respell(task["data-file"])
    return translated


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
                jobs.append(PlanJob("plan" if "status" in answer else "tasks",
                                    for_1_10(answer, metadata), metadata))
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
