"""The tamper-evident audit stream: sealing, rotation, restarts, concurrent writers, failing sinks,
and what `verify` says about every kind of tampering."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from proxy.audit import AuditLog, AuditSettings, AuditUnavailable
from proxy.audit import files as audit_files
from proxy.audit.files import AuditFile, rotated_files
from proxy.audit.verify import Broken, Intact, NeedsKey, verify
from tests.support.audit import AuditDisk, a_record, no_icegov_environment, written  # noqa: F401

ZEROS = "0" * 64


def lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def records_of(*paths: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in paths for line in lines_of(path)]


def resealed(line: str, **changes: Any) -> str:
    """The record with ``changes``, its hash recomputed and written in icegov's own form, as a
    careful forger without a key would."""
    record = json.loads(line)
    record.update(changes)
    record.pop("hash")
    body = json.dumps(record, sort_keys=True, separators=(",", ":"))
    sealed = hashlib.sha256(body.encode()).hexdigest()
    return body[:-1] + f',"hash":"{sealed}"}}\n'


def broken(paths: list[Path], key: bytes | None = None) -> Broken:
    result = verify(paths, key)
    assert isinstance(result, Broken), result
    return result


# sealing

def test_records_carry_seq_prev_and_a_sha256_over_their_canonical_json(tmp_path: Path) -> None:
    records = records_of(written(tmp_path / "audit.log", 3))
    assert [r["seq"] for r in records] == [1, 2, 3]
    assert [r["prev"] for r in records] == [ZEROS, records[0]["hash"], records[1]["hash"]]
    for record in records:
        assert record["schema"] == "icegov.audit/2" and "mac" not in record
        body = {k: v for k, v in record.items() if k != "hash"}
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
        assert record["hash"] == hashlib.sha256(canonical).hexdigest()
    assert verify([tmp_path / "audit.log"]) == Intact(3, 1, 1, 3)


def test_with_a_key_records_are_hmac_sealed_and_need_that_key(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 3, hmac_key="k1-secret")
    record = records_of(log)[0]
    body = json.dumps({k: v for k, v in record.items() if k != "hash"}, sort_keys=True,
                      separators=(",", ":")).encode()
    assert record["mac"] == "hmac-sha256"
    assert record["hash"] == hmac.new(b"k1-secret", body, hashlib.sha256).hexdigest()
    assert verify([log], b"k1-secret") == Intact(3, 1, 1, 3, keyed=True)
    wrong = broken([log], b"another-key")
    assert (wrong.line, wrong.seq) == (1, 1) and "another key" in wrong.what
    with pytest.raises(NeedsKey):
        verify([log])


def test_a_plain_stream_does_not_pass_as_hmac_sealed(tmp_path: Path) -> None:
    """A forger without the key cannot swap HMAC records for plain SHA-256 ones."""
    log = written(tmp_path / "audit.log", 2)
    problem = broken([log], b"k1-secret")
    assert problem.line == 1 and "not sealed with HMAC" in problem.what


# tampering

def test_an_edited_record_is_named(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 5)
    lines = lines_of(log)
    lines[2] = lines[2].replace('"decision":"allow"', '"decision":"deny"')
    log.write_text("".join(lines))
    problem = broken([log])
    assert (problem.file, problem.line, problem.seq) == (str(log), 3, 3)
    assert problem.what.startswith("edited")


def test_an_edited_and_resealed_record_breaks_the_next_link(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 5)
    lines = lines_of(log)
    lines[2] = resealed(lines[2], principal="someone-else")
    log.write_text("".join(lines))
    problem = broken([log])
    assert (problem.line, problem.seq) == (4, 4) and "does not link to seq 3" in problem.what


def test_a_deleted_record_is_named(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 5)
    lines = lines_of(log)
    del lines[2]
    log.write_text("".join(lines))
    problem = broken([log])
    assert (problem.line, problem.seq) == (3, 4)
    assert "missing" in problem.what and "seq 3" in problem.what and "deleted" in problem.what


def test_reordered_records_are_named(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 5)
    lines = lines_of(log)
    lines[1], lines[2] = lines[2], lines[1]
    log.write_text("".join(lines))
    problem = broken([log])
    assert (problem.line, problem.seq) == (2, 3)
    assert problem.what.startswith("reordered") and f"{log}:3" in problem.what


def test_an_inserted_copy_is_named(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 5)
    lines = lines_of(log)
    lines.insert(4, lines[1])
    log.write_text("".join(lines))
    problem = broken([log])
    assert (problem.line, problem.seq) == (5, 2) and "inserted" in problem.what


def test_an_inserted_forged_record_is_named(tmp_path: Path) -> None:
    """A forged record sealed and linked after seq 2: the genuine seq 3 then repeats."""
    log = written(tmp_path / "audit.log", 4)
    lines = lines_of(log)
    second = json.loads(lines[1])
    forged = resealed(lines[2], prev=second["hash"], request_id="forged", principal="mallory")
    lines.insert(2, forged)
    log.write_text("".join(lines))
    problem = broken([log])
    assert (problem.line, problem.seq) == (4, 3) and "inserted" in problem.what


@pytest.mark.parametrize("cut", ["mid-line", "newline only", "not json"])
def test_a_truncated_tail_is_named(tmp_path: Path, cut: str) -> None:
    log = written(tmp_path / "audit.log", 4)
    text = log.read_text()
    if cut == "mid-line":
        log.write_text(text[: len(text) - 40])
    elif cut == "newline only":
        log.write_text(text[:-1])
    else:
        log.write_text(text + '{"seq": 5, "sch\n')
    problem = broken([log])
    assert problem.what.startswith("truncated tail")
    assert problem.line == (5 if cut == "not json" else 4)


def test_a_whole_stream_is_not_mistaken_for_a_later_chain(tmp_path: Path) -> None:
    """Verifying from the middle is allowed, and said; the first record's prev is checked."""
    log = written(tmp_path / "audit.log", 4)
    lines = lines_of(log)
    log.write_text("".join(lines[2:]))
    assert "earlier records were not checked" in str(verify([log]))
    log.write_text(resealed(lines[0], prev="1" * 64) + "".join(lines[1:]))
    assert "chain's start" in broken([log]).what


