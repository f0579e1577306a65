"""Governance over raw HTTP: tokens, lying and unverifiable commits, hiding, hot reload, audit."""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.expressions import EqualTo
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from tests.conftest import RunningProxy, proxy_for
from tests.support.commit_capture import wire_json
from tests.support.errors import assert_error_model
from tests.support.http import as_principal, audit_records, token, wait_for
from tests.support.settings import ADMIN, POLICIES, TEST_SIGNING_KEY

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False),
                NestedField(2, "region", StringType(), required=False))
SPEC = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "region"))


@pytest.fixture()
def table(proxy: RunningProxy) -> Table:
    """A demo table (created by admin) with one data file per region."""
    admin = RestCatalog("admin", uri=proxy.url, credential=ADMIN)
    admin.create_namespace_if_not_exists("demo")
    created = admin.create_table(f"demo.h{uuid.uuid4().hex[:8]}", SCHEMA, partition_spec=SPEC)
    for region in ("eu", "us"):
        created.append(pa.table({"id": pa.array([1, 2], pa.int64()), "region": [region] * 2}))
    return admin.load_table(created.name())


def commit_path(table: Table) -> str:
    namespace, name = table.name()
    return f"/v1/namespaces/{namespace}/tables/{name}"


def staged_delete_of_eu(proxy: RunningProxy, credential: str, table: Table) -> dict[str, Any]:
    """The REST body of a real whole-partition delete, staged (manifests written), not sent."""
    loaded = RestCatalog("stager", uri=proxy.url, credential=credential).load_table(table.name())
    tx = loaded.transaction()
    tx.delete(EqualTo("region", "eu"))
    return {"requirements": [wire_json(r) for r in tx._requirements],
            "updates": [wire_json(u) for u in tx._updates]}


def lie(body: dict[str, Any], operation: str) -> dict[str, Any]:
    for update in body["updates"]:
        if update["action"] == "add-snapshot":
            update["snapshot"]["summary"]["operation"] = operation
    return body


def rows(proxy: RunningProxy, table: Table) -> list[tuple[Any, ...]]:
    loaded = RestCatalog("reader", uri=proxy.url, credential=ADMIN).load_table(table.name())
    arrow = loaded.scan().to_arrow()
    return sorted(zip(arrow["id"].to_pylist(), arrow["region"].to_pylist(), strict=True))


def forge(**claims: Any) -> str:
    now = int(time.time())
    base = {"sub": "admin", "roles": ["admin"], "iss": "icegov", "aud": "icegov",
            "iat": now, "exp": now + 600}
    key = claims.pop("key", TEST_SIGNING_KEY)
    return jwt.encode({**base, **claims}, key, algorithm="HS256")


@pytest.mark.parametrize(("case", "header"), [
    ("no token", None),
    ("malformed", "Bearer not-a-jwt"),
    ("expired", f"Bearer {forge(exp=int(time.time()) - 3600, iat=int(time.time()) - 7200)}"),
    ("wrong signature", f"Bearer {forge(key='another-key-of-sufficient-length-for-hs256!!')}"),
    ("wrong audience", f"Bearer {forge(aud='someone-else')}"),
    ("wrong issuer", f"Bearer {forge(iss='someone-else')}"),
])
def test_bad_tokens_are_401(proxy: RunningProxy, case: str, header: str | None) -> None:
    headers = {"authorization": header} if header else {}
    response = httpx.get(f"{proxy.url}/v1/namespaces", headers=headers)
    assert_error_model(response, 401, "NotAuthorizedException")
    assert "not-a-jwt" not in response.text
    assert httpx.get(f"{proxy.url}/v1/namespaces", headers={
        "authorization": f"Bearer {forge()}"}).status_code == 200  # the same, well-formed: fine


def test_a_lying_delete_is_classified_delete_refused_and_audited(
        proxy: RunningProxy, table: Table) -> None:
    before = rows(proxy, table)
    body = lie(staged_delete_of_eu(proxy, "writer:writer-secret", table), "append")
    with as_principal(proxy.url, "writer:writer-secret") as writer:
        response = writer.post(commit_path(table), json=body)
    error = assert_error_model(response, 403, "ForbiddenException")
    assert "DELETE" in error["message"] and "writer" in error["message"]
    assert "p," not in error["message"]  # no policy internals
    assert rows(proxy, table) == before

    [record] = [r for r in audit_records(proxy.audit_log) if r["principal"] == "writer"
                and r["path"] == commit_path(table) and r["endpoint"] == "commit_table"]
    assert record["decision"] == "deny" and record["status"] == 403
    [evidence] = record["evidence"]
    assert evidence["classification"] == "DELETE" and evidence["operations"] == ["append"]
    assert evidence["mismatch"] and evidence["removed_data_files"] == 1
    assert {"action": "DELETE", "resource": f"icegov.{table.name()[0]}.{table.name()[1]}",
            "allowed": False, "rule": None} in record["rules"]


