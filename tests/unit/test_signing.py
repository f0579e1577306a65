"""S3 remote signing (``proxy.signing``): SigV4 as botocore computes it, the parsed request and
its smuggling variants, the decision, the grant, and the service's checks and read audit."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any
from unittest import mock

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials

from proxy.audit import AuditLog, AuditRecord
from proxy.audit.record import AGGREGATED, aggregated
from proxy.audit.settings import AuditSettings
from proxy.errors import BadRequest, Forbidden
from proxy.governance import Principal
from proxy.signing.decide import decide
from proxy.signing.grants import Grant, seal_grant, unseal_grant
from proxy.signing.service import ENDPOINT, Signer
from proxy.signing.settings import SigningSettings
from proxy.signing.sigv4 import Credentials, sign
from proxy.signing.tally import ReadTally
from proxy.signing.wire import Operation, Store, parse_sign_request

ENDPOINT_URL = "http://127.0.0.1:9000"
STORE = Store.from_file_io({"s3.endpoint": ENDPOINT_URL})
KEY = b"k" * 48
FILE_IO = {"s3.endpoint": ENDPOINT_URL, "s3.region": "us-east-1", "s3.access-key-id": "AK",
           "s3.secret-access-key": "SK"}
ROOTS = ("s3://b/wh/db/t",)


def request(uri: str, method: str = "GET", headers: dict[str, list[str]] | None = None) -> Any:
    return {"region": "us-east-1", "uri": uri, "method": method, "headers": headers or {}}


def grant(**changes: Any) -> Grant:
    values: dict[str, Any] = dict(principal="alice", roles=("analyst",), table="icegov.db.t",
                                  table_uuid="u", roots=ROOTS, governed="", view="",
                                  write=False, generation=1, expires_at=2e9)
    values.update(changes)
    return Grant(**values)


def test_sigv4_matches_botocore() -> None:
    url = f"{ENDPOINT_URL}/b/wh/a%20b/x.parquet?partNumber=1&uploadId=abc%2Fd"
    boto = AWSRequest("PUT", url, headers={"If-None-Match": "*",
                                           "x-amz-checksum-crc32": "NSRBwg=="})
    with mock.patch("botocore.auth.datetime") as clock:
        clock.datetime.now.return_value = datetime.datetime(2024, 1, 2, 3, 4, 5)
        clock.datetime.utcnow.return_value = datetime.datetime(2024, 1, 2, 3, 4, 5)
        S3SigV4Auth(BotoCredentials("AK", "SK"), "s3", "eu-west-1").add_auth(boto)
    h = boto.headers
    ours = sign("PUT", url, {"Host": "127.0.0.1:9000", "X-Amz-Date": h["X-Amz-Date"],
                             "x-amz-content-sha256": h["X-Amz-Content-SHA256"],
                             "If-None-Match": "*", "x-amz-checksum-crc32": "NSRBwg=="},
                Credentials("AK", "SK"), "eu-west-1", h["X-Amz-Date"])
    assert ours == h["Authorization"]


def test_a_ranged_read_parses_to_one_object() -> None:
    parsed, region = parse_sign_request(
        request(f"{ENDPOINT_URL}/b/wh/db/t/data/a%20b.parquet", headers={"Range": ["bytes=0-9"]}),
        STORE, None)
    assert (parsed.operation, parsed.location, region) == (
        Operation.READ, "s3://b/wh/db/t/data/a b.parquet", "us-east-1")
    assert parsed.url == f"{ENDPOINT_URL}/b/wh/db/t/data/a%20b.parquet"


def test_virtual_hosted_and_multipart_requests_parse() -> None:
    store = Store.from_file_io({})
    parsed, _ = parse_sign_request(
        request("https://b.s3.us-east-1.amazonaws.com/wh/x?uploadId=u1&partNumber=2&x-id=UploadPart",
                "PUT"), store, None)
    assert (parsed.operation, parsed.location, parsed.path_style) == (
        Operation.UPLOAD_PART, "s3://b/wh/x", False)
    created, _ = parse_sign_request(request(f"{ENDPOINT_URL}/b/wh/x?uploads", "POST"), STORE, None)
    assert created.operation is Operation.CREATE_UPLOAD


@pytest.mark.parametrize(("uri", "method", "headers"), [
    ("/b/wh/db/t/../u/x", "GET", {}),
    ("/b/wh/db/t/%2e%2e/u/x", "GET", {}),
    ("/b/wh/db/t/%2E%2E/u/x", "GET", {}),
    ("/b/wh/db/t/%252e%252e/u/x", "GET", {}),
    ("/b/wh/db//t/x", "GET", {}),
    ("/b/wh/db/t/./x", "GET", {}),
    ("/b/wh/db/t/x%00", "GET", {}),
    ("/b/wh/db/t/x?response-content-type=text/html", "GET", {}),
    ("/b/wh/db/t/x?versionId=1", "GET", {}),
    ("/b/wh/db/t/x?x-id=DeleteObject", "GET", {}),
    ("/b/wh/db/t/x?x-id=GetObject&x-id=GetObject", "GET", {}),
    ("/b/wh/db/t/x?acl", "GET", {}),
    ("/b?list-type=2&prefix=wh", "GET", {}),
    ("/b", "GET", {}),
    ("/b/wh/db/t/x", "DELETE", {}),
    ("/b/?delete", "POST", {}),
    ("/b/wh/db/t/x?uploadId=u", "DELETE", {}),
    ("/b/wh/db/t/x", "PUT", {"x-amz-copy-source": ["/b/wh/secret"]}),
    ("/b/wh/db/t/x", "PUT", {"X-Amz-Copy-Source-Range": ["bytes=0-9"]}),
    ("/b/wh/db/t/x", "PUT", {"x-amz-acl": ["public-read"]}),
    ("/b/wh/db/t/x", "PUT", {"x-amz-website-redirect-location": ["/x"]}),
    ("/b/wh/db/t/x", "GET", {"Range": ["a"], "range": ["b"]}),
])
def test_smuggling_variants_are_refused(uri: str, method: str,
                                        headers: dict[str, list[str]]) -> None:
    with pytest.raises(Forbidden):
        parse_sign_request(request(ENDPOINT_URL + uri, method, headers), STORE, None)


@pytest.mark.parametrize("uri", [
    "http://127.0.0.1:9001/b/wh/db/t/x", "https://127.0.0.1:9000/b/wh/db/t/x",
    "http://evil@127.0.0.1:9000/b/wh/db/t/x", "http://s3.amazonaws.com/b/wh/db/t/x",
    "http://a.b.127.0.0.1:9000/wh/db/t/x", "http://127.0.0.1:9000/b/wh/db/t/x#frag"])
def test_other_stores_are_refused(uri: str) -> None:
    with pytest.raises(Forbidden):
        parse_sign_request(request(uri), STORE, None)


@pytest.mark.parametrize("body", [[], {"uri": 1}, {"region": "us-east-1", "uri": "x",
                                                   "method": "GET", "headers": {"a": "b"}}])
def test_a_malformed_sign_request_is_400(body: Any) -> None:
    with pytest.raises(BadRequest):
        parse_sign_request(body, STORE, None)


def parsed(path: str, method: str = "GET") -> Any:
    return parse_sign_request(request(ENDPOINT_URL + path, method), STORE, None)[0]


def test_an_ungoverned_principal_reads_under_the_table_only() -> None:
    decide(grant(), parsed("/b/wh/db/t/data/x.parquet"), None)
    for outside in ("/b/wh/db/t2/data/x.parquet", "/b/wh/db/x", "/other/wh/db/t/x"):
        with pytest.raises(Forbidden):
            decide(grant(), parsed(outside), None)


def test_a_governed_principal_reads_exactly_its_listed_files() -> None:
    governed = grant(governed="s3://b/g/u/v/metadata/m.metadata.json", view="v")
    listed = frozenset({"s3://b/wh/db/t/data/ok.parquet", "s3://b/g/u/v/data/c.parquet"})
    decide(governed, parsed("/b/wh/db/t/data/ok.parquet"), listed)
    decide(governed, parsed("/b/g/u/v/data/c.parquet"), listed)
    with pytest.raises(Forbidden):  # a base file of the table its snapshots do not list
        decide(governed, parsed("/b/wh/db/t/data/mixed.parquet"), listed)


def test_writes_need_a_write_right_and_stay_under_the_table() -> None:
    decide(grant(write=True), parsed("/b/wh/db/t/data/new.parquet", "PUT"), None)
    with pytest.raises(Forbidden):
        decide(grant(), parsed("/b/wh/db/t/data/new.parquet", "PUT"), None)
    with pytest.raises(Forbidden):
        decide(grant(write=True), parsed("/b/wh/db/other/new.parquet", "PUT"), None)


def test_s3a_roots_admit_s3_requests() -> None:
    decide(grant(roots=("s3a://b/wh/db/t",)), parsed("/b/wh/db/t/x"), None)


def test_a_grant_round_trips_and_forgery_or_expiry_is_refused() -> None:
    token = seal_grant(grant(), KEY)
    assert unseal_grant(token, KEY, 0) == grant()
    head, body, mac = token.split(".")
    for forged in (f"{head}.{body}.{mac[:-2]}AA", f"{head}.{body[:-2]}AA.{mac}", "g1.x.y", ""):
        with pytest.raises(Forbidden):
            unseal_grant(forged, KEY, 0)
    with pytest.raises(Forbidden):
        unseal_grant(token, b"o" * 48, 0)
    with pytest.raises(Forbidden, match="expired"):
        unseal_grant(token, KEY, 2e9)


def test_reads_are_tallied_per_window() -> None:
    tally = ReadTally(60)
    key = ("alice", "t", "", "")
    assert tally.count(key, "a", 0) == {"reads": 0, "objects": 0, "window_seconds": 60}
    assert tally.count(key, "a", 1) is None
    assert tally.count(key, "b", 2) is None
    assert tally.due(30) == []
    assert tally.count(key, "c", 61) == {"reads": 2, "objects": 2, "window_seconds": 60}
    assert tally.count(key, "c", 62) is None
    assert tally.due(200) == [(key, {"reads": 1, "objects": 1, "window_seconds": 60})]


class Written(AuditLog):
    def __init__(self) -> None:
        super().__init__(AuditSettings(), sinks=[])
        self.records: list[AuditRecord] = []

    def write(self, record: AuditRecord) -> None:
        self.records.append(record)


def signer(generation: list[int]) -> tuple[Signer, Written]:
    audit = Written()
    return Signer(SigningSettings(enabled=True), FILE_IO, KEY, lambda: generation[0], audit,
                  clock=lambda: 1_700_000_000.0), audit


ALICE = Principal("alice", ("analyst",))


def token_of(service: Signer, **changes: Any) -> str:
    endpoint = service.advert(service.grant(ALICE, "icegov.db.t", "u", ROOTS,
                                            changes.get("write", False)))
    prefix = f"{ENDPOINT}/"
    assert endpoint["s3.remote-signing-enabled"] == "true"
    return endpoint["s3.signer.endpoint"].removeprefix(prefix)


def test_a_put_is_signed_with_if_none_match_and_reads_are_aggregated() -> None:
    service, _ = signer([1])
    token = token_of(service, write=True)
    evidence: list[dict[str, Any]] = []
    answer = asyncio.run(service.sign(token, ALICE, request(
        f"{ENDPOINT_URL}/b/wh/db/t/data/n.parquet", "PUT"), evidence))
    assert answer["headers"]["if-none-match"] == ["*"]
    assert "if-none-match" in answer["headers"]["authorization"][0]
    assert evidence[0]["signing"]["decision"] == "allow"
    reads = []
    for _ in range(3):
        record = AuditRecord("r", "POST", "/", "sign_s3_request")
        asyncio.run(service.sign(token, ALICE, request(
            f"{ENDPOINT_URL}/b/wh/db/t/data/n.parquet"), record.evidence))
        reads.append(aggregated(record))
    assert reads == [False, True, True]
    assert AGGREGATED not in evidence


def test_another_principal_or_a_policy_reload_cannot_use_a_grant() -> None:
    generation = [1]
    service, _ = signer(generation)
    token = token_of(service)
    body = request(f"{ENDPOINT_URL}/b/wh/db/t/x")
    with pytest.raises(Forbidden, match="another principal"):
        asyncio.run(service.sign(token, Principal("alice"), body, []))
    generation[0] = 2
    with pytest.raises(Forbidden, match="policy changed"):
        asyncio.run(service.sign(token, ALICE, body, []))


def test_a_refusal_is_noted_as_a_deny() -> None:
    service, _ = signer([1])
    evidence: list[dict[str, Any]] = []
    with pytest.raises(Forbidden):
        asyncio.run(service.sign(token_of(service), ALICE, request(
            f"{ENDPOINT_URL}/b/wh/db/u/x"), evidence))
    assert evidence[0]["signing"]["decision"] == "deny"