# rotation and restarts

def test_rotated_files_chain_into_each_other_and_verify_as_one(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 12, rotate_bytes=1500)
    chain = [*rotated_files(log), log]
    assert len(chain) >= 3
    assert all(p.stat().st_size <= 1500 for p in chain)
    firsts = [records_of(p)[0] for p in chain[1:]]
    lasts = [records_of(p)[-1] for p in chain[:-1]]
    assert [f["prev"] for f in firsts] == [last["hash"] for last in lasts]
    assert verify(chain) == Intact(12, len(chain), 1, 12)


def test_a_missing_rotated_file_is_named_at_the_boundary(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 12, rotate_bytes=1500)
    chain = [*rotated_files(log), log]
    problem = broken([chain[0], *chain[2:]])
    assert problem.file == str(chain[2]) and problem.line == 1
    assert "deleted" in problem.what and f"after {chain[0]}" in problem.what


def test_files_rotate_by_age(tmp_path: Path) -> None:
    now = [0.0]
    path = tmp_path / "audit.log"
    audit = AuditLog(AuditSettings(stdout=False),
                     sinks=[AuditFile(path, rotate_seconds=60, clock=lambda: now[0])])
    audit.write(a_record(1))
    audit.write(a_record(2))
    now[0] = 61.0
    audit.write(a_record(3))
    audit.close()
    (rotated,) = rotated_files(path)
    assert rotated.name.startswith("audit.log.000000000001-")
    assert [r["seq"] for r in records_of(rotated)] == [1, 2]
    assert [r["seq"] for r in records_of(path)] == [3]
    assert verify([rotated, path]) == Intact(3, 2, 1, 3)


def test_a_restart_resumes_the_chain(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 3)
    written(log, 2)
    assert [r["seq"] for r in records_of(log)] == [1, 2, 3, 4, 5]
    assert verify([log]) == Intact(5, 1, 1, 5)


def test_a_restart_after_rotation_resumes_from_the_newest_rotated_file(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 8, rotate_bytes=1500)
    last_first_seq = records_of(log)[0]["seq"]
    log.rename(tmp_path / f"audit.log.{last_first_seq:012d}-20990101T000000Z")  # then a crash
    written(log, 2, rotate_bytes=1500)
    chain = [*rotated_files(log), log]
    assert verify(chain) == Intact(10, len(chain), 1, 10)


def test_a_restart_after_a_torn_write_keeps_the_tear_visible(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 3)
    with log.open("a") as handle:
        handle.write('{"event":"audit","seq":4,"sch')
    written(log, 1)
    records = lines_of(log)
    assert len(records) == 5 and json.loads(records[4])["seq"] == 4
    problem = broken([log])
    assert (problem.line, problem.what) == (4, "damaged: not valid JSON")


