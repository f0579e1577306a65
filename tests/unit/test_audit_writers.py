"""Workers' chains on one stream: each record names its writer, and verify checks one at a time."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
from click.testing import CliRunner

from proxy.audit import AuditLog, AuditSettings
from proxy.audit.log import StreamSink
from proxy.audit.schema import record_schema
from proxy.audit.verify import Broken, Intact, verify
from proxy.cli import main
from proxy.ops.workers import for_worker
from proxy.settings import load_settings
from tests.support.audit import a_record

REPO = Path(__file__).resolve().parents[2]


def interleaved_stream(path: Path, per_writer: int = 4) -> Path:
    """Two workers' chains written line by line, alternating, into one file (as on stdout)."""
    streams = {name: io.StringIO() for name in ("w0", "w1")}
    logs = {name: AuditLog(AuditSettings(stdout=False, writer=name),
                           sinks=[StreamSink(stream)]) for name, stream in streams.items()}
    for n in range(per_writer):
        for log in logs.values():
            log.write(a_record(n))
    lines = {name: stream.getvalue().splitlines(keepends=True)
             for name, stream in streams.items()}
    path.write_text("".join(a + b for a, b in zip(lines["w0"], lines["w1"], strict=True)))
    return path


def test_each_workers_chain_in_a_shared_stream_verifies_on_its_own(tmp_path: Path) -> None:
    stream = interleaved_stream(tmp_path / "stdout.log")
    for writer in ("w0", "w1"):
        result = verify([stream], writer=writer)
        assert isinstance(result, Intact) and result.records == 4, result


def test_a_shared_stream_checked_as_one_chain_names_the_interleaving(tmp_path: Path) -> None:
    result = verify([interleaved_stream(tmp_path / "stdout.log")])
    assert isinstance(result, Broken) and result.line == 2
    assert "several writers" in result.what and "--writer" in result.what


def test_a_record_deleted_from_one_workers_chain_is_found(tmp_path: Path) -> None:
    stream = interleaved_stream(tmp_path / "stdout.log")
    lines = stream.read_text().splitlines(keepends=True)
    del lines[2]  # w0's second record
    stream.write_text("".join(lines))
    assert isinstance(verify([stream], writer="w1"), Intact)
    broken = verify([stream], writer="w0")
    assert isinstance(broken, Broken) and "deleted" in broken.what


def test_the_writer_is_sealed_into_the_record(tmp_path: Path) -> None:
    stream = interleaved_stream(tmp_path / "stdout.log", per_writer=1)
    lines = stream.read_text().splitlines(keepends=True)
    stream.write_text(lines[0].replace('"writer":"w0"', '"writer":"w1"'))
    broken = verify([stream], writer="w1")
    assert isinstance(broken, Broken) and "edited" in broken.what


def test_records_with_a_writer_satisfy_the_shipped_schema(tmp_path: Path) -> None:
    stream = interleaved_stream(tmp_path / "stdout.log", per_writer=1)
    validator = jsonschema.Draft202012Validator(record_schema())
    for line in stream.read_text().splitlines():
        record = json.loads(line)
        assert record["writer"] in ("w0", "w1")
        assert list(validator.iter_errors(record)) == []
    assert not validator.is_valid({**record, "writer": "w0; rm"})


def test_the_cli_checks_one_writer(tmp_path: Path) -> None:
    stream = str(interleaved_stream(tmp_path / "stdout.log"))
    runner = CliRunner()
    assert runner.invoke(main, ["audit", "verify", stream]).exit_code == 1
    checked = runner.invoke(main, ["audit", "verify", "--writer", "w1", stream])
    assert checked.exit_code == 0 and "4 records" in checked.output, checked.output


def test_a_worker_names_itself_in_its_records(tmp_path: Path) -> None:
    assert for_worker(load_settings(audit={"file": None}), 3, tmp_path).audit.writer == "w3"
    with_file = load_settings(audit={"file": tmp_path / "a.log"})
    assert for_worker(with_file, 0, tmp_path).audit.writer == "w0"
    assert load_settings().audit.writer is None


WRITE_LONG_LINES = """
import os, sys
from pathlib import Path
from proxy.audit.log import StreamSink
lock = Path(sys.argv[2]) if sys.argv[2] != "-" else None
sink = StreamSink(sys.stdout, shared_by=lock)
os.write(int(sys.argv[4]), b"r")  # ready; then wait for the start, so both write at once
os.read(0, 1)
for n in range(int(sys.argv[3])):
    sink.write(sys.argv[1] * 200_000, n)
"""


def lines_of_two_writers(tmp_path: Path, lock: str) -> list[str]:
    """Two processes writing 200 kB records at once to one shared pipe, as workers share
    stdout."""
    read, write = os.pipe()
    ready_read, ready_write = os.pipe()
    writers = [subprocess.Popen(
        [sys.executable, "-c", WRITE_LONG_LINES, letter, lock, "40", str(ready_write)],
        stdin=subprocess.PIPE, stdout=write, cwd=REPO, pass_fds=(ready_write,))
        for letter in "ab"]
    os.close(write)
    os.close(ready_write)
    assert os.read(ready_read, 1) + os.read(ready_read, 1) == b"rr"
    os.close(ready_read)
    for writer in writers:
        assert writer.stdin is not None
        writer.stdin.write(b"g")
        writer.stdin.close()
    with os.fdopen(read, "r") as stream:
        lines = stream.read().splitlines()
    assert all(writer.wait(timeout=60) == 0 for writer in writers)
    return lines


def test_workers_sharing_stdout_never_split_each_others_records(tmp_path: Path) -> None:
    lines = lines_of_two_writers(tmp_path, str(tmp_path / "stdout.lock"))
    assert sorted(lines) == ["a" * 200_000] * 40 + ["b" * 200_000] * 40


def test_a_worker_writes_stdout_records_under_the_lock_every_worker_shares(
        tmp_path: Path) -> None:
    settings = for_worker(load_settings(audit={"file": None, "stdout": True}), 1, tmp_path)
    assert settings.audit.stdout_lock == tmp_path / "stdout.lock"
    audit = AuditLog(settings.audit)
    try:
        audit.write(a_record(1))
    finally:
        audit.close()
    assert (tmp_path / "stdout.lock").exists()  # taken for the record just written


def test_replicas_name_their_chains_and_gathered_streams_verify_one_by_one(
        tmp_path: Path) -> None:
    """Two replicas' streams gathered in one file: each names its writer, and a worker of a
    named replica is ``<name>-w<slot>``."""
    streams = {name: io.StringIO() for name in ("replica-a", "replica-b")}
    for name, stream in streams.items():
        log = AuditLog(AuditSettings(stdout=False, writer=name), sinks=[StreamSink(stream)])
        for n in range(3):
            log.write(a_record(n))
    gathered = tmp_path / "gathered.log"
    gathered.write_text("".join(s.getvalue() for s in streams.values()))
    assert isinstance(verify([gathered], writer="replica-b"), Intact)
    assert isinstance(verify([gathered]), Broken)
    named = load_settings(audit={"writer": "replica-a"})
    assert for_worker(named, 1, tmp_path).audit.writer == "replica-a-w1"
    assert for_worker(load_settings(), 1, tmp_path).audit.writer == "w1"
