"""Round 9: an attacker's review of the operations surface (metrics, audit v2 and verify,
fail-closed audit, health and readiness, request ids, workers and the shared key store).

Each test states the SECURE behaviour: a test that fails today pins a finding (see the module's
report); the few that pass pin secure behaviour verified in this round.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from proxy.app import Backing, create_app
from proxy.audit import AuditSettings
from proxy.audit.verify import verify
from tests.support.audit import AuditDisk, no_icegov_environment, request_records, written  # noqa: F401
from tests.support.errors import assert_error_model
from tests.support.settings import settings_for_tests
from tests.support.upstream import UPSTREAM, Upstream, client_for

pytestmark = pytest.mark.usefixtures("no_icegov_environment")  # no ICEGOV__* of the shell


def records(log: Path) -> list[dict[str, Any]]:
    return request_records(log)


def shell_glob(log: Path) -> list[Path]:
    """What ``icegov audit verify audit.log.[0-9]* audit.log`` (proxy/audit/README.md) checks."""
    return [*sorted(log.parent.glob(f"{log.name}.[0-9]*")), log]


# --------------------------------------------------------------- audit: what a record says


def test_a_purge_is_told_apart_from_a_plain_drop_in_the_audit_record(tmp_path: Path) -> None:
    """``DROP TABLE ... PURGE`` deletes every data file of the table (irreversible); a plain
    drop leaves them, and the table can be registered again. The purge flag travels in the query
    string, which the audit record leaves out: both records read the same."""
    upstream = Upstream(lambda _: httpx.Response(204))
    with client_for(upstream, tmp_path) as client:
        purged = client.delete("/v1/namespaces/db/tables/t", params={"purgeRequested": "true"})
        dropped = client.delete("/v1/namespaces/db/tables/u")
    assert (purged.status_code, dropped.status_code) == (204, 204)
    assert str(upstream.seen[0].url).endswith("?purgeRequested=true")  # the backing purged
    purge_record, drop_record = records(tmp_path / "audit.log")
    assert "purge" in json.dumps(purge_record).lower(), purge_record
    assert "purge" not in json.dumps(drop_record).lower()


def test_a_register_records_which_metadata_file_it_registered(tmp_path: Path) -> None:
    """Registering a metadata file is how a table is made over another table's files (the reason
    it needs ``REGISTER_TABLE``); the audit record names only the new table, never the file,
    so an investigation cannot tell whose files the new table reads."""
    upstream = Upstream(lambda _: httpx.Response(200, json={"metadata-location": "m",
                                                            "metadata": {}}))
    victim = "file:///warehouse/hr/salaries/metadata/00007-abc.metadata.json"
    with client_for(upstream, tmp_path) as client:
        answer = client.post("/v1/namespaces/db/register",
                             json={"name": "copy", "metadata-location": victim})
    assert answer.status_code == 200
    (record,) = records(tmp_path / "audit.log")
    assert victim in json.dumps(record), record


# --------------------------------------------------------------- audit files: the chain


def test_a_torn_first_line_never_makes_icegov_set_its_own_records_aside(tmp_path: Path) -> None:
    """A crash tears the first record of a freshly rotated live file. The next start closes the
    tear with a newline (it "stays visible") and appends records 4 and 5. The start after that
    takes the file for a version-1 file (its first line is no v2 record), renames it
    ``audit.log.legacy-*`` and resumes the chain from the newest rotated file: a second seq 4
    supersedes the real 4 and 5, and the documented verification says ``ok``."""
    log = tmp_path / "audit.log"
    written(log, 3, rotate_bytes=1)  # one record per file: seq 1, 2 rotated, 3 live
    third = log.read_bytes()
    os.rename(log, tmp_path / "audit.log.000000000003-20260101T000000.000000Z")  # rotation
    log.write_bytes(third[:40])  # ...and the crash while writing seq 4 into the new live file
    written(log, 2)  # restart: the tear is closed with a newline, seq 4 and 5 follow
    session_two = [r["hash"] for r in
                   (json.loads(line) for line in log.read_bytes().splitlines()[1:])]
    assert len(session_two) == 2
    written(log, 1)  # another restart
    assert not list(tmp_path.glob("audit.log.legacy-*")), "genuine v2 records set aside"
    checked = b"".join(p.read_bytes() for p in shell_glob(log))
    for sealed in session_two:  # the records written after the tear stay in the chain checked
        assert sealed.encode() in checked
    assert not str(verify(shell_glob(log))).startswith("ok"), "a forked chain passes as whole"


# --------------------------------------------------------------- readiness


@pytest.mark.parametrize("status", [401, 403, 404])
def test_readyz_is_not_ready_while_the_backing_refuses_every_request(
        tmp_path: Path, status: int) -> None:
    """The backing refuses icegov's own credential (a revoked ``--catalog-token``) or does not
    serve the configured URI at all: every governed request fails, yet ``/readyz`` answers
    ``ready`` (only a 5xx counts), so a load balancer keeps sending traffic to the replica."""
    error = {"error": {"message": "no", "type": "NotAuthorizedException", "code": status}}
    upstream = Upstream(lambda _: httpx.Response(status, json=error), config=False)
    with client_for(upstream, tmp_path) as client:
        served = client.get("/v1/namespaces/db")
        assert served.status_code >= 400  # the catalog is not being served
        ready = client.get("/readyz")
    assert_error_model(ready, 503, "ServiceUnavailableException")


# --------------------------------------------------------------- request ids


def test_a_request_id_with_a_trailing_newline_is_not_taken_as_sane(tmp_path: Path) -> None:
    """``_SAFE_ID`` ends with ``$``, which also matches before a final newline: ``abc\\n`` is
    taken as the request id, echoed back as a response header value holding a line feed and
    written to the log and the audit record. (uvicorn's own parsers strip the newline, so this
    is reachable only behind another ASGI server: defence in depth.)"""
    upstream = Upstream()
    with client_for(upstream, tmp_path) as client:
        answer = client.get("/v1/namespaces/db", headers={"x-request-id": "abc\n"})
    echoed = answer.headers["x-request-id"]
    assert "\n" not in echoed, repr(echoed)
    (record,) = records(tmp_path / "audit.log")
    assert "\n" not in record["request_id"]


# --------------------------------------------------------------- fail closed: pinned


def test_fail_closed_refuses_an_idempotent_replay_while_the_audit_is_down(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pinned (secure today): a replay changes nothing at the backing, but while the audit
    cannot be written it is refused like any change, and answers again once it can."""
    disk = AuditDisk(monkeypatch)
    upstream = Upstream(lambda _: httpx.Response(200, json={"namespace": ["x"],
                                                            "properties": {}}))
    settings = settings_for_tests(tmp_path, anonymous_admin=True, catalog_uri=UPSTREAM,
                                  idempotency={"db_uri": f"sqlite:///{tmp_path / 'keys.db'}"})
    audit = AuditSettings(stdout=False, file=tmp_path / "audit.log", fail_closed=True)
    app = create_app(settings.model_copy(update={"audit": audit}),
                     Backing(httpx.MockTransport(upstream), UPSTREAM))
    key = {"idempotency-key": str(uuid.uuid4())}
    with TestClient(app, raise_server_exceptions=False) as client:
        first = client.post("/v1/namespaces", json={"namespace": ["x"]}, headers=key)
        assert first.status_code == 200
        disk.full = True
        client.get("/v1/namespaces/db")  # the failed write that opens the refusals
        refused = client.post("/v1/namespaces", json={"namespace": ["x"]}, headers=key)
        assert_error_model(refused, 503, "ServiceUnavailableException")
        disk.full = False
        client.get("/v1/namespaces/db")
        replayed = client.post("/v1/namespaces", json={"namespace": ["x"]}, headers=key)
    assert replayed.status_code == 200
    assert replayed.headers.get("idempotent-replayed") == "true"
    assert len([r for r in upstream.seen if r.method == "POST"]) == 1


