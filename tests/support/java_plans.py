"""Parse scan-planning responses with Apache Iceberg's own Java parsers (test-only).

``tests/java_compat/PlanResponses.java`` reads a response exactly as Iceberg's Java REST client
does (its REST ObjectMapper, with a ParserContext carrying the table's ``specsById`` and the
scan's ``caseSensitive``) and prints what Iceberg understood, normalized::

    summary = java_parse("plan", response, metadata)     # metadata: table metadata JSON (dict)
    summary["file-scan-tasks"][0]["data-file"]["partition"]  # ['eu']
    summary["file-scan-tasks"][0]["residual"]               # 'ref(name="id") == 5'

A response Java gives up on raises :class:`JavaParseError` with the Java exception's class and
message and the stage it failed at. :func:`java_parse_many` parses many jobs in one JVM (a JVM
start costs about a second).

The summary (all keys always present): ``kind``, ``status`` (``"completed"``... or None for
``tasks``), ``plan-id``, ``plan-tasks`` (list or None), ``delete-files`` and
``file-scan-tasks`` (lists or None). A task is ``{"data-file", "deletes", "residual",
"spec-id"}``; a file is ``{"path", "content"`` (Java's enum name: DATA, POSITION_DELETES,
EQUALITY_DELETES), ``"format"`` (PARQUET...), ``"spec-id", "partition"`` (values as strings, in
spec order), ``"record-count", "file-size-in-bytes", "lower-bounds", "upper-bounds"`` (field id
-> value decoded with the table's current schema, or None), ``"equality-ids"}``, and for delete
files also ``"referenced-data-file", "content-offset", "content-size-in-bytes"``.

The Java source is compiled once per content hash into the system temp directory (never into
the repository) and reused by later calls and later test sessions. The Iceberg runtime jar is
``tests.support.jars.iceberg_runtime_jar()`` (1.10.2) unless ``ICEGOV_ICEBERG_RUNTIME_JAR``
names another one (e.g. a 1.11 runtime, to compare what newer clients accept).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.jars import iceberg_runtime_jar, spark_jars_dir

SOURCE = Path(__file__).resolve().parents[1] / "java_compat" / "PlanResponses.java"
MAIN_CLASS = "javacompat.PlanResponses"
JAR_OVERRIDE_ENV = "ICEGOV_ICEBERG_RUNTIME_JAR"
KINDS = ("plan", "fetch", "tasks")
RUN_TIMEOUT_S = 120.0
JDK_HINT = "needs a Java 17 JDK (`java` and `javac`): apt-get install openjdk-17-jdk-headless"


class HarnessError(RuntimeError):
    """The harness itself failed (no JDK, javac error, misuse): Iceberg never judged the input."""


class JavaParseError(Exception):
    """Iceberg's Java code gave up on a response. ``stage`` says when: ``"parse"`` (the REST
    client's deserializer rejected it: the request itself fails), ``"use"`` (it parsed, but
    reading a task -- e.g. its residual -- failed, as it would when the engine touches it) or
    ``"metadata"`` (the table metadata given to the harness was rejected)."""

    def __init__(self, stage: str, java_class: str, java_message: str) -> None:
        super().__init__(f"[{stage}] {java_class}: {java_message}")
        self.stage = stage
        self.java_class = java_class
        self.java_message = java_message


@dataclass(frozen=True)
class PlanJob:
    """One response to parse: ``kind`` is 'plan' (PlanTableScanResponse), 'fetch'
    (FetchPlanningResultResponse) or 'tasks' (FetchScanTasksResponse)."""

    kind: str
    response: Mapping[str, Any]
    metadata: Mapping[str, Any]
    case_sensitive: bool = True

    def as_json(self) -> dict[str, Any]:
        if self.kind not in KINDS:
            raise HarnessError(f"unknown kind {self.kind!r}: expected one of {KINDS}")
        return {
            "kind": self.kind,
            "response": self.response,
            "metadata": self.metadata,
            "case-sensitive": self.case_sensitive,
        }


def _tool(name: str) -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / name
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which(name)


def java_tools_available() -> bool:
    """True when both `java` and `javac` can be found (tests skip otherwise)."""
    return _tool("java") is not None and _tool("javac") is not None


def _require(name: str) -> str:
    path = _tool(name)
    if path is None:
        raise HarnessError(f"`{name}` not found: the Java plan harness {JDK_HINT}")
    return path


def runtime_jar() -> Path:
    """The Iceberg runtime jar whose parsers judge the responses."""
    override = os.environ.get(JAR_OVERRIDE_ENV)
    jar = Path(override) if override else iceberg_runtime_jar()
    if not jar.is_file():
        raise HarnessError(f"Iceberg runtime jar not found: {jar}")
    return jar


def _classpath(classes: Path | None = None) -> str:
    # pyspark's jars bring Hadoop, which Iceberg 1.10's ParserContext.Builder uses.
    parts = [str(runtime_jar()), str(spark_jars_dir() / "*")]
    if classes is not None:
        parts.insert(0, str(classes))
    return os.pathsep.join(parts)


def _build_key(javac: str) -> str:
    version = subprocess.run([javac, "-version"], capture_output=True, text=True, check=False)
    jar = runtime_jar()
    digest = hashlib.sha256()
    for part in (str(jar), str(jar.stat().st_size), version.stdout + version.stderr):
        digest.update(part.encode())
    digest.update(SOURCE.read_bytes())
    return digest.hexdigest()[:16]


@functools.cache
def compiled_classes() -> Path:
    """Compile PlanResponses.java if this source/jar/javac was never compiled; return the
    directory holding its classes (cached for the process and, on disk, across sessions)."""
    javac = _require("javac")
    root = Path(tempfile.gettempdir()) / "icegov-java-compat"
    target = root / _build_key(javac)
    if (target / ".complete").is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="compile-", dir=root))
    try:
        command = [javac, "--release", "17", "-Xlint:all,-path", "-encoding", "UTF-8",
                   "-cp", _classpath(), "-d", str(staging), str(SOURCE)]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise HarnessError(f"javac failed on {SOURCE.name}:\n{result.stdout}{result.stderr}")
        (staging / ".complete").write_text("ok\n")
        try:
            staging.rename(target)
        except OSError:
            if not (target / ".complete").is_file():  # else a parallel worker won the race
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _run_java(args: list[str], stdin: str) -> subprocess.CompletedProcess[str]:
    command = [_require("java"), "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               "-cp", _classpath(compiled_classes()), MAIN_CLASS, *args]
    try:
        return subprocess.run(command, input=stdin, capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise HarnessError(f"the Java plan harness ran over {RUN_TIMEOUT_S:.0f}s") from exc


def _java_error(stderr: str) -> JavaParseError:
    # Anything the JVM logged comes first; the message after "ERROR " may span lines.
    marker = stderr.find("ERROR ")
    if marker >= 0 and (marker == 0 or stderr[marker - 1] == "\n"):
        stage, _, rest = stderr[marker + len("ERROR "):].rstrip("\n").partition(" ")
        java_class, _, message = rest.partition(": ")
        return JavaParseError(stage, java_class, message)
    raise HarnessError(f"the Java plan harness failed:\n{stderr[-4000:]}")


def metadata_json(metadata: Any) -> dict[str, Any]:
    """A pyiceberg ``TableMetadata`` (e.g. ``table.metadata``) as the JSON dict the harness
    takes: exactly what pyiceberg writes to a metadata file."""
    as_json: dict[str, Any] = json.loads(metadata.model_dump_json())
    return as_json


def java_parse(kind: str, response: Mapping[str, Any], metadata: Mapping[str, Any], *,
               case_sensitive: bool = True) -> dict[str, Any]:
    """Parse ``response`` as Iceberg's Java REST client would for a table with ``metadata``;
    return the normalized summary, or raise :class:`JavaParseError` if Java rejects it."""
    job = PlanJob(kind, response, metadata, case_sensitive)
    result = _run_java([], json.dumps(job.as_json()))
    if result.returncode == 0:
        summary: dict[str, Any] = json.loads(result.stdout)
        return summary
    if result.returncode == 1:
        raise _java_error(result.stderr)
    raise HarnessError(f"the Java plan harness failed (exit {result.returncode}):\n"
                       f"{result.stderr[-4000:]}")


def java_parse_many(jobs: Sequence[PlanJob]) -> list[dict[str, Any] | JavaParseError]:
    """Parse many responses in one JVM: per job, its summary or the JavaParseError."""
    result = _run_java(["--batch"], json.dumps([job.as_json() for job in jobs]))
    if result.returncode != 0:
        raise HarnessError(f"the Java plan harness failed (exit {result.returncode}):\n"
                           f"{result.stderr[-4000:]}")
    outcomes: list[dict[str, Any] | JavaParseError] = []
    for item in json.loads(result.stdout):
        if "summary" in item:
            outcomes.append(item["summary"])
        else:
            error = item["error"]
            outcomes.append(JavaParseError(error["stage"], error["class"], error["message"]))
    return outcomes
