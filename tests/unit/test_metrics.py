"""Prometheus metrics (proxy.ops.metrics): served at /metrics by a real app, bounded labels, and the
counters that move on requests, denials, tokens, commits and plans."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pyarrow as pa
from prometheus_client.parser import text_string_to_metric_families
from pyiceberg.catalog.rest import RestCatalog

from proxy.app import create_app
from proxy.ops.metrics import Metrics
from proxy.planning.plan_cache import PlanCacheStats
from tests.support.servers import serve
from tests.support.settings import ADMIN, settings_for_tests
from tests.support.upstream import Upstream, client_for, icegov_token

ANALYST = "analyst:analyst-secret"
SECRET_TABLE = "/v1/cat/namespaces/finance/tables/payroll_zebra"

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    """Every sample of an exposition, keyed by name and sorted labels."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def test_requests_denials_tokens_and_backing_calls_are_counted_without_names() -> None:
    upstream = Upstream(lambda _: httpx.Response(200, json={"metadata": {}}))
    with client_for(upstream) as client:
        token = icegov_token(client, ANALYST)
        assert client.get(SECRET_TABLE).status_code == 200  # the anonymous admin
        denied = client.delete(SECRET_TABLE, headers={"authorization": f"Bearer {token}"})
        assert denied.status_code in (403, 404)
        unrouted = client.get("/v1/not/an/endpoint")
        response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    for secret in ("payroll_zebra", "finance", "analyst", "tester", token, "not/an"):
        assert secret not in text
    found = samples(text)
    assert value(found, "icegov_requests_total", endpoint="load_table", status="200",
                 decision="allow") == 1
    decision = "deny" if denied.status_code == 403 else "hidden"
    assert value(found, "icegov_requests_total", endpoint="drop_table",
                 status=str(denied.status_code), decision=decision) == 1
    assert sum(v for (name, labels), v in found.items() if name == "icegov_requests_total"
               and ("endpoint", "unknown") in labels
               and ("status", str(unrouted.status_code)) in labels) == 1
    assert value(found, "icegov_tokens_issued_total", grant="client_credentials") == 1
    assert value(found, "icegov_request_duration_seconds_count", endpoint="load_table") == 1
    assert value(found, "icegov_backing_request_duration_seconds_count", method="GET") >= 1
    assert value(found, "icegov_backing_request_duration_seconds_count", method="DELETE") == 0
    assert value(found, "icegov_policy_generation") == 1
    assert value(found, "icegov_policy_reload_failures_total") == 0
    assert value(found, "icegov_audit_write_failures_total") == 0


def test_each_app_has_its_own_registry() -> None:
    with client_for(Upstream()) as first, client_for(Upstream()) as second:
        first.get(SECRET_TABLE)
        first_counts = samples(first.get("/metrics").text)
        second_counts = samples(second.get("/metrics").text)
    assert value(first_counts, "icegov_requests_total", endpoint="load_table", status="200",
                 decision="allow") == 1
    assert value(second_counts, "icegov_requests_total", endpoint="load_table", status="200",
                 decision="allow") == 0


