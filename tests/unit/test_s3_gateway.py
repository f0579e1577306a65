"""The tests' S3 gateway (``tests.support.s3_gateway``) forwards only validly signed requests:
what botocore signs with the store's keys passes (header-signed and presigned), anything
unsigned, signed with another key, tampered with after signing or expired is refused with S3's
403 XML before it reaches moto."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import httpx
import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from tests.support.s3 import ACCESS_KEY, BUCKET, REGION, SECRET_KEY, S3Store, s3_server
from tests.support.s3_gateway import S3Gateway, Verifier, s3_gateway

KEYS = {ACCESS_KEY: SECRET_KEY}


@pytest.fixture(scope="module")
def gateway() -> Iterator[S3Gateway]:
    with s3_server() as store, s3_gateway(store.endpoint, KEYS) as running:
        yield running


def client(gateway: S3Gateway, secret: str = SECRET_KEY) -> Any:
    return boto3.client("s3", endpoint_url=gateway.endpoint, region_name=REGION,
                        aws_access_key_id=ACCESS_KEY, aws_secret_access_key=secret,
                        config=Config(signature_version="s3v4"))


def signed_get(gateway: S3Gateway, key: str) -> AWSRequest:
    request = AWSRequest(method="GET", url=f"{gateway.endpoint}/{BUCKET}/{key}")
    request.headers["X-Amz-Content-SHA256"] = "UNSIGNED-PAYLOAD"
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", REGION).add_auth(request)
    return request


def test_a_botocore_signed_request_passes(gateway: S3Gateway) -> None:
    s3 = client(gateway)
    s3.put_object(Bucket=BUCKET, Key="gw/a.txt", Body=b"hello")
    assert s3.get_object(Bucket=BUCKET, Key="gw/a.txt")["Body"].read() == b"hello"
    assert s3.head_object(Bucket=BUCKET, Key="gw/a.txt")["ContentLength"] == 5
    assert S3Store(gateway.endpoint).keys("gw/") == ["gw/a.txt"]


def test_a_presigned_url_passes(gateway: S3Gateway) -> None:
    client(gateway).put_object(Bucket=BUCKET, Key="gw/p.txt", Body=b"presigned")
    url = client(gateway).generate_presigned_url(
        "get_object", Params={"Bucket": BUCKET, "Key": "gw/p.txt"}, ExpiresIn=60)
    assert httpx.get(url).content == b"presigned"
    tampered = url.replace("gw/p.txt", "gw/a.txt")
    assert httpx.get(tampered).status_code == 403


def test_an_unsigned_request_is_refused(gateway: S3Gateway) -> None:
    response = httpx.get(f"{gateway.endpoint}/{BUCKET}/gw/a.txt")
    assert response.status_code == 403
    assert b"<Code>AccessDenied</Code>" in response.content
    assert httpx.put(f"{gateway.endpoint}/{BUCKET}/gw/b.txt", content=b"x").status_code == 403


def test_a_request_signed_with_another_secret_is_refused(gateway: S3Gateway) -> None:
    with pytest.raises(ClientError) as refused:
        client(gateway, secret="not-the-secret").get_object(Bucket=BUCKET, Key="gw/a.txt")
    assert refused.value.response["Error"]["Code"] == "SignatureDoesNotMatch"


def test_a_request_tampered_with_after_signing_is_refused(gateway: S3Gateway) -> None:
    client(gateway).put_object(Bucket=BUCKET, Key="gw/a.txt", Body=b"hello")  # on its own
    request = signed_get(gateway, "gw/a.txt")
    headers = dict(request.headers.items())
    assert httpx.get(request.url, headers=headers).content == b"hello"
    other = request.url.replace("gw/a.txt", "gw/p.txt")
    assert httpx.get(other, headers=headers).status_code == 403
    assert httpx.get(request.url + "?acl", headers=headers).status_code == 403
    assert httpx.put(request.url, headers=headers, content=b"x").status_code == 403


def test_a_payload_that_does_not_match_its_signed_hash_is_refused() -> None:
    request = AWSRequest(method="PUT", url="http://store/b/k", data=b"signed body")
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", REGION).add_auth(request)
    headers = {name.lower(): value for name, value in request.headers.items()} | {"host": "store"}
    Verifier(KEYS).check("PUT", "/b/k", headers, b"signed body")
    with pytest.raises(Exception, match="payload hash"):
        Verifier(KEYS).check("PUT", "/b/k", headers, b"another body")


def test_an_old_signature_is_refused() -> None:
    request = signed_get(S3Gateway("http://store"), "k")
    headers = {name.lower(): value for name, value in request.headers.items()} | {"host": "store"}
    Verifier(KEYS).check("GET", f"/{BUCKET}/k", headers, b"")
    late = Verifier(KEYS, clock=lambda: 10**11)
    with pytest.raises(Exception, match="expired"):
        late.check("GET", f"/{BUCKET}/k", headers, b"")