# --------------------------------------------------------------- the fixes' other edges


def test_a_create_that_places_its_own_files_names_the_place_in_the_record(
        tmp_path: Path) -> None:
    """Like a register, a create with ``location`` or ``write.*.path`` may point at another
    table's files: the record names the place, cut to a bounded length."""
    upstream = Upstream(lambda _: httpx.Response(200, json={"metadata": {}}))
    place = "file:///warehouse/hr/salaries/" + "x" * 5000
    with client_for(upstream, tmp_path) as client:
        client.post("/v1/namespaces/db/tables", json={
            "name": "t", "location": place, "schema": {"type": "struct", "fields": []},
            "properties": {"write.data.path": "file:///elsewhere"}})
    (record,) = records(tmp_path / "audit.log")
    (noted,) = record["evidence"]
    assert noted["location"].startswith("file:///warehouse/hr/salaries/xxx")
    assert f"({len(place)} characters, sha256 " in noted["location"]
    assert len(noted["location"]) < 2200 and noted["location"].endswith("x" * 1024)
    assert noted["write.data.path"] == "file:///elsewhere"


def test_readyz_stays_ready_when_the_backing_is_meant_to_see_callers_tokens(
        tmp_path: Path) -> None:
    """With the caller's token passed through, icegov's own anonymous look at the config is
    refused by design: that is no reason to take the replica out of service. A 404 (no
    catalog at that URI) still is."""
    error = {"error": {"message": "no", "type": "NotAuthorizedException", "code": 401}}
    upstream = Upstream(lambda _: httpx.Response(401, json=error), config=False)
    with client_for(upstream, tmp_path,
                    identity={"pass_through_caller_token": True}) as client:
        assert client.get("/readyz").status_code == 200


def test_a_path_with_a_trailing_newline_matches_no_route() -> None:
    """Routes match whole paths: ``$`` would also match before a final newline."""
    from proxy.routes import RouteTable

    routes = RouteTable()
    assert routes.match("GET", "/v1/config") is not None
    assert routes.match("GET", "/v1/config\n") is None
    assert not routes.path_known("/v1/namespaces/db/tables/t/metrics\n")


def test_an_answer_with_an_overlong_content_type_is_still_kept_and_replayed(
        tmp_path: Path) -> None:
    """The store's content-type column is bounded: a backing's longer one is not kept (the
    replay answers without it) instead of failing the store."""
    long_type = "application/json; " + "x=y; " * 100
    upstream = Upstream(lambda _: httpx.Response(
        200, content=b'{"namespace": ["x"], "properties": {}}',
        headers={"content-type": long_type}))
    key = {"idempotency-key": str(uuid.uuid4())}
    with client_for(upstream, tmp_path,
                    idempotency={"db_uri": f"sqlite:///{tmp_path / 'keys.db'}"}) as client:
        first = client.post("/v1/namespaces", json={"namespace": ["x"]}, headers=key)
        again = client.post("/v1/namespaces", json={"namespace": ["x"]}, headers=key)
    assert (first.status_code, again.status_code) == (200, 200)
    assert again.headers.get("idempotent-replayed") == "true"
    assert again.json() == {"namespace": ["x"], "properties": {}}
    assert again.headers.get("content-type") != long_type  # not kept: the column is bounded
    assert len([r for r in upstream.seen if r.method == "POST"]) == 1
