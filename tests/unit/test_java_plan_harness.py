"""The Java plan harness reads scan-planning responses as Iceberg's Java REST client does.

Hand-written responses in the REST spec's shape go through ``tests/support/java_plans.py``
(Iceberg 1.10.2's own parsers, with the client's ``specsById``/``caseSensitive`` context). The
wire-form cases pin what that Java accepts and rejects, which is what icegov's planning
responses must satisfy; skipped only where no JDK is installed.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from tests.support.java_plans import (
    HarnessError,
    JavaParseError,
    PlanJob,
    java_parse,
    java_parse_many,
    java_tools_available,
    metadata_json,
)

pytestmark = pytest.mark.skipif(
    not java_tools_available(), reason="the Java plan harness needs `java` and `javac` (JDK 17)"
)

LOCATION = "file:///warehouse/db/events"
DATA_PATH = f"{LOCATION}/data/region=eu/f1.parquet"
POS_DELETE_PATH = f"{LOCATION}/data/region=eu/d1.parquet"
EQ_DELETE_PATH = f"{LOCATION}/data/region=eu/e1.parquet"
DV_PATH = f"{LOCATION}/data/region=eu/dv1.puffin"
ID_EQ_5 = {"type": "eq", "term": "id", "value": 5}
Response = dict[str, Any]


@pytest.fixture(scope="module")
def metadata() -> dict[str, Any]:
    """Real table metadata: id long (field 1), name (2), region (3); spec 0 = identity(region),
    partition field 1000."""
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "name", StringType(), required=False),
        NestedField(3, "region", StringType(), required=False),
    )
    spec = PartitionSpec(PartitionField(3, 1000, IdentityTransform(), "region"))
    as_json = metadata_json(new_table_metadata(schema, spec, UNSORTED_SORT_ORDER, LOCATION))
    assert as_json["partition-specs"][0]["fields"][0]["field-id"] == 1000
    return as_json


def content_file(content: str, path: str, **extra: Any) -> dict[str, Any]:
    """A ContentFile in the REST spec's shape, in spec 0's partition region=eu."""
    return {"spec-id": 0, "content": content, "file-path": path, "file-format": "PARQUET",
            "partition": {"1000": "eu"}, "file-size-in-bytes": 4096, "record-count": 3, **extra}


def long_hex(value: int) -> str:
    """A long's single-value binary form (8 bytes little-endian) as the spec's hex string."""
    return value.to_bytes(8, "little", signed=True).hex().upper()


def completed_plan() -> Response:
    """A data file with hex bounds on id 1..3, a position delete (by index 0) and an equality
    delete on id (by index 1), and a residual id == 5."""
    data = content_file("DATA", DATA_PATH,
                        **{"lower-bounds": {"keys": [1], "values": [long_hex(1)]},
                           "upper-bounds": {"keys": [1], "values": [long_hex(3)]}})
    position = content_file("POSITION_DELETES", POS_DELETE_PATH,
                            **{"record-count": 1, "referenced-data-file": DATA_PATH})
    equality = content_file("EQUALITY_DELETES", EQ_DELETE_PATH,
                            **{"record-count": 2, "equality-ids": [1]})
    return {
        "status": "completed",
        "plan-id": "plan-1",
        "delete-files": [position, equality],
        "file-scan-tasks": [
            {"data-file": data, "delete-file-references": [0, 1], "residual-filter": ID_EQ_5}
        ],
    }


def test_a_completed_plan_reads_as_the_java_client_reads_it(metadata: dict[str, Any]) -> None:
    summary = java_parse("plan", completed_plan(), metadata)

    assert (summary["status"], summary["plan-id"], summary["plan-tasks"]) == (
        "completed", "plan-1", None)
    [task] = summary["file-scan-tasks"]
    data = task["data-file"]
    assert (data["path"], data["content"], data["format"], data["spec-id"]) == (
        DATA_PATH, "DATA", "PARQUET", 0)
    assert data["partition"] == ["eu"]
    assert (data["record-count"], data["file-size-in-bytes"]) == (3, 4096)
    assert (data["lower-bounds"], data["upper-bounds"]) == ({"1": "1"}, {"1": "3"})
    assert task["residual"] == 'ref(name="id") == 5'

    position, equality = task["deletes"]
    assert (position["path"], position["content"]) == (POS_DELETE_PATH, "POSITION_DELETES")
    assert position["referenced-data-file"] == DATA_PATH
    assert position["equality-ids"] is None
    assert (equality["path"], equality["content"]) == (EQ_DELETE_PATH, "EQUALITY_DELETES")
    assert (equality["equality-ids"], equality["record-count"]) == ([1], 2)
    assert [f["path"] for f in summary["delete-files"]] == [POS_DELETE_PATH, EQ_DELETE_PATH]


def test_a_deletion_vector_keeps_its_blob_offset_and_size(metadata: dict[str, Any]) -> None:
    response = completed_plan()
    response["delete-files"][0] = content_file(
        "POSITION_DELETES", DV_PATH, **{"file-format": "puffin", "record-count": 1,
                                        "referenced-data-file": DATA_PATH,
                                        "content-offset": 4, "content-size-in-bytes": 40})

    [task] = java_parse("plan", response, metadata)["file-scan-tasks"]

    dv = task["deletes"][0]
    assert (dv["path"], dv["format"], dv["referenced-data-file"]) == (DV_PATH, "PUFFIN", DATA_PATH)
    assert (dv["content-offset"], dv["content-size-in-bytes"]) == (4, 40)


def test_an_out_of_range_delete_reference_is_rejected(metadata: dict[str, Any]) -> None:
    response = completed_plan()
    response["file-scan-tasks"][0]["delete-file-references"] = [0, 2]

    with pytest.raises(JavaParseError) as failure:
        java_parse("plan", response, metadata)

    assert failure.value.stage == "parse"
    assert failure.value.java_class == "java.lang.IllegalArgumentException"
    assert "Invalid delete file references: [0, 2], expected indices < 2" in str(failure.value)


def test_delete_files_without_file_scan_tasks_are_rejected(metadata: dict[str, Any]) -> None:
    response = completed_plan()
    del response["file-scan-tasks"]

    with pytest.raises(JavaParseError) as failure:
        java_parse("plan", response, metadata)

    assert failure.value.stage == "parse"
    assert "deleteFiles should only be returned with fileScanTasks" in failure.value.java_message


def test_an_unknown_kind_is_a_harness_error_not_a_java_verdict(metadata: dict[str, Any]) -> None:
    with pytest.raises(HarnessError, match="unknown kind"):
        java_parse("scan", completed_plan(), metadata)


@dataclass(frozen=True)
class WireCase:
    """A variation of a response and what Iceberg 1.10.2's client parsing makes of it:
    ``accepted`` checks the summary; otherwise ``stage``/``message`` describe the failure."""

    name: str
    kind: str
    response: Callable[[], Response]
    accepted: Callable[[dict[str, Any]], bool] | None = None
    stage: str = ""
    message: str = ""
    case_sensitive: bool = True


def changed(change: Callable[[Response], object], base: Callable[[], Response] = completed_plan
            ) -> Callable[[], Response]:
    def build() -> Response:
        response = copy.deepcopy(base())
        change(response)
        return response
    return build


def data_file(response: Response) -> dict[str, Any]:
    file: dict[str, Any] = response["file-scan-tasks"][0]["data-file"]
    return file


def first_task(summary: dict[str, Any]) -> dict[str, Any]:
    task: dict[str, Any] = summary["file-scan-tasks"][0]
    return task


WIRE_CASES = [
    # File content: Java 1.10 reads FileContent.valueOf(...): only the enum names. (1.11 reads
    # the spec's "data"/"position-deletes"/"equality-deletes" and still the enum names.)
    WireCase("content 'data' as the spec spells it", "plan",
             changed(lambda r: data_file(r).update({"content": "data"})),
             stage="parse", message="No enum constant org.apache.iceberg.FileContent.data"),
    WireCase("content 'equality-deletes' as the spec spells it", "plan",
             changed(lambda r: r["delete-files"][1].update({"content": "equality-deletes"})),
             stage="parse", message="FileContent.equality-deletes"),
    WireCase("content as Java enum names", "plan", completed_plan,
             accepted=lambda s: first_task(s)["data-file"]["content"] == "DATA"),
    # File format: FileFormat.fromString ignores case.
    WireCase("file-format lowercase", "plan",
             changed(lambda r: data_file(r).update({"file-format": "parquet"})),
             accepted=lambda s: first_task(s)["data-file"]["format"] == "PARQUET"),
    WireCase("file-format unknown", "plan",
             changed(lambda r: data_file(r).update({"file-format": "csv"})),
             stage="parse", message="Invalid file format: csv"),
    # Partition: 1.10 reads a struct keyed by partition field id. (1.11 also reads the
    # spec's array form.) A key that is not a field id is silently dropped.
    WireCase("partition as the spec's array", "plan",
             changed(lambda r: data_file(r).update({"partition": ["eu"]})),
             stage="parse", message='value: ["eu"]'),
    WireCase("partition keyed by field name is read as null", "plan",
             changed(lambda r: data_file(r).update({"partition": {"region": "eu"}})),
             accepted=lambda s: first_task(s)["data-file"]["partition"] == [None]),
    WireCase("partition spec id the table lacks", "plan",
             changed(lambda r: data_file(r).update({"spec-id": 7})),
             stage="parse", message="Invalid partition specId: 7"),
    # Bounds: the spec's {"keys", "values"} with hex values (either case); not a plain map.
    WireCase("bounds with lowercase hex", "plan",
             changed(lambda r: data_file(r).update(
                 {"lower-bounds": {"keys": [1], "values": [long_hex(2).lower()]}})),
             accepted=lambda s: first_task(s)["data-file"]["lower-bounds"] == {"1": "2"}),
    WireCase("bounds as a plain map", "plan",
             changed(lambda r: data_file(r).update({"lower-bounds": {"1": long_hex(1)}})),
             stage="parse", message="map<int, binary>"),
    # Content must match the list a file sits in.
    WireCase("a delete file in a task's data-file", "plan",
             changed(lambda r: data_file(r).update({"content": "POSITION_DELETES"})),
             stage="parse", message="cannot be cast"),
    WireCase("a negative delete reference", "plan",
             changed(lambda r: r["file-scan-tasks"][0].update({"delete-file-references": [-1]})),
             stage="parse", message="Index -1 out of bounds"),
    # Residuals: bound to the schema with the scan's case sensitivity when the task is used;
    # a partitioned task without a residual fails there (the client needs one).
    WireCase("residual naming a column in another case", "plan",
             changed(lambda r: r["file-scan-tasks"][0].update(
                 {"residual-filter": {"type": "eq", "term": "ID", "value": 5}})),
             stage="use", message="Cannot find field 'ID'"),
    WireCase("the same residual in a case-insensitive scan", "plan",
             changed(lambda r: r["file-scan-tasks"][0].update(
                 {"residual-filter": {"type": "eq", "term": "ID", "value": 5}})),
             accepted=lambda s: first_task(s)["residual"] == 'ref(name="ID") == 5',
             case_sensitive=False),
    WireCase("residual on the partition column folds to true", "plan",
             changed(lambda r: r["file-scan-tasks"][0].update(
                 {"residual-filter": {"type": "eq", "term": "region", "value": "eu"}})),
             accepted=lambda s: first_task(s)["residual"] == "true"),
    WireCase("no residual in a partitioned task", "plan",
             changed(lambda r: r["file-scan-tasks"][0].pop("residual-filter")),
             stage="use", message="NullPointerException"),
    # Statuses (case-insensitive) and what each allows.
    WireCase("status in upper case", "plan", changed(lambda r: r.update({"status": "COMPLETED"})),
             accepted=lambda s: s["status"] == "completed"),
    WireCase("tasks with status submitted", "plan",
             changed(lambda r: r.update({"status": "submitted"})),
             stage="parse", message="tasks can only be defined when status is 'completed'"),
    WireCase("plan submitted", "plan", lambda: {"status": "submitted", "plan-id": "p2"},
             accepted=lambda s: (s["status"], s["plan-id"]) == ("submitted", "p2")),
    WireCase("plan cancelled", "plan", lambda: {"status": "cancelled"},
             stage="parse", message="'cancelled' is not a valid status for planTableScan"),
    WireCase("plan completed with plan tasks only", "plan",
             lambda: {"status": "completed", "plan-id": "p3", "plan-tasks": ["t1", "t2"]},
             accepted=lambda s: s["plan-tasks"] == ["t1", "t2"] and s["file-scan-tasks"] is None),
    WireCase("fetch submitted", "fetch", lambda: {"status": "submitted"},
             accepted=lambda s: s["status"] == "submitted"),
    WireCase("fetch completed", "fetch", changed(lambda r: r.pop("plan-id")),
             accepted=lambda s: s["status"] == "completed" and len(s["file-scan-tasks"]) == 1),
    WireCase("tasks of a plan task", "tasks",
             changed(lambda r: (r.pop("plan-id"), r.pop("status"))),
             accepted=lambda s: s["status"] is None
             and len(first_task(s)["deletes"]) == 2),
]


@pytest.fixture(scope="module")
def wire_outcomes(metadata: dict[str, Any]) -> dict[str, dict[str, Any] | JavaParseError]:
    """Every wire case parsed in one JVM."""
    jobs = [PlanJob(case.kind, case.response(), metadata, case.case_sensitive)
            for case in WIRE_CASES]
    return {case.name: outcome for case, outcome in zip(WIRE_CASES, java_parse_many(jobs),
                                                         strict=True)}


@pytest.mark.parametrize("case", WIRE_CASES, ids=[case.name for case in WIRE_CASES])
def test_what_java_accepts_on_the_wire(
    case: WireCase, wire_outcomes: dict[str, dict[str, Any] | JavaParseError]
) -> None:
    outcome = wire_outcomes[case.name]
    if case.accepted is not None:
        assert not isinstance(outcome, JavaParseError), f"Java rejected it: {outcome}"
        assert case.accepted(outcome), json.dumps(outcome, indent=1)
    else:
        assert isinstance(outcome, JavaParseError), "Java accepted it"
        assert outcome.stage == case.stage, str(outcome)
        assert case.message in str(outcome)
