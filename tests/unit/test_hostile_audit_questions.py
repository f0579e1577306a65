"""Hostile audit files given to ``icegov audit query / export-ocsf / verify`` and ``icegov policy
why``: each is answered with a clear error (exit 2) or a correct answer, never a traceback or a
hang. Found by attacking issue 24's surface; each test failed before its fix."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from proxy.cli import main
from tests.support.audit import no_icegov_environment  # noqa: F401
from tests.support.settings import POLICIES
from tests.unit.test_audit_digests import chain_files, write_log
from tests.unit.test_audit_digests import verify as digest_verify

pytestmark = pytest.mark.usefixtures("no_icegov_environment")

FILES = ["--model", str(POLICIES / "model.conf"), "--policy", str(POLICIES / "policy.csv")]
DEEP = b'{"request_id":"r1","principal":"alice","x":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
RECORD = {"request_id": "r1", "time": "2026-01-01T00:00:00.000+00:00", "method": "GET",
          "path": "/v1/config", "endpoint": "config", "decision": "allow"}


def icegov(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def compact(record: dict[str, object]) -> str:
    """A record as icegov writes it (compact JSON)."""
    return json.dumps(record, separators=(",", ":"))


def written(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "audit.log"
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("filters", [[], ["--principal", "alice"], ["--since", "2020-01-01"]])
def test_query_skips_a_line_nested_deeper_than_python_parses(tmp_path: Path,
                                                            filters: list[str]) -> None:
    """Was a RecursionError traceback."""
    path = written(tmp_path, DEEP + b"\n" + json.dumps({**RECORD, "principal": "alice"}).encode())
    result = icegov("audit", "query", str(path), *filters)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["request_id"] == "r1"
    assert "skipped 1 line(s)" in result.stderr


def test_why_skips_a_line_nested_deeper_than_python_parses(tmp_path: Path) -> None:
    """Was a RecursionError traceback (why finds its record with the query)."""
    path = written(tmp_path, DEEP + b"\n")
    result = icegov("policy", "why", *FILES, "r1", "--audit", str(path))
    assert result.exit_code == 2, result.output
    assert "no record with request id 'r1'" in result.output


def test_why_passes_over_a_policy_record_whose_text_is_no_unicode(tmp_path: Path) -> None:
    """A policy record's text holding an unpaired surrogate (``\\ud800``, which no UTF-8 file
    loads to) was a UnicodeEncodeError traceback while the trail was read."""
    policy = {**RECORD, "request_id": "policy-1", "endpoint": "policy_loaded", "evidence": [
        {"policy": {"loaded": {"model_conf": "\ud800", "policy_csv": ""},
                    "digest_after": "0" * 64, "files": []}}]}
    asked = {**RECORD, "principal": "alice", "policy_digest": "0" * 64}
    path = written(tmp_path, (compact(policy) + "\n" + compact(asked) + "\n").encode())
    result = icegov("policy", "why", *FILES, "r1", "--audit", str(path))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 1, result.output  # the files given are not the recorded policy
    assert "MISMATCH" in result.output


@pytest.mark.parametrize("line", [
    b'{"request_id":"r1","path":"\xff\xfe"}',  # not UTF-8
    json.dumps({**RECORD, "status": "200"}).encode(),  # a status that is no number
    json.dumps({**RECORD, "latency_ms": 1e400}).encode(),  # infinity
    json.dumps({**RECORD, "latency_ms": float("nan")}).encode(),
    json.dumps({**RECORD, "status": True}).encode(),
], ids=["not-utf8", "status-text", "latency-infinite", "latency-nan", "status-bool"])
def test_export_names_a_hostile_line_as_no_record(tmp_path: Path, line: bytes) -> None:
    """Were tracebacks (UnicodeDecodeError, TypeError, OverflowError)."""
    path = written(tmp_path, json.dumps(RECORD).encode() + b"\n" + line + b"\n")
    result = icegov("audit", "export-ocsf", str(path), "--out", str(tmp_path / "out"))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 2, result.output
    assert f"{path}:2: not an audit record" in result.output
    assert not list((tmp_path / "out").rglob("*.parquet"))


def _fifo(tmp_path: Path) -> str:
    fifo = tmp_path / "audit.log"
    os.mkfifo(fifo)
    return str(fifo)


def _changed_policies(tmp_path: Path) -> Path:
    """The demo policy with one grant more: analysts may drop tables."""
    changed = tmp_path / "changed"
    changed.mkdir()
    shutil.copy(POLICIES / "model.conf", changed / "model.conf")
    rules = (POLICIES / "policy.csv").read_text(encoding="utf-8")
    (changed / "policy.csv").write_text(rules + "p, analyst, icegov.*, DROP_TABLE, allow\n",
                                        encoding="utf-8")
    return changed


@pytest.mark.parametrize("command", [
    ["audit", "query", "{f}"],
    ["audit", "verify", "{f}"],
    ["audit", "export-ocsf", "{f}", "--out", "{out}"],
    ["policy", "why", *FILES, "r1", "--audit", "{f}"],
    ["audit", "verify", str(POLICIES / "policy.csv"), "--public-key", "{f}"],
    ["policy", "diff", str(POLICIES), "{changed}", "--audit", "{f}"],
], ids=["query", "verify", "export", "why", "public-key", "diff"])
def test_a_fifo_named_as_an_audit_file_is_refused_not_waited_on(tmp_path: Path,
                                                              command: list[str]) -> None:
    """Opening a FIFO for reading waits for a writer: the commands hung forever."""
    fifo = _fifo(tmp_path)
    changed = _changed_policies(tmp_path)
    args = [a.format(f=fifo, out=tmp_path / "out", changed=changed) for a in command]
    done: list[Result] = []
    thread = threading.Thread(target=lambda: done.append(icegov(*args)), daemon=True)
    thread.start()
    thread.join(30)
    if not done:
        with open(fifo, "wb"):  # release the reader, so the thread ends
            pass
        thread.join(30)
        pytest.fail(f"{' '.join(command[:2])} waited on a FIFO")
    assert done[0].exit_code == 2, done[0].output
    assert "not a regular file" in done[0].output


def test_a_fifo_among_the_rotated_siblings_is_refused(tmp_path: Path) -> None:
    """A sibling ``audit.log.<seq>-<time>`` that is a FIFO: read with the live file."""
    live = written(tmp_path, json.dumps(RECORD).encode() + b"\n")
    os.mkfifo(tmp_path / "audit.log.000000000001-20260101T000000Z")
    done: list[Result] = []
    thread = threading.Thread(target=lambda: done.append(icegov(
        "audit", "export-ocsf", str(live), "--out", str(tmp_path / "out"))), daemon=True)
    thread.start()
    thread.join(30)
    if not done:
        with open(tmp_path / "audit.log.000000000001-20260101T000000Z", "wb"):
            pass
        thread.join(30)
        pytest.fail("export-ocsf waited on a rotated FIFO")
    assert done[0].exit_code == 2, done[0].output
    assert "not a regular file" in done[0].output


@pytest.mark.parametrize("where", ["evidence", "rules"])
def test_diff_audit_skips_a_line_nested_deeper_than_python_parses(tmp_path: Path,
                                                                 where: str) -> None:
    """Was a RecursionError traceback: the flipping caller's line holds a deep nest, in the
    rules it decodes or in the rest it decodes only once a decision flips."""
    changed = _changed_policies(tmp_path)
    logged = {"action": "DROP_TABLE", "allowed": False, "resource": "icegov.demo.orders",
              "rule": None}
    record = {**RECORD, "decision": "deny", "principal": "analyst", "roles": ["analyst"],
              "rules": [logged]}
    line = json.dumps(record, separators=(",", ":"), sort_keys=True).encode()
    nest = b"[" * 100_000 + b"]" * 100_000
    hostile = (line.replace(b'"decision"', b'"evidence":' + nest + b',"decision"')
               if where == "evidence" else line.replace(b'"rules":[', b'"rules":[' + nest + b","))
    path = written(tmp_path, hostile + b"\n" + line + b"\n")
    result = icegov("policy", "diff", str(POLICIES), str(changed), "--audit", str(path))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 0, result.output
    assert "logged decisions that flip: 1" in result.output


@pytest.mark.parametrize(("since", "until", "kept"), [
    (None, "2026-01-01T10:00:00.000500", True),  # before a bound inside the next millisecond
    (None, "2026-01-01T10:00:00.000", False),
    ("2026-01-01T10:00:00.000500", None, False),
    ("2026-01-01T09:59:59.999500", None, True),
])
def test_query_times_between_milliseconds_are_kept_as_the_parsed_check_keeps_them(
        tmp_path: Path, since: str | None, until: str | None, kept: bool) -> None:
    """The byte test cut ``--until`` to the millisecond: a record at 10:00:00.000 was dropped
    before 10:00:00.0005 although it is earlier."""
    path = written(tmp_path, compact({**RECORD, "time": "2026-01-01T10:00:00.000+00:00"})
                   .encode() + b"\n")
    bounds = [*(["--since", since] if since else []), *(["--until", until] if until else [])]
    result = icegov("audit", "query", str(path), *bounds)
    assert result.exit_code == 0, result.output
    assert bool(result.stdout.strip()) is kept


@pytest.mark.parametrize("bound", [["--since", "0001-01-01T00:00:00+01:00"],
                                   ["--until", "9999-12-31T23:59:59.999999-01:00"],
                                   ["--until", "9999-12-31T23:59:59.999999"]])
def test_query_bounds_utc_cannot_hold_are_checked_on_the_parsed_records(
        tmp_path: Path, bound: list[str]) -> None:
    """Were OverflowError tracebacks (the bound turned to UTC text for the byte test)."""
    path = written(tmp_path, compact(RECORD).encode() + b"\n")
    result = icegov("audit", "query", str(path), *bound)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["request_id"] == "r1"


@pytest.mark.parametrize("roles", [[1, None], "analyst", {"analyst": 1}])
def test_why_refuses_a_record_whose_roles_are_not_names(tmp_path: Path, roles: object) -> None:
    """Roles [1] were a TypeError traceback; roles "analyst" were replayed as the roles a, n,
    a, l, y, s, t: a replay of a caller no record named."""
    logged = {"action": "SELECT", "resource": "icegov.demo.orders", "allowed": True,
              "rule": None}
    record = {**RECORD, "principal": "alice", "roles": roles, "rules": [logged]}
    path = written(tmp_path, compact(record).encode() + b"\n")
    result = icegov("policy", "why", *FILES, "r1", "--audit", str(path))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 2, result.output
    assert "not a name with a list of role names" in result.output


@pytest.mark.parametrize("writer", ["../../../../elsewhere", "w0\nw1", "w0/", ""])
def test_export_refuses_a_writer_that_is_no_worker_name(tmp_path: Path, writer: str) -> None:
    """The writer names the Parquet file: "../x" was a failed rename named as an unreadable
    file, "w0\\nw1" a file name holding a newline."""
    path = written(tmp_path, compact({**RECORD, "seq": 1, "writer": writer}).encode() + b"\n")
    result = icegov("audit", "export-ocsf", str(path), "--out", str(tmp_path / "out"))
    assert result.exit_code == 2, result.output
    assert f"{path}:1: not an audit record: writer" in result.output
    assert not list((tmp_path / "out").rglob("*.parquet"))


def test_export_refuses_a_partition_value_ending_in_a_newline(tmp_path: Path) -> None:
    """``$`` matches before a final newline: "local\\n" was a region folder name."""
    path = written(tmp_path, compact(RECORD).encode() + b"\n")
    result = icegov("audit", "export-ocsf", str(path), "--out", str(tmp_path / "out"),
                    "--region", "local\n")
    assert result.exit_code == 2, result.output
    assert "letters, digits and '-' only" in result.output


def test_two_rotated_files_with_swapped_contents_are_named_replaced(tmp_path: Path) -> None:
    """Each file is there under its name, holding the other's records: was named "deleted ...
    is missing (not among the files given)", sending the auditor to look for a file that is
    there."""
    private, public = tmp_path / "signing.pem", tmp_path / "signing.pub.pem"
    assert icegov("audit", "keygen", "--private", str(private),
                  "--public", str(public)).exit_code == 0
    write_log(tmp_path / "audit", private)
    first, second = chain_files(tmp_path / "audit")[:2]
    one, two = first.read_bytes(), second.read_bytes()
    first.write_bytes(two)
    second.write_bytes(one)
    result = digest_verify(public, chain_files(tmp_path / "audit"))
    assert result.exit_code == 1, result.output
    assert "is missing" not in result.output
    assert (f"modified: {first.name}, covered by digest" in result.output
            and "starts at seq 7, not seq 1: replaced by another file" in result.output)


@pytest.mark.parametrize("roles", [[1, None], "analyst", {"analyst": 1}])
def test_export_refuses_roles_that_are_not_names(tmp_path: Path, roles: object) -> None:
    """Roles "analyst" became one OCSF group per character."""
    record = {**RECORD, "seq": 1, "principal": "alice", "roles": roles}
    path = written(tmp_path, compact(record).encode() + b"\n")
    result = icegov("audit", "export-ocsf", str(path), "--out", str(tmp_path / "out"))
    assert result.exit_code == 2, result.output
    assert f"{path}:1: not an audit record: roles" in result.output


def test_diff_audit_passes_over_roles_that_are_not_names(tmp_path: Path) -> None:
    """A caller whose roles are no list of names is no caller icegov logged: not a flip."""
    logged = {"action": "DROP_TABLE", "allowed": False, "resource": "icegov.demo.orders",
              "rule": None}
    odd = {**RECORD, "decision": "deny", "principal": "analyst", "roles": ["analyst", 7],
           "rules": [logged]}
    path = written(tmp_path, compact(odd).encode() + b"\n")
    result = icegov("policy", "diff", str(POLICIES), str(_changed_policies(tmp_path)),
                    "--audit", str(path))
    assert result.exit_code == 0, result.output
    assert "logged decisions that flip: 0" in result.output