def test_a_commit_and_plans_move_their_counters(tmp_path: Path) -> None:
    app = create_app(settings_for_tests(tmp_path))
    with serve(app) as url:
        catalog = RestCatalog("metrics", uri=url, credential=ADMIN)
        catalog.create_namespace("hush")
        table = catalog.create_table("hush.quiet_otter", pa.schema([("id", pa.int64())]))
        table.append(pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
        client_id, secret = ADMIN.split(":")
        token = httpx.post(f"{url}/v1/oauth/tokens", data={
            "grant_type": "client_credentials", "client_id": client_id,
            "client_secret": secret}).json()["access_token"]
        plan_url = f"{url}/v1/namespaces/hush/tables/quiet_otter/plan"
        with httpx.Client(headers={"authorization": f"Bearer {token}"}) as http:
            narrower = {"filter": {"type": "gt", "term": "id", "value": 1}}
            for body in ({}, narrower, {}):
                planned = http.post(plan_url, json=body)
                assert planned.status_code == 200, planned.text
            text = http.get(f"{url}/metrics").text
    assert "quiet_otter" not in text and "hush" not in text and "admin" not in text
    found = samples(text)
    assert value(found, "icegov_commits_total", classification="INSERT", outcome="landed") == 1
    assert value(found, "icegov_commit_rebases_total") == 0
    assert value(found, "icegov_requests_total", endpoint="commit_table", status="200",
                 decision="allow") == 1
    assert value(found, "icegov_plan_cache_lookups_total", result="miss") == 1
    assert value(found, "icegov_plan_cache_lookups_total", result="reuse") == 1
    # the repeated scan is answered from the answer cache, before the plan cache
    assert value(found, "icegov_plan_cache_lookups_total", result="hit") == 0
    assert value(found, "icegov_manifest_cache_lookups_total", result="miss") >= 1
    assert value(found, "icegov_backing_request_duration_seconds_count", method="POST") >= 1


@dataclass
class _Status:
    last_error_at: float | None = None


@dataclass
class _Policy:
    generation: int = 3
    status: _Status = field(default_factory=_Status)


@dataclass
class _Audit:
    failures: int = 0


@dataclass
class _Governed:
    bytes_read: int = 0
    bytes_written: int = 0


def test_scrape_time_sources_and_bounded_labels() -> None:
    metrics = Metrics(process=False)
    policy, audit = _Policy(), _Audit()
    metrics.watch(plan_cache=lambda: PlanCacheStats(4, 2, 1), policy=policy, audit=audit,
                  governed=_Governed(bytes_read=7, bytes_written=3))
    metrics.observe_commit("DELETE+INSERT", "conflict", rebases=2)
    metrics.observe_commit(None, "landed", rebases=0)
    metrics.observe_commit("users.secret_table", "surprise", rebases=0)
    metrics.observe_reconciled("absent")
    metrics.observe_token("urn:ietf:params:oauth:grant-type:token-exchange")
    metrics.observe_token("anything a client sent")
    policy.status = _Status(last_error_at=10.0)
    audit.failures = 2
    first = samples(metrics.exposition().decode())
    second = samples(metrics.exposition().decode())  # the same failure seen twice counts once
    policy.status = _Status(last_error_at=20.0)
    third = samples(metrics.exposition().decode())
    assert value(first, "icegov_commits_total", classification="DELETE+INSERT",
                 outcome="conflict") == 1
    assert value(first, "icegov_commits_total", classification="none", outcome="landed") == 1
    assert value(first, "icegov_commits_total", classification="other", outcome="other") == 1
    assert value(first, "icegov_commit_rebases_total") == 2
    assert value(first, "icegov_commit_reconciled_total", outcome="absent") == 1
    assert value(first, "icegov_tokens_issued_total", grant="token_exchange") == 1
    assert value(first, "icegov_tokens_issued_total", grant="other") == 1
    assert [value(first, "icegov_plan_cache_lookups_total", result=r)
            for r in ("hit", "miss", "reuse")] == [4, 2, 1]
    assert value(first, "icegov_policy_generation") == 3
    assert value(first, "icegov_policy_reload_failing") == 1
    assert value(first, "icegov_audit_write_failures_total") == 2
    assert value(first, "icegov_governed_build_bytes_total", io="read") == 7
    assert value(first, "icegov_governed_build_bytes_total", io="written") == 3
    assert [value(s, "icegov_policy_reload_failures_total") for s in (first, second, third)] == [
        1, 1, 2]
    assert "secret_table" not in metrics.exposition().decode()


def test_a_governed_build_counts_the_bytes_it_read_and_wrote(tmp_path: Path) -> None:
    schema = pa.schema([("order_id", pa.int64()), ("region", pa.string())])
    with serve(create_app(settings_for_tests(tmp_path))) as url:
        admin = RestCatalog("metrics", uri=url, credential=ADMIN)
        admin.create_namespace("demo")
        table = admin.create_table("demo.orders", schema)  # eu-analyst: region = 'eu'
        table.append(pa.table({"order_id": pa.array([1, 2, 3], pa.int64()),
                               "region": pa.array(["eu", "us", "eu"])}, schema=schema))
        before = samples(httpx.get(f"{url}/metrics").text)
        governed = RestCatalog("eu", uri=url, credential="eu-analyst:eu-analyst-secret")
        [served] = governed.load_table("demo.orders").scan().plan_files()
        after = samples(httpx.get(f"{url}/metrics").text)
    [base] = table.scan().plan_files()
    assert [value(before, "icegov_governed_build_bytes_total", io=io)
            for io in ("read", "written")] == [0, 0]
    assert value(after, "icegov_governed_build_bytes_total", io="read") == \
        base.file.file_size_in_bytes
    assert value(after, "icegov_governed_build_bytes_total", io="written") == \
        served.file.file_size_in_bytes
    assert served.file.record_count == 2
