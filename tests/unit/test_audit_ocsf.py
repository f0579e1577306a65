"""OCSF events (proxy.audit.ocsf): records a real app writes, converted and validated against the
OCSF 1.8.0 JSON Schema of their class; the OCSF sink beside the chain."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import ForbiddenError

from proxy.app import create_app
from proxy.audit import AuditSettings
from proxy.audit.ocsf import NotARecord, to_ocsf
from proxy.audit.verify import Intact, verify
from proxy.cli import main
from proxy.ops.workers import for_worker
from proxy.policy.loader import read_files
from proxy.settings import load_settings
from tests.support import ocsf_watch
from tests.support.ocsf import ocsf_errors, without_nulls
from tests.support.servers import serve
from tests.support.settings import ADMIN, POLICIES, settings_for_tests

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False)])


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A real app's audit file and OCSF file after inserts, a delete, an overwrite, scans, a
    denied write, a hidden table and a failed login."""
    work = tmp_path_factory.mktemp("ocsf")
    settings = settings_for_tests(work)
    settings = settings.model_copy(update={"audit": AuditSettings(
        stdout=False, file=work / "audit.log", ocsf_file=work / "audit.ocsf.jsonl")})
    with serve(create_app(settings)) as url:
        admin = RestCatalog("admin", uri=url, credential=ADMIN)
        admin.create_namespace("demo")
        table = admin.create_table("demo.events", SCHEMA)
        table.append(pa.table({"id": pa.array([1, 2, 3], pa.int64())}, schema=SCHEMA))
        table.delete("id == 2")
        table.overwrite(pa.table({"id": pa.array([7], pa.int64())}, schema=SCHEMA))
        admin.create_namespace("private")
        admin.create_table("private.secrets", SCHEMA)
        analyst = RestCatalog("analyst", uri=url, credential="analyst:analyst-secret")
        assert analyst.load_table("demo.events").scan().to_arrow().num_rows == 1
        with pytest.raises(ForbiddenError):
            analyst.load_table("demo.events").append(
                pa.table({"id": pa.array([9], pa.int64())}, schema=SCHEMA))
        hidden = httpx.get(f"{url}/v1/namespaces/private/tables/secrets",
                           headers=_bearer(url, "analyst"))
        assert hidden.status_code in (403, 404)
        assert httpx.post(f"{url}/v1/oauth/tokens", data={
            "grant_type": "client_credentials", "client_id": "admin",
            "client_secret": "wrong"}).status_code == 401
    yield work


def _bearer(url: str, who: str) -> dict[str, str]:
    token = httpx.post(f"{url}/v1/oauth/tokens", data={
        "grant_type": "client_credentials", "client_id": who,
        "client_secret": f"{who}-secret"}).json()["access_token"]
    return {"authorization": f"Bearer {token}"}


def test_every_record_converts_to_a_valid_ocsf_event(written: Path) -> None:
    records = lines(written / "audit.log")
    assert len(records) > 10
    for record in records:
        event = to_ocsf(record)
        assert ocsf_errors(event) == [], (record["endpoint"], ocsf_errors(event)[:5])


def test_the_ocsf_sink_holds_one_valid_event_per_record_carrying_its_chain(
        written: Path) -> None:
    records, events = lines(written / "audit.log"), lines(written / "audit.ocsf.jsonl")
    assert isinstance(verify([written / "audit.log"]), Intact)  # the chain is untouched
    assert len(events) == len(records)
    for record, event in zip(records, events, strict=True):
        assert ocsf_errors(event) == []
        chain = event["unmapped"]["icegov"]
        assert (chain["seq"], chain["prev"], chain["hash"]) == (
            record["seq"], record["prev"], record["hash"])
        assert event["metadata"]["uid"] == record["hash"]
        assert event["metadata"]["sequence"] == record["seq"]


