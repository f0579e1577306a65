"""Round 9b: an attacker's review of the round-9 fixes (audit notes of purges, registers and
placed creates; ``/readyz`` on 404/401/403; the cached time stamp and encoder of the audit
record; whole-string matches; bounded OIDC names and stored content types).

Each test states the SECURE behaviour: a test that fails today pins a finding.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.audit import record as audit_record
from tests.support.audit import (
    no_icegov_environment,  # noqa: F401
    request_records,
)
from tests.support.errors import assert_error_model
from tests.support.upstream import Upstream, client_for

pytestmark = pytest.mark.usefixtures("no_icegov_environment")  # no ICEGOV__* of the shell


def records(log: Path) -> list[dict[str, Any]]:
    return request_records(log)


# --------------------------------------------------------------- the purge note


@pytest.mark.parametrize("query", [
    "PurgeRequested=true",            # Quarkus REST (Polaris): @QueryParam is case-insensitive
    "PURGEREQUESTED=true",            # (quarkusio/quarkus#31060, vert.x#2096)
    "x=1;purgeRequested=true",        # Quarkus REST splits the query on ";" (quarkus#50685)
])
def test_a_purge_the_backing_honours_is_noted_however_it_is_spelled(
        tmp_path: Path, query: str) -> None:
    """The purge note reads ``purgeRequested`` with Python's ``parse_qs`` (case-sensitive
    names, ``&`` only) and forwards the query byte for byte. Apache Polaris (Quarkus REST)
    reads query names case-insensitively and splits on ``;`` too: it purges every data file
    while the audit record reads like a plain, reversible drop (``evidence: []``)."""
    upstream = Upstream(lambda _: httpx.Response(204))
    with client_for(upstream, tmp_path) as client:
        answer = client.delete(f"/v1/namespaces/db/tables/t?{query}")
    if answer.status_code == 400:  # refusing a query the note cannot read is secure too
        return
    assert answer.status_code == 204
    assert str(upstream.seen[0].url).endswith(query)  # sent on byte for byte
    (record,) = records(tmp_path / "audit.log")
    assert "purge" in json.dumps(record["evidence"]).lower(), record["evidence"]


# --------------------------------------------------------------- the location notes


def test_a_padded_metadata_location_still_names_the_file_it_adopts(tmp_path: Path) -> None:
    """The note keeps the first 2048 characters of a location. Hadoop's ``Path`` (HadoopFileIO:
    hdfs://, s3a://, abfs://, file://) collapses ``//`` and ``./`` segments, so a register
    padded after its scheme adopts another table's metadata file while the record keeps only
    the padding: the very thing the note is for (whose files the new table reads) is cut."""
    victim = "hr/salaries/metadata/00007-abc.metadata.json"
    padded = "hdfs://nn/warehouse/" + "./" * 1100 + victim
    upstream = Upstream(lambda _: httpx.Response(200, json={"metadata-location": "m",
                                                            "metadata": {}}))
    with client_for(upstream, tmp_path) as client:
        answer = client.post("/v1/namespaces/db/register",
                             json={"name": "copy", "metadata-location": padded})
    assert answer.status_code == 200
    (record,) = records(tmp_path / "audit.log")
    assert victim in json.dumps(record["evidence"]), record["evidence"]


def test_a_create_by_commit_names_the_place_it_chooses(tmp_path: Path) -> None:
    """A create can be sent as a commit (``assert-create`` with ``set-location``: what a staged
    create / CTAS sends). icegov judges it like a placed create (REGISTER_TABLE is among the
    record's actions) but, unlike ``createTable``'s, the record never names the location: a
    table made over another table's files this way leaves no trace of whose files."""
    victim = "file:///warehouse/hr/salaries"
    upstream = Upstream(lambda _: httpx.Response(200, json={"metadata-location": "m",
                                                            "metadata": {}}))
    with client_for(upstream, tmp_path) as client:
        answer = client.post("/v1/namespaces/db/tables/t", json={
            "requirements": [{"type": "assert-create"}],
            "updates": [{"action": "set-location", "location": victim}]})
    assert answer.status_code == 200
    (record,) = records(tmp_path / "audit.log")
    assert "REGISTER_TABLE" in record["actions"]
    assert victim in json.dumps(record["evidence"]), record["evidence"]


# --------------------------------------------------------------- readiness


@pytest.mark.parametrize("answer", [
    httpx.Response(302, headers={"location": "https://sso.example/login"}),  # an SSO gateway
    httpx.Response(400, json={"error": {"message": "Please specify a warehouse",
                                        "type": "BadRequestException", "code": 400}}),
    httpx.Response(200, text="<html>default backend</html>",
                   headers={"content-type": "text/html"}),  # an ingress, not a catalog
], ids=["302", "400", "200-not-json"])
def test_readyz_is_not_ready_while_no_governed_request_can_be_served(
        tmp_path: Path, answer: httpx.Response) -> None:
    """icegov needs the backing's config (a JSON object, 200) before it serves any governed
    request; ``/readyz`` now refuses 5xx, 404 and 401/403 but still answers ``ready`` to a
    redirect, a 400 or a 200 that is no catalog config, while every request answers 503."""
    upstream = Upstream(lambda _: answer, config=False)
    with client_for(upstream, tmp_path) as client:
        served = client.get("/v1/namespaces/db")
        assert served.status_code == 503  # nothing is served
        ready = client.get("/readyz")
    assert_error_model(ready, 503, "ServiceUnavailableException")


# --------------------------------------------------------------- the cached time stamp


def test_the_cached_seconds_are_read_once_per_stamp(monkeypatch: pytest.MonkeyPatch) -> None:
    """``utc_now_ms`` reads the module-global ``_second`` twice (its second, then its text):
    another thread that replaces it in between (a writer whose clock read was a second older
    or newer) gives this stamp another second's text. The audit log is built for threads (a
    ``threading.Lock``) and now calls ``to_event`` outside it. Simulated deterministically:
    the "other thread" runs between the two reads."""
    now = 1_795_000_001_250_000_000  # 2026-11-18T...:41.250
    second = now // 10**9
    monkeypatch.setattr(audit_record.time, "time_ns", lambda: now)
    audit_record.utc_now_ms()  # the cache holds this second

    class Interleaved(tuple):  # type: ignore[type-arg]
        def __getitem__(self, index: Any) -> Any:
            if index == 0:  # another thread, a second behind, refreshes the cache now
                audit_record._second = (second - 1, "2001-01-01T00:00:00")
            return tuple.__getitem__(self, index)

    monkeypatch.setattr(audit_record, "_second",
                        Interleaved(audit_record._second))  # type: ignore[attr-defined]
    stamp = audit_record.utc_now_ms()
    from datetime import UTC, datetime
    assert stamp == datetime.fromtimestamp(now / 10**9, UTC).isoformat(timespec="milliseconds")


# --------------------------------------------------------------- the fixes' other doors


def test_namespace_and_transaction_places_are_noted(tmp_path: Path) -> None:
    """Every door that sets where files go names the place: a namespace's ``location`` (create
    and properties update) and each table of a transaction that sets a location."""
    upstream = Upstream(lambda r: httpx.Response(
        200, json={"namespace": ["ns"], "properties": {}} if r.url.path.endswith("namespaces")
        else {"updated": ["location"], "removed": [], "missing": []}))
    with client_for(upstream, tmp_path) as client:
        client.post("/v1/namespaces", json={"namespace": ["ns"],
                                             "properties": {"location": "file:///w/hr"}})
        client.post("/v1/namespaces/ns/properties",
                    json={"updates": {"location": "file:///w/finance"}, "removals": []})
    created, updated = records(tmp_path / "audit.log")
    assert created["evidence"] == [{"resource": "icegov.ns", "location": "file:///w/hr"}]
    assert updated["evidence"] == [{"resource": "icegov.ns", "location": "file:///w/finance"}]


@pytest.mark.parametrize("query", ["PageToken=abc", "pagesize=5", "Parent=db"])
def test_a_spec_query_parameter_in_another_case_is_refused(
        tmp_path: Path, query: str) -> None:
    """A backing that matches names case-insensitively would act on a parameter icegov never
    read (a page it did not bind, a parent it did not authorize): 400 before anything."""
    upstream = Upstream()
    with client_for(upstream, tmp_path) as client:
        answer = client.get(f"/v1/namespaces?{query}")
    assert_error_model(answer, 400, "BadRequestException")
    assert not [r for r in upstream.seen if "namespaces" in r.url.path]
