"""What the audit review asked of verify and the file sink: a line verifies only as the exact
bytes icegov wrote, where the chain stands is logged apart from it (``audit.resumed``,
``audit.closed``), anchors kept elsewhere find a cut tail or a re-sealed chain, and the summary
says which seal it checked (``--require-hmac`` refuses an unkeyed one)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner, Result
from starlette.testclient import TestClient
from structlog.testing import capture_logs

from proxy.app import Backing, create_app
from proxy.audit import AuditLog, AuditRecord, AuditSettings
from proxy.audit.anchors import parse_anchor
from proxy.audit.chain import GENESIS, Link
from proxy.audit.files import rotated_files
from proxy.audit.verify import Broken, Intact, verify
from proxy.cli import main
from tests.support.audit import AuditDisk, a_record, no_icegov_environment, written  # noqa: F401
from tests.support.settings import settings_for_tests
from tests.support.upstream import UPSTREAM, Upstream

KEY = "the-audit-key"


pytestmark = pytest.mark.usefixtures("no_icegov_environment")  # no ICEGOV__* of the shell


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def link_at(path: Path, index: int) -> Link:
    record = json.loads(lines_of(path)[index])
    return Link(record["seq"], record["hash"])


def broken(paths: list[Path], key: bytes | None = None, **options: Any) -> Broken:
    result = verify(paths, key, **options)
    assert isinstance(result, Broken), result
    return result


def icegov(*args: str) -> Result:
    return CliRunner().invoke(main, ["audit", "verify", *args])


def events(logs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == name]


def resealed_from_scratch(path: Path, **changes: Any) -> None:
    """Every record changed and re-sealed in icegov's exact form, as a forger without a key can."""
    out, prev = [], GENESIS
    for line in lines_of(path):
        body = {k: v for k, v in json.loads(line).items() if k != "hash"}
        body.update(changes, prev=prev)
        data = json.dumps(body, sort_keys=True, separators=(",", ":"))
        prev = hashlib.sha256(data.encode()).hexdigest()
        out.append(data[:-1] + f',"hash":"{prev}"}}\n')
    path.write_text("".join(out))


# a line verifies only as the bytes icegov wrote

@pytest.mark.parametrize("rewrite", [
    pytest.param(lambda line: line.replace(b'{"actions"', b'{"decision":"deny","actions"', 1),
                 id="a repeated key, read first by first-wins parsers"),
    pytest.param(lambda line: line.replace(b'"schema":', b'"schema" :', 1), id="a space"),
    pytest.param(lambda line: line.replace(b"/v1/namespaces/", b"\\/v1\\/namespaces\\/", 1),
                 id="an escape"),
    pytest.param(lambda line: line[:-1] + b"\r\n", id="a CRLF ending"),
    pytest.param(lambda line: json.dumps(dict(reversed(json.loads(line).items())),
                                         separators=(",", ":")).encode() + b"\n",
                 id="keys reordered"),
])
def test_a_line_in_any_other_form_than_written_is_named_as_edited(tmp_path: Path,
                                                                   rewrite: Any) -> None:
    log = written(tmp_path / "audit.log", 3)
    lines = lines_of(log)
    original = json.loads(lines[1])
    lines[1] = rewrite(lines[1])
    assert lines[1] != lines_of(log)[1]
    assert json.loads(lines[1])["hash"] == original["hash"]  # the parsed record still seals
    log.write_bytes(b"".join(lines))
    problem = broken([log])
    assert (problem.line, problem.seq) == (2, 2)
    assert problem.what.startswith("edited: the line is not byte for byte")


def test_the_exact_lines_icegov_writes_verify_keyed_and_unkeyed(tmp_path: Path) -> None:
    plain = written(tmp_path / "plain.log", 3)
    keyed = written(tmp_path / "keyed.log", 3, hmac_key=KEY)
    assert verify([plain]) == Intact(3, 1, 1, 3)
    assert verify([keyed], KEY.encode()) == Intact(3, 1, 1, 3, keyed=True)


# where the chain stands, logged apart from the audit stream