def test_a_version_1_file_is_set_aside_and_a_new_chain_starts(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_text('{"event": "audit", "request_id": "old"}\n')
    written(log, 2)
    (legacy,) = tmp_path.glob("audit.log.legacy-*")
    assert "old" in legacy.read_text()
    assert verify([log]) == Intact(2, 1, 1, 2)


# concurrency

def test_concurrent_writers_keep_seq_and_links_consistent(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    audit = AuditLog(AuditSettings(stdout=False, file=path, rotate_bytes=40_000))
    start = threading.Barrier(8)

    def writer(base: int) -> None:
        start.wait()
        for n in range(150):
            audit.write(a_record(base + n))

    threads = [threading.Thread(target=writer, args=(i * 1000,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    audit.close()
    chain = [*rotated_files(path), path]
    assert len(chain) > 1
    assert verify(chain) == Intact(1200, len(chain), 1, 1200)
    assert len({r["request_id"] for r in records_of(*chain)}) == 1200


# failing sinks and fail closed

class FlakySink:
    """A sink that fails while ``failing`` is set and keeps what it was given otherwise."""

    name = "flaky"

    def __init__(self) -> None:
        self.failing = False
        self.lines: list[str] = []

    def write(self, line: str, seq: int) -> None:
        if self.failing:
            raise OSError(28, "No space left on device")
        self.lines.append(line)

    def close(self) -> None:
        pass


def test_failed_writes_are_counted_and_health_returns_with_a_good_write() -> None:
    sink = FlakySink()
    audit = AuditLog(AuditSettings(stdout=False), sinks=[sink])
    audit.write(a_record(1))
    assert (audit.healthy, audit.failures) == (True, 0)
    sink.failing = True
    audit.write(a_record(2))
    audit.write(a_record(3))
    assert (audit.healthy, audit.failures) == (False, 2)
    sink.failing = False
    audit.write(a_record(4))
    assert (audit.healthy, audit.failures) == (True, 2)
    assert [json.loads(line)["seq"] for line in sink.lines] == [1, 4]  # the gap shows the loss


@pytest.mark.parametrize("fail_closed,method,endpoint,refused", [
    (True, "POST", "commit_table", True),
    (True, "DELETE", "drop_table", True),
    (True, "POST", "create_namespace", True),
    (True, "GET", "load_table", False),
    (True, "HEAD", "table_exists", False),
    (True, "POST", "oauth_tokens", False),
    (True, "POST", "plan_table_scan", False),
    (False, "POST", "commit_table", False),
])
def test_fail_closed_refuses_mutating_requests_while_the_audit_is_down(
        fail_closed: bool, method: str, endpoint: str, refused: bool) -> None:
    sink = FlakySink()
    audit = AuditLog(AuditSettings(stdout=False, fail_closed=fail_closed), sinks=[sink])
    request = a_record(1, method, endpoint)
    audit.check_writable(request)  # healthy: never refused
    sink.failing = True
    audit.write(a_record(0))
    if refused:
        with pytest.raises(AuditUnavailable) as raised:
            audit.check_writable(request)
        assert raised.value.status == 503 and raised.value.message == "audit log unavailable"
        assert request.decision == "refused"
    else:
        audit.check_writable(request)


def test_a_write_cut_short_is_cut_back_and_the_lost_record_shows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "audit.log"
    audit = AuditLog(AuditSettings(stdout=False, file=path))
    audit.write(a_record(1))
    real_write_all = audit_files._write_all

    def half_then_full(handle: Any, data: bytes) -> None:
        real_write_all(handle, data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(audit_files, "_write_all", half_then_full)
    audit.write(a_record(2))
    assert (audit.healthy, audit.failures) == (False, 1)
    monkeypatch.setattr(audit_files, "_write_all", real_write_all)
    audit.write(a_record(3))
    audit.close()
    assert audit.healthy
    assert [r["seq"] for r in records_of(path)] == [1, 3]
    problem = broken([path])
    assert (problem.line, problem.seq) == (2, 3) and "seq 2" in problem.what


def test_record_time_is_iso_8601_utc_to_the_millisecond_across_seconds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The kept seconds' text never outlives its second: each stamp is what ``datetime``
    writes for the same instant."""
    from datetime import UTC, datetime, timedelta

    from proxy.audit import record as audit_record

    for ns in (1_795_000_000_999_999_999, 1_795_000_001_000_000_000, 1_795_000_001_000_999_999,
               1_795_000_061_123_456_789, 1_795_000_001_500_000_000):
        monkeypatch.setattr(audit_record.time, "time_ns", lambda ns=ns: ns)
        instant = datetime.fromtimestamp(ns // 10**9, UTC) + timedelta(
            microseconds=ns // 1000 % 10**6)
        expected = instant.isoformat(timespec="milliseconds")
        assert audit_record.utc_now_ms() == expected
