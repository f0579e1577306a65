"""Workers' chains on one stream: each record names its writer, and verify checks one at a time."""

from __future__ import annotations

import io
import json
from pathlib import Path

import jsonschema
from click.testing import CliRunner

from proxy.audit import AuditLog, AuditSettings
from proxy.audit.log import StreamSink
from proxy.audit.schema import record_schema
from proxy.audit.verify import Broken, Intact, verify
from proxy.cli import main
from proxy.settings import load_settings
from proxy.workers import for_worker
from tests.support.audit import a_record


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
    assert for_worker(load_settings(audit={"file": None}), 3).audit.writer == "w3"
    assert for_worker(load_settings(audit={"file": tmp_path / "a.log"}), 0).audit.writer == "w0"
    assert load_settings().audit.writer is None