def test_start_and_close_log_where_the_chain_stands(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    with capture_logs() as first:
        written(log, 2)
    assert events(first, "audit.resumed")[0] | {"sinks": None} == {
        "event": "audit.resumed", "log_level": "info", "seq": 0, "hash": GENESIS, "file": None,
        "sinks": None}
    (closed,) = events(first, "audit.closed")
    assert (closed["seq"], closed["hash"]) == (2, link_at(log, 1).hash)
    with capture_logs() as second:
        written(log, 1)
    (resumed,) = events(second, "audit.resumed")
    assert (resumed["seq"], resumed["hash"], resumed["file"]) == (2, closed["hash"], str(log))
    assert events(second, "audit.closed")[0]["seq"] == 3


def test_audit_closed_is_logged_once_and_again_after_a_later_write(tmp_path: Path) -> None:
    audit = AuditLog(AuditSettings(stdout=False, file=tmp_path / "audit.log"))
    with capture_logs() as logs:
        audit.close()
        audit.close()
        audit.write(AuditRecord(request_id="r", method="GET", path="/", endpoint="get_config"))
        audit.close()
    assert [e["seq"] for e in events(logs, "audit.closed")] == [0, 1]


def test_a_deleted_live_file_is_warned_about_and_the_resume_names_the_rotated_file(
        tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 8, rotate_bytes=1200)
    newest = rotated_files(log)[-1]
    assert lines_of(log), "the live file holds records that the deletion loses"
    log.unlink()
    with capture_logs() as logs:
        written(log, 1)
    (warning,) = events(logs, "audit.live_file_missing")
    assert warning["log_level"] == "warning" and warning["newest_rotated"] == str(newest)
    (resumed,) = events(logs, "audit.resumed")
    assert resumed["file"] == str(newest)
    assert (resumed["seq"], resumed["hash"]) == tuple(vars(link_at(newest, -1)).values())


def test_a_normal_rotation_then_restart_warns_of_nothing(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 8, rotate_bytes=1200)
    log.write_bytes(b"")  # as just after a rotation: the live file is there, empty
    with capture_logs() as logs:
        written(log, 1)
    assert not events(logs, "audit.live_file_missing")
    assert events(logs, "audit.resumed")[0]["file"] == str(rotated_files(log)[-1])


def test_the_app_logs_the_resume_at_start_and_the_close_at_shutdown(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    settings = settings_for_tests(tmp_path, anonymous_admin=True, catalog_uri=UPSTREAM)
    settings = settings.model_copy(update={"audit": AuditSettings(stdout=False, file=log)})
    with capture_logs() as logs:
        app = create_app(settings, Backing(httpx.MockTransport(Upstream()), UPSTREAM))
        with TestClient(app) as client:
            assert client.get("/v1/namespaces/db").status_code == 200
    assert events(logs, "audit.resumed")[0]["seq"] == 0
    last = link_at(log, -1)
    assert [(e["seq"], e["hash"]) for e in events(logs, "audit.closed")] == [
        (last.seq, last.hash)]


# anchors

def test_a_tail_cut_while_stopped_fails_the_last_record_logged_at_close(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 5)
    last = link_at(log, -1)
    log.write_bytes(b"".join(lines_of(log)[:3]))
    assert isinstance(verify([log]), Intact)  # the chain alone cannot tell
    problem = broken([log], expect_last=last)
    assert (problem.line, problem.seq) == (3, 3)
    assert "ends at seq 3 but the anchor seq 5 comes after it" in problem.what
    assert "cut from the tail" in broken([log], anchors=[last]).what


def test_records_cut_and_rewritten_after_a_restart_fail_the_anchor(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 5)
    anchor = link_at(log, -1)
    log.write_bytes(b"".join(lines_of(log)[:3]))
    written(log, 2)  # icegov resumes at seq 3: seq 4 and 5 are other records now
    problem = broken([log], anchors=[anchor])
    assert (problem.line, problem.seq) == (5, 5)
    assert problem.what.startswith(f"does not match the anchor 5:{anchor.hash}")


def test_a_chain_resealed_from_scratch_fails_an_early_anchor(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 4)
    anchor = link_at(log, 1)
    resealed_from_scratch(log, principal="mallory")
    assert isinstance(verify([log]), Intact)
    problem = broken([log], anchors=[anchor])
    assert (problem.line, problem.seq) == (2, 2) and "rewritten" in problem.what


def test_anchors_that_hold_are_counted_and_the_expected_end_is_checked(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 4)
    second, last = link_at(log, 1), link_at(log, -1)
    result = verify([log], anchors=[second], expect_last=last)
    assert result == Intact(4, 1, 1, 4, anchors=2)
    assert isinstance(result, Intact) and result.last_hash == last.hash
    on = broken([log], expect_last=second)
    assert (on.line, on.seq) == (4, 4)
    assert "goes on after the expected last record seq 2 (to seq 4)" in on.what


def test_an_anchor_before_the_files_checked_is_not_taken_as_held(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 8, rotate_bytes=1200)
    first = link_at(rotated_files(log)[0], 0)
    assert first.seq == 1
    assert "before these files" in broken([log], anchors=[first]).what
    assert verify([*rotated_files(log), log], anchors=[first]) == Intact(
        8, len(rotated_files(log)) + 1, 1, 8, anchors=1)


def test_an_empty_stream_holds_no_anchor(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    log.write_bytes(b"")
    assert "ends at seq 0" in broken([log], anchors=[Link(1, "a" * 64)]).what


@pytest.mark.parametrize("text", ["", "5", "0:" + "a" * 64, "5:" + "a" * 63, "5:" + "g" * 64,
                                  "-1:" + "a" * 64, "5:" + "a" * 64 + ":x"])
def test_a_malformed_anchor_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_anchor(text)


def test_the_cli_takes_anchors_and_prints_the_next_one(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 3)
    first, last = link_at(log, 0), link_at(log, -1)
    ok = icegov("--anchor", f"1:{first.hash.upper()}", "--expect-last",
                f"3:{last.hash}", str(log))
    assert ok.exit_code == 0, ok.output
    assert ok.output.splitlines()[1:] == [f"last record: 3:{last.hash}", "anchors matched: 2"]
    cut = icegov("--expect-last", f"4:{last.hash}", str(log))
    assert cut.exit_code == 1 and "cut from the tail" in cut.output
    bad = icegov("--anchor", "three", str(log))
    assert bad.exit_code == 2 and "SEQ:HASH" in bad.output


# which seal was checked

def test_the_summary_names_the_seal_it_checked(tmp_path: Path) -> None:
    plain = written(tmp_path / "plain.log", 2)
    keyed = written(tmp_path / "keyed.log", 2, hmac_key=KEY)
    unkeyed = icegov(str(plain))
    assert unkeyed.exit_code == 0
    assert unkeyed.output.splitlines()[0].endswith(", sealed with sha-256 (unkeyed)")
    checked = icegov("--key", KEY, str(keyed))
    assert checked.exit_code == 0
    assert checked.output.splitlines()[0].endswith(", sealed with hmac-sha256 (key checked)")


def test_require_hmac_fails_an_unkeyed_chain_and_a_missing_key(tmp_path: Path) -> None:
    plain = written(tmp_path / "plain.log", 2)
    keyed = written(tmp_path / "keyed.log", 2, hmac_key=KEY)
    refused = icegov("--require-hmac", str(plain))
    assert refused.exit_code == 1
    assert f"{plain}:1: seq 1: not sealed with HMAC and HMAC is required" in refused.output
    assert icegov("--require-hmac", str(keyed)).exit_code == 2  # HMAC records, no key
    assert icegov("--require-hmac", "--key", KEY, str(keyed)).exit_code == 0


def test_require_hmac_names_a_plain_record_spliced_into_a_keyed_chain(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 2, hmac_key=KEY)
    with capture_logs():
        audit = AuditLog(AuditSettings(stdout=False, file=log))  # resumes, without the key
        audit.write(AuditRecord(request_id="plain", method="GET", path="/", endpoint="x"))
        audit.close()
    problem = broken([log], KEY.encode(), require_hmac=True)
    assert (problem.line, problem.seq) == (3, 3) and "not sealed with HMAC" in problem.what