def test_the_same_lie_from_admin_lands_as_a_delete(proxy: RunningProxy, table: Table) -> None:
    body = lie(staged_delete_of_eu(proxy, ADMIN, table), "append")
    with as_principal(proxy.url, ADMIN) as admin:
        assert admin.post(commit_path(table), json=body).status_code == 200
    assert rows(proxy, table) == [(1, "us"), (2, "us")]
    [record] = [r for r in audit_records(proxy.audit_log)
                if r["principal"] == "admin" and r["path"] == commit_path(table)
                and r["endpoint"] == "commit_table" and r["decision"] == "allow"][-1:]
    assert record["evidence"][0]["mismatch"] and record["new_snapshot_ids"] == \
        record["evidence"][0]["snapshot_ids"]


def test_an_unverifiable_commit_is_400_and_nothing_lands(proxy: RunningProxy, table: Table) -> None:
    before = rows(proxy, table)
    body = staged_delete_of_eu(proxy, ADMIN, table)
    for update in body["updates"]:
        if update["action"] == "add-snapshot":
            update["snapshot"]["manifest-list"] += ".missing.avro"
    with as_principal(proxy.url, ADMIN) as admin:
        response = admin.post(commit_path(table), json=body)
    assert_error_model(response, 400, "BadRequestException")
    assert rows(proxy, table) == before


def test_an_unknown_update_needs_every_table_right(proxy: RunningProxy, table: Table) -> None:
    body = {"requirements": [], "updates": [{"action": "grant-me-everything"}]}
    admin = RestCatalog("state", uri=proxy.url, credential=ADMIN)
    before = admin.load_table(table.name()).metadata_location, rows(proxy, table)
    with as_principal(proxy.url, "writer:writer-secret") as writer:
        refused = writer.post(commit_path(table), json=body)
    assert_error_model(refused, 403, "ForbiddenException")
    assert (admin.load_table(table.name()).metadata_location, rows(proxy, table)) == before
    record = [r for r in audit_records(proxy.audit_log) if r["principal"] == "writer"
              and r["path"] == commit_path(table) and r["endpoint"] == "commit_table"][-1]
    assert record["evidence"][0]["unknown_actions"] == ["grant-me-everything"]
    assert {"ALTER", "DELETE", "DROP_TABLE", "INSERT", "SELECT"} <= set(record["actions"])


def test_no_rights_at_all_looks_like_absence(proxy: RunningProxy) -> None:
    admin = RestCatalog("admin", uri=proxy.url, credential=ADMIN)
    admin.create_namespace_if_not_exists("vault")
    name = f"vault.t{uuid.uuid4().hex[:6]}"
    admin.create_table(name, SCHEMA)
    with as_principal(proxy.url, "analyst:analyst-secret") as analyst:
        path = f"/v1/namespaces/vault/tables/{name.split('.')[1]}"
        assert_error_model(analyst.get(path), 404, "NoSuchTableException")
        assert_error_model(analyst.get("/v1/namespaces/vault"), 404, "NoSuchNamespaceException")
        assert ["vault"] not in analyst.get("/v1/namespaces").json()["namespaces"]
        assert_error_model(analyst.get("/v1/namespaces/demo/tables/absent-but-allowed"), 404,
                           "NoSuchTableException")  # from the backing: allowed, just absent
    hidden = [r for r in audit_records(proxy.audit_log)
              if r["principal"] == "analyst" and r["path"] == path]
    assert hidden and hidden[-1]["decision"] == "hidden" and hidden[-1]["status"] == 404


@pytest.fixture()
def reloading_proxy(tmp_path: Path) -> Iterator[RunningProxy]:
    """A proxy (embedded catalog) whose policy files live in tmp_path and reload quickly."""
    policies = tmp_path / "policies"
    shutil.copytree(POLICIES, policies)
    policy = {"model_path": policies / "model.conf", "policy_path": policies / "policy.csv",
              "reload_interval_seconds": 0.05}
    with proxy_for("embedded", tmp_path, policy=policy) as running:
        yield running


def replace_file(path: Path, text: str) -> None:
    """Write a new version the way an editor or deploy tool should: write aside, then rename."""
    aside = path.with_suffix(".tmp")
    aside.write_text(text)
    aside.replace(path)


def policy_generation(url: str) -> tuple[int, bool]:
    ready = httpx.get(f"{url}/readyz").json()
    return int(ready["generation"]), bool(ready["policy_error"])


def test_policy_hot_reload_and_broken_edit(reloading_proxy: RunningProxy) -> None:
    url, policy_csv = reloading_proxy.url, reloading_proxy.workdir / "policies" / "policy.csv"
    analyst = token(url, "analyst:analyst-secret")
    listing = lambda: httpx.get(f"{url}/v1/namespaces",  # noqa: E731
                                headers={"authorization": f"Bearer {analyst}"})
    assert listing().status_code == 200
    generation, _ = policy_generation(url)

    original = policy_csv.read_text()
    replace_file(policy_csv, original + "p, analyst, icegov, LIST, deny\n")
    wait_for(lambda: policy_generation(url)[0] > generation, what="the policy reload")
    assert_error_model(listing(), 403, "ForbiddenException")

    replace_file(policy_csv, original + "p, analyst, icegov, FROBNICATE, allow\n")
    wait_for(lambda: policy_generation(url)[1], what="the broken edit to be reported")
    assert_error_model(listing(), 403, "ForbiddenException")  # the last good policy still holds

    replace_file(policy_csv, original)
    wait_for(lambda: not policy_generation(url)[1], what="the fixed policy")
    assert listing().status_code == 200
    assert json.loads(listing().text)["namespaces"] == []