def test_commits_are_datastore_writes_and_deletes_with_their_classification(
        written: Path) -> None:
    events = [e for e in lines(written / "audit.ocsf.jsonl")
              if e["unmapped"]["icegov"]["endpoint"] == "commit_table"
              and e["action_id"] == 1 and "classification" in e["unmapped"]["icegov"]]
    classes = {e["unmapped"]["icegov"]["classification"]: e for e in events}
    assert {"INSERT", "DELETE"} <= set(classes), set(classes)
    insert, delete = classes["INSERT"], classes["DELETE"]
    assert (insert["class_uid"], insert["activity_id"], insert["type_uid"]) == (6005, 5, 600505)
    assert (delete["class_uid"], delete["activity_id"]) == (6005, 7)
    assert insert["table"] == {"name": "events", "uid": "icegov.demo.events"}
    assert insert["database"]["name"] == "icegov.demo"
    assert insert["actor"]["user"]["name"] == "admin"
    assert insert["policy"]["name"] == "p, admin, *, *, allow"
    assert insert["unmapped"]["icegov"]["evidence"][0]["classification"] == "INSERT"


def test_the_policy_version_is_the_policy_files_digest(written: Path) -> None:
    digest = read_files(POLICIES / "model.conf", POLICIES / "policy.csv").digest
    versions = {e["policy"]["version"] for e in lines(written / "audit.ocsf.jsonl")
                if "policy" in e}
    assert versions == {digest}


def test_denials_are_denied_and_blocked_with_the_rule_that_decided(written: Path) -> None:
    events = lines(written / "audit.ocsf.jsonl")
    denied = [e for e in events if e["unmapped"]["icegov"]["decision"] == "deny"]
    assert denied and all(e["action_id"] == 2 and e["disposition_id"] == 2 for e in denied)
    write = next(e for e in denied if e["unmapped"]["icegov"]["endpoint"] == "commit_table")
    assert write["class_uid"] == 6005 and write["actor"]["user"]["name"] == "analyst"
    assert write["severity_id"] == 3
    login = [e for e in events if e["unmapped"]["icegov"]["endpoint"] == "oauth_tokens"
             and e.get("status_code") == "401"]
    assert login and login[0]["class_uid"] == 6003 and login[0]["api"]["operation"] == \
        "oauth_tokens"


def test_reads_are_datastore_reads_and_queries(written: Path) -> None:
    events = lines(written / "audit.ocsf.jsonl")
    by_endpoint = {e["unmapped"]["icegov"]["endpoint"]: e for e in events
                   if e["action_id"] == 1}
    assert (by_endpoint["load_table"]["class_uid"], by_endpoint["load_table"]["activity_id"]) \
        == (6005, 1)
    assert by_endpoint["create_namespace"]["class_uid"] == 6003
    assert by_endpoint["create_namespace"]["activity_id"] == 1


@pytest.mark.parametrize("line", [[], {"time": "x"}, {
    "time": "yesterday", "request_id": "r", "method": "GET", "path": "/", "endpoint": "e",
    "decision": "allow"}])
def test_what_is_not_a_record_is_refused(line: Any) -> None:
    with pytest.raises(NotARecord):
        to_ocsf(line)


def test_the_validation_is_strict(written: Path) -> None:
    """The schemas refuse what OCSF does not define: the tests above would catch a bad event."""
    event = lines(written / "audit.ocsf.jsonl")[0]
    assert ocsf_errors({**event, "decision": "allow"})
    assert ocsf_errors({**event, "action_id": 7})
    assert ocsf_errors({k: v for k, v in event.items() if k != "actor"})


