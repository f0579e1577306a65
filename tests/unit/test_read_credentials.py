"""Storage credentials never reach a principal that column or row rules restrict."""

from __future__ import annotations

import httpx

from proxy.reads.credentials import is_secret_property
from proxy.reads.disclosure import EVERY_SECRET, disclosed
from tests.support.errors import assert_error_model
from tests.support.upstream import Upstream, client_for, icegov_token

CUSTOMERS = "/v1/namespaces/demo/tables/customers"
ANALYST = "analyst:analyst-secret"


def test_secret_values_are_dropped_and_the_shape_is_kept() -> None:
    result = {"metadata-location": "m", "metadata": {},
              "storage-credentials": [{"prefix": "s3://b/t", "config": {
                  "s3.access-key-id": "AK", "client.region": "eu-west-1"}, "extra": "x"}, "junk"],
              "config": {"s3.access-key-id": "AK", "s3.secret-access-key": "SK",
                         "adls.sas-token.acct": "sas", "s3.endpoint": "http://minio",
                         "scan-planning-mode": "server"}}
    cleaned = disclosed(result, EVERY_SECRET)
    assert cleaned == {"metadata-location": "m", "metadata": {},
                       "storage-credentials": [{"prefix": "s3://b/t",
                                                "config": {"client.region": "eu-west-1"}}],
                       "config": {"s3.endpoint": "http://minio", "scan-planning-mode": "server"}}
    assert result["storage-credentials"][0]["config"]["s3.access-key-id"] == "AK"  # unchanged
    assert is_secret_property("gcs.oauth2.token") and not is_secret_property("s3.region")


def test_credentials_are_refused_to_a_restricted_principal_and_forwarded_to_others() -> None:
    upstream = Upstream(lambda _: httpx.Response(
        200, json={"storage-credentials": [{"prefix": "s3://b", "config": {}}]}))
    with client_for(upstream) as client:
        analyst = {"authorization": f"Bearer {icegov_token(client, ANALYST)}"}
        refused = client.get(f"{CUSTOMERS}/credentials", headers=analyst)
        admin = client.get(f"{CUSTOMERS}/credentials")
        unknown_plan = client.get(f"{CUSTOMERS}/credentials?planId=not-a-plan")
    assert_error_model(refused, 403)
    assert admin.status_code == 200 and admin.json()["storage-credentials"]
    assert_error_model(unknown_plan, 404, "NoSuchPlanIdException")
    assert [r.url.path for r in upstream.seen] == [f"/catalog{CUSTOMERS}/credentials"]
