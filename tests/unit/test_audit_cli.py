"""`icegov audit verify`, the record's JSON Schema against records icegov really writes, and
fail-closed refusal of mutating requests while the audit cannot be written."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import jsonschema
import pytest
from click.testing import CliRunner, Result
from starlette.testclient import TestClient

from proxy.app import Backing, create_app
from proxy.audit import AuditSettings
from proxy.audit.files import rotated_files
from proxy.audit.schema import record_schema
from proxy.cli import main
from tests.support.audit import AuditDisk, a_record, no_icegov_environment, request_records, written  # noqa: F401
from tests.support.errors import assert_error_model
from tests.support.settings import ADMIN, settings_for_tests
from tests.support.upstream import UPSTREAM, Upstream

pytestmark = pytest.mark.usefixtures("no_icegov_environment")  # no ICEGOV__* of the shell


def icegov(*args: str, **env: str) -> Result:
    return CliRunner().invoke(main, list(args), env=env)


def test_verify_an_intact_stream_exits_0_with_a_summary(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 3)
    result = icegov("audit", "verify", str(log))
    assert result.exit_code == 0, result.output
    last = json.loads(log.read_text().splitlines()[-1])["hash"]
    assert result.output.splitlines() == [
        "ok: 3 records in 1 file(s), seq 1..3, sealed with sha-256 (unkeyed)",
        f"last record: 3:{last}"]


def test_verify_names_the_first_bad_record_and_exits_1(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 4)
    lines = log.read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace('"status":200', '"status":201')
    log.write_text("".join(lines))
    result = icegov("audit", "verify", str(log))
    assert result.exit_code == 1
    assert f"{log}:2: seq 2: edited" in result.output


def test_verify_follows_rotated_files_in_the_order_given(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 10, rotate_bytes=1200)
    chain = [str(p) for p in [*rotated_files(log), log]]
    assert len(chain) > 2
    result = icegov("audit", "verify", *chain)
    assert result.exit_code == 0, result.output
    assert f"ok: 10 records in {len(chain)} file(s), seq 1..10" in result.output
    swapped = icegov("audit", "verify", chain[1], chain[0], *chain[2:])
    assert swapped.exit_code == 1 and "audit chain broken" in swapped.output


def test_verify_with_an_hmac_key_from_the_environment_or_the_flag(tmp_path: Path) -> None:
    log = written(tmp_path / "audit.log", 3, hmac_key="the-audit-key")
    ok = icegov("audit", "verify", str(log), ICEGOV__AUDIT__HMAC_KEY="the-audit-key")
    assert ok.exit_code == 0, ok.output
    wrong = icegov("audit", "verify", "--key", "not-the-key", str(log))
    assert wrong.exit_code == 1 and "another key" in wrong.output
    keyless = icegov("audit", "verify", str(log))
    assert keyless.exit_code == 2 and "HMAC" in keyless.output


def test_verify_a_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    result = icegov("audit", "verify", str(tmp_path / "nope.log"))
    assert result.exit_code == 2


# records icegov really writes, against the shipped schema

def app_client(tmp: Path, upstream: Upstream, audit: AuditSettings) -> TestClient:
    settings = settings_for_tests(tmp, anonymous_admin=True, catalog_uri=UPSTREAM)
    settings = settings.model_copy(update={"audit": audit})
    return TestClient(create_app(settings, Backing(httpx.MockTransport(upstream), UPSTREAM)),
                      raise_server_exceptions=False)


def exercise(client: TestClient) -> None:
    """Requests that produce every kind of record: public, allow, refused, unauthenticated."""
    client_id, secret = ADMIN.split(":")
    client.post("/v1/oauth/tokens", data={"grant_type": "client_credentials",
                                          "client_id": client_id, "client_secret": secret})
    client.get("/v1/config")
    client.get("/v1/namespaces/db", headers={"user-agent": "pyiceberg", "x-client-version": "1"})
    client.post("/v1/namespaces", json={"namespace": ["db2"]})
    client.get("/v1/namespaces/a%00b")
    client.get("/v1/namespaces/db", headers={"authorization": "Bearer not-a-token"})


@pytest.mark.parametrize("key", [None, "schema-key"])
def test_written_records_satisfy_the_shipped_json_schema(tmp_path: Path, key: str | None) -> None:
    schema = record_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    log = tmp_path / "audit.log"
    with app_client(tmp_path, Upstream(), AuditSettings(stdout=False, file=log,
                                                        hmac_key=key)) as client:
        exercise(client)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) == 7
    assert records[0]["endpoint"] == "policy_loaded"  # the policy in force, then each request
    assert {r["decision"] for r in records} >= {"public", "allow", "refused", "unauthenticated"}
    validator = jsonschema.Draft202012Validator(schema)
    for record in records:
        assert list(validator.iter_errors(record)) == [], record
    assert icegov("audit", "verify", str(log), **(
        {"ICEGOV__AUDIT__HMAC_KEY": key} if key else {})).exit_code == 0


def test_the_schema_rejects_a_record_without_its_chain_fields() -> None:
    validator = jsonschema.Draft202012Validator(record_schema())
    assert not validator.is_valid({"event": "audit", "request_id": "x"})


# fail closed

def test_fail_closed_refuses_changes_while_the_audit_cannot_be_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    disk = AuditDisk(monkeypatch)
    upstream = Upstream()
    log = tmp_path / "audit.log"
    with app_client(tmp_path, upstream, AuditSettings(stdout=False, file=log,
                                                      fail_closed=True)) as client:
        assert client.get("/v1/namespaces/db").status_code == 200
        disk.full = True
        assert client.get("/v1/namespaces/db").status_code == 200  # reads answer; write fails
        seen = len(upstream.seen)
        error = assert_error_model(client.post("/v1/namespaces", json={"namespace": ["x"]}),
                                   503, "ServiceUnavailableException")
        assert error["message"] == "audit log unavailable"
        assert client.delete("/v1/namespaces/db").status_code == 503
        assert_error_model(client.post("/v1/namespaces", json={"namespace": ["x"]}, headers={
            "authorization": "Bearer forged"}), 401)  # a stranger learns nothing of the audit
        assert len(upstream.seen) == seen  # nothing reached the backing
        disk.full = False
        assert client.get("/v1/namespaces/db").status_code == 200  # written: healthy again
        assert client.post("/v1/namespaces", json={"namespace": ["x"]}).status_code == 200
    assert [r.method for r in upstream.seen[seen:]] == ["GET", "POST"]
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert records[0]["endpoint"] == "policy_loaded"
    assert [r["seq"] for r in records] == [1, 2, 7, 8, 9]  # the lost records show as a gap
    ahead, final = records[3:]  # the change is on record before it is sent, then its outcome
    assert ahead["request_id"] == final["request_id"] and ahead["method"] == "POST"
    assert (ahead["decision"], ahead["status"]) == ("allow", None)
    assert (final["decision"], final["status"]) == ("allow", 200)


def test_fail_closed_refuses_a_change_whose_advance_record_cannot_be_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    disk = AuditDisk(monkeypatch)
    upstream = Upstream()
    log = tmp_path / "audit.log"
    with app_client(tmp_path, upstream, AuditSettings(stdout=False, file=log,
                                                      fail_closed=True)) as client:
        assert client.get("/v1/namespaces/db").status_code == 200  # healthy so far
        disk.fail_next = 1  # the record written before the change is sent is lost
        assert_error_model(client.post("/v1/namespaces", json={"namespace": ["x"]}), 503,
                           "ServiceUnavailableException")
    assert [r.method for r in upstream.seen] == ["GET"], "the change never reached the backing"
    refused = json.loads(log.read_text().splitlines()[-1])
    assert (refused["method"], refused["decision"], refused["status"]) == ("POST", "refused", 503)


def test_fail_closed_a_change_landed_before_the_audit_died_stays_on_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    disk = AuditDisk(monkeypatch)

    def land_then_lose_the_disk(request: httpx.Request) -> httpx.Response:
        disk.full = True  # the sink dies while the backing makes the change
        return httpx.Response(200, json={"namespace": ["x"], "properties": {}})

    log = tmp_path / "audit.log"
    with app_client(tmp_path, Upstream(land_then_lose_the_disk),
                    AuditSettings(stdout=False, file=log, fail_closed=True)) as client:
        assert client.post("/v1/namespaces", json={"namespace": ["x"]}).status_code == 200
    (ahead,) = request_records(log)
    assert (ahead["method"], ahead["path"]) == ("POST", "/v1/namespaces")
    assert (ahead["decision"], ahead["status"]) == ("allow", None)  # sent, outcome not recorded


def test_without_fail_closed_changes_go_through_unaudited(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    disk = AuditDisk(monkeypatch)
    upstream = Upstream()
    with app_client(tmp_path, upstream, AuditSettings(stdout=False,
                                                      file=tmp_path / "audit.log")) as client:
        disk.full = True
        client.get("/v1/namespaces/db")
        assert client.post("/v1/namespaces", json={"namespace": ["x"]}).status_code == 200
    assert upstream.seen[-1].method == "POST"