def test_the_export_writes_security_lake_partitions_pyarrow_reads_back(
        written: Path, tmp_path: Path) -> None:
    out = tmp_path / "lake"
    answer = CliRunner().invoke(main, ["audit", "export-ocsf", str(written / "audit.log"),
                                       "--out", str(out), "--region", "eu-west-1",
                                       "--account-id", "123456789012"])
    assert answer.exit_code == 0, answer.output
    records = lines(written / "audit.log")
    files = [Path(line) for line in answer.output.splitlines()]
    day = datetime.fromisoformat(records[0]["time"]).astimezone(UTC).strftime("%Y%m%d")
    assert {f.parent.relative_to(out).as_posix() for f in files} >= {
        f"datastore_activity/region=eu-west-1/accountId=123456789012/eventDay={day}",
        f"api_activity/region=eu-west-1/accountId=123456789012/eventDay={day}"}
    back = pq.read_table(out / "datastore_activity").to_pylist()
    back += pq.read_table(out / "api_activity").to_pylist()
    assert len(back) == len(records)
    by_hash = {row["metadata"]["uid"]: row for row in back}
    for record in records:
        row = by_hash[record["hash"]]
        assert row["region"] == "eu-west-1" and str(row["accountId"]) == "123456789012"
        event = {k: v for k, v in without_nulls(row).items()
                 if k not in ("region", "accountId", "eventDay")}
        event["unmapped"] = json.loads(event["unmapped"])
        expected = to_ocsf(record)
        assert event["unmapped"] == expected["unmapped"]
        assert _but_unmapped(event) == without_nulls(_but_unmapped(expected))
        assert ocsf_errors(event) == []


def _but_unmapped(event: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in event.items() if k != "unmapped"}


def test_the_export_refuses_a_line_that_is_no_record_and_writes_nothing(
        written: Path, tmp_path: Path) -> None:
    bad = tmp_path / "audit.log"
    bad.write_text((written / "audit.log").read_text() + '{"not": "a record"}\n')
    answer = CliRunner().invoke(main, ["audit", "export-ocsf", str(bad),
                                       "--out", str(tmp_path / "lake")])
    assert answer.exit_code == 2 and "audit.log:" in answer.output
    assert not (tmp_path / "lake").exists()
    answer = CliRunner().invoke(main, ["audit", "export-ocsf", str(written / "audit.log"),
                                       "--out", str(tmp_path / "lake"), "--region", "../x"])
    assert answer.exit_code == 2 and not (tmp_path / "lake").exists()


def test_each_worker_writes_its_own_ocsf_file(tmp_path: Path) -> None:
    settings = load_settings(audit={"file": str(tmp_path / "audit.log"),
                                    "ocsf_file": str(tmp_path / "audit.ocsf.jsonl")})
    assert for_worker(settings, 2, tmp_path).audit.ocsf_file == tmp_path / "audit.ocsf.w2.jsonl"
    assert for_worker(load_settings(audit={"file": None}), 2, tmp_path).audit.ocsf_file is None


def test_the_tests_watch_catches_an_invalid_event(tmp_path: Path) -> None:
    """The guard every test runs after it (``tests.support.ocsf_watch``) fails on an event that
    breaks its class's schema, and reads a growing file once."""
    path = ocsf_watch.watch(tmp_path / "audit.ocsf.jsonl")
    record = {"time": "2026-11-28T06:00:00.000+00:00", "request_id": "r", "method": "GET",
              "path": "/v1/config", "endpoint": "config", "decision": "public", "status": 200}
    event = to_ocsf(record)
    path.write_text(json.dumps(event) + "\n")
    ocsf_watch.check_written()  # valid: passes, and is not read again
    path.write_text(path.read_text() + json.dumps({**event, "severity_id": "high"}) + "\n")
    with pytest.raises(AssertionError, match="severity_id"):
        ocsf_watch.check_written()
    path.unlink()
    ocsf_watch.check_written()  # a file gone is nothing to check


def test_a_table_read_refused_before_its_table_is_named_is_api_activity() -> None:
    record = {"time": "2026-11-28T06:00:00.000+00:00", "request_id": "r", "method": "GET",
              "path": "/v1/namespaces/db/tables/A%00", "endpoint": "load_table",
              "decision": "refused", "status": 400, "resources": []}
    event = to_ocsf(record)
    assert event["class_uid"] == 6003
    assert ocsf_errors(event) == []
